"""What one replica serves: for each workload (or request bucket) and replica layout, the largest
arrival rate whose steady state (planner.estimator.capacity) meets the SLOs, and the requests/s that
replica takes.

Tokens in flight: a replica is sized by the KV its requests hold (prompt + tokens generated so far), not
by a full context per batch slot. The workload's context is the replica's max-model-len; it only has to
fit one request (vLLM's start-up check), so the largest context costs nothing unless one request of it
stops fitting. The batch is capped by the engine's max_num_seqs (and workload.concurrency when set above
1), the token budget per step and the KV pool. Scenarios without traffic (plan/search.py) keep sizing
`concurrency` sequences of the full context.

The fleet model (fleet.py) buys replicas of these configurations; this module decides what each
replica is worth.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from planner.catalog.load import Catalog, Offer
from planner.estimator.capacity import TOLERANCE, Scheduler, Slo, SteadyState, StepTimes, max_rate, steady_state
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.engines.need import Budgets, known_budget
from planner.estimator.memory import GpuTarget
from planner.estimator.performance import PerformanceCatalog, Workload, load_performance_catalog
from planner.estimator.speculative import speculative_running_cap
from planner.plan.deadline import NO_DEADLINE, Deadline, OutOfTime
from planner.plan.roles import BOTH
from planner.plan.search import Candidate, Rejection, SearchSpace, candidate_timer, enumerate_candidates

if TYPE_CHECKING:
    from planner.calibration.calibrate import Calibration, Coverage
    from planner.estimator.speculative import Speculation
    from planner.plan.disaggregated import KvTransfer

CAPACITY_UNITS_PER_RPS = 1000  # demand and capacity are integer milli-requests per second inside CP-SAT
# The bounds that rank a size's layouts (most promising first) are searched to this relative precision only:
# it orders the work and never decides a capacity (an exact steady state at the best rate so far does).
RANKING_TOLERANCE = 0.02


@dataclass(frozen=True)
class Bucket:
    """A slice of a workload's traffic with one request shape."""

    requests_per_s: float
    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int = 0  # of prompt_tokens: the same for every request (a system prompt), cached once


@dataclass(frozen=True)
class FleetWorkload:
    name: str
    space: SearchSpace  # the model and its search space (GPUs, precisions, KV dtypes, offers)
    buckets: tuple[Bucket, ...]
    slo: Slo = Slo()
    utilisation: float = 0.8  # plan replicas to run at most this busy, for bursts
    redundancy: int = 0  # N+k: demand is still met without k of the largest replicas
    min_replicas: int = 1
    max_configs: int | None = None
    engine: str = "vllm"
    engine_version: str | None = None  # the scenario's engine.version (None: the engine's default release)
    calibration: Calibration | None = None  # `planner calibrate`'s factors, for the GPU generation x engine it names
    # pay-as-you-go on-demand offers its pricing allows whatever its market: where a lost spot pool falls back to
    on_demand_offers: tuple[Offer, ...] = ()
    # search.serving: aggregated replicas, and/or separate prefill and decode pools (planner.plan.disaggregated)
    serving: tuple[str, ...] = ("aggregated",)

    @property
    def tokens_per_hour(self) -> tuple[float, float]:
        """The demand in prompt and reply tokens per hour: each bucket's requests/s x its tokens per request."""
        return (sum(b.requests_per_s * b.prompt_tokens for b in self.buckets) * 3600,
                sum(b.requests_per_s * b.output_tokens for b in self.buckets) * 3600)

    def calibration_coverage(self, candidate: Candidate, role: str = BOTH) -> Coverage | None:
        """What the calibration is to a replica of `candidate` in `role` (None: no calibration): the configuration its
        runs ran, another one of their GPU generation x engine (extrapolated), or another generation x engine."""
        if self.calibration is None:
            return None
        from planner.calibration.calibrate import TimedReplica

        c = candidate.configuration
        return self.calibration.coverage(TimedReplica(
            model=self.space.arch.name, gpu=candidate.gpu.name, generation=candidate.gpu.generation,
            engine=self.speed_profile, tp=c.tp, pp=c.pp, precision=c.precision, kv_dtype=c.kv_dtype, ep=c.ep, dp=c.dp,
            moe_kernel=c.engine.moe_kernel, release=self.engine_version, speculative=c.speculation is not None,
            pool=None if role == BOTH else role))

    def performance(self, generation: str) -> PerformanceCatalog | None:
        """The speed model's constants for a replica on this GPU generation: calibrated where the calibration was
        fitted (that generation and this engine), the catalog's elsewhere (None)."""
        if self.calibration is None or not self.calibration.applies_to(generation, self.speed_profile):
            return None
        from planner.calibration.factors import calibrated_catalog

        return calibrated_catalog(load_performance_catalog(), generation, self.speed_profile, self.calibration.factors)

    @property
    def speed_profile(self) -> str:
        """The engine's name in the speed model (llamacpp: llama.cpp), which a calibration records."""
        return load_performance_catalog().engine(self.engine).name


@dataclass(frozen=True)
class ServingConfig:
    workload: str
    bucket: int
    candidate: Candidate  # context = max-model-len; concurrency 1: one request of it fits (the start-up check)
    performance: SteadyState  # at the largest rate within the SLO: batch, TTFT, TPOT, KV in flight
    scheduler: Scheduler  # the engine's pool and batching limits this replica runs with
    capacity_rps: float  # requests/s one replica takes at the utilisation ceiling
    shape: Workload  # the bucket's request shape (a disaggregated role's: planner.plan.disaggregated.role_shape)
    times: StepTimes = field(compare=False, repr=False)  # the replica's step times (its layout's)
    # "both": an aggregated replica; "prefill" / "decode": one of a disaggregated pair (planner.plan.disaggregated)
    role: str = "both"
    role_slo: Slo | None = None  # a role's share of the workload's SLO (None: the workload's own)
    transfer: KvTransfer | None = None  # a prefill replica's KV transfer of one request to the decode pool

    @property
    def capacity_units(self) -> int:
        return int(self.capacity_rps * CAPACITY_UNITS_PER_RPS)

    @property
    def cached_prefill_tokens(self) -> int:
        """The prompt tokens each request finds in this replica's prefix cache (the shared prefix in whole blocks)."""
        return self.scheduler.cached_tokens(self.shape.prompt_tokens, self.shape.shared_prefix_tokens)


def replica_scheduler(space: SearchSpace, candidate: Candidate, catalog: Catalog, max_seqs_cap: int | None = None,
                      budgets: Budgets | None = None) -> Scheduler:
    """The engine's pool at the candidate's context (max-model-len) and its batching limits, for the model as it is
    served (with speculative decoding, the MTP draft's layer beside it: its weights and its cache a token, and the
    engine's running-request limit under it: speculative_running_cap). `budgets`:
    the pools the candidate search sized for that model (Enumeration.pools), read back rather than sized again."""
    target = GpuTarget.from_catalog(candidate.gpu)
    request = replace(candidate.configuration.request(), batch=1, overhead_fraction=space.overhead)
    settings = space.engine or EngineSettings("simple")
    speculation = candidate.configuration.speculation
    arch = space.served(speculation)
    if speculation is not None:
        max_seqs_cap = speculative_running_cap(settings, max_seqs_cap)
    budget = (known_budget(budgets, request, settings, target) if budgets else None) or engine_budget(
        arch, request, settings, target, catalog)
    # the margin has no batching of its own: vLLM's, or SGLang's for data-parallel attention or expert parallelism
    # (which vLLM's profile does not size, and SGLang runs)
    config = candidate.configuration
    borrowed = EngineSettings("sglang" if config.dp > 1 or config.ep > 1 else "vllm")
    batching = None if space.engine is not None else engine_budget(arch, request, borrowed, target, catalog)
    return Scheduler.of(budget, batching, max_seqs_cap, candidate.configuration.dp)


@dataclass(frozen=True)
class ReplicaLayout:
    """A replica a workload may run: the candidate (context = max-model-len), the scheduler its engine runs it
    with, and its step times and capacities, memoised: the timer is deterministic, and every bucket, every
    re-solve that changes only an SLO and every workload of the same model and search space time this replica."""

    candidate: Candidate
    scheduler: Scheduler
    times: StepTimes
    rates: dict[tuple, SteadyState | None] = field(default_factory=dict, compare=False, repr=False)

    def max_rate(self, shape: Workload, slo: Slo, window_spread: bool = True, tolerance: float = TOLERANCE,
                 guess: float | None = None) -> SteadyState | None:
        """planner.estimator.capacity.max_rate of this replica (searched once per question). Without a guess,
        the search starts where one under a looser SLO ended, if there was one: a tighter SLO only lowers it."""
        key = (shape, slo, window_spread, tolerance, guess)
        if key not in self.rates:
            guess = guess or min((state.requests_per_s / (1 - searched_to) for searched_to, state
                                  in self._searched(shape, slo, window_spread) if state is not None), default=None)
            self.rates[key] = max_rate(self.times, self.scheduler, shape, slo, window_spread, tolerance, guess)
        return self.rates[key]

    def ceiling(self, shape: Workload, slo: Slo, guess: float | None = None) -> float | None:
        """A rate at which the steady state at the mean rate (window_spread False), and so the replica's own,
        breaks a limit: past the end of a rough search of that bound, under `slo` or under a looser SLO searched
        before (a tighter one only lowers it). None when even a lone request misses the SLO. `guess`: where to
        start a search (see max_rate)."""
        known = [state for searched_to, state in self._searched(shape, slo, False) if searched_to == RANKING_TOLERANCE]
        if not known:
            known = [self.max_rate(shape, slo, False, RANKING_TOLERANCE, guess)]
        if any(state is None for state in known):
            return None
        return min(state.requests_per_s for state in known) / (1 - RANKING_TOLERANCE)

    def _searched(self, shape: Workload, slo: Slo, window_spread: bool) -> list[tuple[float, SteadyState | None]]:
        """(tolerance, answer) of the searches made so far for `shape` under `slo` or a looser SLO."""
        return [(key[3], state) for key, state in self.rates.items()
                if key[0] == shape and key[2] == window_spread and _looser(key[1], slo)]


def _looser(slo: Slo, than: Slo) -> bool:
    """Every target of `slo` at least as loose as `than`'s (at the same percentile)."""
    return slo.percentile == than.percentile and all(
        mine is None or (theirs is not None and mine >= theirs)
        for mine, theirs in ((slo.ttft_s, than.ttft_s), (slo.tpot_s, than.tpot_s)))


def fleet_out_of_time(deadline: Deadline, searched: str) -> OutOfTime:
    return deadline.out_of_time(searched, "the fleet's workloads, search.gpus, search.precisions or "
                                "search.max_gpus_per_replica", "any fleet was found")


def _within(deadline: Deadline, workload: FleetWorkload) -> None:
    if deadline.expired():
        raise fleet_out_of_time(deadline, f"workload {workload.name}: sizing its replicas under load")


@dataclass(frozen=True)
class ReplicaSearch:
    layouts: list[ReplicaLayout]
    rejections: tuple[Rejection, ...]  # groups where not even one request of the context fits, and why
    skipped: tuple[str, ...]  # GPU types not searched, and why (enumerate_candidates)


def replica_layouts(workload: FleetWorkload, catalog: Catalog, deadline: Deadline = NO_DEADLINE) -> ReplicaSearch:
    """Per GPU type, tp x pp, precision and KV dtype: the longest max-model-len that fits one request (what
    enumerate_candidates keeps of each group). Raises OutOfTime when the deadline ends the search."""
    space = workload.space
    cap = space.batch_cap
    one_request = replace(space, concurrencies=(1,))
    enumeration = enumerate_candidates(one_request, catalog, deadline, longest_first=True)
    if enumeration.cut_short:
        raise fleet_out_of_time(deadline, f"workload {workload.name}: {enumeration.cut_short}")
    layouts = []
    for c in enumeration.candidates:
        _within(deadline, workload)
        speculation = c.configuration.speculation
        layouts.append(ReplicaLayout(c, replica_scheduler(space, c, catalog, cap, enumeration.pools(speculation)),
                                     StepTimes(candidate_timer(c, space.arch, catalog, workload.engine,
                                                               workload.performance(c.gpu.generation),
                                                               workload.engine_version))))
    return ReplicaSearch(layouts, enumeration.rejections, enumeration.skipped)


def serving_configs(workload: FleetWorkload, catalog: Catalog, layouts: list[ReplicaLayout] | None = None,
                    deadline: Deadline = NO_DEADLINE) -> list[ServingConfig]:
    """Per bucket and replica size on each GPU type (and speculative setting, when search.speculative lists both):
    the configuration with the most SLO-meeting capacity (bucket by bucket, most capacity first). `layouts`: the
    workload's replica_layouts, if already built. Raises OutOfTime when the deadline ends the work: a fleet built on
    part of it could be wrong."""
    sizes: dict[tuple[str, int, Speculation | None], list[ReplicaLayout]] = {}
    for layout in replica_layouts(workload, catalog, deadline).layouts if layouts is None else layouts:
        # on the same GPU type, replicas of the same size cost the same: only the most capacity counts; with and
        # without MTP each keeps its best, so that CP-SAT picks between them by cost and the fleet can say what the
        # other setting would cost (planner.plan.fleet: held_speculative)
        c = layout.candidate
        sizes.setdefault((c.gpu.name, c.gpus, c.configuration.speculation), []).append(layout)
    configs = []
    for index, bucket in enumerate(workload.buckets):
        shape = Workload(bucket.prompt_tokens, bucket.output_tokens, bucket.shared_prefix_tokens)
        found = [most_capacity(workload, index, shape, group, deadline) for group in sizes.values()]
        configs += sorted((c for c in found if c is not None), key=lambda c: -c.capacity_rps)
    return configs


def most_capacity(workload: FleetWorkload, index: int, shape: Workload, layouts: list[ReplicaLayout],
                  deadline: Deadline, role: str = "both",
                  role_of: Callable[[ReplicaLayout], tuple[Slo, KvTransfer | None] | None] | None = None,
                  ) -> ServingConfig | None:
    """Of layouts of one size, the one whose replica takes the most requests/s within the SLO. The steady state
    at the mean rate (window_spread False) bounds a layout's capacity from above: a layout is worked out in full,
    largest bound first, only while its bound beats the best capacity so far (at the rate its ceiling gives,
    or failing that at the best capacity itself). `role_of`: a disaggregated role's SLO and KV transfer on a
    layout (None: the layout cannot take the role); without it the workload's SLO."""
    bounded: list[tuple[float, ReplicaLayout]] = []
    slos: dict[int, tuple[Slo, KvTransfer | None]] = {}
    for layout in layouts:
        _within(deadline, workload)
        own = role_of(layout) if role_of is not None else (workload.slo, None)
        if own is None:
            continue
        slos[id(layout)] = own
        slo = own[0]
        # layouts of one size are alike: each search starts where the one before ended
        above = layout.ceiling(shape, slo, bounded[-1][0] if bounded else None)
        if above is not None:
            bounded.append((above, layout))
    best: ServingConfig | None = None
    for above, layout in sorted(bounded, key=lambda b: -b[0]):
        _within(deadline, workload)
        slo, transfer = slos[id(layout)]
        most = best.performance.requests_per_s if best is not None else None
        if most is not None and (most >= above or steady_state(layout.times, layout.scheduler, shape, most, slo,
                                                               window_spread=False).limit):
            continue  # the bound breaks a limit at the best capacity so far
        state = layout.max_rate(shape, slo, guess=above)
        if state is None:
            continue
        config = ServingConfig(workload.name, index, layout.candidate, state, layout.scheduler,
                               state.requests_per_s * workload.utilisation, shape, layout.times, role,
                               None if role_of is None else slo, transfer)
        if config.capacity_units > 0 and (best is None or config.capacity_rps > best.capacity_rps):
            best = config
    return best


class ServingCache:
    """Serving configurations asked for again and again, as by a fleet solve and the re-solves that explain it
    (they change a quota or a workload's SLO, never its search space or engine). Replica layouts (candidates,
    schedulers, memoised step times and capacities) are built once per search space (offers aside) and engine,
    which workloads of one model may share; configurations once per workload object."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._searches: list[tuple[SearchSpace, str, Calibration | None, ReplicaSearch]] = []
        # by id(), holding the object itself: an id is only unique while its object lives
        self._configs: dict[int, tuple[FleetWorkload, list[ServingConfig]]] = {}

    def configs(self, workload: FleetWorkload, deadline: Deadline = NO_DEADLINE) -> list[ServingConfig]:
        known = self._configs.get(id(workload))
        if known is None or known[0] is not workload:
            layouts = self.search(workload, deadline).layouts
            configs = serving_configs(workload, self.catalog, layouts, deadline) if "aggregated" in workload.serving \
                else []
            if "disaggregated" in workload.serving:
                from planner.plan.disaggregated import role_configs

                configs += role_configs(workload, self.catalog, layouts, deadline)
            known = self._configs[id(workload)] = (workload, configs)
        return known[1]

    def search(self, workload: FleetWorkload, deadline: Deadline = NO_DEADLINE) -> ReplicaSearch:
        # the offers only price replicas: spaces that differ in them alone (another market) share the layouts
        unpriced = replace(workload.space, offers=())
        for space, engine, calibration, found in self._searches:
            if engine == workload.engine and calibration is workload.calibration and space == unpriced:
                return found
        found = replica_layouts(workload, self.catalog, deadline)
        self._searches.append((unpriced, workload.engine, workload.calibration, found))
        return found


__all__ = ["CAPACITY_UNITS_PER_RPS", "Bucket", "FleetWorkload", "ReplicaLayout", "ReplicaSearch", "ServingCache", "ServingConfig", "Slo",
           "fleet_out_of_time", "most_capacity", "replica_layouts", "replica_scheduler", "serving_configs"]
