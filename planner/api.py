"""The Python API: the same entry points the CLI uses, returning dataclasses.

    from planner import estimate, solve, load_catalog
    est = estimate("llama-3.1-8b", precision="fp8", context=32768, gpu="l40s")
    est.total_bytes, est.gpu.fits, est.to_frame()
    plan = solve("scenarios/70b-chat.yaml").best
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from planner.catalog.load import Catalog, load_catalog
from planner.errors import PlannerInputError
from planner.model.sources import resolve_model
from planner.estimator.memory import GpuTarget, MemoryEstimate, Request, estimate_memory
from planner.units import parse_count, parse_size

if TYPE_CHECKING:  # OR-Tools loads only when solving
    from planner.catalog.prices import PriceUpdate
    from planner.estimator.engines import EngineBudget, EngineSettings
    from planner.estimator.fit import EngineFit
    from planner.plan.fleet import FleetPlan
    from planner.plan.review import Review
    from planner.plan.solver import PlanOption
    from planner.render.export import ExportPlan
    from planner.plan.scenario import Scenario
    from planner.plan.solver import SolveResult
    from planner.plan.whatif import WhatIf


@dataclass(frozen=True)
class EngineEstimate:
    """The estimator's breakdown plus what one engine would actually hand to the KV cache on that GPU."""

    memory: MemoryEstimate
    engine: EngineBudget

    def to_dict(self) -> dict[str, Any]:
        """The estimate JSON with an "engine" section; "gpu.fits" is the engine's verdict."""
        data = self.memory.to_dict()
        e = self.engine
        data["engine"] = {
            "name": e.name, "release": e.release, "gpu_memory_utilization": e.gpu_memory_utilization,
            "budget_bytes": e.budget_bytes, "weights_bytes": e.weights_bytes, "activation_bytes": e.activation_bytes,
            "non_torch_bytes": e.non_torch_bytes, "cuda_graph_bytes": e.cuda_graph_bytes,
            "kv_pool_bytes": e.kv_pool_bytes, "kv_cache_capacity_tokens": e.kv_cache_capacity_tokens,
            "max_concurrency": e.max_concurrency, "fits": e.fits, "max_context_that_fits": e.max_context_that_fits,
            "message": e.message, "warnings": list(e.warnings), "host_bytes": e.host_bytes,
            "gpu_layers": e.gpu_layers, "total_layers": e.total_layers,
            "per_rank": [asdict(r) for r in e.per_rank],
        }
        if data["gpu"] is not None:
            data["gpu"]["fits"] = e.fits
        return data


def gpu_target(catalog: Catalog, gpu: str | None, gpu_memory: str | None) -> GpuTarget | None:
    """--gpu NAME or --gpu-memory SIZE (a custom card), not both."""
    if gpu is not None and gpu_memory is not None:
        raise PlannerInputError("--gpu and --gpu-memory: give one of them, not both")
    if gpu is not None:
        return GpuTarget.from_catalog(catalog.gpus.get(gpu))
    if gpu_memory is not None:
        return GpuTarget(f"custom {gpu_memory}", parse_size(gpu_memory, "--gpu-memory"))
    return None


def estimate(model: str | None = None, *, context: int = 8192, batch: int = 1, tp: int = 1, pp: int = 1,
             precision: str = "auto", kv_dtype: str = "auto", gpu: str | None = None, gpu_memory: str | None = None,
             overhead: float | None = None, params: int | str | None = None, layers: int | None = None,
             kv_heads: int | None = None, head_dim: int | None = None, heads: int | None = None,
             catalog: Catalog | None = None) -> MemoryEstimate:
    """Memory for one configuration: a catalog model, an HF id from the catalog, a config.json path, or a size."""
    catalog = catalog or load_catalog()
    count = parse_count(str(params), "--params") if params is not None else None
    arch = resolve_model(catalog, model, count, layers, kv_heads, head_dim, heads)
    request = Request(context=context, batch=batch, tp=tp, pp=pp, precision=precision, kv_dtype=kv_dtype,
                      overhead_fraction=overhead)
    return estimate_memory(arch, request, catalog, gpu_target(catalog, gpu, gpu_memory))


def engine_estimate(model: str | None, settings: EngineSettings, *, context: int = 8192, batch: int = 1,
                    tp: int = 1, pp: int = 1, precision: str = "auto", kv_dtype: str = "auto", gpu: str | None = None,
                    gpu_memory: str | None = None, params: int | str | None = None, layers: int | None = None,
                    kv_heads: int | None = None, head_dim: int | None = None, heads: int | None = None,
                    catalog: Catalog | None = None) -> EngineEstimate:
    """`estimate` plus the KV pool an engine (vLLM, SGLang, llama.cpp) would get on the card."""
    from planner.estimator.engines import engine_budget

    catalog = catalog or load_catalog()
    target = gpu_target(catalog, gpu, gpu_memory)
    if target is None:
        raise PlannerInputError(f"--engine {settings.name}: an engine sizes its pool from the card; give --gpu or --gpu-memory")
    count = parse_count(str(params), "--params") if params is not None else None
    arch = resolve_model(catalog, model, count, layers, kv_heads, head_dim, heads)
    request = Request(context=context, batch=batch, tp=tp, pp=pp, precision=precision, kv_dtype=kv_dtype)
    memory = estimate_memory(arch, request, catalog, target)
    return EngineEstimate(memory, engine_budget(arch, request, settings, target, catalog))


def fit(model: str | None, settings: EngineSettings, *, gpu: str | None = None, gpu_memory: str | None = None,
        gpus: int | None = None, context: int = 8192, batch: int = 1, precision: str = "auto",
        kv_dtype: str = "auto", engines: tuple[str, ...] | None = None, params: int | str | None = None,
        catalog: Catalog | None = None) -> tuple[EngineFit, ...]:
    """Solving backwards, per engine: the largest context, the most sequences, the fewest GPUs."""
    from planner.estimator.fit import fit_engines

    catalog = catalog or load_catalog()
    target = gpu_target(catalog, gpu, gpu_memory)
    if target is None:
        raise PlannerInputError("--gpu: give the card to fit on (--gpu NAME or --gpu-memory SIZE)")
    count = parse_count(str(params), "--params") if params is not None else None
    arch = resolve_model(catalog, model, count)
    request = Request(context=context, batch=batch, precision=precision, kv_dtype=kv_dtype)
    return fit_engines(arch, request, settings, target, catalog, gpus, engines or (settings.name,))


def solve(scenario: str | Path | dict[str, Any] | Scenario, *, time_limit_s: float | None = None,
          top: int | None = None, catalog: Catalog | None = None) -> SolveResult:
    """The cheapest plan for a scenario file (or the same content as a dict)."""
    from planner.plan.solver import solve_scenario

    return solve_scenario(_scenario(scenario), catalog or load_catalog(), time_limit_s, top)


def plan_fleet(scenario: str | Path | dict[str, Any] | Scenario, *, time_limit_s: float | None = None,
               catalog: Catalog | None = None) -> FleetPlan:
    """The cheapest fleet for a scenario with traffic (one service, or a `workloads:` list)."""
    from planner.plan.fleet import fleet_problem, plan_fleet as plan

    catalog = catalog or load_catalog()
    return plan(fleet_problem(_scenario(scenario), catalog, time_limit_s), catalog)


def _scenario(scenario: str | Path | dict[str, Any] | Scenario) -> Scenario:
    from planner.plan.scenario import Scenario, load_scenario, parse_scenario

    if isinstance(scenario, Scenario):
        return scenario
    return parse_scenario(scenario) if isinstance(scenario, dict) else load_scenario(scenario)


def what_if(scenario: str | Path | dict[str, Any] | Scenario, *, catalog: Catalog | None = None) -> tuple[WhatIf, ...]:
    """The scenario and its standard variants, each solved: one comparison for a capacity review."""
    from planner.plan.whatif import what_if as compare_variants

    return compare_variants(_scenario(scenario), catalog or load_catalog())


def compare(model: str, *, context: int = 8192, concurrency: int = 1, gpus: list[str] | None = None,
            providers: list[str] | None = None, precisions: list[str] | None = None, market: str = "on-demand",
            max_gpus: int = 8, catalog: Catalog | None = None) -> tuple[PlanOption, ...]:
    """The cheapest configuration holding MODEL on each GPU type and provider, sorted by $/hour."""
    from planner.plan.compare import compare_offers
    from planner.plan.scenario import parse_scenario

    scenario = parse_scenario({
        "name": f"compare {model}", "model": model, "workload": {"context": context, "concurrency": concurrency},
        "search": {"gpus": gpus, "precisions": precisions, "max_gpus_per_replica": max_gpus},
        "pricing": {"providers": providers, "market": market},
    }, "compare")
    return compare_offers(scenario, catalog or load_catalog())


def review(scenario: str | Path | dict[str, Any] | Scenario, *, progress: Callable[[int, int], None] | None = None,
           catalog: Catalog | None = None) -> Review:
    """A single-configuration plan with what binds it and its cost curves (`planner report`)."""
    from planner.plan.review import review_scenario

    return review_scenario(_scenario(scenario), catalog or load_catalog(), progress)


def export_plans(path: str | Path, *, plan_index: int = 0, assignment: int | None = None,
                 catalog: Catalog | None = None) -> tuple[ExportPlan, ...]:
    """The plans of a plan file to deploy, each checked against the plan schema and re-checked by the estimator:
    one of a single-configuration plan (`plan_index`), every assignment of a fleet (or only `assignment`)."""
    from planner.render.export import load_plans

    return load_plans(path, catalog or load_catalog(), plan_index, assignment)


def update_prices(source: str, *, providers: tuple[str, ...] = (), prices_file: str | Path | None = None,
                  as_of: str | None = None, catalog: Catalog | None = None) -> PriceUpdate:
    """`planner prices update`: rebuild the SkyPilot-catalog rows of prices.yaml from SkyPilot's vms.csv files
    (a local catalogs/v<N> folder or its URL)."""
    from planner.catalog.prices import update_prices as rebuild
    from planner.catalog.skypilot import load_skypilot

    return rebuild(source, providers, catalog or load_catalog(), load_skypilot(),
                   Path(prices_file) if prices_file else None, as_of)
