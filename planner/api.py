"""The Python API: the same entry points the CLI uses, returning dataclasses.

    from planner import estimate, solve, load_catalog
    est = estimate("llama-3.1-8b", precision="fp8", context=32768, gpu="l40s")
    est.total_bytes, est.gpu.fits, est.to_frame()
    plan = solve("scenarios/70b-chat.yaml").best
"""

from __future__ import annotations

from dataclasses import replace
from math import isfinite
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from planner.catalog.load import Catalog, load_catalog
from planner.errors import PlannerInputError
from planner.model.sources import resolve_model
from planner.model.precision import resolve_precision
from planner.estimator.layout import parallel_refusal
from planner.estimator.memory import GpuTarget, MemoryEstimate, Request, estimate_memory
from planner.plan.roles import BOTH, DECODE
from planner.units import parse_count, parse_size

if TYPE_CHECKING:  # OR-Tools loads only when solving
    from planner.catalog.load import Gpu
    from planner.estimator.capacity import Scheduler
    from planner.model.architecture import Architecture
    from planner.api_records import (BenchResult, CheckedRun, EngineEstimate, PerfResult, Replan, Replica,
                                     ReplayedRun, ReplicaSimulation, ReplicaSpec)
    from planner.calibration.calibrate import Calibration
    from planner.calibration.readers import MeasuredRun
    from planner.estimator.benchmark import BenchmarkRun
    from planner.estimator.speculative import Speculation, SpeculativeTimer
    from planner.catalog.price_update import PriceUpdate
    from planner.estimator.engines import EngineSettings
    from planner.estimator.fit import EngineFit
    from planner.estimator.performance import PerformanceCatalog, ReplicaTimer
    from planner.plan.deadline import CommandStart, Deadline, OutOfTime
    from planner.plan.fleet import FleetPlan
    from planner.plan.profile import DayPlan
    from planner.plan.review import FleetReview, Review
    from planner.plan.solver import PlanOption
    from planner.render.export import ExportPlan
    from planner.plan.scenario import Scenario
    from planner.plan.solver import SolveResult
    from planner.plan.whatif import WhatIf


def gpu_target(catalog: Catalog, gpu: str | None, gpu_memory: str | None) -> GpuTarget | None:
    """--gpu NAME or --gpu-memory SIZE (a custom card), not both."""
    if gpu is not None and gpu_memory is not None:
        raise PlannerInputError("--gpu and --gpu-memory: give one of them, not both")
    if gpu is not None:
        return GpuTarget.from_catalog(catalog.gpus.get(gpu))
    if gpu_memory is not None:
        return GpuTarget(f"custom {gpu_memory}", parse_size(gpu_memory, "--gpu-memory"))
    return None


def estimate(model: str | None = None, *, context: int = 8192, batch: int = 1, tp: int = 1, pp: int = 1,
             dp: int = 1, ep: int = 1, all_to_all: str | None = None, precision: str = "auto", kv_dtype: str = "auto",
             gpu: str | None = None, gpu_memory: str | None = None,
             overhead: float | None = None, params: int | str | None = None, layers: int | None = None,
             kv_heads: int | None = None, head_dim: int | None = None, heads: int | None = None,
             catalog: Catalog | None = None) -> MemoryEstimate:
    """Memory for one configuration: a catalog model, an HF id from the catalog, a config.json path, or a size."""
    catalog = catalog or load_catalog()
    count = parse_count(str(params), "--params") if params is not None else None
    arch = resolve_model(catalog, model, count, layers, kv_heads, head_dim, heads)
    request = Request(context=context, batch=batch, tp=tp, pp=pp, precision=precision, kv_dtype=kv_dtype,
                      overhead_fraction=overhead, dp=dp, ep=ep, all_to_all=all_to_all)
    return estimate_memory(arch, request, catalog, gpu_target(catalog, gpu, gpu_memory))


def engine_estimate(model: str | None, settings: EngineSettings, *, context: int = 8192, batch: int = 1,
                    tp: int = 1, pp: int = 1, dp: int = 1, ep: int = 1, all_to_all: str | None = None,
                    precision: str = "auto", kv_dtype: str = "auto", gpu: str | None = None,
                    gpu_memory: str | None = None, params: int | str | None = None, layers: int | None = None,
                    kv_heads: int | None = None, head_dim: int | None = None, heads: int | None = None,
                    catalog: Catalog | None = None, speculation: Speculation | None = None) -> EngineEstimate:
    """`estimate` plus the KV pool an engine (vLLM, SGLang, llama.cpp) would get on the card; with `speculation`, the
    checkpoint's MTP layer held beside the model (planner.plan.configuration.served_architecture)."""
    from planner.api_records import EngineEstimate
    from planner.estimator.engines import engine_budget
    from planner.plan.configuration import served_architecture

    catalog = catalog or load_catalog()
    target = gpu_target(catalog, gpu, gpu_memory)
    if target is None:
        raise PlannerInputError(f"--engine {settings.name}: an engine sizes its pool from the card; give --gpu or --gpu-memory")
    count = parse_count(str(params), "--params") if params is not None else None
    arch = served_architecture(resolve_model(catalog, model, count, layers, kv_heads, head_dim, heads), speculation)
    request = Request(context=context, batch=batch, tp=tp, pp=pp, precision=precision, kv_dtype=kv_dtype, dp=dp, ep=ep,
                      all_to_all=all_to_all)
    memory = estimate_memory(arch, request, catalog, target, served_by=settings.name)
    return EngineEstimate(memory, engine_budget(arch, request, settings, target, catalog))


def fit(model: str | None, settings: EngineSettings, *, gpu: str | None = None, gpu_memory: str | None = None,
        gpus: int | None = None, context: int = 8192, batch: int = 1, precision: str = "auto",
        kv_dtype: str = "auto", engines: tuple[str, ...] | None = None, params: int | str | None = None,
        catalog: Catalog | None = None) -> tuple[EngineFit, ...]:
    """Solving backwards, per engine: the largest context, the most sequences, the fewest GPUs."""
    from planner.estimator.fit import fit_engines

    catalog = catalog or load_catalog()
    target = gpu_target(catalog, gpu, gpu_memory)
    if target is None:
        raise PlannerInputError("--gpu: give the card to fit on (--gpu NAME or --gpu-memory SIZE)")
    count = parse_count(str(params), "--params") if params is not None else None
    arch = resolve_model(catalog, model, count)
    request = Request(context=context, batch=batch, precision=precision, kv_dtype=kv_dtype)
    return fit_engines(arch, request, settings, target, catalog, gpus, engines or (settings.name,))


# `started` (the commands below): when the `planner` command began; the time limit then covers the whole command,
# catalogs and printing included (planner.plan.deadline). None: the limit counts from the call.

def solve(scenario: str | Path | dict[str, Any] | Scenario, *, time_limit_s: float | None = None,
          top: int | None = None, catalog: Catalog | None = None, started: CommandStart | None = None) -> SolveResult:
    """The cheapest plan for a scenario file (or the same content as a dict)."""
    from planner.plan.solver import solve_scenario

    loaded = _scenario(scenario)
    deadline = _deadline(loaded, time_limit_s, started)
    return solve_scenario(loaded, catalog or load_catalog(), top=top, deadline=deadline)


def plan_fleet(scenario: str | Path | dict[str, Any] | Scenario, *, time_limit_s: float | None = None,
               catalog: Catalog | None = None, started: CommandStart | None = None,
               calibration: Calibration | None = None) -> FleetPlan:
    """The cheapest fleet for a scenario with traffic (one service, or a `workloads:` list); `calibration` (a
    `planner calibrate` record) in place of the scenario's calibration: file."""
    from planner.plan.fleet import fleet_problem, plan_fleet as plan

    catalog = catalog or load_catalog()
    loaded = _scenario(scenario)
    # the limit covers building the workloads' search spaces too (200 of them take seconds)
    deadline = _deadline(loaded, time_limit_s, started)
    return plan(fleet_problem(loaded, catalog, time_limit_s, calibration), catalog, deadline=deadline)


def plan_day(scenario: str | Path | dict[str, Any] | Scenario, fleet: FleetPlan) -> DayPlan | None:
    """With a day profile (workload.traffic.profile) in the scenario, each UTC hour sized from `fleet`, its peak
    plan (plan_fleet of the same scenario), against running the peak fleet all day; None without one."""
    from planner.plan.profile import plan_day as day

    return day(_scenario(scenario), fleet)


def _deadline(scenario: Scenario, time_limit_s: float | None, started: CommandStart | None) -> Deadline:
    from planner.plan.deadline import Deadline

    return Deadline.for_command(time_limit_s if time_limit_s is not None else scenario.solver.time_limit_s, started)


def load_scenario(path: str | Path, max_price_age_days: int | None = None, calibration: str | None = None) -> Scenario:
    """A scenario file, read and validated (the one-line error names the key); `max_price_age_days` (--max-price-age)
    replaces every pricing section's max_price_age_days, `calibration` (--calibration: a path from where the command
    runs) the scenario's calibration file."""
    from planner.plan.scenario import load_scenario as load

    loaded = load(path)
    if calibration is not None:
        loaded = loaded.with_calibration(str(Path(calibration).resolve()))
    return loaded if max_price_age_days is None else loaded.with_max_price_age(max_price_age_days)


def _scenario(scenario: str | Path | dict[str, Any] | Scenario) -> Scenario:
    from planner.plan.scenario import Scenario, load_scenario, parse_scenario

    if isinstance(scenario, Scenario):
        return scenario
    return parse_scenario(scenario) if isinstance(scenario, dict) else load_scenario(scenario)


def what_if(scenario: str | Path | dict[str, Any] | Scenario, *, time_limit_s: float | None = None,
            catalog: Catalog | None = None, started: CommandStart | None = None) -> tuple[WhatIf, ...]:
    """The scenario and its standard variants, each solved: one comparison for a capacity review, all of it
    within `time_limit_s` (default: the scenario's solver.time_limit_s)."""
    from planner.plan.whatif import what_if as compare_variants

    loaded = _scenario(scenario)
    deadline = _deadline(loaded, time_limit_s, started)
    return compare_variants(loaded, catalog or load_catalog(), deadline)


def compare(model: str, *, context: int = 8192, concurrency: int = 1, gpus: list[str] | None = None,
            providers: list[str] | None = None, precisions: list[str] | None = None, market: str = "on-demand",
            max_gpus: int = 8, max_price_age_days: int | None = None, time_limit_s: float | None = None,
            catalog: Catalog | None = None, started: CommandStart | None = None) -> tuple[PlanOption, ...]:
    """The cheapest configuration holding MODEL on each GPU type and provider, sorted by $/hour, within
    `time_limit_s` (default: a scenario's solver.time_limit_s)."""
    from planner.plan.compare import compare_offers
    from planner.plan.scenario import parse_scenario

    scenario = parse_scenario({
        "name": f"compare {model}", "model": model, "workload": {"context": context, "concurrency": concurrency},
        "search": {"gpus": gpus, "precisions": precisions, "max_gpus_per_replica": max_gpus},
        "pricing": {"providers": providers, "market": market}
        | ({"max_price_age_days": max_price_age_days} if max_price_age_days is not None else {}),
    }, "compare")
    return compare_offers(scenario, catalog or load_catalog(), deadline=_deadline(scenario, time_limit_s, started))


def review(scenario: str | Path | dict[str, Any] | Scenario, *, progress: Callable[[int, int], None] | None = None,
           time_limit_s: float | None = None, catalog: Catalog | None = None,
           started: CommandStart | None = None) -> Review:
    """A single-configuration plan with what binds it and its cost curves (`planner report`), all of it within
    `time_limit_s` (default: the scenario's solver.time_limit_s)."""
    from planner.plan.review import review_scenario

    loaded = _scenario(scenario)
    deadline = _deadline(loaded, time_limit_s, started)
    return review_scenario(loaded, catalog or load_catalog(), progress, deadline)


def review_fleet(scenario: str | Path | dict[str, Any] | Scenario, *, time_limit_s: float | None = None,
                 catalog: Catalog | None = None, started: CommandStart | None = None) -> FleetReview:
    """A fleet plan with its cost against the demand, the prices of the GPU types it rents and the catalogs' sizes
    (`planner report` of a scenario with traffic), all of it within `time_limit_s` (default: the scenario's
    solver.time_limit_s)."""
    from planner.plan.review import review_fleet as review_the_fleet

    loaded = _scenario(scenario)
    return review_the_fleet(loaded, catalog or load_catalog(), _deadline(loaded, time_limit_s, started))


def export_plans(path: str | Path, *, plan_index: int = 0, assignment: int | None = None,
                 catalog: Catalog | None = None) -> tuple[ExportPlan, ...]:
    """The plans of a plan file to deploy, each checked against the plan schema and re-checked by the estimator:
    one of a single-configuration plan (`plan_index`), every assignment of a fleet (or only `assignment`)."""
    from planner.render.export import load_plans

    return load_plans(path, catalog or load_catalog(), plan_index, assignment)


def update_prices(source: str, *, providers: tuple[str, ...] = (), prices_file: str | Path | None = None,
                  as_of: str | None = None, catalog: Catalog | None = None) -> PriceUpdate:
    """`planner prices update`: rebuild the SkyPilot-catalog rows of prices.yaml from SkyPilot's vms.csv files
    (a local catalogs/v<N> folder or its URL)."""
    from planner.catalog.price_update import update_prices as rebuild
    from planner.catalog.skypilot import load_skypilot

    return rebuild(source, providers, catalog or load_catalog(), load_skypilot(),
                   Path(prices_file) if prices_file else None, as_of)


def perf(model: str, *, gpu: str, gpus: int | None = None, tp: int | None = None, pp: int = 1, ep: int = 1, dp: int = 1,
         precision: str = "auto", kv_dtype: str = "auto", engine: str = "vllm", batch: int = 1,
         prompt_tokens: int = 1024, output_tokens: int = 256, rate: float | None = None,
         concurrency: int | None = None, calibration: Calibration | None = None,
         speculation: Speculation | None = None,
         catalog: Catalog | None = None, performance: PerformanceCatalog | None = None,
         engine_version: str | None = None, varying_lengths: bool = False,
         scheduler_recv_interval: int = 1, moe_kernel: str | None = None,
         prefill_delayer: bool = False, max_running_requests: int | None = None) -> PerfResult:
    """Speed of one replica: TTFT, TPOT, tokens/s and requests/s at a batch; with `rate`, its steady state under
    open-loop arrivals (beyond what it keeps up with, a finite simulated run at that rate instead); with
    `concurrency`, the steady state of that many clients sending requests back to back (a closed loop; with
    `varying_lengths`, requests whose lengths scatter around the means, finishing at scattered steps, and SGLang's
    `scheduler_recv_interval`, the decode steps between its polls for them, and `prefill_delayer`, its
    --enable-prefill-delayer holding their prefills back under DP attention); `ep`:
    the routed experts dealt over that many of the tp GPUs; `dp`: data-parallel attention groups among them, each
    attending to its own requests from its own pool (the requests dealt evenly over the groups); `speculation`: every
    decode step a speculative cycle of the checkpoint's MTP module (planner.estimator.speculative); with
    `calibration` (planner.calibration), timed with its factors when it is of this GPU generation x engine;
    `performance`: the speed model's constants to time it with (default catalogs/performance.yaml); `moe_kernel`:
    the fused-MoE kernel the engine was told to run (SGLang --moe-runner-backend, vLLM's VLLM_USE_FLASHINFER_MOE_INT4),
    timed on its own table (None: the kernel the release picks); `max_running_requests`: SGLang's
    --max-running-requests, the requests its scheduler runs at once (each DP group its share; None: its default)."""
    from planner.api_records import PerfResult
    from planner.estimator.performance import Workload, timer_performance

    if rate is not None and concurrency is not None:
        raise PlannerInputError("--rate and --concurrency: give one of them (open-loop arrivals or C clients in a loop)")
    for flag, value in (("--batch", batch), ("--prompt-tokens", prompt_tokens), ("--output-tokens", output_tokens)):
        if value < 1:
            raise PlannerInputError(f"{flag}: must be at least 1, got {value}")
    if rate is not None and not (isfinite(rate) and rate >= 0):
        raise PlannerInputError(f"--rate: {rate} must be 0 or more requests/s")
    if concurrency is not None and concurrency < 1:
        raise PlannerInputError(f"--concurrency: {concurrency} must be at least 1 client")
    if varying_lengths and concurrency is None:
        raise PlannerInputError("--varying-lengths: only with --concurrency (the closed loop's clients)")
    if scheduler_recv_interval != 1 and not (varying_lengths and engine == "sglang"):
        raise PlannerInputError("--scheduler-recv-interval: SGLang's polling for new requests, timed in a closed loop "
                                "whose lengths vary; add --engine sglang --concurrency C --varying-lengths, or drop it")
    if prefill_delayer and not (varying_lengths and engine == "sglang"):
        raise PlannerInputError("--prefill-delayer: SGLang's delayer of prefills under DP attention, timed in a closed "
                                "loop whose lengths vary; add --engine sglang --dp D --concurrency C --varying-lengths, "
                                "or drop it")
    if max_running_requests is not None and rate is None and concurrency is None and batch > max_running_requests:
        raise PlannerInputError(f"--max-running-requests: the server runs at most {max_running_requests} requests at "
                                f"once, fewer than --batch {batch}; lower --batch, or time the queue with --concurrency")
    if speculation is not None and (rate is not None or concurrency is not None or pp > 1):
        raise PlannerInputError("--speculative: timed at a --batch on one pipeline stage only; drop --rate, "
                                "--concurrency and --pp (a fleet scenario sizes MTP replicas under traffic; perf's "
                                "--rate and --concurrency runs are simulated one token a step)")
    replica = _replica(model, gpu, gpus, tp, pp, precision, kv_dtype, engine, prompt_tokens + output_tokens,
                       catalog or load_catalog(), sized=rate is not None or concurrency is not None,
                       calibration=calibration, performance=performance, ep=ep, dp=dp,
                       engine_version=engine_version, moe_kernel=moe_kernel, speculative=speculation is not None,
                       max_running_requests=max_running_requests)
    shape = Workload(prompt_tokens, output_tokens)
    cycle = None
    if speculation is None:
        _check_runs(replica, prompt_tokens + output_tokens, batch, precision, kv_dtype)
        result = timer_performance(replica.timer, batch, shape)
    else:
        from planner.estimator.speculative import speculative_performance

        _check_runs(replica, prompt_tokens + output_tokens, batch, precision, kv_dtype, speculation)
        result, cycle = speculative_performance(_speculative_timer(replica, precision, kv_dtype, speculation,
                                                                   performance), batch, shape)
    steady = closed = finite = None
    if rate is not None:
        from planner.estimator.benchmark import DEFAULT_PROMPTS, MAX_OUTPUT_TOKENS, BenchmarkRun, run_benchmark
        from planner.estimator.capacity import steady_state

        steady = steady_state(replica.timer, replica.scheduler, shape, rate)
        if steady.limit:  # past what it keeps up with: no steady state, so what a finite run at that rate sees
            prompts = max(1, min(DEFAULT_PROMPTS, MAX_OUTPUT_TOKENS // output_tokens))
            finite = run_benchmark(replica.timer, replica.scheduler, BenchmarkRun(
                num_prompts=prompts, request_rate=rate, input_len=prompt_tokens, output_len=output_tokens))
    closed_run = None
    if concurrency is not None:
        from planner.estimator.benchmark import closed_loop_run
        from planner.estimator.closed_loop import admits_past_pool, closed_loop
        from planner.estimator.engines.sglang import prefill_delayer as release_delayer

        delayer = release_delayer(replica.release) if prefill_delayer else None
        closed = closed_loop(replica.timer, replica.scheduler, shape, concurrency, varying_lengths,
                             scheduler_recv_interval, delayer)
        if admits_past_pool(replica.scheduler, closed, varying_lengths):  # it preempts: what a run of the loop sees
            closed_run = closed_loop_run(replica.timer, replica.scheduler, shape, concurrency)
    return PerfResult(replica.arch.name, replica.card.name, replica.tp, replica.pp, replica.engine, result, steady,
                      closed, finite, replica.calibration, replica.ep, speculation, cycle, replica.dp, closed_run)


def _speculative_timer(replica: Replica, precision: str, kv_dtype: str, spec: Speculation,
                       performance: PerformanceCatalog | None) -> SpeculativeTimer:
    """The target's timer and the MTP draft's, on the same GPUs, layout, engine and constants (served_timer)."""
    from planner.estimator.performance import replica_timer
    from planner.estimator.speculative import served_timer

    def timer(model: Architecture) -> ReplicaTimer:
        if model is replica.arch:
            return replica.timer
        return replica_timer(model, precision, kv_dtype, replica.card, replica.tp, replica.pp, replica.catalog,
                             replica.engine, performance, replica.ep, replica.dp, replica.release,
                             moe_kernel=replica.moe_kernel)

    return served_timer(timer, replica.arch, spec)


def bench(model: str, run: BenchmarkRun, *, gpu: str, gpus: int | None = None, tp: int | None = None, pp: int = 1,
          precision: str = "auto", kv_dtype: str = "auto", engine: str = "vllm", calibration: Calibration | None = None,
          catalog: Catalog | None = None, engine_version: str | None = None,
          moe_kernel: str | None = None, max_running_requests: int | None = None) -> BenchResult:
    """A `vllm bench serve` run (`run`: its random dataset, request rate and max concurrency) replayed on one
    simulated replica, whose max-model-len is the longest request the run can draw; with `calibration`, timed
    with its factors when it is of this GPU generation x engine; `moe_kernel` and `max_running_requests` as perf's."""
    from planner.api_records import BenchResult
    from planner.estimator.benchmark import run_benchmark

    context = run.input_bounds[1] + run.output_bounds[1]
    replica = _replica(model, gpu, gpus, tp, pp, precision, kv_dtype, engine, context, catalog or load_catalog(),
                       sized=True, calibration=calibration, engine_version=engine_version, moe_kernel=moe_kernel,
                       max_running_requests=max_running_requests)
    return BenchResult(replica.arch.name, replica.card.name, replica.tp, replica.pp, replica.engine,
                       run_benchmark(replica.timer, replica.scheduler, run), replica.calibration)


def replay_results(results: Sequence[str | Path], *, model: str, gpu: str, gpus: int | None = None,
                   tp: int | None = None, pp: int = 1, precision: str = "auto", kv_dtype: str = "auto",
                   engine: str = "vllm", time_limit_s: float | None = None,
                   catalog: Catalog | None = None, moe_kernel: str | None = None,
                   engine_version: str | None = None, max_running_requests: int | None = None) -> tuple[ReplayedRun, ...]:
    """Each measured run of the `results` (vllm bench serve, SGLang bench_serving, GuideLLM or /metrics scrape
    files) replayed on one simulated replica as `planner calibrate` replays it before fitting: what the run measured
    against what the simulator predicts; `time_limit_s` (default none) bounds the replays from now;
    `max_running_requests`: SGLang's --max-running-requests the runs' server was told (None: its default)."""
    from planner.api_records import ReplayedRun
    from planner.calibration.calibrate import replay_run
    from planner.estimator.benchmark import run_benchmark

    runs, replica = _measured_replica(results, model, gpu, gpus, tp, pp, precision, kv_dtype, engine, catalog,
                                      moe_kernel, engine_version, max_running_requests)
    scheduler = replica.scheduler
    assert scheduler is not None  # sized
    deadline = _time_limit(time_limit_s)
    out = []
    for run in runs:
        if deadline.expired():
            raise _replays_out_of_time(deadline, len(out), "before every run was replayed")
        out.append(ReplayedRun(run, run_benchmark(replica.timer, scheduler, replay_run(run))))
    return tuple(out)


def calibrate(results: Sequence[str | Path], *, model: str, gpu: str, gpus: int | None = None, tp: int | None = None,
              pp: int = 1, precision: str = "auto", kv_dtype: str = "auto", engine: str = "vllm",
              time_limit_s: float | None = None, catalog: Catalog | None = None,
              moe_kernel: str | None = None, engine_version: str | None = None,
              max_running_requests: int | None = None) -> Calibration:
    """The named factors (planner.calibration.factors) that make one replica's simulated benchmark runs match the
    measured `results` (vllm bench serve, SGLang bench_serving, GuideLLM or /metrics scrape files), with the
    residuals before and after and each run predicted by a fit on the others; `time_limit_s` (default none) bounds
    the fit from now; `moe_kernel`: the fused-MoE kernel the runs' server was told to run (None: its release's);
    `engine_version`: the engine release the runs' server ran, whose profile replays them (None: the engine's
    default; the release the results record is kept in the file either way, and must agree with it);
    `max_running_requests`: SGLang's --max-running-requests the runs' server was told (None: its default)."""
    runs, replica = _measured_replica(results, model, gpu, gpus, tp, pp, precision, kv_dtype, engine, catalog,
                                      moe_kernel, engine_version, max_running_requests)
    assert replica.scheduler is not None  # sized
    return _fit_calibration(runs, replica.arch, replica.card, replica.tp, replica.pp, precision, kv_dtype,
                            replica.engine, replica.scheduler, replica.catalog, _time_limit(time_limit_s), moe_kernel,
                            replica.release)


def _measured_replica(results: Sequence[str | Path], model: str, gpu: str, gpus: int | None, tp: int | None, pp: int,
                      precision: str, kv_dtype: str, engine: str,
                      catalog: Catalog | None, moe_kernel: str | None = None,
                      engine_version: str | None = None,
                      max_running_requests: int | None = None) -> tuple[list[MeasuredRun], Replica]:
    """The runs of the result files and the sized replica that replays them (its max-model-len the longest replayed
    request, at the stated release the results agree with: runs_release), every run of the replica's model."""
    from planner.calibration.calibrate import replay_run, runs_release
    from planner.calibration.readers import read_results

    if not results:
        raise PlannerInputError("RESULT: give at least one benchmark result file")
    catalog = catalog or load_catalog()
    runs = [run for path in results for run in read_results(path)]
    context = max(replay_run(r).input_len + replay_run(r).output_len for r in runs)
    replica = _replica(model, gpu, gpus, tp, pp, precision, kv_dtype, engine, context, catalog, sized=True,
                       moe_kernel=moe_kernel, engine_version=runs_release(runs, engine_version),
                       max_running_requests=max_running_requests)
    for run in runs:
        _same_model(catalog, run, replica.arch.name)
    return runs, replica


def _time_limit(time_limit_s: float | None) -> Deadline:
    from planner.plan.deadline import NO_DEADLINE, Deadline

    return NO_DEADLINE if time_limit_s is None else Deadline.start(time_limit_s)


def _replays_out_of_time(deadline: Deadline, replays: int, before: str) -> OutOfTime:
    from planner.plan.deadline import OutOfTime

    return OutOfTime(f"results: the {deadline.limit_s:g} s time limit ran out after {replays} simulated "
                     f"run{'s' if replays != 1 else ''}, {before}; give fewer runs")


def _fit_calibration(runs: Sequence[MeasuredRun], arch: Architecture, card: Gpu, tp: int, pp: int, precision: str,
                     kv_dtype: str, engine: str, scheduler: Scheduler, catalog: Catalog,
                     deadline: Deadline | None = None, moe_kernel: str | None = None,
                     engine_version: str | None = None, ep: int = 1, dp: int = 1) -> Calibration:
    """The factors fitted to `runs`, each replayed on one replica (this layout, engine, release and scheduler) within the
    `deadline` (default none), and the record of what they were fitted on: `planner calibrate`'s, and `planner
    check --replan`'s on the plan's replica."""
    from planner.calibration.calibrate import FittedOn, ResultFile, calibration_record, fit_runs, replay_run
    from planner.calibration.factors import Factors, calibrated_catalog, floors
    from planner.estimator.benchmark import BenchmarkResult, run_benchmark
    from planner.estimator.performance import load_performance_catalog, replica_timer

    performance = load_performance_catalog()
    profile = performance.engine(engine).name
    generation = card.generation
    replays = 0

    def replay(factors: Factors, run: MeasuredRun) -> BenchmarkResult:
        nonlocal replays
        if deadline is not None and deadline.expired():
            raise _replays_out_of_time(deadline, replays, "before the factors were fitted")
        replays += 1
        timer = replica_timer(arch, precision, kv_dtype, card, tp, pp, catalog, engine,
                              calibrated_catalog(performance, generation, profile, factors), ep, dp,
                              release=engine_version, moe_kernel=moe_kernel)
        return run_benchmark(timer, scheduler, replay_run(run))

    files = {r.file: r.sha256 for r in runs}
    resolved, resolved_kv = _resolved_dtypes(catalog, arch, precision, kv_dtype, engine)
    fitted_on = FittedOn(
        model=arch.name, gpu=card.name, generation=generation, engine=profile,
        engine_versions=tuple(sorted({r.engine_version for r in runs if r.engine_version}))
        or ((engine_version,) if engine_version else ()), tp=tp, pp=pp, ep=ep, dp=dp,
        precision=resolved, kv_dtype=resolved_kv, dates=tuple(sorted({r.date for r in runs if r.date})),
        results=tuple(ResultFile(name=name, sha256=digest) for name, digest in files.items()), moe_kernel=moe_kernel)
    return calibration_record(fit_runs(runs, replay, floors(performance, generation, profile)), runs, fitted_on)


def check(plan: str | Path, results: Sequence[str | Path], *, catalog: Catalog | None = None) -> tuple[CheckedRun, ...]:
    """A deployed fleet plan (`planner solve --format json`) against what ran: each measured run (vllm bench serve,
    SGLang bench_serving, GuideLLM or /metrics scrape files) replayed on the plan's replica of the run's model,
    predicted against measured mean TTFT, mean TPOT and output throughput; and each run against the plan's SLO (at
    the percentile the scenario states, from the statistics the run reports) and its load against the plan's
    per-replica load (planner.calibration.check)."""
    from planner.api_records import CheckedRun
    from planner.calibration.calibrate import measured_metrics, replay_run, simulated_metrics
    from planner.calibration.check import load_check, slo_verdicts
    from planner.calibration.readers import read_results
    from planner.estimator.benchmark import run_benchmark

    if not results:
        raise PlannerInputError("RESULT: give at least one benchmark result file of the deployed plan")
    catalog = catalog or load_catalog()
    specs = _aggregated(_plan_file_replicas(Path(plan), catalog), plan)
    out = []
    for run in (run for path in results for run in read_results(path)):
        spec = _replica_of(catalog, specs, run, plan)
        timer = _spec_timer(spec, catalog)
        replayed = simulated_metrics(run_benchmark(timer, spec.scheduler, replay_run(run)), run)
        measured = measured_metrics(run)
        if not measured:
            raise PlannerInputError(f"result: {run.label} measured none of mean TPOT, mean TTFT or output throughput")
        out.append(CheckedRun(run.label, spec.workload, spec.gpu.name, spec.tp, spec.pp, spec.engine, measured,
                              {m: replayed[m] for m in measured}, spec.slo,
                              slo_verdicts(run, spec.slo) if spec.slo else (), load_check(run, spec.planned_rps)))
    return tuple(out)


def replan(plan: str | Path, results: Sequence[str | Path], scenario: str | Path | dict[str, Any] | Scenario, *,
           time_limit_s: float | None = None, catalog: Catalog | None = None) -> Replan:
    """What the fleet would cost with the measured speed: a calibration fitted on the runs (as `planner calibrate`
    fits one) on the plan's replica they measured, the plan's scenario re-solved with it (in place of its
    calibration:) within `time_limit_s` from the end of the fit (default: the scenario's solver.time_limit_s), and
    the plan file's replicas and cost to put it against."""
    from planner.api_records import Replan
    from planner.calibration.readers import read_results
    from planner.plan.planfile import load_fleet_file

    if not results:
        raise PlannerInputError("RESULT: give at least one benchmark result file of the deployed plan")
    catalog = catalog or load_catalog()
    specs = _aggregated(_plan_file_replicas(Path(plan), catalog), plan)
    runs = [run for path in results for run in read_results(path)]
    measured = {id(spec): spec for spec in (_replica_of(catalog, specs, run, plan) for run in runs)}
    kinds = {(s.arch.name, s.gpu.name, s.tp, s.pp, s.precision, s.kv_dtype, s.engine) for s in measured.values()}
    if len(kinds) > 1:
        raise PlannerInputError(f"--replan: the runs measured {len(kinds)} of the plan's replica types; a calibration "
                                "is fitted on one: give runs of one replica type")
    spec = next(iter(measured.values()))
    if spec.speculation is not None:
        raise PlannerInputError(f"--replan: the measured replica runs MTP speculative decoding ({spec.speculation.name}); "
                                "a calibration is fitted on replicas without it (bench/CALIBRATION_PROTOCOL.md): "
                                "check it without --replan")
    loaded = _scenario(scenario)
    if not loaded.is_fleet:
        raise PlannerInputError("--replan: the scenario has no traffic; give the scenario the fleet plan was solved "
                                "from")
    header = load_fleet_file(plan)
    name = loaded.name or "fleet"
    if header.scenario is not None and header.scenario != name:
        raise PlannerInputError(f"--replan: the scenario is named {name!r}, and the plan was solved from "
                                f"{header.scenario!r}; give that scenario")
    calibration = _fit_calibration(runs, spec.arch, spec.gpu, spec.tp, spec.pp, spec.precision, spec.kv_dtype,
                                   spec.engine, spec.scheduler, catalog, moe_kernel=spec.moe_kernel,
                                   engine_version=spec.engine_version, ep=spec.ep, dp=spec.dp)
    fleet = plan_fleet(loaded, time_limit_s=time_limit_s, catalog=catalog, calibration=calibration)
    return Replan(name, calibration, fleet, sum(a.replicas for a in header.assignments), header.usd_per_hour)


def _replica_of(catalog: Catalog, specs: Sequence[ReplicaSpec], run: MeasuredRun, plan: str | Path) -> ReplicaSpec:
    """The plan's replica a run measured: the one of the run's model (its model_id as the catalog knows it), or the
    plan's only model."""
    models = {spec.arch.name for spec in specs}
    if run.model_id is not None:
        try:
            named = catalog.models.get(run.model_id).name
        except PlannerInputError:
            named = None
        if named is not None and named not in models:
            raise PlannerInputError(f"result: {run.label} ran {run.model_id} ({named}), which {plan} does not serve "
                                    f"({', '.join(sorted(models))}); give results of the plan's models")
        if named is not None:
            models = {named}
    if len(models) > 1:
        raise PlannerInputError(f"result: {run.label} names no model of {plan} ({', '.join(sorted(models))}); give a "
                                "result whose model_id is one of them")
    chosen = [spec for spec in specs if spec.arch.name in models]
    if len({(s.gpu.name, s.tp, s.pp, s.precision) for s in chosen}) > 1:
        raise PlannerInputError(f"result: {run.label}: {plan} serves {next(iter(models))} on several replica types; "
                                "check each against a plan file of one")
    return chosen[0]


def _same_model(catalog: Catalog, run: MeasuredRun, model: str) -> None:
    """A run whose model_id the catalog knows as another model than --model was not run on it."""
    if run.model_id is None:
        return
    try:
        named = catalog.models.get(run.model_id).name
    except PlannerInputError:
        return  # a model id the catalog does not know (a fine-tune, a local path): --model says what it is
    if named != model:
        raise PlannerInputError(f"result: {run.label} ran {run.model_id} ({named}), not --model {model}; calibrate "
                                "on runs of one model")


def _check_runs(replica: Replica, context: int, batch: int, precision: str, kv_dtype: str,
                speculation: Speculation | None = None) -> None:
    """`planner perf` times what could run: a precision the engine runs on the GPU, a request no longer than the
    model's context, and `batch` of them in the GPUs' memory (else its figures would be printed for a replica that
    cannot exist); with `speculation`, the MTP draft's layer (its weights and its cache of the same requests) held
    too, as a plan holds it."""
    from planner.plan.configuration import served_architecture

    support = replica.catalog.support(replica.engine, resolve_precision(replica.catalog, replica.arch, precision),
                                      replica.card)
    if not support.runs:
        raise PlannerInputError(f"--precision / --gpu: {support.reason()}; pick a precision, GPU or --engine that runs it")

    longest = replica.arch.max_position_embeddings
    if longest and context > longest:
        raise PlannerInputError(f"--prompt-tokens / --output-tokens: {context:,} tokens is longer than "
                                f"{replica.arch.name}'s context of {longest:,}; ask for at most that")
    request = Request(context=context, batch=batch, tp=replica.tp, pp=replica.pp, precision=precision,
                      kv_dtype=kv_dtype, ep=replica.ep, dp=replica.dp)
    need = estimate_memory(served_architecture(replica.arch, speculation), request, replica.catalog,
                           GpuTarget.from_catalog(replica.card))
    if need.gpu is not None and need.gpu.headroom_bytes < 0:
        raise PlannerInputError(f"--batch: {batch:,} requests of {context:,} tokens need "
                                f"{max(r.total_bytes for r in need.per_gpu) / 1e9:,.1f} GB per GPU, a "
                                f"{replica.card.name} holds {replica.card.memory_bytes / 1e9:,.1f} GB; lower --batch or "
                                "add GPUs (--tp / --pp)")


def _resolved_dtypes(catalog: Catalog, arch: Architecture, precision: str, kv_dtype: str, engine: str
                     ) -> tuple[str, str]:
    """The catalog precision and KV dtype `precision` / `kv_dtype` (or `auto`: the checkpoint's, the cache dtype
    `engine` stores for `auto`) name for `arch`."""
    from planner.estimator.engines.registry import resolve_engine_kv_dtype

    resolved = resolve_precision(catalog, arch, precision)
    return resolved.name, catalog.kv_dtypes.get(resolve_engine_kv_dtype(engine, arch, resolved, kv_dtype)).name


def _replica(model: str, gpu: str, gpus: int | None, tp: int | None, pp: int, precision: str, kv_dtype: str,
             engine: str, context: int, catalog: Catalog, sized: bool, calibration: Calibration | None = None,
             performance: PerformanceCatalog | None = None, ep: int = 1, dp: int = 1,
             engine_version: str | None = None, moe_kernel: str | None = None,
             speculative: bool = False, max_running_requests: int | None = None) -> Replica:
    """One replica of `planner perf` and `planner bench`: its step timer (with `calibration`'s factors when it is
    of the GPU's generation x the engine) and, when `sized`, the scheduler the engine's budget (the profile of
    `engine_version`, default the current release) gives it at max-model-len `context` (which must hold one request,
    as vLLM checks at start-up); with `ep`-way expert parallelism (no all-to-all backend) each rank holds the bytes
    it holds under TP (E/ep whole experts are E/tp of each), so the pool is the TP layout's; with `dp` attention groups
    each holds its own pool of the budget's tokens; `max_running_requests`: SGLang's limit the server is told."""
    from planner.api_records import Replica
    from planner.estimator.capacity import Scheduler
    from planner.estimator.engines import EngineSettings, engine_budget
    from planner.estimator.engines.registry import canonical
    from planner.estimator.performance import load_performance_catalog, replica_timer

    if tp is None:
        tp = (gpus or pp) // pp
    if tp < 1 or pp < 1 or (gpus is not None and gpus != tp * pp):
        raise PlannerInputError(f"--gpus/--tp/--pp: {gpus} GPUs cannot be split as tp {tp} x pp {pp}; give --gpus = tp x pp")
    if moe_kernel is not None or max_running_requests is not None:
        # an engine told which fused-MoE kernel to run (the margin and llama.cpp are not), SGLang its running requests
        EngineSettings(canonical(engine), moe_kernel=moe_kernel, max_running_requests=max_running_requests).validate()
    card = catalog.gpus.get(gpu)
    arch = resolve_model(catalog, model)
    name = "vllm" if engine == "simple" else engine
    performance = performance or load_performance_catalog()
    profile = performance.engine(name).name  # the engine's speed profile (llamacpp: llama.cpp)
    coverage = None
    if calibration is not None:
        from planner.calibration.calibrate import TimedReplica

        resolved, resolved_kv = _resolved_dtypes(catalog, arch, precision, kv_dtype, name)
        coverage = calibration.coverage(TimedReplica(
            model=arch.name, gpu=card.name, generation=card.generation, engine=profile, tp=tp, pp=pp,
            precision=resolved, kv_dtype=resolved_kv, ep=ep, dp=dp, moe_kernel=moe_kernel, release=engine_version,
            speculative=speculative))
    if calibration is not None and coverage is not None and coverage.applied:
        from planner.calibration.factors import calibrated_catalog

        performance = calibrated_catalog(performance, card.generation, profile, calibration.factors)
    if (ep, dp) != (1, 1):
        refusal = parallel_refusal(arch, tp, pp, dp, ep)
        if refusal:
            raise PlannerInputError(refusal)
    timer = replica_timer(arch, precision, kv_dtype, card, tp, pp, catalog, name, performance, ep, dp, engine_version,
                          moe_kernel=moe_kernel)
    scheduler = None
    if sized:
        request = Request(context=context, batch=1, tp=tp, pp=pp, precision=precision, kv_dtype=kv_dtype, dp=dp)
        budget = engine_budget(arch, request, EngineSettings(canonical(name), version=engine_version,
                                                             max_running_requests=max_running_requests),
                               GpuTarget.from_catalog(card), catalog)
        if not budget.fits:
            raise PlannerInputError(f"--engine {name}: one request of {context:,} tokens does not fit: {budget.message}")
        scheduler = Scheduler.of(budget, dp=dp)  # every DP group's own pool
    return Replica(arch, card, tp, pp, name, catalog, timer, scheduler, coverage, ep, dp, engine_version, moe_kernel)


def simulate(source: str | Path | Scenario, *, duration_s: float | None = None, rate: float | None = None,
             arrivals: str = "poisson", seed: int = 0, catalog: Catalog | None = None) -> tuple[ReplicaSimulation, ...]:
    """Simulate a fleet's replicas: a scenario (a file or loaded: solved first, its replicas timed as the solve sized
    them, with its calibration where it applies) or PLAN.json, for `duration_s` of arrivals (default
    planner.plan.loads.SIMULATED_S, the run a fleet plan makes of its expected load); `rate`: requests/s at each
    replica (default: the load the fleet expects of each replica, its bucket's demand split over the replicas by
    capacity, from the scenario's fleet or as the plan file carries it); `arrivals`: poisson or a JSONL trace (then
    its requests, not the rate)."""
    from planner.api_records import ReplicaSimulation
    from planner.estimator.simulate import poisson_arrivals, read_trace, simulate as run
    from planner.estimator.performance import Workload
    from planner.plan.loads import SIMULATED_S

    catalog = catalog or load_catalog()
    duration_s = SIMULATED_S if duration_s is None else duration_s
    if duration_s <= 0:
        raise PlannerInputError(f"--duration: {duration_s} must be above 0 seconds")
    if rate is not None and rate <= 0:
        raise PlannerInputError(f"--rate: {rate} must be above 0 requests/s")
    trace = None if arrivals == "poisson" else read_trace(arrivals)
    out = []
    for spec in _replicas_to_simulate(source, catalog):
        timer = _spec_timer(spec, catalog)
        per_replica = rate if rate is not None else spec.rate_per_replica
        shape = Workload(spec.prompt_tokens, spec.output_tokens, spec.shared_prefix_tokens,
                         prefilled=spec.role == DECODE)
        requests = trace if trace is not None else poisson_arrivals(per_replica, duration_s, shape, seed)
        result = run(timer, spec.scheduler, requests, warmup_s=0.0)
        out.append(ReplicaSimulation(spec.workload, spec.gpu.name, spec.tp, spec.pp, spec.replicas, spec.prompt_tokens,
                                     spec.output_tokens, per_replica if trace is None else result.requests_per_s,
                                     spec.share, result, spec.speed, spec.shared_prefix_tokens, spec.role))
    return tuple(out)


def _replicas_to_simulate(source: str | Path | Scenario, catalog: Catalog) -> list[ReplicaSpec]:
    if isinstance(source, (str, Path)) and Path(source).suffix.lower() == ".json":
        return _plan_file_replicas(Path(source), catalog)
    from planner.api_records import ReplicaSpec
    from planner.plan.fleet import fleet_problem, plan_fleet as solve_fleet

    scenario = _scenario(source)
    problem = fleet_problem(scenario, catalog)
    plan = solve_fleet(problem, catalog, explain=False)
    if not plan.assignments:
        raise PlannerInputError(f"{source}: the fleet has no replicas to simulate ({'; '.join(plan.unmet) or plan.status})")
    by_name = {w.name: w for w in problem.workloads}
    specs = []
    for a in plan.assignments:
        w = by_name[a.workload]
        c = a.config.candidate
        specs.append(ReplicaSpec(a.workload, w.space.arch, c.gpu, c.tp, c.pp, c.precision, c.kv_dtype, w.engine,
                                  a.config.scheduler, a.replicas, a.config.shape.prompt_tokens,
                                  a.config.shape.output_tokens, a.expected_rps_per_replica, a.demand_share,
                                  a.config.shape.shared_prefix_tokens, w.performance(c.gpu.generation),
                                  coverage.describe() if (coverage := w.calibration_coverage(c, a.config.role)) else None,
                                  planned_rps=a.config.capacity_rps, engine_version=w.engine_version,
                                  dp=c.configuration.dp, ep=c.configuration.ep, role=a.config.role,
                                  speculation=c.configuration.speculation,
                                  moe_kernel=c.configuration.engine.moe_kernel))
    return specs


def _plan_file_replicas(path: Path, catalog: Catalog) -> list[ReplicaSpec]:
    """The replicas of a fleet plan written by `planner solve --format json` (planner.plan.planfile checks the
    file and re-checks each configuration); each assignment's request shape and expected load come from its row,
    as the fleet wrote them (the same figures a simulation of its scenario runs at)."""
    from planner.api_records import ReplicaSpec
    from planner.estimator.capacity import Scheduler, Slo
    from planner.estimator.engines import EngineSettings, engine_budget
    from planner.plan.configuration import served_architecture
    from planner.plan.planfile import FleetAssignment, load_plan_file

    checked = load_plan_file(path, catalog)
    specs = []
    for i, plan in enumerate(checked):
        row = plan.record
        if not isinstance(row, FleetAssignment):
            raise PlannerInputError(f"{path}: a single-configuration plan carries no traffic to simulate; "
                                    "pass a fleet plan or its scenario")
        prompt, output, rate, share = row.prompt_tokens, row.output_tokens, row.expected_rps_per_replica, row.demand_share
        for key, value in (("prompt_tokens", prompt), ("output_tokens", output), ("expected_rps_per_replica", rate),
                           ("demand_share", share), ("capacity_rps_per_replica", row.capacity_rps_per_replica)):
            if value is None:
                raise PlannerInputError(f"{path}: assignments[{i}].{key} is missing; write the plan again with this "
                                        "planner or simulate its scenario")
        c = plan.configuration
        arch = resolve_model(catalog, c.model_id if c.model_id else c.model)
        served = served_architecture(arch, c.speculation)  # with MTP, the draft's layer beside the model
        target = GpuTarget.from_catalog(plan.card)
        request = replace(c.request(), batch=1)
        budget = engine_budget(served, request, c.engine, target, catalog)
        # the `simple` planning margin has no scheduler: it runs vLLM's, as the fleet planned it
        batching = engine_budget(served, request, EngineSettings("vllm"), target, catalog) if c.engine.name == "simple" else None
        engine = "vllm" if c.engine.name == "simple" else c.engine.name
        slo = None if row.slo is None else Slo(row.slo.ttft_s, row.slo.tpot_s, row.slo.percentile)
        # an MTP replica runs at most the requests its plan states (SGLang's own limit drops under speculation)
        cap = row.max_num_seqs if c.speculation is not None else None
        specs.append(ReplicaSpec(plan.record.workload or "", arch, plan.card, c.tp, c.pp, c.precision, c.kv_dtype,
                                  engine, Scheduler.of(budget, batching, cap, dp=c.dp), plan.record.replicas, prompt,
                                  output, rate, share, row.shared_prefix_tokens or 0, slo=slo,
                                  planned_rps=row.capacity_rps_per_replica,
                                  engine_version=c.engine.version, dp=c.dp, ep=c.ep,
                                  role=getattr(row, "role", None) or BOTH, speculation=c.speculation,
                                  moe_kernel=c.engine.moe_kernel))
    return specs


def _spec_timer(spec: ReplicaSpec, catalog: Catalog) -> ReplicaTimer | SpeculativeTimer:
    """The timer of a replica to simulate or replay: its layout's, with MTP its cycles (served_timer)."""
    from planner.estimator.performance import replica_timer
    from planner.estimator.speculative import served_timer

    def timer(model: Architecture) -> ReplicaTimer:
        return replica_timer(model, spec.precision, spec.kv_dtype, spec.gpu, spec.tp, spec.pp, catalog, spec.engine,
                             spec.performance, spec.ep, spec.dp, spec.engine_version, moe_kernel=spec.moe_kernel)

    return served_timer(timer, spec.arch, spec.speculation)


def _aggregated(specs: list[ReplicaSpec], source: object) -> list[ReplicaSpec]:
    """The replicas a benchmark run replays on: the aggregated ones (a run of a disaggregated deployment goes through
    its router and both pools at once, which one replica does not replay); a one-line error when none is left."""
    kept = [spec for spec in specs if spec.role == BOTH]
    if not kept:
        raise PlannerInputError(f"{source}: every replica is one of a disaggregated prefill/decode pair; a run through "
                                "their router measures both pools at once, which planner does not replay yet")
    return kept


def __getattr__(name: str) -> Any:
    """The result records of engine_estimate, perf and simulate (planner.api_records), loaded on first use."""
    if name in ("BenchResult", "CheckedRun", "EngineEstimate", "PerfResult", "Replan", "ReplayedRun",
                "ReplicaSimulation"):
        from planner import api_records

        return getattr(api_records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
