"""The shipped catalogs: sizes, sources, and every model's count reproduced tensor by tensor."""

import pytest

from planner.model.architecture import architecture_from_config
from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.model.precision import resolve_precision

CATALOG = load_catalog()

# Published totals that are not pure parameter counts, with the reason and the exact difference.
NOT_PARAMETERS = {
    # Meta's Llama 2 checkpoints also store rotary_emb.inv_freq buffers: head_dim/2 = 64 values per layer
    "llama-2-7b": 64 * 32,
    "llama-2-13b": 64 * 40,
    "llama-2-70b": 64 * 80,
    # HF's total for the FP8 checkpoint counts the weight_scale_inv tensors (one fp32 per 128x128 block)
    "deepseek-v3": 41_540_496,
}


def test_catalog_sizes():
    assert len(CATALOG.gpus) >= 25
    assert len(CATALOG.models) >= 30
    assert {"mi300x", "mi325x"} <= {g.name for g in CATALOG.gpus}


@pytest.mark.parametrize("model", list(CATALOG.models), ids=lambda m: m.name)
def test_every_catalog_model_is_counted_exactly(model):
    arch = architecture_from_config(model.config, model.name)
    assert arch.checkpoint_params + NOT_PARAMETERS.get(model.name, 0) == model.params
    assert resolve_precision(CATALOG, arch, "auto").name  # every shipped config resolves a precision


@pytest.mark.parametrize("gpu", list(CATALOG.gpus), ids=lambda g: g.name)
def test_gpu_memory_is_what_the_runtime_reports(gpu):
    assert gpu.source and gpu.as_of
    marketed_gb = float("".join(ch for ch in gpu.memory_marketed.split("GB")[0] if ch.isdigit() or ch == ".") or 0)
    if marketed_gb:
        # runtime-visible memory never exceeds the marketed figure read as GiB
        assert gpu.memory_bytes <= marketed_gb * 2**30 * 1.001


def test_lookup_by_alias_and_hf_id_is_case_insensitive():
    assert CATALOG.models.get("Meta-Llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    assert CATALOG.gpus.get("RTX-4090").name == "rtx-4090"


def test_typo_suggests_the_closest_names():
    with pytest.raises(PlannerInputError, match="did you mean"):
        CATALOG.models.get("lama-3.1-8b")


def test_multimodal_catalog_models_report_the_vision_share():
    for name in ("gemma-3-27b", "mistral-small-3.1-24b", "llama-4-scout"):
        arch = architecture_from_config(CATALOG.models.get(name).config, name)
        assert 0 < arch.multimodal_params < arch.language_params


# --- current GPUs: the Blackwell racks, Blackwell Ultra, CDNA4 and the China-market Hopper ---------------

def test_current_datacenter_gpus_are_in_the_catalog():
    names = {g.name for g in CATALOG.gpus}
    assert {"b200", "b300", "gb200", "gb300", "mi325x", "mi355x", "h20", "rtx-pro-6000"} <= names
    assert CATALOG.gpus.get("GB200-NVL72").name == "gb200"
    assert CATALOG.gpus.get("gb300-nvl72").name == "gb300"


@pytest.mark.parametrize("name, mib, watts", [("gb200", 189471, 1200), ("gb300", 284208, 1400), ("h20", 97871, 500),
                                              ("l20", 46068, 350)])
def test_new_gpus_report_the_nvidia_smi_total(name, mib, watts):
    gpu = CATALOG.gpus.get(name)
    assert (gpu.memory_mib, gpu.tdp_watts) == (mib, watts)


def test_nvl72_racks_are_one_72_gpu_nvlink_domain():
    for name in ("gb200", "gb300"):
        gpu = CATALOG.gpus.get(name)
        assert gpu.gpus_per_node == 72 and gpu.interconnect.kind == "nvlink"
        assert {"fp4", "nvfp4"} <= set(gpu.native_formats)
        assert gpu.dense_tflops["fp4"] >= 2 * gpu.dense_tflops["fp8"]  # FP4 at least doubles FP8 on Blackwell


def test_gb200_rents_by_the_nvl72_slice():
    rows = [offer for offer in CATALOG.offers if offer.gpu == "gb200"]
    assert rows and all(row.as_of and row.source for row in rows)
    assert {row.gpus for row in rows} == {4}


# --- a damaged catalog: one line naming the file, the row and the key ------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"memory_mib": 0}, "gpus[l4].memory_mib: Input should be greater than 0"),
    ({"memory_mib": "80GB"}, "gpus[l4].memory_mib: Input should be a valid integer"),
    ({"memory_mib": True}, "gpus[l4].memory_mib: Input should be a valid integer"),
    ({"vendor": "acme"}, "gpus[l4].vendor: Input should be 'nvidia', 'amd', 'intel' or 'google'"),
    ({"interconnect": {"kind": "nvlink", "name": "x", "bandwidth_gbps": -1}},
     "gpus[l4].interconnect.bandwidth_gbps: Input should be greater than 0"),
    ({"dense_tflops": {"bf16": "fast"}}, "gpus[l4].dense_tflops.bf16: Input should be a valid number"),
    ({"native_formats": "fp8"}, "gpus[l4].native_formats: Input should be a valid tuple"),
    ({"colour": "green"}, "gpus[l4].colour: Extra inputs are not permitted"),
    ({"name": "L4"}, "gpus[L4].name: Value error, catalog names are lowercase slugs without spaces"),
])
def test_a_bad_gpu_row_is_one_line_naming_the_key(tmp_path, change, message):
    import shutil

    import yaml

    from planner.catalog.load import catalog_dir

    shutil.copytree(catalog_dir(), tmp_path / "c", ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    path = tmp_path / "c" / "gpus.yaml"
    data = yaml.safe_load(path.read_text())
    row = next(g for g in data["gpus"] if g["name"] == "l4")
    row.update(change)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlannerInputError) as caught:
        load_catalog(str(tmp_path / "c"))
    assert str(caught.value) == f"catalog gpus.yaml: {message}"


def test_a_missing_key_is_named(tmp_path):
    import shutil

    import yaml

    from planner.catalog.load import catalog_dir

    shutil.copytree(catalog_dir(), tmp_path / "c", ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    path = tmp_path / "c" / "precisions.yaml"
    data = yaml.safe_load(path.read_text())
    del data["precisions"][0]["quality"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlannerInputError, match=r"^catalog precisions.yaml: precisions\[\w[^\]]*\].quality: Field required$"):
        load_catalog(str(tmp_path / "c"))


def test_estimate_loads_neither_prices_nor_pydantic():
    import subprocess
    import sys

    code = ("import sys; from planner import api; api.estimate('llama-3.1-8b', gpu='h100'); "
            "print(sorted(m for m in ('pydantic', 'planner.catalog.prices', 'yaml') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() in ("[]", "['yaml']")  # yaml only while the catalog parse cache is cold
