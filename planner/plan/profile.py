"""A day of changing demand (workload.traffic.profile: requests/s by UTC hour): the fleet planned for the peak hour,
then sized hour by hour from that plan, against running the peak fleet all day.

The peak hour is planned by the fleet solver (planner.plan.fleet; a profile's traffic is its peak hour's): that fixes
each workload's configurations, the pools they run on and the most replicas each may take. Each hour then runs, of
each workload bucket, the fewest of those replicas that meet the fleet's own rules at the hour's demand, counted in
the solver's units (planner.plan.fleet.demand_units): replicas are added cheapest per request/s first until
capacity >= demand + k x the largest capacity in use (N+k, workload.redundancy), so with one configuration
replicas = ceil(demand / capacity) + k, and with fleet.survive, capacity outside any one zone in use >= demand
(planner.plan.failure); a spot replica counts at its expected availability (fleet.spot); a workload runs at least
workload.min_replicas. Instances are rented per pool
by the footprint rule the solver packs with (planner.plan.rental) and paid at the pool's price.

Base and scaled: the base is the replicas every hour runs (the fewest of each assignment over the day), up all day at
their pools' prices; the rest of the day's cost scales with the hours. A pool priced by a commitment (pricing.terms)
is paid every hour of its term used or not: its instances of the peak plan are rented every hour, in the base. The
base is not re-priced on a commitment the peak plan does not use: the solver sizes the peak hour, which does not say
which instances stay up.

Scale-up lag (fleet.scale_up_minutes): a replica added for an hour does not serve for that long after it starts
(instance start, weight load, warm-up), so it starts that long before its hour while the hour before serves on with
its own replicas; the hour pays for the instances it adds over the hour before for those minutes as well. The day
repeats: hour 0 follows hour 23. Scaling down is at the hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from planner.plan.failure import Survive, zone
from planner.plan.fleet import Assignment, FleetPlan, Pool, demand_units
from planner.plan.rental import COST_UNITS_PER_USD, footprint
from planner.plan.scenario import HOURS_PER_DAY, FleetSpec, Scenario, WorkloadSpec
from planner.plan.serving import Bucket


@dataclass(frozen=True)
class HourPlan:
    hour: int  # UTC: hour:00 to hour:59
    requests_per_s: float  # every workload's demand in the hour
    replicas: int  # every assignment's
    assignment_replicas: tuple[int, ...]  # of each assignment of the peak plan, in its order
    instances_started: int  # over the hour before, started scale_up_minutes before the hour
    usd_per_hour: float  # the instances the hour runs, and those it starts for their scale_up_minutes


@dataclass(frozen=True)
class DayPlan:
    scale_up_minutes: float
    hours: tuple[HourPlan, ...]
    base_replicas: tuple[int, ...]  # of each assignment of the peak plan: the fewest any hour runs, up all day
    base_usd_per_hour: float  # the base's instances at their pools' prices
    base_usd_per_day: float  # 24 x base_usd_per_hour
    scaled_usd_per_day: float  # usd_per_day - base_usd_per_day: what the hours run beyond the base, warm-ups included
    usd_per_day: float  # the hours' usd_per_hour added up
    peak_usd_per_day: float  # the peak plan all day: 24 x its $/hour
    saving_usd_per_day: float  # peak_usd_per_day - usd_per_day


def plan_day(scenario: Scenario, plan: FleetPlan) -> DayPlan | None:
    """The day of a scenario whose traffic (of some workload) is a profile, from its peak plan; None without a
    profile or without a fleet. A workload without a profile runs its one rate every hour."""
    if not scenario.has_profile or plan.usd_per_hour is None:
        return None
    assignments = plan.assignments
    workloads = {name: part.workload for name, part in scenario.fleet_parts()}
    cheapest_first = sorted(range(len(assignments)), key=lambda i: (_units_per_capacity(assignments[i]), i))
    fleet = scenario.fleet or FleetSpec()
    counts = [_replicas(assignments, workloads, cheapest_first, hour, fleet.survive, fleet.on_demand_share)
              for hour in range(HOURS_PER_DAY)]
    committed = {u.pool: u.instances for u in plan.pools if u.pool.offer.term}  # paid every hour: never scaled down
    rented = [_instances(assignments, n) | committed for n in counts]
    minutes = fleet.scale_up_minutes
    hours = []
    day_units = 0.0
    for hour, n in enumerate(counts):
        started = {pool: max(0, k - rented[hour - 1].get(pool, 0)) for pool, k in rented[hour].items()}
        units = _units(rented[hour]) + _units(started) * minutes / 60
        day_units += units
        demand = sum(spec.traffic.hour_requests_per_s(hour) for spec in workloads.values() if spec.traffic)
        hours.append(HourPlan(hour, round(demand, 4), sum(n), tuple(n), sum(started.values()),
                              round(units / COST_UNITS_PER_USD, 4)))
    base = tuple(min(n[i] for n in counts) for i in range(len(assignments)))
    base_units = _units(_instances(assignments, base) | committed)
    usd_per_day = day_units / COST_UNITS_PER_USD
    base_per_day = HOURS_PER_DAY * base_units / COST_UNITS_PER_USD
    peak_per_day = HOURS_PER_DAY * plan.usd_per_hour
    return DayPlan(minutes, tuple(hours), base, round(base_units / COST_UNITS_PER_USD, 4), round(base_per_day, 4),
                   round(usd_per_day - base_per_day, 4), round(usd_per_day, 4), round(peak_per_day, 4),
                   round(peak_per_day - usd_per_day, 4))


def _units_per_capacity(a: Assignment) -> float:
    """What one replica of the assignment costs per unit of capacity: its share of an instance's price."""
    return a.pool.price_units * _gpus(a) / a.pool.offer.gpus / a.capacity_units


def _gpus(a: Assignment) -> int:
    """GPUs of its pool's instances one replica takes up (planner.plan.rental)."""
    taken = footprint(a.config.candidate.gpus, a.config.candidate.node_group, a.pool.offer.gpus)
    if taken is None:
        raise RuntimeError(f"internal error: a fleet replica on {a.pool.label} has no footprint there")
    return taken


def _replicas(assignments: tuple[Assignment, ...], workloads: dict[str, WorkloadSpec], cheapest_first: list[int],
              hour: int, survive: Survive | None, on_demand_share: float | None = None) -> list[int]:
    """Replicas of each assignment in the hour: per bucket, the fewest (cheapest per request/s first, each at most
    as many as the peak plan runs) whose capacity covers the hour's demand with N+k and the survival rule, on-demand
    replicas first until they hold fleet.on_demand_share of it (the fleet's rule, planner.plan.fleet._build); at
    least min_replicas of each workload."""
    n = [0] * len(assignments)

    def add(choices: list[int]) -> None:
        room = next((i for i in choices if n[i] < assignments[i].replicas), None)
        if room is None:  # the peak plan meets every rule at the peak hour, so it has room for any hour
            raise RuntimeError(f"internal error: hour {hour} needs more replicas than the peak plan runs")
        n[room] += 1

    for name, spec in workloads.items():
        traffic = spec.traffic
        mine = [i for i in cheapest_first if assignments[i].workload == name]
        for b, (share, prompt, output) in enumerate(traffic.shapes() if traffic else ()):
            demand = demand_units(Bucket(traffic.hour_requests_per_s(hour) * share, prompt, output))
            slots = [i for i in mine if assignments[i].bucket == b]
            # a disaggregated bucket's prefill replicas and its decode replicas each cover the demand
            for role in dict.fromkeys(assignments[i].config.role for i in slots):
                group = [i for i in slots if assignments[i].config.role == role]
                on_demand = [i for i in group if assignments[i].pool.market == "on-demand"]
                while sum(n[i] * assignments[i].capacity_units for i in on_demand) < ceil(
                        (on_demand_share or 0) * demand):
                    add(on_demand)
                while not _covered(demand, spec.redundancy, [
                        (n[i], assignments[i].capacity_units, assignments[i].config.capacity_units,
                         survive and zone(assignments[i].pool.offer, survive)) for i in group]):
                    add(group)
        while sum(n[i] for i in mine) < spec.min_replicas:
            add(mine)
    return n


def _covered(demand: int, redundancy: int, replicas: list[tuple[int, int, int, str | None]]) -> bool:
    """The fleet's rule (planner.plan.fleet._build) over (replicas, capacity counted, whole capacity, zone or None)
    of each assignment: the capacity counted meets demand, still does without `redundancy` whole replicas of any
    configuration in use, and (with zones) without any one zone in use."""
    capacity = sum(n * units for n, units, _, _ in replicas)
    largest = max((whole for n, _, whole, _ in replicas if n), default=0)
    zones = {z for n, _, _, z in replicas if n and z is not None}
    return capacity >= demand + redundancy * largest and all(
        sum(n * units for n, units, _, z in replicas if z != lost) >= demand for lost in zones)


def _instances(assignments: tuple[Assignment, ...], replicas: tuple[int, ...] | list[int]) -> dict[Pool, int]:
    """Instances rented of each pool for these replicas: the GPUs they take up, packed into whole instances."""
    gpus: dict[Pool, int] = {}
    for a, n in zip(assignments, replicas):
        gpus[a.pool] = gpus.get(a.pool, 0) + n * _gpus(a)
    return {pool: ceil(taken / pool.offer.gpus) for pool, taken in gpus.items()}


def _units(instances: dict[Pool, int]) -> int:
    return sum(k * pool.price_units for pool, k in instances.items())
