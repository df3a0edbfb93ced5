"""A solved plan (the JSON `planner solve --format json` writes) -> launch commands and deployment files.

Targets: each engine's server command (the registry's engines: vLLM, SGLang, llama.cpp ...), a SkyPilot task, a
Kubernetes Deployment (or a LeaderWorkerSet when a replica spans several nodes; the plan's engine's own manifest
where its module renders one, else vLLM's). Multi-node replicas run as engines
run them today: vLLM on a Ray cluster (head + workers), SGLang with --nnodes/--node-rank.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass, replace
from functools import lru_cache
from math import ceil
from pathlib import Path
from typing import Any

import yaml

from planner.catalog.checkpoints import known_checkpoint
from planner.catalog.load import Catalog, Precision, load_catalog
from planner.catalog.skypilot import load_skypilot
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings
from planner.estimator.engines.moe_kernels import VLLM_SWITCHES
from planner.estimator.engines.registry import DEPLOYMENT_TARGETS, engine, export_targets, renderer
from planner.estimator.speculative import SPECULATIVE_ENGINES
from planner.model.architecture import Architecture
from planner.plan.configuration import Configuration, ConfiguredBy
from planner.plan.planfile import CheckedPlan, FleetAssignment, load_plan_file
from planner.render.disaggregation import role_args, router_note

TARGETS = export_targets()  # each engine's command (its module's ENGINE.command), then skypilot and kubernetes
VLLM_DEFAULT_UTILIZATION = 0.90  # vLLM's --gpu-memory-utilization default (vllm/config/cache.py)
MAX_UTILIZATION = 0.95  # leave the driver and fragmentation some room
UTILIZATION_STEP = 0.01  # --gpu-memory-utilization is exported with two decimals
# vLLM's official images, one tag per release: vllm/vllm-openai (CUDA) and, since v0.14.0, vllm/vllm-openai-rocm
# (Docker Hub; docs.vllm.ai "Using Docker"). The tag is the release the memory model follows.
VLLM_IMAGES = {"nvidia": "vllm/vllm-openai", "amd": "vllm/vllm-openai-rocm"}
# Google TPUs: vLLM runs them through the tpu-inference plugin (pip vllm-tpu, image vllm/vllm-tpu; its installation
# guide, vllm-project/tpu-inference docs/getting_started/installation.md, pins vllm-tpu 0.13.2.post6 for v6e and older
# and the image only as :latest), versioned apart from vLLM's releases and with its own memory use: not exported
TPU_VENDOR = "google"
# Recent vLLM wheels no longer pull Ray in; a multi-node replica runs on a Ray cluster (compiled graphs for PP)
RAY_REQUIREMENT = "ray[cgraph]"
VLLM_PORT, SGLANG_PORT, LLAMACPP_PORT = 8000, 30000, 8080
# A plan made with the planning margin leaves SGLang's static share this far below vLLM's utilization: room
# for SGLang's own reserve, which the margin does not model (plans made with an engine carry their own share)
SGLANG_STATIC_BELOW_UTILIZATION = 0.05
LLAMACPP_UNQUANTIZED_CACHES = {"f16", "bf16", "f32"}  # any other V cache type needs flash attention (server README)
HF_TOKEN_SECRET = {"name": "hf-token", "key": "token"}  # kubectl create secret generic hf-token --from-literal=token=...

@dataclass(frozen=True)
class ExportPlan(ConfiguredBy):
    """One plan as a deployment needs it: the configuration it was checked with, and where it runs."""

    name: str
    configuration: Configuration
    weights: Precision
    vendor: str
    skypilot_accelerator: str | None
    nodes_per_replica: int
    gpus_per_node: int
    replicas: int
    provider: str
    region: str
    market: str
    gpu_memory_utilization: float  # vLLM: the share of each card the plan was checked with
    mem_fraction_static: float  # SGLang: likewise
    checkpoint_precision: str | None  # what the model ships in; no re-quantized checkpoint needed for it
    # Requests the engine may run at once. A plan without traffic holds `concurrency` full-context sequences;
    # a fleet replica was sized by the requests its pool holds in flight, capped by the max_num_seqs its plan
    # records (the engine's, capped by workload.concurrency); its configuration's concurrency is only the one
    # full-context request vLLM checks at start. A fleet file without it (older planner) keeps the engine's.
    max_num_seqs: int
    sized_by_traffic: bool  # a fleet replica: its capacity was planned with admission by the KV pool
    role: str = "both"  # a disaggregated pair's prefill or decode replica (planner.render.disaggregation)

    @property
    def precision(self) -> Precision:  # type: ignore[override]  # the catalog record: its engine flags
        return self.weights

    @property
    def model_id(self) -> str:
        return self.configuration.model_id

    @property
    def gpu(self) -> str:
        return self.configuration.gpu


class _Dumper(yaml.SafeDumper):
    """Block-style multi-line strings (readable `run:` scripts) and no &anchors for repeated objects."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def _dump(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120)


def load_plan(path: str | Path, catalog: Catalog, plan_index: int = 0, assignment: int | None = None) -> ExportPlan:
    """One plan of PLAN.json (planner.plan.planfile: checked and re-checked); `plan_index` 0 is the best plan,
    N the N-th alternative; `assignment` N picks one assignment of a fleet plan."""
    plans = load_plans(path, catalog, plan_index, assignment)
    if len(plans) > 1:
        raise PlannerInputError(f"--assignment: {Path(path).name!r} is a fleet of {len(plans)} assignments; "
                                f"choose one of 0 to {len(plans) - 1}")
    return plans[0]


def load_plans(path: str | Path, catalog: Catalog, plan_index: int = 0,
               assignment: int | None = None) -> tuple[ExportPlan, ...]:
    """The plans of PLAN.json to deploy: one of a single-configuration plan, each assignment of a fleet."""
    return tuple(export_plan(plan, catalog) for plan in load_plan_file(path, catalog, plan_index, assignment))


def export_plan(plan: CheckedPlan, catalog: Catalog) -> ExportPlan:
    """The plan's own engine settings, verbatim. A plan made with the planning margin (engine "simple") has no
    engine share: it gets the share its re-checked fullest GPU needs, at least vLLM's default, at most 0.95."""
    configuration, record, card = plan.configuration, plan.record, plan.card
    fraction = configuration.memory_fraction
    if fraction is None:
        fullest = max(rank.total_bytes for rank in plan.memory.per_gpu)
        fraction = min(MAX_UTILIZATION, max(VLLM_DEFAULT_UTILIZATION, ceil(fullest / card.memory_bytes * 100) / 100))
        static = fraction - SGLANG_STATIC_BELOW_UTILIZATION
    else:
        static = fraction
    gpus = configuration.gpus
    return ExportPlan(
        name=plan.name, configuration=configuration, weights=catalog.precisions.get(configuration.precision),
        vendor=card.vendor, skypilot_accelerator=card.skypilot_accelerator,
        nodes_per_replica=1 if gpus <= record.gpus_per_instance else ceil(gpus / record.gpus_per_instance),
        gpus_per_node=min(record.gpus_per_instance, gpus), replicas=record.replicas, provider=record.provider,
        region=record.region, market=record.market, gpu_memory_utilization=fraction, mem_fraction_static=static,
        checkpoint_precision=plan.checkpoint_precision,
        max_num_seqs=(record.max_num_seqs or configuration.engine.max_num_seqs or configuration.concurrency)
        if record.workload is not None else configuration.concurrency,
        sized_by_traffic=record.workload is not None,
        role=record.role if isinstance(record, FleetAssignment) else "both",
    )


# --------------------------------------------------------------------------------------------
# What every target shares: checked values, the weights to load, the engine settings re-checked


def _comment(text: str) -> str:
    """One comment line: a plan file is untrusted, so no newline or control character ends the comment."""
    return "# " + re.sub(r"[\x00-\x1f\x7f]", " ", text)


def _checked(plan: ExportPlan) -> ExportPlan:
    """Counts are whole numbers >= 1 before they reach a script; names are single printable lines."""
    for field in ("tp", "pp", "gpus_per_node", "gpus_per_replica", "nodes_per_replica", "replicas", "context", "concurrency"):
        value = getattr(plan, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlannerInputError(f"plan: {field} must be a whole number >= 1, got {value!r}; re-run `planner solve`")
    for field in ("model_id", "name", "provider", "region", "gpu", "kv_dtype", "market"):
        value = getattr(plan, field)
        if not isinstance(value, str) or not value or re.search(r"[\x00-\x1f\x7f]", value):
            raise PlannerInputError(f"plan: {field} {value!r} is not a one-line name; re-run `planner solve`")
    return plan


def _needs_checkpoint(plan: ExportPlan) -> bool:
    return plan.precision.checkpoint and plan.precision.name != plan.checkpoint_precision


# A Hugging Face repository id as the Hub allows it: ORG/NAME, each part at most 96 characters starting with a letter
# or a digit. So a repository placed in a command is always an argument: never an option (--trust-remote-code, -h)
# nor a path (., ../x).
_HUB_REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def _model_signature(arch: Any) -> tuple[Any, ...]:
    return arch.model_type, arch.hidden_size, arch.num_layers, arch.vocab_size, arch.loaded_params


def _repository(plan: ExportPlan, repo: str, field: str) -> str:
    """`repo` as an engine loads it: a Hub repository id and, when planner's catalog knows the model behind it
    (a catalog entry, or a quantized repository of one), the model the plan was checked with. A repository the
    catalog does not know (your own quantization) cannot be compared offline and is loaded as given."""
    from planner.model.sources import resolve_model

    if not _HUB_REPOSITORY.fullmatch(repo) or ".." in repo:
        fix = ("give the repository to load with --checkpoint ORG/NAME" if field == "plan: model_id"
               else "give a Hugging Face repository id, ORG/NAME")
        raise PlannerInputError(f"{field}: {repo!r} is not a Hugging Face repository id (ORG/NAME); {fix}")
    catalog = load_catalog()
    try:
        named = catalog.model_and_precision(repo)[0]
    except PlannerInputError:
        return repo
    configuration = plan.configuration
    try:
        same = catalog.models.get(configuration.model).name == named.name
    except PlannerInputError:  # a plan of a config path or a Hub id: the same model is the same architecture
        checked = resolve_model(catalog, configuration.model, configuration.params)
        same = _model_signature(checked) == _model_signature(resolve_model(catalog, named.name))
    if not same:
        raise PlannerInputError(f"{field}: {repo!r} is {named.name} in planner's catalog, not the model the plan was "
                                f"checked with ({configuration.model}); give a repository of that model")
    return repo


def weights(plan: ExportPlan, checkpoint: str | None) -> tuple[str, bool]:
    """(the repository the engine loads, whether it is a pre-quantized checkpoint that names its own scheme)."""
    if checkpoint is not None:
        _repository(plan, checkpoint, "--checkpoint")
    if not _needs_checkpoint(plan):
        return checkpoint or _repository(plan, plan.model_id, "plan: model_id"), False
    repo = checkpoint or known_checkpoint(plan.model_id, plan.precision.name)
    if repo is None:
        raise PlannerInputError(
            f"--checkpoint: {plan.precision.name} needs {plan.model_id} already quantized that way and planner knows "
            f"no such repository; give one with --checkpoint ORG/NAME (or re-solve with a precision the engine "
            "applies on load, e.g. fp8 or bf16)")
    return repo, True


def _engine_flags(flag: str | None, prequantized: bool) -> list[str]:
    """A pre-quantized checkpoint carries its scheme in quantization_config: no --quantization to contradict it."""
    return [] if prequantized or not flag else flag.split()


def _stated_kernel(plan: ExportPlan, runs: str, target: str) -> None:
    """A plan timed on a stated fused-MoE kernel exports only to the engine it was timed under (another engine's
    kernels and switches differ), and only with a kernel that engine can be told to run and a table times for the
    plan's experts, as the solve checked (a plan file is untrusted)."""
    planned = plan.configuration.engine
    if planned.moe_kernel is None:
        return
    if planned.name != runs:
        raise PlannerInputError(f"--to {target}: the plan was timed on {planned.name}'s {planned.moe_kernel!r} fused-MoE "
                                f"kernel (engine.moe_kernel), which this export's {runs} would not run; export --to "
                                f"{planned.name}, or re-solve without engine.moe_kernel")
    from planner.estimator.performance import moe_kernel_refusal
    from planner.model.sources import resolve_model

    catalog = load_catalog()
    refusal = moe_kernel_refusal(resolve_model(catalog, plan.configuration.model), plan.precision.name,
                                 catalog.gpus.get(plan.gpu), catalog, planned.name, planned.moe_kernel,
                                 release=planned.version)
    if refusal is not None:
        raise PlannerInputError(f"plan: {refusal}; re-run `planner solve`")


def vllm_environment(plan: ExportPlan) -> dict[str, str]:
    """The environment vLLM is started with: the switch to the plan's stated fused-MoE kernel, if any (_stated_kernel
    checked that vLLM has one for it)."""
    kernel = plan.configuration.engine.moe_kernel
    return {} if kernel is None else dict(VLLM_SWITCHES[kernel].environment)


def _exported_environment(plan: ExportPlan) -> list[str]:
    """`export NAME=value` lines for a shell that starts vLLM."""
    return [f"export {name}={shlex.quote(value)}" for name, value in vllm_environment(plan).items()]


def _settings(plan: ExportPlan, engine: str) -> EngineSettings:
    """The settings the plan was checked with when it was planned for `engine`, else that engine's defaults."""
    planned = plan.configuration.engine
    return planned if planned.name == engine else EngineSettings(engine)


def _recheck(plan: ExportPlan, settings: EngineSettings) -> Any:
    """The exported engine settings through the engine's own profile (None: the model is not a catalog model)."""
    from planner import api

    configuration = plan.configuration
    if configuration.params is not None:
        return None
    try:
        model = load_catalog().models.get(configuration.model).name
    except PlannerInputError:
        return None
    return api.engine_estimate(model, settings, context=plan.context, batch=plan.concurrency, tp=plan.tp, pp=plan.pp,
                               dp=configuration.dp, ep=configuration.ep, all_to_all=configuration.all_to_all,
                               precision=plan.precision.name, kv_dtype=plan.kv_dtype, gpu=plan.gpu,
                               speculation=configuration.speculation).engine


def _graph_warning(budget) -> bool:
    # the vLLM profile's start-up warning: the memory outside the budget cannot hold the CUDA graphs
    return any("CUDA graphs" in warning for warning in budget.warnings)


@dataclass(frozen=True)
class VllmLaunch:
    gpu_memory_utilization: float
    enforce_eager: bool
    rechecked: bool


@lru_cache(maxsize=64)
def vllm_launch(plan: ExportPlan) -> VllmLaunch:
    """The plan's utilization when vLLM's profile starts it cleanly; else the highest lower one that leaves
    room for CUDA graphs and still holds the plan's sequences; else the plan's with --enforce-eager."""
    base = _settings(plan, "vllm")
    if _expert_parallel(plan):  # vLLM's profile does not size these layouts: the plan's own engine checked them
        return VllmLaunch(plan.gpu_memory_utilization, base.enforce_eager, False)

    def check(utilization: float):
        return _recheck(plan, replace(base, gpu_memory_utilization=utilization))

    if base.enforce_eager:  # the plan was checked without CUDA graphs
        return VllmLaunch(plan.gpu_memory_utilization, True, True)
    first = check(plan.gpu_memory_utilization)
    if first is None:  # a model outside the catalog: no profile to ask, so no CUDA graphs to run short of
        return VllmLaunch(plan.gpu_memory_utilization, True, False)
    if not _graph_warning(first):
        return VllmLaunch(plan.gpu_memory_utilization, False, True)
    utilization = round(plan.gpu_memory_utilization - UTILIZATION_STEP, 2)
    while utilization > 0:  # a lower utilization shrinks the pool: stop once it no longer holds the plan
        budget = check(utilization)
        if not budget.fits:
            break
        if not _graph_warning(budget):
            return VllmLaunch(utilization, False, True)
        utilization = round(utilization - UTILIZATION_STEP, 2)
    return VllmLaunch(plan.gpu_memory_utilization, True, True)


def engine_version(plan: ExportPlan, engine: str) -> str:
    """The release the plan was checked against when it was planned for `engine` (its engine.version), else the
    engine's default release planner models (catalogs/engine_profiles.yaml), e.g. 0.34.0."""
    from planner.estimator.engines.profiles import load_profiles

    return load_profiles().versions(engine).resolve(_settings(plan, engine).version, engine)


def vllm_image(plan: ExportPlan) -> str:
    return f"{VLLM_IMAGES['amd' if plan.vendor == 'amd' else 'nvidia']}:v{engine_version(plan, 'vllm')}"


# --------------------------------------------------------------------------------------------
# Engine commands


def _expert_parallel(plan: ExportPlan) -> bool:
    """The plan runs data-parallel attention or expert parallelism (or an all-to-all backend)."""
    return plan.configuration.parallel.expert_parallel


def vllm_parallel_args(plan: ExportPlan) -> list[str]:
    """vLLM's flags for the plan's layout. Data-parallel attention is vLLM's data parallelism: dp engines of tp / dp
    GPUs each (--data-parallel-size, --tensor-parallel-size), whose MoE layers span all tp GPUs; with
    --enable-expert-parallel they deal the experts over them (vllm/model_executor/layers/fused_moe/config.py @ v0.34.0
    FusedMoEParallelConfig.make: ep_size = dp x tp), else each expert is TP-split over them. So vLLM runs ep 1 or
    ep = tp, and planner sizes no vLLM all-to-all backend (--all2all-backend)."""
    c = plan.configuration
    if not _expert_parallel(plan):
        return ["--tensor-parallel-size", str(plan.tp), "--pipeline-parallel-size", str(plan.pp)]
    if c.all_to_all is not None:
        raise PlannerInputError(f"--to vllm: the plan's {c.all_to_all} all-to-all was sized as SGLang's "
                                f"--moe-a2a-backend {c.all_to_all}; planner does not size vLLM's --all2all-backend: "
                                "export --to sglang, or re-solve with search.all_to_all: [none]")
    if c.ep not in (1, c.tp):
        raise PlannerInputError(f"--to vllm: ep {c.ep} of tp {c.tp}: vLLM deals the experts over all {c.tp} GPUs "
                                "(--enable-expert-parallel) or none; export --to sglang (--ep-size), or re-solve")
    args = ["--tensor-parallel-size", str(c.tp // c.dp), "--pipeline-parallel-size", str(plan.pp)]
    if c.dp > 1:
        args += ["--data-parallel-size", str(c.dp)]
    return args + (["--enable-expert-parallel"] if c.ep > 1 else [])


def vllm_speculative_args(plan: ExportPlan) -> list[str]:
    """The plan's MTP draft as vLLM 0.34.0 sets it: --speculative-config with method "mtp" (vllm/config/speculative.py
    @ v0.34.0: the MTP model types, deepseek_mtp, qwen3_5_mtp ..., resolve to "mtp") and num_speculative_tokens."""
    spec = plan.configuration.speculation
    if spec is None:
        return []
    return ["--speculative-config", json.dumps({"method": spec.method, "num_speculative_tokens": spec.draft_tokens},
                                               separators=(",", ":"))]


def sglang_speculative_args(plan: ExportPlan) -> list[str]:
    """The plan's MTP draft as SGLang 0.5.23 sets it (server_args.py; arg_groups/speculative_hook.py resolves NEXTN to
    EAGLE, the draft then the checkpoint's own MTP layer): a chain of num-steps drafts, top-k 1, num-steps + 1 tokens
    verified a cycle (planner.estimator.speculative times that cycle)."""
    spec = plan.configuration.speculation
    if spec is None:
        return []
    return ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(spec.draft_tokens),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(spec.draft_tokens + 1)]


def vllm_args(plan: ExportPlan, checkpoint: str | None = None) -> list[str]:
    if plan.precision.vllm_flag is None:
        raise PlannerInputError(f"--to vllm: vLLM does not serve {plan.precision.name}; export to llamacpp or re-solve with another precision")
    repo, prequantized = weights(plan, checkpoint)
    launch = vllm_launch(plan)
    args = [repo, *vllm_parallel_args(plan),
            "--max-model-len", str(plan.context), "--max-num-seqs", str(plan.max_num_seqs),
            "--gpu-memory-utilization", f"{launch.gpu_memory_utilization:.2f}",
            "--kv-cache-dtype", engine("vllm").kv_cache_dtype(plan.kv_dtype),
            "--host", "0.0.0.0", "--port", str(VLLM_PORT)]
    kv_cache_memory = plan.configuration.engine.kv_cache_memory_bytes
    if kv_cache_memory is not None:
        args += ["--kv-cache-memory-bytes", str(kv_cache_memory)]
    args += _engine_flags(plan.precision.vllm_flag, prequantized) + vllm_speculative_args(plan)
    if launch.enforce_eager:
        args.append("--enforce-eager")
    if plan.nodes_per_replica > 1:
        # vLLM's data-parallel engines span a Ray cluster with --data-parallel-backend ray (arg_utils.py @ v0.34.0)
        args += ["--data-parallel-backend" if plan.configuration.dp > 1 else "--distributed-executor-backend", "ray"]
    return args + role_args("vllm", plan.role)


def _vllm_notes(plan: ExportPlan, checkpoint: str | None) -> list[str]:
    repo, prequantized = weights(plan, checkpoint)
    version = engine_version(plan, "vllm")
    install = (f"the {vllm_image(plan)} image (the PyPI wheel is the CUDA build)" if plan.vendor == "amd"
               else f"pip install vllm=={version}")
    notes = [_comment(f"vLLM {version} (the release the plan was checked against): {install}")]
    if (router := router_note("vllm", plan.role)) is not None:
        notes.append(_comment(router))
    if prequantized:
        notes.append(_comment(f"{plan.precision.name} weights: the pre-quantized checkpoint {repo}"))
    launch = vllm_launch(plan)
    if plan.configuration.engine.kv_cache_memory_bytes is not None:
        notes.append(_comment("--kv-cache-memory-bytes: the KV pool the plan was sized with, in place of "
                              "--gpu-memory-utilization's budget (vLLM then skips its memory profile; if it runs out of "
                              "memory, compare the free memory it logs at start-up with the plan's card)"))
    if _expert_parallel(plan):
        notes.append(_comment(f"{plan.layout}: vLLM's memory profile does not size data-parallel attention or expert "
                              f"parallelism; the plan was checked with {plan.configuration.engine.name}'s, and "
                              "--gpu-memory-utilization is its share"))
    elif launch.enforce_eager:
        notes.append(_comment("--enforce-eager: " + ("no vLLM profile for this model to size CUDA graphs against"
                                                     if not launch.rechecked else
                                                     "no utilization leaves room for CUDA graphs and holds the plan's sequences")))
    elif launch.gpu_memory_utilization < plan.gpu_memory_utilization:
        notes.append(_comment(f"--gpu-memory-utilization {launch.gpu_memory_utilization:.2f}, not the plan's "
                              f"{plan.gpu_memory_utilization:.2f}: leaves room to capture CUDA graphs and still holds "
                              f"{plan.concurrency} x {plan.context:,} tokens"))
    return notes


def vllm_command(plan: ExportPlan, checkpoint: str | None = None) -> str:
    lines = _vllm_notes(plan, checkpoint) + _exported_environment(plan)
    serve = "vllm serve " + shlex.join(vllm_args(plan, checkpoint))
    if plan.nodes_per_replica > 1:
        lines += [_comment(f"{plan.nodes_per_replica} nodes of {plan.gpus_per_node} GPUs per replica: a Ray cluster "
                           f"(pip install {shlex.quote(RAY_REQUIREMENT)}), then serve from the head"),
                  "# on the head node:", f"ray start --head --port=6379 --num-gpus={plan.gpus_per_node}",
                  f"# on each of the {plan.nodes_per_replica - 1} worker nodes:",
                  f"ray start --address=\"$HEAD_IP:6379\" --num-gpus={plan.gpus_per_node}", "# then on the head node:"]
    return "\n".join(lines + [serve]) + "\n"


@lru_cache(maxsize=64)
def sglang_budget(plan: ExportPlan) -> Any:
    """SGLang's profile of the plan (its own settings when it was planned for SGLang, else SGLang's defaults for this
    GPU and model); None: the model is not in the catalog, so there is no profile to ask."""
    return _recheck(plan, _settings(plan, "sglang"))


def sglang_fraction(plan: ExportPlan) -> float | None:
    """The --mem-fraction-static SGLang's profile checks the plan with (the plan's own when it was planned for
    SGLang, else SGLang's default for this GPU and model; on AMD above 8K context the profile applies the aiter
    backend's 0.85 on top where SGLang resolves that backend). Refuses when that pool cannot hold the plan's
    sequences. None: the model is not in the catalog, so there is no profile to ask."""
    budget = sglang_budget(plan)
    if budget is None:
        return None
    if not budget.fits:
        raise PlannerInputError(f"--to sglang: on {plan.gpu} SGLang's pool holds {budget.max_concurrency:.2f} sequences of "
                                f"{plan.context:,} tokens, the plan needs {plan.concurrency} ({budget.message}); "
                                "re-solve with `engine: sglang` in the scenario")
    return budget.settings.mem_fraction_static


def _aiter_shrinks(plan: ExportPlan) -> bool:
    """Whether SGLang runs its aiter attention backend on ROCm for the plan's catalog model (the one the plan's
    engine.attention_backend tells it, else the one it picks: the profile sized the pool with it) and so takes 0.85
    of the fraction at its context."""
    from planner.estimator.engines.profiles import load_profiles
    from planner.estimator.engines.sglang import aiter_shrinks_fraction

    profile = load_profiles().sglang.get(engine_version(plan, "sglang"), "sglang")
    return aiter_shrinks_fraction(_plan_architecture(plan), plan.tp, plan.context, profile,
                                  _settings(plan, "sglang").attention_backend)


def _plan_architecture(plan: ExportPlan) -> Architecture:
    """The plan's catalog model, as the estimator read it."""
    from planner.model.sources import resolve_model

    catalog = load_catalog()
    return resolve_model(catalog, catalog.models.get(plan.configuration.model).name)


def sglang_parallel_args(plan: ExportPlan) -> list[str]:
    """SGLang's flags for data-parallel attention, expert parallelism and the experts' all-to-all (server_args.py @
    v0.5.23: --attn-dp-size, which replaces the deprecated --dp-size D --enable-dp-attention; --ep-size;
    --moe-a2a-backend), and with DP attention the decode CUDA-graph batch the plan's reserve was sized with
    (--cuda-graph-max-bs-decode: SGLang's default fraction reserves 3 MiB per batch and DP group,
    engines/sglang.py)."""
    c = plan.configuration
    args = (["--attn-dp-size", str(c.dp)] if c.dp > 1 else []) + (["--ep-size", str(c.ep)] if c.ep > 1 else [])
    if c.all_to_all is not None:
        args += ["--moe-a2a-backend", c.all_to_all]
    budget = sglang_budget(plan) if c.dp > 1 else None
    if budget is not None and budget.settings.max_num_seqs:
        args += ["--cuda-graph-max-bs-decode", str(budget.settings.max_num_seqs)]
    return args


def sglang_args(plan: ExportPlan, node_rank: int | None = None, checkpoint: str | None = None) -> list[str]:
    from planner.estimator.engines.sglang import sglang_kv_cache_flag

    if plan.precision.sglang_flag is None:
        raise PlannerInputError(f"--to sglang: SGLang does not serve {plan.precision.name}; export to llamacpp or re-solve with another precision")
    repo, prequantized = weights(plan, checkpoint)
    args = ["--model-path", repo, "--tp-size", str(plan.tp), "--pp-size", str(plan.pp), *sglang_parallel_args(plan),
            "--context-length", str(plan.context)]
    if (told := _settings(plan, "sglang").max_running_requests) is not None:
        args += ["--max-running-requests", str(told)]  # the limit the plan's pool and scheduler were sized with
    elif not plan.sized_by_traffic:
        # a fleet replica keeps SGLang's own limit, which follows its token pool (and a hybrid model's state slots):
        # planner sized its capacity with the requests those admit (its concurrency, 1, is only the full-context
        # request that must fit)
        args += ["--max-running-requests", str(plan.concurrency)]
    elif plan.configuration.speculation is not None:
        # with MTP SGLang's own limit is 48 (speculative_running_cap): the limit the replica was sized with, stated
        args += ["--max-running-requests", str(plan.max_num_seqs)]
    fraction = sglang_fraction(plan)
    args += ["--mem-fraction-static", f"{plan.mem_fraction_static if fraction is None else fraction:.3f}",
             "--kv-cache-dtype", sglang_kv_cache_flag(_plan_architecture(plan), plan.kv_dtype), "--host", "0.0.0.0",
             "--port", str(SGLANG_PORT)]
    args += _engine_flags(plan.precision.sglang_flag, prequantized) + sglang_speculative_args(plan)
    if plan.configuration.engine.moe_kernel is not None:
        args += ["--moe-runner-backend", plan.configuration.engine.moe_kernel]
    if (backend := _settings(plan, "sglang").attention_backend) is not None:
        args += ["--attention-backend", backend]
    if plan.nodes_per_replica > 1:
        args += ["--nnodes", str(plan.nodes_per_replica), "--node-rank", str(node_rank or 0),
                 "--dist-init-addr", "$HEAD_IP:5000"]
    return args + role_args("sglang", plan.role)


def sglang_command(plan: ExportPlan, checkpoint: str | None = None) -> str:
    repo, prequantized = weights(plan, checkpoint)
    version = engine_version(plan, "sglang")
    lines = [_comment(f"SGLang {version} (the release the plan was checked against): pip install \"sglang=={version}\"")]
    if (router := router_note("sglang", plan.role)) is not None:
        lines.append(_comment(router))
    if prequantized:
        lines.append(_comment(f"{plan.precision.name} weights: the pre-quantized checkpoint {repo}"))
    if plan.vendor == "amd" and sglang_fraction(plan) is not None and _aiter_shrinks(plan):
        lines.append(_comment("AMD: SGLang runs its aiter attention backend for this model, and above 8K context "
                              "multiplies --mem-fraction-static by 0.85; planner's SGLang profile sized the pool that way"))
    if plan.nodes_per_replica > 1:
        lines.append(_comment(f"one command per node; node 0 is the head ($HEAD_IP), nodes 1..{plan.nodes_per_replica - 1} join it"))
        for rank in range(plan.nodes_per_replica):
            line = shlex.join(sglang_args(plan, rank, checkpoint)).replace("'$HEAD_IP:5000'", '"$HEAD_IP:5000"')
            lines.append("python3 -m sglang.launch_server " + line)
    else:
        lines.append("python3 -m sglang.launch_server " + shlex.join(sglang_args(plan, checkpoint=checkpoint)))
    return "\n".join(lines) + "\n"


def llamacpp_args(plan: ExportPlan) -> list[str]:
    if plan.precision.gguf_type is None:
        raise PlannerInputError(f"--to llamacpp: llama.cpp runs GGUF files; {plan.precision.name} has no GGUF type "
                                "(re-solve with bf16/fp16 or a GGUF precision such as q4_k_m)")
    if plan.nodes_per_replica > 1:
        raise PlannerInputError("--to llamacpp: this plan spans several nodes; llama.cpp serves from one machine")
    cache = plan.configuration.engine.cache_type or engine("llamacpp").kv_cache_dtype(plan.kv_dtype)
    if cache is None:
        raise PlannerInputError(f"--to llamacpp: no llama.cpp cache type for KV {plan.kv_dtype}")
    _llamacpp_recheck(plan, cache)
    # llama-server's --ctx-size is shared by its --parallel slots: each slot gets ctx-size / parallel
    repo = _repository(plan, plan.model_id, "plan: model_id")
    args = ["--model", f"{repo.split('/')[-1]}-{plan.precision.gguf_type}.gguf",
            "--ctx-size", str(plan.context * plan.concurrency), "--parallel", str(plan.concurrency),
            "--n-gpu-layers", "999", "--cache-type-k", cache, "--cache-type-v", cache,
            "--host", "0.0.0.0", "--port", str(LLAMACPP_PORT)]
    if cache not in LLAMACPP_UNQUANTIZED_CACHES:
        args += ["--flash-attn", "on"]  # a quantized V cache needs flash attention (tools/server/README.md)
    if plan.gpus_per_replica > 1:
        args += ["--split-mode", "layer", "--tensor-split", ",".join(["1"] * plan.gpus_per_replica)]
    return args


def _llamacpp_recheck(plan: ExportPlan, cache: str) -> None:
    """llama.cpp stores fp8 KV as q8_0 (8.5 bits a value: 34 bytes per 32): the plan must fit sized that way."""
    settings = replace(_settings(plan, "llamacpp"), cache_type=cache, flash_attn=cache not in LLAMACPP_UNQUANTIZED_CACHES)
    budget = _recheck(plan, settings)
    if budget is not None and not budget.fits:
        raise PlannerInputError(f"--to llamacpp: with a {cache} cache llama.cpp does not hold {plan.concurrency} x "
                                f"{plan.context:,} tokens on {plan.gpus_per_replica} x {plan.gpu} ({budget.message}); "
                                "re-solve with `engine: llamacpp` in the scenario")


def llamacpp_command(plan: ExportPlan, checkpoint: str | None = None) -> str:
    """llama-server loads a GGUF file converted from the plan's model: `checkpoint` (a Hub repository) is not read."""
    return (_comment(f"llama.cpp {engine_version(plan, 'llamacpp')}+: the builds planner's llama.cpp profile follows") + "\n"
            + _comment(f"the GGUF file: convert {plan.model_id} with llama.cpp's convert_hf_to_gguf.py and llama-quantize "
                       f"to {plan.precision.gguf_type}, or download a published {plan.precision.gguf_type} GGUF") + "\n"
            "llama-server " + shlex.join(llamacpp_args(plan)) + "\n")


# --------------------------------------------------------------------------------------------
# SkyPilot and Kubernetes


def skypilot_accelerator(plan: ExportPlan) -> tuple[str, str | None]:
    """(the accelerator name, the SkyPilot cloud to pin or None for any cloud) for the plan's GPU."""
    skypilot = load_skypilot()
    if plan.provider in skypilot.clouds:
        name = skypilot.accelerator(plan.provider, plan.gpu)
        if name is None:
            raise PlannerInputError(f"--to skypilot: SkyPilot's {plan.provider} catalog lists no name planner can confirm "
                                    f"for {plan.gpu} (catalogs/skypilot.yaml); re-solve without {plan.provider} "
                                    "or add the name there with its source")
        return name, plan.provider
    # Not a SkyPilot cloud: let SkyPilot find the GPU anywhere, under the name its catalogs use most
    names = Counter(a.name for entries in skypilot.accelerators.values() for a in entries if a.gpu == plan.gpu)
    name = plan.skypilot_accelerator or (names.most_common(1)[0][0] if names else None)
    if name is None:
        raise PlannerInputError(f"--to skypilot: no SkyPilot accelerator name is known for {plan.gpu} "
                                "(catalogs/skypilot.yaml)")
    return name, None


def skypilot_task(plan: ExportPlan, checkpoint: str | None = None) -> str:
    accelerator, cloud = skypilot_accelerator(plan)
    notes = [_comment(f"SkyPilot task for one replica of {plan.model_id} ({plan.replicas} in the plan: launch it "
                      f"{plan.replicas} times, or use `sky serve` with replicas: {plan.replicas})"),
             _comment("gated models: sky launch task.yaml --secret HF_TOKEN (takes HF_TOKEN from your environment)")]
    resources: dict[str, Any] = {"accelerators": f"{accelerator}:{plan.gpus_per_node}"}
    if cloud is not None:
        features = load_skypilot().clouds[cloud].features
        source = f"sky/clouds/{cloud}.py _CLOUD_UNSUPPORTED_FEATURES"
        if plan.nodes_per_replica > 1 and not features.multi_node:
            raise PlannerInputError(f"--to skypilot: SkyPilot runs no multi-node cluster on {cloud} ({source}) and this "
                                    f"replica spans {plan.nodes_per_replica} nodes; re-solve with pricing.providers "
                                    f"excluding {cloud}, or export --to kubernetes")
        if plan.market == "spot" and not features.spot_instance:
            raise PlannerInputError(f"--to skypilot: SkyPilot rents no spot instances on {cloud} ({source}); "
                                    "re-solve with pricing.market: on-demand")
        resources["infra"] = (f"{cloud}/{plan.region}" if re.fullmatch(r"[a-z0-9-]+", plan.region)
                              and plan.region not in ("all", "unspecified") else cloud)
        open_ports = features.open_ports
    else:
        notes.append(_comment(f"{plan.provider} is not a SkyPilot cloud: SkyPilot picks a cloud offering {accelerator}; "
                              f"the plan's price is {plan.provider}'s"))
        open_ports = True
    resources["use_spot"] = plan.market == "spot"
    if open_ports:
        resources["ports"] = VLLM_PORT
    else:
        notes.append(_comment(f"{cloud} opens no ports through SkyPilot: reach the server over `ssh -L {VLLM_PORT}:localhost:{VLLM_PORT}`"))
    packages = [RAY_REQUIREMENT] if plan.nodes_per_replica > 1 else []
    if plan.vendor == "amd":
        resources["image_id"] = f"docker:{vllm_image(plan)}"  # vLLM's ROCm build: the PyPI wheel is the CUDA one
    else:
        packages.insert(0, f"vllm=={engine_version(plan, 'vllm')}")
    notes += _vllm_notes(plan, checkpoint)
    serve = "vllm serve " + shlex.join(vllm_args(plan, checkpoint))
    if plan.nodes_per_replica > 1:
        run = ("if [ \"$SKYPILOT_NODE_RANK\" = \"0\" ]; then\n"
               f"  ray start --head --port=6379 --num-gpus={plan.gpus_per_node}\n"
               f"  until [ \"$(ray status | grep -c node_)\" -ge {plan.nodes_per_replica} ]; do sleep 5; done\n"
               f"  {serve}\nelse\n"
               "  HEAD_IP=$(echo \"$SKYPILOT_NODE_IPS\" | head -n1)\n"
               f"  ray start --address=\"$HEAD_IP:6379\" --num-gpus={plan.gpus_per_node} --block\nfi\n")
    else:
        run = serve + "\n"
    task: dict[str, Any] = {"name": _slug(plan.name), "resources": resources, "num_nodes": plan.nodes_per_replica,
                            "secrets": {"HF_TOKEN": None}}
    if environment := vllm_environment(plan):
        task["envs"] = environment
    if packages:
        task["setup"] = "pip install " + shlex.join(packages)
    task["run"] = run
    return "".join(line + "\n" for line in notes) + _dump(task)


def kubernetes_manifest(plan: ExportPlan, checkpoint: str | None = None) -> str:
    """The plan's engine's own manifest where its module renders one (ENGINE.kubernetes), else vLLM's."""
    own = engine(plan.configuration.engine.name).kubernetes
    if own is not None:
        return renderer(own)(plan, checkpoint)
    name = _slug(plan.name)
    resource = "amd.com/gpu" if plan.vendor == "amd" else "nvidia.com/gpu"
    image = vllm_image(plan)
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    labels = {"app": name}
    token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {**HF_TOKEN_SECRET, "optional": True}}}

    environment = [token, *({"name": name, "value": value} for name, value in vllm_environment(plan).items())]

    def container(role: str, command: list[str]) -> dict[str, Any]:
        return {"name": role, "image": image, "command": command, "env": environment,
                "ports": [{"containerPort": VLLM_PORT}] if role in ("vllm", "leader") else [],
                "resources": {"limits": {resource: plan.gpus_per_node}},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}

    if plan.nodes_per_replica == 1:
        doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
               "spec": {"replicas": plan.replicas, "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"containers": [container("vllm", ["vllm", "serve", *vllm_args(plan, checkpoint)])],
                                              "volumes": [shm]}}}}
    else:
        serve = "vllm serve " + shlex.join(vllm_args(plan, checkpoint))
        leader = ["sh", "-c", f"ray start --head --port=6379 --num-gpus={plan.gpus_per_node} && {serve}"]
        worker = ["sh", "-c", f"ray start --address=\"$LWS_LEADER_ADDRESS:6379\" --num-gpus={plan.gpus_per_node} --block"]
        doc = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
               "metadata": {"name": name, "labels": labels},
               "spec": {"replicas": plan.replicas, "leaderWorkerTemplate": {
                   "size": plan.nodes_per_replica,
                   "leaderTemplate": {"metadata": {"labels": {**labels, "role": "leader"}},
                                      "spec": {"containers": [container("leader", leader)], "volumes": [shm]}},
                   "workerTemplate": {"spec": {"containers": [container("worker", worker)], "volumes": [shm]}}}}}
    notes = [_comment(f"gated models: kubectl create secret generic {HF_TOKEN_SECRET['name']} "
                      f"--from-literal={HF_TOKEN_SECRET['key']}=\"$HF_TOKEN\" (HF_TOKEN is optional in the pods)")]
    notes += _vllm_notes(plan, checkpoint)
    return "".join(line + "\n" for line in notes) + _dump(doc)


DNS_LABEL_MAX = 63  # Kubernetes object names and label values: RFC 1123 labels of at most 63 characters
NAME_DIGEST_CHARS = 8  # a cut name ends in 8 hex digits of its full name's hash: 32 bits, no collision in practice


def _slug(text: str) -> str:
    """An RFC 1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit) naming `text`.
    A name too long is cut and ends in a digest of all of it, so names that differ anywhere (a fleet's
    assignments differ in their index, at the end) stay different."""
    slug = re.sub(r"-+", "-", "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in text.lower())).strip("-")
    if len(slug) <= DNS_LABEL_MAX:
        return slug or "planner"
    import hashlib

    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:NAME_DIGEST_CHARS]
    return f"{slug[:DNS_LABEL_MAX - NAME_DIGEST_CHARS - 1].rstrip('-')}-{digest}"


def export(plan: ExportPlan, target: str, checkpoint: str | None = None) -> str:
    """`checkpoint`: the pre-quantized repository to load (required for a precision planner knows none for)."""
    if target not in TARGETS:
        raise PlannerInputError(f"--to: unknown target {target!r}; use one of {', '.join(TARGETS)}")
    if plan.vendor == TPU_VENDOR:
        raise PlannerInputError(
            f"--to {target}: {plan.gpu} is a Google TPU, which vLLM serves only through its TPU plugin (tpu-inference: "
            "the vllm-tpu package, image vllm/vllm-tpu), released apart from the vLLM builds planner's memory model and "
            "exports follow; planner writes no TPU launch: run vllm-tpu by hand, requesting google.com/tpu chips")
    spec = plan.configuration.speculation
    if spec is not None and target not in (*SPECULATIVE_ENGINES, *DEPLOYMENT_TARGETS):
        raise PlannerInputError(f"--to {target}: the plan runs speculative decoding ({spec.name}), which planner "
                                f"exports for {' and '.join(SPECULATIVE_ENGINES)} only; export to one of them, or "
                                "re-solve with search.speculative: [none]")
    deployments = {"skypilot": skypilot_task, "kubernetes": kubernetes_manifest}
    if target not in deployments:
        role_args(target, plan.role)  # a disaggregated replica: refused for an engine without its flags
    # the engine the export starts: the target; for a Kubernetes manifest the plan's engine where it renders its own
    # (kubernetes_manifest), else vLLM, as for a SkyPilot task
    planned = plan.configuration.engine.name
    own_manifest = target == "kubernetes" and engine(planned).kubernetes is not None
    _stated_kernel(plan, planned if own_manifest else "vllm" if target in deployments else target, target)
    render = deployments.get(target) or renderer(engine(target).command)
    return render(_checked(plan), checkpoint)


def export_all(plans: tuple[ExportPlan, ...], target: str, checkpoint: str | None = None) -> str:
    """One launch per plan: commands one after the other, Kubernetes documents separated by `---`. A SkyPilot task
    file holds one task, so a fleet of several assignments exports one at a time (--assignment N)."""
    if len(plans) == 1:
        return export(plans[0], target, checkpoint)
    if target == "skypilot":
        raise PlannerInputError(f"--assignment: a SkyPilot task file holds one task and this fleet has {len(plans)} "
                                f"assignments; export each with --assignment 0 to {len(plans) - 1}")
    if target == "kubernetes":
        return "---\n".join(export(plan, target, checkpoint) for plan in plans)
    return "\n".join(f"# assignment {i}: {plan.name}, {plan.replicas} replica(s)\n" + export(plan, target, checkpoint)
                     for i, plan in enumerate(plans))
