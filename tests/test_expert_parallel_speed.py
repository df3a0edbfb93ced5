"""Expert parallelism with tensor-parallel attention in the speed model (bench/SPEED_PROTOCOL.md, the EP amendment):
each rank holds E / EP whole experts, and the fused MoE kernel of a step waits for the busiest rank. Hand counts on
Qwen3-235B-A22B (config.json: 94 layers, every one MoE, 128 routed experts of moe_intermediate_size 1536, top-8,
hidden 4096, no shared expert; bf16)."""

from math import comb

import pytest

from planner import api
from planner.estimator.performance import busiest_expert_rank

from test_cli import refused, run

MODEL, GPU = "qwen3-235b-a22b", "b200"
LAYERS, EXPERTS, TOP_K = 94, 128, 8
WHOLE_EXPERT = 3 * 4096 * 1536 * 2  # gate, up, down in bf16


def expected_max(trials: int, chance: float, copies: int) -> float:
    """E[max of `copies` independent Binomial(trials, chance)], enumerated: sum_j j (F(j)^c - F(j-1)^c)."""
    cdf, below, total = 0.0, 0.0, 0.0
    for j in range(trials + 1):
        cdf += comb(trials, j) * chance ** j * (1 - chance) ** (trials - j)
        total += j * (min(cdf, 1.0) ** copies - below ** copies)
        below = min(cdf, 1.0)
    return total


def test_one_rank_is_the_tensor_parallel_mean():
    touched, rows = busiest_expert_rank(EXPERTS, TOP_K, 1, 3)
    assert touched == pytest.approx(EXPERTS * (1 - (1 - TOP_K / EXPERTS) ** 3))
    assert rows == pytest.approx(3 * TOP_K)


@pytest.mark.parametrize("tokens", [1, 4, 64])
def test_busiest_rank_against_enumeration(tokens):
    touched, rows = busiest_expert_rank(EXPERTS, TOP_K, 8, tokens)
    chance = 1 - (1 - TOP_K / EXPERTS) ** tokens
    assert touched == pytest.approx(expected_max(EXPERTS // 8, chance, 8), rel=1e-9)
    assert rows == pytest.approx(expected_max(tokens * TOP_K, 1 / 8, 8), rel=1e-9)
    # the busiest rank carries more than the mean, never more than it holds
    assert EXPERTS // 8 * chance < touched <= EXPERTS // 8
    assert tokens * TOP_K / 8 < rows <= tokens * TOP_K


def test_two_coins_by_hand():
    # two ranks, one expert each touched with 1/2: the busiest touches one unless both miss, 3/4
    assert busiest_expert_rank(2, 1, 2, 1)[0] == pytest.approx(0.75)


def test_ep8_reads_the_busiest_ranks_whole_experts():
    tp = api.perf(MODEL, gpu=GPU, tp=8, engine="sglang", batch=1, prompt_tokens=1000, output_tokens=1000).to_dict()
    ep = api.perf(MODEL, gpu=GPU, tp=8, ep=8, engine="sglang", batch=1, prompt_tokens=1000,
                  output_tokens=1000).to_dict()
    assert ep["ep"] == 8 and tp["ep"] == 1
    # TP reads each of the 8 touched experts' 1/8 slice (one whole expert's bytes a layer); EP8 reads the busiest
    # rank's touched experts whole; the rest (attention, router, lm_head) is placed alike
    busiest = expected_max(EXPERTS // 8, TOP_K / EXPERTS, 8)
    extra = LAYERS * WHOLE_EXPERT * (busiest - 1)
    assert ep["weight_bytes_read"] - tp["weight_bytes_read"] == pytest.approx(extra, abs=LAYERS)
    assert ep["decode_terms_ms"]["moe"] > tp["decode_terms_ms"]["moe"]
    assert sum(ep["decode_terms_ms"].values()) == pytest.approx(ep["decode_step_ms"])


def test_step_never_falls_as_the_batch_grows_under_ep():
    steps = [api.perf(MODEL, gpu=GPU, tp=8, ep=8, engine="sglang", batch=b, prompt_tokens=1000,
                      output_tokens=1000).performance.decode_step_s for b in (1, 2, 3, 4, 8, 16, 32, 64)]
    assert steps == sorted(steps)


def test_closed_loop_pool_loses_what_the_ep_layout_adds():
    # no shared expert and ep = tp: what EP adds per rank is DeepEP's buffers as the memory estimate counts them
    tp = api.perf(MODEL, gpu=GPU, tp=8, engine="sglang", concurrency=4, prompt_tokens=1000, output_tokens=1000)
    ep = api.perf(MODEL, gpu=GPU, tp=8, ep=8, engine="sglang", concurrency=4, prompt_tokens=1000, output_tokens=1000)
    added = _held(8) - _held(1)
    assert added >= api.estimate(MODEL, context=2000, tp=8, ep=8).per_gpu[0].buffers_bytes > 0
    assert ep.closed_loop.pool_tokens < tp.closed_loop.pool_tokens
    # the pool shrinks in proportion to the bytes it loses, in whole tokens (SGLang pages one token)
    assert tp.closed_loop.pool_tokens - ep.closed_loop.pool_tokens == pytest.approx(
        tp.closed_loop.pool_tokens * added / _pool_bytes(), rel=1e-3)


def _held(ep: int) -> int:
    """The bytes a rank holds besides its KV cache, on the fullest rank."""
    return max(r.total_bytes - r.kv_cache_bytes for r in api.estimate(MODEL, context=2000, tp=8, ep=ep).per_gpu)


def _pool_bytes() -> int:
    from planner.catalog.load import load_catalog
    from planner.estimator.engines import EngineSettings, engine_budget
    from planner.estimator.memory import GpuTarget, Request
    from planner.model.sources import resolve_model

    catalog = load_catalog()
    budget = engine_budget(resolve_model(catalog, MODEL), Request(context=2000, tp=8), EngineSettings("sglang"),
                           GpuTarget.from_catalog(catalog.gpus.get(GPU)), catalog)
    return budget.kv_pool_bytes


@pytest.mark.parametrize("args, needle", [
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--ep", "3"], "--ep: 3 does not divide --tp 8"),
    (["perf", "llama-3.1-8b", "--gpu", "h100", "--ep", "2"], "dense model"),
])
def test_cli_refusals_are_one_line(tmp_path, args, needle):
    refused(*args, cwd=tmp_path, needle=needle)


def test_cli_names_the_layout(tmp_path):
    result = run("perf", MODEL, "--gpu", GPU, "--tp", "8", "--ep", "8", "--engine", "sglang", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tp 8 x ep 8 x pp 1" in result.stdout
