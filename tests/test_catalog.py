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
