"""Solving backwards with an engine's own arithmetic (planner/engines): for a model on a GPU type,
the largest context that fits, the most sequences at a context, and the fewest GPUs (with their TP x PP
split) that hold a context x concurrency.

Every answer is found by asking `engine_budget` whether a configuration fits; each question is monotone
(a longer context or more sequences never fit better, more GPUs never fit worse at the best split), so
the searches are galloping + bisection over that predicate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from planner.model.architecture import Architecture
from planner.catalog.load import Catalog
from planner.estimator.engines import ENGINE_NAMES, EngineBudget, EngineSettings, engine_budget
from planner.estimator.engines.base import catalog_card, largest_passing
from planner.errors import PlannerInputError
from planner.estimator.layout import ParallelLayout, layouts_on_gpus, node_gpus
from planner.estimator.memory import GpuTarget, Request
from planner.units import MAX_BATCH, MAX_CONTEXT

DEFAULT_MAX_GPUS = 64  # how far fewest_gpus searches


@dataclass(frozen=True)
class ContextFit:
    """The longest context `batch` sequences can each have; None when not even one token fits."""

    engine: str
    split: ParallelLayout
    batch: int
    context: int | None
    limit: int  # the longest context searched (the model's trained length, or what was asked)
    budget: EngineBudget | None  # the engine's budget at that context


@dataclass(frozen=True)
class SequencesFit:
    """The most sequences of `context` tokens held at once; 0 when not even one fits."""

    engine: str
    split: ParallelLayout
    context: int
    sequences: int
    budget: EngineBudget  # at one sequence: its max_concurrency and pool explain the answer


@dataclass(frozen=True)
class GpuCountFit:
    """The fewest GPUs (and the split) holding `batch` sequences of `context`; split None when none up to max_gpus do."""

    engine: str
    context: int
    batch: int
    split: ParallelLayout | None
    budget: EngineBudget | None
    max_gpus: int


@dataclass(frozen=True)
class EngineFit:
    engine: str
    largest_context: ContextFit
    most_sequences: SequencesFit
    fewest_gpus: GpuCountFit


def gpus_per_node(gpu: GpuTarget, catalog: Catalog) -> int:
    """Tensor parallelism stays inside a node: the catalog card's node size."""
    return node_gpus(catalog_card(gpu, catalog))


def _gallop(passes: Callable[[int], bool], cap: int) -> int | None:
    """Largest n in [1, cap] with passes(n), for a monotone predicate, probing 1, 2, 4, ... then bisecting."""
    if not passes(1):
        return None
    low = 1
    while low < cap and passes(min(low * 2, cap)):
        low = min(low * 2, cap)
    if low == cap:
        return cap
    return largest_passing(low, min(low * 2, cap) - 1, passes)


def _budget(arch: Architecture, request: Request, split: ParallelLayout, settings: EngineSettings, gpu: GpuTarget,
            catalog: Catalog) -> EngineBudget:
    return engine_budget(arch, replace(request, tp=split.tp, pp=split.pp), settings, gpu, catalog)


def largest_context(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget, catalog: Catalog,
                    split: ParallelLayout, limit: int | None = None) -> ContextFit:
    """The longest context `request.batch` sequences fit at, up to `limit` (default: the model's trained length)."""
    limit = limit or arch.max_position_embeddings or request.context
    if not 1 <= limit <= MAX_CONTEXT:
        raise PlannerInputError(f"--context: the longest context to search must be between 1 and {MAX_CONTEXT:,}, got {limit:,}")

    def fits(context: int) -> bool:
        return _budget(arch, replace(request, context=context), split, settings, gpu, catalog).fits

    context = _gallop(fits, limit)
    budget = _budget(arch, replace(request, context=context), split, settings, gpu, catalog) if context else None
    return ContextFit(settings.name, split, request.batch, context, limit, budget)


def most_sequences(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget, catalog: Catalog,
                   split: ParallelLayout) -> SequencesFit:
    """The most sequences of `request.context` tokens the engine holds at once on this split."""

    def fits(batch: int) -> bool:
        return _budget(arch, replace(request, batch=batch), split, settings, gpu, catalog).fits

    sequences = _gallop(fits, MAX_BATCH) or 0
    budget = _budget(arch, replace(request, batch=1), split, settings, gpu, catalog)
    return SequencesFit(settings.name, split, request.context, sequences, budget)


def fewest_gpus(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget, catalog: Catalog,
                max_gpus: int = DEFAULT_MAX_GPUS) -> GpuCountFit:
    """The fewest GPUs holding `request.batch` sequences of `request.context`; at that count, the split with the
    most room (highest concurrency)."""
    node = gpus_per_node(gpu, catalog)
    for gpus in range(1, max_gpus + 1):
        checked = [(split, _budget(arch, request, split, settings, gpu, catalog))
                   for split in layouts_on_gpus(arch, gpus, settings.name, node)]
        fitting = [(split, budget) for split, budget in checked if budget.fits]
        if fitting:
            split, best = max(fitting, key=lambda pair: pair[1].max_concurrency)
            return GpuCountFit(settings.name, request.context, request.batch, split, best, max_gpus)
    return GpuCountFit(settings.name, request.context, request.batch, None, None, max_gpus)


def fit_engine(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget, catalog: Catalog,
               gpus: int | None = None, max_gpus: int = DEFAULT_MAX_GPUS) -> EngineFit:
    """`planner fit` for one engine: on `gpus` GPUs (default: request.tp x request.pp) the largest context of one
    request and the most sequences at request.context, each at the split that gives the most; and the fewest
    GPUs for request.batch sequences of request.context."""
    count = gpus or request.tp * request.pp
    candidates = layouts_on_gpus(arch, count, settings.name, gpus_per_node(gpu, catalog))
    if not candidates:
        raise PlannerInputError(f"--gpus: {arch.name} cannot be split over {count} GPUs (no TP x PP split divides its "
                                "attention heads and layers); try another count")
    one = replace(request, batch=1)
    contexts = [largest_context(arch, one, settings, gpu, catalog, split) for split in candidates]
    longest = max(contexts, key=lambda c: c.context or 0)
    sequences = [most_sequences(arch, request, settings, gpu, catalog, split) for split in candidates]
    most = max(sequences, key=lambda s: s.sequences)
    return EngineFit(settings.name, longest, most, fewest_gpus(arch, request, settings, gpu, catalog, max_gpus))


def fit_engines(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget, catalog: Catalog,
                gpus: int | None = None, engines: tuple[str, ...] = ENGINE_NAMES) -> tuple[EngineFit, ...]:
    """fit_engine for each engine, the shared flags applied to each (each engine reads only its own)."""
    return tuple(fit_engine(arch, request, replace(settings, name=name), gpu, catalog, gpus) for name in engines)


__all__ = ["ContextFit", "EngineFit", "GpuCountFit", "SequencesFit", "fewest_gpus", "fit_engine", "fit_engines",
           "gpus_per_node", "largest_context", "most_sequences"]
