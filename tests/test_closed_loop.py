"""The closed loop (planner perf --concurrency) and the benchmark replay (planner bench) against the simulator."""

import json
import subprocess
import sys
from math import floor, ceil, inf

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlannerInputError
from planner.estimator.benchmark import BenchmarkRun, measure, run_benchmark
from planner.estimator.closed_loop import closed_loop
from planner.estimator.performance import Step, Workload
from planner.estimator.simulate import Arrival, EngineRun, ServedRequest, run_engine

from test_capacity import CATALOG, replica

# The analytic closed loop against the simulated one (vllm bench serve --max-concurrency C at rate inf): measured
# 0.1-2.4% apart on TPOT and 0.0-0.6% on throughput where the pool holds every client, 7% where it caps them.
AGREEMENT = 0.10


def _no_constants(name):
    raise AssertionError(f"JSON holds {name}")


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})


def _strict_json(text):
    return json.loads(text, parse_constant=_no_constants)  # NaN, Infinity and -Infinity are not JSON


@pytest.mark.parametrize("model, gpu, prompt, output, clients", [
    ("llama-3.1-8b", "h100-sxm", 1024, 128, 16),
    ("llama-3.1-8b", "h100-sxm", 1024, 128, 128),
    ("llama-3.1-8b", "l40s", 2000, 200, 32),  # prompts cut into chunks: the budget is 2,048 tokens
    ("qwen3-30b-a3b", "h100-sxm", 1024, 256, 64),
    ("qwen3-30b-a3b", "h100-sxm", 1024, 256, 160),  # the pool holds 102 of the 160 clients
])
def test_the_closed_loop_agrees_with_the_simulated_benchmark(model, gpu, prompt, output, clients):
    timer, scheduler, _ = replica(model, gpu, context=prompt + output)
    loop = closed_loop(timer, scheduler, Workload(prompt, output), clients)
    run = run_benchmark(timer, scheduler, BenchmarkRun(num_prompts=20 * clients, max_concurrency=clients,
                                                       input_len=prompt, output_len=output))
    assert loop.requests_per_s == pytest.approx(run.request_throughput, rel=AGREEMENT)
    assert loop.output_tokens_per_s == pytest.approx(run.output_throughput, rel=AGREEMENT)
    assert loop.tpot_s * 1000 == pytest.approx(run.tpot.mean_ms, rel=AGREEMENT)
    assert loop.e2e_s * 1000 == pytest.approx(run.e2el.mean_ms, rel=AGREEMENT)
    assert run.mean_batch == pytest.approx(loop.running, rel=AGREEMENT)


@pytest.mark.parametrize("model, gpu, prompt, output", [("llama-3.1-8b", "a100-pcie-80gb", 1500, 400),
                                                        ("qwen3-30b-a3b", "h100-sxm", 1024, 256)])
def test_more_clients_never_lower_throughput_or_tpot_and_the_pool_caps_both(model, gpu, prompt, output):
    timer, scheduler, _ = replica(model, gpu, context=prompt + output)
    loops = [closed_loop(timer, scheduler, Workload(prompt, output), c) for c in range(1, 301)]
    for fewer, more in zip(loops, loops[1:]):
        assert more.requests_per_s >= fewer.requests_per_s and more.tpot_s >= fewer.tpot_s, more.concurrency
        assert more.e2e_s >= fewer.e2e_s
    capped = [loop for loop in loops if loop.limit]
    assert capped, "the sweep reaches the pool's or max_num_seqs' cap"
    assert {(loop.running, loop.requests_per_s, loop.tpot_s) for loop in capped} == {
        (capped[0].running, capped[0].requests_per_s, capped[0].tpot_s)}
    assert all(loop.kv_tokens_peak <= loop.pool_tokens for loop in loops)
    # the clients the engine does not run wait in its queue: Little's law on the loop
    last = loops[-1]
    assert last.queue_s == pytest.approx((last.concurrency - last.running) / last.requests_per_s)
    assert last.e2e_s == pytest.approx(last.concurrency / last.requests_per_s)


def test_tpot_and_itl_are_measured_as_vllm_bench_serve_does():
    """Three requests by hand: A streams 4 tokens, B one, C 4 with a preemption between its second and third."""
    ends = (0.1, 0.2, 0.35, 0.5, 0.6, 0.9, 1.0)  # when steps 0..6 ended
    served = (
        ServedRequest(Arrival(0.0, 10, 4), sent_s=0.0, first_token_s=0.1, finished_s=0.5, token_steps=((0, 3),)),
        ServedRequest(Arrival(0.05, 20, 1), sent_s=0.05, first_token_s=0.2, finished_s=0.2, token_steps=((1, 1),)),
        ServedRequest(Arrival(0.2, 30, 4), sent_s=0.2, first_token_s=0.35, finished_s=1.0,
                      token_steps=((2, 3), (5, 6))),
    )
    engine = EngineRun(served, ends, end_s=1.0, preemptions=1, scheduled=12, peak_blocks=5, total_blocks=10,
                       peak_in_flight=3, timeline=())
    result = measure(BenchmarkRun(num_prompts=3), engine)
    # TPOT = (latency - TTFT) / (output tokens - 1), over requests with more than one: A 0.4 / 3, C 0.65 / 3
    tpot_a, tpot_c = (0.5 - 0.1) / 3, ((1.0 - 0.2) - (0.35 - 0.2)) / 3
    assert result.tpot.mean_ms == pytest.approx((tpot_a + tpot_c) / 2 * 1000)
    assert result.tpot.p99_ms == pytest.approx((tpot_a + 0.99 * (tpot_c - tpot_a)) * 1000)  # numpy's linear rule
    # ITL: every gap between two tokens; C's preemption leaves one gap from step 3 to step 5
    gaps = sorted([0.1, 0.15, 0.15] + [0.15, 0.4, 0.1])
    assert result.itl.mean_ms == pytest.approx(sum(gaps) / 6 * 1000)
    assert result.itl.median_ms == pytest.approx(0.15 * 1000)
    assert result.itl.p99_ms == pytest.approx((gaps[4] + 0.95 * (gaps[5] - gaps[4])) * 1000)
    assert result.ttft.mean_ms == pytest.approx((0.1 + 0.15 + 0.15) / 3 * 1000)
    assert result.e2el.median_ms == pytest.approx(0.5 * 1000)
    assert (result.total_input_tokens, result.total_output_tokens) == (60, 9)
    assert result.request_throughput == pytest.approx(3.0) and result.total_token_throughput == pytest.approx(69.0)


def test_request_rate_inf_sends_every_request_at_t0():
    timer, scheduler, _ = replica(context=2048)
    run = BenchmarkRun(num_prompts=64, request_rate=inf, input_len=1000, output_len=100)
    arrivals = run.arrivals()
    assert {a.time_s for a in arrivals} == {0.0}
    by_hand = measure(run, run_engine(timer, scheduler, [Arrival(0.0, 1000, 100) for _ in range(64)]))
    assert run_benchmark(timer, scheduler, run) == by_hand


def test_a_finite_rate_spreads_the_prompts_as_vllm_does():
    run = BenchmarkRun(num_prompts=500, request_rate=4.0, seed=7)
    times = [a.time_s for a in run.arrivals()]
    assert 0 < times[0] and times == sorted(times)
    assert times[-1] == pytest.approx(500 / 4.0)  # rescaled so that the last goes out at num_prompts / rate
    assert times != [a.time_s for a in BenchmarkRun(num_prompts=500, request_rate=4.0, seed=8).arrivals()]


def test_random_lengths_stay_in_vllms_interval():
    run = BenchmarkRun(num_prompts=2000, input_len=1000, output_len=101, range_ratio=0.3, seed=1)
    arrivals = run.arrivals()
    prompts = {a.prompt_tokens for a in arrivals}
    outputs = {a.output_tokens for a in arrivals}
    assert min(prompts) == 700 and max(prompts) == 1300  # [floor(1000 x 0.7), ceil(1000 x 1.3)], both ends drawn
    assert min(outputs) == floor(101 * 0.7) and max(outputs) == ceil(101 * 1.3)
    assert run.arrivals() == arrivals  # the seed fixes them


@pytest.mark.parametrize("rate", [inf, 30.0])
def test_max_concurrency_is_never_exceeded(rate):
    timer, scheduler, _ = replica(context=2048)
    run = BenchmarkRun(num_prompts=300, request_rate=rate, max_concurrency=8, input_len=1024, output_len=64,
                       range_ratio=0.5)
    engine = run_engine(timer, scheduler, run.arrivals(), run.max_concurrency)
    assert engine.peak_in_flight == 8
    # sweep the requests' [sent, finished] spans: never more than 8 at once
    events = sorted([(r.sent_s, 1) for r in engine.served] + [(r.finished_s, -1) for r in engine.served],
                    key=lambda e: (e[0], e[1]))
    in_flight, most = 0, 0
    for _, change in events:
        in_flight += change
        most = max(most, in_flight)
    assert most <= 8 and len(engine.served) == 300
    assert all(r.sent_s >= r.arrival.time_s for r in engine.served)
    assert engine.scheduled / len(engine.step_ends_s) <= 8


def test_itl_and_tpot_means_agree_when_every_request_streams_alike():
    timer, scheduler, _ = replica(context=2048)
    result = run_benchmark(timer, scheduler, BenchmarkRun(num_prompts=200, max_concurrency=32, output_len=100))
    assert result.preemptions == 0
    assert result.itl.mean_ms == pytest.approx(result.tpot.mean_ms, rel=1e-9)


VLLM_KEYS = {"completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
             "output_throughput", "total_token_throughput"} | {
    f"{stat}_{metric}_ms" for stat in ("mean", "median", "std", "p99") for metric in ("ttft", "tpot", "itl", "e2el")}


def test_bench_json_has_vllms_saved_result_keys(tmp_path):
    proc = _cli("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-prompts", "100", "--request-rate", "inf",
                "--max-concurrency", "8", "--input-len", "512", "--output-len", "64", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = _strict_json(proc.stdout)
    assert VLLM_KEYS <= set(data)
    assert data["completed"] == 100 and data["total_input_tokens"] == 51200 and data["total_output_tokens"] == 6400
    assert data["request_rate"] == "inf" and data["max_concurrency"] == 8 and data["simulated_peak_in_flight"] == 8
    table = _cli("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-prompts", "100", "--max-concurrency", "8",
                 "--input-len", "512", "--output-len", "64", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    for label in ("Successful requests:", "Benchmark duration (s):", "Total generated tokens:",
                  "Request throughput (req/s):", "Output token throughput (tok/s):", "Total token throughput (tok/s):",
                  "Mean TTFT (ms):", "Median TPOT (ms):", "P99 ITL (ms):", "Mean E2EL (ms):"):
        assert label in table.stdout
    assert f"Mean TPOT (ms):{' ' * 26}{data['mean_tpot_ms']:.2f}" in table.stdout


def test_perf_concurrency_json_keys(tmp_path):
    proc = _cli("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--prompt-tokens", "1024", "--output-tokens", "128",
                "--concurrency", "32", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    loop = _strict_json(proc.stdout)["closed_loop"]
    assert set(loop) == {"concurrency", "running", "limit", "prefill_steps", "cycle_steps", "prefill_step_s",
                         "decode_step_s", "ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s", "requests_per_s",
                         "output_tokens_per_s", "kv_tokens_peak", "pool_tokens", "prefill_hold_steps",
                         "prefill_batch_prompts"}
    assert loop["concurrency"] == loop["running"] == 32 and loop["limit"] == "" and loop["queue_s"] == 0
    assert loop["prefill_hold_steps"] == loop["prefill_batch_prompts"] == 0  # no prefill delayer
    assert loop["output_tokens_per_s"] == pytest.approx(loop["requests_per_s"] * 128)


def test_perf_past_capacity_gives_a_finite_run_not_infinity(tmp_path):
    proc = _cli("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--prompt-tokens", "1024", "--output-tokens", "128",
                "--rate", "200", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = _strict_json(proc.stdout)
    steady, run = data["steady_state"], data["finite_run"]
    assert steady["keeps_up"] is False and steady["limit"] and steady["ttft_s"] is None
    assert run["completed"] == 1000 and run["request_rate"] == 200
    assert 0 < run["request_throughput"] < 200  # it serves what it can; the rest queue
    table = _cli("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "200", cwd=tmp_path)
    assert "cannot keep up" in table.stdout and "a simulated run of 1,000 requests" in table.stdout
    assert "inf" not in table.stdout


@pytest.mark.parametrize("args, needle", [
    (("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "2", "--concurrency", "4"), "--rate and --concurrency"),
    (("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "0"), "--concurrency"),
    (("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--rate", "nan"), "--rate"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-prompts", "20001"), "--num-prompts"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-prompts", "20000", "--output-len", "1000"), "--output-len"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "nan"), "--request-rate"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "0"), "--request-rate"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--request-rate", "soon"), "--request-rate"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--random-range-ratio", "1"), "--random-range-ratio"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--random-range-ratio", "inf"), "--random-range-ratio"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-concurrency", "0"), "--max-concurrency"),
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-len", "0"), "--input-len"),
])
def test_bad_options_are_one_line_exit_2(tmp_path, args, needle):
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith("error:") and needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_sglang_runs_each_batch_of_scattered_arrivals_as_a_prefill_pass_of_its_own():
    """Lengths that vary scatter the requests' ends: about R / (N - 1) arrive a decode step, and SGLang, which runs a
    prefill batch alone before any decode, adds (N - 1)(1 - e^-a) such passes a cycle (bench/SPEED_PROTOCOL.md, the
    SGLang-prefill amendment); vLLM puts the prompts beside the decoding requests, and fixed lengths keep the packed
    cycle."""
    from dataclasses import replace as with_
    from math import exp

    timer, scheduler, _ = replica("qwen3-30b-a3b", "h100-sxm", context=2048)
    sglang = with_(timer, mixes_prefill=False)
    shape, clients = Workload(500, 500), 100
    packed = closed_loop(sglang, scheduler, shape, clients)
    scattered = closed_loop(sglang, scheduler, shape, clients, lengths_vary=True)
    assert closed_loop(timer, scheduler, shape, clients, lengths_vary=True) == closed_loop(timer, scheduler, shape, clients)
    arrivals = 100 / 499
    batches = 499 * (1 - exp(-arrivals))
    assert scattered.prefill_steps == ceil(batches)  # one chunk each: 100 / batches x 500 tokens within the budget
    # the cycle: 499 decode steps of the 100 running, and the prefill passes
    cycle = 499 * scattered.decode_step_s + batches * scattered.prefill_step_s
    assert scattered.requests_per_s == pytest.approx(100 / cycle)
    assert scattered.tpot_s == pytest.approx((cycle - scattered.prefill_step_s) / 499)
    assert scattered.tpot_s > packed.tpot_s and scattered.requests_per_s < packed.requests_per_s
    from planner.estimator.engines.registry import engine

    assert not engine("sglang").mixes_prefill and engine("vllm").mixes_prefill and engine("trtllm").mixes_prefill


def test_sglang_polling_every_few_decode_steps_prefills_their_arrivals_together():
    """With --scheduler-recv-interval I SGLang polls for new requests once every I decode steps
    (sglang/srt/managers/scheduler_recv_skipper.py; bench/SPEED_PROTOCOL.md, the receive-interval amendment): a cycle's
    (N - 1) / I polls each prefill a Poisson number of arrivals of mean R I / (N - 1), so fewer, larger prefill passes,
    and a request waits (I - 1) / 2 decode steps for its poll."""
    from dataclasses import replace as with_
    from math import exp

    timer, scheduler, _ = replica("qwen3-30b-a3b", "h100-sxm", context=2048)
    sglang = with_(timer, mixes_prefill=False)
    shape, clients = Workload(500, 500), 100
    every = closed_loop(sglang, scheduler, shape, clients, lengths_vary=True)
    assert closed_loop(sglang, scheduler, shape, clients, lengths_vary=True, recv_interval=1) == every
    polled = closed_loop(sglang, scheduler, shape, clients, lengths_vary=True, recv_interval=10)
    batches = 499 / 10 * (1 - exp(-100 * 10 / 499))
    assert polled.prefill_steps == ceil(batches)
    cycle = 499 * polled.decode_step_s + batches * polled.prefill_step_s
    # a client's cycle holds its request's wait for the poll (the correction on a request's wait for its prefill)
    assert polled.requests_per_s == pytest.approx(100 / (cycle + 4.5 * polled.decode_step_s))
    assert polled.tpot_s < every.tpot_s and polled.prefill_step_s > every.prefill_step_s
    assert polled.ttft_s == pytest.approx(4.5 * polled.decode_step_s + polled.prefill_step_s)
    assert polled.e2e_s == pytest.approx(polled.ttft_s + 499 * polled.tpot_s)
    with pytest.raises(PlannerInputError, match="--scheduler-recv-interval"):
        closed_loop(sglang, scheduler, shape, clients, lengths_vary=True, recv_interval=0)


def test_a_step_with_prompts_on_sglang_is_their_pass_then_the_decode():
    """SGLang runs a prefill batch as a forward pass of its own, before the decode (bench/SPEED_PROTOCOL.md, the
    prompts-apart amendment): a step carrying both is the two passes, term by term; vLLM times one pass of both; a
    step of prompts alone or of decodes alone is one pass either way."""
    from dataclasses import replace as with_

    from planner.catalog.load import load_catalog
    from planner.estimator.performance import Step, replica_timer
    from planner.model.sources import resolve_model

    timer, _, _ = replica("qwen3-30b-a3b", "h100-sxm", context=4096)
    catalog = load_catalog()
    sglang = replica_timer(resolve_model(catalog, "qwen3-30b-a3b"), "bf16", "auto", catalog.gpus.get("h100-sxm"), 1, 1,
                           catalog, "sglang")
    assert timer.mixes_prefill and not sglang.mixes_prefill  # the engine registry's word
    positions = 512 * 513 / 2
    mixed, prompts, decode = Step(32, 1500.0, 512, positions, 1), Step(0, 1500.0, 512, positions, 1), Step(32, 1500.0)
    for engine_timer in (sglang, with_(timer, mixes_prefill=False)):
        total, terms, _ = engine_timer.step(mixed)
        assert total == pytest.approx(engine_timer.forward_s(prompts) + engine_timer.forward_s(decode), rel=1e-12)
        assert engine_timer.step_s(mixed) == pytest.approx(total, rel=1e-12)
        assert terms == engine_timer.forward(prompts)[1].plus(engine_timer.forward(decode)[1])
        assert sum(terms.terms_s().values()) == pytest.approx(terms.total_s, rel=1e-12)
        for alone in (prompts, decode):
            assert engine_timer.step_s(alone) == engine_timer.forward_s(alone)
    assert timer.step_s(mixed) == timer.forward_s(mixed) < with_(timer, mixes_prefill=False).step_s(mixed)


def test_sglang_runs_a_prompt_alone_and_the_decoding_requests_wait_it_out():
    """SGLang runs every prompt it can admit before it decodes again (bench/SPEED_PROTOCOL.md, the prefill-first
    amendment): in the simulator a request that arrives while another decodes gets a step of its own, its prompt's
    pass alone, and its first token at that step's end; the decoding request gains no token in that step (its token
    steps skip it). On vLLM the prompt rides beside the decode."""
    from dataclasses import replace as with_

    from planner.estimator.benchmark import inter_token_latencies
    from planner.estimator.performance import Step

    timer, scheduler, _ = replica("qwen3-30b-a3b", "h100-sxm", context=4096)
    arrivals = [Arrival(0.0, 1000, 200), Arrival(0.05, 1000, 200)]
    runs = {mixes: run_engine(with_(timer, mixes_prefill=mixes), scheduler, arrivals) for mixes in (True, False)}
    vllm, sglang = ({r.arrival.time_s: r for r in runs[m].served} for m in (True, False))
    # the first request prefills alone: the same on both
    assert sglang[0.0].first_token_s == vllm[0.0].first_token_s
    ends = runs[False].step_ends_s
    step = next(i for i, end in enumerate(ends) if end > 0.05) + 1  # the step after the arrival carries its prompt
    prompt_pass = timer.forward_s(Step(0, 0.0, 1000, 1000 * 1001 / 2, 1))
    assert ends[step] - ends[step - 1] == pytest.approx(prompt_pass, rel=1e-9)
    assert sglang[0.05].first_token_s == ends[step]
    # the first request: tokens up to the step before, none in it, then on from the step after
    assert sglang[0.0].token_steps == ((0, step - 1), (step + 1, 200))
    assert vllm[0.0].token_steps == ((0, 199),)
    # its gap across the prompt's step is that step and the decode after it; 199 gaps a request, as many tokens less 1
    gaps = inter_token_latencies(runs[False])
    assert len(gaps) == 2 * 199
    assert ends[step + 1] - ends[step - 1] in gaps
    assert runs[False].end_s > runs[True].end_s


@pytest.mark.parametrize("model, gpu, prompt, output, clients", [
    ("llama-3.1-8b", "h100-sxm", 1024, 128, 16),
    ("llama-3.1-8b", "h100-sxm", 1024, 128, 128),
    ("llama-3.1-8b", "l40s", 2000, 200, 32),  # prompts cut into chunks: the budget is 2,048 tokens
    ("qwen3-30b-a3b", "h100-sxm", 1024, 256, 64),
])
def test_sglangs_closed_loop_with_fixed_lengths_runs_in_lockstep_as_the_simulator_does(model, gpu, prompt, output,
                                                                                         clients):
    """With fixed lengths SGLang's clients stay in lockstep (the prefill-first amendment): a cycle is the R prompts'
    passes alone, FCFS at the whole budget a pass, then N - 1 decode passes of all R; request i's first token comes
    at the end of the pass holding its prompt's last token, so the earlier passes are in its TTFT and the later ones in
    its TPOT. The simulator, run as vllm bench serve --max-concurrency C, finds the same loop (measured within 0.6%)."""
    from dataclasses import replace as with_
    from itertools import accumulate

    timer, scheduler, _ = replica(model, gpu, context=prompt + output)
    sglang = with_(timer, mixes_prefill=False)
    assert sglang.runs_prompts_apart
    loop = closed_loop(sglang, scheduler, Workload(prompt, output), clients)
    budget = scheduler.max_num_batched_tokens
    full_steps, rest = divmod(clients * prompt, budget)
    context = prompt + output / 2
    passes = [sglang.step_s(Step(0, context, budget, budget * (prompt + 1) / 2, ceil(budget / prompt)))] * full_steps
    if rest:
        passes.append(sglang.step_s(Step(0, context, rest, rest * (prompt + 1) / 2, ceil(rest / prompt))))
    ends = list(accumulate(passes))
    decode = sglang.step_s(Step(clients, context))
    cycle = ends[-1] + (output - 1) * decode
    first = sum(ends[ceil((i + 1) * prompt / budget) - 1] for i in range(clients)) / clients
    assert loop.running == clients and loop.prefill_steps == len(passes)
    assert loop.requests_per_s == pytest.approx(clients / cycle, rel=1e-9)
    assert loop.ttft_s == pytest.approx(first, rel=1e-9)
    assert loop.tpot_s == pytest.approx((cycle - first) / (output - 1), rel=1e-9)
    assert ends[0] < loop.ttft_s < ends[-1]  # waits for the prompts ahead of it, not for all of them
    run = run_benchmark(sglang, scheduler, BenchmarkRun(num_prompts=20 * clients, max_concurrency=clients,
                                                        input_len=prompt, output_len=output))
    assert loop.requests_per_s == pytest.approx(run.request_throughput, rel=0.01)
    assert loop.tpot_s * 1000 == pytest.approx(run.tpot.mean_ms, rel=0.01)
    assert loop.ttft_s * 1000 == pytest.approx(run.ttft.mean_ms, rel=0.01)


def test_an_sglang_prefill_pass_takes_the_whole_budget():
    """SGLang sizes a prefill batch without the running requests (PrefillAdder gets running_bs only with mixed chunks;
    bench/SPEED_PROTOCOL.md, the prefill-budget amendment): the packed closed loop fills its prompt steps with the whole
    budget B, not (B - R) P / (P - 1); the simulator admits a budget's prompt beside decoding requests uncut; the steady
    state's TTFT at a trickle of requests is the prompt's pass alone."""
    from dataclasses import replace as with_

    from planner.estimator.capacity import Slo, steady_state
    from planner.estimator.performance import Step, prompt_room

    assert prompt_room(2048, 100, 1, True) == 1948 and prompt_room(2048, 100, 4, True) == 1648
    assert prompt_room(2048, 100, 1, False) == 2048
    timer, scheduler, _ = replica("llama-3.1-8b", "h100-sxm", context=8192, max_num_batched_tokens=2048)
    sglang_timer, sglang = with_(timer, mixes_prefill=False), scheduler
    shape, clients = Workload(1000, 200), 64
    # vLLM: F = (2048 - 64) x 1000 / 999 tokens a full step, 64 x 1000 prompt tokens in ceil(64,000 / F) steps
    full = (2048 - 64) * 1000 / 999
    assert closed_loop(timer, scheduler, shape, clients).prefill_steps == ceil(64 * 1000 / full) == 33
    assert closed_loop(sglang_timer, sglang, shape, clients).prefill_steps == ceil(64 * 1000 / 2048) == 32
    # the simulator: one request decodes while a 2,048-token prompt arrives; SGLang runs it in one pass, vLLM cuts it
    arrivals = [Arrival(0.0, 100, 100), Arrival(0.01, 2048, 10)]
    vllm_run = run_engine(timer, scheduler, arrivals)
    sglang_run = run_engine(sglang_timer, sglang, arrivals)
    vllm_ttft, sglang_ttft = ({r.arrival.time_s: r.first_token_s for r in run.served}[0.01]
                              for run in (vllm_run, sglang_run))
    start = next(end for end in sglang_run.step_ends_s if end > 0.01)  # the pass starts when the step before ends
    assert sglang_ttft == pytest.approx(start + timer.forward_s(Step(0, 0.0, 2048, 2048 * 2049 / 2, 1)), rel=1e-9)
    assert vllm_ttft > start + timer.forward_s(Step(1, 101.0, 2047, 2047 * 2048 / 2, 1))  # two steps: 2,047 then 1
    # the steady state at a trickle: the first token comes out of the prompt's own pass
    trickle = steady_state(sglang_timer, sglang, shape, 1e-4, Slo())
    assert trickle.ttft_mean_s == pytest.approx(sglang_timer.step_s(Step(0, 1100.0, 1000, 1000 * 1001 / 2, 1)),
                                                rel=1e-3)


def test_under_dp_attention_a_prompt_carrying_step_is_one_pass_of_every_group():
    """SGLang's DP groups join every forward and vote on the decode graph, min-reduced: a step in which one group
    prefills is one pass, the others decoding in it ungraphed (bench/SPEED_PROTOCOL.md, the DP-attention step
    amendment). The closed loop with varying lengths: of the N - 1 tokens a request gains, M (1 - g/dp) come out of the
    M shared passes (g: the groups prefilling, one per prompt of the batch), the rest out of graphed decode steps; with dp = 1 the passes are the prompts' alone."""
    from dataclasses import replace as with_
    from math import ceil, exp

    from planner.catalog.load import load_catalog
    from planner.estimator.capacity import StepTimes
    from planner.estimator.performance import Step, replica_timer
    from planner.model.sources import resolve_model

    catalog = load_catalog()
    arch, card = resolve_model(catalog, "qwen3-30b-a3b"), catalog.gpus.get("h100-sxm")
    dp = replica_timer(arch, "bf16", "auto", card, 4, 1, catalog, "sglang", None, 4, 4)
    assert dp.dp == 4 and not dp.mixes_prefill and not dp.runs_prompts_apart
    mixed = Step(64, 1200.0, 800, 800 * 801 / 2, 1)
    assert dp.step(mixed) == dp.forward(mixed) and dp.step_s(mixed) == dp.forward_s(mixed)
    assert with_(dp, dp=1).prompts_apart(mixed)  # the same layout without DP attention: two passes
    _, sglang, _ = replica("qwen3-30b-a3b", "h100-sxm", context=4096)  # the pool and budget; the timer says SGLang
    shape, clients = Workload(500, 300), 64
    loop = closed_loop(dp, sglang, shape, clients, lengths_vary=True)
    times = StepTimes(dp)
    batches = 299 * (1 - exp(-64 / 299))
    assert ceil(64 / batches) == 2  # a batch's 1.1 prompts on average: two groups prefill in a shared pass
    shared = 64 * (1 - 2 / 4)  # the other two groups' requests decode in each shared pass
    # one chunk: a group's prompt of 500 tokens is under its share of the budget
    assert 500 <= sglang.max_num_batched_tokens // 4
    pass_s = times.mean_step(shared, 550.0, 64 * 500 / batches, 500, prompts=2)
    graphed = 299 - batches * shared / 64
    assert loop.prefill_step_s == pytest.approx(pass_s, rel=1e-12)
    assert loop.requests_per_s == pytest.approx(64 / (graphed * loop.decode_step_s + batches * pass_s), rel=1e-12)
    alone = closed_loop(with_(dp, dp=1), sglang, shape, clients, lengths_vary=True)
    without = StepTimes(with_(dp, dp=1))
    assert alone.prefill_step_s == pytest.approx(without.mean_step(0, 550.0, 64 * 500 / batches, 500))
    # the simulator: a prompt arriving while another request decodes gets its first token at the shared pass's end
    run = run_engine(dp, sglang, [Arrival(0.0, 100, 100), Arrival(0.01, 1000, 10)])
    first = {r.arrival.time_s: r.first_token_s for r in run.served}[0.01]
    step = next(i for i, end in enumerate(run.step_ends_s) if end > 0.01) + 1  # the step that carries its prompt
    assert first == run.step_ends_s[step]


def _dp_replica(budget: int, slots: int):
    """A DP-4 SGLang timer (Qwen3-30B-A3B on 4 x H100, EP 4) and a scheduler of `budget` tokens a step, `slots`
    requests at once."""
    from dataclasses import replace as with_

    from planner.catalog.load import load_catalog
    from planner.estimator.performance import replica_timer
    from planner.model.sources import resolve_model

    catalog = load_catalog()
    arch, card = resolve_model(catalog, "qwen3-30b-a3b"), catalog.gpus.get("h100-sxm")
    timer = replica_timer(arch, "bf16", "auto", card, 4, 1, catalog, "sglang", None, 4, 4)
    _, scheduler, _ = replica("qwen3-30b-a3b", "h100-sxm", context=8192)
    return timer, with_(scheduler, max_num_batched_tokens=budget, max_num_seqs=slots)


def test_under_dp_attention_each_group_chunks_its_own_prompts_at_its_share_of_the_budget():
    """SGLang divides the chunked-prefill size over the DP groups (server_args.py _handle_data_parallelism @ v0.5.12):
    a 2,000-token prompt on one group of four takes ceil(2,000 / (2,048 / 4)) = 4 passes, each a quarter of the batch's
    tokens, where the whole budget would have taken it in one (bench/SPEED_PROTOCOL.md, the DP prefill amendment)."""
    from math import exp

    from planner.estimator.capacity import StepTimes

    timer, scheduler = _dp_replica(budget=2048, slots=32)
    loop = closed_loop(timer, scheduler, Workload(2000, 300), 32, lengths_vary=True)
    assert loop.running == 32 and loop.kv_tokens_peak == 32 * scheduler.held_tokens(2300)
    batches = 299 * (1 - exp(-32 / 299))
    prompts = 32 / batches
    assert ceil(prompts / 4) == 1 and ceil(prompts) == 2
    assert loop.prefill_steps == ceil(batches * 4)
    shared = 32 * (1 - 2 / 4)  # two groups prefill, the other two decode
    assert loop.prefill_step_s == pytest.approx(StepTimes(timer).mean_step(shared, 2150.0, prompts * 2000 / 4, 2000,
                                                                           prompts=2), rel=1e-12)
    graphed = 299 - batches * 4 * shared / 32
    assert loop.requests_per_s == pytest.approx(32 / (graphed * loop.decode_step_s + batches * 4 * loop.prefill_step_s),
                                                rel=1e-12)
    assert loop.ttft_s == pytest.approx(4 * loop.prefill_step_s, rel=1e-12)  # its own four passes


def test_dp_groups_chunks_that_outlast_the_gap_between_batches_share_passes():
    """32 clients with 40-token outputs: a batch of 1.5 prompts every 1.8 decode steps, each taking 4 passes of
    512-token chunks, would take 87 passes of a 39-step cycle. The groups run those chunks in the same passes: the
    batches merge until their passes fit, 39 / 4 batches of 3.3 prompts, every group prefilling in each (bench/
    SPEED_PROTOCOL.md, the correction on chunks that outlast the gap between batches)."""
    from math import exp

    timer, scheduler = _dp_replica(budget=2048, slots=32)
    assert 39 * (1 - exp(-32 / 39)) * 4 > 39
    loop = closed_loop(timer, scheduler, Workload(2000, 40), 32, lengths_vary=True)
    assert loop.running == 32 and loop.prefill_steps == 39
    assert loop.cycle_steps == 39 + 39  # no group decodes beside a prefill: every request's 39 tokens graphed
    assert loop.tpot_s > 0 and loop.requests_per_s > 0


def test_a_batch_holds_at_most_the_loops_clients():
    """A batch's prompts come from the R running requests: at least one batch a cycle, merging stops there, and a hold
    that waits for every group stops at the mixed branch's passes when there are fewer clients than groups
    (bench/SPEED_PROTOCOL.md, the correction on a batch holding at most the loop's clients)."""
    from planner.estimator.engines.sglang import prefill_delayer

    timer, scheduler = _dp_replica(budget=4096, slots=64)
    one = closed_loop(timer, scheduler, Workload(500, 2), 1, lengths_vary=True, delayer=prefill_delayer(None))
    assert one.prefill_batch_prompts == 1 and one.prefill_hold_steps == 29 and one.tpot_s > 0
    # two clients at DP 4, both prompts in the one batch: nobody decodes beside its passes (the correction on the
    # requests decoding beside a DP prefill)
    two = closed_loop(timer, scheduler, Workload(4000, 2), 2, lengths_vary=True, delayer=prefill_delayer(None))
    assert two.prefill_batch_prompts == 2 and two.tpot_s > 0 and two.e2e_s >= two.ttft_s
    # 8,000-token prompts at 512 tokens a group's pass: 16 passes each, more than the 9 decode steps hold
    timer, scheduler = _dp_replica(budget=2048, slots=64)
    flood = closed_loop(timer, scheduler, Workload(8000, 10), 8, lengths_vary=True)
    assert flood.prefill_steps == ceil(2 * 8000 / 512) == 32  # one batch of all 8: two prompts on each group
    assert flood.tpot_s > 0 and flood.cycle_steps == flood.prefill_steps + 9
    # at 256 tokens a group's pass, 30 passes a prompt: 7.8 batches would take 234 of the 149 decode steps; merged into
    # 4.97 batches of 1.6 prompts (one a group) their passes fill the 149, where the merge stops
    timer, scheduler = _dp_replica(budget=1024, slots=64)
    fill = closed_loop(timer, scheduler, Workload(7500, 150), 8, lengths_vary=True)
    assert fill.prefill_steps in (149, 150) and fill.tpot_s > 0


@pytest.mark.parametrize("version, slots, held", [
    ("0.5.9", 64, 3 * 299 / 64),  # every group holds a prompt after 4 arrivals: released at once
    ("0.5.12", 64, 15 * 299 / 64),  # then waits for 4 a group (the prompts a 1,024-token chunk touches), unbounded
    ("0.5.23", 64, 29),  # ... at most 29 passes from v0.5.19
    ("0.5.23", 128, 3 * 299 / 64),  # 16 slots a group kept free: room at once
])
def test_sglangs_prefill_delayer_holds_a_batch_until_its_groups_fill_or_its_passes_run_out(version, slots, held):
    """64 clients, 300-token outputs: an arrival every 299 / 64 passes, dealt round robin over 4 groups. The delayer
    holds the prefill after the first (managers/prefill_delayer.py; bench/SPEED_PROTOCOL.md, the DP prefill
    amendment): the batches of a cycle are the polls over (1 / (1 - e^-a) + T), and a request waits
    (T + a T^2 / 2) / (1 + a T) passes in its TTFT."""
    from math import exp

    from planner.estimator.engines.sglang import prefill_delayer

    timer, scheduler = _dp_replica(budget=4096, slots=slots)
    shape = Workload(500, 300)
    plain = closed_loop(timer, scheduler, shape, 64, lengths_vary=True)
    loop = closed_loop(timer, scheduler, shape, 64, lengths_vary=True, delayer=prefill_delayer(version))
    rate = 64 / 299
    batches = 299 / (1 / (1 - exp(-rate)) + held)
    chunks = ceil(ceil(64 / batches / 4) * 500 / 1024)  # the busiest group's prompts in 1,024-token chunks
    assert loop.prefill_steps == ceil(batches * chunks)
    waited = (held + rate * held ** 2 / 2) / (1 + rate * held)
    assert loop.ttft_s == pytest.approx(waited * loop.decode_step_s + chunks * loop.prefill_step_s, rel=1e-9)
    assert loop.prefill_steps < plain.prefill_steps and loop.ttft_s > plain.ttft_s
    assert loop.prefill_hold_steps == pytest.approx(held, rel=1e-12)
    assert loop.e2e_s == pytest.approx(loop.ttft_s + 299 * loop.tpot_s)  # the hold is in the client's cycle
    assert loop.prefill_batch_prompts == pytest.approx(64 / batches, rel=1e-12)
    assert plain.prefill_hold_steps == 0 and plain.prefill_batch_prompts == 0


def test_the_prefill_delayer_is_timed_under_dp_attention_with_varying_lengths_only():
    from dataclasses import replace as with_

    from planner.estimator.engines.sglang import prefill_delayer

    timer, scheduler = _dp_replica(budget=4096, slots=64)
    for kwargs in (dict(timer=with_(timer, dp=1), lengths_vary=True), dict(timer=timer, lengths_vary=False)):
        with pytest.raises(PlannerInputError, match=r"^--prefill-delayer: .*--dp D \(D > 1\)"):
            closed_loop(kwargs["timer"], scheduler, Workload(500, 300), 64, lengths_vary=kwargs["lengths_vary"],
                        delayer=prefill_delayer(None))
    with pytest.raises(PlannerInputError, match=r"^--prefill-delayer-max-delay-passes: 0 must be at least 1"):
        prefill_delayer(None, 0)


def test_perf_takes_varying_lengths_for_its_closed_loop_only():
    from planner import api
    from planner.errors import PlannerInputError

    args = dict(gpu="h100-sxm", tp=2, engine="sglang", concurrency=64, prompt_tokens=500, output_tokens=500)
    fixed = api.perf("qwen3-30b-a3b", **args).closed_loop
    scattered = api.perf("qwen3-30b-a3b", varying_lengths=True, **args).closed_loop
    assert scattered.output_tokens_per_s < fixed.output_tokens_per_s and scattered.tpot_s > fixed.tpot_s
    with pytest.raises(PlannerInputError, match=r"^--varying-lengths: only with --concurrency"):
        api.perf("qwen3-30b-a3b", gpu="h100-sxm", varying_lengths=True)


def test_perf_takes_sglangs_receive_interval_for_a_varying_closed_loop_only(tmp_path):
    """`planner perf --scheduler-recv-interval I` times SGLang's polling in the closed loop whose lengths vary, and is
    refused (one line, exit 2) where it would change nothing."""
    from planner import api

    args = dict(gpu="h100-sxm", engine="sglang", concurrency=32, prompt_tokens=1000, output_tokens=1000)
    every = api.perf("qwen3-30b-a3b", varying_lengths=True, **args).closed_loop
    polled = api.perf("qwen3-30b-a3b", varying_lengths=True, scheduler_recv_interval=30, **args).closed_loop
    assert polled.prefill_steps < every.prefill_steps and polled.ttft_s > every.ttft_s
    with pytest.raises(PlannerInputError, match="--scheduler-recv-interval"):
        api.perf("qwen3-30b-a3b", scheduler_recv_interval=30, **args)
    refused = _cli("perf", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--engine", "vllm", "--concurrency", "8",
                   "--varying-lengths", "--scheduler-recv-interval", "10", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("error: --scheduler-recv-interval")


def test_perf_takes_sglangs_prefill_delayer_under_dp_attention_only(tmp_path):
    """`planner perf --prefill-delayer` times SGLang's --enable-prefill-delayer in the DP-attention closed loop whose
    lengths vary (fewer, larger prefill batches, each waited for in the TTFT), and is refused (one line, exit 2) where
    it would change nothing."""
    from planner import api

    args = dict(gpu="h100-sxm", tp=4, dp=4, ep=4, engine="sglang", concurrency=64, prompt_tokens=2000,
                output_tokens=300, varying_lengths=True)
    plain = api.perf("qwen3-30b-a3b", **args).closed_loop
    delayed = api.perf("qwen3-30b-a3b", prefill_delayer=True, **args).closed_loop
    assert delayed.prefill_steps < plain.prefill_steps and delayed.ttft_s > plain.ttft_s
    assert delayed.tpot_s < plain.tpot_s  # fewer passes that stall every group's decode
    shown = _cli("perf", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--tp", "4", "--dp", "4", "--ep", "4", "--engine",
                 "sglang", "--concurrency", "64", "--prompt-tokens", "2000", "--output-tokens", "300",
                 "--varying-lengths", "--prefill-delayer", "--format", "json", cwd=tmp_path)
    loop = json.loads(shown.stdout)["closed_loop"]
    assert loop["prefill_hold_steps"] == pytest.approx(delayed.prefill_hold_steps)
    assert loop["prefill_batch_prompts"] == pytest.approx(delayed.prefill_batch_prompts) and loop["tpot_s"] > 0
    with pytest.raises(PlannerInputError, match=r"^--prefill-delayer: "):
        api.perf("qwen3-30b-a3b", prefill_delayer=True, **{**args, "engine": "vllm"})
    for drop in (["--dp", "4"], ["--varying-lengths"]):
        argv = ["perf", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--tp", "4", "--dp", "4", "--ep", "4", "--engine",
                "sglang", "--concurrency", "64", "--varying-lengths", "--prefill-delayer"]
        at = argv.index(drop[0])
        refused = _cli(*(argv[:at] + argv[at + len(drop):]), cwd=tmp_path)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith("error: --prefill-delayer: ")


def test_sglang_runs_a_hybrid_model_at_most_its_state_slots_worth_of_requests():
    """SPEED_PROTOCOL's correction on SGLang's running-request cap: resolve_max_num_reqs (kv_cache_configurator.py
    @ v0.5.23) admits at most max_mamba_cache_size // 5 requests per worker for Qwen3.5 (43 on one H200 at 9,216
    tokens), fewer than the token pool holds (61): a closed loop of 1,024 clients runs that many, and so does the
    engine budget's concurrency."""
    from planner import api
    from planner.catalog.load import load_catalog
    from planner.estimator.engines import EngineSettings, engine_budget
    from planner.estimator.memory import GpuTarget, Request
    from planner.model.sources import resolve_model

    catalog = load_catalog()
    arch = resolve_model(catalog, "qwen3.5-27b")
    budget = engine_budget(arch, Request(context=9216, batch=1, tp=1, pp=1, precision="bf16", kv_dtype="auto"),
                           EngineSettings("sglang"), GpuTarget.from_catalog(catalog.gpus.get("h200-sxm")), catalog)
    cap = budget.layout.running_requests
    assert 0 < cap < budget.kv_cache_capacity_tokens // 9216
    loop = api.perf("qwen3.5-27b", gpu="h200-sxm", engine="sglang", concurrency=1024, prompt_tokens=8192,
                    output_tokens=1024).closed_loop
    assert loop.running == cap and loop.limit == "state slots"
    # vLLM's budget carries no such cap: its pool alone holds the loop
    assert api.perf("qwen3.5-27b", gpu="h200-sxm", concurrency=1024, prompt_tokens=8192,
                    output_tokens=1024).closed_loop.limit == "kv pool"


def test_sglang_runs_deepseek_v4_at_its_servers_max_running_requests_whatever_the_dp_groups():
    """DeepSeek-V4's default max_running_requests (256) is the server's: each of the attention DP workers runs
    256 // dp of them (resolve_max_num_reqs, kv_cache_configurator.py:3128 @ v0.5.23), so the replica runs 256."""
    from planner import api

    for dp in (1, 8):
        loop = api.perf("deepseek-v4-flash", gpu="h200-sxm", engine="sglang", tp=8, dp=dp, ep=dp, concurrency=4096,
                        prompt_tokens=1024, output_tokens=256).closed_loop
        assert loop.running == 256 and loop.limit == "max_running_requests"


def test_sglang_runs_at_most_its_default_max_running_requests():
    """SPEED_PROTOCOL's correction on SGLang's default limit: without --max-running-requests a worker runs at most
    clamp(tokens / context x 512, 2048, 4096) requests (resolve_max_num_reqs @ v0.5.23), however many the pool
    holds."""
    from planner import api

    loop = api.perf("llama-3.1-8b", gpu="h200-sxm", engine="sglang", concurrency=20000, prompt_tokens=64,
                    output_tokens=64).closed_loop
    assert loop.running == 4096 and loop.limit == "max_running_requests"
    assert loop.pool_tokens // 128 > 4096  # the pool alone would hold more



_ARRIVALS = st.lists(st.tuples(st.floats(0, 2), st.integers(1, 3000), st.integers(1, 300)), min_size=1, max_size=40)


# SGLang's admission by reserved output (its constants at 0.5.23; `whole`: from 0.5.22 a fixed-length request's remaining
# output counts whole, before that at the decaying ratio)
def _reservation(whole, page_tokens=16):
    from planner.estimator.engines.base import OutputReservation

    return OutputReservation(init_ratio=0.7, min_ratio=0.098, decay=(0.7 - 0.098) / 600, retract_steps=20,
                             clip_tokens=4096, page_tokens=page_tokens, fixed_length_whole=whole)


@settings(max_examples=60, deadline=None)
@given(_ARRIVALS, st.booleans(), st.sampled_from([300, 2000]), st.sampled_from([None, True, False, "blocks"]))
def test_every_simulated_request_streams_each_token_once_whichever_scheduler(trace, mixes, pool_blocks, whole):
    """vLLM's scheduler or SGLang's prompts-first one (steps of prompts alone), admitting by prompt blocks, by
    reserved output (whole or at the ratio, retracting) or by blocks to completion (TensorRT-LLM), a pool roomy or
    tight enough to preempt: every request finishes, its tokens come out in increasing runs of steps that add up to its
    output, its first token before its last, and the inter-token gaps number its output less one."""
    from dataclasses import replace as with_
    from itertools import pairwise

    from planner.estimator.benchmark import inter_token_latencies
    from planner.estimator.capacity import Scheduler

    timer, _, _ = replica("llama-3.1-8b", "h100-sxm", context=4096)
    from planner.estimator.engines.base import BlocksToCompletion

    reservation = BlocksToCompletion() if whole == "blocks" else None if whole is None else _reservation(whole)
    scheduler = Scheduler(pool_tokens=16 * pool_blocks, block_tokens=16, max_num_batched_tokens=2048, max_num_seqs=32,
                          max_model_len=4096, reservation=reservation)
    arrivals = sorted((Arrival(t, prompt, output) for t, prompt, output in trace), key=lambda a: a.time_s)
    run = run_engine(with_(timer, mixes_prefill=mixes), scheduler, arrivals)
    assert len(run.served) == len(arrivals)
    for request in run.served:
        steps = request.token_steps
        assert sum(last - first + 1 for first, last in steps) == request.arrival.output_tokens
        assert all(first <= last < after for (first, last), (after, _) in pairwise(steps))
        assert request.sent_s <= request.first_token_s <= request.finished_s
    assert len(inter_token_latencies(run)) == sum(a.output_tokens - 1 for a in arrivals)


def test_vllms_free_queue_hands_out_the_front_and_keeps_a_preempted_chains_leading_blocks():
    """vLLM's free queue (block_pool.py @ v0.34.0): allocations take the front; a freed request's blocks without a hash
    (its partial last one) go to the front, its full ones to the end, tail first, so the blocks an allocation takes
    from a preempted request's chain are its last ones and the leading ones stay cached for its return."""
    from planner.estimator.simulate import _FreeQueue, _Request

    a, b = _Request(Arrival(0.0, 40, 8)), _Request(Arrival(0.0, 40, 8))
    queue = _FreeQueue(12)
    queue.take(8)  # a and b hold 4 blocks each; 4 never used stay free
    queue.give(3, 1, preempted=a)  # a preempted: 3 full blocks to the end, its partial one to the front
    assert queue.cached(a) == 3 and queue.cached(b) == 0
    queue.take(5)  # the partial block, then the 4 never used: a's chain untouched
    assert queue.cached(a) == 3
    queue.take(1)  # the next allocation evicts a's last full block
    assert queue.cached(a) == 2
    queue.give(4, 0)  # b finishes: its blocks queue up behind a's chain
    queue.reclaim(a, 2)  # a resumes and takes back its two leading blocks
    assert queue.cached(a) == 0
    queue.take(4)  # b's four, past the emptied run
    assert not any(blocks for _, blocks in queue.runs)


@pytest.mark.parametrize("clients", [160, 400])
def test_a_request_vllm_preempted_recomputes_only_what_its_cache_lost(clients):
    """With vLLM's prefix cache on (its default) a preempted request resumes from its own blocks still cached
    (bench/SPEED_PROTOCOL.md, the amendment on resumed requests): a pool-capped closed loop runs no longer, and its
    requests' TPOT is no higher, than the same run recomputing every preempted token (prefix cache off); with nothing
    preempted the two runs are the same run."""
    from dataclasses import replace as with_

    timer, scheduler, _ = replica("llama-3.1-8b", "h100-sxm", context=2048)
    tight = with_(scheduler, pool_tokens=60 * 2048)
    run = BenchmarkRun(num_prompts=4 * clients, max_concurrency=clients, input_len=1536, output_len=512)
    cached, recomputed = (run_benchmark(timer, with_(tight, prefix_cache=on), run) for on in (True, False))
    assert cached.preemptions > 0 and recomputed.preemptions > 0
    assert cached.duration_s < recomputed.duration_s and cached.tpot.mean_ms <= recomputed.tpot.mean_ms
    roomy = with_(run, max_concurrency=40)
    same = [run_benchmark(timer, with_(tight, prefix_cache=on), roomy) for on in (True, False)]
    assert same[0].preemptions == 0 and same[0] == same[1]


def test_vllm_admits_a_waiting_request_only_while_its_whole_prompt_fits():
    """vLLM's scheduler_reserve_full_isl (on by default from v0.19.0): a 6,000-token prompt whose first 48-token chunk
    would fit beside a running request is not admitted while the pool (450 blocks) cannot hold its 375 blocks beside
    the other's 125-250, so nothing is preempted and it starts when the other is done."""
    from planner.estimator.capacity import Scheduler

    timer, _, _ = replica("llama-3.1-8b", "h100-sxm", context=8192)
    scheduler = Scheduler(pool_tokens=16 * 450, block_tokens=16, max_num_batched_tokens=2048, max_num_seqs=8,
                          max_model_len=6016)
    run = run_engine(timer, scheduler, [Arrival(0.0, 2000, 2000), Arrival(0.0, 6000, 10)])
    first, second = sorted(run.served, key=lambda r: r.arrival.prompt_tokens)
    assert run.preemptions == 0
    assert second.first_token_s > first.finished_s


def _sglang_replica(model, gpu, context, version):
    """An SGLang replica at `version`: its timer, and its scheduler with the release's admission."""
    from planner.estimator.capacity import Scheduler
    from planner.estimator.engines import EngineSettings, engine_budget
    from planner.estimator.memory import GpuTarget, Request
    from planner.estimator.performance import replica_timer
    from planner.model.sources import resolve_model

    arch, card = resolve_model(CATALOG, model), CATALOG.gpus.get(gpu)
    budget = engine_budget(arch, Request(context=context, batch=1, tp=1, pp=1, precision="bf16", kv_dtype="auto"),
                           EngineSettings("sglang", version=version), GpuTarget.from_catalog(card), CATALOG)
    timer = replica_timer(arch, "bf16", "auto", card, 1, 1, CATALOG, "sglang", release=version)
    return timer, Scheduler.of(budget)


@pytest.mark.parametrize("clients", [64, 160, 400])  # the pool holds 71 requests of 1,280 tokens
def test_sglang_reserves_each_fixed_length_output_so_the_simulator_runs_the_loops_requests(clients):
    """From 0.5.22 SGLang admits a request only while the pool holds its prompt and whole output beside the running
    requests' remaining outputs (OutputReservation, fixed_length_whole): the simulator runs the analytic loop's R
    requests, never retracts, and finds its TPOT and throughput within 1% (measured 0.1-0.6%; vLLM's admission by
    prompt blocks had been 17% above the loop at 160 clients)."""
    timer, scheduler = _sglang_replica("qwen3-30b-a3b", "h100-sxm", 1280, "0.5.23")
    assert scheduler.reservation.fixed_length_whole and scheduler.reservation.page_tokens == scheduler.block_tokens
    loop = closed_loop(timer, scheduler, Workload(1024, 256), clients)
    run = run_benchmark(timer, scheduler, BenchmarkRun(num_prompts=10 * clients, max_concurrency=clients,
                                                       input_len=1024, output_len=256))
    assert loop.running == min(clients, 71)
    assert run.preemptions == 0
    assert run.peak_in_flight == clients
    assert loop.tpot_s * 1000 == pytest.approx(run.tpot.mean_ms, rel=0.01)
    assert loop.output_tokens_per_s == pytest.approx(run.output_throughput, rel=0.01)


def test_sglang_before_0_5_22_counts_running_outputs_at_its_ratio_and_retracts():
    """Before 0.5.22 SGLang counts a running request's remaining output at the new-token ratio (0.7, falling to 0.098
    over 600 decode steps), so it admits more requests than its pool holds to the end and retracts some when a decode
    step finds no room: where the pool caps the clients the TPOT rises above the loop's, where it holds them all
    nothing changes."""
    for version, clients, retracts in (("0.5.13", 64, False), ("0.5.13", 400, True), ("0.5.23", 400, False)):
        timer, scheduler = _sglang_replica("qwen3-30b-a3b", "h100-sxm", 1280, version)
        loop = closed_loop(timer, scheduler, Workload(1024, 256), clients)
        run = run_benchmark(timer, scheduler, BenchmarkRun(num_prompts=10 * clients, max_concurrency=clients,
                                                           input_len=1024, output_len=256))
        assert (run.preemptions > 0) == retracts, version
        if retracts:
            assert run.tpot.mean_ms > 1.05 * loop.tpot_s * 1000
        else:
            assert run.tpot.mean_ms == pytest.approx(loop.tpot_s * 1000, rel=0.01)


def test_sglang_admits_while_the_free_tokens_less_the_outputs_held_back_hold_prompt_output_and_page():
    """A pool of 1,000 tokens, pages of one token, prompts of 10 and outputs of 300, every output counted whole: the
    first request needs 10 + 300 + 1 below 1,000 free tokens, the second below 990 - 301, the third below 980 - 602;
    the fourth (311 against 970 - 903) waits for a finished request. Counted at the ratio (0.7 x 299 each), three
    running requests leave 970 - 628 = 342 tokens, so a fourth joins, and the pool runs out before they finish."""
    from dataclasses import replace as with_

    from planner.estimator.capacity import Scheduler

    timer, _, _ = replica("llama-3.1-8b", "h100-sxm", context=4096)
    sglang = with_(timer, mixes_prefill=False)
    scheduler = Scheduler(pool_tokens=1000, block_tokens=1, max_num_batched_tokens=2048, max_num_seqs=32,
                          max_model_len=400, reservation=_reservation(True, page_tokens=1))
    arrivals = [Arrival(0.0, 10, 300)] * 3 + [Arrival(0.001, 10, 300)] * 3
    run = run_engine(sglang, scheduler, arrivals)
    firsts = sorted(request.token_steps[0][0] for request in run.served)
    assert firsts[:3] == [0, 0, 0] and firsts[3] >= 300  # the fourth starts once the first three have finished
    assert run.preemptions == 0 and run.peak_blocks <= 3 * 310
    at_ratio = run_engine(sglang, with_(scheduler, reservation=_reservation(False, page_tokens=1)), arrivals)
    assert sorted(request.token_steps[0][0] for request in at_ratio.served)[3] == 1
    assert at_ratio.preemptions > 0


def test_sglang_retracts_the_request_with_the_fewest_outputs_to_the_back_of_the_queue():
    """Retraction keeps the requests furthest along: with the four running requests of the test above, the one that
    joined last gives its pages back when the pool runs out and queues behind the two still waiting; the ratio
    restarts from the kept requests' progress, (decoded + 20 x kept) / (their outputs + 1), at most 1."""
    from dataclasses import replace as with_

    from planner.estimator.capacity import Scheduler

    rule = _reservation(False, page_tokens=1)
    assert rule.ratio_after_retraction(decoded=150, outputs=400, kept=2) == pytest.approx(190 / 401)
    assert rule.ratio_after_retraction(decoded=390, outputs=400, kept=2) == 1.0
    timer, _, _ = replica("llama-3.1-8b", "h100-sxm", context=4096)
    # a prefill pass of 260 tokens: the retracted request's 10 + 241 tokens to recompute and the two prompts waiting do
    # not fit in one, so the queue's order shows
    scheduler = Scheduler(pool_tokens=1000, block_tokens=1, max_num_batched_tokens=260, max_num_seqs=32,
                          max_model_len=400, reservation=rule)
    arrivals = [Arrival(0.0, 10, 300)] * 3 + [Arrival(0.001, 10, 300)] * 3
    run = run_engine(with_(timer, mixes_prefill=False), scheduler, arrivals)
    first, late = [r for r in run.served if r.arrival.time_s == 0.0], [r for r in run.served if r.arrival.time_s > 0]
    assert run.preemptions >= 1
    assert all(request.token_steps[-1][1] == 300 for request in first)  # the oldest, kept, finish together
    retracted = [request for request in late if request.token_steps[0][0] == 1]
    waited = [request for request in late if request.token_steps[0][0] > 1]
    assert len(retracted) == 1 and len(waited) == 2
    assert len(retracted[0].token_steps) > 1  # the fourth, which joined on outputs counted at the ratio: retracted
    assert retracted[0].token_steps[1][0] > max(request.token_steps[0][0] for request in waited)  # behind them


def test_perf_shows_a_simulated_run_of_the_loop_where_the_engine_admits_past_its_pool(tmp_path):
    """`planner perf --concurrency` on SGLang 0.5.13 where the pool caps the clients: the analytic loop reserves whole
    outputs, so beside it perf replays the loop on the simulator (10 prompts a client), which retracts; at 0.5.23, or
    where the pool holds every client, there is nothing to add. vLLM, which admits on prompt blocks, gets the run too."""
    args = ("perf", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--engine", "sglang", "--prompt-tokens", "1024",
            "--output-tokens", "256", "--format", "json")
    old = _strict_json(_cli(*args, "--engine-version", "0.5.13", "--concurrency", "400", cwd=tmp_path).stdout)
    assert old["closed_loop"]["limit"] == "kv pool"
    run = old["closed_loop_run"]
    assert run["completed"] == run["num_prompts"] == 4000 and run["max_concurrency"] == 400
    assert run["simulated_preemptions"] > 0 and run["mean_tpot_ms"] > old["closed_loop"]["tpot_s"] * 1000
    assert "closed_loop_run" not in _strict_json(_cli(*args, "--concurrency", "400", cwd=tmp_path).stdout)
    assert "closed_loop_run" not in _strict_json(_cli(*args, "--engine-version", "0.5.13", "--concurrency", "32",
                                                      cwd=tmp_path).stdout)
    text = _cli(*args[:-2], "--engine-version", "0.5.13", "--concurrency", "400", cwd=tmp_path).stdout
    assert "then preempted: a run of 4,000 requests sees" in text
    assert "preemptions" in text
    # vLLM admits a prompt's blocks and preempts: its pool-capped loop gets the run too (the pool holds 102 of 160)
    vllm = _strict_json(_cli("perf", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--engine", "vllm", "--prompt-tokens", "1024",
                             "--output-tokens", "256", "--concurrency", "160", "--format", "json", cwd=tmp_path).stdout)
    assert vllm["closed_loop"]["limit"] == "kv pool" and vllm["closed_loop_run"]["simulated_preemptions"] > 0


def test_tensorrt_llm_reserves_each_requests_blocks_to_completion_and_never_evicts():
    """TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT) starts a request only while the free blocks,
    less every running request's blocks to completion, hold its own: where the pool caps the clients (Llama 3.1 8B on
    an L40S, 200 clients of 2,000 + 200 tokens, 94 requests' blocks in the pool) the simulator runs no more than the
    loop's R, evicts none, and finds its TPOT within 3% (measured 1.7%); admitted by prompt blocks instead, as vLLM, it
    would preempt."""
    from dataclasses import replace as with_

    from planner.estimator.capacity import Scheduler
    from planner.estimator.engines import EngineSettings, engine_budget
    from planner.estimator.engines.base import BlocksToCompletion
    from planner.estimator.memory import GpuTarget, Request
    from planner.estimator.performance import replica_timer
    from planner.model.sources import resolve_model

    arch, card = resolve_model(CATALOG, "llama-3.1-8b"), CATALOG.gpus.get("l40s")
    budget = engine_budget(arch, Request(context=2200, batch=1, tp=1, pp=1, precision="bf16", kv_dtype="auto"),
                           EngineSettings("trtllm"), GpuTarget.from_catalog(card), CATALOG)
    timer, scheduler = replica_timer(arch, "bf16", "auto", card, 1, 1, CATALOG, "trtllm"), Scheduler.of(budget)
    assert isinstance(scheduler.reservation, BlocksToCompletion) and scheduler.block_tokens == 32
    loop = closed_loop(timer, scheduler, Workload(2000, 200), 200)
    assert loop.limit == "kv pool" and loop.running == scheduler.pool_tokens // scheduler.held_tokens(2200) == 94
    run = run_benchmark(timer, scheduler, BenchmarkRun(num_prompts=2000, max_concurrency=200, input_len=2000,
                                                       output_len=200))
    assert run.preemptions == 0 and run.mean_batch <= loop.running
    assert run.tpot.mean_ms == pytest.approx(loop.tpot_s * 1000, rel=0.03)
    by_prompt_blocks = run_benchmark(timer, with_(scheduler, reservation=None), BenchmarkRun(
        num_prompts=2000, max_concurrency=200, input_len=2000, output_len=200))
    assert by_prompt_blocks.preemptions > 0
