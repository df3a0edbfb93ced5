"""Engine-faithful memory: how much KV cache a serving engine would actually get, rank by rank.

`engine_budget` answers for one configuration with the engine's own start-up arithmetic:
  simple    the seed's planning margin (memory.estimate_memory), the default of `planner estimate`
  vllm      gpu_memory_utilization budget, profile-run activation peak, non-torch memory, 16-token blocks
  sglang    mem_fraction_static budget and its token pool
  llamacpp  n_ctx cells padded to 256, quantized caches, compute buffers, a free margin per device,
            layers split over GPUs or left in system RAM
Each profile's constants and their sources are in catalogs/engine_profiles.yaml, one profile per engine release
(EngineSettings.version; None: the engine's default, its current release). Which engines there are, and what each
module says of itself, is planner.estimator.engines.registry.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from planner.estimator.engines.registry import PLANNING_MARGIN, engine

if TYPE_CHECKING:
    from planner.catalog.load import Catalog
    from planner.estimator.engines.base import ENGINE_NAMES, EngineBudget, EngineSettings, RankBudget
    from planner.estimator.memory import GpuTarget, Request
    from planner.model.architecture import Architecture

_FROM_BASE = ("ENGINE_NAMES", "EngineBudget", "EngineSettings", "RankBudget")


def __getattr__(name: str) -> Any:
    """The shared records, from base.py on first use: the registry (engines.registry) loads without pydantic, which
    the profiles need, so the command line reads its engine names without it."""
    if name in _FROM_BASE:
        from planner.estimator.engines import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def engine_budget(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget,
                  catalog: Catalog) -> EngineBudget:
    """The KV pool `settings.name` would give `request` on `gpu` (per rank), and whether it fits; the budget's settings
    name the engine version whose profile sized it."""
    from planner.estimator.engines.profiles import load_profiles

    settings.validate()
    if settings.name != PLANNING_MARGIN:
        settings = replace(settings, version=load_profiles().versions(settings.name).resolve(settings.version, settings.name))
    return engine(settings.name).budget(arch, request, settings, gpu, catalog)


__all__ = ["ENGINE_NAMES", "EngineBudget", "EngineSettings", "RankBudget", "engine_budget"]
