"""What every engine profile shares: the settings, the budget it returns, and the model laid out per rank."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

from planner.model.architecture import Architecture, Attention, Layer
from planner.model.families.core import STATE_DTYPE_BITS
from planner.catalog.load import Catalog, Gpu, Precision
from planner.errors import PlannerInputError
from planner.estimator.engines.profiles import StatePartDtypes, load_profiles
from planner.estimator.engines import registry
from planner.estimator.engines.registry import (PLANNING_MARGIN, engine, engine_names, profiled_engines,
                                                spoken_list)
from planner.estimator.memory import (RECURRENT_KINDS, GpuTarget, MemoryEstimate, Request, attention_bytes_per_token,
                                      estimate_memory, state_bytes_per_sequence)
from planner.model.precision import resolve_kv_dtype, resolve_precision

ENGINE_NAMES = engine_names()  # simple, then each engine of the registry (catalogs/engine_profiles.yaml)
# How vLLM's KV pool is sized when --kv-cache-memory-bytes is not given: gpu_memory_utilization's budget (vLLM's
# own default); the figure vLLM's start-up log gives "to fully utilize gpu memory"; or that figure only where the
# budget cannot hold one request of max_model_len (what vLLM's error then suggests). See engines/vllm.py.
KV_CACHE_MEMORY_MODES = ("utilization", "full", "auto")
# Engines a server command tells which fused-MoE kernel to run (SGLang --moe-runner-backend, vLLM's
# VLLM_USE_FLASHINFER_MOE_INT4, TensorRT-LLM's moe_config backend), and how such a name (or an SGLang attention
# backend's) is spelled
MOE_KERNEL_ENGINES = ("vllm", "sglang", "trtllm")
MOE_KERNEL_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"  # as the scenario and plan file schemas check it
MOE_KERNEL_NAME = re.compile(MOE_KERNEL_PATTERN)
# Results a Memo keeps before it starts afresh: the distinct layouts of one run (as _stage_weights' lru_cache)
MEMO_ENTRIES = 4096
T = TypeVar("T")
# llama.cpp --cache-type-k/-v names and ggml block layouts (ggml/src/ggml-common.h): bytes per block of values
# Recurrent mixers whose llama.cpp state the llamacpp profile sizes (src/llama-hparams.cpp n_embd_r / n_embd_s:
# Mamba-2's conv and SSM states, which Qwen3-Next / Qwen3.5 Gated DeltaNet layers reuse; LFM2's short convolution, whose
# r row is n_embd x (n_shortconv_l_cache - 1) and s row empty: n_embd_r's "for LFM2 models" branch @ 01b77b57, n_embd_s
# d_state x d_inner = 0); see engines/llamacpp.py
LLAMACPP_RECURRENCES = ("gated_delta_net", "mamba2", "short_conv")
LLAMACPP_CACHE_TYPES = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q8_0": (34, 32), "q5_1": (24, 32),
                        "q5_0": (22, 32), "q4_1": (20, 32), "q4_0": (18, 32), "iq4_nl": (18, 32)}


# the flags only some engines read (planner/estimator/engines: SGLang's max_num_seqs is its CUDA-graph batch and
# max_num_batched_tokens its chunked prefill; TensorRT-LLM's are its max_batch_size, max_num_tokens, tokens_per_block
# and free-memory fraction): given to another engine they would change nothing, so they are refused
READ_BY = {
    "gpu_memory_utilization": ("--gpu-memory-utilization", ("vllm", "trtllm")),
    "mem_fraction_static": ("--mem-fraction-static", ("sglang",)),
    "block_size": ("--block-size", ("vllm", "trtllm")),
    "kv_cache_memory_bytes": ("--kv-cache-memory-bytes", ("vllm",)),
    "max_num_seqs": ("--max-num-seqs", ("vllm", "sglang", "trtllm")),
    "max_num_batched_tokens": ("--max-num-batched-tokens", ("vllm", "sglang", "trtllm")),
    "n_batch": ("--n-batch", ("llamacpp",)), "n_ubatch": ("--n-ubatch", ("llamacpp",)),
    "n_gpu_layers": ("--n-gpu-layers", ("llamacpp",)), "cache_type": ("--cache-type", ("llamacpp",)),
    "flash_attn": ("--flash-attn", ("llamacpp",)),
}


@dataclass(frozen=True)
class EngineSettings:
    """An engine and its memory-related flags; None means the engine's own default."""

    name: str = "vllm"  # one of ENGINE_NAMES
    gpu_memory_utilization: float | None = None  # vLLM --gpu-memory-utilization
    max_num_batched_tokens: int | None = None  # vLLM; SGLang --chunked-prefill-size
    max_num_seqs: int | None = None  # vLLM; SGLang --cuda-graph-max-bs
    block_size: int | None = None  # vLLM
    enforce_eager: bool = False  # vLLM: no CUDA graphs; SGLang --disable-cuda-graph
    disable_custom_all_reduce: bool = False  # vLLM; off by itself on PCIe-only cards
    mem_fraction_static: float | None = None  # SGLang
    n_batch: int | None = None  # llama.cpp
    n_ubatch: int | None = None  # llama.cpp
    n_gpu_layers: int | None = None  # llama.cpp; None = as many as fit (its --fit)
    cache_type: str | None = None  # llama.cpp --cache-type-k/-v: f16, q8_0, q4_0 ...
    flash_attn: bool | None = None  # llama.cpp; None = auto (on for CUDA)
    kv_cache_memory_bytes: int | None = None  # vLLM --kv-cache-memory-bytes: the KV pool per GPU (the budget is ignored)
    kv_cache_memory: str = "utilization"  # vLLM, without kv_cache_memory_bytes: one of KV_CACHE_MEMORY_MODES
    version: str | None = None  # the engine release whose profile sizes it (catalogs/engine_profiles.yaml); None: default
    # the fused-MoE kernel the engine is told to run (SGLang --moe-runner-backend; vLLM's VLLM_USE_FLASHINFER_MOE_INT4=1
    # is flashinfer_trtllm), timed on its own table; None: the kernel its release picks
    moe_kernel: str | None = None
    # SGLang --attention-backend: the backend the server is told to run (None: the one SGLang resolves); on ROCm it
    # decides whether SGLang takes 0.85 of the fraction (engines/sglang.py rocm_attention_backend)
    attention_backend: str | None = None
    # SGLang --max-running-requests: the requests the server runs at once, each data-parallel attention worker its
    # N // dp share (engines/sglang.py running_per_worker); None: the release's default
    max_running_requests: int | None = None

    def validate(self) -> None:
        if self.name not in ENGINE_NAMES:
            raise PlannerInputError(f"--engine: unknown engine {self.name!r}; use one of {', '.join(ENGINE_NAMES)}")
        for field_name, (flag, engines) in READ_BY.items():
            if getattr(self, field_name) is not None and self.name not in engines:
                raise PlannerInputError(f"{flag}: the {self.name} budget does not read it ({spoken_list(engines)} "
                                        f"does); drop it or pick --engine {spoken_list(engines)}")
        if self.name == PLANNING_MARGIN:
            if self.version is not None:
                raise PlannerInputError(f"--engine-version / engine.version: {self.version} names an engine release; the "
                                        f"simple planning margin has none: drop it or pick --engine "
                                        f"{spoken_list(profiled_engines())}")
        else:
            load_profiles().versions(self.name).resolve(self.version, self.name)
        for flag, value in (("--gpu-memory-utilization", self.gpu_memory_utilization),
                            ("--mem-fraction-static", self.mem_fraction_static)):
            if value is not None and not 0 < value <= 1:
                raise PlannerInputError(f"{flag}: {value} must be a fraction above 0 and at most 1 (0.9 = 90%)")
        if self.kv_cache_memory not in KV_CACHE_MEMORY_MODES:
            raise PlannerInputError(f"kv_cache_memory: {self.kv_cache_memory!r} is not a mode; use one of "
                                    f"{', '.join(KV_CACHE_MEMORY_MODES)}")
        for flag, count in (("--max-num-batched-tokens", self.max_num_batched_tokens), ("--max-num-seqs", self.max_num_seqs),
                            ("--kv-cache-memory-bytes", self.kv_cache_memory_bytes),
                            ("--block-size", self.block_size), ("--n-batch", self.n_batch), ("--n-ubatch", self.n_ubatch),
                            ("--max-running-requests", self.max_running_requests)):
            if count is not None and count < 1:
                raise PlannerInputError(f"{flag}: must be at least 1, got {count}")
        if self.n_gpu_layers is not None and self.n_gpu_layers < 0:
            raise PlannerInputError(f"--n-gpu-layers: must be 0 or more, got {self.n_gpu_layers}")
        if self.moe_kernel is not None:
            if self.name not in MOE_KERNEL_ENGINES:
                raise PlannerInputError(f"--moe-kernel / engine.moe_kernel: {self.name} is not told which fused-MoE "
                                        f"kernel to run here; use engine {spoken_list(MOE_KERNEL_ENGINES)}, or drop it")
            if not MOE_KERNEL_NAME.fullmatch(self.moe_kernel):
                raise PlannerInputError(f"--moe-kernel / engine.moe_kernel: {self.moe_kernel!r} is not a kernel name "
                                        "(lowercase letters, digits and _, e.g. flashinfer_trtllm)")
        if self.attention_backend is not None:
            if self.name != "sglang":
                raise PlannerInputError(f"--attention-backend: only SGLang's budget depends on its attention backend "
                                        f"here, not {self.name}'s; use --engine sglang, or drop it")
            if not MOE_KERNEL_NAME.fullmatch(self.attention_backend):
                raise PlannerInputError(f"--attention-backend: {self.attention_backend!r} is not a backend name "
                                        "(lowercase letters, digits and _, e.g. triton)")
        if self.max_running_requests is not None and self.name != "sglang":
            raise PlannerInputError(f"--max-running-requests / engine.max_running_requests: SGLang's flag, not "
                                    f"{self.name}'s; use --engine sglang, or drop it (vLLM's limit is --max-num-seqs)")
        if self.cache_type is not None and self.cache_type not in LLAMACPP_CACHE_TYPES:
            raise PlannerInputError(f"--cache-type: {self.cache_type!r} is not a llama.cpp cache type; "
                                    f"use one of {', '.join(LLAMACPP_CACHE_TYPES)}")


@dataclass(frozen=True)
class OutputReservation:
    """An engine that admits a request only when the pool will hold its whole output (SGLang; vLLM admits a prompt's
    blocks and preempts when a decode step finds none, simulate's default): a waiting request joins while the free
    tokens, less what the running requests may still write, hold its prompt, its remaining output and `page_tokens`. A
    running request's remaining output (clipped at `clip_tokens`) counts whole (`fixed_length_whole`: its output is
    fixed, as a benchmark's with ignore_eos) or at the new-token ratio, which starts at `init_ratio`, falls by `decay` a
    decode step to `min_ratio` and is reset when the engine idles. A decode step whose new blocks do not fit retracts
    the running requests with the fewest outputs (the longest prompt first among equals) to the back of the queue,
    until they do, and sets the ratio to (decoded + `retract_steps` x kept) / (their outputs + 1), at most 1
    (planner.estimator.engines.profiles.SglangAdmission has the sources)."""

    init_ratio: float
    min_ratio: float
    decay: float
    retract_steps: int
    clip_tokens: int
    page_tokens: int
    fixed_length_whole: bool

    def counted(self, remaining_output: int, ratio: float) -> float:
        """What a running request with `remaining_output` tokens to write holds back from an admission."""
        return min(remaining_output, self.clip_tokens) * (1.0 if self.fixed_length_whole else ratio)

    def ratio_after_retraction(self, decoded: int, outputs: int, kept: int) -> float:
        """The new-token ratio once `kept` requests that decoded `decoded` of their `outputs` tokens remain."""
        return min(1.0, (decoded + self.retract_steps * kept) / (outputs + 1))


@dataclass(frozen=True)
class PrefillDelayer:
    """SGLang's `--enable-prefill-delayer` under DP attention (managers/prefill_delayer.py): while some groups hold a
    prompt they could admit and others none, the prefill waits up to `max_passes` - 1 passes; while every group holds
    one, it runs at once, or where `waits_for_room` (from v0.5.10) waits until the fullest group has as many free
    request slots as the largest prefill batch a group has run, at most the same passes where `bounds_room_wait`
    (from v0.5.19), else without a bound."""

    max_passes: int
    waits_for_room: bool
    bounds_room_wait: bool


@dataclass(frozen=True)
class BlocksToCompletion:
    """An engine that schedules a request only while its pool's free blocks, less every in-progress request's blocks to
    completion, hold the request's own, and never evicts one: TensorRT-LLM's default capacity scheduler,
    GUARANTEED_NO_EVICT (tensorrt_llm/llmapi/llm_args.py SchedulerConfig.capacity_scheduler_policy;
    cpp/tensorrt_llm/batch_manager/scheduledBlocksManager.h NoEvictScheduledBlocksManager: available blocks less each
    in-progress request's remaining blocks, a new request's `neededBlocks <= availableBlocks`). A request's blocks to
    completion are ceil((prompt + max new tokens) / tokens_per_block) less the blocks it holds (kvCacheManager.cpp
    KVCacheManager::getRemainingBlocksToCompletion, one beam)."""


@dataclass(frozen=True)
class RankBudget:
    """One GPU of the replica as the engine sizes it (bytes)."""

    rank: int
    pp_stage: int
    layers: int
    memory_bytes: int  # the card as CUDA reports it
    budget_bytes: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_pool_bytes: int  # what the engine hands to the KV cache on this GPU
    kv_capacity_tokens: int


@dataclass(frozen=True)
class CacheGroup:
    """Layers of one cache kind on a rank and how the engine pages them."""

    kind: str  # full | sliding | mla | state (linear-attention / Mamba recurrent state)
    layers: int
    groups: int  # vLLM KV cache groups these layers form (each its own block table); SGLang: 1 pool
    blocks_per_request: int  # vLLM: blocks one request of `context` tokens takes in each such group


@dataclass(frozen=True)
class PoolLayout:
    """The pool of the limiting rank as the engine lays it out (what the table explains for hybrid models)."""

    block_size: int  # tokens per attention block (SGLang: 1, it pools token by token)
    page_bytes: int  # one block of one layer; vLLM pads a recurrent state to this size
    layers_per_group: int  # vLLM: layers sharing one block table; the pool has this many tensors
    groups: tuple[CacheGroup, ...]
    state_bytes: int = 0  # one sequence's recurrent state in one layer, before padding
    state_slots: int = 0  # sequences whose recurrent state the pool holds at once (vLLM: capped by max_num_seqs)
    state_pool_bytes: int = 0  # SGLang: its separate state pool (vLLM shares one pool)
    state_scratch_bytes: int = 0  # SGLang with speculative decoding: the verify step's intermediate states beside it
    # SGLang: requests one data-parallel worker admits at once (0: no cap but the pool's), and what sets it: its
    # recurrent-state slots, or DeepSeek-V4's max_running_requests default
    running_requests: int = 0
    running_limit: str = "state slots"
    block_size_reason: str | None = None  # why the engine chose this block size, when it is not its default
    # the engine's own account of a layout the fields above cannot say (vLLM's DeepSeek-V4 groups of several page
    # sizes in one packed pool), one line each
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineBudget:
    """Per rank; with TP/PP the figures are those of the rank whose pool limits the engine (the min)."""

    name: str
    release: str
    gpu_memory_utilization: float | None
    budget_bytes: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_pool_bytes: int  # llama.cpp: its whole cache on the GPUs (it is sized for n_ctx, not a pool)
    kv_cache_capacity_tokens: int  # "GPU KV cache size: N tokens"; SGLang max_total_num_tokens; llama.cpp n_ctx cells
    max_concurrency: float  # sequences of `context` tokens the pool holds at once
    fits: bool  # one sequence of `context` tokens fits, and `batch` of them at once
    max_context_that_fits: int | None  # set when one sequence of `context` does not fit
    message: str | None  # how the engine would say it does not fit
    context: int
    batch: int
    settings: EngineSettings  # the settings with every engine default filled in
    per_rank: tuple[RankBudget, ...]
    warnings: tuple[str, ...] = ()
    host_bytes: int = 0  # llama.cpp: weights, cache and buffers left in system RAM
    gpu_layers: int | None = None  # llama.cpp: layers (incl. the output layer) on the GPUs
    total_layers: int | None = None  # llama.cpp: layers that can be offloaded (blocks + output)
    layout: PoolLayout | None = None  # vLLM / SGLang: how the pool is laid out on the limiting rank


@dataclass(frozen=True)
class Stage:
    """A pipeline stage: its layers and the weight bytes on each of its TP ranks."""

    index: int
    layers: tuple[Layer, ...]
    weights_bytes: int
    first: bool
    last: bool


@dataclass(frozen=True)
class ServedModel:
    """A model resolved for serving: precision, cache dtype and the per-stage layout (from memory.py)."""

    arch: Architecture
    request: Request
    precision: Precision
    kv_dtype: str
    kv_bits: int
    activation_bits: int  # the dtype activations run in (the KV dtype `auto` resolves to)
    stages: tuple[Stage, ...]

    @property
    def gpus(self) -> int:
        return self.request.tp * self.request.pp

    @property
    def attention_tp(self) -> int:
        """The TP size attention and its cache are split by: tp / dp with data-parallel attention (each DP group
        caches its own requests), tp without."""
        return self.request.tp // self.request.dp

    @property
    def activation_bytes(self) -> int:
        return self.activation_bits // 8

    def layer_bytes_per_token(self, layer: Layer) -> int:
        """KV bytes one token adds to `layer` on one TP rank (the Architecture's per-token bytes: a DSA
        indexer's key cache included)."""
        return attention_bytes_per_token(layer.attention, self.attention_tp, self.kv_bits)

    def cache_layers(self, stage: Stage) -> tuple[Layer, ...]:
        """The stage's layers that keep a cache (per-token KV or a recurrent state); a block without attention or
        recurrence (a Nemotron-H MLP layer) gets no pages."""
        return tuple(layer for layer in stage.layers
                     if layer.attention.kind in RECURRENT_KINDS or self.layer_bytes_per_token(layer))

    def layer_state_bytes(self, layer: Layer, conv_bits: int, recurrent_bits: int | None = None) -> int:
        """One sequence's recurrent state in a linear-attention / Mamba `layer` on one TP rank: its convolution
        window held in `conv_bits`, its recurrent state in `recurrent_bits` (the same when not given)."""
        return state_bytes_per_sequence(layer.attention, self.attention_tp, conv_bits, recurrent_bits)

    def state_bits(self, layer: Layer, dtypes: Mapping[str, StatePartDtypes]) -> tuple[int, int]:
        """(convolution, recurrent) bits an engine holds `layer`'s state in, by the layer's recurrent mixer
        (`dtypes`: the engine profile's rule); a state of a mixer the rule does not name is in the model dtype."""
        attention = layer.attention
        parts = dtypes.get(attention.recurrence) if attention.recurrence else None
        if parts is None:
            return self.activation_bits, self.activation_bits
        return self._dtype_bits(parts.conv, parts, attention), self._dtype_bits(parts.recurrent, parts, attention)

    def _dtype_bits(self, dtype: str, parts: StatePartDtypes, attention: Attention) -> int:
        if dtype == "config":
            dtype = attention.config_ssm_dtype or parts.unset_by_model_type.get(self.arch.model_type, parts.unset)
        return self.activation_bits if dtype == "auto" else STATE_DTYPE_BITS[dtype]


class Memo:
    """A pure function's results by key, kept while one run asks for them again (the candidate search sizes every
    layout at several contexts on every card, and the fleet sizes the same replicas again). A key names unhashable
    inputs (the catalog, an engine profile) by id(): `held` keeps those objects with the result, and a result is
    reused only while they are the very same objects, since an id is unique only while its object lives."""

    def __init__(self) -> None:
        self._known: dict[tuple, tuple[tuple[Any, ...], Any]] = {}

    def get(self, key: tuple, held: tuple[Any, ...], compute: Callable[[], T]) -> T:
        known = self._known.get(key)
        if known is None or len(known[0]) != len(held) or any(a is not b for a, b in zip(known[0], held)):
            if len(self._known) >= MEMO_ENTRIES:
                self._known.clear()
            known = self._known[key] = (held, compute())
        return known[1]


_ESTIMATES = Memo()


def estimate_once(arch: Architecture, request: Request, catalog: Catalog) -> MemoryEstimate:
    """estimate_memory of `request` (no card, the planning margin), memoised: an engine budget lays the model
    out from it, and the engine check of a batch reads the same estimate's KV per sequence. The quantization_config
    (a dict outside the Architecture's equality) decides an `auto` precision: it is held like the catalog."""
    return _ESTIMATES.get((arch, request, id(catalog), id(arch.quantization_config)), (catalog, arch.quantization_config),
                          lambda: estimate_memory(arch, request, catalog))


def engine_refusal(arch: Architecture, name: str) -> str | None:
    """Why the engine profile cannot size this model at all (None when it can): the engine module's refusal."""
    return engine(name).refusal(arch)


def serve(arch: Architecture, request: Request, catalog: Catalog, engine: str) -> ServedModel:
    """Lay the model out over the request's TP x PP ranks; refuse what `engine`'s profile cannot size."""
    refusal = engine_refusal(arch, engine)
    if refusal:
        raise PlannerInputError(refusal)
    if (request.dp, request.ep, request.all_to_all) != (1, 1, None) and not registry.engine(engine).sizes_expert_parallel:
        raise PlannerInputError(f"--engine {engine}: its memory profile does not size data-parallel attention or expert "
                                "parallelism yet; use --engine sglang or the simple planning margin")
    estimate = estimate_once(arch, request, catalog)
    precision = resolve_precision(catalog, arch, request.precision)
    kv_dtype = registry.resolve_engine_kv_dtype(engine, arch, precision, request.kv_dtype)
    activation_dtype = resolve_kv_dtype(arch, precision, None)
    stage_ranks = [rank for rank in estimate.per_gpu if rank.tp_rank == 0]
    stages = tuple(
        Stage(rank.pp_stage, arch.layers[rank.first_layer:rank.last_layer], rank.weights_bytes,
              first=rank.pp_stage == 0, last=rank.pp_stage == request.pp - 1)
        for rank in stage_ranks
    )
    return ServedModel(arch, request, precision, kv_dtype, catalog.kv_dtypes.get(kv_dtype).bits,
                       catalog.kv_dtypes.get(activation_dtype).bits, stages)


def catalog_card(gpu: GpuTarget, catalog: Catalog) -> Gpu | None:
    """The catalog record of the card, None for a custom --gpu-memory size."""
    return next((record for record in catalog.gpus if record.name == gpu.name), None)


def limiting_rank(ranks: tuple[RankBudget, ...]) -> RankBudget:
    """The rank with the smallest cache: the one that sets the engine's pool."""
    return min(ranks, key=lambda r: (r.kv_capacity_tokens, r.kv_pool_bytes))


def largest_passing(low: int, high: int, passes) -> int | None:
    """The largest n in [low, high] with passes(n), for a predicate that is monotone (true, then false)."""
    if not passes(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if passes(mid):
            low = mid
        else:
            high = mid - 1
    return low


__all__ = ["ENGINE_NAMES", "KV_CACHE_MEMORY_MODES", "CacheGroup", "EngineBudget", "EngineSettings", "Memo", "OutputReservation",
           "PrefillDelayer",
           "BlocksToCompletion", "PoolLayout", "RankBudget", "ServedModel",
           "Stage", "catalog_card", "estimate_once", "engine_refusal", "largest_passing", "limiting_rank", "serve"]
