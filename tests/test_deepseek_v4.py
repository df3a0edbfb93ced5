"""DeepSeek-V4 weights as its checkpoints store them: fp8 layers, fp4 routed experts, some tensors in bf16/fp32/int64.

The published figures are each repository's model.safetensors.index.json metadata.total_size (every tensor's
bytes, MTP layer included):
  deepseek-ai/DeepSeek-V4-Flash @ 60d8d70770c6776ff598c94bb586a859a38244f1: 159,609,485,896
  deepseek-ai/DeepSeek-V4-Pro   @ b5968e9190ef611bbf34a7229255be88a0e937c1: 864,704,792,696
The Pro figure is also the byte sum of the Hub's per-dtype element counts for that revision (I8 786,381,668,352
+ F8_E8M0 49,150,268,416 + F8_E4M3 23,169,335,296 + 2 x BF16 2,816,899,328 + 4 x F32 87,776,414 + 8 x I64
2,327,040), as recorded in joshuahickscorp/hawking HAWKING_LADDER_V3.json.
"""

from __future__ import annotations

import pytest

from planner.estimator.memory import Request, estimate_memory
from planner.model.architecture import architecture_from_config, load_config_file
from planner.model.precision import resolve_precision, weights_bytes

from conftest import CONFIGS

INDEX_TOTAL_SIZE = {"deepseek-v4-flash": 159_609_485_896, "deepseek-v4-pro": 864_704_792_696}
HUB_PRO_BYTES_BY_DTYPE = (786_381_668_352 + 49_150_268_416 + 23_169_335_296 + 2 * 2_816_899_328
                          + 4 * 87_776_414 + 8 * 2_327_040)


def _arch(name: str, **overrides):
    config = load_config_file(CONFIGS / name)
    return architecture_from_config({**config, **overrides}, name)


def _loaded(arch):
    return [t for layer in arch.layers for t in layer.tensors] + list(arch.embedding) + list(arch.head)


def test_the_pro_index_total_is_the_hubs_per_dtype_bytes():
    assert HUB_PRO_BYTES_BY_DTYPE == INDEX_TOTAL_SIZE["deepseek-v4-pro"]


@pytest.mark.parametrize("name", sorted(INDEX_TOTAL_SIZE))
def test_auto_precision_sizes_every_tensor_as_the_checkpoint_stores_it(catalog, name):
    arch = _arch(name)
    precision = resolve_precision(catalog, arch, None)
    assert precision.name == "fp8-block-mxfp4-experts"
    stored = weights_bytes(_loaded(arch), precision) + weights_bytes(arch.unloaded, precision)
    assert stored == INDEX_TOTAL_SIZE[name]


def test_flash_serves_its_checkpoint_less_the_mtp_layer_computed_by_hand(catalog):
    """The MTP layer (compress ratio 0: window only, no compressor) of DeepSeek-V4-Flash, tensor by tensor as
    inference/model.py MTPBlock stores it: fp8 [out, in] + one e8m0 byte per 128x128 block; fp4 experts half a
    byte a value + one e8m0 byte per 32; bf16 norms and router; fp32 sinks, router bias, hyper-connections."""
    mtp = (64 * 4  # attn_sink fp32 [heads]
           + 1024 * 4096 + 8 * 32  # wq_a fp8 [q_lora_rank, hidden] + scales
           + 1024 * 2  # q_norm
           + 32768 * 1024 + 256 * 8  # wq_b [heads * head_dim, q_lora_rank]
           + 512 * 4096 + 4 * 32  # wkv [head_dim, hidden]
           + 512 * 2  # kv_norm
           + 8192 * 4096 + 64 * 32  # wo_a [o_groups * o_lora_rank, heads * head_dim / o_groups]
           + 4096 * 8192 + 32 * 64  # wo_b [hidden, o_groups * o_lora_rank]
           + 256 * 4096 * 2  # router weight bf16 [experts, hidden]
           + 256 * 4  # router bias fp32
           + 256 * 3 * 2048 * 4096 // 2 + 256 * 3 * 2048 * 4096 // 32  # routed experts fp4 + scales
           + 3 * (2048 * 4096 + 16 * 32)  # shared expert w1, w2, w3 fp8
           + 2 * 4096 * 2  # attn_norm, ffn_norm
           + 2 * (24 * 16384 * 4 + 24 * 4 + 3 * 4)  # hc attn / ffn: fn [(2+4)*4, 4 * hidden], base, scale fp32
           + 2 * (4096 * 4096 + 32 * 32)  # e_proj, h_proj fp8
           + 3 * 4096 * 2  # enorm, hnorm, norm
           + 4 * 16384 * 4 + 4 * 4 + 1 * 4)  # hc_head fn, base, scale fp32
    assert mtp == 3_593_787_756
    arch = _arch("deepseek-v4-flash")
    assert weights_bytes(arch.unloaded, resolve_precision(catalog, arch, None)) == mtp
    estimate = estimate_memory(arch, Request(context=8192), catalog)
    assert estimate.weights_bytes == INDEX_TOTAL_SIZE["deepseek-v4-flash"] - mtp == 156_015_698_140


def test_pro_serves_its_checkpoint_less_the_mtp_layer(catalog):
    arch = _arch("deepseek-v4-pro")
    estimate = estimate_memory(arch, Request(context=8192), catalog)
    mtp = weights_bytes(arch.unloaded, resolve_precision(catalog, arch, None))
    assert estimate.weights_bytes == INDEX_TOTAL_SIZE["deepseek-v4-pro"] - mtp == 850_748_205_004


def test_tensor_parallel_ranks_hold_the_whole_model_once_or_more(catalog):
    arch = _arch("deepseek-v4-flash")
    whole = estimate_memory(arch, Request(context=8192), catalog).weights_bytes
    split = estimate_memory(arch, Request(context=8192, tp=8), catalog).weights_bytes  # summed over the 8 ranks
    # replicated tensors (the compressors, the router, the hash table) sit on every rank: at least one whole copy
    assert whole < split < whole * 1.2


def test_fp8_expert_checkpoints_keep_the_fp8_block_layout(catalog):
    """DeepSeek-V4-Flash-Base ships expert_dtype fp8: experts in fp8 with the other layers (vLLM's loader keys its
    expert kernels off expert_dtype), so auto reads its quantization_config like any fp8 block checkpoint."""
    arch = _arch("deepseek-v4-flash", expert_dtype="fp8")
    assert resolve_precision(catalog, arch, None).name == "fp8-block"
    bf16 = _arch("deepseek-v4-flash", quantization_config=None)
    assert resolve_precision(catalog, bf16, None).name == "bf16"


def test_fp8_block_on_request_is_the_old_overstatement(catalog):
    arch = _arch("deepseek-v4-flash")
    mixed = estimate_memory(arch, Request(context=8192), catalog).weights_bytes
    fp8 = estimate_memory(arch, Request(context=8192, precision="fp8-block"), catalog).weights_bytes
    # the experts at 8 bits + fp32 block scales instead of 4.25 bits: the ~1.8x the old auto reported
    assert 1.8 < fp8 / mixed < 1.9


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_auto_kv_is_the_fp8_cache_the_engine_stores_deepseek_v4_in(catalog, engine):
    """SGLang turns `auto` into fp8_e4m3 for DeepSeek-V4 and vLLM's FlashMLA path asserts an FP8 cache: `auto` is FP8
    on both, while a stated dtype stays as stated, the planning margin and other models keep the compute dtype."""
    from planner.estimator.engines.registry import resolve_engine_kv_dtype

    v4 = architecture_from_config(catalog.models.get("deepseek-v4-flash").config, "deepseek-v4-flash")
    llama = architecture_from_config(catalog.models.get("llama-3.1-8b").config, "llama-3.1-8b")
    v4_precision, bf16 = resolve_precision(catalog, v4, "auto"), catalog.precisions.get("bf16")
    assert resolve_engine_kv_dtype(engine, v4, v4_precision, "auto") == "fp8"
    assert resolve_engine_kv_dtype(engine, v4, v4_precision, None) == "fp8"
    assert resolve_engine_kv_dtype(engine, v4, v4_precision, "bf16") == "bf16"
    assert resolve_engine_kv_dtype("simple", v4, v4_precision, "auto") == "bf16"
    assert resolve_engine_kv_dtype(engine, llama, bf16, "auto") == "bf16"


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_deepseek_v4_scenario_with_the_default_kv_dtypes_plans_its_fp8_cache(engine):
    """`search.kv_dtypes` left at its default ([auto]) searches the cache the engine stores: the plan says fp8, not
    the refusal of a bf16 cache the engine never runs."""
    from planner.api import solve

    result = solve({"model": "deepseek-v4-flash", "workload": {"context": 8192, "concurrency": 8},
                    "search": {"gpus": ["b200"]}, "engine": {"name": engine}})
    assert result.best is not None
    assert result.best.configuration.kv_dtype == "fp8"


def test_the_timer_reads_deepseek_v4s_auto_cache_at_the_fp8_rates(catalog):
    from planner.estimator.performance import replica_timer

    v4 = architecture_from_config(catalog.models.get("deepseek-v4-flash").config, "deepseek-v4-flash")
    card = catalog.gpus.get("b200")
    auto, fp8, bf16 = (replica_timer(v4, "auto", kv, card, 4, 1, catalog, "sglang").hw for kv in ("auto", "fp8", "bf16"))
    assert auto.latent_bytes_per_s == fp8.latent_bytes_per_s != bf16.latent_bytes_per_s
