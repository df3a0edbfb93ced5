"""What one replica serves: for each workload (or request bucket) and replica layout, the largest
batch whose latency meets the SLOs, and the requests/s that replica takes.

The fleet model (fleet.py) buys replicas of these configurations; this module decides what each
replica is worth.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.catalog.load import Catalog
from planner.estimator.performance import ReplicaPerformance, Workload, replica_performance
from planner.plan.search import Candidate, SearchSpace, enumerate_candidates

CAPACITY_UNITS_PER_RPS = 1000  # demand and capacity are integer milli-requests per second inside CP-SAT
BATCH_LADDER = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


@dataclass(frozen=True)
class Bucket:
    """A slice of a workload's traffic with one request shape."""

    requests_per_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None


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
    candidate: Candidate
    performance: ReplicaPerformance
    capacity_rps: float  # requests/s one replica takes at the utilisation ceiling

    @property
    def capacity_units(self) -> int:
        return int(self.capacity_rps * CAPACITY_UNITS_PER_RPS)


def serving_configs(workload: FleetWorkload, catalog: Catalog) -> list[ServingConfig]:
    """Per bucket and replica size on each GPU type: the configuration with the most SLO-meeting capacity."""
    space = workload.space
    context = max(space.contexts)
    # workload.concurrency, when set above 1, caps the batch a replica may run
    cap = max(space.concurrencies) if max(space.concurrencies) > 1 else BATCH_LADDER[-1]
    ladder = replace(space, contexts=(context,), concurrencies=tuple(b for b in BATCH_LADDER if b <= cap) or (1,))
    fitting = enumerate_candidates(ladder, catalog).candidates
    out: list[ServingConfig] = []
    for index, bucket in enumerate(workload.buckets):
        if bucket.prompt_tokens + bucket.output_tokens > context:
            continue
        shape = Workload(bucket.prompt_tokens, bucket.output_tokens)
        best: dict[tuple, ServingConfig] = {}
        for layout, ladder_fits in _by_layout(fitting).items():
            config = _largest_batch_within_slo(workload, index, ladder_fits, shape, catalog)
            # on the same GPU type, replicas of the same size cost the same: only the most capacity counts
            size = (layout[0], ladder_fits[0].gpus)
            if config and config.capacity_units > 0 and (size not in best or config.capacity_rps > best[size].capacity_rps):
                best[size] = config
        out.extend(best.values())
    return out


def _by_layout(candidates) -> dict[tuple, list[Candidate]]:
    layouts: dict[tuple, list[Candidate]] = {}
    for c in candidates:
        layouts.setdefault((c.gpu.name, c.tp, c.pp, c.precision, c.kv_dtype), []).append(c)
    return {k: sorted(v, key=lambda c: c.concurrency) for k, v in layouts.items()}


def _largest_batch_within_slo(workload: FleetWorkload, bucket: int, ladder: list[Candidate], shape: Workload,
                              catalog: Catalog) -> ServingConfig | None:
    """Binary search on concurrency: TTFT and TPOT only grow with it, requests/s grows with it."""
    found: ServingConfig | None = None
    lo, hi = 0, len(ladder) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        c = ladder[mid]
        perf = replica_performance(workload.space.arch, c.precision, c.kv_dtype, c.gpu, c.tp, c.pp, c.concurrency,
                                   shape, catalog, workload.engine)
        meets = ((workload.slo.ttft_s is None or perf.ttft_s <= workload.slo.ttft_s)
                 and (workload.slo.tpot_s is None or perf.tpot_s <= workload.slo.tpot_s))
        if meets:
            found = ServingConfig(workload.name, bucket, c, perf, perf.requests_per_s * workload.utilisation)
            lo = mid + 1
        else:
            hi = mid - 1
    return found
