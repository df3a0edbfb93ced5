"""Scenario -> search space -> replica configurations that fit -> rentals that can be priced.

A candidate is one replica configuration (GPU type, TP x PP, precision, KV dtype, context,
concurrency) that the estimator says fits every GPU it uses. A rental prices `replicas` copies
of a candidate on one rentable shape (provider instance, region, market): replicas smaller than
the shape share it; larger replicas span whole instances as pipeline stages (TP stays inside a
node, where NVLink is).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil

from planner.model.architecture import Architecture
from planner.catalog.load import Catalog, Gpu, Offer, Precision
from planner.errors import PlannerInputError
from planner.model.sources import resolve_model
from planner.estimator.engines import EngineBudget, EngineSettings, engine_budget
from planner.estimator.memory import GpuFit, GpuTarget, MemoryEstimate, Request, estimate_memory
from planner.model.precision import resolve_kv_dtype, resolve_precision
from planner.plan.scenario import Scenario, model_reference, quality_at_least
from planner.units import parse_count

# Money inside the solver is integer hundredths of a cent per hour: exact for every catalog price.
COST_UNITS_PER_USD = 10_000
# A replica spans several instances only when each is a full multi-GPU node (HGX/DGX-class servers,
# which clouds interconnect with InfiniBand / EFA for multi-node serving); an assumption, not a price.
MIN_GPUS_PER_NODE_ACROSS_NODES = 8
# Each configuration costs an estimate (about 1-3 ms here): 200,000 keeps a solve under a few minutes.
MAX_CONFIGURATIONS = 200_000


@dataclass(frozen=True)
class SearchSpace:
    arch: Architecture
    model_id: str  # what an engine loads: the catalog's HF id, or the config path given
    model_precision: str | None  # the checkpoint's own precision
    gpus: tuple[Gpu, ...]
    precisions: tuple[Precision, ...]
    kv_dtypes: tuple[str, ...]
    contexts: tuple[int, ...]
    concurrencies: tuple[int, ...]
    replicas: int
    max_gpus_per_replica: int
    max_gpus_per_node: int | None
    offers: tuple[tuple[Offer, str], ...]  # (offer, market) pairs allowed by the pricing section
    overhead: float | None
    allow_emulated: bool
    engine: EngineSettings | None = None  # None: the seed's margin (engine "simple")


@dataclass(frozen=True)
class Candidate:
    gpu: Gpu
    tp: int
    pp: int
    precision: str
    kv_dtype: str
    context: int
    concurrency: int
    fullest_gpu_bytes: int  # the largest per-GPU total across the replica's ranks

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def headroom_bytes(self) -> int:
        return self.gpu.memory_bytes - self.fullest_gpu_bytes


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


@dataclass(frozen=True)
class Rejection:
    """A configuration the estimator refused, with the cheapest way it would have been rented."""

    gpu: str
    tp: int
    pp: int
    precision: str
    kv_dtype: str
    context: int
    concurrency: int
    needed_bytes: int  # on the fullest GPU
    card_bytes: int
    usd_per_hour: float | None

    @property
    def overshoot(self) -> float:
        return self.needed_bytes / self.card_bytes


@dataclass(frozen=True)
class Enumeration:
    candidates: tuple[Candidate, ...]
    rejections: tuple[Rejection, ...]
    configurations_checked: int
    skipped: tuple[str, ...] = field(default_factory=tuple)  # why some GPUs were left out


# --------------------------------------------------------------------------------------------
# Scenario -> search space


def _names(values: list[str], registry, key: str) -> list:
    out = []
    for i, name in enumerate(values):
        try:
            out.append(registry.get(name))
        except PlannerInputError as exc:
            raise PlannerInputError(f"{key}[{i}]: {exc}") from None
    return out


def build_search_space(scenario: Scenario, catalog: Catalog) -> SearchSpace:
    params = parse_count(str(scenario.params), "params") if scenario.params is not None else None
    try:
        arch = resolve_model(catalog, model_reference(scenario), params)
    except PlannerInputError as exc:
        raise PlannerInputError(f"model: {exc}") from None
    search, pricing = scenario.search, scenario.pricing
    own = resolve_precision(catalog, arch, "auto")

    if search.precisions is not None:
        precisions = _names(search.precisions, catalog.precisions, "search.precisions")
    else:
        precisions = [p for p in catalog.precisions if p.serving_default or p.name == own.name]
        precisions = [p for p in precisions if quality_at_least(p.quality, search.quality_floor)]
    precisions = [p for p in precisions if not (p.scope == "experts" and arch.moe is None)]
    if not precisions:
        raise PlannerInputError(f"search.quality_floor: no precision is {search.quality_floor} or better for this model; lower the floor or list search.precisions")

    kv_dtypes = []
    for i, kv in enumerate(search.kv_dtypes):
        if kv.lower() != "auto":
            try:
                kv = catalog.kv_dtypes.get(kv).name
            except PlannerInputError as exc:
                raise PlannerInputError(f"search.kv_dtypes[{i}]: {exc}") from None
        kv_dtypes.append(kv.lower())

    markets = ("on-demand", "spot") if pricing.market == "any" else (pricing.market,)
    providers = {p.lower() for p in pricing.providers} if pricing.providers is not None else None
    known_providers = {o.provider for o in catalog.offers}
    for i, provider in enumerate(sorted(providers or ())):
        if provider not in known_providers:
            raise PlannerInputError(f"pricing.providers: unknown provider {provider!r}; known: {', '.join(sorted(known_providers))}")
    regions = {r.lower() for r in pricing.regions} if pricing.regions is not None else None

    excluded = {g.name for g in _names(search.exclude_gpus, catalog.gpus, "search.exclude_gpus")}
    if search.gpus is not None:
        gpus = [g for g in _names(search.gpus, catalog.gpus, "search.gpus") if g.name not in excluded]
    else:
        priced = {o.gpu for o in catalog.offers}
        gpus = [g for g in catalog.gpus if g.name in priced and g.name not in excluded]
    gpu_names = {g.name for g in gpus}
    offers = tuple(
        (o, market) for o in catalog.offers for market in markets
        if o.gpu in gpu_names and o.price(market) is not None
        and (providers is None or o.provider in providers)
        and (regions is None or o.region.lower() in regions)
    )
    reference = model_reference(scenario)
    try:
        model_id = catalog.models.get(reference).hf_id
    except PlannerInputError:
        model_id = reference
    return SearchSpace(
        arch=arch, model_id=model_id, model_precision=own.name if arch.exact else None, gpus=tuple(gpus), precisions=tuple(precisions), kv_dtypes=tuple(dict.fromkeys(kv_dtypes)),
        contexts=scenario.workload.context, concurrencies=scenario.workload.concurrency,
        replicas=scenario.workload.replicas, max_gpus_per_replica=search.max_gpus_per_replica,
        max_gpus_per_node=search.max_gpus_per_node, offers=offers, overhead=scenario.engine.overhead,
        allow_emulated=search.allow_emulated, engine=engine_settings(scenario),
    )


def engine_settings(scenario: Scenario) -> EngineSettings | None:
    spec = scenario.engine
    if spec.name == "simple":
        return None
    return EngineSettings(spec.name, gpu_memory_utilization=spec.gpu_memory_utilization,
                          max_num_batched_tokens=spec.max_num_batched_tokens, max_num_seqs=spec.max_num_seqs,
                          mem_fraction_static=spec.mem_fraction_static)


# --------------------------------------------------------------------------------------------
# Parallel layouts


def node_size(gpu: Gpu, space: SearchSpace) -> int:
    return min(gpu.gpus_per_node, space.max_gpus_per_node or gpu.gpus_per_node)


def parallel_layouts(arch: Architecture, gpu: Gpu, space: SearchSpace) -> list[tuple[int, int]]:
    """(tp, pp) splits to try: TP inside one node; PP only to go beyond a full node (across nodes)."""
    node = node_size(gpu, space)
    kv_heads = {layer.attention.kv_heads for layer in arch.layers if layer.attention.kind in ("full", "sliding")}
    heads = arch.num_attention_heads

    def tp_ok(tp: int) -> bool:
        return heads % tp == 0 and all(tp % kv == 0 or kv % tp == 0 for kv in kv_heads if kv)

    tps = [tp for tp in range(1, node + 1) if tp_ok(tp) and tp <= space.max_gpus_per_replica]
    if not arch.exact:
        tps = [tp for tp in tps if tp & (tp - 1) == 0]  # a size-only model: power-of-two splits
    layouts = [(tp, 1) for tp in tps]
    if tps:
        widest = max(tps)
        for pp in range(2, min(arch.num_layers, space.max_gpus_per_replica // widest) + 1):
            layouts.append((widest, pp))
    return layouts


def rent(gpus_per_replica: int, tp: int, replicas: int, offer: Offer, market: str) -> Rental | None:
    """How `replicas` replicas of `gpus_per_replica` GPUs are rented on one shape, or None if they can't be."""
    price = offer.price(market)
    if price is None:
        return None
    k = offer.gpus
    if gpus_per_replica <= k:
        per_instance = k // gpus_per_replica
        instances = ceil(replicas / per_instance)
    else:
        if tp > k or k % tp:
            return None  # a TP group must sit inside one instance
        if k < MIN_GPUS_PER_NODE_ACROSS_NODES:
            return None  # single-GPU rentals are not networked for pipeline stages; whole nodes are
        per_instance = 0
        instances = replicas * ceil(gpus_per_replica / k)
    return Rental(offer, market, instances, per_instance, instances * price,
                  instances * k - replicas * gpus_per_replica)


# --------------------------------------------------------------------------------------------
# Candidates


def _runs_natively(precision: Precision, gpu: Gpu) -> bool:
    return not precision.native or gpu.generation in precision.native


def enumerate_candidates(space: SearchSpace, catalog: Catalog) -> Enumeration:
    """Every configuration in the search space, estimated once per layout and checked on each GPU."""
    arch = space.arch
    size = (sum(len(parallel_layouts(arch, gpu, space)) for gpu in space.gpus) * len(space.precisions)
            * len(space.kv_dtypes) * len(space.contexts) * len(space.concurrencies))
    if size > MAX_CONFIGURATIONS:
        raise PlannerInputError(
            f"search: {size:,} configurations to estimate (limit {MAX_CONFIGURATIONS:,}); narrow workload.context or "
            "workload.concurrency (fewer values or a smaller range), search.gpus, search.precisions, "
            "search.kv_dtypes or search.max_gpus_per_replica"
        )
    candidates: list[Candidate] = []
    rejections: list[Rejection] = []
    skipped: list[str] = []
    checked = 0
    estimates: dict[tuple, MemoryEstimate] = {}
    budgets: dict[tuple, tuple[EngineBudget | None, int]] = {}
    cheapest = _cheapest_rental_by_gpu(space)
    seen: set[tuple] = set()
    for gpu in space.gpus:
        precisions = [p for p in space.precisions if space.allow_emulated or _runs_natively(p, gpu)]
        if not precisions:
            skipped.append(f"{gpu.name}: none of the allowed precisions runs natively on {gpu.generation} "
                           "(set search.allow_emulated: true to allow emulation)")
            continue
        for tp, pp in parallel_layouts(arch, gpu, space):
            for precision in precisions:
                for kv_choice in space.kv_dtypes:
                    kv = resolve_kv_dtype(arch, precision, kv_choice)
                    for context in space.contexts:
                        for concurrency in space.concurrencies:
                            key = (tp, pp, precision.name, kv, context, concurrency)
                            if (gpu.name, key) in seen:  # "auto" resolved to a KV dtype also listed
                                continue
                            seen.add((gpu.name, key))
                            checked += 1
                            if space.engine is not None:
                                fullest = _engine_need(space, catalog, gpu, tp, pp, precision.name, kv, context,
                                                       concurrency, budgets)
                            else:
                                est = estimates.get(key)
                                if est is None:
                                    est = estimate_memory(arch, Request(context=context, batch=concurrency, tp=tp,
                                                                        pp=pp, precision=precision.name, kv_dtype=kv,
                                                                        overhead_fraction=space.overhead), catalog)
                                    estimates[key] = est
                                fullest = max(r.total_bytes for r in est.per_gpu)
                            if fullest <= gpu.memory_bytes:
                                candidates.append(Candidate(gpu, tp, pp, precision.name, kv, context, concurrency, fullest))
                            elif context == space.contexts[0] and concurrency == space.concurrencies[0]:
                                rejections.append(Rejection(gpu.name, tp, pp, precision.name, kv, context, concurrency,
                                                            fullest, gpu.memory_bytes, cheapest.get((gpu.name, tp * pp, tp))))
    return Enumeration(tuple(candidates), tuple(rejections), checked, tuple(skipped))


def _engine_need(space: SearchSpace, catalog: Catalog, gpu: Gpu, tp: int, pp: int, precision: str, kv: str,
                 context: int, concurrency: int, budgets: dict[tuple, tuple[EngineBudget | None, int]]) -> int:
    """What the card must hold for `concurrency` sequences of `context` under the engine's rules: its non-KV
    memory (weights, activation peak, non-torch), the KV of those sequences, and the share the engine leaves
    unused (1 - gpu_memory_utilization). Above the card when they don't fit; computed once per layout and
    context, since the pool and max concurrency cover every batch."""
    key = (gpu.name, tp, pp, precision, kv, context)
    if key not in budgets:
        request = Request(context=context, batch=1, tp=tp, pp=pp, precision=precision, kv_dtype=kv)
        one = estimate_memory(space.arch, request, catalog)
        kv_per_sequence = max(r.kv_cache_bytes for r in one.per_gpu)
        try:
            budget = engine_budget(space.arch, request, space.engine, GpuTarget.from_catalog(gpu), catalog)
        except PlannerInputError:
            budget = None  # e.g. recurrent layers the engine profiles do not size: treated as not fitting
        budgets[key] = (budget, kv_per_sequence)
    budget, kv_per_sequence = budgets[key]
    if budget is None:
        return gpu.memory_bytes + 1
    reserved = gpu.memory_bytes - budget.budget_bytes
    need = (budget.weights_bytes + budget.activation_bytes + budget.non_torch_bytes + reserved
            + concurrency * kv_per_sequence)
    max_seqs = budget.settings.max_num_seqs
    fits = budget.fits and budget.max_concurrency >= concurrency and not (max_seqs and concurrency > max_seqs)
    return min(need, gpu.memory_bytes) if fits else max(need, gpu.memory_bytes + 1)


def _cheapest_rental_by_gpu(space: SearchSpace) -> dict[tuple[str, int, int], float]:
    out: dict[tuple[str, int, int], float] = {}
    for gpu in space.gpus:
        for tp, pp in parallel_layouts(space.arch, gpu, space):
            prices = [r.usd_per_hour for o, m in space.offers if o.gpu == gpu.name
                      if (r := rent(tp * pp, tp, space.replicas, o, m)) is not None]
            if prices:
                out[(gpu.name, tp * pp, tp)] = min(prices)
    return out


def rentals_for(candidate: Candidate, space: SearchSpace) -> list[Rental]:
    return [r for o, m in space.offers if o.gpu == candidate.gpu.name
            if (r := rent(candidate.gpus, candidate.tp, space.replicas, o, m)) is not None]


def recheck(candidate: Candidate, space: SearchSpace, catalog: Catalog) -> MemoryEstimate:
    """The verdict on a chosen configuration, on its GPU, from scratch: the plan is printed only if it fits.
    With an engine, the engine's own budget decides `gpu.fits` (the breakdown stays the estimator's)."""
    request = Request(context=candidate.context, batch=candidate.concurrency, tp=candidate.tp, pp=candidate.pp,
                      precision=candidate.precision, kv_dtype=candidate.kv_dtype, overhead_fraction=space.overhead)
    target = GpuTarget.from_catalog(candidate.gpu)
    estimate = estimate_memory(space.arch, request, catalog, target)
    if space.engine is None:
        return estimate
    budget = engine_budget(space.arch, request, space.engine, target, catalog)
    fits = budget.fits and budget.max_concurrency >= candidate.concurrency
    kv_needed = max(r.kv_cache_bytes for r in estimate.per_gpu)
    used = (budget.weights_bytes + budget.activation_bytes + budget.non_torch_bytes
            + (target.memory_bytes - budget.budget_bytes) + kv_needed)
    return replace(estimate, gpu=GpuFit(target.name, target.memory_bytes, fits, target.memory_bytes - used),
                   warnings=tuple(w for w in estimate.warnings if not w.startswith(("does not fit", "little headroom")))
                   + budget.warnings)
