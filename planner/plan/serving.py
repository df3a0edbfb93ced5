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

from dataclasses import dataclass, replace

from planner.catalog.load import Catalog
from planner.estimator.capacity import Scheduler, Slo, SteadyState, max_rate
from planner.estimator.engines import EngineBudget, EngineSettings, engine_budget
from planner.estimator.memory import GpuTarget, Request
from planner.estimator.performance import Workload, replica_timer
from planner.plan.deadline import NO_DEADLINE, Deadline, OutOfTime
from planner.plan.search import Candidate, SearchSpace, enumerate_candidates

CAPACITY_UNITS_PER_RPS = 1000  # demand and capacity are integer milli-requests per second inside CP-SAT


@dataclass(frozen=True)
class Bucket:
    """A slice of a workload's traffic with one request shape."""

    requests_per_s: float
    prompt_tokens: int
    output_tokens: int


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


@dataclass(frozen=True)
class ServingConfig:
    workload: str
    bucket: int
    candidate: Candidate  # context = max-model-len; concurrency 1: one request of it fits (the start-up check)
    performance: SteadyState  # at the largest rate within the SLO: batch, TTFT, TPOT, KV in flight
    scheduler: Scheduler  # the engine's pool and batching limits this replica runs with
    capacity_rps: float  # requests/s one replica takes at the utilisation ceiling
    shape: Workload  # the bucket's request shape

    @property
    def capacity_units(self) -> int:
        return int(self.capacity_rps * CAPACITY_UNITS_PER_RPS)


def replica_scheduler(space: SearchSpace, candidate: Candidate, catalog: Catalog, max_seqs_cap: int | None = None,
                      budget: EngineBudget | None = None) -> Scheduler:
    """The engine's pool at the candidate's context (max-model-len) and its batching limits."""
    target = GpuTarget.from_catalog(candidate.gpu)
    request = Request(context=candidate.context, batch=1, tp=candidate.tp, pp=candidate.pp,
                      precision=candidate.precision, kv_dtype=candidate.kv_dtype, overhead_fraction=space.overhead)
    settings = space.engine or EngineSettings("simple")
    budget = budget or engine_budget(space.arch, request, settings, target, catalog)
    batching = None if space.engine is not None else engine_budget(space.arch, request, EngineSettings("vllm"), target,
                                                                   catalog)
    return Scheduler.of(budget, batching, max_seqs_cap)


def fleet_out_of_time(deadline: Deadline, searched: str) -> OutOfTime:
    return deadline.out_of_time(searched, "the fleet's workloads, search.gpus, search.precisions or "
                                "search.max_gpus_per_replica", "any fleet was found")


def _within(deadline: Deadline, workload: FleetWorkload) -> None:
    if deadline.expired():
        raise fleet_out_of_time(deadline, f"workload {workload.name}: sizing its replicas under load")


def serving_configs(workload: FleetWorkload, catalog: Catalog, deadline: Deadline = NO_DEADLINE) -> list[ServingConfig]:
    """Per bucket and replica size on each GPU type: the configuration with the most SLO-meeting capacity.
    Raises OutOfTime when the deadline ends the work: a fleet built on part of it could be wrong."""
    space = workload.space
    # workload.concurrency, when set above 1, caps the batch a replica may run
    cap = max(space.concurrencies) if max(space.concurrencies) > 1 else None
    one_request = replace(space, concurrencies=(1,))
    largest: dict[tuple, Candidate] = {}
    enumeration = enumerate_candidates(one_request, catalog, deadline)
    if enumeration.cut_short:
        raise fleet_out_of_time(deadline, f"workload {workload.name}: {enumeration.cut_short}")
    for c in enumeration.candidates:
        key = (c.gpu.name, c.tp, c.pp, c.precision, c.kv_dtype)
        if key not in largest or c.context > largest[key].context:
            largest[key] = c  # the longest max-model-len that fits one request
    replicas = []
    for candidate in largest.values():
        _within(deadline, workload)
        timer = replica_timer(space.arch, candidate.precision, candidate.kv_dtype, candidate.gpu, candidate.tp,
                              candidate.pp, catalog, workload.engine)
        replicas.append((candidate, replica_scheduler(space, candidate, catalog, cap), timer))
    best: dict[tuple, ServingConfig] = {}
    for index, bucket in enumerate(workload.buckets):
        shape = Workload(bucket.prompt_tokens, bucket.output_tokens)
        # the steady state at the mean rate bounds each layout's capacity from above: the full one is worked
        # out, largest bound first, only where the bound beats the best of its size so far
        bounded = []
        for candidate, scheduler, timer in replicas:
            _within(deadline, workload)
            bound = max_rate(timer, scheduler, shape, workload.slo, window_spread=False)
            if bound is not None:
                bounded.append((bound.requests_per_s, candidate, scheduler, timer))
        for bound, candidate, scheduler, timer in sorted(bounded, key=lambda b: -b[0]):
            _within(deadline, workload)
            # on the same GPU type, replicas of the same size cost the same: only the most capacity counts
            size = (index, candidate.gpu.name, candidate.gpus)
            if size in best and best[size].performance.requests_per_s >= bound:
                continue
            state = max_rate(timer, scheduler, shape, workload.slo)
            if state is None:
                continue
            config = ServingConfig(workload.name, index, candidate, state, scheduler,
                                   state.requests_per_s * workload.utilisation, shape)
            if config.capacity_units > 0 and (size not in best or config.capacity_rps > best[size].capacity_rps):
                best[size] = config
    return list(best.values())


__all__ = ["CAPACITY_UNITS_PER_RPS", "Bucket", "FleetWorkload", "ServingConfig", "Slo", "fleet_out_of_time",
           "replica_scheduler", "serving_configs"]
