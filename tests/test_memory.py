"""The estimator: the seed's worked examples, exact layouts, TP/PP splits, KV kinds and warnings."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.model.architecture import architecture_from_config, architecture_from_size, load_config_file
from planner.errors import PlannerInputError
from planner.estimator.memory import GpuTarget, Request, estimate_memory, pipeline_stages

from conftest import CONFIGS

GB = 10**9
SEED_8B = dict(params=8 * 10**9, layers=32, kv_heads=8, head_dim=128)


def seed(params=8 * 10**9, precision="fp16", context=8192, gpu_gb=None, catalog=None):
    arch = architecture_from_size(params, 32, 8, 128)
    gpu = GpuTarget(f"{gpu_gb}GB card", gpu_gb * GB) if gpu_gb else None
    return estimate_memory(arch, Request(context=context, precision=precision), catalog, gpu)


@pytest.fixture(scope="module")
def llama8b():
    return architecture_from_config(load_config_file(CONFIGS / "llama-3.1-8b-instruct"), "llama-3.1-8b")


@pytest.fixture(scope="module")
def llama70b():
    return architecture_from_config(dict(model_type="llama", hidden_size=8192, intermediate_size=28672,
                                         num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                                         vocab_size=128256, tie_word_embeddings=False, torch_dtype="bfloat16"),
                                    "llama-3.1-70b")


# --- the seed's worked examples (decimal GB) ------------------------------------------------

def test_seed_8b_fp16_8k(catalog):
    est = seed(gpu_gb=24, catalog=catalog)
    assert est.weights_bytes == 16 * GB
    assert est.kv_bytes_per_token == 131_072
    assert est.kv_cache_bytes == 1_073_741_824
    assert round(est.total_bytes / GB, 1) == 18.8
    assert est.gpu.fits


def test_seed_8b_int4(catalog):
    est = seed(precision="int4", gpu_gb=8, catalog=catalog)
    assert est.weights_bytes == 4 * GB
    assert round(est.total_bytes / GB, 1) == 5.6
    assert est.gpu.fits


def test_seed_70b_int4_with_the_8b_kv_shape(catalog):
    est = seed(params=70 * 10**9, precision="int4", gpu_gb=48, catalog=catalog)
    assert round(est.total_bytes / GB, 1) == 39.7
    assert est.gpu.fits


def test_real_llama_70b_int4_kv_is_2_68_gb(catalog, llama70b):
    est = estimate_memory(llama70b, Request(context=8192, precision="bf16"), catalog)
    assert round(est.kv_cache_bytes / GB, 2) == 2.68  # 80 layers, as the seed's note says


# --- exact layouts --------------------------------------------------------------------------

LLAMA8B_LINEAR = 32 * (4096 * 4096 * 2 + 1024 * 4096 * 2 + 14336 * 4096 * 3)  # q,o + k,v + gate,up,down
LLAMA8B_REST = 8_030_261_248 - LLAMA8B_LINEAR  # embeddings, lm_head, norms


def test_bf16_is_two_bytes_per_parameter(catalog, llama8b):
    est = estimate_memory(llama8b, Request(context=8192, precision="bf16"), catalog)
    assert est.weights_bytes == 2 * 8_030_261_248


def test_fp8_keeps_embeddings_lm_head_and_norms_in_16_bit(catalog, llama8b):
    est = estimate_memory(llama8b, Request(context=8192, precision="fp8"), catalog)
    channel_scales = 32 * (4096 + 1024 + 1024 + 4096 + 14336 * 2 + 4096)  # one fp32 per output row
    assert est.weights_bytes == LLAMA8B_LINEAR + 4 * channel_scales + 2 * LLAMA8B_REST


def test_int4_adds_group_128_scales_and_zeros(catalog, llama8b):
    est = estimate_memory(llama8b, Request(context=8192, precision="int4"), catalog)
    groups = LLAMA8B_LINEAR // 128
    assert est.weights_bytes == LLAMA8B_LINEAR // 2 + groups * (16 + 4) // 8 + 2 * LLAMA8B_REST


def test_mxfp4_touches_only_experts_and_refuses_dense_models(catalog, llama8b):
    with pytest.raises(PlannerInputError, match="MoE experts only"):
        estimate_memory(llama8b, Request(context=8192, precision="mxfp4"), catalog)


def test_awq_checkpoint_is_read_from_quantization_config(catalog):
    arch = architecture_from_config(load_config_file(CONFIGS / "qwen2.5-7b-instruct-awq"), "qwen-awq")
    est = estimate_memory(arch, Request(context=4096), catalog)
    assert est.precision == "awq" and est.kv_dtype == "fp16"


def test_auto_precision_reads_torch_dtype(catalog, llama8b):
    est = estimate_memory(llama8b, Request(context=8192), catalog)
    assert est.precision == "bf16" and est.kv_dtype == "bf16"


def test_kv_dtype_is_independent_of_weights(catalog, llama8b):
    bf16 = estimate_memory(llama8b, Request(context=8192, precision="int4"), catalog)
    fp8 = estimate_memory(llama8b, Request(context=8192, precision="int4", kv_dtype="fp8"), catalog)
    assert bf16.weights_bytes == fp8.weights_bytes
    assert fp8.kv_cache_bytes * 2 == bf16.kv_cache_bytes


# --- KV per layer kind ----------------------------------------------------------------------

def test_sliding_layers_hold_at_most_their_window(catalog):
    arch = architecture_from_config(load_config_file(CONFIGS / "gemma-3-27b-it"), "gemma-3-27b")
    short = estimate_memory(arch, Request(context=1024), catalog)
    long = estimate_memory(arch, Request(context=32768), catalog)
    full_per_token = 10 * 16 * 256 * 2  # 10 global layers x 16 KV heads x (k+v 128+128) x bf16
    sliding_per_token = 52 * 16 * 256 * 2
    assert long.kv_bytes_per_token == full_per_token
    assert long.kv_sliding_bytes_per_token == sliding_per_token
    assert short.kv_cache_bytes == (full_per_token + sliding_per_token) * 1024
    assert long.kv_cache_bytes == full_per_token * 32768 + sliding_per_token * 1024


def test_mla_caches_the_latent_without_factor_two(catalog):
    arch = architecture_from_config(load_config_file(CONFIGS / "deepseek-v2-lite-chat"), "dsv2-lite")
    est = estimate_memory(arch, Request(context=1000), catalog)
    assert est.kv_bytes_per_token == 27 * (512 + 64) * 2
    tp2 = estimate_memory(arch, Request(context=1000, tp=2), catalog)
    assert all(r.kv_bytes_per_token == est.kv_bytes_per_token for r in tp2.per_gpu)  # whole on every rank


# --- tensor and pipeline parallelism --------------------------------------------------------

def test_tp_splits_kv_heads_then_replicates_them(catalog, llama70b):
    tp8 = estimate_memory(llama70b, Request(context=8192, tp=8, precision="bf16"), catalog)
    tp16 = estimate_memory(llama70b, Request(context=8192, tp=16, precision="bf16"), catalog)
    assert [r.kv_bytes_per_token for r in tp8.per_gpu] == [80 * 1 * 256 * 2] * 8
    assert [r.kv_bytes_per_token for r in tp16.per_gpu] == [80 * 1 * 256 * 2] * 16  # 8 heads, 16 ranks
    assert tp16.kv_cache_bytes == 2 * tp8.kv_cache_bytes


def test_tp_must_divide_attention_heads(catalog, llama70b):
    with pytest.raises(PlannerInputError, match="does not divide the model's 64 attention heads"):
        estimate_memory(llama70b, Request(context=8192, tp=3), catalog)


def test_pp_places_embeddings_first_and_lm_head_last(catalog, llama70b):
    one = estimate_memory(llama70b, Request(context=8192, precision="bf16"), catalog)
    pp = estimate_memory(llama70b, Request(context=8192, pp=4, precision="bf16"), catalog)
    assert sum(r.weights_bytes for r in pp.per_gpu) == one.weights_bytes  # untied: nothing duplicated
    assert [(r.first_layer, r.last_layer) for r in pp.per_gpu] == [(0, 20), (20, 40), (40, 60), (60, 80)]
    assert sum(r.kv_cache_bytes for r in pp.per_gpu) == one.kv_cache_bytes


def test_tied_embeddings_under_pp_cost_a_second_copy(catalog, llama70b):
    tied = replace(llama70b, tied_embeddings=True,
                   head=tuple(t for t in llama70b.head if t.role != "lm_head"))
    one = estimate_memory(tied, Request(context=8192, precision="bf16"), catalog)
    pp2 = estimate_memory(tied, Request(context=8192, pp=2, precision="bf16"), catalog)
    assert pp2.weights_bytes - one.weights_bytes == 128256 * 8192 * 2


def test_vllm_pipeline_partition_gives_the_remainder_to_the_middle_stages():
    assert pipeline_stages(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)]


def test_tp_pp_every_gpu_listed_and_counts_its_runtime_reserve(catalog, llama70b):
    est = estimate_memory(llama70b, Request(context=8192, tp=4, pp=2, precision="bf16"), catalog)
    assert [r.rank for r in est.per_gpu] == list(range(8))
    assert all(r.overhead_bytes >= est.runtime_reserve_bytes for r in est.per_gpu)
    assert est.total_bytes == sum(r.total_bytes for r in est.per_gpu)


def test_fits_means_every_gpu_fits(catalog, llama70b):
    card = GpuTarget("h100", 81559 * 2**20)
    split = estimate_memory(llama70b, Request(context=8192, tp=2, precision="bf16"), catalog, card)
    single = estimate_memory(llama70b, Request(context=8192, precision="bf16"), catalog, card)
    assert split.gpu.fits and not single.gpu.fits
    assert split.gpu.headroom_bytes == card.memory_bytes - max(r.total_bytes for r in split.per_gpu)


# --- warnings (the seed's common mistakes) ---------------------------------------------------

def test_warnings_for_the_seeds_common_mistakes(catalog, llama8b):
    tight = estimate_memory(llama8b, Request(context=8192, precision="bf16"), catalog, GpuTarget("x", 19 * GB))
    assert any("little headroom" in w for w in tight.warnings)
    big_kv = estimate_memory(llama8b, Request(context=131072, batch=4, precision="bf16"), catalog)
    assert any("KV cache is" in w for w in big_kv.warnings)
    q4 = estimate_memory(llama8b, Request(context=8192, precision="q4_k_m"), catalog)
    assert any("quality: small loss" in w for w in q4.warnings)
    clean = estimate_memory(llama8b, Request(context=8192, precision="bf16"), catalog, GpuTarget("x", 80 * GB))
    assert clean.warnings == ()


def test_context_beyond_the_trained_length_warns(catalog, llama8b):
    est = estimate_memory(llama8b, Request(context=200_000, precision="bf16"), catalog)
    assert any("max_position_embeddings" in w for w in est.warnings)


@pytest.mark.parametrize("field, value, message", [
    ("context", 0, "--context: must be at least 1"),
    ("batch", -3, "--batch: must be at least 1"),
    ("context", 10**12, "beyond any real deployment"),
    ("overhead_fraction", 1.5, "--overhead"),
    ("pp", 33, "--pp: 33 stages for 32 layers"),
])
def test_bad_numbers_are_named(catalog, llama8b, field, value, message):
    req = replace(Request(context=8192), **{field: value})
    with pytest.raises(PlannerInputError, match=message):
        estimate_memory(llama8b, req, catalog)


# --- properties -------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(context=st.integers(1, 300_000), batch=st.integers(1, 64), extra_ctx=st.integers(0, 50_000),
       extra_batch=st.integers(0, 16))
def test_memory_never_decreases_with_context_or_batch(catalog, llama8b, context, batch, extra_ctx, extra_batch):
    base = estimate_memory(llama8b, Request(context=context, batch=batch, precision="bf16"), catalog)
    more = estimate_memory(llama8b, Request(context=context + extra_ctx, batch=batch + extra_batch,
                                            precision="bf16"), catalog)
    assert more.total_bytes >= base.total_bytes
    assert all(isinstance(v, int) and v >= 0 for v in (base.weights_bytes, base.kv_cache_bytes, base.overhead_bytes))


def test_hybrid_linear_attention_holds_a_constant_state_per_sequence(catalog):
    from planner.model.architecture import size_only_architecture_from_config

    config = load_config_file(CONFIGS / "qwen3-next-80b-a3b")
    exact = architecture_from_config(config, "qwen3-next")  # counted exactly since the families package
    assert [layer.attention for layer in exact.layers] == [
        layer.attention for layer in size_only_architecture_from_config(config, "qwen3-next", 80 * 10**9).layers]
    arch = size_only_architecture_from_config(config, "qwen3-next", 80 * 10**9)
    kinds = [layer.attention.kind for layer in arch.layers]
    assert kinds.count("full") == 12 and kinds.count("linear") == 36 and kinds[3] == "full"
    # Gated DeltaNet state: conv (2*16*128 + 32*128) x (4-1) + recurrent 32 x 128 x 128, in bf16
    state = ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * 2
    full_per_token = 12 * 2 * 256 * 2 * 2
    short = estimate_memory(arch, Request(context=1000, precision="bf16"), catalog)
    long = estimate_memory(arch, Request(context=100_000, batch=2, precision="bf16", kv_dtype="fp8"), catalog)
    assert short.kv_bytes_per_token == full_per_token
    assert short.kv_cache_bytes == full_per_token * 1000 + 36 * state
    assert long.kv_cache_bytes == 2 * (full_per_token // 2 * 100_000 + 36 * state)  # fp8 KV, state stays bf16


def test_a_layers_kv_projections_split_by_its_own_kv_heads():
    """Gemma 4 31B's full layers have 4 KV heads of 512 (their k_proj, values = keys), its sliding ones 16: at tp 8 a
    full layer's k_proj is one whole replicated head a GPU (512 rows), not an eighth of 16 heads' worth (256)."""
    from planner.catalog.load import load_catalog
    from planner.estimator.layout import layer_kv_heads, model_kv_heads, shard_shape
    from planner.model.sources import resolve_model

    catalog = load_catalog()
    arch = resolve_model(catalog, "gemma-4-31b")
    full = [layer for layer in arch.layers if layer.attention.kv_heads == 4]
    k = next(t for t in full[0].tensors if t.name == "self_attn.k_proj.weight")
    assert k.shape == (2048, 5376) and model_kv_heads(arch) == 16
    assert shard_shape(k, 8, layer_kv_heads(full[0], 16)) == (512, 5376)
    per_gpu = estimate_memory(arch, Request(context=4096, tp=8, precision="bf16"), catalog).per_gpu[0].weights_bytes
    by_model_heads = per_gpu - len(full) * (512 - 256) * 5376 * 2  # what the model's 16 heads gave those layers
    assert by_model_heads == 7_874_504_920 and len(full) == 10
