"""Engine-faithful memory: how much KV cache a serving engine would actually get, rank by rank.

`engine_budget` answers for one configuration with the engine's own start-up arithmetic:
  simple    the seed's planning margin (memory.estimate_memory), the default of `planner estimate`
  vllm      gpu_memory_utilization budget, profile-run activation peak, non-torch memory, 16-token blocks
  sglang    mem_fraction_static budget and its token pool
  llamacpp  n_ctx cells padded to 256, quantized caches, compute buffers, a free margin per device,
            layers split over GPUs or left in system RAM
Each profile's constants and their sources are in catalogs/engine_profiles.yaml, one profile per engine release
(EngineSettings.version; None: the engine's default, its current release).
"""

from __future__ import annotations

from dataclasses import replace

from planner.model.architecture import Architecture
from planner.catalog.load import Catalog
from planner.estimator.engines.base import ENGINE_NAMES, EngineBudget, EngineSettings, RankBudget
from planner.estimator.engines.llamacpp import llamacpp_budget
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.engines.sglang import sglang_budget
from planner.estimator.engines.simple import simple_budget
from planner.estimator.engines.vllm import vllm_budget
from planner.estimator.memory import GpuTarget, Request

_BUDGETS = {"simple": simple_budget, "vllm": vllm_budget, "sglang": sglang_budget, "llamacpp": llamacpp_budget}


def engine_budget(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget,
                  catalog: Catalog) -> EngineBudget:
    """The KV pool `settings.name` would give `request` on `gpu` (per rank), and whether it fits; the budget's settings
    name the engine version whose profile sized it."""
    settings.validate()
    if settings.name != "simple":
        settings = replace(settings, version=load_profiles().versions(settings.name).resolve(settings.version, settings.name))
    return _BUDGETS[settings.name](arch, request, settings, gpu, catalog)


__all__ = ["ENGINE_NAMES", "EngineBudget", "EngineSettings", "RankBudget", "engine_budget"]
