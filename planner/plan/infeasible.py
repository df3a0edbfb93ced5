"""Why no plan fits a single-configuration scenario, and one change at a time that would make it fit."""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.catalog.load import Catalog
from planner.plan.deadline import NO_DEADLINE, Deadline
from planner.plan.scenario import Scenario
from planner.plan.search import (MAX_CONFIGURATIONS, Enumeration, Rejection, SearchSpace, configuration_count,
                                 enumerate_candidates, rentals_for)
from planner.units import format_bytes

RELAXED_MAX_GPUS = 64  # the widest replica a suggestion proposes
MIN_RELAXED_CONTEXT = 1024  # the shortest context a suggestion proposes


@dataclass(frozen=True)
class Infeasibility:
    reason: str
    closest: Rejection | None
    suggestions: tuple[str, ...]


def explain_infeasible(scenario: Scenario, space: SearchSpace, catalog: Catalog, enumeration: Enumeration,
                       deadline: Deadline = NO_DEADLINE) -> Infeasibility:
    if not space.offers:
        market = scenario.pricing.market
        return Infeasibility(
            f"no rentable offer for the allowed GPUs ({', '.join(g.name for g in space.gpus) or 'none'}) "
            f"with the pricing filters (market {market}, providers {scenario.pricing.providers or 'all'}, "
            f"regions {scenario.pricing.regions or 'all'}, price kinds {', '.join(scenario.pricing.kinds)})", None,
            ("widen pricing.providers / pricing.regions / pricing.kinds, set pricing.market: any, or allow more "
             "search.gpus",))
    if not enumeration.candidates and enumeration.too_slow:
        s = max(enumeration.too_slow, key=lambda s: s.output_tokens_per_s)
        return Infeasibility(
            f"every configuration that fits runs below workload.min_tokens_per_s ({space.min_tokens_per_s:,g} output "
            f"tokens/s per replica at the full context); the fastest, {s.gpus_per_replica} x {s.gpu} (tp {s.tp} pp "
            f"{s.pp}, {s.precision}, KV {s.kv_dtype}, context {s.context:,} x {s.concurrency}), makes "
            f"{s.output_tokens_per_s:,.0f}", None,
            ("lower workload.min_tokens_per_s, or allow more sequences (workload.concurrency), more GPUs per replica "
             "(search.max_gpus_per_replica), other GPUs or a smaller precision",))
    closest = min(enumeration.rejections, key=lambda r: r.overshoot, default=None)
    if closest is None:
        return Infeasibility("no configuration could be formed: " + "; ".join(enumeration.skipped), None,
                             ("allow other precisions or GPUs, or set search.allow_emulated: true where it is false",))
    largest = max(space.gpus, key=lambda g: g.memory_bytes)
    # an engine's refusal says its own cause (its pool, its running-request limit); the margin's, the bytes it needs
    why = (closest.reason if space.engine is not None else
           f"needs {format_bytes(closest.needed_bytes)} per GPU; {closest.gpu} holds {format_bytes(closest.card_bytes)}")
    reason = (f"the closest configuration ({closest.gpu} x {closest.tp * closest.pp}, tp {closest.tp} pp {closest.pp}, "
              f"{closest.precision}, KV {closest.kv_dtype}, context {closest.context:,} x {closest.concurrency}): "
              f"{why} (largest allowed card: {largest.name}, {format_bytes(largest.memory_bytes)})")
    return Infeasibility(reason, closest, tuple(_relaxations(space, catalog, deadline)))


def _relaxations(space: SearchSpace, catalog: Catalog, deadline: Deadline) -> list[str]:
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
        if configuration_count(relaxed) > MAX_CONFIGURATIONS:
            continue  # the relaxed space is too large to enumerate: not a suggestion to make
        result = enumerate_candidates(relaxed, catalog, deadline, cheapest_only=True)
        if result.cut_short:  # a search cut short proves nothing about this change, nor about the ones left
            return found + [f"the {deadline.limit_s:g} s time limit ran out before every change was tried; raise "
                            "--time-limit (or solver.time_limit_s) for more"]
        costs = [r.usd_per_hour for c in result.candidates for r in rentals_for(c, relaxed)]
        if costs:
            found.append(f"{label}: cheapest ${min(costs):,.2f}/hour")
            solved_kinds.add(kind)
    return found or ["no single change fits: consider a smaller model"]
