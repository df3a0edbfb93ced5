"""planner calibrate: the result readers, the factors, their fit, the calibration file and --calibration."""

import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner import api
from planner.calibration.calibrate import load_calibration, replay_prompts, simulated_metrics
from planner.calibration.factors import Factors, calibrated_catalog, floors
from planner.calibration.fit import Observation, fit_factors
from planner.calibration.readers import read_results
from planner.errors import PlannerInputError
from planner.estimator.performance import Step
from planner.estimator.performance import load_performance_catalog, replica_timer

EXAMPLES = sorted((Path(__file__).parents[1] / "examples" / "calibration").glob("*.json"))
FIX = "give a `vllm bench serve --save-result` JSON"


def sglang_line(**overrides):
    line = {"tag": None, "backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
            "max_concurrency": 16, "random_input_len": 1024, "random_output_len": 256,
            "server_info": {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "version": "0.5.23"},
            "duration": 30.0, "completed": 160, "total_input_tokens": 163840, "total_output_tokens": 40960,
            "request_throughput": 5.33, "output_throughput": 1365.3, "mean_e2e_latency_ms": 2900.0,
            "median_e2e_latency_ms": 2880.0, "p99_e2e_latency_ms": 3400.0, "mean_ttft_ms": 180.0,
            "median_ttft_ms": 170.0, "p99_ttft_ms": 400.0, "mean_tpot_ms": 10.7, "median_tpot_ms": 10.6,
            "p99_tpot_ms": 12.0, "mean_itl_ms": 10.7, "median_itl_ms": 10.1, "p99_itl_ms": 30.0}
    return {**line, **overrides}


def guidellm_benchmark(strategy, tpot_ms=9.0):
    def summary(mean, p99=None):
        return {"successful": {"mean": mean, "median": mean, "percentiles": {"p99": p99 or mean}}}

    return {"type_": "generative_benchmark", "config": {"strategy": strategy, "backend": {"model": "llama-3.1-8b"}},
            "metrics": {"request_totals": {"successful": 40, "errored": 0, "incomplete": 0, "total": 40},
                        "prompt_token_count": summary(512.0), "output_token_count": summary(128.0),
                        "time_to_first_token_ms": summary(40.0, 90.0), "inter_token_latency_ms": summary(tpot_ms),
                        "request_latency": summary(1.2), "requests_per_second": summary(0.8),
                        "output_tokens_per_second": summary(102.4)}}


def test_vllm_result_reads_its_documented_keys():
    run, = read_results(EXAMPLES[0])
    data = json.loads(EXAMPLES[0].read_text())
    assert run.tool == "vllm" and run.model_id == data["model_id"] and run.date == data["date"]
    assert run.request_rate == math.inf and run.max_concurrency == data["max_concurrency"]
    assert run.mean_input_tokens == data["total_input_tokens"] / data["completed"]
    assert run.mean_output_tokens == data["total_output_tokens"] / data["completed"]
    assert (run.tpot.mean_ms, run.tpot.median_ms, run.tpot.p99_ms) == (data["mean_tpot_ms"], data["median_tpot_ms"],
                                                                        data["p99_tpot_ms"])
    assert run.e2el.mean_ms == data["mean_e2el_ms"] and run.output_throughput == data["output_throughput"]
    assert len(run.sha256) == 64


def test_sglang_jsonl_is_one_run_per_line_with_infinity_as_inf(tmp_path):
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(sglang_line()) + "\n" + json.dumps(sglang_line(request_rate=4.0, max_concurrency=None)))
    first, second = read_results(path)
    assert first.tool == "sglang" and first.engine_version == "0.5.23" and first.request_rate == math.inf
    assert first.max_concurrency == 16 and first.mean_input_tokens == 1024 and first.mean_output_tokens == 256
    assert first.e2el.p99_ms == 3400.0 and first.tpot.mean_ms == 10.7
    assert second.request_rate == 4.0 and second.max_concurrency is None and second.label == "sglang.jsonl#1"


def test_guidellm_report_maps_each_strategy(tmp_path):
    path = tmp_path / "benchmarks.json"
    report = {"metadata": {"version": 2, "guidellm_version": "0.8.1"}, "benchmarks": [
        guidellm_benchmark({"type_": "synchronous"}), guidellm_benchmark({"type_": "concurrent", "streams": 8}),
        guidellm_benchmark({"type_": "poisson", "rate": 2.5})]}
    path.write_text(json.dumps(report))
    synchronous, concurrent, poisson = read_results(path)
    assert (synchronous.max_concurrency, synchronous.request_rate) == (1, math.inf)
    assert (concurrent.max_concurrency, poisson.request_rate, poisson.max_concurrency) == (8, 2.5, None)
    # inter-token latency is vLLM's TPOT; request_latency is in seconds
    assert concurrent.tpot.mean_ms == 9.0 and concurrent.e2el.mean_ms == 1200.0 and concurrent.ttft.p99_ms == 90.0
    assert concurrent.mean_input_tokens == 512 and concurrent.completed == 40


@pytest.mark.parametrize("text, names", [
    ("not json at all\nnor this", "not JSON or JSONL"),
    ("[1, 2]", "not a JSON object"),
    ('{"hello": 1}', "has none of model_id"),
    ('{"model_id": "x", "completed": 0, "total_input_tokens": 1, "total_output_tokens": 1}', "completed is 0"),
    ('{"model_id": "x", "completed": 2, "total_input_tokens": 1, "total_output_tokens": 9}', "at least a token"),
    ('{"model_id": "x", "completed": 2}', "total_input_tokens is missing"),
    ('{"model_id": "x", "completed": 1e300, "total_input_tokens": 1, "total_output_tokens": 1}', "request (1000000"),
    ('{"model_id": "x", "completed": 1, "total_input_tokens": 5, "total_output_tokens": 5, "mean_tpot_ms": NaN}',
     "NaN is not a measurement"),
    ('{"model_id": "x", "completed": 1, "total_input_tokens": 5, "total_output_tokens": 5, "mean_tpot_ms": -3}',
     "mean_tpot_ms is -3"),
    ('{"model_id": "x", "completed": 1, "total_input_tokens": 5, "total_output_tokens": 5, "request_rate": 0}',
     "request_rate is 0"),
    ("[" * 100_000, "nested too deeply"),
    ('{"benchmarks": [{"config": {"strategy": {"type_": "sweep"}}, "metrics": {}}]}', "type_ is \"sweep\""),
])
def test_a_bad_result_is_one_line_naming_the_problem(tmp_path, text, names):
    path = tmp_path / "result.json"
    path.write_text(text)
    with pytest.raises(PlannerInputError) as info:
        read_results(path)
    message = str(info.value)
    assert message.startswith("result: ") and names in message and "\n" not in message and len(message) < 400


def test_factors_scale_their_terms_and_only_theirs():
    catalog = api.load_catalog()
    performance = load_performance_catalog()
    card, arch = catalog.gpus.get("h100-sxm"), api.resolve_model(catalog, "llama-3.1-8b")

    def decode(factors, tp=1):
        timer = replica_timer(arch, "auto", "auto", card, tp, 1, catalog, "vllm",
                              calibrated_catalog(performance, card.generation, "vllm", factors))
        return timer.step(Step(1, 2048))[0]

    assert calibrated_catalog(performance, "hopper", "vllm", Factors()) is performance
    assert decode(Factors(communication=2.0)) == decode(Factors())  # tp 1: no all-reduce
    assert decode(Factors(communication=2.0), tp=2) > decode(Factors(), tp=2)
    # a single decode step is memory-bound: doubling every read's time nearly doubles it, fixed costs aside
    assert 1.6 < decode(Factors(memory=2.0)) / decode(Factors()) < 2.0
    assert decode(Factors(fixed=2.0)) > decode(Factors()) and decode(Factors(fixed=0.5)) < decode(Factors())
    # another generation's GPUs are untouched by a hopper calibration
    scaled = calibrated_catalog(performance, "hopper", "vllm", Factors(memory=2.0))
    assert scaled.generation("ampere") == performance.generation("ampere")
    # an eager prefill's host time per kernel is a fixed time too (SGLang's, whose releases through 0.5.9 run it)
    eager = calibrated_catalog(performance, "hopper", "sglang", Factors(fixed=2.0)).engine("sglang")
    assert eager.eager_launch_us == 2 * performance.engine("sglang").eager_launch_us > 0


def test_the_engines_own_prefill_kernels_scale_with_compute():
    """bench/CALIBRATION_PROTOCOL.md, the correction on the engines' own prefill kernels: a compute factor of 2 doubles
    the Gated DeltaNet layers' chunked prefill time (Qwen3.5-397B on 8 x H200, SGLang), and SGLang's DSA prefill
    kernels' efficiencies and times move with it (its trtllm gather with memory)."""
    from conftest import without_delta_prefill

    catalog = api.load_catalog()
    performance = load_performance_catalog()
    card, arch = catalog.gpus.get("h200-sxm"), api.resolve_model(catalog, "qwen3.5-397b-a17b")
    untimed = without_delta_prefill(performance)

    def prefill(constants):
        return replica_timer(arch, "fp8", "auto", card, 8, 1, catalog, "sglang", constants).prefill_s(1, 8192)

    doubled = calibrated_catalog(performance, "hopper", "sglang", Factors(compute=2.0))
    doubled_untimed = calibrated_catalog(untimed, "hopper", "sglang", Factors(compute=2.0))
    assert prefill(doubled) - prefill(doubled_untimed) == pytest.approx(2 * (prefill(performance) - prefill(untimed)))
    blackwell = calibrated_catalog(performance, "blackwell", "sglang", Factors(compute=2.0, memory=2.0))
    own, scaled = (c.generation("blackwell").engines["sglang"] for c in (performance, blackwell))
    assert [k.compute_efficiency and k.compute_efficiency / 2 for k in own.sparse_prefill] == \
        [k.compute_efficiency for k in scaled.sparse_prefill]
    assert [k.read_efficiency and k.read_efficiency / 2 for k in own.sparse_prefill] == \
        [k.read_efficiency for k in scaled.sparse_prefill]
    assert scaled.indexer.topk_us == 2 * own.indexer.topk_us
    assert scaled.indexer.logits_compute_efficiency == own.indexer.logits_compute_efficiency / 2
    assert scaled.mla_prefill_compute_efficiency == own.mla_prefill_compute_efficiency / 2  # SGLang's MLA prefill
    # no factor may make one of them beat the datasheet: the compute floor is at least their highest efficiency
    assert floors(performance, "hopper", "sglang")["compute"] >= max(
        k.compute_efficiency for k in performance.generation("hopper").engines["sglang"].sparse_prefill
        if k.compute_efficiency)


def test_fit_recovers_known_factors_and_leaves_the_uninformed_at_one():
    # two runs, each a sum of a memory-bound and a fixed term in other proportions; truth: memory x 2^(8/16)
    terms = [(10.0, 1.0), (2.0, 6.0), (5.0, 5.0)]

    def predict(f, i):
        memory, fixed = terms[i]
        return {"tpot_ms": memory * f.memory + fixed * f.fixed}

    truth = 2 ** 0.5
    observations = [Observation(f"run{i}", {"tpot_ms": m * truth + x}) for i, (m, x) in enumerate(terms)]
    fit = fit_factors(observations, predict)
    assert fit.informed == ("memory", "fixed")
    assert fit.factors.memory == pytest.approx(truth) and fit.factors.fixed == 1.0
    assert fit.factors.compute == fit.factors.communication == 1.0
    assert fit.error_after == pytest.approx(0, abs=1e-12) and fit.error_before > 0.1
    assert all(r.held_out == pytest.approx(r.measured) for r in fit.residuals)  # any two runs pin the truth


def test_a_run_asking_a_factor_past_its_bounds_leaves_it_at_one_and_names_it():
    """bench/CALIBRATION_PROTOCOL.md: past a bound is not a calibration of the term; the factor is not clamped."""
    fit = fit_factors([Observation("slow", {"tpot_ms": 100.0})], lambda f, i: {"tpot_ms": f.memory})
    assert fit.factors.identity and fit.past_bounds == ("memory",) and fit.informed == ()
    assert fit.error_held_out is None
    # below the floor (a read faster than the datasheet's bandwidth): the same; above it, the move is fitted
    assert fit_factors([Observation("fast", {"tpot_ms": 5.0})], lambda f, i: {"tpot_ms": 10 * f.memory},
                       {"memory": 0.9}).past_bounds == ("memory",)
    fit = fit_factors([Observation("fast", {"tpot_ms": 9.6})], lambda f, i: {"tpot_ms": 10 * f.memory}, {"memory": 0.9})
    assert fit.factors.memory == pytest.approx(2 ** (-1 / 16)) and fit.past_bounds == ()


def test_one_run_moves_only_the_factor_whose_terms_dominate_it():
    # 10 ms of reads, 2 ms of fixed time, 1 ms of compute; measured 10% slower: the reads take it all (x 1.13)
    def predict(f, i):
        return {"tpot_ms": 10 * f.memory + 2 * f.fixed + 1 * f.compute}

    fit = fit_factors([Observation("run", {"tpot_ms": 14.3})], predict)
    assert fit.informed == ("memory",) and fit.past_bounds == ()
    assert fit.factors.fixed == fit.factors.compute == fit.factors.communication == 1.0
    assert fit.factors.memory == pytest.approx(2 ** (3 / 16))  # the grid point nearest 1.13
    # a second metric dominated by another term identifies that one too
    both = fit_factors([Observation("run", {"tpot_ms": 14.3, "ttft_ms": 130.0})],
                       lambda f, i: {**predict(f, i), "ttft_ms": 100 * f.compute + 5 * f.fixed})
    assert both.informed == ("memory", "compute") and both.factors.fixed == 1.0


def test_the_factors_floors_keep_every_kernel_within_the_datasheet():
    performance = load_performance_catalog()
    hopper = performance.generation("hopper")
    low = floors(performance, "hopper", "vllm")
    assert low["memory"] == hopper.read_ceiling and low["fixed"] == low["communication"] == 0.25
    assert max(r.compute_efficiency for r in hopper.gemm.values()) <= low["compute"] <= 1
    scaled = calibrated_catalog(performance, "hopper", "vllm", Factors(memory=low["memory"], compute=low["compute"]))
    assert max(scaled.generation("hopper").read_efficiencies.values()) <= 1 + 1e-12
    assert max(r.compute_efficiency for r in scaled.generation("hopper").gemm.values()) <= 1 + 1e-12


def test_the_default_generations_moe_tables_a_generation_borrows_scale_with_its_factors():
    """gpt-oss's MXFP4 experts on CDNA3 time the default generation's weight-only MoE table (SPEED_PROTOCOL's borrowed
    weight-only amendment); every factor reaches it as it reaches the generation's own tables, and floors count it."""
    from planner.calibration.factors import borrowed_moe

    performance = load_performance_catalog()
    cdna3 = performance.generation("cdna3")
    borrowed = borrowed_moe(performance, cdna3, "vllm")
    assert borrowed and not cdna3.measures_moe("w4a16", "vllm")
    assert borrowed_moe(performance, performance.generation("default"), "vllm") == []
    low = floors(performance, "cdna3", "vllm")
    assert low["memory"] >= max(r.read_efficiency for r in borrowed)
    assert low["compute"] >= max(r.compute_efficiency for r in borrowed)
    catalog = api.load_catalog()
    card, arch = catalog.gpus.get("mi300x"), api.resolve_model(catalog, "gpt-oss-120b")

    def moe_s(factors, batch):
        timer = replica_timer(arch, "mxfp4", "auto", card, 1, 1, catalog, "vllm",
                              calibrated_catalog(performance, "cdna3", "vllm", factors))
        return timer.step(Step(batch, 2000))[1].moe_s

    assert moe_s(Factors(compute=2.0), 512) == pytest.approx(2 * moe_s(Factors(), 512), rel=0.02)
    assert moe_s(Factors(memory=2.0), 1) > 1.5 * moe_s(Factors(), 1)
    # the default entry itself, timed for a GPU of no measured generation, takes them as before
    assert calibrated_catalog(performance, "cdna3", "vllm", Factors(compute=2.0)).generation("default").moe != \
        performance.generation("default").moe


def test_a_calibrated_catalog_keeps_the_engines_fused_moe_kernels():
    """A factor of 1 + epsilon moves a prediction by about epsilon: the release's MoE kernel table is scaled, not
    dropped (it was: SGLang on Blackwell fell back to its primary kernel's table, TPOT -30%)."""
    performance = load_performance_catalog()
    plain = performance.generation("blackwell").engines["sglang"]
    scaled = calibrated_catalog(performance, "blackwell", "sglang", Factors(fixed=1.0001)).generation("blackwell")
    own = scaled.engines["sglang"]
    assert own.moe_kernel == plain.moe_kernel and own.moe_kernels.keys() == plain.moe_kernels.keys()
    catalog = api.load_catalog()
    card, arch = catalog.gpus.get("b200"), api.resolve_model(catalog, "qwen3-235b-a22b")

    def decode(performance):
        timer = replica_timer(arch, "bf16", "auto", card, 8, 1, catalog, "sglang", performance, release="0.5.6")
        return timer.step(Step(1, 2000))[0]

    before = decode(performance)
    after = decode(calibrated_catalog(performance, "blackwell", "sglang", Factors(fixed=1.0001)))
    assert 1 <= after / before < 1.0001


def test_calibrate_the_examples_and_read_the_file_back(tmp_path):
    result = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    # the examples were made 10% slower on reads and 30% slower on fixed costs than the kernel tables
    assert result.errors.after < result.errors.before / 2 and result.errors.held_out < result.errors.before
    assert result.factors.communication == 1.0 and "communication" not in result.informed
    assert result.factors.fixed > 1 or result.factors.memory > 1
    assert result.fitted_on.generation == "hopper" and result.fitted_on.engine == "vllm"
    assert [f.name for f in result.fitted_on.results] == [p.name for p in EXAMPLES]
    path = tmp_path / "calibration.yaml"
    path.write_text(result.to_yaml())
    assert load_calibration(path) == result


def test_a_closed_loops_throughput_is_compared_at_the_concurrency_the_run_held():
    """bench/CALIBRATION_PROTOCOL.md, the correction on a closed-loop run's throughput: a run whose drain held fewer
    requests in flight than its replay (Little's law: requests/s x mean E2E latency) is compared at its own; a run
    sent at a request rate, whose arrivals set its throughput, as the replay ran."""
    replayed = api.replay_results(EXAMPLES[1:2], model="llama-3.1-8b", gpu="h100-sxm", tp=1)[0]
    run, result = replayed.measured, replayed.predicted
    replay_held = result.request_throughput * result.e2el.mean_ms / 1000
    drained = replace(run, request_throughput=run.request_throughput * 0.8)
    held = drained.request_throughput * drained.e2el.mean_ms / 1000
    assert held < 0.9 * replay_held
    assert simulated_metrics(result, drained)["output_tok_s"] == pytest.approx(
        result.output_throughput * held / replay_held)
    assert simulated_metrics(result, drained)["tpot_ms"] == result.tpot.mean_ms
    at_a_rate = replace(drained, request_rate=4.0)
    assert simulated_metrics(result, at_a_rate)["output_tok_s"] == result.output_throughput
    unstated = replace(drained, e2el=replace(drained.e2el, mean_ms=None))
    assert simulated_metrics(result, unstated)["output_tok_s"] == result.output_throughput
    # a hostile file's product past its clients (here past a float's range) counts as its clients, no more
    overflowing = replace(run, request_throughput=1e200, e2el=replace(run.e2el, mean_ms=1e200))
    assert simulated_metrics(result, overflowing)["output_tok_s"] == pytest.approx(
        result.output_throughput * run.max_concurrency / replay_held)


def test_replayed_results_compare_each_statistic_as_the_fit_starts_from():
    replayed = api.replay_results(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    calibration = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    before = {(r.result, r.metric): r.before for r in calibration.residuals}
    assert [r.measured.label for r in replayed] == [p.name for p in EXAMPLES]
    for run, path in zip(replayed, EXAMPLES):
        data = json.loads(path.read_text())
        rows = {(c.metric, c.statistic): c for c in run.comparisons()}
        assert len(rows) == 7 and rows["tpot_ms", "p99"].measured == data["p99_tpot_ms"]
        assert rows["ttft_ms", "median"].measured == data["median_ttft_ms"]
        assert rows["ttft_ms", "p99"].predicted == run.predicted.ttft.p99_ms
        for metric in ("tpot_ms", "ttft_ms", "output_tok_s"):  # the replay is the fit's prediction before any factor
            assert rows[metric, "mean"].predicted == before[path.name, metric]
        # a closed loop's throughput at the concurrency each run held, by Little's law (requests/s x mean E2E)
        held = min(data["request_throughput"] * data["mean_e2el_ms"] / 1000, data["max_concurrency"])
        replayed = run.predicted.request_throughput * run.predicted.e2el.mean_ms / 1000
        assert data["max_concurrency"] and data["request_rate"] == "inf"
        assert rows["output_tok_s", "mean"].predicted == pytest.approx(run.predicted.output_throughput * held / replayed)
        assert run.predicted.run.num_prompts == replay_prompts(run.measured)


def test_replays_and_fits_stop_at_their_time_limit():
    from planner.plan.deadline import OutOfTime

    for call in (api.replay_results, api.calibrate):
        with pytest.raises(OutOfTime, match=r"^results: the 0 s time limit ran out after 0 simulated runs, before "):
            call(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1, time_limit_s=0)


def test_ten_results_calibrate_with_a_held_out_residual_each(tmp_path):
    """(Its time, <= 10 s for ten results, is bench/cli_speed.py's to measure.)"""
    paths = []
    base = json.loads(EXAMPLES[0].read_text())
    for i, concurrency in enumerate((1, 2, 4, 8, 12, 16, 24, 32, 48, 64)):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({**base, "max_concurrency": concurrency, "completed": 10 * concurrency,
                                    "total_input_tokens": 10_000 * concurrency, "total_output_tokens": 2000 * concurrency,
                                    "mean_tpot_ms": base["mean_tpot_ms"] * (1 + concurrency / 100)}))
        paths.append(path)
    result = api.calibrate(paths, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    assert len(result.prompts_per_replay) == 10 and all(r.held_out is not None for r in result.residuals)


def test_replays_are_capped_in_waves_of_the_runs_concurrency():
    run, = read_results(EXAMPLES[0])
    long = type(run)(**{**run.__dict__, "completed": 5000, "max_concurrency": 4, "mean_output_tokens": 500.0})
    assert replay_prompts(long) == 4 * (2000 // 500)
    assert replay_prompts(run) == run.completed  # a small run is replayed whole


@pytest.mark.parametrize("edit, names", [
    (lambda text: text.replace("schema_version: 1", "schema_version: 1\nsurprise: 2"), "surprise: Extra inputs"),
    (lambda text: text.replace("  memory: ", "  memory: 40 #"), "factors.memory: Input should be less than"),
    (lambda text: text.replace("- memory", "- speed"), "informed names 'speed'"),
    (lambda text: "{not: [yaml", "invalid YAML"),
    (lambda text: text.replace("factors:\n", 'factors:\n  "a\\nb": 1\n'), "factors.'a\\nb': Extra inputs"),
    # a fit never moves memory below its generation's read ceiling (H100: 0.93): a read beating the datasheet
    (lambda text: re.sub(r"  memory: [0-9.e-]+", "  memory: 0.5", text, count=1), "factors.memory 0.5 is below"),
    (lambda text: text.replace("engine: vllm", "engine: nonesuch"), "fitted_on: engine: no performance factors"),
])
def test_a_bad_calibration_file_is_one_line(tmp_path, edit, names):
    good = api.calibrate(EXAMPLES[:1], model="llama-3.1-8b", gpu="h100-sxm", tp=1).to_yaml()
    path = tmp_path / "calibration.yaml"
    path.write_text(edit(good))
    with pytest.raises(PlannerInputError) as info:
        load_calibration(path)
    assert names in str(info.value) and str(info.value).startswith("--calibration") and "\n" not in str(info.value)


def test_perf_and_bench_take_a_calibration_only_for_its_generation_and_engine(tmp_path):
    calibration = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    plain = api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1)
    calibrated = api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, calibration=calibration)
    assert plain.calibration is None and plain.to_dict()["calibrated"] is None
    assert calibrated.calibration.state == "calibrated" and calibrated.calibration.differs == ()
    assert calibrated.to_dict()["calibrated"] is True
    assert calibrated.performance.tpot_s > plain.performance.tpot_s  # the examples ran slower than the tables
    elsewhere = api.perf("llama-3.1-8b", gpu="a100-sxm-80gb", tp=1, calibration=calibration)
    assert elsewhere.calibration.state == "not calibrated" and not elsewhere.calibration.applied
    assert elsewhere.to_dict()["calibration"]["differs"] == ["ampere x vllm"]
    assert elsewhere.performance == api.perf("llama-3.1-8b", gpu="a100-sxm-80gb", tp=1).performance
    assert not api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, engine="sglang",
                        calibration=calibration).calibration.applied


def test_a_calibration_names_what_a_replica_changes_from_the_runs_it_was_fitted_on():
    """Issue 23: a calibration's factors scale its GPU generation x engine, but only the configuration its runs ran
    is calibrated; another model, card of the generation, layout or precision is extrapolated, each change named."""
    calibration = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    assert calibration.fitted_on.precision == "bf16" and calibration.fitted_on.kv_dtype == "bf16"  # `auto` resolved
    same = api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, precision="bf16", calibration=calibration)
    assert same.calibration.state == "calibrated"
    other = api.perf("llama-3.1-70b", gpu="h200-sxm", tp=4, precision="fp8", calibration=calibration)
    assert other.calibration.state == "extrapolated" and other.calibration.applied
    assert other.calibration.differs == ("model llama-3.1-70b, not llama-3.1-8b", "GPU h200-sxm, not h100-sxm",
                                         "layout tp 4 x pp 1, not tp 1 x pp 1", "precision fp8, not bf16")
    assert api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, kv_dtype="fp8", calibration=calibration
                    ).calibration.differs == ("KV dtype fp8, not bf16",)
    plain = api.perf("llama-3.1-70b", gpu="h200-sxm", tp=4, precision="fp8")
    assert other.performance.tpot_s > plain.performance.tpot_s  # extrapolated: the factors still time it
    assert other.to_dict()["calibration"] == {"state": "extrapolated", "fitted_on": "hopper x vllm",
                                              "differs": list(other.calibration.differs), "moe_kernel": None}
    # a release the runs did not record (vLLM's results carry none) is not held against the replica
    assert api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, engine_version="0.15.1",
                    calibration=calibration).calibration.state == "calibrated"


def test_a_calibration_compares_names_as_the_catalog_gives_them(tmp_path):
    """A KV dtype alias is recorded by its catalog name, and a file written before fits recorded resolved names
    (`auto`, or a name as typed) is read as the catalog names it for the fitted model: neither turns the runs'
    configuration into an extrapolation, nor hides another precision."""
    aliased = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1, kv_dtype="fp8_e4m3")
    assert aliased.fitted_on.kv_dtype == "fp8"
    assert api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, kv_dtype="fp8",
                    calibration=aliased).calibration.state == "calibrated"
    calibration = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    text = calibration.to_yaml().replace("precision: bf16", "precision: auto").replace("kv_dtype: bf16", "kv_dtype: BF16")
    assert "precision: auto" in text and "kv_dtype: BF16" in text
    (tmp_path / "old.yaml").write_text(text)
    old = load_calibration(tmp_path / "old.yaml")
    assert (old.fitted_on.precision, old.fitted_on.kv_dtype) == ("bf16", "bf16")
    assert api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, calibration=old).calibration.state == "calibrated"
    assert api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, precision="fp8",
                    calibration=old).calibration.differs == ("precision fp8, not bf16",)


def test_a_calibration_applies_to_a_llama_cpp_fleet_it_was_fitted_for(tmp_path):
    """The scenario names the engine `llamacpp`, the speed model (and so the calibration) `llama.cpp`."""
    calibration = tmp_path / "calibration.yaml"
    fitted = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1, engine="llamacpp")
    assert fitted.fitted_on.engine == "llama.cpp"
    # vLLM's example runs leave llama.cpp's factors at 1.0: a slower per-step cost, to see it applied
    text = fitted.to_yaml()
    assert "  fixed: 1.0\n" in text
    calibration.write_text(text.replace("  fixed: 1.0\n", "  fixed: 2.0\n"))
    scenario = {"name": "chat", "model": "llama-3.1-8b", "workload": {
        "context": 8192, "concurrency": 8, "traffic": {"requests_per_s": 2, "prompt_tokens": 500, "output_tokens": 200},
        "slo": {"ttft_s": 5.0, "tpot_s": 0.1}}, "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"]},
        "engine": {"name": "llamacpp"}}
    plain, scaled = api.plan_fleet(scenario), api.plan_fleet({**scenario, "calibration": str(calibration)})
    assert scaled.speed == ("chat: h100-sxm: calibrated (hopper x llama.cpp)",)
    assert scaled.assignments[0].config.capacity_rps < plain.assignments[0].config.capacity_rps


def test_a_disaggregated_pool_is_extrapolated_from_aggregated_runs(tmp_path):
    calibration = tmp_path / "calibration.yaml"
    calibration.write_text(api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1).to_yaml())
    plan = api.plan_fleet({"name": "chat", "model": "llama-3.1-8b", "calibration": str(calibration), "workload": {
        "context": 16384, "concurrency": 64, "slo": {"ttft_s": 3.0, "tpot_s": 0.04},
        "traffic": {"requests_per_s": 12, "prompt_tokens": 8000, "output_tokens": 250}},
        "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"], "serving": ["disaggregated"]},
        "engine": {"name": "vllm"}})
    assert {a.config.role for a in plan.assignments} == {"prefill", "decode"}
    assert set(plan.speed) == {f"chat: h100-sxm: extrapolated (hopper x vllm; {role} pool of a disaggregated pair)"
                               for role in ("prefill", "decode")}


def test_calibrate_replays_the_runs_at_the_engine_release_they_ran(tmp_path):
    """--engine-version: the runs are replayed on that release's profile (vLLM 0.19.0's, whose replays predict other
    times than the default 0.34.0's), the file records it, and a replica of another release is extrapolated; a
    release the results contradict is refused in one line."""
    at_default = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    old = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1, engine_version="0.19.0")
    assert at_default.fitted_on.engine_versions == () and old.fitted_on.engine_versions == ("0.19.0",)
    assert [r.before for r in old.residuals] != [r.before for r in at_default.residuals]
    assert api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, engine_version="0.19.0",
                    calibration=old).calibration.state == "calibrated"
    assert api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, calibration=old).calibration.differs == (
        "engine release 0.34.0, not 0.19.0",)
    (tmp_path / "run.jsonl").write_text(json.dumps(sglang_line()) + "\n")  # server_info: SGLang 0.5.23
    with pytest.raises(PlannerInputError, match=r"^--engine-version: 0.5.10, and the results record release 0.5.23"):
        api.calibrate([tmp_path / "run.jsonl"], model="llama-3.1-8b", gpu="h100-sxm", tp=1, engine="sglang",
                      engine_version="0.5.10")
    proc = cli("calibrate", *map(str, EXAMPLES), "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine-version",
               "0.15.1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --engine-version") and "0.19.0" in proc.stderr


def test_a_calibration_holds_the_engine_release_its_runs_recorded_against_the_replicas():
    from dataclasses import replace

    from planner.calibration.calibrate import TimedReplica

    calibration = api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1)
    sglang = replace(calibration, fitted_on=replace(calibration.fitted_on, engine="sglang",
                                                    engine_versions=("0.5.12.post1",)))
    replica = TimedReplica(model="llama-3.1-8b", gpu="h100-sxm", generation="hopper", engine="sglang", tp=1, pp=1,
                           precision="bf16", kv_dtype="bf16", release="0.5.12")
    assert sglang.coverage(replica).state == "calibrated"
    newer = sglang.coverage(replace(replica, release="0.5.23", speculative=True, moe_kernel="triton"))
    assert newer.differs == ("MoE kernel triton, not the release's pick", "engine release 0.5.23, not 0.5.12.post1",
                             "MTP speculation")
    assert newer.describe() == ("extrapolated (hopper x sglang; MoE kernel triton, not the release's pick; engine "
                                "release 0.5.23, not 0.5.12.post1; MTP speculation)")
    # no release asked for: the engine's default one, which is not 0.5.12
    assert "engine release" in sglang.coverage(replace(replica, release=None)).differs[0]
    # a DP-attention replica, as `planner check --replan` fits one: calibrated where the runs' replica was one too
    assert sglang.coverage(replace(replica, dp=4)).differs == ("DP attention 4, not 1",)
    dp_fit = replace(sglang, fitted_on=replace(sglang.fitted_on, dp=4, ep=4))
    assert dp_fit.coverage(replace(replica, dp=4, ep=4)).state == "calibrated"


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})


def test_cli_calibrate_then_perf_and_bench_say_whether_they_are_calibrated(tmp_path):
    out = tmp_path / "calibration.yaml"
    proc = cli("calibrate", *map(str, EXAMPLES), "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1",
               "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "before" in proc.stdout and "left out" in proc.stdout and f"wrote {out}" in proc.stdout
    assert load_calibration(out).fitted_on.model == "llama-3.1-8b"
    proc = cli("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--calibration", str(out), cwd=tmp_path)
    assert proc.returncode == 0 and f"calibrated ({out})" in proc.stdout
    proc = cli("bench", "llama-3.1-8b", "--gpu", "l40s", "--num-prompts", "10", "--calibration", str(out), cwd=tmp_path)
    assert proc.returncode == 0 and f"not calibrated ({out}" in proc.stdout
    proc = cli("perf", "llama-3.1-8b", "--gpu", "h200-sxm", "--calibration", str(out), cwd=tmp_path)
    assert proc.returncode == 0 and " ".join(proc.stdout.split()).endswith(
        f"extrapolated ({out}, fitted on another configuration of hopper x vllm: GPU h200-sxm, not h100-sxm)")
    proc = cli("simulate", "llama-3.1-8b", "--benchmark", "--gpu", "h100-sxm", "--num-prompts", "10",
               "--calibration", str(out), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["calibrated"] is True
    proc = cli("calibrate", str(EXAMPLES[0]), "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: result: ") and "--model llama-3.1-70b" in proc.stderr


def test_a_fleet_solve_takes_a_calibration_for_the_gpus_it_was_fitted_on(tmp_path):
    """`calibration:` (or solve --calibration) scales the fleet's speed on the calibrated GPU generation x engine only,
    and the plan says which replicas it scaled; the examples' fitted fixed-cost factor (~1.76x) slows every H100 step,
    so an H100 replica serves less, and an L40S replica is timed as before."""
    calibration = tmp_path / "calibration.yaml"
    calibration.write_text(api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1).to_yaml())

    def fleet(gpu, calibrated):
        scenario = {"name": "chat", "model": "llama-3.1-8b", "workload": {
            "context": 8192, "concurrency": 64,
            "traffic": {"requests_per_s": 20, "prompt_tokens": 1500, "output_tokens": 400},
            "slo": {"ttft_s": 2.0, "tpot_s": 0.05}}, "search": {"gpus": [gpu], "precisions": ["bf16"]},
            "engine": {"name": "vllm"}}
        return api.plan_fleet({**scenario, "calibration": str(calibration)} if calibrated else scenario)

    plain, scaled = fleet("h100-sxm", False), fleet("h100-sxm", True)
    assert plain.speed == () and scaled.speed == ("chat: h100-sxm: calibrated (hopper x vllm)",)
    assert scaled.assignments[0].config.capacity_rps < plain.assignments[0].config.capacity_rps
    other, other_scaled = fleet("l40s", False), fleet("l40s", True)
    assert other_scaled.speed == ("chat: l40s: not calibrated (ada x vllm; the calibration is for hopper x vllm)",)
    sibling = fleet("h200-sxm", True)  # the calibrated generation, another card of it: scaled, by extrapolation
    assert sibling.speed == ("chat: h200-sxm: extrapolated (hopper x vllm; GPU h200-sxm, not h100-sxm)",)
    assert sibling.assignments[0].config.capacity_rps < fleet("h200-sxm", False).assignments[0].config.capacity_rps
    assert other_scaled.assignments[0].config.capacity_rps == other.assignments[0].config.capacity_rps
    with pytest.raises(PlannerInputError, match="calibration"):
        api.plan_fleet({"model": "llama-3.1-8b", "workload": {"context": 8192, "traffic": {
            "requests_per_s": 1, "prompt_tokens": 100, "output_tokens": 100}}, "calibration": str(tmp_path / "no.yaml")})


def test_check_compares_a_deployed_plan_with_what_ran(tmp_path):
    """planner check: each run replayed on the plan's replica of its model; a run of a model the plan does not serve,
    and a plan without traffic, are one-line errors."""
    scenario = {"name": "chat", "model": "llama-3.1-8b", "workload": {
        "context": 8192, "concurrency": 64, "traffic": {"requests_per_s": 5, "prompt_tokens": 1000, "output_tokens": 200},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.05}}, "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"]},
        "engine": {"name": "vllm"}}
    from planner.render.records import fleet_json

    plan_path = tmp_path / "plan.json"
    plan_path.write_text(fleet_json(api.plan_fleet(scenario), "chat"))
    rows = api.check(plan_path, EXAMPLES)
    assert len(rows) == len(EXAMPLES) and {r.gpu for r in rows} == {"h100-sxm"}
    for row, path in zip(rows, EXAMPLES):
        run, = read_results(path)
        assert row.measured["tpot_ms"] == run.tpot.mean_ms and row.measured["output_tok_s"] == run.output_throughput
        assert row.predicted["tpot_ms"] > 0 and set(row.to_dict()["error"]) == set(row.measured)
    other = tmp_path / "other.json"
    other.write_text(EXAMPLES[0].read_text().replace("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.3-70B-Instruct"))
    with pytest.raises(PlannerInputError, match="does not serve"):
        api.check(plan_path, [other])
    outcome = subprocess.run([sys.executable, "-m", "planner.cli", "check", str(plan_path), str(EXAMPLES[0]), "--format",
                              "json"], capture_output=True, text=True, cwd=tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    assert json.loads(outcome.stdout)["runs"][0]["measured"]["tpot_ms"] > 0


def chat_scenario(gpus, **extra):
    return {"name": "chat", "model": "llama-3.1-8b", "workload": {
        "context": 8192, "concurrency": 64, "traffic": {"requests_per_s": 5, "prompt_tokens": 1000, "output_tokens": 200},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.05}}, "search": {"gpus": gpus, "precisions": ["bf16"]},
        "engine": {"name": "vllm"}, **extra}


def test_report_and_the_scenario_simulation_take_a_calibration_as_solve_does(tmp_path):
    """report and simulate SCENARIO load the scenario as solve does (api.load_scenario: --calibration in place of
    calibration:, refused without traffic) and print the plan's speed: lines; the simulation times each replica with
    the calibrated constants the solve sized it with, so an H100 replica's TPOT is slower with the examples' fit."""
    import yaml

    calibration = tmp_path / "calibration.yaml"
    calibration.write_text(api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1).to_yaml())
    scenario = tmp_path / "chat.yaml"
    scenario.write_text(yaml.safe_dump(chat_scenario(["h100-sxm"])))
    plain = api.simulate(api.load_scenario(scenario), duration_s=60)
    scaled = api.simulate(api.load_scenario(scenario, calibration=str(calibration)), duration_s=60)
    assert [r.speed for r in plain] == [None] and [r.speed for r in scaled] == ["calibrated (hopper x vllm)"]
    assert scaled[0].result.tpot_s.p50 > plain[0].result.tpot_s.p50
    proc = cli("simulate", str(scenario), "--duration", "30", "--calibration", str(calibration), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "  speed: calibrated (hopper x vllm)" in proc.stdout.splitlines()
    proc = cli("report", str(scenario), "-o", str(tmp_path / "r.md"), "--calibration", str(calibration), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "speed: chat: h100-sxm: calibrated (hopper x vllm)"
    page = (tmp_path / "r.md").read_text()
    assert "- speed: chat: h100-sxm: calibrated (hopper x vllm)" in page
    proc = cli("report", str(scenario), "-o", str(tmp_path / "r.html"), "--calibration", str(calibration), cwd=tmp_path)
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Speed</h2>" in page and f"--calibration {calibration} (in place of calibration:)" in page
    # the same rule everywhere: no traffic, no calibration; a plan file is simulated as planned
    single = tmp_path / "single.yaml"
    single.write_text("model: llama-3.1-8b\nworkload: {context: 8192}\n")
    for args in (["report", str(single), "-o", "x.md"], ["solve", str(single)], ["simulate", str(single)]):
        proc = cli(*args, "--calibration", str(calibration), cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith("error: --calibration: ") and "no traffic" in proc.stderr
    single.write_text(f"model: llama-3.1-8b\nworkload: {{context: 8192}}\ncalibration: {calibration}\n")
    proc = cli("report", str(single), "-o", "x.md", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: scenario single.yaml: calibration: ")
    proc = cli("simulate", "plan.json", "--calibration", str(calibration), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --calibration: a plan file")


@pytest.mark.parametrize("slo, decided_by, meets", [
    # the run: TTFT mean 45, p50 40, p99 60 ms
    ({"ttft_s": 0.044}, "mean", False),  # no percentile: the mean, 45 > 44
    ({"ttft_s": 0.060, "percentile": 99}, "p99", True),  # its own percentile, 60 <= 60
    ({"ttft_s": 0.070, "percentile": 90}, "p99", True),  # p90 <= p99 = 60 <= 70
    ({"ttft_s": 0.030, "percentile": 90}, "p50", False),  # p90 >= p50 = 40 > 30
    ({"ttft_s": 0.050, "percentile": 90}, None, None),  # 40 <= p90 <= 60: either side of 50
    ({"ttft_s": 0.070, "percentile": 99.9}, None, None),  # p99.9 >= 60, no bound above
    ({"ttft_s": 0.045, "percentile": 30}, "p50", True),  # p30 <= p50 = 40 <= 45
])
def test_an_slo_target_is_decided_by_the_percentiles_the_run_reports(slo, decided_by, meets):
    from planner.calibration.check import slo_verdicts
    from planner.calibration.readers import Latency
    from planner.estimator.capacity import Slo

    run, = read_results(EXAMPLES[0])
    run = type(run)(**{**run.__dict__, "ttft": Latency(45.0, 40.0, 60.0)})
    verdict, = slo_verdicts(run, Slo(**slo))
    assert (verdict.decided_by, verdict.meets) == (decided_by, meets)
    assert verdict.statistic == ("mean" if "percentile" not in slo else f"p{slo['percentile']:g}")
    assert verdict.reported == {"mean": 45.0, "p50": 40.0, "p99": 60.0}


def test_a_run_without_request_throughput_is_loaded_by_its_output_throughput():
    from planner.calibration.check import load_check

    run, = read_results(EXAMPLES[0])
    run = type(run)(**{**run.__dict__, "request_throughput": None, "output_throughput": 1000.0,
                       "mean_output_tokens": 200.0})
    assert load_check(run, 5.0).measured_rps == 5.0 and load_check(run, 5.0).at_or_below_planned is True
    assert load_check(run, 4.9).at_or_below_planned is False


def test_check_holds_each_run_to_the_plan_slo_and_load(tmp_path):
    """The plan file carries its workload's SLO as the scenario states it; check reads each target off the run's
    statistics (the examples: p99 TTFT 21.57 and 145.19 ms at 1 and 8 clients, p50 153.29 ms at 32; p99 TPOT 8.26,
    8.31 and 12.43 ms) and puts its
    request throughput (0.60, 4.45, 12.17 req/s) against the plan's per-replica capacity. A plan file written before
    plans carried an SLO is read, and check says it carries none."""
    from planner.render.records import fleet_json

    scenario = chat_scenario(["h100-sxm"])
    scenario["workload"]["slo"] = {"ttft_s": 0.15, "tpot_s": 0.05, "percentile": 90}
    plan = api.plan_fleet(scenario)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(fleet_json(plan, "chat"))
    assert json.loads(plan_path.read_text())["assignments"][0]["slo"] == {"ttft_s": 0.15, "tpot_s": 0.05,
                                                                          "percentile": 90.0}
    rows = {r.result: r for r in api.check(plan_path, EXAMPLES)}
    planned = plan.assignments[0].config.capacity_rps
    c1, c8, c32 = (rows[f"vllm-llama-3.1-8b-h100-c{n}.json"] for n in (1, 8, 32))
    assert [(v.metric, v.decided_by, v.meets) for v in c1.verdicts] == [("ttft_ms", "p99", True), ("tpot_ms", "p99", True)]
    assert [(v.metric, v.decided_by, v.meets) for v in c32.verdicts] == [("ttft_ms", "p50", False), ("tpot_ms", "p99", True)]
    assert c32.verdicts[0].reported["p50"] == 153.293  # the example's median TTFT at 32 clients: p90 is above it
    assert c8.load.measured_rps == 4.4488 and c8.load.planned_rps == pytest.approx(planned, abs=1e-3)
    assert [r.load.at_or_below_planned for r in (c1, c8, c32)] == [r.load.measured_rps <= planned for r in (c1, c8, c32)]
    data = c32.to_dict()
    assert data["slo"]["percentile"] == 90.0 and data["slo"]["checks"][0]["meets"] is False
    assert data["load"]["measured_rps"] == c32.load.measured_rps
    proc = cli("check", str(plan_path), str(EXAMPLES[0]), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "  SLO: TTFT p90 <= 150.00 ms: meets (p99 21.57 ms)" in proc.stdout.splitlines()
    assert f"  load: 0.60 req/s, at or below the planned {planned:,.2f} req/s per replica" in proc.stdout.splitlines()
    # a plan written before plan files carried the SLO
    older = json.loads(plan_path.read_text())
    for row in older["assignments"]:
        del row["slo"]
    plan_path.write_text(json.dumps(older))
    row, = api.check(plan_path, EXAMPLES[:1])
    assert row.slo is None and row.verdicts == () and row.to_dict()["slo"] is None
    proc = cli("check", str(plan_path), str(EXAMPLES[0]), cwd=tmp_path)
    assert proc.returncode == 0 and "  SLO: the plan carries none" in proc.stdout
    older["assignments"][0]["slo"] = {"ttft_s": 0.15, "p95": 1}
    plan_path.write_text(json.dumps(older))
    proc = cli("check", str(plan_path), str(EXAMPLES[0]), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: plan: plan.json.assignments.0.slo.p95: Extra inputs")


def test_check_replan_prices_the_fleet_at_the_measured_speed(tmp_path):
    """--replan fits a calibration on the runs, on the plan's replica they measured (as `planner calibrate` fits one),
    re-solves the plan's scenario with it and puts its replicas and cost against the plan file's. The examples ran
    slower than the tables, so an H100 replica serves less and 30 req/s takes ceil(30 / its capacity) replicas; the
    saved calibration re-solved by `planner solve --calibration` gives the same fleet."""
    import yaml
    from math import ceil

    from planner.render.records import fleet_json

    scenario = chat_scenario(["h100-sxm"])
    scenario["workload"]["traffic"]["requests_per_s"] = 30
    scenario_path = tmp_path / "chat.yaml"
    scenario_path.write_text(yaml.safe_dump(scenario))
    plan = api.plan_fleet(scenario)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(fleet_json(plan, "chat"))
    again = api.replan(plan_path, EXAMPLES, scenario_path)
    on = again.calibration.fitted_on
    assert (on.model, on.gpu, on.tp, on.precision, on.engine) == ("llama-3.1-8b", "h100-sxm", 1, "bf16", "vllm")
    assert again.calibration.errors.after < again.calibration.errors.before
    assert again.plan.speed == ("chat: h100-sxm: calibrated (hopper x vllm)",)
    assignment, = again.plan.assignments
    assert assignment.config.capacity_rps < plan.assignments[0].config.capacity_rps
    assert again.replicas == assignment.replicas == ceil(30 / assignment.config.capacity_rps)
    assert again.planned_replicas == sum(a.replicas for a in plan.assignments)
    assert again.planned_usd_per_hour == plan.usd_per_hour
    assert again.change == pytest.approx(again.plan.usd_per_hour / plan.usd_per_hour - 1)
    data = again.to_dict()
    assert (data["replicas"], data["usd_per_hour"], data["planned_usd_per_hour"]) == (
        again.replicas, again.plan.usd_per_hour, plan.usd_per_hour)
    saved = tmp_path / "fitted.yaml"
    proc = cli("check", str(plan_path), *map(str, EXAMPLES), "--replan", str(scenario_path), "--save-calibration",
               str(saved), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert (f"with the measured speed chat needs {again.replicas} replicas, ${again.plan.usd_per_hour:,.2f}/hour: "
            f"{again.change:+.0%} on the plan's {again.planned_replicas} replicas, ${plan.usd_per_hour:,.2f}/hour") in lines
    assert "speed: chat: h100-sxm: calibrated (hopper x vllm)" in lines and f"wrote {saved}" in lines
    assert load_calibration(saved) == again.calibration
    resolved = api.plan_fleet(api.load_scenario(scenario_path, calibration=str(saved)))
    assert resolved.usd_per_hour == again.plan.usd_per_hour
    proc = cli("check", str(plan_path), str(EXAMPLES[0]), "--replan", str(scenario_path), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["runs"]) == 1 and data["replan"]["planned_replicas"] == again.planned_replicas
    assert json.loads(cli("check", str(plan_path), str(EXAMPLES[0]), "--format", "json", cwd=tmp_path).stdout)[
        "replan"] is None
    # the plan's own scenario only; --save-calibration only with --replan
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**scenario, "name": "search"}))
    for args, start in ((["--replan", str(other)], "error: --replan: the scenario is named 'search'"),
                        (["--save-calibration", str(saved)], "error: --save-calibration: an option of --replan")):
        proc = cli("check", str(plan_path), str(EXAMPLES[0]), *args, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith(start), proc.stderr


def test_calibration_accuracy_flags_a_series_worse_by_more_than_five_points():
    """bench/calibration_accuracy.py's per-series verdict on hand-made errors: medians of the other rows, the change
    in points, WORSE past 5 points, the factors the fit pushed to a bound."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    from calibration_accuracy import SeriesResult

    worse = SeriesResult("a", 4, (0.5, 0.0), [(0.10, 0.20), (0.12, 0.15), (0.30, 0.40)], Factors(memory=4.0, fixed=0.25))
    assert (worse.before, worse.after) == (12.0, 20.0) and worse.change == pytest.approx(8.0) and worse.worse
    assert worse.at_bounds == ["memory", "fixed"]
    # a factor at its generation's floor (the fit's lowest grid point for it) is at a bound too
    floor = SeriesResult("d", 3, (0.2, 0.0), [(0.10, 0.15)], Factors(memory=2 ** (-1 / 16)), (), {"memory": 0.95})
    assert floor.at_bounds == ["memory"]
    within = SeriesResult("b", 3, (0.2, 0.0), [(0.10, 0.149), (0.30, 0.10)], Factors(memory=1.5))
    assert within.change == pytest.approx(-7.55) and not within.worse and within.at_bounds == []
    edge = SeriesResult("c", 3, (0.2, 0.0), [(0.10, 0.15)], Factors())
    assert edge.change == pytest.approx(5.0) and not edge.worse  # more than 5 points: 5 is not worse


def test_calibration_accuracy_fits_a_row_on_what_it_states_as_planner_calibrate_fits_a_run():
    """The bench fits its calibration row on the metrics `planner calibrate` fits (TPOT, TTFT, output tokens/s), where
    the row states them (bench/CALIBRATION_PROTOCOL.md, the amendment on fitting a row as the tool fits a run)."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    from calibration_accuracy import measured_metrics
    from throughput_accuracy import Measurement

    from planner.calibration.calibrate import METRICS

    row = Measurement(row="t", engine="vllm", model="llama-3.1-8b", precision="bf16", kv_dtype="auto", gpu="h100-sxm",
                      tp=1, pp=1, ep=1, dp=1, batch=1, prompt_tokens=1000, output_tokens=100, output_tokens_per_s=90.0,
                      tpot_s=0.011, ttft_s=0.05, source="t", form="single stream")
    assert measured_metrics(row) == {"tpot_ms": 11.0, "ttft_ms": 50.0, "output_tok_s": 90.0}
    assert set(measured_metrics(row)) == set(METRICS)
    closed = Measurement(**{**row.__dict__, "batch": 16, "ttft_s": None, "output_tokens_per_s": None,
                            "form": "closed loop"})
    assert measured_metrics(closed) == {"tpot_ms": 11.0}


def test_calibration_accuracy_keeps_a_series_to_one_deployment():
    """Rows of one source that differ in batch, lengths or the source's own numbering are one series; rows that differ
    in their expert- or data-parallel size or a setting are another deployment (bench/CALIBRATION_PROTOCOL.md, the
    correction on a series being one deployment)."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    from calibration_accuracy import series_key
    from throughput_accuracy import Measurement

    row = Measurement(row="t", engine="sglang", model="deepseek-v3", precision="fp8-block", kv_dtype="auto",
                      gpu="h200-sxm", tp=8, pp=1, ep=1, dp=1, batch=4, prompt_tokens=1000, output_tokens=100,
                      output_tokens_per_s=None, tpot_s=0.02, ttft_s=None, source="run_conc4.json", form="closed loop")
    same = Measurement(**{**row.__dict__, "batch": 64, "prompt_tokens": 2000, "source": "run_conc64.json"})
    assert series_key(same) == series_key(row)
    for change in ({"dp": 8}, {"ep": 8}, {"release": "0.5.12"}, {"settings": (("chunked_prefill_size", 4096),)},
                   {"max_running": 32}, {"attention_backend": "triton"}, {"settings": (("max_running_requests", 64),)}):
        assert series_key(Measurement(**{**row.__dict__, **change})) != series_key(row), change
    # a running-request limit the recipe sets from the concurrency (--max-running-requests ${CONC}) is one setting
    told = [Measurement(**{**m.__dict__, "settings": (("max_running_requests", m.batch),)}) for m in (row, same)]
    assert series_key(told[0]) == series_key(told[1]) != series_key(row)


SCRAPES = Path(__file__).parent / "data" / "metrics"


def test_a_vllm_metrics_window_reads_the_histograms_increase():
    """tests/data/metrics/vllm-window.prom: 10 warm-up requests before the window, 120 in its 60 s (README there)."""
    run, = read_results(SCRAPES / "vllm-window.prom")
    assert (run.tool, run.model_id, run.date) == ("vllm-metrics", "meta-llama/Llama-3.1-8B-Instruct", "20260101-000000")
    assert run.completed == 120 and run.request_rate == run.request_throughput == 120 / 60
    assert run.max_concurrency is None and run.engine_version is None
    assert (run.mean_input_tokens, run.mean_output_tokens) == (120_000 / 120, 24_000 / 120)
    assert run.output_throughput == 24_000 / 60
    # mean = the sum's increase / the count's; median and p99 linear within their bucket
    # TTFT: 30 in (40, 60] ms, 60 in (60, 80], 24 in (80, 100], 6 in (100, 250]; rank 60 is half-way through
    # (60, 80] and rank 118.8 is 4.8 of (100, 250]'s 6
    assert run.ttft.mean_ms == pytest.approx(9.0 / 120 * 1000)
    assert run.ttft.median_ms == pytest.approx(60 + 20 * 30 / 60) and run.ttft.p99_ms == pytest.approx(100 + 150 * 4.8 / 6)
    # TPOT, per request: 24 in (0, 10] ms, 96 in (10, 25]
    assert run.tpot.mean_ms == pytest.approx(1.44 / 120 * 1000)
    assert run.tpot.median_ms == pytest.approx(10 + 15 * 36 / 96) and run.tpot.p99_ms == pytest.approx(10 + 15 * 94.8 / 96)
    assert run.itl.mean_ms == pytest.approx(286.56 / 23_880 * 1000)
    # E2E: 60 in (1.0, 1.5] s, 54 in (1.5, 2.0], 6 in (2.0, 2.5]
    assert (run.e2el.mean_ms, run.e2el.median_ms) == (pytest.approx(1750.0), pytest.approx(1500.0))
    assert run.e2el.p99_ms == pytest.approx(2000 + 500 * 4.8 / 6)


def test_an_sglang_metrics_window_sums_its_series_and_starts_new_ones_from_zero():
    """sglang-window.prom: 4 non-streaming requests before the window; its 120 s add 36 streaming ones, whose
    is_streaming="true" series the first scrape does not have yet. No per-request TPOT histogram: TPOT is None."""
    run, = read_results(SCRAPES / "sglang-window.prom")
    assert (run.tool, run.model_id, run.completed, run.request_rate) == ("sglang-metrics", "Qwen/Qwen2.5-7B-Instruct",
                                                                        36, 36 / 120)
    assert (run.mean_input_tokens, run.mean_output_tokens, run.output_throughput) == (600.0, 300.0, 10_800 / 120)
    assert run.ttft.mean_ms == pytest.approx(9.0 / 36 * 1000)  # 18 in (100, 200] ms, 18 in (200, 400]
    assert run.ttft.median_ms == pytest.approx(200.0) and run.ttft.p99_ms == pytest.approx(200 + 200 * 17.64 / 18)
    assert run.tpot.mean_ms is run.tpot.median_ms is run.tpot.p99_ms is None
    assert run.itl.mean_ms == pytest.approx(18.0) and run.e2el.median_ms == pytest.approx(5000.0)


def _first(text):
    return text.split("# planner-scrape 1767225660\n")[0]


def _second(text, old, new):
    """`old` replaced in the second scrape only."""
    start, end = text.split("# planner-scrape 1767225660\n")
    assert old in end
    return start + "# planner-scrape 1767225660\n" + end.replace(old, new)


E2E_COUNT = 'vllm:e2e_request_latency_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'


def test_a_quantile_past_the_last_finite_bucket_is_not_given(tmp_path):
    """Two more requests in the window, of 8,000 s each (past the last finite bucket, 7,680 s): of 122, p99's rank
    120.78 is past the 120 below 7,680 s; the median's, 61, is 1 of (1.5, 2.0]'s 54."""
    slow = 'vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
    text = _second((SCRAPES / "vllm-window.prom").read_text(), f"{slow} 130.0", f"{slow} 132.0")
    text = _second(_second(text, f"{E2E_COUNT} 130.0", f"{E2E_COUNT} 132.0"), "_sum{engine=\"0\",model_name=\"meta-llama/"
                   "Llama-3.1-8B-Instruct\"} 219.0", "_sum{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 16219.0")
    path = tmp_path / "slow.prom"
    path.write_text(text)
    run, = read_results(path)
    assert run.completed == 122 and run.e2el.p99_ms is None
    assert run.e2el.median_ms == pytest.approx(1500 + 500 / 54) and run.e2el.mean_ms == pytest.approx(16_210 / 122 * 1000)


@pytest.mark.parametrize("edit, names", [
    (_first, "holds 1 `# planner-scrape` lines, not 2"),
    (lambda t: t.replace("# planner-scrape 1767225660\n", ""),
     "line 164: vllm:num_requests_running repeats a series of the same scrape (a scrape without its `# planner-scrape` "
     "line?)"),
    (lambda t: t.replace("# planner-scrape 1767225600\n", "vllm:x 1\n# planner-scrape 1767225600\n"),
     "line 1 comes before the first `# planner-scrape` line"),
    (lambda t: t.replace("# planner-scrape 1767225600", "# planner-scrape soon"), "'soon' is not a time in unix seconds"),
    (lambda t: t.replace("# planner-scrape 1767225660", "# planner-scrape 1767225600"),
     "the second scrape's time (1.76723e+09) is not after the first's"),
    (lambda t: t.replace("# HELP vllm:num_requests_waiting", "vllm:num_requests_waiting{engine=0} 1\n#"),
     "line 5 is not a Prometheus sample (name{labels} value): 'vllm:num_requests_waiting{engine=0} 1'"),
    (lambda t: t.replace("# HELP vllm:num_requests_waiting", "vllm:x 1 2 3\n#"), "line 5 is not a Prometheus sample"),
    (lambda t: _second(t, f"{E2E_COUNT} 130.0", f"{E2E_COUNT} 5.0"),
     f"{E2E_COUNT} fell from 10 to 5 "
     "between the scrapes: the engine restarted in the window"),
    (lambda t: _second(t, f"{E2E_COUNT} 130.0", f"{E2E_COUNT} 131.0"),
     "vllm:e2e_request_latency_seconds's buckets do not add up to its _count"),
    (lambda t: _second(t, f"{E2E_COUNT} 130.0", f"{E2E_COUNT} 130.0\n{E2E_COUNT} 130.0"), "repeats a series"),
    (lambda t: _second(t, f"{E2E_COUNT} 130.0", f"{E2E_COUNT} NaN"), "is nan, not a count"),
    (lambda t: _second(t, f"{E2E_COUNT.replace('_count', '_sum')} 219.0", f"{E2E_COUNT.replace('_count', '_sum')} 1e308"),
     "vllm:e2e_request_latency_seconds_sum grew by 1e+308 over 120 observations, past any measurement"),
    (lambda t: _second(t, 'tokens_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 128000.0',
                       'tokens_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8050.0'),
     "vllm:request_prompt_tokens and request_generation_tokens must hold at least a token per request"),
    (lambda t: "\n".join(line for line in t.splitlines() if "time_to_first_token" not in line),
     "vllm:time_to_first_token_seconds is missing; scrape vLLM v0.34.0 or later, which exports it"),
    (lambda t: t.replace("vllm:", "other:"), "has neither vllm:e2e_request_latency_seconds nor sglang:"),
    (lambda t: _first(t) + _first(t).replace("# planner-scrape 1767225600", "# planner-scrape 1767225660"),
     "no request finished between the scrapes (vllm:e2e_request_latency_seconds_count did not grow)"),
])
def test_a_bad_scrape_is_one_line_naming_the_metric_and_the_fix(tmp_path, edit, names):
    path = tmp_path / "window.prom"
    path.write_text(edit((SCRAPES / "vllm-window.prom").read_text()))
    with pytest.raises(PlannerInputError) as info:
        read_results(path)
    message = str(info.value)
    assert message.startswith("result: window.prom: ") and names in message and "\n" not in message


def test_cli_calibrate_takes_a_metrics_window(tmp_path):
    proc = cli("calibrate", str(SCRAPES / "vllm-window.prom"), "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp",
               "1", "-o", str(tmp_path / "calibration.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {tuple(line.split()[:3]) for line in proc.stdout.splitlines()}
    assert {("vllm-window.prom", "tpot_ms", "12.00"), ("vllm-window.prom", "ttft_ms", "75.00"),
            ("vllm-window.prom", "output_tok_s", "400.00")} <= rows
    calibration = load_calibration(tmp_path / "calibration.yaml")
    assert calibration.fitted_on.dates == ("20260101-000000",) and calibration.fitted_on.results[0].name == "vllm-window.prom"
    bad = tmp_path / "bad.prom"
    bad.write_text(_first((SCRAPES / "vllm-window.prom").read_text()))
    proc = cli("calibrate", str(bad), "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: result: bad.prom: holds 1 `# planner-scrape` lines")


def test_calibrate_replays_runs_on_the_moe_kernel_their_server_was_told_to_run(tmp_path):
    """`planner calibrate --moe-kernel`: the runs are replayed on the stated kernel's table (SGLang's FlashInfer MxInt4
    MoE, which vLLM runs with VLLM_USE_FLASHINFER_MOE_INT4=1), the file records it, and a kernel no table of the GPU
    measures is refused in one line."""
    (tmp_path / "kimi.jsonl").write_text(json.dumps(sglang_line(
        server_info={"model_path": "moonshotai/Kimi-K2.5", "version": "0.5.23"}, completed=32, max_concurrency=4,
        random_input_len=512, random_output_len=32, total_input_tokens=16384, total_output_tokens=1024,
        mean_tpot_ms=9.0, median_tpot_ms=9.0, output_throughput=400.0)) + "\n")
    common = dict(model="kimi-k2.5", tp=8, precision="int4-g32", engine="sglang")
    stated = api.calibrate([tmp_path / "kimi.jsonl"], gpu="b200", moe_kernel="flashinfer_trtllm", **common)
    assert stated.fitted_on.moe_kernel == "flashinfer_trtllm"
    path = tmp_path / "calibration.yaml"
    path.write_text(stated.to_yaml())
    assert load_calibration(path) == stated
    assert api.calibrate([tmp_path / "kimi.jsonl"], gpu="b200", **common).fitted_on.moe_kernel is None
    proc = cli("calibrate", str(tmp_path / "kimi.jsonl"), "--model", "kimi-k2.5", "--gpu", "h200-sxm", "--tp", "8",
               "--precision", "int4-g32", "--engine", "sglang", "--moe-kernel", "flashinfer_trtllm", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "no sglang table on hopper GPUs times 'flashinfer_trtllm'" in proc.stderr


def test_runs_are_replayed_as_the_sglang_server_was_told_its_running_requests():
    """`planner calibrate / bench / simulate --benchmark --max-running-requests N`: the replica that replays the runs
    runs at most N at once (SGLang's flag: each DP group its share), so the 32-client example queues half its clients
    at N = 16, and the fit differs; another engine is not told it."""
    def replays(told):
        return {r.measured.max_concurrency: r.predicted for r in api.replay_results(
            EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", engine="sglang", max_running_requests=told)}

    default, told = replays(None), replays(16)
    assert told[32].ttft.mean_ms > 2 * default[32].ttft.mean_ms
    assert told[1].ttft.mean_ms == default[1].ttft.mean_ms  # one client never meets the limit
    fits = [api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", engine="sglang", max_running_requests=told)
            for told in (None, 16)]
    assert fits[0].factors != fits[1].factors
    with pytest.raises(PlannerInputError, match="SGLang's flag, not vllm's"):
        api.calibrate(EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", max_running_requests=16)
