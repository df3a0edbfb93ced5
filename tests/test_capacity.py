"""Tokens in flight, the steady state of continuous batching, and the replica simulator against closed forms."""

import json
import subprocess
import sys
from math import ceil

import pytest

from planner.catalog.load import load_catalog
from planner.estimator.capacity import TOLERANCE, Scheduler, Slo, StepTimes, _mean_field, max_rate, steady_state
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.memory import GpuTarget, Request
from planner.estimator.performance import Step, Workload, causal_positions, replica_timer
from planner.estimator.simulate import Arrival, poisson_arrivals, read_trace, simulate
from planner.errors import PlannerInputError
from planner.model.sources import resolve_model

CATALOG = load_catalog()
CHAT = Workload(1500, 400)


def replica(model="llama-3.1-8b", gpu="h100-sxm", tp=1, precision="bf16", context=8192, version="0.19.0", **settings):
    """A vLLM replica; by default of the release these tests were written against (16-token blocks)."""
    arch = resolve_model(CATALOG, model)
    card = CATALOG.gpus.get(gpu)
    budget = engine_budget(arch, Request(context=context, batch=1, tp=tp, pp=1, precision=precision, kv_dtype="auto"),
                           EngineSettings("vllm", version=version, **settings), GpuTarget.from_catalog(card), CATALOG)
    return replica_timer(arch, precision, "auto", card, tp, 1, CATALOG), Scheduler.of(budget), budget


@pytest.mark.parametrize("version, block, held", [("0.19.0", 16, 1904), ("0.34.0", 64, 1920)])
def test_pool_is_the_engines_blocks_and_requests_hold_whole_blocks(version, block, held):
    _, scheduler, budget = replica(version=version)
    # Llama 3.1 8B: 32 layers x 8 KV heads x 128 x (K + V) x 2 bytes = 131,072 bytes per token; vLLM pages 16 tokens
    # (64 from 0.34.0: config/cache.py DEFAULT_BLOCK_SIZE)
    block_bytes = block * 32 * 8 * 128 * 2 * 2
    assert scheduler.pool_tokens == budget.kv_pool_bytes // block_bytes * block
    assert scheduler.block_tokens == block and scheduler.max_model_len == 8192
    assert scheduler.max_num_batched_tokens == 8192 and scheduler.max_num_seqs == 1024  # vLLM's >= 70 GiB defaults
    assert scheduler.held_tokens(1900) == held and scheduler.held_tokens(held) == held


def test_kv_in_flight_is_what_the_requests_hold():
    timer, scheduler, _ = replica()
    state = steady_state(timer, scheduler, CHAT, 4.0)
    # decoding requests hold P + t tokens in whole blocks, t = 1..N-1; prefilling ones their prompt
    mean_decoding = sum(ceil((1500 + t) / 16) * 16 for t in range(1, 400)) / 399
    prefilling = state.batch - state.decode_batch
    assert state.kv_tokens_mean == pytest.approx(state.decode_batch * mean_decoding + prefilling * 1504)
    assert state.kv_tokens_peak == ceil(state.batch) * 1904
    assert state.decode_batch == pytest.approx(4.0 * 399 * state.tpot_mean_s, rel=2e-3)  # Little's law, to the fixed point's tolerance


def test_max_model_len_costs_nothing_while_one_request_fits():
    short = max_rate(*replica("llama-3.3-70b", "h200-sxm", 1, "fp8", context=8192)[:2], CHAT, Slo(2.0, 0.05))
    timer, scheduler, budget = replica("llama-3.3-70b", "h200-sxm", 1, "fp8", context=131072)
    assert budget.fits  # one request of 128K fits next to the weights
    long = max_rate(timer, scheduler, CHAT, Slo(2.0, 0.05))
    assert long.requests_per_s == pytest.approx(short.requests_per_s, rel=0.02)
    assert long.batch > 20  # batch slots no longer each reserve 128K tokens (the pool holds under 3 of those)
    assert scheduler.pool_tokens < 3 * 131072


def test_a_percentile_slo_is_stricter_than_the_mean():
    timer, scheduler, _ = replica()
    mean = max_rate(timer, scheduler, CHAT, Slo(0.2, 0.03))
    p90 = max_rate(timer, scheduler, CHAT, Slo(0.2, 0.03, percentile=90))
    assert p90.requests_per_s < mean.requests_per_s
    with pytest.raises(PlannerInputError, match="percentile"):
        Slo(1.0, 0.1, percentile=100)


def test_simulator_one_request_at_a_time_matches_the_closed_form():
    timer, scheduler, _ = replica()
    prompt, output = 1500, 50
    arrivals = [Arrival(100.0 * i, prompt, output) for i in range(3)]  # each done long before the next
    result = simulate(timer, scheduler, arrivals)
    prefill = timer.step_s(Step(0, 0.0, prompt, causal_positions(prompt), 1))
    decode = sum(timer.step_s(Step(1, prompt + t)) for t in range(1, output))
    assert result.ttft_s.p50 == pytest.approx(prefill, rel=1e-9)
    assert result.e2e_s.mean == pytest.approx(prefill + decode, rel=2e-3)  # step times memoised per 16-token context
    assert result.preemptions == 0 and result.completed == 3


def test_simulator_queues_like_md1_at_low_load():
    """One request at a time (max_num_seqs 1) and one output token: a single deterministic server."""
    timer, scheduler, _ = replica(max_num_seqs=1)
    shape = Workload(2000, 1)
    service = timer.step_s(Step(0, 0.0, 2000, causal_positions(2000), 1))
    rate = 0.3 / service
    result = simulate(timer, scheduler, poisson_arrivals(rate, 20000 * service / 0.3, shape, seed=3))
    rho = rate * service
    expected_wait = rho * service / (2 * (1 - rho))  # Pollaczek-Khinchine, deterministic service
    assert result.ttft_s.mean - service == pytest.approx(expected_wait, rel=0.08)


def test_running_out_of_blocks_preempts_by_recompute():
    timer, scheduler, _ = replica()
    tight = Scheduler(pool_tokens=16 * 300, block_tokens=16, max_num_batched_tokens=8192, max_num_seqs=64,
                      max_model_len=4096)
    result = simulate(timer, tight, [Arrival(0.0, 1000, 800) for _ in range(4)])
    assert result.preemptions > 0 and result.completed == 4
    assert result.kv_peak_fraction <= 1.0


@pytest.mark.parametrize("model, gpu, tp, precision", [("llama-3.1-8b", "h100-sxm", 1, "bf16"),
                                                        ("qwen3-30b-a3b", "h100-sxm", 1, "bf16")])
def test_analytic_capacity_is_not_above_the_simulated_by_more_than_the_target(model, gpu, tp, precision):
    """At the analytic capacity / 1.1 the simulated replica still meets the SLO (bench/capacity_check.py: the grid)."""
    timer, scheduler, _ = replica(model, gpu, tp, precision)
    slo = Slo(2.0, 0.05)
    capacity = max_rate(timer, scheduler, CHAT, slo).requests_per_s
    result = simulate(timer, scheduler, poisson_arrivals(capacity / 1.1, 200, CHAT, seed=1), warmup_s=20)
    assert result.ttft_s.mean <= slo.ttft_s and result.tpot_s.mean <= slo.tpot_s


def test_a_broken_trace_line_is_named(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n{"arrival_s": 1}\n')
    with pytest.raises(PlannerInputError, match="line 2"):
        read_trace(trace)
    trace.write_text('{"arrival_s": -1, "prompt_tokens": 10, "output_tokens": 5}\n')
    with pytest.raises(PlannerInputError, match="arrival_s"):
        read_trace(trace)


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})


def test_perf_answers_the_contract(tmp_path):
    proc = _cli("perf", "llama-3.3-70b", "--gpu", "h100-sxm", "--gpus", "2", "--tp", "2", "--pp", "1", "--precision",
                "fp8", "--kv-dtype", "fp8", "--engine", "vllm", "--batch", "16", "--prompt-tokens", "1500",
                "--output-tokens", "400", "--rate", "2", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("ttft_s", "tpot_ms", "output_tokens_per_s", "requests_per_s", "bound"):
        assert key in out
    assert out["output_tokens_per_s"] == pytest.approx(out["requests_per_s"] * 400)
    assert out["steady_state"]["requests_per_s"] == 2 and out["steady_state"]["keeps_up"] is True


@pytest.mark.parametrize("args, needle", [
    (("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "-1"), "--rate"),
    (("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "3", "--tp", "2"), "--gpus"),
    (("simulate", "other.json"), "is not a `planner solve --format json` output"),
    (("simulate", "other.json", "--rate", "-2"), "--rate"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    (tmp_path / "other.json").write_text('{"plans": [{"gpu": "h100"}]}')
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and needle in proc.stderr and proc.stderr.count("\n") == 1


SMALL_FLEET = """
name: small
model: llama-3.1-8b
workload:
  context: 8K
  traffic: {requests_per_s: 2, prompt_tokens: 1000, output_tokens: 200}
  slo: {ttft_s: 2.0, tpot_s: 0.05, percentile: 90}
search: {gpus: [l40s], precisions: [fp8]}
pricing: {providers: [runpod, lambda]}
"""


def test_a_fleet_plan_file_and_its_scenario_simulate_the_same_expected_load(tmp_path):
    # issue 24: the plan file was simulated at each replica's planned capacity (1.40 req/s), the scenario at its share
    # of the demand (0.75), both "100% of its traffic"
    (tmp_path / "small.yaml").write_text(SMALL_FLEET)
    solved = _cli("solve", "small.yaml", "--format", "json", "-o", "plan.json", cwd=tmp_path)
    assert solved.returncode == 0, solved.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    (row,) = plan["assignments"]
    # 2 req/s over its replicas, each below the capacity it was planned for
    assert row["demand_share"] == 1.0 and row["expected_rps_per_replica"] == pytest.approx(2 / row["replicas"])
    assert row["expected_rps_per_replica"] < row["capacity_rps_per_replica"]
    runs = {}
    for source in ("plan.json", "small.yaml"):
        proc = _cli("simulate", source, "--duration", "60", "--format", "json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        (runs[source],) = json.loads(proc.stdout)
    for run in runs.values():
        assert run["rate_per_replica"] == pytest.approx(2 / row["replicas"], rel=1e-4) and run["share"] == 1.0
        assert (run["prompt_tokens"], run["output_tokens"]) == (1000, 200) and run["result"]["completed"] > 0
    assert runs["plan.json"]["result"] == runs["small.yaml"]["result"]  # the same arrivals (seed 0) on the same replica
    del row["prompt_tokens"]
    (tmp_path / "old.json").write_text(json.dumps(plan))
    broken = _cli("simulate", "old.json", cwd=tmp_path)
    assert broken.returncode == 2 and "prompt_tokens" in broken.stderr and broken.stderr.count("\n") == 1


def test_the_expected_load_splits_a_buckets_demand_by_capacity():
    from types import SimpleNamespace

    from planner.plan.fleet import _expected_loads
    from planner.plan.serving import Bucket, FleetWorkload

    chat = FleetWorkload("chat", None, (Bucket(1.5, 1000, 200), Bucket(5.0, 100, 20)))
    big, small = SimpleNamespace(capacity_rps=1.4, role="both"), SimpleNamespace(capacity_rps=0.6, role="both")
    loads = _expected_loads((chat,), [("chat", 0, big, 2), ("chat", 0, small, 1), ("chat", 1, small, 4)])
    # bucket 0: capacity 2 x 1.4 + 1 x 0.6 = 3.4 req/s for 1.5 req/s: shares 2.8 / 3.4 and 0.6 / 3.4, each replica
    # at 1.5 / 3.4 = 44% of its capacity; bucket 1: 5 req/s beyond its 4 x 0.6 = 2.4, so each replica at capacity
    assert loads == [pytest.approx((2.8 / 3.4, 1.5 * 2.8 / 3.4 / 2)), pytest.approx((0.6 / 3.4, 1.5 * 0.6 / 3.4)),
                     pytest.approx((1.0, 0.6))]


def test_the_step_mix_fixed_point_is_found_where_the_secant_swings_past_a_dip():
    # Llama 3.1 8B on one A100 PCIe 80GB (a 2,048-token budget), 1,000 + 200 tokens, near 13 requests/s: F(s) - s
    # dips towards 0 near s = 65 ms without reaching it and crosses it near 140 ms, where every step carries
    # prompts. Unguarded secant steps swung about the dip for all their rounds at 9 of these 67 rates
    # ("throughput"); which ones moves with the speed model, so the sweep is wide.
    timer, scheduler, _ = replica(gpu="a100-pcie-80gb", context=4096)
    times, prompt, output = StepTimes(timer), 1000, 200
    for rate in (r / 100 for r in range(1200, 1400, 3)):
        mix = _mean_field(times, rate, prompt, 0, output, prompt + output / 2, scheduler.max_num_batched_tokens)
        assert not isinstance(mix, str), rate
        # a fixed point: the decoding requests (Little's law on the step it started from) and the step agree
        assert mix.decode == pytest.approx(rate * (output - 1) * mix.mean_s, rel=TOLERANCE), rate


def test_a_rate_past_what_sglang_runs_at_once_saturates_instead_of_overflowing():
    """SGLang's prompts take the whole step budget, so no token budget stops the step mix as the decoding requests
    grow: the requests the engine runs at once do (its cap, or the requests whose mean KV the pool holds), named as
    the limit. Found by bench/fuzz.py: a disaggregated SGLang scenario with a 1 s TPOT SLO overflowed a float."""
    from dataclasses import replace as with_

    from planner import api
    from planner.plan.scenario import parse_scenario

    timer, scheduler, _ = replica("llama-3.1-8b", context=8192)
    sglang = with_(timer, mixes_prefill=False)
    for rate in (1e3, 1e6, 1e9):
        state = steady_state(sglang, scheduler, Workload(8000, 250), rate)
        assert state.limit in ("kv pool", "max_num_seqs", "throughput"), (rate, state.limit)
    capped = steady_state(sglang, with_(scheduler, max_num_seqs=4), Workload(1000, 250), 1e3)
    assert capped.limit == "max_num_seqs"
    scenario = {"name": "loose", "model": "llama-3.3-70b",
                "workload": {"context": "16K", "traffic": {"requests_per_s": 12, "prompt_tokens": 8000,
                                                           "output_tokens": 250}, "slo": {"ttft_s": 3.0, "tpot_s": 1}},
                "search": {"precisions": ["fp8"], "kv_dtypes": ["auto"], "gpus": ["h100-sxm", "h200-sxm"],
                           "serving": ["aggregated", "disaggregated"]},
                "engine": {"name": "sglang"}}
    plan = api.plan_fleet(parse_scenario(scenario), catalog=CATALOG)
    assert plan.status in ("OPTIMAL", "FEASIBLE") and plan.usd_per_hour > 0



def test_an_engine_reserving_blocks_to_completion_holds_each_running_request_whole():
    """TensorRT-LLM reserves a request's blocks to completion when it starts it (GUARANTEED_NO_EVICT): in the steady
    state every running request, decoding or prefilling, counts P + N tokens in whole blocks against the pool, not the
    P + t it has written; with the pool the limit, the replica keeps up with a lower rate than one admitting by prompt
    blocks."""
    from dataclasses import replace

    from planner.estimator.engines.base import BlocksToCompletion

    timer, vllm_like, _ = replica()
    reserving = replace(vllm_like, reservation=BlocksToCompletion())
    state = steady_state(timer, reserving, CHAT, 4.0)
    assert state.kv_tokens_mean == pytest.approx(state.batch * 1904)
    assert state.kv_tokens_mean > steady_state(timer, vllm_like, CHAT, 4.0).kv_tokens_mean
    small = replace(reserving, pool_tokens=60 * 1904)  # the pool, not the SLO, stops the rate
    assert max_rate(timer, small, CHAT, Slo()).requests_per_s < max_rate(
        timer, replace(small, reservation=None), CHAT, Slo()).requests_per_s
