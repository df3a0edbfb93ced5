"""How replicas are rented: one rule for single-configuration plans and fleets.

A replica of g GPUs on a rentable shape of k GPUs (a provider instance) takes up a footprint:
  g <= k: the smallest divisor of k that holds g, so floor-packing is exact: k / footprint replicas share
          an instance and the GPUs of the footprint beyond g sit idle (paid). A 3-GPU replica on an 8-GPU
          instance takes 4: two replicas per instance.
  g > k:  whole instances, ceil(g / k) of them, as pipeline stages across nodes; a TP group must sit
          inside one instance, and only full multi-GPU nodes (k >= MIN_GPUS_PER_NODE_ACROSS_NODES) are
          networked for that. The last instance's extra GPUs sit idle.
Footprints of one shape divide each other or are whole instances, so a fleet that mixes replica sizes
on one shape packs exactly when the footprints add up to at most instances x k.

The single planner once allowed idle GPUs while the fleet required k % g == 0 (and g % k == 0 across
nodes): the fleet refused rentals that exist (a 6-GPU replica on an 8-GPU instance). Idle GPUs are
rentable; the rule above is the single planner's, with the footprint making it exact for fleets too.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from planner.catalog.load import Offer

# Money inside the solvers is integer hundredths of a cent per hour: exact for every catalog price.
COST_UNITS_PER_USD = 10_000
# A replica spans several instances only when each is a full multi-GPU node (HGX/DGX-class servers,
# which clouds interconnect with InfiniBand / EFA for multi-node serving); an assumption, not a price.
MIN_GPUS_PER_NODE_ACROSS_NODES = 8


def footprint(gpus_per_replica: int, node_group: int, instance_gpus: int) -> int | None:
    """GPUs of the rented shape one replica takes up, idle ones included; None when it cannot be rented there.
    `node_group`: the GPUs that must share one instance (the TP group; the attention-TP group under DP attention)."""
    g, k = gpus_per_replica, instance_gpus
    if g <= k:
        return min(d for d in range(g, k + 1) if k % d == 0)
    if node_group > k or k % node_group:
        return None  # a TP group must sit inside one instance
    if k < MIN_GPUS_PER_NODE_ACROSS_NODES:
        return None  # single-GPU rentals are not networked for pipeline stages; whole nodes are
    return ceil(g / k) * k


@dataclass(frozen=True)
class Rental:
    offer: Offer
    market: str
    instances: int
    replicas_per_instance: int  # 0 when one replica spans several instances
    usd_per_hour: float
    idle_gpus: int

    @property
    def cost_units(self) -> int:
        return round(self.usd_per_hour * COST_UNITS_PER_USD)


def rent(gpus_per_replica: int, node_group: int, replicas: int, offer: Offer, market: str) -> Rental | None:
    """How `replicas` replicas of `gpus_per_replica` GPUs are rented on one shape, or None if they can't be."""
    price = offer.price(market)
    taken = footprint(gpus_per_replica, node_group, offer.gpus)
    if price is None or taken is None:
        return None
    k = offer.gpus
    if taken <= k:
        per_instance = k // taken
        instances = ceil(replicas / per_instance)
    else:
        per_instance = 0
        instances = replicas * taken // k
    return Rental(offer, market, instances, per_instance, instances * price,
                  instances * k - replicas * gpus_per_replica)
