"""Scenario -> search space -> replica configurations that fit -> rentals that can be priced.

A candidate is one replica configuration (GPU type, TP x PP, precision, KV dtype, context,
concurrency) that the estimator says fits every GPU it uses. A rental prices `replicas` copies
of a candidate on one rentable shape (provider instance, region, market): replicas smaller than
the shape share it; larger replicas span whole instances as pipeline stages (TP stays inside a
node, where NVLink is).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Callable

from planner.catalog.load import Catalog, Gpu, Offer, Precision, quality_at_least
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings
from planner.estimator.engines.need import Budgets, EngineNeed, engine_need
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.engines.registry import engine as described, resolve_engine_kv_dtype
from planner.estimator.layout import ParallelLayout, expert_layouts, node_gpus, searched_tensor_parallel_sizes
from planner.estimator.memory import DEEPEP_CONFIGS, GpuTarget, MemoryEstimate, estimate_memory
from planner.model.architecture import Architecture
from planner.model.precision import resolve_precision
from planner.model.sources import resolve_model
from planner.estimator.speculative import SPECULATIVE_ENGINES, Speculation, scenario_speculation
from planner.plan.configuration import (SIMPLE_ENGINE, Configuration, ConfiguredBy, check_configuration, loaded_model_id,
                                        served_architecture)
from planner.plan.deadline import NO_DEADLINE, Deadline
from planner.plan.rental import Rental, rent
from planner.plan.scenario import Scenario, model_reference
from planner.units import format_bytes, gb, parse_count

if TYPE_CHECKING:
    from planner.estimator.performance import PerformanceCatalog, ReplicaTimer
    from planner.estimator.speculative import SpeculativeTimer

# The largest search space accepted (every value x every layout). Set when every configuration cost an estimate
# (about 1-3 ms here); the search now estimates a few per group (bisection) and stops at the deadline, so this
# only refuses, up front and with what to narrow, a space no time limit would cover.
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
    max_price_age_days: int  # pricing.max_price_age_days: a price older than this is stale
    overhead: float | None
    allow_emulated: bool
    engine: EngineSettings | None = None  # None: the seed's margin (engine "simple")
    params: int | None = None  # the scenario's parameter count, for a model known by its size
    min_tokens_per_s: float | None = None  # workload.min_tokens_per_s: a replica's output tokens/s at the full context
    expert_parallel: bool = False  # search.layouts has dp_ep: data-parallel attention and expert parallelism too
    all_to_all: tuple[str | None, ...] = (None,)  # search.all_to_all: the backends dp_ep layouts are searched with
    # search.speculative: None (no speculative decoding) and/or the MTP setting, searched on one pipeline stage
    speculations: tuple[Speculation | None, ...] = (None,)
    # workload.concurrency as the scenario gave it: the most requests a fleet's replica may run at once (None: the
    # key left out, the engine's own limits alone)
    batch_cap: int | None = None
    acceptance_source: str | None = None  # where the MTP setting's acceptance length comes from

    @cached_property
    def drafted(self) -> Architecture:
        """The model with its MTP module's layer: what the GPUs hold with speculative decoding on."""
        return served_architecture(self.arch, self.speculations[-1])

    def served(self, speculation: Speculation | None) -> Architecture:
        return self.arch if speculation is None else self.drafted

    def configuration(self, gpu: Gpu, layout: ParallelLayout, precision: str, kv_dtype: str, context: int,
                      concurrency: int, engine: EngineSettings | None = None,
                      speculation: Speculation | None = None) -> Configuration:
        """A configuration of this space's model; `engine`: the settings the engine resolved, when it did."""
        return Configuration(self.model, self.model_id, gpu.name, layout.tp, layout.pp, precision, kv_dtype, context,
                             concurrency, engine or self.engine or EngineSettings(SIMPLE_ENGINE),
                             self.overhead if self.engine is None else None, self.params, layout.dp, layout.ep,
                             layout.all_to_all, speculation)


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
class TooSlow(ConfiguredBy):
    """A configuration that fits but whose replica runs below workload.min_tokens_per_s, and the cheapest way it
    would have been rented."""

    configuration: Configuration
    output_tokens_per_s: float  # one replica, `concurrency` requests each holding the whole context
    usd_per_hour: float | None

    @property
    def gpu(self) -> str:
        return self.configuration.gpu


@dataclass(frozen=True)
class Enumeration:
    candidates: tuple[Candidate, ...]
    rejections: tuple[Rejection, ...]
    configurations_checked: int
    skipped: tuple[str, ...] = field(default_factory=tuple)  # why some GPUs were left out
    cut_short: str | None = None  # what was searched when the deadline stopped the search
    # the engine pools the search sized, by card and request (replica sizing reads them back: need.known_budget)
    budgets: Budgets = field(default_factory=dict, compare=False, repr=False)
    too_slow: tuple[TooSlow, ...] = ()  # the configurations that fit but run below workload.min_tokens_per_s
    # the pools sized with the MTP draft's layer beside the model (another model's pools: _Probe.drafted_budgets)
    drafted_budgets: Budgets = field(default_factory=dict, compare=False, repr=False)

    def pools(self, speculation: Speculation | None) -> Budgets:
        """The engine pools the search sized for the model as served with `speculation`."""
        return self.budgets if speculation is None else self.drafted_budgets


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
        below = [p.name for p in precisions if not quality_at_least(p.quality, search.quality_floor)]
        if below and "quality_floor" in search.model_fields_set:  # the user said both: neither is dropped unsaid
            raise PlannerInputError(f"search.precisions: {', '.join(below)} below search.quality_floor "
                                    f"{search.quality_floor}; remove them or lower the floor")
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
        and (regions is None or o.region.lower() in regions) and o.kind in pricing.kinds
        and (o.term is None or o.term in pricing.terms)
    )
    reference = model_reference(scenario)
    engine = engine_settings(scenario)
    expert_parallel = "dp_ep" in search.layouts
    if expert_parallel:
        name = engine.name if engine is not None else SIMPLE_ENGINE
        if not described(name).sizes_expert_parallel:
            raise PlannerInputError(f"search.layouts: dp_ep: the {name} memory profile does not size data-parallel "
                                    "attention or expert parallelism yet; set engine.name: sglang (or simple)")
        if arch.moe is None:
            raise PlannerInputError(f"search.layouts: dp_ep: {arch.name} is a dense model (no routed experts to "
                                    "deal over GPUs); remove dp_ep")
    speculations: tuple[Speculation | None, ...] = (None,) if "none" in search.speculative else ()
    source = None
    if "mtp" in search.speculative:
        name = engine.name if engine is not None else SIMPLE_ENGINE
        if name not in SPECULATIVE_ENGINES:
            raise PlannerInputError(f"search.speculative: mtp is planned for engine.name {' or '.join(SPECULATIVE_ENGINES)} "
                                    f"(their MTP drafts are modelled and exported), not {name}; set engine.name or "
                                    "remove mtp")
        spec, source = scenario_speculation(arch, search.draft_tokens, search.acceptance_length)
        speculations += (spec,)
    return SearchSpace(
        arch=arch, model=reference, model_id=loaded_model_id(catalog, reference), model_precision=own.name if arch.exact else None, gpus=tuple(gpus), precisions=tuple(precisions), kv_dtypes=tuple(dict.fromkeys(kv_dtypes)),
        contexts=scenario.workload.context, concurrencies=scenario.workload.concurrency,
        replicas=scenario.workload.replicas, max_gpus_per_replica=search.max_gpus_per_replica,
        max_gpus_per_node=search.max_gpus_per_node, offers=offers, max_price_age_days=pricing.max_price_age_days,
        overhead=scenario.engine.overhead,
        allow_emulated=search.allow_emulated, engine=engine, params=params,
        min_tokens_per_s=scenario.workload.min_tokens_per_s, expert_parallel=expert_parallel,
        all_to_all=tuple(None if backend == "none" else backend for backend in search.all_to_all),
        speculations=speculations, acceptance_source=source,
        batch_cap=max(scenario.workload.concurrency) if "concurrency" in scenario.workload.model_fields_set else None,
    )


def engine_settings(scenario: Scenario) -> EngineSettings | None:
    spec = scenario.engine
    if spec.name == "simple":
        # the margin has no release, kernels or backend: a version, a MoE kernel or an attention backend is refused
        EngineSettings("simple", version=spec.version, moe_kernel=spec.moe_kernel,
                       attention_backend=spec.attention_backend, max_running_requests=spec.max_running_requests).validate()
        return None
    settings = EngineSettings(spec.name, gpu_memory_utilization=spec.gpu_memory_utilization,
                              max_num_batched_tokens=spec.max_num_batched_tokens, max_num_seqs=spec.max_num_seqs,
                              mem_fraction_static=spec.mem_fraction_static, kv_cache_memory=spec.kv_cache_memory,
                              version=load_profiles().versions(spec.name).resolve(spec.version, spec.name),
                              moe_kernel=spec.moe_kernel, attention_backend=spec.attention_backend,
                              max_running_requests=spec.max_running_requests)
    settings.validate()
    return settings


# --------------------------------------------------------------------------------------------
# Parallel layouts


def parallel_layouts(arch: Architecture, gpu: Gpu, space: SearchSpace) -> list[ParallelLayout]:
    """Splits to try: TP inside one node; PP only to go beyond a full node (across nodes); with search.layouts dp_ep,
    a MoE model's data-parallel attention and expert-parallel layouts as the engine runs them (expert_layouts; the
    DeepEP all-to-all only at the EP sizes DeepEP has configs for)."""
    node = node_gpus(gpu, space.max_gpus_per_node)
    tps = searched_tensor_parallel_sizes(arch, node, space.max_gpus_per_replica)
    layouts = [ParallelLayout(tp, 1) for tp in tps]
    if tps:
        widest = max(tps)
        for pp in range(2, min(arch.num_layers, space.max_gpus_per_replica // widest) + 1):
            layouts.append(ParallelLayout(widest, pp))
    if space.expert_parallel:
        engine = space.engine.name if space.engine is not None else SIMPLE_ENGINE
        layouts += [layout for layout in expert_layouts(arch, node, space.max_gpus_per_replica,
                                                        described(engine).expert_parallel or "any", space.all_to_all)
                    if layout.all_to_all is None or layout.ep in DEEPEP_CONFIGS]
    return layouts


# --------------------------------------------------------------------------------------------
# Candidates


def configuration_count(space: SearchSpace) -> int:
    """How many configurations enumerate_candidates would estimate (at most; "auto" KV may repeat one)."""
    return (sum(len(parallel_layouts(space.arch, gpu, space)) for gpu in space.gpus) * len(space.precisions)
            * len(space.kv_dtypes) * len(space.contexts) * len(space.concurrencies) * len(space.speculations))


def enumerate_candidates(space: SearchSpace, catalog: Catalog, deadline: Deadline = NO_DEADLINE,
                         cheapest_only: bool = False, longest_first: bool = False) -> Enumeration:
    """The preferred configuration that fits in each group of the search space (a GPU type, layout, precision and
    KV dtype), checked on the card. Groups are taken from the cheapest rental up; the search stops at the deadline.

    `cheapest_only`: for a plan priced per GPU type and provider (solve, its alternatives, compare), skip a group
    whose every rental costs more than a configuration already found to fit on the same GPU type and provider:
    nothing of it could be chosen. A fleet sizes replicas by capacity, not price alone, and searches everything.
    `longest_first`: check each group's longest context before bisecting (see _Probe.best_in_group); the same
    candidates and rejections, fewer configurations checked where most groups fit their longest context."""
    size = configuration_count(space)
    if size > MAX_CONFIGURATIONS:
        raise PlannerInputError(
            f"search: {size:,} configurations to estimate (limit {MAX_CONFIGURATIONS:,}); narrow workload.context or "
            "workload.concurrency (fewer values or a smaller range), search.gpus, search.precisions, "
            "search.kv_dtypes or search.max_gpus_per_replica"
        )
    prices = _rental_prices(space)
    groups, skipped = _groups(space, prices, catalog)
    candidates: list[Candidate] = []
    rejections: list[Rejection] = []
    too_slow: list[TooSlow] = []
    probe = _Probe(space, catalog, {key: min(usd for usd, _ in by.values()) for key, by in prices.items() if by})
    cheapest_fit: dict[tuple[str, str], int] = {}  # (GPU type, provider): cost units of the cheapest fit found
    cut_short = None
    for done, group in enumerate(groups):
        gpu, layout = group[:2]
        by_provider = prices.get(_rental_key(gpu, layout), {})
        if cheapest_only and by_provider and all(
                cost > cheapest_fit.get((gpu.name, provider), cost) for provider, (_, cost) in by_provider.items()):
            continue
        if cheapest_only and not by_provider and (candidates or deadline.expired()):
            break  # only layouts no offer rents are left (they come last): they would only say why nothing fits
        if probe.checked and deadline.expired():
            tried, types = {g[0].name for g in groups[:done]}, {g[0].name for g in groups}
            cut_short = (f"{probe.checked:,} configurations checked in {done:,} of {len(groups):,} groups "
                         f"(GPU type x layout x precision x KV dtype{' x speculative' * (len(space.speculations) > 1)}; "
                         f"{len(tried)} of {len(types)} GPU types tried)")
            break
        # a layout no offer rents is never chosen: its smallest point is checked only to say why it would not fit
        found = probe.best_in_group(*group, smallest_only=cheapest_only and not by_provider, longest_first=longest_first)
        if isinstance(found, Candidate) and (by_provider or not cheapest_only):
            speed = space.min_tokens_per_s and found.concurrency / full_context_step_s(found, space, catalog)
            if speed and speed < space.min_tokens_per_s:
                too_slow.append(TooSlow(found.configuration, speed, probe.cheapest.get(_rental_key(gpu, layout))))
                continue  # never chosen, so it bounds no other group's price
            candidates.append(found)
            for provider, (_, cost) in by_provider.items():
                cheapest_fit[gpu.name, provider] = min(cost, cheapest_fit.get((gpu.name, provider), cost))
        elif isinstance(found, Rejection):
            rejections.append(found)
    return Enumeration(tuple(candidates), tuple(rejections), probe.checked, tuple(skipped), cut_short, probe.budgets,
                       tuple(too_slow), probe.drafted_budgets)


def _rental_key(gpu: Gpu, layout: ParallelLayout) -> tuple[str, int, int]:
    """What a layout's rentals depend on: (GPU type, GPUs per replica, GPUs that must share a node)."""
    return gpu.name, layout.gpus, layout.node_group


def _groups(space: SearchSpace, prices: dict[tuple[str, int, int], dict[str, tuple[float, int]]], catalog: Catalog
            ) -> tuple[list[tuple[Gpu, ParallelLayout, Precision, str, Speculation | None]], list[str]]:
    """(GPU, layout, precision, KV dtype, speculative setting) to search, cheapest rental first (unpriced layouts
    last), and why GPUs were left out: a search the deadline cuts short has tried the cheapest replicas of every type.
    A precision the engine cannot run on a GPU is refused there (Catalog.support, with its source); one it runs only
    with weight-only kernels is searched unless search.allow_emulated is false."""
    engine = space.engine.name if space.engine is not None else SIMPLE_ENGINE
    kernel = space.engine.moe_kernel if space.engine is not None else None
    groups = []
    refused: dict[str, list[str]] = {}  # why, by the GPUs left with no precision for that reason
    for gpu in space.gpus:
        verdicts = [catalog.support(engine, p, gpu) for p in space.precisions]
        precisions = [p for p, v in zip(space.precisions, verdicts)
                      if v.runs and (space.allow_emulated or v.level != "weight-only")]
        if not precisions:
            for v in verdicts:
                why = (f"{v.engine} cannot run {v.precision} on {v.generation}: {v.source}" if not v.runs else
                       f"{v.engine} runs {v.precision} on {v.generation} only with weight-only kernels "
                       "(search.allow_emulated: true allows them)")
                refused.setdefault(why, []).append(gpu.name)
            continue
        if kernel is not None:  # the stated MoE kernel times the experts only where a table measures it
            from planner.estimator.performance import moe_kernel_refusal

            kernel_refusals = {p.name: moe_kernel_refusal(space.arch, p.name, gpu, catalog, engine, kernel,
                                                          release=space.engine.version) for p in precisions}
            for why in dict.fromkeys(why for why in kernel_refusals.values() if why):
                refused.setdefault(why, []).append(gpu.name)
            precisions = [p for p in precisions if kernel_refusals[p.name] is None]
            if not precisions:
                continue
        # "auto" may resolve to a KV dtype also listed: each is searched once; speculative decoding on one pipeline
        # stage (the speed model times its cycle there)
        groups += [(gpu, layout, precision, kv, spec) for layout in parallel_layouts(space.arch, gpu, space)
                   for precision in precisions
                   for kv in dict.fromkeys(resolve_engine_kv_dtype(engine, space.arch, precision, c)
                                           for c in space.kv_dtypes)
                   for spec in space.speculations if spec is None or layout.pp == 1]
    skipped = [f"{', '.join(gpus)}: {why}" for why, gpus in refused.items()]

    def cheapest(group: tuple) -> float:
        return min((usd for usd, _ in prices.get(_rental_key(*group[:2]), {}).values()), default=math.inf)

    return sorted(groups, key=cheapest), skipped


@dataclass
class _Probe:
    """Checks configurations one at a time, sharing estimates and engine pools across cards and batches."""

    space: SearchSpace
    catalog: Catalog
    cheapest: dict[tuple[str, int, int], float]
    checked: int = 0
    estimates: dict[tuple, MemoryEstimate] = field(default_factory=dict)
    budgets: Budgets = field(default_factory=dict)
    drafted_budgets: Budgets = field(default_factory=dict)  # the pools with the MTP draft's layer (another model)
    # (GPU type, layout, precision, speculative setting) of groups that refused even their shortest context (see
    # best_in_group)
    refused: set[tuple[str, ParallelLayout, str, Speculation | None]] = field(default_factory=set)

    def check(self, gpu: Gpu, key: tuple) -> Candidate | tuple[Configuration, int, str]:
        self.checked += 1
        return _check(self.space, self.catalog, gpu, key, self.estimates,
                      self.budgets if key[-1] is None else self.drafted_budgets)

    def best_in_group(self, gpu: Gpu, layout: ParallelLayout, precision: Precision, kv: str,
                      speculation: Speculation | None = None, smallest_only: bool = False,
                      longest_first: bool = False) -> Candidate | Rejection:
        """The longest context that fits, then the most concurrency at it; or why the smallest does not fit.

        Every other configuration of the group rents the same way, so costs the same, and the plan prefers a
        longer context, then more concurrency (solver.preference): it could never be chosen. A configuration
        needs at least the memory of any with a shorter context or fewer sequences, so what fits is found by
        bisection (tests/test_hostile.py checks it against trying every point). `longest_first`: the longest
        context is checked first, and when it fits it is the answer without the bisection: a fleet's replicas hold
        one request each, which most layouts fit at the longest context (70b-chat: 290 of 296 groups). Unless the
        group's other KV dtype already refused its shortest context on this card, layout and precision: then the
        shortest is likely refused too, and is checked first (the order of the checks only; 70b-chat: 468 -> 428)."""
        contexts, concurrencies = self.space.contexts, self.space.concurrencies
        sibling = (gpu.name, layout, precision.name, speculation)

        def at(i: int, j: int) -> Candidate | tuple[Configuration, int, str]:
            return self.check(gpu, (layout, precision.name, kv, contexts[i], concurrencies[j], speculation))

        def most_concurrency(i: int, first: Candidate) -> Candidate:
            return _last_fitting(lambda j: at(i, j), len(concurrencies), first)[1]

        searched = len(contexts)
        if longest_first and searched > 1 and sibling not in self.refused:
            longest = at(searched - 1, 0)
            if isinstance(longest, Candidate):
                return most_concurrency(searched - 1, longest)
            searched -= 1  # what fits is a prefix: the longest context is out
        smallest = at(0, 0)
        if not isinstance(smallest, Candidate):
            self.refused.add(sibling)
            configuration, needed, reason = smallest
            return Rejection(configuration, needed, gpu.memory_bytes, self.cheapest.get(_rental_key(gpu, layout)), reason)
        if smallest_only:
            return smallest
        i, best = _last_fitting(lambda i: at(i, 0), searched, smallest)
        return most_concurrency(i, best)


def _last_fitting(check: Callable[[int], Candidate | tuple], count: int, first: Candidate) -> tuple[int, Candidate]:
    """The last index of 0..count-1 that fits, given that 0 fits and that what fits is a prefix."""
    lo, hi, best = 0, count, first
    while hi - lo > 1:
        mid = (lo + hi) // 2
        found = check(mid)
        if isinstance(found, Candidate):
            lo, best = mid, found
        else:
            hi = mid
    return lo, best


def _check(space: SearchSpace, catalog: Catalog, gpu: Gpu, key: tuple, estimates: dict[tuple, MemoryEstimate],
           budgets: Budgets) -> Candidate | tuple[Configuration, int, str]:
    """One configuration on one card: a candidate, or (the configuration, what its fullest GPU needs, why not).
    With an engine, its own rules decide (engine_need); with the planning margin, the estimate's total.
    Estimates and engine pools are shared across cards and batches through the two caches."""
    layout, precision, kv, context, concurrency, speculation = key
    card = gpu.memory_bytes
    arch = space.served(speculation)
    if space.engine is not None:
        request = space.configuration(gpu, layout, precision, kv, context, concurrency).request()
        need = engine_need(arch, request, space.engine, GpuTarget.from_catalog(gpu), catalog, budgets)
        if need.fits:  # a plan keeps the settings the engine resolved for it; a refusal, the settings asked for
            configuration = space.configuration(gpu, layout, precision, kv, context, concurrency, need.budget.settings,
                                                speculation)
            return Candidate(gpu, configuration, min(need.used_bytes, card))
        configuration = space.configuration(gpu, layout, precision, kv, context, concurrency, speculation=speculation)
        # at least the weights: an engine's count of what it uses stops at the card when they alone outgrow it, and
        # the closest miss (Rejection.overshoot) is then the configuration with the least to hold
        weights = need.budget.weights_bytes if need.budget else 0
        return configuration, max(need.used_bytes, weights, card + 1), engine_refusal_reason(need, gpu, context)
    configuration = space.configuration(gpu, layout, precision, kv, context, concurrency, speculation=speculation)
    est = estimates.get(key)
    if est is None:
        est = estimates[key] = estimate_memory(arch, configuration.request(), catalog)
    fullest = max(r.total_bytes for r in est.per_gpu)
    if fullest <= card:
        return Candidate(gpu, configuration, fullest)
    return configuration, fullest, f"needs {format_bytes(fullest)} per GPU; {gpu.name} holds {format_bytes(card)}"


def engine_refusal_reason(need: EngineNeed, gpu: Gpu, context: int) -> str:
    """Why an engine refuses a configuration: the cause in planner's words first (what does not fit in what, per GPU),
    the engine's own message second. When the weights alone outgrow the card no setting of the engine's makes room,
    so its message (which advises raising gpu_memory_utilization) is left out."""
    budget, said = need.budget, need.reason or "does not fit"
    if budget is None or budget.fits:  # the engine cannot run the model, or the batch outgrows the scheduler or the
        return said  # pool: engine_need says so in planner's words
    weights, share, engine = budget.weights_bytes, budget.budget_bytes, budget.name
    if weights > gpu.memory_bytes:
        return f"weights {_gb(weights)} per GPU > the {gpu.name}'s {_gb(gpu.memory_bytes)}"
    if weights > share:
        cause = (f"weights {_gb(weights)} per GPU > the {_gb(share)} {engine} budgets of the "
                 f"{gpu.name}'s {_gb(gpu.memory_bytes)}")
    elif budget.max_context_that_fits:
        cause = (f"the KV pool left beside the weights ({_gb(budget.kv_pool_bytes)} per GPU) holds "
                 f"{budget.max_context_that_fits:,} tokens of one request, not {context:,}")
    else:
        cause = (f"the weights ({_gb(weights)} per GPU) and {engine}'s runtime leave no KV pool in the "
                 f"{_gb(share)} it budgets of the {gpu.name}'s {_gb(gpu.memory_bytes)}")
    return f"{cause}; {engine} says: {said}"


def _gb(n_bytes: int) -> str:
    return f"{gb(n_bytes):,.1f} GB"


def _rental_prices(space: SearchSpace) -> dict[tuple[str, int, int], dict[str, tuple[float, int]]]:
    """(GPU type, GPUs per replica, tp) -> provider -> the cheapest way to rent the replicas there: ($/hour, cost units)."""
    out: dict[tuple[str, int, int], dict[str, tuple[float, int]]] = {}
    for gpu in space.gpus:
        for layout in parallel_layouts(space.arch, gpu, space):
            by_provider = out.setdefault(_rental_key(gpu, layout), {})
            for offer, market in space.offers:
                rental = (rent(layout.gpus, layout.node_group, space.replicas, offer, market) if offer.gpu == gpu.name
                          else None)
                if rental is not None and (offer.provider not in by_provider
                                           or rental.cost_units < by_provider[offer.provider][1]):
                    by_provider[offer.provider] = (rental.usd_per_hour, rental.cost_units)
    return out


def rentals_for(candidate: Candidate, space: SearchSpace) -> list[Rental]:
    return [r for o, m in space.offers if o.gpu == candidate.gpu.name
            if (r := rent(candidate.gpus, candidate.configuration.parallel.node_group, space.replicas, o, m)) is not None]


def candidate_timer(c: Candidate, arch: Architecture, catalog: Catalog, engine: str,
                    performance: PerformanceCatalog | None = None, release: str | None = None
                    ) -> ReplicaTimer | SpeculativeTimer:
    """The speed model's timer of a candidate's replica of `arch` under `engine` (`release`; `performance`: the
    speed model's constants, calibrated or the catalog's): its layout's steps, and with speculative decoding its
    cycles of the target and the checkpoint's MTP module on the same layout (speculative_timer). The one rule of a
    configuration's timer (served_timer), for a single configuration's speed and a fleet replica's capacity."""
    from planner.estimator.performance import replica_timer
    from planner.estimator.speculative import served_timer

    def timer(model: Architecture) -> ReplicaTimer:
        return replica_timer(model, c.precision, c.kv_dtype, c.gpu, c.tp, c.pp, catalog, engine, performance,
                             ep=c.configuration.ep, dp=c.configuration.dp, release=release,
                             moe_kernel=c.configuration.engine.moe_kernel)

    return served_timer(timer, arch, c.configuration.speculation)


def full_context_step_s(c: Candidate, space: SearchSpace, catalog: Catalog) -> float:
    """The time a request gains one token with `concurrency` sequences each holding the whole context, as the engine's
    speed model times it (the planning margin `simple` is timed as vLLM): the worst steady decode step of a
    configuration without traffic; with speculative decoding, a cycle over its acceptance length (cycle / L)."""
    from planner.estimator.performance import Step

    engine = "vllm" if c.configuration.engine.name == "simple" else c.configuration.engine.name
    timer = candidate_timer(c, space.arch, catalog, engine, release=c.configuration.engine.version)
    return timer.step_s(Step(c.concurrency, float(c.context))) / timer.tokens_per_step


def recheck(candidate: Candidate, space: SearchSpace, catalog: Catalog) -> MemoryEstimate:
    """The verdict on a chosen configuration, on its GPU, from scratch: the plan is printed only if it fits."""
    return check_configuration(space.arch, candidate.configuration, GpuTarget.from_catalog(candidate.gpu), catalog)
