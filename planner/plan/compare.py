"""`planner compare`: the cheapest configuration holding a model on each GPU type and provider."""

from __future__ import annotations

from planner.catalog.load import Catalog
from planner.plan.scenario import Scenario
from planner.plan.search import build_search_space, enumerate_candidates, rentals_for
from planner.plan.solver import Pair, PlanOption, preference, read_plan


def compare_offers(scenario: Scenario, catalog: Catalog) -> tuple[PlanOption, ...]:
    """The cheapest configuration on each (GPU type, provider), sorted by $/hour: `planner compare`."""
    space = build_search_space(scenario, catalog)
    enumeration = enumerate_candidates(space, catalog)
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
