"""What-if planning: the scenario and its standard variants, each solved, side by side for a capacity review."""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog.load import Catalog
from planner.errors import PlannerInputError
from planner.plan.fleet import fleet_problem, plan_fleet
from planner.plan.scenario import Scenario, WorkloadSpec
from planner.plan.serving import ServingCache
from planner.plan.solver import solve_scenario
from planner.units import MAX_BATCH


@dataclass(frozen=True)
class WhatIf:
    variant: str
    status: str
    usd_per_hour: float | None
    change_usd_per_hour: float | None  # against the scenario as written


def what_if(scenario: Scenario, catalog: Catalog) -> tuple[WhatIf, ...]:
    """The scenario as written, then each variant of what_if_variants; a variant the input rules refuse (e.g.
    it leaves no GPU to search) is listed as INVALID with the reason."""
    cache = ServingCache(catalog)  # variants that keep a workload's search space (traffic x2) reuse its replicas
    status, cost, busiest = _cheapest(scenario, catalog, cache)
    rows = [WhatIf("as written", status, cost, 0.0 if cost is not None else None)]
    for label, variant in what_if_variants(scenario, busiest):
        try:
            v_status, v_cost, _ = _cheapest(variant, catalog, cache)
        except PlannerInputError as exc:  # the variant is not a valid scenario: say why in the row
            rows.append(WhatIf(f"{label} ({exc})", "INVALID", None, None))
            continue
        change = round(v_cost - cost, 4) if v_cost is not None and cost is not None else None  # prices: 1/100 cent
        rows.append(WhatIf(label, v_status, v_cost, change))
    return tuple(rows)


def _cheapest(scenario: Scenario, catalog: Catalog, cache: ServingCache) -> tuple[str, float | None, str | None]:
    """(status, $/hour, the GPU type holding the most GPUs) of the scenario's plan or fleet."""
    if scenario.is_fleet:
        fleet = plan_fleet(fleet_problem(scenario, catalog), catalog, explain=False, cache=cache)  # only the cost shows
        used = max(fleet.pools, key=lambda u: u.instances * u.pool.offer.gpus, default=None)
        return fleet.status, fleet.usd_per_hour, used.pool.offer.gpu if used else None
    result = solve_scenario(scenario, catalog, top=0, explain=False)
    best = result.best
    return result.status, best.usd_per_hour if best else None, best.gpu if best else None


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
        return workload.model_copy(update={"traffic": traffic.model_copy(update={
            "requests_per_s": traffic.requests_per_s and 2 * traffic.requests_per_s,
            "output_tokens_per_s": traffic.output_tokens_per_s and 2 * traffic.output_tokens_per_s})})

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
