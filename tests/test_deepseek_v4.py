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


def _pro_timer(catalog, kv_dtype="fp8", **kwargs):
    from planner.estimator.performance import replica_timer

    v4 = _arch("deepseek-v4-pro")
    return v4, replica_timer(v4, "auto", kv_dtype, catalog.gpus.get("mi355x"), 8, 1, catalog, "sglang", **kwargs)


def _layers_by_ratio(arch):
    ratios = [layer.attention.compress_ratio for layer in arch.layers]
    return ratios.count(4), ratios.count(128)


@pytest.mark.parametrize("context", [1000, 4000, 4100, 100_000, 1_000_000])
def test_a_decode_step_reads_the_compressed_entries_and_the_indexer_keys_past_top_k(catalog, context):
    """Per request on one rank, in FP8: every layer's 128-token window of its 512-value head; an HCA layer (ratio 128)
    every compressed entry; a CSA layer (ratio 4) the index_topk (1,024) entries its indexer picks and, once it holds
    more than 1,024 entries, the indexer's pooled key of every entry (128 fp8 values + one fp32 scale)."""
    from planner.estimator.performance import Step

    arch, timer = _pro_timer(catalog)
    csa, hca = _layers_by_ratio(arch)
    assert (csa, hca) == (30, 31) and len(arch.layers) == 61
    window = 61 * 512 * min(context, 128)
    entries = hca * 512 // 128 * context + csa * 512 // 4 * min(context, 1024 * 4)
    keys = csa * (128 + 4) // 4 * context if context // 4 > 1024 else 0
    _, forward, _ = timer.step(Step(1, context, 0, 0, 0))
    assert forward.kv_bytes == window + entries + keys


def test_the_attention_sums_the_values_of_the_shared_head(catalog):
    """DeepSeek-V4's one head is key and value: a window position costs QK and PV over its 512 values."""
    from planner.estimator.performance import _attention_flops_per_position

    attention = _arch("deepseek-v4-pro").layers[0].attention
    assert (attention.k_head_dim, attention.v_head_dim, attention.values_are_keys) == (512, 0, True)
    assert _attention_flops_per_position(attention, 16) == 2 * 16 * (512 + 512)


def test_a_prompt_scores_the_indexer_only_past_top_k_and_attends_to_at_most_top_k_entries(catalog):
    """A prefill pass's attention FLOPs on one rank (16 heads at TP 8), causally: the window, the HCA entries, the CSA
    layers' entries up to index_topk, and the indexer's 64 replicated heads x 128 values per (query, earlier entry)
    pair, where the sequence holds more than 1,024 entries after the pass."""
    from dataclasses import replace

    from planner.estimator.performance import Step, load_performance_catalog

    arch, timer = _pro_timer(catalog)
    csa, hca = _layers_by_ratio(arch)
    cost = timer._costs[0]
    per_entry = 2 * 16 * (512 + 512)
    # FP8 logits at MI355X's FP8 peak times CDNA4's attention efficiency (no indexer table there: the FP8-logits
    # amendment)
    cdna4 = load_performance_catalog().generation("cdna4")
    assert "sglang" not in cdna4.engines or cdna4.engines["sglang"].indexer is None
    fp8_logits_rate = catalog.gpus.get("mi355x").dense_tflops["fp8"] * 1e12 * cdna4.attention_compute_efficiency
    for prompt in (4096, 8192):
        positions = prompt * (prompt + 1) / 2
        _, forward, _ = timer.forward(Step(0, prompt, prompt, positions, 1))
        _, no_indexer, _ = replace(timer, indexers=()).forward(Step(0, prompt, prompt, positions, 1))
        logits = csa * 2 * 64 * 128 / 4 * positions if prompt // 4 > 1024 else 0.0
        assert forward.attention_s - no_indexer.attention_s == pytest.approx(logits / fp8_logits_rate)
    # per attended token, by how many tokens a layer attends to at most: the windows, then the compressed entries in
    # token units (an entry's FLOPs over the 4 / 128 tokens it pools, the CSA layers' capped at 1,024 entries)
    by_window = {window: flops for flops, window in cost.attention_by_window}
    assert by_window == pytest.approx({128: 61 * per_entry, 1024 * 4: csa * per_entry / 4, None: hca * per_entry / 128})


def test_the_recurrent_state_of_a_deepseek_v4_request_is_nothing(catalog):
    """DeepSeek-V4 keeps no recurrent state: what one token holds in memory.py at the stored dtype is that token's
    window entry (its compressed entries begin at 4 and 128 tokens)."""
    for kv in ("auto", "fp8"):
        _, timer = _pro_timer(catalog, kv)
        assert timer.kv_state == (0,)
