"""Data-parallel attention and expert parallelism in the memory estimate: SGLang's placement, hand-counted on
DeepSeek-V3 (config.json: hidden 7168, 61 layers of which the first 3 dense, 256 routed experts of
moe_intermediate_size 2048, 1 shared expert, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_rope 64,
qk_nope 128, v_head 128, intermediate 18432, vocab 129280; fp8 128x128 blocks with an fp32 scale each)."""

import pytest

from planner import api
from planner.errors import PlannerInputError
from planner.estimator.memory import deepep_low_latency_bytes, deepep_normal_bytes

from test_cli import run

H100 = "h100"
CONTEXT, BATCH = 32 * 1024, 16


def fp8_block(rows, cols):
    """An fp8 128x128-block matrix: a byte per weight, an fp32 scale per (partial) block."""
    return rows * cols + -(-rows // 128) * -(-cols // 128) * 4


EXPERT = 2 * fp8_block(2048, 7168) + fp8_block(7168, 2048)  # gate, up, down
ATTENTION = (fp8_block(1536, 7168) + 1536 * 2 + fp8_block(128 * 192, 1536) + fp8_block(576, 7168) + 512 * 2
             + fp8_block(128 * 256, 512) + fp8_block(7168, 128 * 128))  # q_a, q_a norm, q_b, kv_a, kv_a norm, kv_b, o
LAYER_NORMS = 2 * 7168 * 2
ROUTER = 256 * 7168 * 2 + 256 * 2  # gate + e_score_correction_bias, bf16
LATENT_PER_TOKEN = 61 * 576 * 2  # (kv_lora_rank + qk_rope_head_dim) x bf16 per layer, every layer MLA


@pytest.fixture(scope="module")
def dp_ep():
    return api.estimate("deepseek-v3", context=CONTEXT, batch=BATCH, tp=16, dp=16, ep=16, all_to_all="deepep", gpu=H100)


def test_hand_counts_of_the_pieces():
    assert EXPERT == 44_050_944
    assert ATTENTION == 187_155_168
    assert LATENT_PER_TOKEN == 70_272


def test_deepseek_v3_dp16_ep16_weights_per_gpu(dp_ep):
    experts = 256 // 16 * 58 * EXPERT  # 16 whole experts in each of the 58 MoE layers
    assert experts == 40_879_276_032
    dense = 2 * fp8_block(18432 // 16, 7168) + fp8_block(7168, 18432 // 16)  # dense MLP stays TP 16
    embedding = 129280 * 7168 * 2  # vocab-split over the attention TP group: 1 GPU, whole
    head = 129280 // 16 * 7168 * 2 + 7168 * 2  # lm_head over the whole TP group, final norm
    whole = 61 * (ATTENTION + LAYER_NORMS) + 58 * (EXPERT + ROUTER)  # attention and the shared expert whole per GPU
    per_gpu = experts + whole + 3 * dense + embedding + head
    assert per_gpu == 57_108_878_912
    assert {r.weights_bytes for r in dp_ep.per_gpu} == {per_gpu}


def test_deepseek_v3_dp16_kv_is_one_request_per_gpu(dp_ep):
    one_request = LATENT_PER_TOKEN * CONTEXT
    assert [r.kv_cache_bytes for r in dp_ep.per_gpu] == [one_request] * 16
    assert [r.dp_rank for r in dp_ep.per_gpu] == list(range(16))
    assert dp_ep.kv_cache_bytes == BATCH * one_request


def test_deepep_buffers_hand_count():
    # normal mode, 16 ranks = 2 RDMA x 8 NVLink ranks, 10 channels (20 SMs / 2), bf16 hidden 7168 x 2 bytes;
    # per token: hidden + SourceMeta 8 + top-k 128 x (int64 + float) + 128 float scales
    meta = 8 + 128 * 12 + 128 * 4
    nvl = 10 * 8 * (2 * 2 + 3) * 4 + 10 * 8 * 288 * (14336 + meta)  # 288 NVL receive tokens for 16 ranks
    nvl = -(-nvl // 128) * 128
    rdma = 10 * 2 * 18 * 2 * 4 + 10 * 2 * 140 * (14336 + meta + 16) * 2  # 128 receive tokens rounded up to 20 x 7
    rdma = -(-rdma // 128) * 128
    assert deepep_normal_bytes(7168, 16) == (nvl, rdma) == (377_673_984, 91_887_744)
    # low latency: 128 tokens; dispatch message int4 + 7168 x bf16, combine message 56 x bf162 + 7168 x bf16
    send = max(128 * (16 + 14336), 256 * 128 * (56 * 4 + 14336))
    receive = max(256 * 128 * (16 + 14336), 256 * 128 * (56 * 4 + 14336))
    low_latency = (2 * (send + receive + 256 * 4) + 128) // 128 * 128
    assert deepep_low_latency_bytes(7168, 256) == low_latency == 1_908_410_496


def test_deepseek_v3_dp16_ep16_fits_where_tp16_does_not(dp_ep):
    buffers = 377_673_984 + 1_908_410_496  # NVLink + the larger RDMA buffer (low-latency)
    assert {r.buffers_bytes for r in dp_ep.per_gpu} == {buffers}
    rank = dp_ep.per_gpu[0]
    assert rank.total_bytes == rank.weights_bytes + rank.kv_cache_bytes + buffers + rank.overhead_bytes
    assert dp_ep.layout == "tp 16 x dp 16 x ep 16 x pp 1"
    assert dp_ep.gpu.fits and rank.total_bytes < 80 * 10**9
    tp16 = api.estimate("deepseek-v3", context=CONTEXT, batch=BATCH, tp=16, gpu=H100)
    assert not tp16.gpu.fits
    assert tp16.per_gpu[0].kv_cache_bytes == BATCH * LATENT_PER_TOKEN * CONTEXT  # the latent on every TP rank


def test_uneven_batch_goes_to_the_first_dp_groups():
    est = api.estimate("deepseek-v3", context=1024, batch=3, tp=8, dp=2, ep=8)
    per_request = LATENT_PER_TOKEN * 1024
    assert [r.kv_cache_bytes for r in est.per_gpu] == [2 * per_request] * 4 + [per_request] * 4


def test_ep_below_tp_splits_each_expert_and_has_no_deepep_buffer():
    est = api.estimate("deepseek-v3", context=1024, tp=16, ep=8)
    assert est.buffers_bytes == 0
    whole = api.estimate("deepseek-v3", context=1024, tp=16, ep=16, all_to_all="deepep")
    # ep 8: 32 experts per GPU, each TP-split 16 / 8 = 2 ways, and the shared expert TP-split 16 ways (no all-to-all);
    # ep 16 over DeepEP: 16 whole experts and the shared expert whole
    half_expert = 2 * fp8_block(1024, 7168) + fp8_block(7168, 1024)
    shared_tp16 = 2 * fp8_block(128, 7168) + fp8_block(7168, 128)
    assert 32 * half_expert == 16 * EXPERT
    assert est.per_gpu[0].weights_bytes - whole.per_gpu[0].weights_bytes == 58 * (shared_tp16 - EXPERT)


def test_ep_without_an_all_to_all_holds_the_tp_layouts_bytes():
    # SGLang --tp 16 --ep-size 16 alone: 16 whole experts (the bytes of 1/16 of each), the shared expert TP-split
    # (deepseek_v2.py _shared_expert_use_tp1 needs an all-to-all backend), no DeepEP buffers
    ep = api.estimate("deepseek-v3", context=1024, tp=16, ep=16)
    tp = api.estimate("deepseek-v3", context=1024, tp=16)
    assert ep.buffers_bytes == 0 and ep.all_to_all is None
    assert [r.weights_bytes for r in ep.per_gpu] == [r.weights_bytes for r in tp.per_gpu]


def test_tp_only_estimate_is_unchanged_by_the_defaults():
    base = api.estimate("deepseek-v3", context=CONTEXT, batch=BATCH, tp=16, gpu=H100)
    same = api.estimate("deepseek-v3", context=CONTEXT, batch=BATCH, tp=16, dp=1, ep=1, gpu=H100)
    assert base == same and base.buffers_bytes == 0 and base.layout == "tp 16 x pp 1"


@pytest.mark.parametrize("kwargs, needle", [
    (dict(tp=16, dp=3), "--dp: 3 does not divide --tp 16"),
    (dict(tp=12, ep=12), "--ep: 12 does not divide the model's 256 routed experts"),
    (dict(tp=16, ep=3), "--ep: 3 does not divide --tp 16"),
    (dict(tp=6, ep=6), "--ep: 6 does not divide the model's 256 routed experts"),
    (dict(tp=16, ep=8, all_to_all="deepep"), "--all-to-all deepep: the all-to-all spans the TP group, so --ep must "
                                             "equal --tp"),
    (dict(tp=16, ep=16, all_to_all="nccl"), "--all-to-all: 'nccl' is not modelled"),
])
def test_bad_combinations_are_refused(kwargs, needle):
    with pytest.raises(PlannerInputError, match=needle):
        api.estimate("deepseek-v3", context=1024, **kwargs)


@pytest.mark.parametrize("args, needle", [
    (["--tp", "16", "--dp", "3"], "--dp: 3 does not divide --tp 16"),
    (["--tp", "12", "--ep", "12"], "--ep: 12 does not divide the model's 256 routed experts; use one of 1, 2, 4"),
    (["--tp", "8", "--ep", "0"], "--ep: must be at least 1"),
    (["--tp", "16", "--dp", "16", "--ep", "16", "--engine", "vllm", "--gpu", "h100"], "--dp/--ep/--all-to-all: the "
                                                                                       "--engine vllm"),
    (["--tp", "16", "--ep", "8", "--all-to-all", "deepep"], "--ep must equal --tp (16), got 8"),
])
def test_cli_refusals_are_one_line(tmp_path, args, needle):
    proc = run("estimate", "deepseek-v3", *args, cwd=tmp_path)
    assert proc.returncode == 2 and needle in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_ep_on_a_dense_model_is_refused(tmp_path):
    proc = run("estimate", "llama-3.1-8b", "--tp", "8", "--ep", "8", cwd=tmp_path)
    assert proc.returncode == 2 and "--ep: llama-3.1-8b is a dense model (no routed experts); drop --ep" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
