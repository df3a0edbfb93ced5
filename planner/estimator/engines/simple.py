"""The seed's planning margin (memory.estimate_memory) seen through the engine interface.

There is no engine here: the card holds weights + KV + max(margin x (weights + KV), CUDA context), so the KV
pool on a rank is the largest KV that keeps that sum within the card.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from math import floor

from planner.model.architecture import Architecture
from planner.catalog.load import Catalog
from planner.estimator.engines.base import EngineBudget, EngineSettings, RankBudget, largest_passing, limiting_rank
from planner.estimator.engines.registry import Engine
from planner.estimator.memory import GpuTarget, MemoryEstimate, RankMemory, Request, estimate_memory

RELEASE = "planning margin (catalogs/engines.yaml 'simple')"


def _pool(rank: RankMemory, card: int, margin: Fraction, reserve: int) -> int:
    """Largest KV with weights + KV + max(margin x (weights + KV), reserve) <= card."""
    with_margin = floor(card / (1 + margin)) - rank.weights_bytes
    with_reserve = card - rank.weights_bytes - reserve
    return max(0, min(with_margin, with_reserve))


def _fits(arch: Architecture, request: Request, catalog: Catalog, gpu: GpuTarget) -> bool:
    return estimate_memory(arch, request, catalog, gpu, catalog.engines.get("simple")).gpu.fits


def simple_budget(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget,
                  catalog: Catalog) -> EngineBudget:
    estimate: MemoryEstimate = estimate_memory(arch, request, catalog, gpu, catalog.engines.get("simple"))
    margin = Fraction(str(estimate.overhead_fraction))
    # one sequence's cache on each rank: with data-parallel attention a rank caches its own group's requests only,
    # so one request in every group (batch = dp) gives it
    one_each = estimate if request.batch == request.dp else estimate_memory(
        arch, replace(request, batch=request.dp), catalog, gpu, catalog.engines.get("simple"))
    ranks = []
    for rank, one in zip(estimate.per_gpu, one_each.per_gpu):
        pool = _pool(rank, gpu.memory_bytes, margin, estimate.runtime_reserve_bytes)
        per_sequence = one.kv_cache_bytes
        ranks.append(RankBudget(
            rank=rank.rank, pp_stage=rank.pp_stage, layers=rank.last_layer - rank.first_layer,
            memory_bytes=gpu.memory_bytes, budget_bytes=gpu.memory_bytes, weights_bytes=rank.weights_bytes,
            activation_bytes=0, non_torch_bytes=rank.overhead_bytes, cuda_graph_bytes=0, kv_pool_bytes=pool,
            kv_capacity_tokens=pool * request.context // per_sequence if per_sequence else 0,
        ))
    limit = limiting_rank(tuple(ranks))
    concurrency = request.dp * limit.kv_capacity_tokens / request.context  # every group's pool
    one = replace(request, batch=1)
    fits_one = _fits(arch, one, catalog, gpu)
    longest = None if fits_one else largest_passing(1, request.context, lambda n: _fits(arch, replace(one, context=n), catalog, gpu))
    message = None
    if not estimate.gpu.fits:
        message = estimate.warnings[0] if estimate.warnings else "does not fit"
    return EngineBudget(
        name="simple", release=RELEASE, gpu_memory_utilization=None, budget_bytes=gpu.memory_bytes,
        weights_bytes=limit.weights_bytes, activation_bytes=0, non_torch_bytes=limit.non_torch_bytes, cuda_graph_bytes=0,
        kv_pool_bytes=limit.kv_pool_bytes, kv_cache_capacity_tokens=limit.kv_capacity_tokens, max_concurrency=concurrency,
        fits=estimate.gpu.fits, max_context_that_fits=longest, message=message, context=request.context,
        batch=request.batch, settings=settings, per_rank=tuple(ranks), warnings=estimate.warnings,
    )


# no engine: the card's memory less the margin; plans made with it export with vLLM's defaults
ENGINE = Engine("simple", simple_budget, None, sized_by_planning_margin=True, expert_parallel="any",
                sizes_expert_parallel=True, all_to_all_backends=("deepep",))
