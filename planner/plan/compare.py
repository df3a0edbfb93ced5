"""`planner compare`: the cheapest configuration holding a model on each GPU type and provider."""

from __future__ import annotations

from planner.catalog.load import Catalog
from planner.plan.deadline import Deadline
from planner.plan.scenario import Scenario
from planner.plan.search import build_search_space, enumerate_candidates, rentals_for
from planner.plan.solver import Pair, PlanOption, preference, read_plan


def compare_offers(scenario: Scenario, catalog: Catalog, time_limit_s: float | None = None,
                   deadline: Deadline | None = None) -> tuple[PlanOption, ...]:
    """The cheapest configuration on each (GPU type, provider), sorted by $/hour: `planner compare`. A table
    missing the GPU types the time limit left unsearched would be wrong, so running out of time is an error.
    `deadline`: the command's (by default the time limit from now)."""
    deadline = deadline or Deadline.start(time_limit_s if time_limit_s is not None else scenario.solver.time_limit_s)
    space = build_search_space(scenario, catalog)
    enumeration = enumerate_candidates(space, catalog, deadline, cheapest_only=True)
    if enumeration.cut_short:
        raise deadline.out_of_time(enumeration.cut_short, "--gpus, --max-gpus or --precisions",
                                   "every GPU type was compared")
    cheapest: dict[tuple[str, str], Pair] = {}
    for c in enumeration.candidates:
        for r in rentals_for(c, space):
            key = (c.gpu.name, r.offer.provider)
            pair = Pair(c, r)
            if key not in cheapest or (r.cost_units, -preference(pair, space)) < (
                    cheapest[key].rental.cost_units, -preference(cheapest[key], space)):
                cheapest[key] = pair
    plans = [plan for pair in cheapest.values() if (plan := read_plan(pair, space, catalog)) is not None]
    return tuple(sorted(plans, key=lambda p: (p.usd_per_hour, p.gpu, p.provider)))
