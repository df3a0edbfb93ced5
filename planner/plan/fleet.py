"""Fleet sizing with CP-SAT: how many replicas of which configuration, on which rentable pools,
serve every workload's traffic within its latency targets at the lowest $/hour.

Like solver.py, this module keeps its CP-SAT objects to itself: build the model from plain
dataclasses, solve, read the answer back into plain dataclasses.

Model. For every workload (or traffic bucket of a workload) the serving configurations are the
memory candidates (GPU x TP/PP x precision x KV dtype at the workload's context) at the largest
concurrency whose TTFT and TPOT meet the SLOs; a configuration's capacity is the performance
model's requests/s at that concurrency times the utilisation ceiling. Integer variables: replicas
of each configuration on each pool (offer x market), and instances rented of each pool.
Constraints: the GPUs the replicas take up fit in the instances rented (planner.plan.rental: one
rule with the single-configuration planner; footprints pack exactly); capacity meets demand, with N+k
redundancy (the fleet still meets demand without its k largest replicas of any configuration);
minimum replicas; a cap on distinct configurations per workload; GPU quotas per provider /
region / GPU type shared by all workloads; an on-demand share of capacity when spot is allowed;
with fleet.survive, demand met with any one region (provider) lost. Spot replicas count at their
expected availability (fleet.spot; planner.plan.failure). With search.serving disaggregated, a bucket may instead be
served by prefill and decode replicas (planner.plan.disaggregated), each kind meeting every demand rule: a boolean per
bucket searched both ways picks the mode. With search.speculative listing none and mtp, a replica size keeps its best
configuration with MTP and without (planner.plan.serving), CP-SAT picks between them by cost, and a re-solve with the
workload held to the other setting says what it would cost. Objective: $/hour (then, with both modes searched,
aggregated buckets and the fewest GPUs at equal cost).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from math import ceil
from pathlib import Path
from typing import TYPE_CHECKING

from planner.plan.cpsat import cp_model

from planner.catalog.load import Catalog, Offer
from planner.catalog.prices import PriceAge, offer_label, price_age
from planner.errors import PlannerInputError
from planner.estimator.layout import ParallelLayout
from planner.estimator.memory import MemoryEstimate
from planner.plan.configuration import Configuration
from planner.plan.deadline import Deadline, OutOfTime
from planner.estimator.capacity import TOLERANCE, steady_state
from planner.plan.disaggregated import (AGGREGATED, BOTH, DECODE, DISAGGREGATED, PREFILL, KvTransfer, ServingChoice,
                                        check_workload, on_network, unserved_reason)
from planner.plan.failure import SpotRates, SpotRisk, Survive, counted_units, fallback, zone
from planner.plan.hosted import HostedCost, hosted_costs
from planner.plan.loads import ReplicaLoads, replica_loads
from planner.plan.rental import COST_UNITS_PER_USD, footprint
from planner.plan.scenario import FleetSpec, QuotaSpec, Scenario
from planner.plan.search import build_search_space, recheck
from planner.plan.status import INFEASIBLE, OPTIMAL, UNKNOWN, solved, status_name
from planner.plan.serving import (CAPACITY_UNITS_PER_RPS, Bucket, FleetWorkload, ServingCache, ServingConfig, Slo,
                                  fleet_out_of_time, most_capacity)

if TYPE_CHECKING:
    from planner.calibration.calibrate import Calibration


@dataclass(frozen=True)
class Quota:
    max_gpus: int
    provider: str | None = None
    region: str | None = None
    gpu: str | None = None

    def covers(self, offer: Offer) -> bool:
        return ((self.provider is None or offer.provider == self.provider)
                and (self.region is None or offer.region == self.region)
                and (self.gpu is None or offer.gpu == self.gpu))

    @property
    def label(self) -> str:
        parts = [p for p in (self.provider, self.region, self.gpu) if p]
        return f"quota {'/'.join(parts) or 'all'} <= {self.max_gpus} GPUs"


@dataclass(frozen=True)
class FleetProblem:
    workloads: tuple[FleetWorkload, ...]
    quotas: tuple[Quota, ...] = ()
    on_demand_share: float | None = None  # at least this share of each workload's demand on on-demand pools
    time_limit_s: float = 10.0
    spot: SpotRates | None = None  # interruption rates: spot replicas count at their expected availability
    survive: Survive | None = None  # every demand met with any one region (provider) lost
    held: tuple[tuple[str, str], ...] = ()  # (workload, serving mode) it is held to: what the other mode would cost
    # (workload, whether its replicas run MTP) it is held to: what the other speculative setting would cost
    held_speculative: tuple[tuple[str, bool], ...] = ()

    def available(self, pool: Pool) -> float:
        """The expected fraction of a pool's capacity serving: 1 but for a spot pool with an interruption rate."""
        unavailable = self.spot.unavailable(pool.offer) if self.spot and pool.market == "spot" else None
        return 1.0 if unavailable is None else 1 - unavailable


@dataclass(frozen=True)
class Pool:
    offer: Offer
    market: str

    @property
    def price_units(self) -> int:
        return round((self.offer.price(self.market) or 0) * COST_UNITS_PER_USD)

    @property
    def label(self) -> str:
        return offer_label(self.offer, self.market)


@dataclass(frozen=True)
class Assignment:
    workload: str
    bucket: int
    config: ServingConfig
    pool: Pool
    replicas: int
    memory: MemoryEstimate  # the estimator's re-check on the GPU
    # the load it is expected to carry (_expected_loads): its share of its bucket's demand, and the requests/s
    # that puts on each of its replicas
    demand_share: float
    expected_rps_per_replica: float
    slo: Slo = Slo()  # the workload's, as the scenario states it: what a plan file carries for `planner check`
    loads: ReplicaLoads | None = None  # one replica at the SLO limit, planned and expected (plan_fleet)
    available: float = 1.0  # the share of its capacity counted: less on a spot pool with an interruption rate
    model_precision: str | None = None  # the precision its model's checkpoint ships in (None: a size-only model)

    @property
    def configuration(self) -> Configuration:
        return self.config.candidate.configuration

    @property
    def capacity_units(self) -> int:
        """One replica's capacity as the fleet's demand rules count it (planner.plan.failure.counted_units)."""
        return counted_units(self.config.capacity_units, self.available)


def _expected_loads(workloads: tuple[FleetWorkload, ...],
                   placed: list[tuple[str, int, ServingConfig, int]]) -> list[tuple[float, float]]:
    """The load each (workload, bucket, config, replicas) placement of a fleet expects, as (share of its bucket's
    demand, requests/s per replica): the bucket's demand, up to the capacity its replicas were planned for (less when
    some is unmet), split over its replicas in proportion to their capacity, so every replica runs as near its
    utilisation ceiling as the others. The one rule for the expected load: the plan prints it, its JSON carries it,
    and `planner simulate` runs it from the scenario or the plan file."""
    by_name = {w.name: w for w in workloads}
    capacity: dict[tuple[str, int, str], float] = {}  # a disaggregated bucket's prefill and decode pools each take it
    for workload, bucket, config, replicas in placed:
        key = (workload, bucket, config.role)
        capacity[key] = capacity.get(key, 0.0) + replicas * config.capacity_rps
    out = []
    for workload, bucket, config, replicas in placed:
        total = capacity[workload, bucket, config.role]
        share = replicas * config.capacity_rps / total
        served = min(by_name[workload].buckets[bucket].requests_per_s, total)
        out.append((share, served * share / replicas))
    return out


@dataclass(frozen=True)
class PoolUse:
    pool: Pool
    instances: int
    gpus_used: int
    price_age: PriceAge  # against the strictest pricing.max_price_age_days of the workloads it serves
    spot: SpotRisk | None = None  # a spot pool's interruption assumption, expected loss and on-demand fallback

    @property
    def usd_per_hour(self) -> float:
        return self.instances * self.pool.price_units / COST_UNITS_PER_USD


@dataclass(frozen=True)
class TokenCosts:
    """What the fleet costs per million tokens at its planned load, the demand it is sized for (each workload's
    requests/s x tokens per request, not the larger capacity its replicas could serve): cost per hour / (tokens per
    hour of the demand) x 1e6. Input counts the prompts' tokens, output the replies', and the blended figure both,
    so it weighs them at the workloads' own mix; the input and output figures each put the whole cost on that kind."""

    usd_per_million_input_tokens: float
    usd_per_million_output_tokens: float
    usd_per_million_tokens: float

    @classmethod
    def of(cls, usd_per_hour: float, workloads: tuple[FleetWorkload, ...]) -> TokenCosts:
        prompt, output = (sum(tokens) for tokens in zip(*(w.tokens_per_hour for w in workloads)))
        return cls(*(round(usd_per_hour / tokens * 1e6, 4) for tokens in (prompt, output, prompt + output)))


@dataclass(frozen=True)
class LayoutComparison:
    """An aggregated replica of a workload whose search.layouts lists tp and dp_ep, against the layout of the other
    family that takes the most requests/s within the SLO on the same GPUs (each at its SLO limit)."""

    workload: str
    bucket: int
    gpu: str
    gpus: int
    layout: ParallelLayout
    capacity_rps: float
    other: ParallelLayout | None  # None: no layout of the other family on these GPUs holds the SLO
    other_capacity_rps: float | None


@dataclass(frozen=True)
class SpeculativeChoice:
    """A workload whose search.speculative lists none and mtp: the setting its replicas run, and what the fleet costs
    with the workload held to the other one (CP-SAT picked between them by cost)."""

    workload: str
    running: str  # the replicas' setting as plans print it (`MTP 3 tokens, acceptance length 2.65`), `none`, or
    # `mixed` (some replicas with MTP, some without: no other setting to hold it to)
    acceptance_source: str | None  # where the MTP setting's acceptance length comes from
    other: str | None  # the setting it was held to: `without MTP`, `with MTP 3 tokens, ...`; None when mixed
    other_usd_per_hour: float | None  # the fleet with the workload held to `other`; None: see other_note
    other_note: str = ""  # why other_usd_per_hour is None
    other_replicas: str = ""  # that fleet's replicas of the workload: `5 x (8 x b200, tp 8 x pp 1)`
    # the workload also searched disaggregated prefill / decode pairs, which run without speculative decoding
    pairs_without_mtp: bool = False


@dataclass(frozen=True)
class FleetPlan:
    status: str
    gap: float
    solve_seconds: float
    usd_per_hour: float | None
    token_costs: TokenCosts | None  # None without a fleet
    assignments: tuple[Assignment, ...]
    pools: tuple[PoolUse, ...]
    unmet: tuple[str, ...]  # demand that cannot be served, and why
    binding: tuple[str, ...]
    configurations: int
    variables: int
    candidate_seconds: float = 0.0  # of solve_seconds, spent building serving configurations
    left_out: tuple[str, ...] = ()  # GPU types cheaper per GPU-hour than the fleet's dearest that serve nothing, and why
    speed: tuple[str, ...] = ()  # per workload and GPU type: whose speed a calibration file scaled, and whose it did not
    hosted: tuple[HostedCost, ...] = ()  # beside token_costs: each workload's cost against hosted APIs' list prices
    serving: tuple[ServingChoice, ...] = ()  # per workload bucket: aggregated or disaggregated, and the other's cost
    layouts: tuple[LayoutComparison, ...] = ()  # with tp and dp_ep searched: each replica against the other family's
    speculative: tuple[SpeculativeChoice, ...] = ()  # per workload searching none and mtp: the other setting's cost


def _footprint(config: ServingConfig, pool: Pool) -> int | None:
    """GPUs of the pool's instance shape one replica takes up (planner.plan.rental), None if not rentable there."""
    return footprint(config.candidate.gpus, config.candidate.node_group, pool.offer.gpus)


def _fits_pool(config: ServingConfig, pool: Pool) -> bool:
    return _footprint(config, pool) is not None


# --------------------------------------------------------------------------------------------
# The CP-SAT model


@dataclass
class _Built:
    model: cp_model.CpModel
    replicas: dict[tuple[int, int], cp_model.IntVar]  # (config index, pool index)
    instances: dict[int, cp_model.IntVar]
    slack: dict[tuple[str, int], cp_model.IntVar]
    cost: cp_model.LinearExpr


def demand_units(bucket: Bucket) -> int:
    return ceil(bucket.requests_per_s * CAPACITY_UNITS_PER_RPS)


def _build(problem: FleetProblem, configs: list[ServingConfig], pools: list[Pool],
           allow_unmet: bool) -> _Built:
    model = cp_model.CpModel()
    by_name = {w.name: w for w in problem.workloads}
    held = dict(problem.held)
    held_speculative = dict(problem.held_speculative)
    replicas: dict[tuple[int, int], cp_model.IntVar] = {}
    upper: dict[tuple[int, int], int] = {}
    available = [problem.available(pool) for pool in pools]
    # a workload's replicas rent only the offers its own pricing admits (its providers, regions, market, kinds,
    # terms), whatever another workload's admits
    admitted = {w.name: {Pool(o, m) for o, m in w.space.offers} for w in problem.workloads}
    for ci, config in enumerate(configs):
        w = by_name[config.workload]
        if held.get(w.name, _mode(config)) != _mode(config) or \
                held_speculative.get(w.name, _drafts(config)) != _drafts(config):
            continue
        bucket = w.buckets[config.bucket]
        for pi, pool in enumerate(pools):
            if pool.offer.gpu == config.candidate.gpu.name and pool in admitted[w.name] and _fits_pool(config, pool) \
                    and on_network(config, pool.offer):
                units = max(1, counted_units(config.capacity_units, available[pi]))
                bound = ceil(demand_units(bucket) / units) + w.redundancy + w.min_replicas
                replicas[ci, pi] = model.new_int_var(0, bound, f"n_{ci}_{pi}")
                upper[ci, pi] = bound
    instances: dict[int, cp_model.IntVar] = {}
    for pi, pool in enumerate(pools):
        users = [(ci, var) for (ci, p), var in replicas.items() if p == pi]
        if not users:
            continue
        # footprints of one shape pack exactly (see planner.plan.rental), so GPUs taken <= GPUs rented is the rule
        gpus = sum(var * _footprint(configs[ci], pool) for ci, var in users)
        top = sum(_footprint(configs[ci], pool) * upper[ci, pi] for ci, _ in users)
        instances[pi] = model.new_int_var(0, ceil(top / pool.offer.gpus), f"inst_{pi}")
        model.add(gpus <= instances[pi] * pool.offer.gpus)

    slack: dict[tuple[str, int], cp_model.IntVar] = {}
    splits_made: list[cp_model.IntVar] = []  # per bucket searched both ways: served disaggregated
    for w in problem.workloads:
        used_flags = []
        for b, bucket in enumerate(w.buckets):
            terms = [(ci, pi, var * counted_units(configs[ci].capacity_units, available[pi]))
                     for (ci, pi), var in replicas.items() if configs[ci].workload == w.name and configs[ci].bucket == b]
            demand = demand_units(bucket)
            unmet = 0
            if allow_unmet:
                unmet = slack[w.name, b] = model.new_int_var(0, demand, f"unmet_{w.name}_{b}")
            # each demand rule holds for the replicas serving every request whole (aggregated), or for the prefill
            # replicas and for the decode replicas (disaggregated), under the bucket's choice of mode
            modes = _modes(model, configs, replicas, w, b)
            splits_made += [enforced for role, enforced in modes if role == PREFILL and enforced is not None]
            for role, enforced in modes:
                group = [t for t in terms if configs[t[0]].role == role]
                capacity = sum(units for _, _, units in group) + unmet
                _when(model.add(capacity >= demand), enforced)
                if problem.on_demand_share:
                    on_demand = sum(units for _, pi, units in group if pools[pi].market == "on-demand")
                    _when(model.add(on_demand + unmet >= ceil(problem.on_demand_share * demand)), enforced)
                if problem.survive:
                    # any one zone lost, what runs outside it still meets the demand
                    zones = [zone(pools[pi].offer, problem.survive) for _, pi, _ in group]
                    for lost in dict.fromkeys(zones):
                        _when(model.add(sum(units for (_, _, units), z in zip(group, zones) if z != lost) + unmet
                                        >= demand), enforced)
                if w.redundancy or w.max_configs is not None:
                    for ci in sorted({ci for ci, _, _ in group}):
                        used = model.new_bool_var(f"used_{ci}")
                        config_vars = [var for (c, _), var in replicas.items() if c == ci]
                        model.add(sum(config_vars) == 0).only_enforce_if(~used)
                        used_flags.append(used)
                        if w.redundancy:
                            # N+k: losing k replicas of this configuration still leaves the demand covered
                            model.add(capacity >= demand + w.redundancy * configs[ci].capacity_units
                                      ).only_enforce_if([used] + ([enforced] if enforced is not None else []))
        total = sum(var for (ci, _), var in replicas.items() if configs[ci].workload == w.name)
        if w.min_replicas and not allow_unmet:
            model.add(total >= w.min_replicas)
        if w.max_configs is not None and used_flags:
            model.add(sum(used_flags) <= w.max_configs)
    for quota in problem.quotas:
        covered = [instances[pi] * pools[pi].offer.gpus for pi in instances if quota.covers(pools[pi].offer)]
        if covered:
            model.add(sum(covered) <= quota.max_gpus)
    cost = sum(instances[pi] * pools[pi].price_units for pi in instances)
    # with unmet demand allowed: serve as much as possible first (the cost is minimized after, at that service,
    # in _least_unmet), rather than one weighted sum whose coefficients overflow at large demands
    scale, tie = _tie_break(configs, replicas, upper, splits_made)
    model.minimize(sum(slack.values()) if slack else cost * scale + tie)
    return _Built(model, replicas, instances, slack, cost)


def _tie_break(configs: list[ServingConfig], replicas: dict[tuple[int, int], cp_model.IntVar],
               upper: dict[tuple[int, int], int], splits: list[cp_model.IntVar]) -> tuple[int, cp_model.LinearExpr | int]:
    """(scale of the cost, what to minimise beside it). With both serving modes searched, at equal cost (whole
    paid nodes leave GPUs spare): each bucket aggregated (one pool, no transfer), then the fewest GPUs running, the
    cost scaled past the largest tie-break so that no saving is traded for it; otherwise the cost alone, as before."""
    if not splits:
        return 1, 0
    gpus = sum(var * configs[ci].candidate.gpus for (ci, _), var in replicas.items())
    most = sum(bound * configs[ci].candidate.gpus for (ci, _), bound in upper.items()) + 1
    return most * (len(splits) + 1), most * sum(splits) + gpus


def _mode(config: ServingConfig) -> str:
    return AGGREGATED if config.role == BOTH else DISAGGREGATED


def _drafts(config: ServingConfig) -> bool:
    """The replica runs speculative decoding."""
    return config.candidate.configuration.speculation is not None


def _modes(model: cp_model.CpModel, configs: list[ServingConfig], replicas: dict[tuple[int, int], cp_model.IntVar],
           w: FleetWorkload, b: int) -> list[tuple[str, cp_model.IntVar | None]]:
    """The capacity groups of a bucket's demand rules, each with the literal that enforces it: aggregated replicas
    alone (None: always), prefill and decode replicas alone, or, with both modes searched, a boolean per bucket
    (disaggregated) that holds the other mode's replicas at 0."""
    modes = [mode for mode in (AGGREGATED, DISAGGREGATED) if mode in w.serving]
    if len(modes) == 1:
        return [(BOTH, None)] if modes[0] == AGGREGATED else [(PREFILL, None), (DECODE, None)]
    split = model.new_bool_var(f"disaggregated_{w.name}_{b}")
    for (ci, _), var in replicas.items():
        if configs[ci].workload == w.name and configs[ci].bucket == b:
            model.add(var == 0).only_enforce_if(split if configs[ci].role == BOTH else ~split)
    return [(BOTH, ~split), (PREFILL, split), (DECODE, split)]


def _when(constraint: cp_model.Constraint, enforced: cp_model.IntVar | None) -> None:
    if enforced is not None:
        constraint.only_enforce_if(enforced)


def _solve(built: _Built, time_limit_s: float) -> tuple[cp_model.CpSolver, int]:
    solver = cp_model.CpSolver()
    if time_limit_s <= 0:  # the sizing before it spent the limit: no call, nothing found
        return solver, cp_model.UNKNOWN
    solver.parameters.max_time_in_seconds = time_limit_s
    # One worker with the full LP relaxation: measured on bench/solver_scale.py (5 workloads x 15 pools)
    # it proves optimality in 0.05 s where the default 2-worker portfolio, which has no LP worker, took 7 s;
    # a single worker is also deterministic.
    solver.parameters.num_workers = 1
    solver.parameters.linearization_level = 2
    solver.parameters.random_seed = 0
    return solver, solver.solve(built.model)


# --------------------------------------------------------------------------------------------
# The whole job


def plan_fleet(problem: FleetProblem, catalog: Catalog, explain: bool = True,
               cache: ServingCache | None = None, deadline: Deadline | None = None) -> FleetPlan:
    """The cheapest fleet; `explain`: which limits bind (re-solves); `cache`: serving configurations to share
    with the caller (e.g. to price the same configurations another way); `deadline`: the command's, which the
    explanations' re-solves share (by default problem.time_limit_s from now). Raises OutOfTime when the deadline
    ends the work before any fleet is found: cut short, not proven infeasible, which a command then says as a
    single-configuration plan does (one line, exit 2); a fleet found but not proven cheapest is FEASIBLE."""
    deadline = deadline or Deadline.start(problem.time_limit_s)
    plan = _plan_fleet(problem, catalog, explain, cache or ServingCache(catalog), deadline)
    by_name = {w.name: w for w in problem.workloads}
    # the expected load through the simulator only when the plan is explained: a caller that only wants the cost
    # (a what-if row, `planner simulate`, which runs it itself) does not wait for it
    return replace(plan, assignments=tuple(
        replace(a, loads=replica_loads(a.config, by_name[a.workload], a.expected_rps_per_replica, deadline, explain))
        for a in plan.assignments))


def _plan_fleet(problem: FleetProblem, catalog: Catalog, explain: bool, cache: ServingCache,
                deadline: Deadline) -> FleetPlan:
    started = time.perf_counter()
    configs = []
    for done, w in enumerate(problem.workloads):
        if deadline.expired():
            raise fleet_out_of_time(deadline, f"sizing the replicas of {done} of {len(problem.workloads)} workloads")
        configs += cache.configs(w, deadline)
    candidate_seconds = time.perf_counter() - started
    pools = list(dict.fromkeys(Pool(o, m) for w in problem.workloads for o, m in w.space.offers))
    built = _build(problem, configs, pools, allow_unmet=False)
    solver, status = _solve(built, deadline.remaining_s())
    if status_name(status) == UNKNOWN:  # the time limit ended the search before any fleet was found
        raise fleet_out_of_time(deadline, f"CP-SAT's search of {len(configs):,} serving configurations")
    if not solved(status):
        plan = _unmet_plan(problem, configs, pools, catalog, started, status_name(status), deadline)
        return replace(plan, candidate_seconds=candidate_seconds)
    plan = _read(problem, built, solver, configs, pools, catalog, status_name(status), started, ())
    plan = replace(plan, candidate_seconds=candidate_seconds, speed=_speed_basis(problem, plan),
                   serving=_serving(problem, plan, catalog, cache, deadline, explain))
    if explain:
        plan = replace(plan, speculative=_speculative(problem, plan, catalog, cache, deadline))
        plan = replace(plan, binding=_binding(problem, plan, catalog, cache, deadline),
                       left_out=_left_out(problem, plan, cache), layouts=_layout_comparisons(problem, plan, cache, deadline))
    return plan


def _layout_comparisons(problem: FleetProblem, plan: FleetPlan, cache: ServingCache,
                        deadline: Deadline) -> tuple[LayoutComparison, ...]:
    """Per aggregated replica type of a workload searching tp and dp_ep: the best layout of the other family on the
    same GPUs (the serving configurations keep one layout per GPU type and size, the family it beat unnamed)."""
    by_name = {w.name: w for w in problem.workloads}
    out: dict[tuple, LayoutComparison] = {}
    for a in plan.assignments:
        w, c = by_name[a.workload], a.config.candidate
        key = (a.workload, a.bucket, c.gpu.name, c.gpus)
        if not w.space.expert_parallel or a.config.role != BOTH or key in out or deadline.expired():
            continue
        mine = c.configuration.parallel
        others = [layout for layout in cache.search(w, deadline).layouts
                  if (layout.candidate.gpu.name, layout.candidate.gpus) == (c.gpu.name, c.gpus)
                  and layout.candidate.configuration.speculation == c.configuration.speculation
                  and layout.candidate.configuration.parallel.expert_parallel != mine.expert_parallel]
        best = most_capacity(w, a.bucket, a.config.shape, others, deadline) if others else None
        out[key] = LayoutComparison(a.workload, a.bucket, c.gpu.name, c.gpus, mine, a.config.performance.requests_per_s,
                                    best.candidate.configuration.parallel if best else None,
                                    best.performance.requests_per_s if best else None)
    return tuple(out.values())


def _serving(problem: FleetProblem, plan: FleetPlan, catalog: Catalog, cache: ServingCache, deadline: Deadline,
             explain: bool) -> tuple[ServingChoice, ...]:
    """Per bucket of a workload whose search.serving is not the default: the mode the plan serves it in; for a
    disaggregated one, its TTFT re-checked through the estimator (each role's steady state at its SLO limit, the
    slowest prefill + its transfer + the slowest decode share, within the workload's TTFT); `explain`, with both
    modes searched: what the fleet costs with the workload held to the mode the bucket did not take (a re-solve)."""
    out = []
    for w in problem.workloads:
        if w.serving == (AGGREGATED,):
            continue
        held: dict[str, tuple[float | None, str]] = {}
        for b, bucket in enumerate(w.buckets):
            mine = [a for a in plan.assignments if a.workload == w.name and a.bucket == b]
            if not mine:
                continue
            mode = AGGREGATED if all(a.config.role == BOTH for a in mine) else DISAGGREGATED
            ttft = transfer = transfer_bytes = None
            if mode == DISAGGREGATED:
                ttft, slowest = _disaggregated_ttft(w, mine)
                transfer, transfer_bytes = slowest.seconds, slowest.bytes_per_gpu
            other = next((m for m in w.serving if m != mode), None)
            if other is not None and explain and other not in held:
                try:
                    held[other] = (_resolve(replace(problem, held=problem.held + ((w.name, other),)), catalog, cache,
                                            deadline).usd_per_hour, "")
                except OutOfTime:
                    held[other] = (None, f"the {deadline.limit_s:g} s time limit ran out first")
            cost, note = held.get(other, (None, "not asked for" if other else ""))
            if other is not None and cost is None and not note:
                note = f"no fleet serves {w.name} {other}"
            out.append(ServingChoice(w.name, b, mode, ttft, transfer, transfer_bytes, other, cost, note))
    return tuple(out)


def _speculative(problem: FleetProblem, plan: FleetPlan, catalog: Catalog, cache: ServingCache,
                 deadline: Deadline) -> tuple[SpeculativeChoice, ...]:
    """Per workload whose search.speculative lists none and mtp: the setting its replicas run, and what the fleet
    costs with the workload held to the other (a re-solve within what is left of the deadline)."""
    out = []
    for w in problem.workloads:
        if len(w.space.speculations) < 2:
            continue
        settings = {a.configuration.speculation for a in plan.assignments if a.workload == w.name}
        if not settings:
            continue
        pairs = "disaggregated" in w.serving
        if len(settings) > 1:
            out.append(SpeculativeChoice(w.name, "mixed", w.space.acceptance_source, None, None,
                                         pairs_without_mtp=pairs))
            continue
        [spec] = settings
        drafted = w.space.speculations[-1]
        other = "without MTP" if spec is not None else f"with {drafted.name}"
        replicas = ""
        try:
            held = replace(problem, held_speculative=problem.held_speculative + ((w.name, spec is None),))
            result = _resolve(held, catalog, cache, deadline)
            cost, note = result.usd_per_hour, ""
            replicas = " + ".join(f"{a.replicas} x ({a.config.candidate.gpus} x {a.config.candidate.gpu.name}, "
                                  f"{a.config.candidate.layout})" for a in result.assignments if a.workload == w.name)
        except OutOfTime:
            cost, note = None, f"the {deadline.limit_s:g} s time limit ran out first"
        if cost is None and not note:
            note = f"no fleet serves {w.name} {other}"
        out.append(SpeculativeChoice(w.name, spec.name if spec else "none", w.space.acceptance_source, other, cost,
                                     note, replicas if cost is not None else "", pairs))
    return tuple(out)


def _disaggregated_ttft(workload: FleetWorkload, assignments: list[Assignment]) -> tuple[float, KvTransfer]:
    """The TTFT of a disaggregated bucket at its replicas' SLO limits, from the estimator's steady states (not the
    search's figures): the slowest prefill TTFT with its transfer, plus the slowest decode share; and the slowest
    transfer. An internal error when it breaks the workload's TTFT: the plan is printed only if it holds."""
    def at_limit(a: Assignment) -> float:
        config = a.config
        state = steady_state(config.times, config.scheduler, config.shape, config.performance.requests_per_s,
                             config.role_slo or workload.slo)
        if state.limit:
            raise RuntimeError(f"internal error: {a.workload} {config.role} replica on {config.candidate.gpu.name} "
                               f"breaks its {state.limit} at its SLO limit on its re-check")
        return state.ttft_s

    prefill = [(at_limit(a) + a.config.transfer.seconds, a.config.transfer) for a in assignments
               if a.config.role == PREFILL]
    decode = max(at_limit(a) for a in assignments if a.config.role == DECODE)
    ttft = max(t for t, _ in prefill) + decode
    if ttft > workload.slo.ttft_s * (1 + TOLERANCE):
        raise RuntimeError(f"internal error: {workload.name}: disaggregated TTFT {ttft:.3f} s breaks the SLO's "
                           f"{workload.slo.ttft_s} s on its re-check")
    return ttft, max((t for _, t in prefill), key=lambda t: t.seconds)


def _speed_basis(problem: FleetProblem, plan: FleetPlan) -> tuple[str, ...]:
    """What each assignment's speed rests on besides the catalog's constants: whether a scenario's calibration file
    scaled it (its GPU generation x engine), on the configuration its runs ran or by extrapolation to another, or not,
    and the fused-MoE kernel the scenario tells the engine to run."""
    by_name = {w.name: w for w in problem.workloads}
    lines = []
    for a in plan.assignments:
        workload, candidate = by_name[a.workload], a.config.candidate
        gpu, kernel = candidate.gpu, candidate.configuration.engine.moe_kernel
        coverage = workload.calibration_coverage(candidate, a.config.role)
        if coverage is not None:
            lines.append(f"{a.workload}: {gpu.name}: {coverage.describe()}")
        if kernel is not None:
            lines.append(f"{a.workload}: {gpu.name}: MoE on the {kernel} kernel (engine.moe_kernel)")
    return tuple(dict.fromkeys(lines))


def _left_out(problem: FleetProblem, plan: FleetPlan, cache: ServingCache, most: int = 3) -> tuple[str, ...]:
    """Per workload, the `most` GPU types rented for less per GPU-hour than the dearest the fleet pays that can serve
    none of its traffic, and why: what a reader asks first when a dearer card wins. The nearest in price first
    (the cards a reader expected to win, not the smallest ones)."""
    if not plan.pools:
        return ()
    dearest = max(u.pool.offer.price(u.pool.market) / u.pool.offer.gpus for u in plan.pools)
    out = []
    for w in problem.workloads:
        pools: dict[str, list[Pool]] = {}
        for offer, market in w.space.offers:
            if offer.price(market) is not None:
                pools.setdefault(offer.gpu, []).append(Pool(offer, market))
        cheaper = sorted(((min(p.offer.price(p.market) / p.offer.gpus for p in group), gpu)
                          for gpu, group in pools.items()), reverse=True)
        listed = 0
        for usd, gpu in cheaper:
            if listed == most:
                break
            if usd >= dearest:
                continue
            why = _why_not(w, gpu, pools[gpu], cache)
            if why:
                out.append(f"{w.name}: {gpu} (from ${usd:,.2f}/GPU-hour): {why}")
                listed += 1
    return tuple(out)


def _why_not(workload: FleetWorkload, gpu: str, pools: list[Pool], cache: ServingCache) -> str | None:
    """Why no replica of `workload` runs on `gpu`'s pools; None when one could (CP-SAT found it dearer). Layouts its
    instances can hold come first: their reason (the SLO, or the estimator's) is the one a reader needs."""
    def held(gpus: int, node_group: int) -> bool:
        return any(footprint(gpus, node_group, p.offer.gpus) is not None for p in pools)

    configs = [c for c in cache.configs(workload) if c.candidate.gpu.name == gpu]
    if any(_fits_pool(c, p) for c in configs for p in pools):
        return None
    search = cache.search(workload)
    layouts = [layout.candidate for layout in search.layouts if layout.candidate.gpu.name == gpu]
    rejections = [r for r in search.rejections if r.gpu == gpu]
    if any(held(c.gpus, c.node_group) for c in layouts):
        sizes = sorted({c.gpus for c in layouts if held(c.gpus, c.node_group)})
        return f"its layouts of {'/'.join(map(str, sizes))} GPUs miss the SLO, even serving one request at a time"
    closest = min((r for r in rejections if held(r.configuration.gpus, r.node_group)),
                  key=lambda r: r.overshoot, default=None)
    if closest is not None:
        return f"{closest.configuration.gpus} GPU(s) per replica: {closest.reason}"
    if layouts:
        sizes = sorted({c.gpus for c in layouts})
        return (f"only layouts of {'/'.join(map(str, sizes))} GPUs hold one request, which its "
                f"{max(p.offer.gpus for p in pools)}-GPU instances cannot (planner.plan.rental)")
    closest = min(rejections, key=lambda r: r.overshoot, default=None)
    if closest is not None:
        return closest.reason
    return next((s.split(": ", 1)[1] for s in search.skipped if s.startswith(f"{gpu}: ")), "no layout was searched")


def _read(problem: FleetProblem, built: _Built, solver: cp_model.CpSolver, configs: list[ServingConfig],
          pools: list[Pool], catalog: Catalog, status: str, started: float, unmet: tuple[str, ...]) -> FleetPlan:
    by_name = {w.name: w for w in problem.workloads}
    chosen = [(configs[ci], pools[pi], solver.value(var)) for (ci, pi), var in built.replicas.items()
              if solver.value(var)]
    loads = _expected_loads(problem.workloads, [(c.workload, c.bucket, c, n) for c, _, n in chosen])
    assignments = []
    for (config, pool, n), (share, rps) in zip(chosen, loads):
        memory = recheck(config.candidate, by_name[config.workload].space, catalog)
        if memory.gpu is None or not memory.gpu.fits:
            raise RuntimeError(f"internal error: fleet configuration on {config.candidate.gpu.name} failed its re-check")
        assignments.append(Assignment(config.workload, config.bucket, config, pool, n, memory, share, rps,
                                      by_name[config.workload].slo, available=problem.available(pool),
                                      model_precision=by_name[config.workload].space.model_precision))
    uses = []
    for pi, var in built.instances.items():
        if solver.value(var):
            served = [a for a in assignments if a.pool == pools[pi]]
            gpus = sum(a.replicas * a.config.candidate.gpus for a in served)
            limit = min((by_name[a.workload].space.max_price_age_days for a in served),
                        default=min(w.space.max_price_age_days for w in problem.workloads))
            uses.append(PoolUse(pools[pi], solver.value(var), gpus,
                                price_age(pools[pi].offer, pools[pi].market, limit),
                                _spot_risk(problem, pools[pi], served) if pools[pi].market == "spot" else None))
    cost = sum(u.usd_per_hour for u in uses)
    bound = solver.best_objective_bound
    objective = solver.objective_value
    gap = 0.0 if status == OPTIMAL or not objective else max(0.0, (objective - bound) / objective)
    return FleetPlan(
        status=status, gap=gap, solve_seconds=time.perf_counter() - started, usd_per_hour=round(cost, 4),
        token_costs=TokenCosts.of(cost, problem.workloads),
        hosted=hosted_costs(problem.workloads, tuple(assignments), tuple(uses), catalog),
        assignments=tuple(sorted(assignments, key=lambda a: (a.workload, a.bucket, a.pool.label))),
        pools=tuple(sorted(uses, key=lambda u: u.pool.label)), unmet=unmet, binding=(),
        configurations=len(configs), variables=len(built.replicas) + len(built.instances),
    )


def _spot_risk(problem: FleetProblem, pool: Pool, served: list[Assignment]) -> SpotRisk:
    """A spot pool's interruption assumption, its expected loss, and the on-demand offer (of those every workload it
    serves may rent) that would replace it."""
    by_name = {w.name: w for w in problem.workloads}
    allowed = [set(by_name[name].on_demand_offers) for name in dict.fromkeys(a.workload for a in served)]
    offers = [o for o in by_name[served[0].workload].on_demand_offers if all(o in a for a in allowed)] if served else []
    replacement = fallback(((a.replicas, a.config.candidate.gpus, a.config.candidate.node_group) for a in served),
                           pool.offer.gpu, offers)
    spot = problem.spot
    unavailable = spot.unavailable(pool.offer) if spot else None
    lost = None if unavailable is None else sum(a.replicas * a.config.capacity_rps for a in served) * unavailable
    return SpotRisk(spot.rate(pool.offer) if spot else None, spot.replace_minutes if spot else 0.0, unavailable, lost,
                    replacement)


def _unmet_plan(problem: FleetProblem, configs: list[ServingConfig], pools: list[Pool], catalog: Catalog,
                started: float, status: str, deadline: Deadline) -> FleetPlan:
    """No fleet meets every demand: serve what can be served and name what is left and why."""
    unmet: list[str] = []
    served = {(c.workload, c.bucket) for c in configs}
    for w in problem.workloads:
        for b, _bucket in enumerate(w.buckets):
            if (w.name, b) not in served:
                why = "no configuration fits in memory and meets the SLO" + (
                    f" (ttft <= {w.slo.ttft_s} s, tpot <= {w.slo.tpot_s} s)" if w.slo.ttft_s or w.slo.tpot_s else ""
                ) + unserved_reason(w, catalog)
                unmet.append(f"{w.name} bucket {b}: {why}")
    relaxed = _build(problem, configs, pools, allow_unmet=True)
    solver, status2 = _least_unmet(relaxed, deadline)
    if solved(status2):
        for (name, b), var in relaxed.slack.items():
            short = solver.value(var) / CAPACITY_UNITS_PER_RPS
            if short > 0 and not any(u.startswith(f"{name} bucket {b}:") for u in unmet):
                full = [q.label for q in problem.quotas if _quota_full(q, relaxed, solver, pools)]
                rules = "redundancy and fleet.survive rules" if problem.survive else "redundancy rules"
                unmet.append(f"{name} bucket {b}: {short:,.3f} req/s unserved; blocked by "
                             + (", ".join(full) if full else f"the allowed pools and {rules}"))
        plan = _read(problem, relaxed, solver, configs, pools, catalog, INFEASIBLE, started, tuple(unmet))
        return replace(plan, usd_per_hour=None, token_costs=None, hosted=())
    return FleetPlan(INFEASIBLE, 0.0, time.perf_counter() - started, None, None, (), (), tuple(unmet), (),
                     len(configs), 0)


def _least_unmet(relaxed: _Built, deadline: Deadline) -> tuple[cp_model.CpSolver, int]:
    """The least unserved demand, then the cheapest fleet serving the rest (both phases within the deadline)."""
    solver, status = _solve(relaxed, deadline.remaining_s())
    if not solved(status):
        return solver, status
    relaxed.model.add(sum(relaxed.slack.values()) <= round(solver.objective_value))
    relaxed.model.minimize(relaxed.cost)
    cheapest, status2 = _solve(relaxed, deadline.remaining_s())
    return (cheapest, status2) if solved(status2) else (solver, status)


def _quota_full(quota: Quota, built: _Built, solver: cp_model.CpSolver, pools: list[Pool]) -> bool:
    used = sum(solver.value(var) * pools[pi].offer.gpus for pi, var in built.instances.items()
               if quota.covers(pools[pi].offer))
    return used + min((p.offer.gpus for p in pools if quota.covers(p.offer)), default=1) > quota.max_gpus


def _binding(problem: FleetProblem, plan: FleetPlan, catalog: Catalog, cache: ServingCache,
             deadline: Deadline) -> tuple[str, ...]:
    """Which limits bind, and what one more unit of each would save (a re-solve per binding quota and SLO, each
    within what is left of the deadline); a limit whose change moves no cost is not listed."""
    out = []
    try:
        for i, quota in enumerate(problem.quotas):
            used = sum(u.instances * u.pool.offer.gpus for u in plan.pools if quota.covers(u.pool.offer))
            smallest = min((u.pool.offer.gpus for u in plan.pools if quota.covers(u.pool.offer)), default=None)
            if smallest is None or used + smallest <= quota.max_gpus:
                continue
            more = list(problem.quotas)
            more[i] = replace(quota, max_gpus=quota.max_gpus + smallest)
            relaxed = _resolve(replace(problem, quotas=tuple(more)), catalog, cache, deadline)
            saving = (plan.usd_per_hour or 0) - (relaxed.usd_per_hour or plan.usd_per_hour or 0)
            if _moves(saving):
                out.append(f"{quota.label} is used up ({used} GPUs): {smallest} more would save ${saving:,.2f}/hour")
        for w in problem.workloads:
            if w.slo.tpot_s or w.slo.ttft_s:
                tighter = replace(w, slo=replace(w.slo, ttft_s=w.slo.ttft_s and w.slo.ttft_s * 0.8,
                                                 tpot_s=w.slo.tpot_s and w.slo.tpot_s * 0.8))
                variant = replace(problem, workloads=tuple(tighter if x is w else x for x in problem.workloads))
                result = _resolve(variant, catalog, cache, deadline)
                if result.usd_per_hour is None:
                    out.append(f"{w.name}: an SLO 20% tighter cannot be met with these pools")
                elif _moves(change := result.usd_per_hour - (plan.usd_per_hour or 0)):
                    out.append(f"{w.name}: an SLO 20% tighter costs ${change:+,.2f}/hour")
        for rule, without in ((f"surviving the loss of any one {problem.survive} (fleet.survive)",
                               replace(problem, survive=None) if problem.survive else None),
                              ("counting the expected spot interruptions (fleet.spot)",
                               replace(problem, spot=None) if problem.spot else None)):
            if without is not None:
                result = _resolve(without, catalog, cache, deadline)
                change = (plan.usd_per_hour or 0) - (result.usd_per_hour or plan.usd_per_hour or 0)
                if change > 0 and _moves(change):  # a variant cut short may cost more: no saving to report
                    out.append(f"{rule} costs +${change:,.2f}/hour")
    except OutOfTime:
        out.append(f"(the {deadline.limit_s:g} s time limit ran out before every limit was explained; raise "
                   "--time-limit for the rest)")
    return tuple(out)


def _moves(usd_per_hour: float) -> bool:
    """A change of cost a binding line reports: one that prints as more than $0.00/hour (a limit that does not move
    the cost does not bind)."""
    return round(abs(usd_per_hour), 2) > 0


def _resolve(problem: FleetProblem, catalog: Catalog, cache: ServingCache, deadline: Deadline) -> FleetPlan:
    """A variant solved within what is left of the deadline; OutOfTime when it cannot be solved in it."""
    result = _plan_fleet(problem, catalog, False, cache, deadline)
    if deadline.expired():
        raise fleet_out_of_time(deadline, "a variant")
    return result


# --------------------------------------------------------------------------------------------
# Scenario -> fleet problem


def fleet_problem(scenario: Scenario, catalog: Catalog, time_limit_s: float | None = None,
                  calibration: Calibration | None = None) -> FleetProblem:
    """The scenario's workloads (one, or the `workloads:` list) with their traffic, SLOs and the shared quotas;
    `calibration`: in place of the scenario's calibration: file."""
    calibration = calibration or _calibration(scenario)
    workloads = []
    for name, part in scenario.fleet_parts():
        traffic = part.workload.traffic
        if traffic is None:
            raise PlannerInputError(f"{name}: workload.traffic is needed to size a fleet (requests_per_s or "
                                    "output_tokens_per_s, with prompt_tokens and output_tokens)")
        space = build_search_space(part, catalog)
        buckets = tuple(Bucket(traffic.total_requests_per_s * share, prompt, output, traffic.shared_prefix_tokens)
                        for share, prompt, output in traffic.shapes())
        slo = part.workload.slo
        engine = "vllm" if part.engine.name == "simple" else part.engine.name
        serving = tuple(part.search.serving)
        check_workload(name, engine, serving, Slo(slo.ttft_s, slo.tpot_s) if slo else Slo())
        workloads.append(FleetWorkload(
            name=name, space=space, buckets=buckets, slo=Slo(slo.ttft_s, slo.tpot_s, slo.percentile) if slo else Slo(),
            utilisation=part.workload.utilisation, redundancy=part.workload.redundancy,
            min_replicas=part.workload.min_replicas, max_configs=part.workload.max_configs,
            engine=engine, engine_version=part.engine.version,
            calibration=calibration, on_demand_offers=_on_demand_offers(part, catalog), serving=serving))
    fleet = scenario.fleet
    quotas = tuple(_quota(q, i, catalog) for i, q in enumerate(fleet.quotas)) if fleet else ()
    if fleet and fleet.survive:
        for w in workloads:
            _survivable(w, fleet.survive)
    return FleetProblem(tuple(workloads), quotas, fleet.on_demand_share if fleet else None,
                        time_limit_s if time_limit_s is not None else scenario.solver.time_limit_s,
                        _spot_rates(fleet, catalog) if fleet and fleet.spot else None, fleet.survive if fleet else None)


def _on_demand_offers(part: Scenario, catalog: Catalog) -> tuple[Offer, ...]:
    """The pay-as-you-go on-demand offers a workload's pricing allows, whatever its market (none for an on-demand
    workload: it rents no spot pool to fall back from)."""
    if part.pricing.market == "on-demand":
        return ()
    pricing = part.pricing.model_copy(update={"market": "on-demand", "terms": []})
    return tuple(offer for offer, _ in build_search_space(part.model_copy(update={"pricing": pricing}), catalog).offers)


def _spot_rates(fleet: FleetSpec, catalog: Catalog) -> SpotRates:
    """fleet.spot with its providers spelt as the catalog's spot offers spell them."""
    rates = fleet.spot.interruption_rate
    if not isinstance(rates, dict):
        return SpotRates(fleet.replace_minutes, rates)
    spot = {o.provider for o in catalog.offers if o.spot_usd_per_hour is not None}
    where = "fleet.spot.interruption_rate"
    return SpotRates(fleet.replace_minutes, None, tuple(
        (_known(name, spot, f"{where}.{name}", "spot offer"), rate) for name, rate in rates.items()))


def _survivable(workload: FleetWorkload, survive: Survive) -> None:
    """A one-line error when every offer a workload may rent is in one zone: no fleet survives losing it."""
    zones = {zone(offer, survive) for offer, _ in workload.space.offers}
    if len(zones) == 1:
        raise PlannerInputError(
            f"fleet.survive: {survive}: every offer {workload.name} may rent is in {survive} {zones.pop()}, so no fleet "
            f"survives losing it (infeasible); allow offers in other {survive}s (pricing.providers, pricing.regions) "
            "or remove fleet.survive")


def _calibration(scenario: Scenario) -> Calibration | None:
    """The scenario's `calibration:` file, read relative to the scenario's folder."""
    if scenario.calibration is None:
        return None
    from planner.calibration.calibrate import load_calibration

    path = Path(scenario.calibration)
    if not path.is_absolute() and scenario.base_dir is not None:
        path = scenario.base_dir / path
    return load_calibration(path)


def _quota(spec: QuotaSpec, index: int, catalog: Catalog) -> Quota:
    """A quota whose names are the catalog's: a GPU, provider or region it does not know would cover nothing."""
    where = f"fleet.quotas[{index}]"
    try:
        gpu = catalog.gpus.get(spec.gpu).name if spec.gpu is not None else None
    except PlannerInputError as exc:
        raise PlannerInputError(f"{where}.gpu: {exc}") from None
    provider = _known(spec.provider, {o.provider for o in catalog.offers}, f"{where}.provider")
    region = _known(spec.region, {o.region for o in catalog.offers}, f"{where}.region")
    quota = Quota(spec.max_gpus, provider, region, gpu)
    if not any(quota.covers(offer) for offer in catalog.offers):
        parts = ", ".join(f"{k} {v}" for k, v in (("provider", provider), ("region", region), ("gpu", gpu)) if v)
        raise PlannerInputError(f"{where}: no offer in the price catalog has {parts}: the quota would limit nothing; "
                                "fix the names or remove it")
    return quota


def _known(name: str | None, names: set[str], where: str, what: str = "offer") -> str | None:
    """`name` as the catalog spells it (case aside), or a one-line error with the closest names."""
    if name is None:
        return None
    by_lower = {n.lower(): n for n in names}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    import difflib  # only for a name not found: every solve would pay its import

    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3)
    hint = f"; did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
    raise PlannerInputError(f"{where}: {name!r} is in no {what} of the price catalog{hint}")
