"""Data-parallel attention in the speed model (bench/SPEED_PROTOCOL.md, the DP amendment): each DP group attends to its
own requests at tp / dp-way TP, the MLP and experts run every token. Hand counts on DeepSeek-V3 (61 layers, every one
MLA with a 576-value bf16 latent: 70,272 bytes a token over the layers, whole on every rank)."""

import pytest

from planner import api

from test_cli import refused, run

MODEL, GPU = "deepseek-v3", "h200"
SHAPE = dict(gpu=GPU, tp=8, engine="sglang", batch=64, prompt_tokens=2000, output_tokens=1000)
LATENT_PER_TOKEN = 61 * 576 * 2
CONTEXT = 2000 + 1000 // 2  # the decode step's mean context


def perf(**layout):
    return api.perf(MODEL, **{**SHAPE, **layout}).to_dict()


def test_each_group_reads_only_its_own_requests_cache():
    tp, dp8 = perf(), perf(dp=8)
    assert tp["kv_bytes_read"] == 64 * LATENT_PER_TOKEN * CONTEXT
    assert dp8["kv_bytes_read"] == 64 // 8 * LATENT_PER_TOKEN * CONTEXT
    assert dp8["dp"] == 8


def test_attention_weights_are_read_whole_when_each_rank_is_a_group():
    tp, dp8 = perf(), perf(dp=8)
    assert dp8["decode_terms_ms"]["dense_gemm"] > tp["decode_terms_ms"]["dense_gemm"]
    assert dp8["weight_bytes_read"] > tp["weight_bytes_read"]
    # the experts and the all-reduces of every token are those of TP
    assert dp8["decode_terms_ms"]["moe"] == pytest.approx(tp["decode_terms_ms"]["moe"])
    assert dp8["decode_terms_ms"]["allreduce"] == pytest.approx(tp["decode_terms_ms"]["allreduce"])


def test_an_attention_group_of_several_ranks_adds_its_all_reduce():
    # dp 2 on tp 8: attention at TP 4 sums its output over its 4 ranks once a layer, beside the two TP all-reduces
    tp, dp2 = perf(), perf(dp=2)
    assert dp2["decode_terms_ms"]["allreduce"] > tp["decode_terms_ms"]["allreduce"]


def test_uneven_batches_time_the_busiest_group():
    # 65 requests over 8 groups: the busiest holds 9
    assert perf(dp=8, batch=65)["kv_bytes_read"] == 9 * LATENT_PER_TOKEN * CONTEXT


def test_step_never_falls_as_the_batch_grows_under_dp():
    steps = [api.perf(MODEL, **{**SHAPE, "dp": 8, "batch": b}).performance.decode_step_s for b in (1, 7, 8, 9, 16, 64)]
    assert steps == sorted(steps)


@pytest.mark.parametrize("args, needle", [
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--dp", "3"], "--dp: 3 does not divide --tp 8"),
    # were a ZeroDivisionError traceback (bench/fuzz.py's perf command lines)
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--dp", "0"], "--dp: must be at least 1 group, got 0"),
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--ep", "0"], "--ep: must be at least 1, got 0"),
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--ep", "-8"], "--ep: must be at least 1, got -8"),
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--dp", "8", "--concurrency", "4"], "--engine vllm: its memory profile "
                                                                                    "does not size data-parallel"),
])
def test_cli_refusals_are_one_line(tmp_path, args, needle):
    refused(*args, cwd=tmp_path, needle=needle)


def test_a_rate_and_clients_run_on_every_dp_groups_own_pool():
    """At a rate (or C clients) the replica's pool is its 8 DP groups' pools, each the per-rank pool SGLang's budget
    sizes for the layout (its token pool on one GPU of the group)."""
    from planner.catalog.load import load_catalog
    from planner.estimator.engines import EngineSettings, engine_budget
    from planner.estimator.memory import GpuTarget, Request
    from planner.model.sources import resolve_model

    catalog = load_catalog()
    budget = engine_budget(resolve_model(catalog, MODEL), Request(context=2500, batch=1, tp=8, dp=8),
                           EngineSettings("sglang"), GpuTarget.from_catalog(catalog.gpus.get(GPU)), catalog)
    shape = dict(gpu=GPU, tp=8, dp=8, ep=8, engine="sglang", prompt_tokens=2000, output_tokens=500)
    steady = api.perf(MODEL, rate=4, **shape).to_dict()["steady_state"]
    assert steady["keeps_up"] and steady["pool_tokens"] == 8 * budget.kv_cache_capacity_tokens
    looped = api.perf(MODEL, concurrency=64, **shape).to_dict()["closed_loop"]
    assert looped["running"] == 64


def test_cli_names_the_layout(tmp_path):
    result = run("perf", MODEL, "--gpu", GPU, "--tp", "8", "--dp", "8", "--ep", "8", "--engine", "sglang", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tp 8 x dp 8 x ep 8 x pp 1" in result.stdout


def test_perf_runs_the_requests_sglang_is_told_each_dp_group_its_share():
    """`planner perf --max-running-requests N`: SGLang's scheduler runs N at once (N // dp a group), the rest of the
    closed loop's clients wait; it is SGLang's flag, at least one a group, and no fewer than a static --batch."""
    from planner.errors import PlannerInputError

    def loop(told):
        return api.perf("qwen3-30b-a3b", gpu="h100-sxm", tp=4, dp=4, ep=4, engine="sglang", concurrency=256,
                        prompt_tokens=1000, output_tokens=500, max_running_requests=told).closed_loop

    default, told = loop(None), loop(66)
    assert default.running == 256 and (told.running, told.limit) == (64, "max_running_requests")  # 66 // 4 a group
    assert told.ttft_s > default.ttft_s and told.output_tokens_per_s < default.output_tokens_per_s
    for kwargs, needle in (({"engine": "vllm", "max_running_requests": 8}, "SGLang's flag, not vllm's"),
                           ({"engine": "sglang", "dp": 4, "ep": 4, "tp": 4, "concurrency": 8, "max_running_requests": 2},
                            "fewer than the 4 data-parallel attention groups"),
                           ({"engine": "sglang", "batch": 16, "max_running_requests": 8}, "fewer than --batch 16")):
        with pytest.raises(PlannerInputError, match=needle):
            api.perf("qwen3-30b-a3b", gpu="h100-sxm", **kwargs)
