"""Scenario -> search space -> replica configurations that fit -> rentals that can be priced.

A candidate is one replica configuration (GPU type, TP x PP, precision, KV dtype, context,
concurrency) that the estimator says fits every GPU it uses. A rental prices `replicas` copies
of a candidate on one rentable shape (provider instance, region, market): replicas smaller than
the shape share it; larger replicas span whole instances as pipeline stages (TP stays inside a
node, where NVLink is).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.catalog.load import Catalog, Gpu, Offer, Precision, quality_at_least
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings
from planner.estimator.engines.need import Budgets, engine_need
from planner.estimator.layout import node_gpus, searched_tensor_parallel_sizes
from planner.estimator.memory import GpuTarget, MemoryEstimate, Request, estimate_memory
from planner.model.architecture import Architecture
from planner.model.precision import resolve_kv_dtype, resolve_precision
from planner.model.sources import resolve_model
from planner.plan.configuration import SIMPLE_ENGINE, Configuration, ConfiguredBy, check_configuration
from planner.plan.rental import Rental, rent
from planner.plan.scenario import Scenario, model_reference
from planner.units import format_bytes, parse_count

# Each configuration costs an estimate (about 1-3 ms here): 200,000 keeps a solve under a few minutes.
MAX_CONFIGURATIONS = 200_000


@dataclass(frozen=True)
class SearchSpace:
    arch: Architecture
    model: str  # as given (a relative config path resolved against the scenario's folder)
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
    params: int | None = None  # the scenario's parameter count, for a model known by its size

    def configuration(self, gpu: Gpu, tp: int, pp: int, precision: str, kv_dtype: str, context: int,
                      concurrency: int, engine: EngineSettings | None = None) -> Configuration:
        """A configuration of this space's model; `engine`: the settings the engine resolved, when it did."""
        return Configuration(self.model, self.model_id, gpu.name, tp, pp, precision, kv_dtype, context, concurrency,
                             engine or self.engine or EngineSettings(SIMPLE_ENGINE),
                             self.overhead if self.engine is None else None, self.params)


@dataclass(frozen=True)
class Candidate(ConfiguredBy):
    """A configuration the estimator says fits every GPU it uses."""

    gpu: Gpu
    configuration: Configuration
    fullest_gpu_bytes: int  # the largest per-GPU total across the replica's ranks

    @property
    def gpus(self) -> int:
        return self.configuration.gpus

    @property
    def headroom_bytes(self) -> int:
        return self.gpu.memory_bytes - self.fullest_gpu_bytes


@dataclass(frozen=True)
class Rejection(ConfiguredBy):
    """A configuration the estimator refused, why, and the cheapest way it would have been rented."""

    configuration: Configuration
    needed_bytes: int  # on the fullest GPU
    card_bytes: int
    usd_per_hour: float | None
    reason: str

    @property
    def gpu(self) -> str:
        return self.configuration.gpu

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
        arch=arch, model=reference, model_id=model_id, model_precision=own.name if arch.exact else None, gpus=tuple(gpus), precisions=tuple(precisions), kv_dtypes=tuple(dict.fromkeys(kv_dtypes)),
        contexts=scenario.workload.context, concurrencies=scenario.workload.concurrency,
        replicas=scenario.workload.replicas, max_gpus_per_replica=search.max_gpus_per_replica,
        max_gpus_per_node=search.max_gpus_per_node, offers=offers, overhead=scenario.engine.overhead,
        allow_emulated=search.allow_emulated, engine=engine_settings(scenario), params=params,
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


def parallel_layouts(arch: Architecture, gpu: Gpu, space: SearchSpace) -> list[tuple[int, int]]:
    """(tp, pp) splits to try: TP inside one node; PP only to go beyond a full node (across nodes)."""
    tps = searched_tensor_parallel_sizes(arch, node_gpus(gpu, space.max_gpus_per_node), space.max_gpus_per_replica)
    layouts = [(tp, 1) for tp in tps]
    if tps:
        widest = max(tps)
        for pp in range(2, min(arch.num_layers, space.max_gpus_per_replica // widest) + 1):
            layouts.append((widest, pp))
    return layouts


# --------------------------------------------------------------------------------------------
# Candidates


def _runs_natively(precision: Precision, gpu: Gpu) -> bool:
    return not precision.native or gpu.generation in precision.native


def configuration_count(space: SearchSpace) -> int:
    """How many configurations enumerate_candidates would estimate (at most; "auto" KV may repeat one)."""
    return (sum(len(parallel_layouts(space.arch, gpu, space)) for gpu in space.gpus) * len(space.precisions)
            * len(space.kv_dtypes) * len(space.contexts) * len(space.concurrencies))


def enumerate_candidates(space: SearchSpace, catalog: Catalog, longest_context: bool = False) -> Enumeration:
    """Every configuration in the search space, estimated once per layout and checked on each GPU.
    `longest_context`: of each layout, precision, KV dtype and concurrency, only the longest context that fits
    (tried longest first), as a fleet replica runs."""
    arch = space.arch
    size = configuration_count(space)
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
    budgets: Budgets = {}
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
                    fitted: set[int] = set()  # concurrencies a longer context fits (longest_context)
                    for context in sorted(space.contexts, reverse=True) if longest_context else space.contexts:
                        for concurrency in space.concurrencies:
                            key = (tp, pp, precision.name, kv, context, concurrency)
                            if (gpu.name, key) in seen or concurrency in fitted:  # seen: "auto" resolved to a KV
                                continue  # dtype also listed
                            seen.add((gpu.name, key))
                            checked += 1
                            found = _check(space, catalog, gpu, key, estimates, budgets)
                            if isinstance(found, Candidate):
                                candidates.append(found)
                                if longest_context:
                                    fitted.add(concurrency)
                            elif context == space.contexts[0] and concurrency == space.concurrencies[0]:
                                configuration, needed, reason = found
                                rejections.append(Rejection(configuration, needed, gpu.memory_bytes,
                                                            cheapest.get((gpu.name, tp * pp, tp)), reason))
    return Enumeration(tuple(candidates), tuple(rejections), checked, tuple(skipped))


def _check(space: SearchSpace, catalog: Catalog, gpu: Gpu, key: tuple, estimates: dict[tuple, MemoryEstimate],
           budgets: Budgets) -> Candidate | tuple[Configuration, int, str]:
    """One configuration on one card: a candidate, or (the configuration, what its fullest GPU needs, why not).
    With an engine, its own rules decide (engine_need); with the planning margin, the estimate's total.
    Estimates and engine pools are shared across cards and batches through the two caches."""
    tp, pp, precision, kv, context, concurrency = key
    card = gpu.memory_bytes
    if space.engine is not None:
        request = Request(context=context, batch=concurrency, tp=tp, pp=pp, precision=precision, kv_dtype=kv)
        need = engine_need(space.arch, request, space.engine, GpuTarget.from_catalog(gpu), catalog, budgets)
        if need.fits:  # a plan keeps the settings the engine resolved for it; a refusal, the settings asked for
            configuration = space.configuration(gpu, tp, pp, precision, kv, context, concurrency, need.budget.settings)
            return Candidate(gpu, configuration, min(need.used_bytes, card))
        configuration = space.configuration(gpu, tp, pp, precision, kv, context, concurrency)
        return configuration, max(need.used_bytes, card + 1), need.reason or "does not fit"
    configuration = space.configuration(gpu, tp, pp, precision, kv, context, concurrency)
    est = estimates.get(key)
    if est is None:
        est = estimates[key] = estimate_memory(space.arch, configuration.request(), catalog)
    fullest = max(r.total_bytes for r in est.per_gpu)
    if fullest <= card:
        return Candidate(gpu, configuration, fullest)
    return configuration, fullest, f"needs {format_bytes(fullest)} per GPU; {gpu.name} holds {format_bytes(card)}"


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
    """The verdict on a chosen configuration, on its GPU, from scratch: the plan is printed only if it fits."""
    return check_configuration(space.arch, candidate.configuration, GpuTarget.from_catalog(candidate.gpu), catalog)
