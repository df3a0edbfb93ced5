"""A fleet's cost for each workload against what the same tokens cost at hosted APIs' list prices
(catalogs/hosted_prices.yaml): "self-hosting costs 0.43x together Turbo's list price for this traffic"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.catalog.hosted import HostedPrice
from planner.catalog.prices import PriceAge

if TYPE_CHECKING:
    from planner.catalog.load import Catalog
    from planner.plan.fleet import Assignment, PoolUse
    from planner.plan.serving import FleetWorkload


@dataclass(frozen=True)
class HostedCost:
    """One workload's demand priced at one hosted API: input tokens/hour x its input price + output tokens/hour x
    its output price, and the fleet's own cost for that workload as a multiple of it (`ratio` < 1: self-hosting
    is cheaper)."""

    workload: str
    price: HostedPrice
    input_tokens_per_hour: float
    output_tokens_per_hour: float
    usd_per_hour: float  # the hosted API's, for this workload's demand
    fleet_usd_per_hour: float  # the fleet's, for this workload (workload_costs)
    ratio: float  # fleet_usd_per_hour / usd_per_hour
    price_age: PriceAge


def workload_costs(assignments: tuple[Assignment, ...], pools: tuple[PoolUse, ...]) -> dict[str, float]:
    """The fleet's $/hour per workload: each rented pool's cost split over the workloads by the GPUs their replicas
    take in it (a single-workload fleet's whole cost is its one workload's)."""
    costs: dict[str, float] = {}
    for use in pools:
        for a in assignments:
            if a.pool == use.pool:
                share = a.replicas * a.config.candidate.gpus / use.gpus_used
                costs[a.workload] = costs.get(a.workload, 0.0) + use.usd_per_hour * share
    return costs


def hosted_costs(workloads: tuple[FleetWorkload, ...], assignments: tuple[Assignment, ...],
                 pools: tuple[PoolUse, ...], catalog: Catalog) -> tuple[HostedCost, ...]:
    """For each workload whose model has hosted list prices, each price against the fleet's cost for that workload,
    cheapest hosted first; their age by the workload's pricing.max_price_age_days (--max-price-age)."""
    costs = workload_costs(assignments, pools)
    out = []
    for w in workloads:
        fleet = costs.get(w.name)
        if not fleet:
            continue
        prompt, output = w.tokens_per_hour
        rows = [p for p in catalog.hosted_prices if catalog.models.get(p.model).hf_id == w.space.model_id]
        priced = sorted(((p.usd_per_hour(prompt, output), p) for p in rows), key=lambda r: (r[0], r[1].label))
        out += [HostedCost(w.name, p, prompt, output, round(usd, 4), round(fleet, 4), round(fleet / usd, 4),
                           p.age(w.space.max_price_age_days)) for usd, p in priced]
    return tuple(out)
