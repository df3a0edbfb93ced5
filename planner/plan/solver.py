"""Candidates -> CP-SAT model -> solution -> Plan dataclasses. CP-SAT objects never leave this module.

The model: one Boolean per (candidate configuration, rental) pair; exactly one is chosen.
Phase 1 minimizes $/hour. Phase 2 keeps that cost and maximizes a preference score: larger
context, then more concurrency, then more headroom, then fewer GPUs; the pair's index breaks
the last ties so the same scenario always gives the same plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from ortools.sat.python import cp_model

from planner.plan.search import (
    COST_UNITS_PER_USD,
    Candidate,
    Enumeration,
    Rejection,
    Rental,
    SearchSpace,
    build_search_space,
    enumerate_candidates,
    node_size,
    recheck,
    rentals_for,
)
from planner.catalog.load import Catalog, Offer
from planner.catalog.prices import stale_price_warning
from planner.errors import PlannerInputError
from planner.estimator.memory import MemoryEstimate
from planner.plan.scenario import Scenario
from planner.units import format_bytes

_STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
           cp_model.MODEL_INVALID: "MODEL_INVALID", cp_model.UNKNOWN: "UNKNOWN"}
RELAXED_MAX_GPUS = 64
MIN_RELAXED_CONTEXT = 1024


@dataclass(frozen=True)
class PlanOption:
    gpu: str
    gpu_display: str
    gpus_per_replica: int
    tp: int
    pp: int
    nodes_per_replica: int
    precision: str
    kv_dtype: str
    context: int
    concurrency: int
    replicas: int
    provider: str
    instance: str
    region: str
    market: str
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
    price_warnings: tuple[str, ...] = ()  # e.g. the price is older than catalog.prices.MAX_PRICE_AGE_DAYS

    @property
    def usd_per_replica_hour(self) -> float:
        return self.usd_per_hour / self.replicas


@dataclass(frozen=True)
class Infeasibility:
    reason: str
    closest: Rejection | None
    suggestions: tuple[str, ...]


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
        "nodes_per_replica": p.nodes_per_replica, "precision": p.precision, "kv_dtype": p.kv_dtype,
        "context": p.context, "concurrency": p.concurrency, "replicas": p.replicas, "provider": p.provider,
        "instance": p.instance, "region": p.region, "market": p.market, "gpus_per_instance": p.gpus_per_instance,
        "instances": p.instances, "usd_per_hour": p.usd_per_hour, "usd_per_replica_hour": round(p.usd_per_replica_hour, 4),
        "per_gpu_weights_bytes": fullest.weights_bytes, "per_gpu_kv_cache_bytes": fullest.kv_cache_bytes,
        "per_gpu_overhead_bytes": fullest.overhead_bytes, "per_gpu_total_bytes": fullest.total_bytes,
        "gpu_memory_bytes": p.memory.gpu.memory_bytes if p.memory.gpu else None, "headroom_bytes": p.headroom_bytes,
        "sharing": p.sharing, "price_as_of": p.price_as_of, "price_source": p.price_source,
    }


@dataclass(frozen=True)
class _Pair:
    candidate: Candidate
    rental: Rental


@dataclass(frozen=True)
class _Solution:
    status: str
    pair: _Pair | None
    gap: float


# --------------------------------------------------------------------------------------------
# Building, solving, reading back


def _preference(pair: _Pair, space: SearchSpace) -> int:
    c = pair.candidate
    context_rank = space.contexts.index(c.context)
    concurrency_rank = space.concurrencies.index(c.concurrency)
    headroom_permille = max(0, c.headroom_bytes * 1000 // c.gpu.memory_bytes)
    fewer_gpus = max(0, 4095 - c.gpus)
    return ((context_rank * 100 + concurrency_rank) * 1001 + headroom_permille) * 4096 + fewer_gpus


def _build(pairs: list[_Pair]) -> tuple[cp_model.CpModel, list[cp_model.IntVar], cp_model.LinearExpr]:
    model = cp_model.CpModel()
    chosen = [model.new_bool_var(f"pair_{i}") for i in range(len(pairs))]
    model.add_exactly_one(chosen)
    cost = cp_model.LinearExpr.weighted_sum(chosen, [p.rental.cost_units for p in pairs])
    return model, chosen, cost


def _solve(pairs: list[_Pair], space: SearchSpace, deadline: float) -> _Solution:
    """Both phases within one deadline (time.perf_counter()). The cheapest pair is given to CP-SAT as a hint;
    if the deadline ends the search before CP-SAT reports a solution, that hinted pair is the answer,
    FEASIBLE with no bound proven (gap 100%)."""
    if not pairs:
        return _Solution("INFEASIBLE", None, 0.0)
    model, chosen, cost = _build(pairs)
    model.minimize(cost)
    cheapest = min(range(len(pairs)), key=lambda i: pairs[i].rental.cost_units)
    for i, var in enumerate(chosen):
        model.add_hint(var, i == cheapest)
    status, solver = _run(model, deadline)
    if status == cp_model.INFEASIBLE or status == cp_model.MODEL_INVALID:
        return _Solution(_STATUS[status], None, 0.0)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _Solution("FEASIBLE", pairs[cheapest], 1.0)
    best_cost = round(solver.objective_value)
    gap = 0.0 if status == cp_model.OPTIMAL else (best_cost - solver.best_objective_bound) / max(best_cost, 1)
    index = next(i for i, var in enumerate(chosen) if solver.boolean_value(var))
    # phase 2: at that cost, the preferred configuration
    model.add(cost <= best_cost)
    n = len(pairs)
    model.maximize(cp_model.LinearExpr.weighted_sum(
        chosen, [_preference(p, space) * n + (n - 1 - i) for i, p in enumerate(pairs)]))
    model.clear_hints()
    for i, var in enumerate(chosen):
        model.add_hint(var, i == index)
    status2, second = _run(model, deadline)
    if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        index = next(i for i, var in enumerate(chosen) if second.boolean_value(var))
    return _Solution(_STATUS[status], pairs[index], gap)


def _run(model: cp_model.CpModel, deadline: float) -> tuple[int, cp_model.CpSolver]:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.0, deadline - time.perf_counter())
    solver.parameters.num_workers = 2
    return solver.solve(model), solver


def _ordered(pairs: list[_Pair]) -> list[_Pair]:
    """A fixed order by names, so the index tie-break never depends on how the scenario lists things."""
    def key(p: _Pair) -> tuple:
        c, r = p.candidate, p.rental
        return (c.gpu.name, c.precision, c.kv_dtype, c.tp, c.pp, c.context, c.concurrency,
                r.offer.provider, r.offer.instance, r.offer.region, r.market)
    return sorted(pairs, key=key)


def _read_plan(pair: _Pair, space: SearchSpace, catalog: Catalog) -> PlanOption | None:
    c, r = pair.candidate, pair.rental
    memory = recheck(c, space, catalog)
    if memory.gpu is None or not memory.gpu.fits:
        return None  # never print a plan the estimator does not confirm
    node = node_size(c.gpu, space)
    nodes = max(1, -(-c.gpus // min(node, r.offer.gpus)))
    if r.replicas_per_instance == 0:
        sharing = (f"each replica spans {r.instances // space.replicas} x {r.offer.gpus}-GPU {r.offer.instance} "
                   f"(pipeline stages across nodes)")
    elif r.replicas_per_instance > 1 and space.replicas > 1:
        sharing = f"{r.replicas_per_instance} replicas share each {r.offer.gpus}-GPU {r.offer.instance}"
    elif r.idle_gpus:
        sharing = (f"replica occupies {c.gpus} of {r.offer.gpus} GPUs of {r.offer.instance}; {r.idle_gpus} idle "
                   f"(paid; {r.offer.gpus // c.gpus} replicas would share it at the same price)")
    else:
        sharing = f"replica fills {r.instances} x {r.offer.gpus}-GPU {r.offer.instance}"
    return PlanOption(
        gpu=c.gpu.name, gpu_display=c.gpu.display_name, gpus_per_replica=c.gpus, tp=c.tp, pp=c.pp,
        nodes_per_replica=nodes, precision=c.precision, kv_dtype=c.kv_dtype, context=c.context,
        concurrency=c.concurrency, replicas=space.replicas, provider=r.offer.provider, instance=r.offer.instance,
        region=r.offer.region, market=r.market, gpus_per_instance=r.offer.gpus, instances=r.instances,
        replicas_per_instance=r.replicas_per_instance, idle_gpus=r.idle_gpus,
        usd_per_hour=r.cost_units / COST_UNITS_PER_USD, price_as_of=r.offer.as_of, price_source=r.offer.source,
        sharing=sharing, headroom_bytes=memory.gpu.headroom_bytes, memory=memory,
        price_warnings=tuple(w for w in [stale_price_warning(r.offer, r.market)] if w),
    )


# --------------------------------------------------------------------------------------------
# The whole job


def solve_scenario(scenario: Scenario, catalog: Catalog, time_limit_s: float | None = None,
                   top: int | None = None) -> SolveResult:
    if scenario.is_fleet:
        raise PlannerInputError("this scenario has traffic: it sizes a fleet (planner.plan.fleet.plan_fleet; `planner solve` does it)")
    limit = time_limit_s if time_limit_s is not None else scenario.solver.time_limit_s
    top = top if top is not None else scenario.solver.top
    started = time.perf_counter()
    space = build_search_space(scenario, catalog)
    enumeration = enumerate_candidates(space, catalog)
    pairs = _ordered([_Pair(c, r) for c in enumeration.candidates for r in rentals_for(c, space)])
    deadline = time.perf_counter() + limit  # --time-limit bounds every CP-SAT call together
    solution = _solve(pairs, space, deadline)
    best = _read_plan(solution.pair, space, catalog) if solution.pair else None

    alternatives: list[PlanOption] = []
    if best is not None and top > 0:
        for gpu in dict.fromkeys(p.candidate.gpu.name for p in pairs):
            if gpu == best.gpu or time.perf_counter() >= deadline:
                continue
            option = _solve([p for p in pairs if p.candidate.gpu.name == gpu], space, deadline)
            plan = _read_plan(option.pair, space, catalog) if option.pair else None
            if plan is not None:
                alternatives.append(plan)
        alternatives = sorted(alternatives, key=lambda p: (p.usd_per_hour, p.gpu))[:top]

    rejected = _rejected_cheaper(enumeration, best)
    infeasible = None if best is not None else explain_infeasible(scenario, space, catalog, enumeration)
    return SolveResult(
        scenario=scenario.name or "scenario", model=space.arch.name, model_id=space.model_id,
        model_precision=space.model_precision,
        status=solution.status if best is not None else ("INFEASIBLE" if solution.status != "UNKNOWN" else "UNKNOWN"),
        gap=solution.gap, solve_seconds=time.perf_counter() - started, time_limit_s=limit,
        configurations_checked=enumeration.configurations_checked, candidates=len(enumeration.candidates),
        variables=len(pairs), best=best, alternatives=tuple(alternatives), rejected_cheaper=rejected,
        infeasible=infeasible, skipped=enumeration.skipped,
    )


def compare_offers(scenario: Scenario, catalog: Catalog) -> tuple[PlanOption, ...]:
    """The cheapest configuration on each (GPU type, provider), sorted by $/hour: `planner compare`."""
    space = build_search_space(scenario, catalog)
    enumeration = enumerate_candidates(space, catalog)
    cheapest: dict[tuple[str, str], _Pair] = {}
    for c in enumeration.candidates:
        for r in rentals_for(c, space):
            key = (c.gpu.name, r.offer.provider)
            pair = _Pair(c, r)
            if key not in cheapest or (r.cost_units, -_preference(pair, space)) < (
                    cheapest[key].rental.cost_units, -_preference(cheapest[key], space)):
                cheapest[key] = pair
    plans = [plan for pair in cheapest.values() if (plan := _read_plan(pair, space, catalog)) is not None]
    return tuple(sorted(plans, key=lambda p: (p.usd_per_hour, p.gpu, p.provider)))


def _rejected_cheaper(enumeration: Enumeration, best: PlanOption | None, limit: int = 5) -> tuple[Rejection, ...]:
    """Configurations cheaper than the plan that the estimator refused: the closest miss on each GPU type."""
    closest: dict[str, Rejection] = {}
    for r in enumeration.rejections:
        if r.usd_per_hour is None or (best is not None and r.usd_per_hour >= best.usd_per_hour):
            continue
        if r.gpu not in closest or r.overshoot < closest[r.gpu].overshoot:
            closest[r.gpu] = r
    return tuple(sorted(closest.values(), key=lambda r: (r.usd_per_hour, r.gpu))[:limit])


# --------------------------------------------------------------------------------------------
# Explaining an infeasible scenario


def explain_infeasible(scenario: Scenario, space: SearchSpace, catalog: Catalog,
                       enumeration: Enumeration) -> Infeasibility:
    if not space.offers:
        market = scenario.pricing.market
        return Infeasibility(
            f"no rentable offer for the allowed GPUs ({', '.join(g.name for g in space.gpus) or 'none'}) "
            f"with the pricing filters (market {market}, providers {scenario.pricing.providers or 'all'}, "
            f"regions {scenario.pricing.regions or 'all'})", None,
            ("widen pricing.providers / pricing.regions, set pricing.market: any, or allow more search.gpus",))
    closest = min(enumeration.rejections, key=lambda r: r.overshoot, default=None)
    if closest is None:
        return Infeasibility("no configuration could be formed: " + "; ".join(enumeration.skipped), None,
                             ("set search.allow_emulated: true or allow other precisions",))
    largest = max(space.gpus, key=lambda g: g.memory_bytes)
    reason = (f"the closest configuration ({closest.gpu} x {closest.tp * closest.pp}, tp {closest.tp} pp {closest.pp}, "
              f"{closest.precision}, KV {closest.kv_dtype}, context {closest.context:,} x {closest.concurrency}) needs "
              f"{format_bytes(closest.needed_bytes)} per GPU; {closest.gpu} holds {format_bytes(closest.card_bytes)} "
              f"(largest allowed card: {largest.name}, {format_bytes(largest.memory_bytes)})")
    return Infeasibility(reason, closest, tuple(_relaxations(space, catalog)))


def _relaxations(space: SearchSpace, catalog: Catalog) -> list[str]:
    """One change at a time that would make the scenario feasible, with its cheapest $/hour."""
    tries: list[tuple[str, str, SearchSpace]] = []  # (kind, what to change, the relaxed space)
    gpus = space.max_gpus_per_replica * 2
    while gpus <= RELAXED_MAX_GPUS:
        tries.append(("gpus", f"allow {gpus} GPUs per replica (search.max_gpus_per_replica: {gpus})",
                      replace(space, max_gpus_per_replica=gpus)))
        gpus *= 2
    lossy = [p for p in catalog.precisions if p.serving_default and p not in space.precisions
             and not (p.scope == "experts" and space.arch.moe is None)]
    for p in sorted(lossy, key=lambda p: p.bits, reverse=True):
        tries.append(("precision", f"allow {p.name} ({p.quality}) in search.precisions",
                      replace(space, precisions=(*space.precisions, p))))
    if "fp8" not in space.kv_dtypes:
        tries.append(("kv", "an fp8 KV cache (search.kv_dtypes: [fp8])", replace(space, kv_dtypes=("fp8",))))
    context = space.contexts[0] // 2
    while context >= MIN_RELAXED_CONTEXT:
        tries.append(("context", f"a context of {context:,} tokens", replace(space, contexts=(context,))))
        context //= 2
    if space.concurrencies[0] > 1:
        tries.append(("concurrency", "concurrency 1", replace(space, concurrencies=(1,))))
    if not space.allow_emulated:
        tries.append(("emulated", "search.allow_emulated: true", replace(space, allow_emulated=True)))

    found: list[str] = []
    solved_kinds: set[str] = set()
    for kind, label, relaxed in tries:
        if kind in solved_kinds:
            continue  # the smallest step of each kind is enough
        try:
            result = enumerate_candidates(relaxed, catalog)
        except PlannerInputError:  # the relaxed space is too large to enumerate: not a suggestion to make
            continue
        costs = [r.usd_per_hour for c in result.candidates for r in rentals_for(c, relaxed)]
        if costs:
            found.append(f"{label}: cheapest ${min(costs):,.2f}/hour")
            solved_kinds.add(kind)
    return found or ["no single change fits: consider a smaller model"]


# --------------------------------------------------------------------------------------------
# A review: the plan, what binds it, and how its cost moves (`planner report`)

CONTEXT_SWEEP = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
CONCURRENCY_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Review:
    result: SolveResult
    context_costs: tuple[tuple[int, float | None], ...]  # (context, cheapest $/hour or None)
    concurrency_costs: tuple[tuple[int, float | None], ...]
    offers: tuple[Offer, ...]  # every offer of the chosen GPU type
    binding: tuple[str, ...]
    catalog_counts: dict[str, int]


def _cheapest_with(scenario: Scenario, catalog: Catalog, **workload: Any) -> float | None:
    variant = scenario.model_copy(update={
        "workload": scenario.workload.model_copy(update={k: (v,) for k, v in workload.items()}),
        "solver": scenario.solver.model_copy(update={"top": 0})})
    best = solve_scenario(variant, catalog).best
    return best.usd_per_hour if best else None


def binding_constraints(result: SolveResult, scenario: Scenario) -> tuple[str, ...]:
    """What stops the plan from being cheaper, in the words of the scenario's keys."""
    best = result.best
    if best is None:
        return (result.infeasible.reason,) if result.infeasible else ()
    out = []
    card = best.memory.gpu.memory_bytes if best.memory.gpu else 0
    used = 1 - best.headroom_bytes / card if card else 0
    out.append(f"memory: the fullest GPU is {used:.0%} full ({format_bytes(best.headroom_bytes)} headroom)")
    for rejected in result.rejected_cheaper[:3]:
        out.append(f"memory rules out {rejected.tp * rejected.pp} x {rejected.gpu} at ${rejected.usd_per_hour:,.2f}/hour "
                   f"(needs {format_bytes(rejected.needed_bytes)} per GPU)")
    if best.gpus_per_replica == scenario.search.max_gpus_per_replica:
        out.append(f"search.max_gpus_per_replica: the plan uses all {best.gpus_per_replica} GPUs allowed")
    if best.context == scenario.workload.context[0] and len(scenario.workload.context) > 1:
        out.append(f"workload.context: only the minimum ({best.context:,}) fits at this cost")
    out.append(f"search.quality_floor: {scenario.search.quality_floor} (plan uses {best.precision}, {best.memory.quality})")
    if best.idle_gpus:
        out.append(f"rentable shapes: {best.idle_gpus} GPU(s) of the rented instances sit idle")
    return tuple(out)


def review_scenario(scenario: Scenario, catalog: Catalog,
                    progress: Callable[[int, int], None] | None = None) -> Review:
    """The plan plus one re-solve per point of each cost curve; `progress(done, total)` after each solve."""
    contexts = sorted(set(CONTEXT_SWEEP) | set(scenario.workload.context))
    concurrencies = sorted(set(CONCURRENCY_SWEEP) | set(scenario.workload.concurrency))
    total, done = 1 + len(contexts) + len(concurrencies), 0

    def step(value):
        nonlocal done
        done += 1
        if progress:
            progress(done, total)
        return value

    result = step(solve_scenario(scenario, catalog))
    limit_context = max(scenario.workload.context)
    return Review(
        result=result,
        context_costs=tuple((c, step(_cheapest_with(scenario, catalog, context=c,
                                                    concurrency=scenario.workload.concurrency[0])))
                            for c in contexts),
        concurrency_costs=tuple((n, step(_cheapest_with(scenario, catalog, context=limit_context, concurrency=n)))
                                for n in concurrencies),
        offers=tuple(o for o in catalog.offers if result.best and o.gpu == result.best.gpu),
        binding=binding_constraints(result, scenario),
        catalog_counts={"gpus": len(catalog.gpus), "models": len(catalog.models),
                        "precisions": len(catalog.precisions), "offers": len(catalog.offers)},
    )
