"""What-if planning: the scenario and its standard variants, each solved, side by side for a capacity review."""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog.load import Catalog
from planner.errors import PlannerInputError
from planner.plan.deadline import Deadline, OutOfTime
from planner.plan.fleet import fleet_problem, plan_fleet
from planner.plan.scenario import Scenario, WorkloadSpec
from planner.plan.serving import ServingCache
from planner.plan.solver import solve_scenario
from planner.plan.status import FEASIBLE, UNKNOWN
from planner.units import MAX_BATCH

CUT_SHORT = "CUT SHORT"  # the time limit ran out before this variant had a plan (or before it was tried)


@dataclass(frozen=True)
class WhatIf:
    variant: str
    status: str
    usd_per_hour: float | None
    change_usd_per_hour: float | None  # against the scenario as written


@dataclass(frozen=True)
class _Outcome:
    status: str
    usd_per_hour: float | None
    busiest_gpu: str | None  # the GPU type holding the most GPUs
    why: str  # what the time limit left undone, when it stopped this search


def what_if(scenario: Scenario, catalog: Catalog, deadline: Deadline | None = None) -> tuple[WhatIf, ...]:
    """The scenario as written, then each variant of what_if_variants, all within one deadline (by default the
    scenario's time limit from now). A variant the input rules refuse (e.g. it leaves no GPU to search) is listed
    as INVALID with the reason; a row the deadline stopped before it had a plan, or left no time to try, is
    CUT SHORT, and one it stopped after a plan was found says the plan is the best found, not proven."""
    deadline = deadline or Deadline.start(scenario.solver.time_limit_s)
    cache = ServingCache(catalog)  # variants that keep a workload's search space (traffic x2) reuse its replicas
    try:
        written: _Outcome | None = _cheapest(scenario, catalog, cache, deadline)
    except OutOfTime as exc:
        written = None
        rows = [WhatIf(f"as written ({exc})", CUT_SHORT, None, None)]
    else:
        rows = [_row("as written", written, None)]
    variants: list[tuple[str, Scenario | None]] = [
        *what_if_variants(scenario, written.busiest_gpu if written else None)]
    if rows[0].status == CUT_SHORT:  # which GPU type the plan leans on is known only from a plan
        variants.append(("without its busiest GPU type", None))
    for label, variant in variants:
        if variant is None or deadline.expired():
            untried = deadline.out_of_time("solving the rows above", "the scenario", "this variant was tried")
            rows.append(WhatIf(f"{label} ({untried})", CUT_SHORT, None, None))
            continue
        try:
            outcome = _cheapest(variant, catalog, cache, deadline)
        except OutOfTime as exc:
            rows.append(WhatIf(f"{label} ({exc})", CUT_SHORT, None, None))
            continue
        except PlannerInputError as exc:  # the variant is not a valid scenario: say why in the row
            rows.append(WhatIf(f"{label} ({exc})", "INVALID", None, None))
            continue
        rows.append(_row(label, outcome, written))
    return tuple(rows)


def _row(label: str, outcome: _Outcome, written: _Outcome | None) -> WhatIf:
    """A solved row; `written`: the scenario as written, which `change` is against (None: this is that row)."""
    if outcome.status == UNKNOWN:
        return WhatIf(f"{label} ({outcome.why})", CUT_SHORT, None, None)
    cost, base = outcome.usd_per_hour, (written or outcome).usd_per_hour
    change = round(cost - base, 4) if cost is not None and base is not None else None  # prices: 1/100 cent
    return WhatIf(f"{label} ({outcome.why})" if outcome.status == FEASIBLE else label, outcome.status, cost, change)


def _cheapest(scenario: Scenario, catalog: Catalog, cache: ServingCache, deadline: Deadline) -> _Outcome:
    """The status and $/hour of the scenario's plan or fleet."""
    not_proven = f"cut short by the {deadline.limit_s:g} s time limit: the best found, not proven cheapest"
    if scenario.is_fleet:
        fleet = plan_fleet(fleet_problem(scenario, catalog), catalog, explain=False, cache=cache,
                           deadline=deadline)  # only the cost shows
        used = max(fleet.pools, key=lambda u: u.instances * u.pool.offer.gpus, default=None)
        return _Outcome(fleet.status, fleet.usd_per_hour, used.pool.offer.gpu if used else None, not_proven)
    result = solve_scenario(scenario, catalog, top=0, explain=False, deadline=deadline)
    best = result.best
    why = deadline.out_of_time("CP-SAT's search", "the scenario") if result.status == UNKNOWN else not_proven
    return _Outcome(result.status, best.usd_per_hour if best else None, best.gpu if best else None, str(why))


def what_if_variants(scenario: Scenario, busiest_gpu: str | None) -> list[tuple[str, Scenario]]:
    """The standard variants for a review: traffic x2, context 32K, spot allowed, the busiest GPU type removed."""

    def each_workload(change) -> Scenario:
        if scenario.workloads is None:
            return scenario.model_copy(update={"workload": change(scenario.workload)})
        return scenario.model_copy(update={"workloads": [w.model_copy(update={"workload": change(w.workload)})
                                                         for w in scenario.workloads]})

    def double(workload: WorkloadSpec) -> WorkloadSpec:
        traffic = workload.traffic
        if traffic is None:
            return workload.model_copy(update={"concurrency": tuple(min(2 * n, MAX_BATCH) for n in workload.concurrency)})
        return workload.model_copy(update={"traffic": traffic.scaled(2)})

    variants = [
        ("traffic x2" if scenario.is_fleet else "concurrency x2", each_workload(double)),
        ("context 32K", each_workload(lambda w: w.model_copy(update={"context": (32768,)}))),
        ("spot allowed", scenario.model_copy(update={"pricing": scenario.pricing.model_copy(update={"market": "any"})})),
    ]
    if busiest_gpu:
        excluded = [*scenario.search.exclude_gpus, busiest_gpu]
        search = scenario.search.model_copy(update={"exclude_gpus": excluded})
        removed = scenario.model_copy(update={"search": search})
        if scenario.workloads is not None:
            removed = removed.model_copy(update={"workloads": [
                w.model_copy(update={"search": (w.search or scenario.search).model_copy(update={
                    "exclude_gpus": [*(w.search or scenario.search).exclude_gpus, busiest_gpu]})})
                for w in scenario.workloads]})
        variants.append((f"without {busiest_gpu}", removed))
    return variants
