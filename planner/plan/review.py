"""A review of a single-configuration plan (`planner report`): the plan, what binds it, and how its cost
moves along the context and concurrency sweeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from planner.catalog.load import Catalog, Offer
from planner.plan.scenario import Scenario
from planner.plan.solver import SolveResult, solve_scenario
from planner.units import format_bytes
CONTEXT_SWEEP = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
CONCURRENCY_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Review:
    result: SolveResult
    context_costs: tuple[tuple[int, float | None], ...]  # (context, cheapest $/hour or None)
    concurrency_costs: tuple[tuple[int, float | None], ...]
    offers: tuple[Offer, ...]  # every offer of the chosen GPU type
    binding: tuple[str, ...]
    catalog_counts: dict[str, int]


def _cheapest_with(scenario: Scenario, catalog: Catalog, **workload: Any) -> float | None:
    variant = scenario.model_copy(update={
        "workload": scenario.workload.model_copy(update={k: (v,) for k, v in workload.items()}),
        "solver": scenario.solver.model_copy(update={"top": 0})})
    best = solve_scenario(variant, catalog, explain=False).best
    return best.usd_per_hour if best else None


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


def review_scenario(scenario: Scenario, catalog: Catalog,
                    progress: Callable[[int, int], None] | None = None) -> Review:
    """The plan plus one re-solve per point of each cost curve; `progress(done, total)` after each solve."""
    contexts = sorted(set(CONTEXT_SWEEP) | set(scenario.workload.context))
    concurrencies = sorted(set(CONCURRENCY_SWEEP) | set(scenario.workload.concurrency))
    total, done = 1 + len(contexts) + len(concurrencies), 0

    def step(value):
        nonlocal done
        done += 1
        if progress:
            progress(done, total)
        return value

    result = step(solve_scenario(scenario, catalog))
    limit_context = max(scenario.workload.context)
    return Review(
        result=result,
        context_costs=tuple((c, step(_cheapest_with(scenario, catalog, context=c,
                                                    concurrency=scenario.workload.concurrency[0])))
                            for c in contexts),
        concurrency_costs=tuple((n, step(_cheapest_with(scenario, catalog, context=limit_context, concurrency=n)))
                                for n in concurrencies),
        offers=tuple(o for o in catalog.offers if result.best and o.gpu == result.best.gpu),
        binding=binding_constraints(result, scenario),
        catalog_counts={"gpus": len(catalog.gpus), "models": len(catalog.models),
                        "precisions": len(catalog.precisions), "offers": len(catalog.offers)},
    )
