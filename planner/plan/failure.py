"""Failure and interruption (issue 24 item 4): the capacity a fleet counts on spot pools, where a lost spot pool falls
back to, and the zones (regions, providers) a fleet keeps its demand without.

Spot interruption. A spot instance can be reclaimed. The rate is the scenario's (fleet.spot.interruption_rate), in the
unit AWS publishes: the share of spot instances reclaimed in a month. AWS's Spot Instance Advisor gives it per instance
type and region as a band: "Frequency of interruption represents the rate at which Spot has reclaimed capacity during
the trailing month. They are in ranges of < 5%, 5-10%, 10-15%, 15-20% and >20%"
(https://aws.amazon.com/ec2/spot/instance-advisor/, its data https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json;
the wording as quoted at https://pkg.go.dev/github.com/grailbio/base/cloud/spotadvisor, read 2026-12-03). A band is read
at its upper end (the plan never counts on fewer interruptions than the band allows); ">20%" has none and is refused.
The price catalog carries no rate: the advisor's bands change monthly per instance type and region (no dated snapshot
of them is in this catalog), Google publishes none ("Compute Engine might reclaim the resources by preempting Spot VMs
at any time", https://docs.cloud.google.com/compute/docs/instances/create-use-spot, read 2026-12-03), and the catalog has
no Azure spot row.

A reclaimed replica serves nothing until its replacement does: re-provisioning and the model load, fleet.spot.
replace_minutes, by default fleet.scale_up_minutes (the day profile's minutes for an added replica to start, load its
weights and warm up: the same work). So the expected fraction of a spot pool's capacity unavailable is
    unavailable = interruption_rate / HOURS_PER_MONTH x replace_minutes / 60
(interruptions per instance-hour x hours each is down), and a spot replica counts at (1 - unavailable) of its capacity
in every demand rule of the fleet (planner.plan.fleet._build): it keeps the SLO with the expected loss. N+k spares
(workload.redundancy) still count whole replicas lost.

The on-demand fallback of a spot pool: the cheapest pay-as-you-go on-demand offer of its GPU, of those the workload's
pricing allows (providers, regions, kinds; any market), that holds the pool's replicas (planner.plan.rental), and what
renting the replicas there costs an hour.

Survival (fleet.survive: region | provider): with any one zone lost, every workload bucket's capacity outside it still
meets its demand, as N+k does for replicas. A region is a provider's ("aws us-east-1"); an offer priced for region
"all" or "unspecified" is one region of its own: the catalog cannot tell where it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, floor
from typing import Any, Iterable, Literal

from planner.catalog.prices import Offer, offer_label
from planner.plan.rental import footprint

HOURS_PER_MONTH = 730  # 365 x 24 / 12: AWS's monthly band over the hours of a mean month
# The Spot Instance Advisor's bands (the module's docstring), each read at its upper end
AWS_BANDS = {"<5%": 0.05, "5-10%": 0.10, "10-15%": 0.15, "15-20%": 0.20}
Survive = Literal["region", "provider"]


def interruption_rate(value: Any) -> float:
    """A share of spot instances reclaimed a month: a number from 0 to 1, or an AWS Spot Instance Advisor band."""
    if isinstance(value, str):
        band = value.replace(" ", "")
        if band in AWS_BANDS:
            return AWS_BANDS[band]
        if band == ">20%":
            raise ValueError("'>20%' has no upper end to plan with; give the share as a number (0.3 = 30% a month)")
        raise ValueError(f"{value!r} is no AWS Spot Instance Advisor band; give {', '.join(AWS_BANDS)} or a number "
                         "from 0 to 1 (0.05 = 5% of spot instances reclaimed a month)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{value!r} is no share of spot instances reclaimed a month; give a number from 0 to 1 "
                         f"(0.05 = 5%) or an AWS Spot Instance Advisor band ({', '.join(AWS_BANDS)})")
    return float(value)


@dataclass(frozen=True)
class SpotRates:
    """The scenario's interruption rates: one for every spot pool, or one per provider (a provider not named has
    none stated, and its spot replicas count whole)."""

    replace_minutes: float
    per_month: float | None = None
    by_provider: tuple[tuple[str, float], ...] = ()

    def rate(self, offer: Offer) -> float | None:
        return dict(self.by_provider).get(offer.provider, self.per_month)

    def unavailable(self, offer: Offer) -> float | None:
        """The expected fraction of a spot pool's capacity reclaimed and not yet replaced."""
        rate = self.rate(offer)
        return None if rate is None else rate / HOURS_PER_MONTH * self.replace_minutes / 60


def counted_units(capacity_units: int, available: float) -> int:
    """A replica's capacity as the fleet counts it: whole milli-requests/s of what is expected available."""
    return capacity_units if available == 1 else floor(capacity_units * available)


@dataclass(frozen=True)
class Fallback:
    """The on-demand offer that would replace a lost spot pool, and what its replicas cost there."""

    offer: Offer
    instances: int
    usd_per_hour: float

    @property
    def label(self) -> str:
        return offer_label(self.offer, "on-demand")


@dataclass(frozen=True)
class SpotRisk:
    """A spot pool's interruption assumption (None fields: no rate stated), its expected loss and its fallback."""

    interruption_rate: float | None  # share of instances reclaimed a month
    replace_minutes: float
    unavailable: float | None  # expected fraction of its capacity
    lost_requests_per_s: float | None  # of its replicas' capacity, expected
    fallback: Fallback | None

    @property
    def line(self) -> str:
        """What a plan prints for the pool."""
        if self.unavailable is None:
            risk = "no interruption rate stated (fleet.spot.interruption_rate): its replicas count whole"
        else:
            risk = (f"interrupted {self.interruption_rate * 100:g}% a month, {self.replace_minutes:g} min to replace: "
                    f"{self.unavailable:.4%} of its capacity expected down ({self.lost_requests_per_s:,.4f} req/s), "
                    "counted off")
        fallback = (f"falls back to {self.fallback.label}: {self.fallback.instances} instance(s), "
                    f"${self.fallback.usd_per_hour:,.2f}/hour" if self.fallback
                    else "no on-demand offer of its GPU the pricing allows holds its replicas")
        return f"{risk}; {fallback}"


def fallback(replicas: Iterable[tuple[int, int, int]], gpu: str, offers: Iterable[Offer]) -> Fallback | None:
    """The cheapest on-demand offer of `gpu` among `offers` holding every (replicas, GPUs, GPUs sharing a node) of a
    spot pool."""
    replicas = list(replicas)
    best = None
    for offer in offers:
        price = offer.on_demand_usd_per_hour
        if offer.gpu != gpu or price is None or offer.term is not None:
            continue
        taken = [footprint(gpus, node_group, offer.gpus) for _, gpus, node_group in replicas]
        if any(t is None for t in taken):
            continue
        instances = ceil(sum(n * t for (n, _, _), t in zip(replicas, taken)) / offer.gpus)
        if best is None or instances * price < best.usd_per_hour:
            best = Fallback(offer, instances, round(instances * price, 4))
    return best


def zone(offer: Offer, survive: Survive) -> str:
    """The zone a fleet.survive rule loses: the offer's provider, or its provider's region."""
    return offer.provider if survive == "provider" else f"{offer.provider} {offer.region}"
