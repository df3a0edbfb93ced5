"""What a checkpoint's quantization_config tells planner beyond its weights' format: an FP8 KV cache it declares, which
vLLM's and SGLang's `--kv-cache-dtype auto` store the cache in (planner.model.precision.declared_fp8_kv_cache), so
planner sizes and times it so; and ModelOpt's per-layer MIXED_PRECISION, which it names instead of guessing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import CONFIGS

from planner.api import engine_estimate
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings
from planner.estimator.engines.registry import resolve_engine_kv_dtype
from planner.model.architecture import architecture_from_config, load_config_file
from planner.model.precision import resolve_precision

# ModelOpt NVFP4 checkpoints with their kv_cache_scheme {"dynamic": false, "num_bits": 8, "type": "float"}
# (tests/data/README.md): a hybrid (Gated DeltaNet states beside the attention cache) and an attention-only one
NVFP4 = "qwen3.5-397b-a17b-nvfp4"
ATTENTION_ONLY_NVFP4 = "gemma-4-31b-it-nvfp4"


def _arch(name=NVFP4, **quantization):
    arch = architecture_from_config(load_config_file(CONFIGS / name), name)
    return replace(arch, quantization_config=quantization) if quantization else arch


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_modelopt_fp8_kv_scheme_is_the_cache_auto_stores(catalog, engine):
    arch = _arch()
    precision = resolve_precision(catalog, arch, "auto")
    assert precision.name == "nvfp4"
    assert resolve_engine_kv_dtype(engine, arch, precision, "auto") == "fp8"
    assert resolve_engine_kv_dtype(engine, arch, precision, None) == "fp8"
    assert resolve_engine_kv_dtype(engine, arch, precision, "bf16") == "bf16"  # a stated dtype wins
    assert resolve_engine_kv_dtype("simple", arch, precision, "auto") == "bf16"  # the margin: the compute dtype


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_engines_pool_holds_the_fp8_cache_auto_asks_for(engine):
    def pool(kv_dtype):
        estimate = engine_estimate(str(CONFIGS / ATTENTION_ONLY_NVFP4), EngineSettings(engine), context=32768,
                                   gpu="b200", kv_dtype=kv_dtype)
        return estimate.memory.kv_dtype, estimate.engine.kv_cache_capacity_tokens

    auto_dtype, auto_tokens = pool("auto")
    assert auto_dtype == "fp8"
    assert auto_tokens == pool("fp8")[1]
    bf16_tokens = pool("bf16")[1]
    assert 1.9 < auto_tokens / bf16_tokens < 2.1  # a byte an element instead of two


@pytest.mark.parametrize("quantization, vllm, sglang", [
    # ModelOpt's older spelling: no scheme, kv_cache_quant_algo FP8
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}, "fp8", "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": None}, "bf16", "bf16"),
    # dynamic scales or 4-bit elements: not the FP8 cache vLLM takes
    ({"quant_method": "modelopt", "kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"}}, "bf16", "bf16"),
    ({"quant_method": "modelopt", "kv_cache_scheme": {"dynamic": False, "num_bits": 4, "type": "float"}}, "bf16", "bf16"),
    # llm-compressor's scheme: vLLM takes any as FP8, SGLang only from v0.5.19 (planner keeps the compute dtype)
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "float"}}, "fp8", "bf16"),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": None}, "bf16", "bf16"),
    # malformed values are not a declaration
    ({"quant_method": "modelopt", "kv_cache_scheme": "FP8"}, "bf16", "bf16"),
    ({"quant_method": "modelopt", "kv_cache_scheme": [8, "float"]}, "bf16", "bf16"),
    ({"quant_method": 8, "kv_cache_quant_algo": "FP8"}, "bf16", "bf16"),
    ({"quant_method": "modelopt", "kv_cache_quant_algo": {"FP8": True}}, "bf16", "bf16"),
])
def test_which_declarations_each_engine_takes(catalog, quantization, vllm, sglang):
    arch = _arch(**quantization)
    bf16 = catalog.precisions.get("bf16")
    assert resolve_engine_kv_dtype("vllm", arch, bf16, "auto") == vllm
    assert resolve_engine_kv_dtype("sglang", arch, bf16, "auto") == sglang


def test_a_modelopt_mixed_precision_checkpoint_is_named_not_guessed(catalog):
    arch = _arch(quant_method="modelopt", quant_algo="MIXED_PRECISION",
                 quantized_layers={"model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16}})
    with pytest.raises(PlannerInputError, match="MIXED_PRECISION .* pass --precision"):
        resolve_precision(catalog, arch, "auto")
    assert resolve_precision(catalog, arch, "nvfp4").name == "nvfp4"  # the format the user picks
