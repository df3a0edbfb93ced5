"""A review (`planner report`): of a single-configuration plan, the plan, what binds it, and how its cost moves
along the context and concurrency sweeps; of a fleet, the plan and how its cost moves with the demand. Both with
the prices of the GPU types they rent and the catalogs' sizes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from planner.catalog.load import Catalog, Offer
from planner.catalog.prices import MARKETS, PriceAge, price_age
from planner.plan.deadline import Deadline, OutOfTime
from planner.plan.fleet import FleetPlan, fleet_problem, plan_fleet
from planner.plan.scenario import Scenario
from planner.plan.serving import ServingCache
from planner.plan.solver import SolveResult, solve_scenario
from planner.plan.status import FEASIBLE, UNKNOWN
from planner.units import format_bytes

CONTEXT_SWEEP = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
CONCURRENCY_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# A fleet's cost curve: every workload's demand times these. (Not a context sweep: a fleet sizes its replicas
# under load for each context anew, seconds a point, where a demand re-uses every replica's capacity.)
TRAFFIC_SWEEP = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class Review:
    result: SolveResult
    context_costs: tuple[tuple[int, float | None], ...]  # (context, cheapest $/hour or None)
    concurrency_costs: tuple[tuple[int, float | None], ...]
    offers: tuple[tuple[Offer, str, PriceAge], ...]  # every price of the chosen GPU type: offer, market, its age
    binding: tuple[str, ...]
    catalog_counts: dict[str, int]
    cut_short: str | None = None  # the cost-curve points the time limit left out, and the fix


@dataclass(frozen=True)
class FleetReview:
    """A fleet plan with what a review reads beside it (`planner report` of a scenario with traffic)."""

    plan: FleetPlan
    traffic_costs: tuple[tuple[float, float | None], ...]  # (x the demand, cheapest $/hour or None: no fleet serves it)
    offers: tuple[tuple[Offer, str, PriceAge], ...]  # every price of the GPU types the fleet rents: offer, market, age
    catalog_counts: dict[str, int]
    cut_short: str | None = None  # the cost-curve points the time limit left out, and the fix


def gpu_prices(catalog: Catalog, gpus: set[str], max_price_age_days: int) -> tuple[tuple[Offer, str, PriceAge], ...]:
    """Every price the catalog holds for these GPU types (each market of each offer), with its age."""
    return tuple((o, market, price_age(o, market, max_price_age_days)) for o in catalog.offers
                 if o.gpu in gpus for market in MARKETS if o.price(market))


def catalog_counts(catalog: Catalog) -> dict[str, int]:
    return {"gpus": len(catalog.gpus), "models": len(catalog.models), "precisions": len(catalog.precisions),
            "offers": len(catalog.offers)}


def _cut_short(deadline: Deadline, left_out: dict[str, list[str]], points: int) -> str | None:
    """The cost-curve points the deadline left out, by curve, and the fix; None when it left none out."""
    if not left_out:
        return None
    return (f"the {deadline.limit_s:g} s time limit (--time-limit, solver.time_limit_s) ran out before "
            f"{sum(map(len, left_out.values()))} of {points} cost-curve points were solved, left out: "
            + "; ".join(f"{curve} {', '.join(values)}" for curve, values in left_out.items()) + "; raise --time-limit")


def review_fleet(scenario: Scenario, catalog: Catalog, deadline: Deadline | None = None) -> FleetReview:
    """The fleet plan, then one re-solve per point of the traffic curve (every workload's demand x TRAFFIC_SWEEP),
    all within one deadline (by default the scenario's time limit from now); the points it leaves no time for, or
    whose fleet it leaves not proven cheapest, are left out of the curve and named in FleetReview.cut_short."""
    deadline = deadline or Deadline.start(scenario.solver.time_limit_s)
    problem = fleet_problem(scenario, catalog)
    cache = ServingCache(catalog)  # the curve's points re-use every replica's capacity
    plan = plan_fleet(problem, catalog, cache=cache, deadline=deadline)
    curve: list[tuple[float, float | None]] = []
    left_out: list[str] = []
    for times in TRAFFIC_SWEEP:
        scaled = replace(problem, workloads=tuple(
            replace(w, buckets=tuple(replace(b, requests_per_s=b.requests_per_s * times) for b in w.buckets))
            for w in problem.workloads))
        try:
            if deadline.expired():
                raise deadline.out_of_time("the points before it", "the scenario")
            point = plan_fleet(scaled, catalog, explain=False, cache=cache, deadline=deadline)
        except OutOfTime:
            left_out.append(f"x{times:g}")
            continue
        if point.status == FEASIBLE:  # not proven cheapest: not a point of the curve
            left_out.append(f"x{times:g}")
        else:
            curve.append((times, point.usd_per_hour))
    return FleetReview(plan, tuple(curve),
                       gpu_prices(catalog, {u.pool.offer.gpu for u in plan.pools},
                                  min(w.space.max_price_age_days for w in problem.workloads)),
                       catalog_counts(catalog), _cut_short(deadline, {"traffic": left_out} if left_out else {},
                                                           len(TRAFFIC_SWEEP)))


def _cheapest_with(scenario: Scenario, catalog: Catalog, deadline: Deadline, **workload: Any) -> float | None:
    """The cheapest $/hour with these workload values (None: nothing fits). Raises OutOfTime when the deadline
    comes first: a point whose search was cut short is not known to be the cheapest."""
    if deadline.expired():
        raise deadline.out_of_time("the points before it", "the scenario")
    variant = scenario.model_copy(update={
        "workload": scenario.workload.model_copy(update={k: (v,) for k, v in workload.items()}),
        "solver": scenario.solver.model_copy(update={"top": 0})})
    result = solve_scenario(variant, catalog, explain=False, deadline=deadline)
    if result.status in (FEASIBLE, UNKNOWN):
        raise deadline.out_of_time(result.search_cut_short or "CP-SAT's search", "the scenario", "it was proven")
    return result.best.usd_per_hour if result.best else None


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


def review_scenario(scenario: Scenario, catalog: Catalog, progress: Callable[[int, int], None] | None = None,
                    deadline: Deadline | None = None) -> Review:
    """The plan plus one re-solve per point of each cost curve, all within one deadline (by default the scenario's
    time limit from now); `progress(done, total)` after each solve. The points the deadline leaves no time for
    are left out of the curves and named in Review.cut_short."""
    deadline = deadline or Deadline.start(scenario.solver.time_limit_s)
    contexts = sorted(set(CONTEXT_SWEEP) | set(scenario.workload.context))
    concurrencies = sorted(set(CONCURRENCY_SWEEP) | set(scenario.workload.concurrency))
    points = ([("context", c, {"context": c, "concurrency": scenario.workload.concurrency[0]}) for c in contexts]
              + [("concurrency", n, {"context": max(scenario.workload.context), "concurrency": n})
                 for n in concurrencies])
    result = solve_scenario(scenario, catalog, deadline=deadline)
    curves: dict[str, list[tuple[int, float | None]]] = {"context": [], "concurrency": []}
    left_out: dict[str, list[str]] = {}
    for done, (curve, value, workload) in enumerate(points, 1):
        if progress:
            progress(done, 1 + len(points))
        try:
            curves[curve].append((value, _cheapest_with(scenario, catalog, deadline, **workload)))
        except OutOfTime:
            left_out.setdefault(curve, []).append(f"{value:,}")
    if progress:
        progress(1 + len(points), 1 + len(points))
    return Review(
        result=result, context_costs=tuple(curves["context"]), concurrency_costs=tuple(curves["concurrency"]),
        offers=gpu_prices(catalog, {result.best.gpu} if result.best else set(), scenario.pricing.max_price_age_days),
        binding=binding_constraints(result, scenario), catalog_counts=catalog_counts(catalog),
        cut_short=_cut_short(deadline, left_out, len(points)),
    )
