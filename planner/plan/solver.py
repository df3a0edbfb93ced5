"""Candidates -> CP-SAT model -> solution -> Plan dataclasses. CP-SAT objects never leave this module.

The model: one Boolean per (candidate configuration, rental) pair; exactly one is chosen.
Phase 1 minimizes $/hour. Phase 2 keeps that cost and maximizes a preference score: larger
context, then more concurrency, then more headroom, then fewer GPUs; the pair's index breaks
the last ties so the same scenario always gives the same plan.

Why not the fleet model (fleet.py) with a fixed replica count and no traffic: a single-configuration
plan runs every replica on one configuration and one rentable shape, so the fleet model would need a
Boolean per (configuration, pool) to force a single pair on top of its integer replica and instance
variables: the same exactly-one choice with two more variables per pair, and a second phase it does
not have. The two models share everything but the choice: the candidate search (search.py), the
configuration (configuration.py), the rental rule (rental.py), the re-check, the statuses (status.py).
Their explanations answer different questions: without traffic there are no quotas or SLOs to bind,
and with traffic a fleet has no single "next cheapest GPU type" to list.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from planner.plan.cpsat import cp_model

from planner.catalog.load import Catalog
from planner.catalog.prices import PriceAge, price_age, price_terms
from planner.errors import PlannerInputError
from planner.estimator.layout import node_gpus
from planner.estimator.memory import MemoryEstimate
from planner.plan.configuration import Configuration, ConfiguredBy
from planner.plan.deadline import Deadline
from planner.plan.infeasible import Infeasibility, explain_infeasible
from planner.plan.rental import COST_UNITS_PER_USD, Rental
from planner.plan.scenario import Scenario
from planner.plan.search import (Candidate, Enumeration, Rejection, SearchSpace, TooSlow, build_search_space,
                                 enumerate_candidates, full_context_step_s, recheck, rentals_for)
from planner.plan.status import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, solved, status_name


@dataclass(frozen=True)
class PlanOption(ConfiguredBy):
    configuration: Configuration
    gpu_display: str
    nodes_per_replica: int
    replicas: int
    provider: str
    instance: str
    region: str
    market: str
    price_kind: str  # catalogs/prices.yaml's kind of the price paid: list, marketplace or quote
    price_term: str | None  # the commitment the price binds to (1m, 1y, 3y); None: pay as you go
    gpus_per_instance: int
    instances: int
    replicas_per_instance: int
    idle_gpus: int
    usd_per_hour: float
    price_as_of: str
    price_source: str
    sharing: str
    headroom_bytes: int
    memory: MemoryEstimate  # the estimator's re-check on this GPU
    price_age: PriceAge  # how old the price is, and whether past the scenario's pricing.max_price_age_days
    # one decode step of `concurrency` requests that each hold the whole context (the speed model's worst steady
    # step for this configuration): what a plan without traffic can say of its speed
    full_context_step_s: float

    @property
    def gpu(self) -> str:
        return self.configuration.gpu

    @property
    def full_context_output_tokens_per_s(self) -> float:
        """Output tokens/s of every replica together, each running `concurrency` requests at the full context."""
        return self.replicas * self.concurrency / self.full_context_step_s

    @property
    def usd_per_million_output_tokens(self) -> float:
        """At that speed, busy all hour: the cost per hour over the output tokens per hour."""
        return self.usd_per_hour / (self.full_context_output_tokens_per_s * 3600) * 1e6

    @property
    def price_terms(self) -> str:
        """The market and the kind of the price paid, as plans print it."""
        return price_terms(self.market, self.price_kind, self.price_term)

    @property
    def usd_per_replica_hour(self) -> float:
        return self.usd_per_hour / self.replicas


@dataclass(frozen=True)
class SolveResult:
    scenario: str
    model: str
    model_id: str  # the Hugging Face id (or config path) an engine loads
    model_precision: str | None  # the precision the checkpoint ships in (None for a size-only model)
    status: str
    gap: float
    solve_seconds: float
    time_limit_s: float
    configurations_checked: int
    candidates: int
    variables: int
    best: PlanOption | None
    alternatives: tuple[PlanOption, ...]
    rejected_cheaper: tuple[Rejection, ...]
    infeasible: Infeasibility | None
    skipped: tuple[str, ...]
    search_cut_short: str | None = None  # the time limit stopped the candidate search: the plan is the best found
    # configurations left out below workload.min_tokens_per_s: the fastest of each GPU type at most the plan's price
    too_slow: tuple[TooSlow, ...] = ()
    # with search.speculative listing both: the best plan with the other setting (with MTP when the plan runs without,
    # and the other way round), and where the MTP setting's acceptance length comes from
    speculative_alternative: PlanOption | None = None
    acceptance_source: str | None = None
    speculative_compared: bool = False  # search.speculative listed both none and mtp
    # with search.layouts listing tp and dp_ep: the best plan in the other family (TP x PP when the plan runs data-parallel
    # attention or expert parallelism, and the other way round); None when none fits or only one family was searched
    layout_alternative: PlanOption | None = None
    layouts_compared: bool = False

    def rows(self) -> list[dict[str, Any]]:
        """The best plan and the alternatives as flat records."""
        rows = [plan_row("best", self.best)] if self.best else []
        return rows + [plan_row(i, p) for i, p in enumerate(self.alternatives, start=1)]

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows())


def plan_row(rank: int | str, p: PlanOption) -> dict[str, Any]:
    """One plan as a flat record (CSV rows, DataFrames)."""
    fullest = max(p.memory.per_gpu, key=lambda r: r.total_bytes)
    return {
        "rank": rank, "gpu": p.gpu, "gpus_per_replica": p.gpus_per_replica, "tp": p.tp, "pp": p.pp,
        "dp": p.configuration.dp, "ep": p.configuration.ep, "all_to_all": p.configuration.all_to_all,
        "speculative": p.configuration.speculation.name if p.configuration.speculation else None,
        "nodes_per_replica": p.nodes_per_replica, "precision": p.precision, "kv_dtype": p.kv_dtype,
        "context": p.context, "concurrency": p.concurrency, "replicas": p.replicas, "provider": p.provider,
        "instance": p.instance, "region": p.region, "market": p.market, "price_kind": p.price_kind, "price_term": p.price_term,
        "gpus_per_instance": p.gpus_per_instance,
        "instances": p.instances, "usd_per_hour": p.usd_per_hour, "usd_per_replica_hour": round(p.usd_per_replica_hour, 4),
        "per_gpu_weights_bytes": fullest.weights_bytes, "per_gpu_kv_cache_bytes": fullest.kv_cache_bytes,
        "per_gpu_overhead_bytes": fullest.overhead_bytes, "per_gpu_total_bytes": fullest.total_bytes,
        "gpu_memory_bytes": p.memory.gpu.memory_bytes if p.memory.gpu else None, "headroom_bytes": p.headroom_bytes,
        "sharing": p.sharing, "price_as_of": p.price_as_of, "price_source": p.price_source,
        "price_age_days": p.price_age.age_days, "price_stale": p.price_age.stale,
        "full_context_tpot_s": round(p.full_context_step_s, 6),
        "full_context_output_tokens_per_s": round(p.full_context_output_tokens_per_s, 2),
        "usd_per_million_output_tokens": round(p.usd_per_million_output_tokens, 4),
    }


@dataclass(frozen=True)
class Pair:
    candidate: Candidate
    rental: Rental


@dataclass(frozen=True)
class _Solution:
    status: str
    pair: Pair | None
    gap: float


# --------------------------------------------------------------------------------------------
# Building, solving, reading back


def preference(pair: Pair, space: SearchSpace, slower: frozenset[Configuration] = frozenset()) -> int:
    """Larger context, then more concurrency, then the faster speculative setting (not in `slower`), then more
    headroom, then fewer GPUs."""
    c = pair.candidate
    context_rank = space.contexts.index(c.context)
    concurrency_rank = space.concurrencies.index(c.concurrency)
    faster = c.configuration not in slower
    headroom_permille = max(0, c.headroom_bytes * 1000 // c.gpu.memory_bytes)
    fewer_gpus = max(0, 4095 - c.gpus)
    return ((((context_rank * 100 + concurrency_rank) * 2 + faster) * 1001 + headroom_permille) * 4096 + fewer_gpus)


def slower_speculative(candidates: tuple[Candidate, ...], space: SearchSpace, catalog: Catalog
                       ) -> frozenset[Configuration]:
    """The configurations another speculative setting of the same GPUs, layout, precision, KV dtype, context and
    concurrency outruns at the full context (full_context_step_s): the plan runs the faster of the two on the GPUs it
    rents at the same price. Empty unless search.speculative lists both settings."""
    if len(space.speculations) < 2:
        return frozenset()
    by_point: dict[tuple, list[tuple[float, Configuration]]] = {}
    for c in candidates:
        k = c.configuration
        point = (c.gpu.name, k.tp, k.pp, k.dp, k.ep, k.all_to_all, k.precision, k.kv_dtype, k.context, k.concurrency)
        by_point.setdefault(point, []).append((full_context_step_s(c, space, catalog), k))
    return frozenset(k for timed in by_point.values() for step_s, k in timed if step_s > min(s for s, _ in timed))


def _build(pairs: list[Pair]) -> tuple[cp_model.CpModel, list[cp_model.IntVar], cp_model.LinearExpr]:
    model = cp_model.CpModel()
    chosen = [model.new_bool_var(f"pair_{i}") for i in range(len(pairs))]
    model.add_exactly_one(chosen)
    cost = cp_model.LinearExpr.weighted_sum(chosen, [p.rental.cost_units for p in pairs])
    return model, chosen, cost


def _solve(pairs: list[Pair], space: SearchSpace, deadline: float,
           slower: frozenset[Configuration] = frozenset()) -> _Solution:
    """Both phases within one deadline (time.perf_counter()). The cheapest pair is given to CP-SAT as a hint;
    if the deadline ends the search before CP-SAT reports a solution, that hinted pair is the answer,
    FEASIBLE with no bound proven (gap 100%)."""
    if not pairs:
        return _Solution(INFEASIBLE, None, 0.0)
    model, chosen, cost = _build(pairs)
    model.minimize(cost)
    cheapest = min(range(len(pairs)), key=lambda i: pairs[i].rental.cost_units)
    for i, var in enumerate(chosen):
        model.add_hint(var, i == cheapest)
    status, solver = _run(model, deadline)
    if status in (cp_model.INFEASIBLE, cp_model.MODEL_INVALID):
        return _Solution(status_name(status), None, 0.0)
    if not solved(status):
        return _Solution(FEASIBLE, pairs[cheapest], 1.0)
    best_cost = round(solver.objective_value)
    gap = 0.0 if status == cp_model.OPTIMAL else (best_cost - solver.best_objective_bound) / max(best_cost, 1)
    index = next(i for i, var in enumerate(chosen) if solver.boolean_value(var))
    # phase 2: at that cost, the preferred configuration
    model.add(cost <= best_cost)
    n = len(pairs)
    model.maximize(cp_model.LinearExpr.weighted_sum(
        chosen, [preference(p, space, slower) * n + (n - 1 - i) for i, p in enumerate(pairs)]))
    model.clear_hints()
    for i, var in enumerate(chosen):
        model.add_hint(var, i == index)
    status2, second = _run(model, deadline)
    if solved(status2):
        index = next(i for i, var in enumerate(chosen) if second.boolean_value(var))
    return _Solution(status_name(status), pairs[index], gap)


def _run(model: cp_model.CpModel, deadline: float) -> tuple[int, cp_model.CpSolver]:
    solver = cp_model.CpSolver()
    budget = deadline - time.perf_counter()
    if budget <= 0:  # the search before it spent the limit: no call, the caller keeps its hinted answer
        return cp_model.UNKNOWN, solver
    solver.parameters.max_time_in_seconds = budget
    solver.parameters.num_workers = 2
    return solver.solve(model), solver


def _ordered(pairs: list[Pair]) -> list[Pair]:
    """A fixed order by names, so the index tie-break never depends on how the scenario lists things."""
    def key(p: Pair) -> tuple:
        c, r = p.candidate, p.rental
        # among layouts alike in price and fit, the widest expert parallelism first: whole experts on each GPU, as
        # the engines deal them with data-parallel attention (SGLang's all-to-all backends set ep = tp)
        return (c.gpu.name, c.precision, c.kv_dtype, c.tp, c.pp, c.configuration.dp, -c.configuration.ep,
                c.configuration.all_to_all or "", c.configuration.speculation is not None, c.context, c.concurrency,
                r.offer.provider, r.offer.instance, r.offer.region, r.market, r.offer.term or "")
    return sorted(pairs, key=key)


def read_plan(pair: Pair, space: SearchSpace, catalog: Catalog) -> PlanOption | None:
    c, r = pair.candidate, pair.rental
    memory = recheck(c, space, catalog)
    if memory.gpu is None or not memory.gpu.fits:
        return None  # never print a plan the estimator does not confirm
    nodes = max(1, -(-c.gpus // min(node_gpus(c.gpu, space.max_gpus_per_node), r.offer.gpus)))
    if r.replicas_per_instance == 0:
        across = ("pipeline stages across nodes" if c.configuration.parallel.node_group == c.tp else
                  f"its tp {c.tp} group across nodes, attention TP {c.configuration.parallel.node_group} within one")
        sharing = f"each replica spans {r.instances // space.replicas} x {r.offer.gpus}-GPU {r.offer.instance} ({across})"
    elif r.replicas_per_instance > 1 and space.replicas > 1:
        sharing = f"{r.replicas_per_instance} replicas share each {r.offer.gpus}-GPU {r.offer.instance}"
    elif r.idle_gpus:
        sharing = (f"replica occupies {c.gpus} of {r.offer.gpus} GPUs of {r.offer.instance}; {r.idle_gpus} idle "
                   f"(paid; {r.offer.gpus // c.gpus} replicas would share it at the same price)")
    else:
        sharing = f"replica fills {r.instances} x {r.offer.gpus}-GPU {r.offer.instance}"
    return PlanOption(
        configuration=c.configuration, gpu_display=c.gpu.display_name, nodes_per_replica=nodes, replicas=space.replicas, provider=r.offer.provider, instance=r.offer.instance,
        region=r.offer.region, market=r.market, price_kind=r.offer.kind, price_term=r.offer.term,
        gpus_per_instance=r.offer.gpus, instances=r.instances,
        replicas_per_instance=r.replicas_per_instance, idle_gpus=r.idle_gpus,
        usd_per_hour=r.cost_units / COST_UNITS_PER_USD, price_as_of=r.offer.as_of, price_source=r.offer.source,
        sharing=sharing, headroom_bytes=memory.gpu.headroom_bytes, memory=memory,
        price_age=price_age(r.offer, r.market, space.max_price_age_days),
        full_context_step_s=full_context_step_s(c, space, catalog),
    )


# --------------------------------------------------------------------------------------------
# The whole job


def solve_scenario(scenario: Scenario, catalog: Catalog, time_limit_s: float | None = None,
                   top: int | None = None, explain: bool = True, deadline: Deadline | None = None) -> SolveResult:
    """The cheapest plan; `explain` False leaves out why none fits, when none does (its relaxations re-enumerate
    the search space several times), for callers that only want the cost; `deadline`: the command's (by
    default the time limit from now)."""
    if scenario.is_fleet:
        raise PlannerInputError("this scenario has traffic: it sizes a fleet (planner.plan.fleet.plan_fleet; `planner solve` does it)")
    top = top if top is not None else scenario.solver.top
    started = time.perf_counter()
    # --time-limit bounds the search and every CP-SAT call together
    deadline = deadline or Deadline.start(time_limit_s if time_limit_s is not None else scenario.solver.time_limit_s)
    limit = deadline.limit_s
    space = build_search_space(scenario, catalog)
    enumeration = enumerate_candidates(space, catalog, deadline, cheapest_only=True)
    pairs = _ordered([Pair(c, r) for c in enumeration.candidates for r in rentals_for(c, space)])
    slower = slower_speculative(enumeration.candidates, space, catalog)
    solution = _solve(pairs, space, deadline.ends_at, slower)
    best = read_plan(solution.pair, space, catalog) if solution.pair else None
    if enumeration.cut_short and best is None:
        raise deadline.out_of_time(enumeration.cut_short, "search.gpus, search.max_gpus_per_replica, "
                                   "search.precisions or workload.context")

    alternatives: list[PlanOption] = []
    if best is not None and top > 0:
        for gpu in dict.fromkeys(p.candidate.gpu.name for p in pairs):
            if gpu == best.gpu or deadline.expired():
                continue
            option = _solve([p for p in pairs if p.candidate.gpu.name == gpu], space, deadline.ends_at, slower)
            plan = read_plan(option.pair, space, catalog) if option.pair else None
            if plan is not None:
                alternatives.append(plan)
        alternatives = sorted(alternatives, key=lambda p: (p.usd_per_hour, p.gpu))[:top]
    other = None
    if best is not None and len(space.speculations) > 1 and not deadline.expired():
        # the next best with the other speculative setting: what MTP (or going without it) would cost
        option = _solve([p for p in pairs if p.candidate.configuration.speculation != best.configuration.speculation],
                        space, deadline.ends_at, slower)
        other = read_plan(option.pair, space, catalog) if option.pair else None

    layout_other = None
    if best is not None and space.expert_parallel and not deadline.expired():
        # the best in the other layout family: what TP x PP (or DP attention and EP) would cost
        mine = best.configuration.parallel.expert_parallel
        option = _solve([p for p in pairs if p.candidate.configuration.parallel.expert_parallel != mine], space,
                        deadline.ends_at, slower)
        layout_other = read_plan(option.pair, space, catalog) if option.pair else None

    rejected = _rejected_cheaper(enumeration, best)
    infeasible = None if best is not None or not explain else explain_infeasible(scenario, space, catalog, enumeration, deadline)
    status = solution.status if best is not None else (INFEASIBLE if solution.status != UNKNOWN else UNKNOWN)
    if enumeration.cut_short and status == OPTIMAL:
        status = FEASIBLE  # optimal among the configurations searched: the best found, not proven
    return SolveResult(
        scenario=scenario.name or "scenario", model=space.arch.name, model_id=space.model_id,
        model_precision=space.model_precision,
        status=status, gap=1.0 if enumeration.cut_short else solution.gap,
        solve_seconds=time.perf_counter() - started, time_limit_s=limit,
        configurations_checked=enumeration.configurations_checked, candidates=len(enumeration.candidates),
        variables=len(pairs), best=best, alternatives=tuple(alternatives), rejected_cheaper=rejected,
        infeasible=infeasible, skipped=enumeration.skipped, search_cut_short=enumeration.cut_short,
        too_slow=_too_slow_cheaper(enumeration, best), speculative_alternative=other,
        acceptance_source=space.acceptance_source, speculative_compared=len(space.speculations) > 1,
        layout_alternative=layout_other, layouts_compared=space.expert_parallel,
    )



def _too_slow_cheaper(enumeration: Enumeration, best: PlanOption | None, limit: int = 5) -> tuple[TooSlow, ...]:
    """Configurations left out below workload.min_tokens_per_s that rent for no more than the plan (what it would
    have been without the floor): the fastest on each GPU type, cheapest first."""
    fastest: dict[str, TooSlow] = {}
    for s in enumeration.too_slow:
        if s.usd_per_hour is None or (best is not None and s.usd_per_hour > best.usd_per_hour):
            continue
        if s.gpu not in fastest or s.output_tokens_per_s > fastest[s.gpu].output_tokens_per_s:
            fastest[s.gpu] = s
    return tuple(sorted(fastest.values(), key=lambda s: (s.usd_per_hour, s.gpu))[:limit])


def _rejected_cheaper(enumeration: Enumeration, best: PlanOption | None, limit: int = 5) -> tuple[Rejection, ...]:
    """Configurations cheaper than the plan that the estimator refused: the closest miss on each GPU type."""
    closest: dict[str, Rejection] = {}
    for r in enumeration.rejections:
        if r.usd_per_hour is None or (best is not None and r.usd_per_hour >= best.usd_per_hour):
            continue
        if r.gpu not in closest or r.overshoot < closest[r.gpu].overshoot:
            closest[r.gpu] = r
    return tuple(sorted(closest.values(), key=lambda r: (r.usd_per_hour, r.gpu))[:limit])


