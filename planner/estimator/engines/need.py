"""What a card must hold for a batch under an engine's rules, and why not when it does not: the one check
the candidate search, the fleet and the re-check of every printed plan share.

vLLM and SGLang size one KV pool from the card at start-up and admit sequences into it, so the pool is
computed once per layout and context (batch 1) and a batch fits when the pool holds it (and, in vLLM,
when the scheduler may run that many: max_num_seqs). llama.cpp allocates n_ctx = context x --parallel
cells up front, so its budget is computed at the batch itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.catalog.load import Catalog
from planner.estimator.engines import EngineBudget, EngineSettings, engine_budget
from planner.estimator.engines.base import engine_refusal, estimate_once
from planner.estimator.engines.registry import engine
from planner.estimator.memory import GpuTarget, Request
from planner.model.architecture import Architecture


@dataclass(frozen=True)
class EngineNeed:
    fits: bool
    used_bytes: int  # on the fullest GPU: weights, activation peak, non-torch, the share left unused, the batch's KV
    budget: EngineBudget | None  # None when the engine cannot size the model at all
    reason: str | None  # why it does not fit (None when it fits)

    def headroom_bytes(self, card_bytes: int) -> int:
        return card_bytes - self.used_bytes


Budgets = dict[tuple, tuple[EngineBudget, int]]


def _budget_key(request: Request, settings: EngineSettings, gpu: GpuTarget) -> tuple[GpuTarget, Request, EngineSettings]:
    """What the engine's pool depends on: the request as the engine sizes it (vLLM and SGLang: one sequence), without
    the planning margin an engine profile does not read."""
    described = engine(settings.name)
    sized = request if described.cache_sized_by_batch else replace(request, batch=1)
    if not described.sized_by_planning_margin:
        sized = replace(sized, overhead_fraction=None)
    return gpu, sized, settings


def known_budget(budgets: Budgets, request: Request, settings: EngineSettings, gpu: GpuTarget) -> EngineBudget | None:
    """The pool engine_need already sized for `request` (sharing `budgets`), None when it did not."""
    cached = budgets.get(_budget_key(request, settings, gpu))
    return cached[0] if cached is not None else None


def engine_need(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget, catalog: Catalog,
                budgets: Budgets | None = None) -> EngineNeed:
    """Does `request.batch` sequences of `request.context` fit the engine on `gpu`? `budgets` (a dict the caller
    keeps) shares the pool of one layout and context across batches."""
    refusal = engine_refusal(arch, settings.name)
    if refusal:
        return EngineNeed(False, gpu.memory_bytes + 1, None, refusal)
    key = _budget_key(request, settings, gpu)
    sized = key[1]
    cached = budgets.get(key) if budgets is not None else None
    if cached is None:
        one = estimate_once(arch, replace(request, batch=1), catalog)
        cached = (engine_budget(arch, sized, settings, gpu, catalog), max(r.kv_cache_bytes for r in one.per_gpu))
        if budgets is not None:
            budgets[key] = cached
    budget, kv_per_sequence = cached
    batch, context = request.batch, request.context
    reserved = gpu.memory_bytes - budget.budget_bytes  # what the engine leaves unused (1 - utilization)
    described = engine(settings.name)
    if described.workspace == "outside":
        workspace = 0
    elif described.workspace == "remainder":
        workspace = budget.budget_bytes - budget.weights_bytes - budget.kv_pool_bytes
    else:
        workspace = budget.activation_bytes + budget.non_torch_bytes
    # with data-parallel attention a GPU caches only its group's share of the batch (the first groups one more)
    used = budget.weights_bytes + workspace + reserved + -(-batch // request.dp) * kv_per_sequence
    max_seqs = budget.settings.max_num_seqs
    # the requests the engine's own limit lets run at once (SGLang: each DP worker's max_running_requests or state slots)
    running = request.dp * budget.layout.running_requests if budget.layout and budget.layout.running_requests else None
    if not budget.fits:
        reason = budget.message or f"one sequence of {context:,} tokens does not fit {settings.name}'s KV pool"
    elif running is not None and running < batch and budget.max_concurrency >= running:
        reason = (f"{settings.name} runs at most {running:,} requests at once ({budget.layout.running_limit}), "  # type: ignore[union-attr]
                  f"not {batch:,}")
    elif budget.max_concurrency < batch:
        reason = (f"{settings.name}'s KV pool holds {budget.max_concurrency:,.2f} sequences of {context:,} tokens, "
                  f"not {batch:,}")
    elif described.scheduler_caps_sequences and max_seqs and batch > max_seqs:
        reason = f"{settings.name} runs at most max_num_seqs = {max_seqs:,} sequences at once, not {batch:,}"
    else:
        reason = None
    return EngineNeed(reason is None, used, budget, reason)


__all__ = ["Budgets", "EngineNeed", "engine_need", "known_budget"]
