"""The engines planner models: one module and one catalog entry each, and every list of engines reads them here.

An engine is its entry in catalogs/engine_profiles.yaml (its label, aliases, releases and their constants) and the
module of the same name in planner/estimator/engines/ (its ENGINE: the budget, the profile schema, how it batches,
its flag vocabulary and its exports). Adding an engine is adding those two; the command line's choices, the
scenario and plan schemas, the web API, the search and `planner export` follow. `simple` is the seed's planning
margin (catalogs/engines.yaml), listed first and not an engine release.

The names, labels, aliases and versions are read from the catalog file as parsed (no pydantic, no engine module):
the command line builds its choices from them at start-up.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from functools import cache, partial
from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

from planner.errors import PlannerInputError

if TYPE_CHECKING:
    from planner.model.architecture import Architecture
    from planner.catalog.load import Precision
    from planner.estimator.engines.base import EngineSettings

PROFILES_FILE = "engine_profiles.yaml"
PLANNING_MARGIN = "simple"
_SHARED_KEYS = ("schema_version", "cuda")  # engine_profiles.yaml's keys that name no engine
DEPLOYMENT_TARGETS = ("skypilot", "kubernetes")  # `planner export --to`, beside each engine's own command


def _no_refusal(arch: Architecture) -> str | None:
    return None


def _token_batching(settings: EngineSettings, context: int) -> tuple[int, int | None, int | None]:
    return 1, settings.max_num_batched_tokens, None


def _admits_prompt_blocks(settings: EngineSettings, block_tokens: int) -> None:
    return None


def _compute_dtype_cache(arch: Architecture) -> str | None:
    return None


def _auto_kv_dtype(arch: Architecture, compressed_tensors: bool) -> str | None:
    """FP8 where `auto` stores the cache in FP8 on vLLM and SGLang: DeepSeek-V4's compressed caches (SGLang
    arg_groups/overrides.py _deepseek_v4_kv_cache_dtype @ v0.5.23: auto -> fp8_e4m3; vLLM's FlashMLA path asserts an
    FP8 cache dtype, engines/vllm_deepseek_v4.py check_kv_dtype), and a checkpoint declaring an FP8 KV cache
    (planner.model.precision.declared_fp8_kv_cache; `compressed_tensors`: the engine takes a compressed-tensors
    kv_cache_scheme as one)."""
    from planner.model.precision import declared_fp8_kv_cache

    return "fp8" if arch.has_compressed_caches or declared_fp8_kv_cache(arch, compressed_tensors) else None


# vLLM takes any compressed-tensors kv_cache_scheme as FP8 (model_executor/layers/attention/attention.py @ v0.19.0 and
# v0.34.0); SGLang only from v0.5.19 (CompressedTensorsConfig.kv_cache_quant_algo, absent @ v0.5.16): planner keeps
# its compressed-tensors caches at the compute dtype, as the releases up to v0.5.16 do (`--kv-dtype fp8` sizes 0.5.19+)
vllm_auto_kv_dtype = partial(_auto_kv_dtype, compressed_tensors=True)
sglang_auto_kv_dtype = partial(_auto_kv_dtype, compressed_tensors=False)


@dataclass(frozen=True)
class Engine:
    """What the rest of planner asks of an engine; each engine module defines one as ENGINE."""

    name: str
    budget: Callable[..., Any]  # (arch, request, settings, gpu, catalog) -> EngineBudget
    profile: type | None  # the pydantic schema of one release's constants (None: the planning margin)
    # why the profile cannot size a model at all (None when it can)
    refusal: Callable[[Architecture], str | None] = _no_refusal
    # the scheduler's limits: (tokens per KV block, the step's token budget, requests at once or None) at `context`
    batching: Callable[[EngineSettings, int], tuple[int, int | None, int | None]] = _token_batching
    # how it admits a waiting request against the pool, at (settings, tokens per block): an engines.base
    # OutputReservation (SGLang) or BlocksToCompletion (TensorRT-LLM), or None (the prompt's blocks; a decode step
    # preempts, as vLLM)
    admission: Callable[[EngineSettings, int], Any] = _admits_prompt_blocks
    cache_sized_by_batch: bool = False  # the cache is allocated for every slot at start-up (llama.cpp)
    scheduler_caps_sequences: bool = False  # max_num_seqs caps the requests running at once (not a graph size)
    # a step carries prompt tokens beside the decoding requests (vLLM, TensorRT-LLM, llama-server); False: a prefill
    # batch is a forward pass of its own, run before any decode (SGLang without --enable-mixed-chunk)
    mixes_prefill: bool = True
    # where activations, CUDA graphs and non-torch memory live: inside the budget beside the pool ("remainder"),
    # outside the budget ("outside"), or as the budget's measured activation and non-torch rows ("measured")
    workspace: Literal["remainder", "outside", "measured"] = "measured"
    sized_by_planning_margin: bool = False  # reads the request's overhead_fraction
    tensor_parallel: bool = True  # False: layers are split over the cards (pipeline only)
    # data-parallel attention with expert parallelism (layout.expert_layouts): "any" EP size dividing tp (SGLang
    # --ep-size), "full" EP over every GPU or none (vLLM --enable-expert-parallel), None: the engine has neither
    expert_parallel: Literal["any", "full"] | None = None
    sizes_expert_parallel: bool = False  # its budget sizes those layouts (the search and re-check may use it)
    all_to_all_backends: tuple[str, ...] = ()  # the experts' all-to-all backends it runs and planner models
    fraction_field: str = "gpu_memory_utilization"  # the EngineSettings field holding the engine's memory share
    kv_cache_dtypes: Mapping[str, str] = field(default_factory=dict)  # planner KV dtype -> the engine's flag value
    kv_cache_dtype_default: str | None = "auto"  # a dtype missing from the table (None: the engine has none)
    # the KV dtype its `auto` stores a model's cache in where that is not the compute dtype (None: the compute dtype)
    auto_kv_dtype: Callable[[Architecture], str | None] = _compute_dtype_cache
    command: str | None = None  # "module:function" rendering `planner export --to NAME` (plan, checkpoint) -> str
    kubernetes: str | None = None  # "module:function" of its own Kubernetes manifest (None: the vLLM one)

    def kv_cache_dtype(self, kv_dtype: str) -> str | None:
        """The engine's flag value for a planner KV cache dtype."""
        return self.kv_cache_dtypes.get(kv_dtype, self.kv_cache_dtype_default)


@cache
def _entries() -> dict[str, dict[str, Any]]:
    """The engine entries of engine_profiles.yaml, in file order, as parsed."""
    from planner.catalog.load import catalog_dir, read_yaml

    data = read_yaml(catalog_dir() / PROFILES_FILE)
    return {name: entry for name, entry in data.items() if name not in _SHARED_KEYS and isinstance(entry, dict)}


def profiled_engines() -> tuple[str, ...]:
    """The engines with a profile per release, in catalog order."""
    return tuple(_entries())


def engine_names() -> tuple[str, ...]:
    """Every memory model `--engine` takes: the planning margin, then each engine."""
    return (PLANNING_MARGIN, *profiled_engines())


def export_targets() -> tuple[str, ...]:
    """`planner export --to`: each engine's command line, then the deployment files."""
    return (*profiled_engines(), *DEPLOYMENT_TARGETS)


def label(name: str) -> str:
    """How the engine names itself (vLLM, llama.cpp ...)."""
    return str(_entries()[name].get("label", name))


def canonical(name: str) -> str:
    """The engine `name` or one of its catalog aliases means (llama.cpp -> llamacpp); an unknown name as given."""
    key = name.strip().lower()
    for engine, entry in _entries().items():
        if key == engine or key in entry.get("aliases", ()):
            return engine
    return name


def _versions(name: str) -> list[str]:
    """The engine's releases, its default first, then the newest first."""
    entry = _entries()[name]
    default = str(entry["default"])
    return [default, *sorted((str(v) for v in entry["versions"] if str(v) != default), key=release_key, reverse=True)]


def release_key(version: str) -> tuple[int, ...]:
    """A release as numbers to compare: "v0.5.6.post1" -> (0, 5, 6); a build without numbers sorts first."""
    found = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(part) for part in found.group(1).split(".")) if found else ()


def versions_help() -> str:
    """The releases each engine is modelled at, for the command line's help."""
    return ", ".join(f"{label(name)} {' or '.join(_versions(name))}" for name in profiled_engines())


def spoken_list(names: tuple[str, ...]) -> str:
    """a, b or c."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def engine(name: str) -> Engine:
    """The engine's ENGINE, from the module of its name."""
    if name not in engine_names():
        raise PlannerInputError(f"--engine: unknown engine {name!r}; use one of {', '.join(engine_names())}")
    return _module_engine(name)


def resolve_engine_kv_dtype(name: str, arch: Architecture, precision: Precision, requested: str | None) -> str:
    """The KV dtype `requested` means on engine `name`: its `auto` is the engine's own choice for this model where it
    makes one (Engine.auto_kv_dtype), else the compute dtype, as for every other name (resolve_kv_dtype)."""
    from planner.model.precision import resolve_kv_dtype

    # a stated dtype, and the planning margin's own `auto` (the compute dtype), need no engine entry read
    if (requested or "auto").lower() == "auto" and name != PLANNING_MARGIN:
        key = canonical(name)
        if key != PLANNING_MARGIN and key in engine_names():
            stored = engine(key).auto_kv_dtype(arch)
            if stored is not None:
                return stored
    return resolve_kv_dtype(arch, precision, requested)


@cache
def _module_engine(name: str) -> Engine:
    try:
        module = import_module(f"planner.estimator.engines.{name}")
    except ModuleNotFoundError:
        raise PlannerInputError(f"catalog {PROFILES_FILE}: {name} has no module planner/estimator/engines/{name}.py; "
                                "remove the entry or add the module") from None
    described = getattr(module, "ENGINE", None)
    if not isinstance(described, Engine) or described.name != name:
        raise PlannerInputError(f"planner/estimator/engines/{name}.py: defines no ENGINE = Engine({name!r}, ...)")
    if name != PLANNING_MARGIN and (described.profile is None or described.command is None):
        raise PlannerInputError(f"planner/estimator/engines/{name}.py: its ENGINE needs a profile schema and an export "
                                f"command, as every engine of {PROFILES_FILE} has")
    return described


def renderer(reference: str) -> Callable[..., str]:
    """The function a "module:function" reference names."""
    module, function = reference.split(":")
    return getattr(import_module(module), function)


__all__ = ["DEPLOYMENT_TARGETS", "Engine", "PLANNING_MARGIN", "PROFILES_FILE", "canonical", "engine", "engine_names",
           "export_targets", "label", "profiled_engines", "release_key", "renderer", "spoken_list", "versions_help"]
