"""TensorRT-LLM (the PyTorch backend, as trtllm-serve runs it) start-up, rank by rank, as the release of the chosen
profile sizes its KV cache (catalogs/engine_profiles.yaml cites each constant and says how the sources were read;
files are NVIDIA/TensorRT-LLM v1.2.1):

  1. tensorrt_llm/_torch/pyexecutor/py_executor_creator.py loads the weights on each rank; the CUDA context (and NCCL
     when the replica has several GPUs) is up.
  2. KvCacheCreator (tensorrt_llm/_torch/pyexecutor/_util.py): try_prepare_estimation sizes a small KV cache for dummy
     context requests of max_num_tokens tokens in all (each at most max_seq_len - 1); configure_kv_cache_capacity runs
     them and measures peak_memory = torch's peak (weights, the forward's activations, that small cache) + the memory
     used outside torch (CUDA context, NCCL). _cal_max_memory: KV memory = (total - peak_memory + the small cache) x
     free_gpu_memory_fraction, i.e. the fraction of what is free beside the weights, the activation peak and the
     non-torch memory; kv_cache_config.max_tokens = KV memory // bytes per token (KVCacheManager
     .get_cache_size_per_token: 2 bytes a value, 1 with an fp8 cache, x K and V heads x head_dim of every attention
     layer on the rank; MLA: the latent, once).
  3. KVCacheManager (resource_manager.py calculate_max_num_blocks): every rank takes the smallest max_tokens (an
     allreduce MIN); blocks_in_primary_pool = ceil(max_tokens / tokens_per_block), 32 tokens a block, each block a
     slice of every attention layer's pool on the rank. A request holds ceil(tokens / 32) blocks; one that does not
     fit makes get_max_atten_window_upper_bound lower max_seq_len to what the pool holds.
  Whatever else the engine allocates later (the CUDA graphs of its warm-up, the sampler's buffers) comes out of the
  (1 - fraction) of the free memory the pool leaves: planner counts all of the card but the pool as the engine's.
  The activation peak of step 2 cannot be known statically (it is measured at start-up): planner estimates it as for
  vLLM, max_num_tokens tokens through the widest layer (hidden-size buffers beside the MLP's gate_up and activated
  halves; MoE: those of each routed copy of a token, the shared expert's and the router logits), or on the last
  pipeline stage the float32 logits of the dummy requests if larger. No TensorRT-LLM start-up log checks it yet.
  Refused: recurrent layers (MambaHybridCacheManager's state pools are not modelled) and DeepSeek-V4's compressed
  caches. Sliding-window layers are sized like full ones (kv_cache_config.max_attention_window unset: every layer
  keeps max_seq_len tokens), with a warning.
"""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import replace
from fractions import Fraction
from math import ceil, floor
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from planner.catalog.load import Catalog
from planner.errors import PlannerInputError
from planner.estimator.engines.base import (BlocksToCompletion, CacheGroup, EngineBudget, EngineSettings, PoolLayout,
                                            RankBudget, ServedModel, Stage, limiting_rank, serve)
from planner.estimator.engines.moe_kernels import TRTLLM_BACKENDS
from planner.estimator.engines.profiles import Sourced, load_profiles
from planner.estimator.engines.registry import Engine
from planner.estimator.memory import RECURRENT_KINDS, GpuTarget, Request
from planner.model.architecture import Architecture, Layer

if TYPE_CHECKING:
    from planner.render.export import ExportPlan

NAME = "trtllm"
# NVIDIA's release containers on NGC, one tag per release, the version without a v (TensorRT-LLM docs, "Launch the NGC
# container": nvcr.io/nvidia/tensorrt-llm/release:1.0.0, :1.2.0rc6)
IMAGE = "nvcr.io/nvidia/tensorrt-llm/release"
PORT = 8000  # trtllm-serve --port default (tensorrt_llm/commands/serve.py)
# kv_cache_config.dtype (tensorrt_llm/llmapi/llm_args.py KvCacheConfig.dtype): "auto" is the model's dtype
TRTLLM_KV_CACHE_DTYPES = {"fp8": "fp8"}
# trtllm-serve --extra_llm_api_options: a YAML of the LLM API's arguments that have no flag (kv_cache_config)
OPTIONS_FILE = "extra-llm-api-options.yaml"
OPTIONS_MOUNT = "/etc/trtllm"  # where the Kubernetes manifest mounts its ConfigMap of OPTIONS_FILE


class TrtllmProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str
    free_gpu_memory_fraction: Sourced[float]
    tokens_per_block: Sourced[int]
    max_batch_size: Sourced[int]
    max_num_tokens: Sourced[int]
    kv_bytes_per_value: Sourced[dict[Literal["fp8", "other"], int]]
    distributed_init_mib: Sourced[int]
    hidden_buffers_in_forward: Sourced[int]
    logits_bytes: Sourced[int]


def resolve_settings(settings: EngineSettings, profile: TrtllmProfile) -> EngineSettings:
    """The flags trtllm-serve would run with: gpu_memory_utilization is its kv_cache_free_gpu_memory_fraction,
    max_num_seqs its max_batch_size, max_num_batched_tokens its max_num_tokens, block_size its tokens_per_block."""
    block = settings.block_size or profile.tokens_per_block.value
    if block & (block - 1):
        raise PlannerInputError(f"--block-size: TensorRT-LLM's tokens_per_block must be a power of two, got {block}")
    fraction = settings.gpu_memory_utilization or profile.free_gpu_memory_fraction.value
    if fraction >= 1:
        raise PlannerInputError(f"--gpu-memory-utilization / engine.gpu_memory_utilization: {fraction} is TensorRT-LLM's "
                                "free_gpu_memory_fraction, which must be below 1 (resource_manager.py asserts it); "
                                "give 0.95 or less")
    return replace(settings, gpu_memory_utilization=fraction, block_size=block,
                   max_num_seqs=settings.max_num_seqs or profile.max_batch_size.value,
                   max_num_batched_tokens=settings.max_num_batched_tokens or profile.max_num_tokens.value)


def _mlp_elements(layer: Layer, arch: Architecture, tp: int, tokens: int) -> int:
    """Elements the layer's MLP holds for `tokens` tokens on one rank beyond its input and output."""
    moe = arch.moe
    if not (layer.is_moe and moe is not None):
        return tokens * 3 * ceil(arch.intermediate_size / tp)
    return tokens * (moe.experts_per_token * 3 * ceil(moe.expert_intermediate_size / tp)
                     + 3 * ceil(moe.shared_intermediate_size / tp) + moe.num_experts)


def activation_peak(model: ServedModel, stage: Stage, settings: EngineSettings, profile: TrtllmProfile) -> int:
    """The profiling run's activation peak on one rank of `stage` (bytes; see the module's docstring)."""
    arch, tokens = model.arch, settings.max_num_batched_tokens
    forward = model.activation_bytes * (tokens * profile.hidden_buffers_in_forward.value * arch.hidden_size
                                        + max(_mlp_elements(layer, arch, model.request.tp, tokens) for layer in stage.layers))
    if not stage.last:
        return forward
    requests = ceil(tokens / min(tokens, max(1, model.request.context - 1)))
    return max(forward, requests * arch.vocab_size * profile.logits_bytes.value)


def _check_kv_dtype(model: ServedModel, profile: TrtllmProfile) -> None:
    value_bytes = profile.kv_bytes_per_value.value["fp8" if model.kv_dtype == "fp8" else "other"]
    if model.kv_bits != 8 * value_bytes:
        raise PlannerInputError(f"--kv-dtype: TensorRT-LLM keeps the KV cache in a 16-bit dtype or fp8 "
                                f"(kv_cache_config.dtype auto or fp8), not {model.kv_dtype} ({model.kv_bits} bits); "
                                "use --kv-dtype fp8, bf16 or fp16")


def trtllm_budget(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget,
                  catalog: Catalog) -> EngineBudget:
    profiles = load_profiles()
    profile, cuda = profiles.versions(NAME).get(settings.version, NAME), profiles.cuda
    model = serve(arch, request, catalog, NAME)
    _check_kv_dtype(model, profile)
    resolved = resolve_settings(settings, profile)
    fraction, block = Fraction(str(resolved.gpu_memory_utilization)), resolved.block_size
    visible = cuda.visible_bytes(gpu.memory_bytes)
    non_torch = cuda.startup_bytes(model.gpus, profile.distributed_init_mib)
    stages = []
    for stage in model.stages:
        activation = activation_peak(model, stage, resolved, profile)
        memory = floor(max(visible - non_torch - stage.weights_bytes - activation, 0) * fraction)
        per_token = sum(model.layer_bytes_per_token(layer) for layer in model.cache_layers(stage))
        stages.append((stage, activation, per_token, memory // per_token if per_token else None))
    max_tokens = min((tokens for *_, tokens in stages if tokens is not None), default=0)  # the allreduce MIN
    blocks = ceil(max_tokens / block)
    ranks = tuple(RankBudget(rank=stage.index * request.tp + tp_rank, pp_stage=stage.index, layers=len(stage.layers),
                             memory_bytes=visible, budget_bytes=visible, weights_bytes=stage.weights_bytes,
                             activation_bytes=activation, non_torch_bytes=non_torch, cuda_graph_bytes=0,
                             kv_pool_bytes=blocks * block * per_token, kv_capacity_tokens=blocks * block)
                  for stage, activation, per_token, _ in stages for tp_rank in range(request.tp))
    limit = limiting_rank(ranks)
    context = request.context
    concurrency = blocks / ceil(context / block)
    message, longest = None, None
    if blocks == 0:
        message = ("TensorRT-LLM has no memory left for the KV cache beside the weights and the profiling run's peak; "
                   "use more GPUs (--tp / --pp) or a smaller precision")
    elif blocks * block < context:
        longest = blocks * block
        message = (f"TensorRT-LLM's {blocks:,} blocks hold {blocks * block:,} tokens, fewer than max_seq_len {context:,}: "
                   f"it lowers max_seq_len to {longest:,} (get_max_atten_window_upper_bound); raise "
                   "kv_cache_free_gpu_memory_fraction, add GPUs or lower the context")
    elif concurrency < request.batch:
        # the default capacity scheduler, GUARANTEED_NO_EVICT, admits a request only when its blocks are free
        message = (f"TensorRT-LLM starts, but its {blocks:,} blocks of {block} tokens hold {concurrency:.2f} requests of "
                   f"{context:,} tokens at once, fewer than --batch {request.batch}; the others wait in the queue")
    sliding = sum(layer.attention.kind == "sliding" for layer in arch.layers)
    warnings = (f"{sliding} sliding-window layers are sized like full-attention ones: kv_cache_config."
                "max_attention_window unset keeps max_seq_len tokens in every layer",) if sliding else ()
    stage = model.stages[limit.pp_stage]
    return EngineBudget(
        name=NAME, release=profile.release, gpu_memory_utilization=None, budget_bytes=visible,
        weights_bytes=limit.weights_bytes, activation_bytes=limit.activation_bytes, non_torch_bytes=non_torch,
        cuda_graph_bytes=0, kv_pool_bytes=limit.kv_pool_bytes, kv_cache_capacity_tokens=blocks * block,
        max_concurrency=concurrency, fits=message is None, max_context_that_fits=longest, message=message,
        context=context, batch=request.batch, settings=resolved, per_rank=ranks, warnings=warnings,
        layout=_pool_layout(model, stage, block, ceil(context / block)))


def _pool_layout(model: ServedModel, stage: Stage, block: int, blocks_per_request: int) -> PoolLayout:
    """One block of `block` tokens spans every attention layer of the rank (one pool per layer, the same block ids)."""
    layers = model.cache_layers(stage)
    kinds = Counter(layer.attention.kind for layer in layers)
    return PoolLayout(block_size=block, page_bytes=block * model.layer_bytes_per_token(layers[0]) if layers else 0,
                      layers_per_group=len(layers),
                      groups=tuple(CacheGroup(kind, count, 1, blocks_per_request) for kind, count in kinds.items()))


def refusal(arch: Architecture) -> str | None:
    """What the profile does not size: recurrent states (MambaHybridCacheManager) and DeepSeek-V4's caches."""
    recurrent = sorted({layer.attention.recurrence or layer.attention.kind for layer in arch.layers
                        if layer.attention.kind in RECURRENT_KINDS})
    if recurrent:
        return (f"--engine trtllm: {arch.name} has {'/'.join(recurrent)} layers, whose recurrent state the TensorRT-LLM "
                "profile does not size (its MambaHybridCacheManager is not modelled); use --engine vllm or sglang")
    if arch.has_compressed_caches:
        return (f"--engine trtllm: {arch.name} keeps DeepSeek-V4's compressed caches, which the TensorRT-LLM profile "
                "does not size; use --engine vllm or sglang")
    return None


def admission(settings: EngineSettings, block_tokens: int) -> BlocksToCompletion:
    """The default capacity scheduler, GUARANTEED_NO_EVICT: each request's blocks to completion reserved."""
    return BlocksToCompletion()


def batching(settings: EngineSettings, context: int) -> tuple[int, int | None, int | None]:
    """Blocks of tokens_per_block tokens, max_num_tokens a step, at most max_batch_size requests at once."""
    return settings.block_size or 1, settings.max_num_batched_tokens, settings.max_num_seqs


# --------------------------------------------------------------------------------------------
# planner export --to trtllm, and --to kubernetes for a plan made with it


def _launch(plan: ExportPlan, checkpoint: str | None) -> tuple[list[str], dict[str, Any], list[str]]:
    """(trtllm-serve's arguments, its --extra_llm_api_options, comment lines) for one replica of the plan, the
    settings re-checked through this profile."""
    from planner.render.export import _comment, _recheck, _settings, engine_version, weights

    precision = plan.precision
    if plan.vendor != "nvidia":
        raise PlannerInputError(f"--to trtllm: TensorRT-LLM runs on NVIDIA GPUs only, not a {plan.gpu}")
    if plan.nodes_per_replica > 1:
        raise PlannerInputError("--to trtllm: this plan spans several nodes; planner exports trtllm-serve on one node "
                                "(a multi-node replica runs under mpirun or Slurm)")
    if precision.checkpoint and precision.gguf_type is not None:
        raise PlannerInputError(f"--to trtllm: TensorRT-LLM does not load GGUF files ({precision.name}); export to "
                                "llamacpp or re-solve with another precision")
    if not (precision.checkpoint or checkpoint or precision.bits >= 16):
        raise PlannerInputError(f"--checkpoint: TensorRT-LLM does not quantize weights to {precision.name} on load; give "
                                "a pre-quantized (ModelOpt) checkpoint with --checkpoint ORG/NAME or re-solve with bf16")
    repo, _ = weights(plan, checkpoint)
    settings = _settings(plan, NAME)
    budget = _recheck(plan, settings)
    if budget is not None and not budget.fits:
        raise PlannerInputError(f"--to trtllm: on {plan.gpu} TensorRT-LLM's pool holds {budget.max_concurrency:.2f} "
                                f"sequences of {plan.context:,} tokens, the plan needs {plan.concurrency} "
                                f"({budget.message}); re-solve with `engine: trtllm` in the scenario")
    resolved = budget.settings if budget is not None else resolve_settings(
        settings, load_profiles().versions(NAME).get(settings.version, NAME))
    args = [repo, "--backend", "pytorch", "--host", "0.0.0.0", "--port", str(PORT), "--tp_size", str(plan.tp),
            "--pp_size", str(plan.pp), "--max_seq_len", str(plan.context), "--max_batch_size", str(plan.max_num_seqs),
            "--max_num_tokens", str(resolved.max_num_batched_tokens),
            "--kv_cache_free_gpu_memory_fraction", f"{resolved.gpu_memory_utilization:.2f}"]
    kv_cache = {"tokens_per_block": resolved.block_size}
    if plan.kv_dtype in TRTLLM_KV_CACHE_DTYPES:
        kv_cache["dtype"] = TRTLLM_KV_CACHE_DTYPES[plan.kv_dtype]
    version = engine_version(plan, NAME)
    notes = [_comment(f"TensorRT-LLM {version} (the release the plan was checked against): the image {IMAGE}:{version}")]
    if repo != plan.model_id:
        notes.append(_comment(f"{precision.name} weights: the pre-quantized checkpoint {repo}"))
    options: dict[str, Any] = {"kv_cache_config": kv_cache}
    kernel = plan.configuration.engine.moe_kernel
    if kernel is not None:  # the export's stated-kernel check let through only a kernel TRTLLM_BACKENDS names
        options["moe_config"] = {"backend": TRTLLM_BACKENDS[kernel]}
    return args, options, notes


def trtllm_command(plan: ExportPlan, checkpoint: str | None = None) -> str:
    """`planner export --to trtllm`: the options file, then trtllm-serve."""
    from planner.render.export import _dump

    args, options, notes = _launch(plan, checkpoint)
    return "\n".join([*notes, f"cat > {OPTIONS_FILE} <<'EOF'", _dump(options).rstrip("\n"), "EOF",
                      "trtllm-serve " + shlex.join([*args, "--extra_llm_api_options", OPTIONS_FILE])]) + "\n"


def trtllm_kubernetes(plan: ExportPlan, checkpoint: str | None = None) -> str:
    """A ConfigMap of the options file and a Deployment of plan.replicas pods running trtllm-serve from the NGC image."""
    from planner.render.export import HF_TOKEN_SECRET, _comment, _dump, _slug, engine_version

    args, options, notes = _launch(plan, checkpoint)
    name, labels = _slug(plan.name), {"app": _slug(plan.name)}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": _slug(f"{plan.name} options"), "labels": labels},
              "data": {OPTIONS_FILE: _dump(options)}}
    container = {"name": NAME, "image": f"{IMAGE}:{engine_version(plan, NAME)}",
                 "command": ["trtllm-serve", *args, "--extra_llm_api_options", f"{OPTIONS_MOUNT}/{OPTIONS_FILE}"],
                 "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {**HF_TOKEN_SECRET, "optional": True}}}],
                 "ports": [{"containerPort": PORT}], "resources": {"limits": {"nvidia.com/gpu": plan.gpus_per_node}},
                 "volumeMounts": [{"name": "options", "mountPath": OPTIONS_MOUNT},
                                  {"name": "dshm", "mountPath": "/dev/shm"}]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
                  "spec": {"replicas": plan.replicas, "selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels}, "spec": {
                               "containers": [container],
                               "volumes": [{"name": "options", "configMap": {"name": config["metadata"]["name"]}},
                                           {"name": "dshm", "emptyDir": {"medium": "Memory"}}]}}}}
    notes.insert(0, _comment(f"gated models: kubectl create secret generic {HF_TOKEN_SECRET['name']} "
                             f"--from-literal={HF_TOKEN_SECRET['key']}=\"$HF_TOKEN\" (HF_TOKEN is optional in the pods)"))
    return "".join(line + "\n" for line in notes) + _dump(config) + "---\n" + _dump(deployment)


ENGINE = Engine(NAME, trtllm_budget, TrtllmProfile, refusal=refusal, batching=batching, admission=admission,
                scheduler_caps_sequences=True,
                workspace="remainder", kv_cache_dtypes=TRTLLM_KV_CACHE_DTYPES,
                command="planner.estimator.engines.trtllm:trtllm_command",
                kubernetes="planner.estimator.engines.trtllm:trtllm_kubernetes")
