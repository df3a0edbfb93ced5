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
