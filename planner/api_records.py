"""The records planner.api returns besides the estimator's and the planner's own, each loaded by the call that
returns one: a class costs about a millisecond to create (dataclasses compiles its methods), so `planner
estimate` does not create the ones it never returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.catalog.load import Catalog, Gpu
    from planner.estimator.benchmark import BenchmarkResult
    from planner.calibration.calibrate import Calibration, Coverage
    from planner.calibration.check import LoadCheck, SloVerdict
    from planner.calibration.readers import MeasuredRun
    from planner.estimator.capacity import Scheduler, Slo, SteadyState
    from planner.estimator.closed_loop import ClosedLoop
    from planner.estimator.engines import EngineBudget
    from planner.estimator.memory import MemoryEstimate
    from planner.estimator.performance import PerformanceCatalog, ReplicaPerformance, ReplicaTimer
    from planner.estimator.simulate import SimulationResult
    from planner.estimator.speculative import Speculation, SpeculativeCycle
    from planner.model.architecture import Architecture
    from planner.plan.fleet import FleetPlan


def _calibration_keys(coverage: Coverage | None) -> dict[str, Any]:
    """`calibrated`: whether a calibration's factors timed the replica (None: none given); `calibration`: what it is
    to the replica (calibrated, extrapolated or not calibrated, and what differs from the runs it was fitted on)."""
    return {"calibrated": None if coverage is None else coverage.applied,
            "calibration": None if coverage is None else coverage.to_dict()}


@dataclass(frozen=True)
class EngineEstimate:
    """The estimator's breakdown plus what one engine would actually hand to the KV cache on that GPU."""

    memory: MemoryEstimate
    engine: EngineBudget


@dataclass(frozen=True)
class PerfResult:
    """`planner perf`: one replica at a batch; with a rate, its steady state under continuous batching (and past
    what it keeps up with, a finite simulated run at that rate); with a concurrency, its closed loop."""

    model: str
    gpu: str
    tp: int
    pp: int
    engine: str
    performance: ReplicaPerformance
    steady: SteadyState | None = None  # at --rate
    closed_loop: ClosedLoop | None = None  # at --concurrency
    finite_run: BenchmarkResult | None = None  # at a --rate it does not keep up with
    calibration: Coverage | None = None  # None: no calibration given; else what it is to this replica
    ep: int = 1  # expert-parallel ranks among the tp GPUs
    speculation: Speculation | None = None
    cycle: SpeculativeCycle | None = None  # with speculation: one decode cycle at the batch
    dp: int = 1  # data-parallel attention groups among the tp GPUs
    # at --concurrency on an engine that admits past its pool and preempts there (closed_loop.admits_past_pool): a
    # simulated run of the loop, which the analytic closed_loop (whole outputs reserved) does not see
    closed_loop_run: BenchmarkResult | None = None

    def to_dict(self) -> dict[str, Any]:
        p = self.performance
        data: dict[str, Any] = {
            "model": self.model, "gpu": self.gpu, "tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep,
            "engine": self.engine,
            "batch": p.batch, "ttft_s": p.ttft_s, "tpot_ms": p.tpot_s * 1000, "decode_step_ms": p.decode_step_s * 1000,
            "output_tokens_per_s": p.output_tokens_per_s, "requests_per_s": p.requests_per_s, "bound": p.decode_bound,
            # the slowest stage's decode step, every term by name (they add up to its time) and what it reads
            "decode_terms_ms": {name: seconds * 1000 for name, seconds in p.decode.terms_s().items()},
            "pp_bubble_ms": p.pp_bubble_s * 1000,
            "weight_bytes_read": p.decode.weight_bytes, "kv_bytes_read": p.decode.kv_bytes,
            # the GPU's generation has no kernel measurements: the catalog's `default` generation timed it
            "constants_borrowed": p.borrowed, **_calibration_keys(self.calibration),
            # the fused-MoE kernel the engine runs at this release (catalogs/performance.yaml moe_kernel_rules)
            "moe_kernel": p.moe_kernel,
            # prefill passes launched without a CUDA graph: each takes at least the host's launch time
            # (catalogs/performance.yaml eager_prefill_rules)
            "eager_prefill": p.eager_prefill,
            # then: the kernels one prefill pass launches (the slowest stage; eager_kernels) and the host's time for
            # each (eager_launch_us): a pass takes at least their product
            "eager_launches": p.eager_launches if p.eager_prefill else None,
            "eager_launch_us": p.eager_launch_s * 1e6 if p.eager_prefill else None,
        }
        if self.steady is not None:
            s = self.steady
            figures = {"batch": s.batch, "ttft_s": s.ttft_mean_s, "tpot_ms": s.tpot_mean_s * 1000,
                       "output_tokens_per_s": s.output_tokens_per_s, "kv_tokens_mean": s.kv_tokens_mean,
                       "kv_tokens_peak": s.kv_tokens_peak, "preemption_free": s.preemption_free}
            if s.limit:  # no steady state past what the replica keeps up with: finite_run has what a run sees
                figures = dict.fromkeys(figures)
            data["steady_state"] = {"requests_per_s": s.requests_per_s, "keeps_up": not s.limit,
                                    "limit": s.limit or None, "pool_tokens": s.pool_tokens, **figures}
        if self.finite_run is not None:
            data["finite_run"] = self.finite_run.to_dict()
        if self.closed_loop is not None:
            data["closed_loop"] = asdict(self.closed_loop)
        if self.closed_loop_run is not None:
            data["closed_loop_run"] = self.closed_loop_run.to_dict()
        if self.speculation is not None and self.cycle is not None:
            # decode_step_ms is the whole cycle: the verify's terms above plus the draft's forwards
            data["speculative"] = {**asdict(self.speculation), "verify_ms": self.cycle.verify_s * 1000,
                                   "draft_ms": self.cycle.draft_s * 1000}
        return data


@dataclass(frozen=True)
class BenchResult:
    """`planner bench`: a vllm bench serve run replayed on one simulated replica."""

    model: str
    gpu: str
    tp: int
    pp: int
    engine: str
    result: BenchmarkResult
    calibration: Coverage | None = None  # None: no calibration given; else what it is to this replica

    def to_dict(self) -> dict[str, Any]:
        """vLLM's saved-result keys (planner.estimator.benchmark), then the replica's."""
        return {**self.result.to_dict(), "model_id": self.model, "gpu": self.gpu, "tp": self.tp, "pp": self.pp,
                "engine": self.engine, **_calibration_keys(self.calibration)}


@dataclass(frozen=True)
class Replica:
    """One replica of `planner perf` and `planner bench`: its layout, step timer and (when sized) scheduler."""

    arch: Architecture
    card: Gpu
    tp: int
    pp: int
    engine: str
    catalog: Catalog
    timer: ReplicaTimer
    scheduler: Scheduler | None
    calibration: Coverage | None  # None: no calibration given; else what it is to this replica (its factors in the
    # timer when applied)
    ep: int = 1  # expert-parallel ranks among the tp GPUs
    dp: int = 1  # data-parallel attention groups among the tp GPUs
    release: str | None = None  # the engine release asked for (None: its default), which picks its MoE kernel
    moe_kernel: str | None = None  # the fused-MoE kernel the engine was told to run (None: the release's pick)


@dataclass(frozen=True)
class ReplicaSimulation:
    """One assignment of a fleet (or the one replica asked for), simulated at its share of the traffic."""

    workload: str
    gpu: str
    tp: int
    pp: int
    replicas: int
    prompt_tokens: int
    output_tokens: int
    rate_per_replica: float  # requests/s arriving at each replica
    share: float  # of the workload bucket's traffic this assignment takes
    result: SimulationResult
    speed: str | None = None  # a scenario's calibration: what it is to this replica (Coverage.describe)
    shared_prefix_tokens: int = 0  # of prompt_tokens: the same for every request, found in the prefix cache
    # a disaggregated pair's prefill replica (its requests end at their first token) or decode replica (their prompts
    # arrive computed), or an aggregated one (both)
    role: str = "both"


@dataclass(frozen=True)
class ReplicaSpec:
    """What simulating one assignment needs: its configuration, scheduler, request shape and rate."""

    workload: str
    arch: Architecture
    gpu: Gpu
    tp: int
    pp: int
    precision: str
    kv_dtype: str
    engine: str
    scheduler: Scheduler
    replicas: int
    prompt_tokens: int
    output_tokens: int
    rate_per_replica: float
    share: float
    shared_prefix_tokens: int = 0  # of prompt_tokens: the same for every request, cached once per replica
    performance: PerformanceCatalog | None = None  # the speed model's constants (None: the catalog's)
    speed: str | None = None  # a scenario's calibration: what it is to this replica (Coverage.describe)
    slo: Slo | None = None  # a plan file's: its workload's SLO (None: the file carries none)
    planned_rps: float | None = None  # the capacity the plan sized each replica for (at the SLO x utilisation)
    engine_version: str | None = None  # the engine release the plan or scenario names (None: the default)
    dp: int = 1  # data-parallel attention groups among the tp GPUs
    ep: int = 1  # expert-parallel ranks among them
    role: str = "both"  # a disaggregated pair's prefill or decode replica, or an aggregated one (both)
    speculation: Speculation | None = None  # MTP speculative decoding (its scheduler's pool holds the draft's layer)
    moe_kernel: str | None = None  # the fused-MoE kernel the engine is told to run (None: the release's pick)


@dataclass(frozen=True)
class Comparison:
    """One statistic of one metric of a run: as measured (None: the result does not report it) and as predicted."""

    metric: str  # ttft_ms | tpot_ms | output_tok_s
    statistic: str  # mean | median | p99
    measured: float | None
    predicted: float

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 (None: nothing measured to compare with)."""
        return self.predicted / self.measured - 1 if self.measured else None


@dataclass(frozen=True)
class ReplayedRun:
    """One measured benchmark run against one simulated replica replaying it (planner.api.replay_results)."""

    measured: MeasuredRun
    predicted: BenchmarkResult  # its run: what the replay sent (its prompts, lengths, rate and concurrency)

    def comparisons(self) -> tuple[Comparison, ...]:
        """Mean, median and p99 TTFT and TPOT, then output throughput, measured against predicted (as the fit
        compares it: a closed loop's at the concurrency the run held, planner.calibration.calibrate)."""
        from planner.calibration.calibrate import simulated_metrics

        rows = []
        for metric, measured, predicted in (("ttft_ms", self.measured.ttft, self.predicted.ttft),
                                            ("tpot_ms", self.measured.tpot, self.predicted.tpot)):
            for statistic, value, simulated in (("mean", measured.mean_ms, predicted.mean_ms),
                                                ("median", measured.median_ms, predicted.median_ms),
                                                ("p99", measured.p99_ms, predicted.p99_ms)):
                rows.append(Comparison(metric, statistic, value, simulated))
        rows.append(Comparison("output_tok_s", "mean", self.measured.output_throughput,
                               simulated_metrics(self.predicted, self.measured)["output_tok_s"]))
        return tuple(rows)

    def to_dict(self) -> dict[str, Any]:
        run, replay = self.measured, self.predicted.run
        return {"result": run.label, "tool": run.tool, "model_id": run.model_id,
                "request_rate": "inf" if run.request_rate == float("inf") else run.request_rate,  # as vLLM writes it
                "max_concurrency": run.max_concurrency, "completed": run.completed,
                "mean_input_tokens": run.mean_input_tokens, "mean_output_tokens": run.mean_output_tokens,
                "replayed_prompts": replay.num_prompts,
                "comparisons": [{**asdict(c), "error": c.error} for c in self.comparisons()]}


@dataclass(frozen=True)
class CheckedRun:
    """`planner check`: one measured benchmark run of a deployed plan against the plan's replica replaying it."""

    result: str  # the run: its file's name (#N for the N-th run of a file)
    workload: str
    gpu: str
    tp: int
    pp: int
    engine: str
    measured: dict[str, float]  # of tpot_ms, ttft_ms, output_tok_s: what the run measured (means)
    predicted: dict[str, float]  # the same, from the plan's replica replaying the run
    slo: Slo | None  # the plan's SLO for the run's workload (None: the plan file carries none)
    verdicts: tuple[SloVerdict, ...]  # each target of `slo` against the run
    load: LoadCheck  # the run's load against the plan's per replica

    def error(self, metric: str) -> float:
        """predicted / measured - 1."""
        return self.predicted[metric] / self.measured[metric] - 1

    def to_dict(self) -> dict[str, Any]:
        return {"result": self.result, "workload": self.workload, "gpu": self.gpu, "tp": self.tp, "pp": self.pp,
                "engine": self.engine, "measured": self.measured, "predicted": self.predicted,
                "error": {m: self.error(m) for m in self.measured},
                "slo": None if self.slo is None else {**asdict(self.slo), "checks": [
                    {**asdict(v), "meets": v.meets} for v in self.verdicts]},
                "load": {**asdict(self.load), "at_or_below_planned": self.load.at_or_below_planned}}


@dataclass(frozen=True)
class Replan:
    """`planner check --replan SCENARIO`: the scenario re-solved with a calibration fitted on the checked runs, against
    the plan file as deployed."""

    scenario: str  # its name, as the plan file records it
    calibration: Calibration  # fitted on the runs, on the plan's replica they measured
    plan: FleetPlan  # the scenario re-solved with it
    planned_replicas: int  # the plan file's, over its assignments
    planned_usd_per_hour: float | None  # the plan file's (None: it records none)

    @property
    def replicas(self) -> int:
        return sum(a.replicas for a in self.plan.assignments)

    @property
    def change(self) -> float | None:
        """The re-planned fleet's cost / the plan's - 1 (None: either has no cost)."""
        if self.plan.usd_per_hour is None or not self.planned_usd_per_hour:
            return None
        return self.plan.usd_per_hour / self.planned_usd_per_hour - 1

    def to_dict(self) -> dict[str, Any]:
        c = self.calibration
        return {"scenario": self.scenario, "factors": c.factors.as_dict(), "informed": list(c.informed),
                "past_bounds": list(c.past_bounds), "fitted_on": asdict(c.fitted_on), "errors": asdict(c.errors), "status": self.plan.status,
                "replicas": self.replicas, "usd_per_hour": self.plan.usd_per_hour,
                "planned_replicas": self.planned_replicas, "planned_usd_per_hour": self.planned_usd_per_hour,
                "change": self.change, "speed": list(self.plan.speed), "unmet": list(self.plan.unmet),
                "assignments": [{"workload": a.workload, "gpu": a.config.candidate.gpu.name, "tp": a.config.candidate.tp,
                                 "pp": a.config.candidate.pp, "replicas": a.replicas, "role": a.config.role,
                                 "capacity_rps_per_replica": round(a.config.capacity_rps, 3)}
                                for a in self.plan.assignments]}
