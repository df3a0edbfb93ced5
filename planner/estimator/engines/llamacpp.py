"""llama.cpp (llama-server) start-up: layers placed on devices, a KV cache of n_ctx cells, compute buffers.

  1. llama-model.cpp load_tensors: the token embeddings stay in host memory; the last n_gpu_layers of the
     n_layer blocks + output layer go to the GPUs, split by layer in proportion to each device's free
     memory (equal cards: equal shares); the rest stay in system RAM. A tied output matrix is duplicated.
  2. llama-context.cpp: n_ctx is padded to 256 cells; with --parallel n_seq and the default split cache
     (kv_unified false) every sequence has its own stream of pad(n_ctx / n_seq) cells, so serving n_seq
     sequences of `context` tokens takes n_seq x pad(context) cells. Each layer's cache lives with the
     layer: K and V rows of n_embd_k_gqa / n_embd_v_gqa values in the cache type (f16 2 B; q8_0 34 B and
     q4_0 18 B per 32 values). Sliding-window layers (llama_kv_cache_iswa) hold at most
     pad(window + n_ubatch) cells per stream. DeepSeek-V4 (llama_kv_cache_dsv4, a later release): that
     windowed raw cache holds K only, and each compressed layer adds per stream K-only caches of pad(ceil(kv_size
     / ratio), 256) cells (CSA or HCA, and the lightning indexer's at ratio 4) and f32 compressor states.
  2b. Hybrid and recurrent models (Qwen3-Next / Qwen3.5 Gated DeltaNet, Nemotron-H / Jamba / Mamba-2): the attention
     layers keep the llama_kv_cache above and the recurrent layers a llama_memory_recurrent beside it
     (src/llama-memory-hybrid.cpp). src/llama-model.cpp create_memory gives it GGML_TYPE_F32 for both type_r and
     type_s and max(1, n_seq_max) cells: one per --parallel sequence, whatever the context. In each recurrent layer
     every cell holds an r row of n_embd_r() = (d_conv - 1) x (d_inner + 2 x n_group x d_state) conv values and an s
     row of n_embd_s() = d_state x d_inner state values (src/llama-hparams.cpp; Gated DeltaNet: d_inner = value heads
     x value dim, n_group = key heads, d_state = key dim), on the device holding the layer
     (src/llama-memory-recurrent.cpp: model.dev_layer(il) when offload_kqv, the default). Read in ggml-org/llama.cpp
     src/llama-memory-recurrent.cpp @ 0054ee8c, src/llama-hparams.cpp @ 01b77b57, src/llama-model.cpp @ 00342301
     (commits, not release tags); checked against the 299.25 MiB of pull request #23792's log (bench/accuracy.py).
     Not modelled: the MTP rollback snapshots (n_rs_seq > 0 multiplies the rows by 1 + n_rs_seq; 0 without MTP).
  3. The worst-case graph for n_ubatch tokens is reserved as each device's compute buffer: without flash
     attention the f32 attention scores (n_ctx x n_ubatch x heads) dominate; with it, the feed-forward
     intermediates or the output logits (n_vocab x n_ubatch floats) on the device holding the output layer.
  4. --fit (on by default) leaves fit_target free on every device; when the model does not fit it keeps
     fewer layers on the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from math import ceil

from planner.model.architecture import Architecture, Layer
from planner.catalog.load import Catalog, Precision
from planner.errors import PlannerInputError
from planner.estimator.engines.base import (LLAMACPP_CACHE_TYPES, LLAMACPP_RECURRENCES, CacheGroup, EngineBudget,
                                            EngineSettings, PoolLayout, RankBudget, ServedModel, largest_passing, serve)
from planner.estimator.engines.profiles import LlamacppProfile, load_profiles
from planner.estimator.engines.registry import Engine
from planner.estimator.memory import RECURRENT_KINDS, GpuTarget, Request
from planner.model.precision import weights_bytes
from planner.units import MiB, gib

F32_BYTES = 4
F16_BYTES = 2
# llama.cpp --cache-type-k/-v (common/arg.cpp kv_cache_types) of a planner KV dtype; fp8 has no ggml type, q8_0 is its
# 8-bit cache; a dtype missing here has no llama.cpp cache type
LLAMACPP_CACHE_TYPES_OF_KV_DTYPE = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "fp8": "q8_0"}


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp puts each offloadable layer (blocks, then the output layer): a device index or None (host)."""

    devices: tuple[int | None, ...]

    @property
    def gpu_layers(self) -> int:
        return sum(device is not None for device in self.devices)


def resolve_settings(settings: EngineSettings, model: ServedModel, profile: LlamacppProfile) -> EngineSettings:
    cache = settings.cache_type or LLAMACPP_CACHE_TYPES_OF_KV_DTYPE.get(model.kv_dtype, "f16")
    n_batch = settings.n_batch or profile.n_batch.value
    return replace(settings, cache_type=cache, n_batch=n_batch,
                   n_ubatch=min(n_batch, settings.n_ubatch or profile.n_ubatch.value),
                   flash_attn=True if settings.flash_attn is None else settings.flash_attn)


def place_layers(n_layer: int, n_gpu_layers: int, devices: int) -> Placement:
    """llama-model.cpp: i_gpu_start = n_layer + 1 - n_gpu_layers; layer il goes to the first device whose
    cumulative split exceeds (il - i_gpu_start) / offloaded layers."""
    offloaded = min(n_gpu_layers, n_layer + 1)
    start = n_layer + 1 - offloaded
    placement: list[int | None] = []
    for il in range(n_layer + 1):
        if il < start:
            placement.append(None)
        else:
            share = (il - start) / offloaded
            placement.append(next(d for d in range(devices) if share < (d + 1) / devices))
    return Placement(tuple(placement))


def _row_bytes(values: int, cache_type: str) -> int:
    """ggml_row_size: `values` in the cache type's blocks."""
    block_bytes, block_values = LLAMACPP_CACHE_TYPES[cache_type]
    return ceil(values / block_values) * block_bytes


def _cache_bytes_per_cell(layer: Layer, cache_type: str) -> int:
    a = layer.attention
    if a.kind == "mla":
        values = (a.latent_dim,)  # the compressed latent, stored once (as memory.py counts MLA)
    else:  # a DeepSeek-V4 window has no V (v_head_dim 0): llama_kv_cache_dsv4 keeps its raw cache K-only
        values = (a.kv_heads * a.k_head_dim, a.kv_heads * a.v_head_dim)
    return sum(_row_bytes(v, cache_type) for v in values)


def compressed_cache_bytes(layer: Layer, stream: int, streams: int, cache_type: str, profile: LlamacppProfile) -> int:
    """llama_kv_cache_dsv4 beside the raw window: a DeepSeek-V4 layer of compress ratio r keeps, per stream,
    pad(ceil(stream / r), 256) K-only cells of head_dim (CSA / HCA caches) and, at r = 4, as many of the indexer's
    key (lightning-indexer cache), all in the cache type; and an f32 kv + score state of state_tokens rows x coff x
    width per compressor (coff 2 at r = 4). Zero for a layer without compressed attention."""
    a = layer.attention
    ratio = a.compress_ratio
    if not ratio:
        return 0
    rows = profile.deepseek_v4_state_tokens.value.get(ratio)
    if rows is None:
        raise PlannerInputError(f"compress_ratios: llama.cpp's DeepSeek-V4 cache takes ratios "
                                f"{sorted(profile.deepseek_v4_state_tokens.value)} (and 0), not {ratio}")
    cells = _pad(max(1, ceil(stream / ratio)), profile.deepseek_v4_compressed_pad.value)
    coff = 2 if ratio == profile.deepseek_v4_overlapping_ratio.value else 1
    widths = [width for width in (a.k_head_dim, a.compressed_index_dim) if width]
    per_stream = sum(cells * _row_bytes(width, cache_type) + 2 * rows * coff * width * F32_BYTES for width in widths)
    return streams * per_stream


def recurrent_state_bytes(layer: Layer) -> tuple[int, int]:
    """One llama_memory_recurrent cell of `layer`: its r row (n_embd_r conv values) and s row (n_embd_s state values)
    in f32 bytes; (0, 0) for a layer without a recurrent state. Planner's conv_state_elements and the rest of
    state_elements are those two counts: the same conv and state shapes vLLM gives them (whole, at TP 1)."""
    a = layer.attention
    if a.kind not in RECURRENT_KINDS:
        return 0, 0
    return a.conv_state_elements * F32_BYTES, (a.state_elements - a.conv_state_elements) * F32_BYTES


def _pad(n: int, to: int) -> int:
    return ceil(n / to) * to


@dataclass(frozen=True)
class _Sizes:
    """Byte counts that do not depend on where layers go."""

    layer_weights: tuple[int, ...]
    output_weights: int
    input_weights: int  # token embeddings: always host memory
    layer_cache: tuple[int, ...]
    layer_states: tuple[int, ...]  # llama_memory_recurrent: each layer's r + s rows for the n_seq_max cells
    n_ctx: int


# llama.cpp loads these architectures' sliding window and turns it off: every layer keeps the full cache
# (src/llama-model.cpp load_hparams, LLM_ARCH_PHI3: "Phi SWA is currently disabled", swa_type NONE, n_swa 0; read in
# the llama.cpp vendored by llama-cpp-python 0.3.16, and ggml-org/llama.cpp pull request #13676)
_FULL_CACHE_DESPITE_WINDOW = frozenset({"phi3"})


def _sizes(model: ServedModel, settings: EngineSettings, profile: LlamacppProfile) -> _Sizes:
    arch, request = model.arch, model.request
    pad = profile.ctx_pad.value
    stream = _pad(request.context, pad)
    cells = []
    windowed = arch.model_type not in _FULL_CACHE_DESPITE_WINDOW
    for layer in arch.layers:
        window = layer.attention.window if layer.attention.kind == "sliding" and windowed else None
        cells.append(request.batch * (min(stream, _pad(window + settings.n_ubatch, pad)) if window else stream))
    n_ctx = request.batch * stream
    cache = tuple(n * _cache_bytes_per_cell(layer, settings.cache_type)
                  + compressed_cache_bytes(layer, stream, request.batch, settings.cache_type, profile)
                  for n, layer in zip(cells, arch.layers))
    states = tuple(request.batch * sum(recurrent_state_bytes(layer)) for layer in arch.layers)  # one cell a sequence
    if arch.exact:
        layers, head, embedding = _weights(arch, model.precision)
        return _Sizes(layers, head, embedding, cache, states, n_ctx)
    # a model known by its size: its weights spread evenly over the blocks
    total = model.stages[0].weights_bytes
    return _Sizes(tuple(total // arch.num_layers for _ in arch.layers), 0, 0, cache, states, n_ctx)


@lru_cache(maxsize=256)
def _weights(arch: Architecture, precision: Precision) -> tuple[tuple[int, ...], int, int]:
    """(bytes of each block, of the output layer, of the token embeddings); cached: searches ask many times."""
    embedding = weights_bytes(arch.embedding, precision)
    head = weights_bytes(arch.head, precision) + (embedding if arch.tied_embeddings else 0)
    return tuple(weights_bytes(layer.tensors, precision) for layer in arch.layers), head, embedding


def compute_buffer(arch: Architecture, n_ctx: int, settings: EngineSettings, with_output: bool,
                   profile: LlamacppProfile) -> int:
    """The worst-case graph's scratch on one device: attention, feed-forward or output phase, whichever is largest."""
    tokens = min(settings.n_ubatch, n_ctx)
    hidden, heads = arch.hidden_size, arch.num_attention_heads
    moe = arch.moe
    ffn = (moe.experts_per_token * moe.expert_intermediate_size + moe.shared_intermediate_size) if moe else arch.intermediate_size
    hidden_part = profile.hidden_buffers_in_attention.value * hidden
    if settings.flash_attn:
        attention = tokens * (F32_BYTES * hidden_part + F16_BYTES * n_ctx)  # + the f16 mask
    else:
        # f32 scores for every head, their f32 mask, and the hidden-size tensors beside them
        attention = tokens * F32_BYTES * (n_ctx * heads + n_ctx + hidden_part)
    feed_forward = tokens * F32_BYTES * (profile.ffn_buffers.value * ffn + 2 * hidden)
    output = tokens * F32_BYTES * (arch.vocab_size + hidden) if with_output else 0
    return max(attention, feed_forward, output)


@dataclass(frozen=True)
class _Usage:
    per_device: tuple[tuple[int, int, int, int], ...]  # (weights, KV cache, compute, recurrent states) bytes a GPU
    host_bytes: int


def _usage(arch: Architecture, sizes: _Sizes, placement: Placement, devices: int, settings: EngineSettings,
           request: Request, profile: LlamacppProfile) -> _Usage:
    weights = [0] * devices
    cache = [0] * devices
    states = [0] * devices
    host = sizes.input_weights + arch.vocab_size * request.batch * F32_BYTES  # + the logits output buffer
    for il, device in enumerate(placement.devices):
        block = il < arch.num_layers
        layer_weights = sizes.layer_weights[il] if block else sizes.output_weights
        layer_cache = sizes.layer_cache[il] if block else 0
        layer_states = sizes.layer_states[il] if block else 0
        if device is None:
            host += layer_weights + layer_cache + layer_states
        else:
            weights[device] += layer_weights
            cache[device] += layer_cache
            states[device] += layer_states
    output_device = placement.devices[-1]
    used = tuple((weights[d], cache[d], compute_buffer(arch, sizes.n_ctx, settings, d == output_device, profile)
                  if weights[d] else 0, states[d]) for d in range(devices))
    return _Usage(used, host)


@dataclass(frozen=True)
class _Plan:
    settings: EngineSettings
    sizes: _Sizes
    gpu_layers: int
    placement: Placement
    usage: _Usage
    within_margin: bool  # every GPU keeps fit_target free
    visible: int
    free: int
    budget: int


def _plan(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget, catalog: Catalog) -> _Plan:
    profiles = load_profiles()
    profile, cuda = profiles.llamacpp.get(settings.version, "llamacpp"), profiles.cuda
    devices = request.tp * request.pp  # llama.cpp splits by layer (--split-mode layer); tp x pp = the cards
    model = serve(arch, replace(request, tp=1, pp=1), catalog, "llamacpp")
    resolved = resolve_settings(settings, model, profile)
    visible = cuda.visible_bytes(gpu.memory_bytes)
    free = visible - cuda.context_mib.value * MiB
    budget = free - profile.fit_target_mib.value * MiB
    sizes = _sizes(model, resolved, profile)

    def usage(gpu_layers: int) -> _Usage:
        return _usage(arch, sizes, place_layers(arch.num_layers, gpu_layers, devices), devices, resolved, request, profile)

    def within(gpu_layers: int) -> bool:
        return all(sum(device) <= budget for device in usage(gpu_layers).per_device)

    offloadable = arch.num_layers + 1
    if resolved.n_gpu_layers is None:  # --fit: as many layers as leave fit_target free
        gpu_layers = largest_passing(0, offloadable, within) or 0
    else:
        gpu_layers = min(resolved.n_gpu_layers, offloadable)
    return _Plan(resolved, sizes, gpu_layers, place_layers(arch.num_layers, gpu_layers, devices), usage(gpu_layers),
                 within(gpu_layers), visible, free, budget)


def _fully_offloaded_fits(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget,
                          catalog: Catalog) -> bool:
    return _plan(arch, request, replace(settings, n_gpu_layers=arch.num_layers + 1), gpu, catalog).within_margin


def llamacpp_budget(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget,
                    catalog: Catalog) -> EngineBudget:
    profile = load_profiles().llamacpp.get(settings.version, "llamacpp")
    plan = _plan(arch, request, settings, gpu, catalog)
    offloadable = arch.num_layers + 1
    gpu_layers, used, n_ctx = plan.gpu_layers, plan.usage, plan.sizes.n_ctx
    # layers the user placed by hand may stay in RAM; --fit's own choice counts as fitting only when complete
    fits = plan.within_margin and (gpu_layers == offloadable or settings.n_gpu_layers is not None)
    ranks = tuple(RankBudget(rank=d, pp_stage=d, layers=plan.placement.devices.count(d), memory_bytes=plan.visible,
                             budget_bytes=plan.budget, weights_bytes=w, activation_bytes=compute, non_torch_bytes=0,
                             cuda_graph_bytes=0, kv_pool_bytes=c + states, kv_capacity_tokens=n_ctx)
                  for d, (w, c, compute, states) in enumerate(used.per_device))
    fullest = max(ranks, key=lambda r: r.weights_bytes + r.kv_pool_bytes + r.activation_bytes)
    message, longest = None, None
    if not fits:
        one = replace(request, batch=1)
        longest = largest_passing(1, request.context,
                                  lambda n: _fully_offloaded_fits(arch, replace(one, context=n), settings, gpu, catalog))
        if plan.within_margin:
            message = (f"llama.cpp --fit would keep {gpu_layers}/{offloadable} layers on the GPU(s) and "
                       f"{gib(used.host_bytes):.2f} GiB of weights and cache in system RAM (slower)")
        else:
            projected = fullest.weights_bytes + fullest.kv_pool_bytes + fullest.activation_bytes
            message = (f"projected to use {gib(projected):.2f} GiB of a device with {gib(plan.free):.2f} GiB free, leaving "
                       f"less than the {profile.fit_target_mib.value} MiB --fit keeps free; lower -c/--parallel, quantize "
                       "the cache (-ctk/-ctv q8_0) or offload fewer layers (-ngl)")
    compressed = arch.has_compressed_caches
    recurrent = any(plan.sizes.layer_states)
    layout = (_deepseek_v4_layout(arch, plan, request, profile) if compressed else
              _recurrent_layout(arch, plan, request, profile) if recurrent else None)
    return EngineBudget(
        name="llamacpp", release=(f"{profile.release}; DeepSeek-V4 cache as {profile.deepseek_v4_release.value}"
                                  if compressed else profile.release),
        gpu_memory_utilization=None, budget_bytes=plan.budget,
        weights_bytes=fullest.weights_bytes, activation_bytes=fullest.activation_bytes, non_torch_bytes=0,
        cuda_graph_bytes=0, kv_pool_bytes=sum(r.kv_pool_bytes for r in ranks), kv_cache_capacity_tokens=n_ctx,
        max_concurrency=n_ctx / request.context, fits=fits, max_context_that_fits=longest, message=message,
        context=request.context, batch=request.batch, settings=replace(plan.settings, n_gpu_layers=gpu_layers),
        per_rank=ranks, host_bytes=used.host_bytes, gpu_layers=gpu_layers, total_layers=offloadable,
        layout=layout, warnings=tuple(_compute_buffer_warning(graph) for graph, special in (
            ("DeepSeek-V4's", compressed), ("the recurrent layers'", recurrent)) if special),
    )


def _compute_buffer_warning(graph: str) -> str:
    """compute_buffer models a plain transformer's worst-case graph, not llama.cpp's DeepSeek-V4 compressors and
    lightning indexer, nor its ssm_conv / ssm_scan / delta-rule chunks."""
    return (f"the compute buffer is estimated as for a plain transformer's worst-case graph; llama.cpp's graph of "
            f"{graph} own operations is not modelled or measured here")


def _mib(n: int) -> str:
    return f"{n / MiB:.2f} MiB"


def _recurrent_layout(arch: Architecture, plan: _Plan, request: Request, profile: LlamacppProfile) -> PoolLayout:
    """The attention KV cache and the recurrent memory beside it, as llama-server logs them: src/llama-memory-
    recurrent.cpp prints "%10s RS buffer size = %8.2f MiB" per buffer and "size = %7.2f MiB (%6u cells, %3d layers,
    %2u seqs ...), R (%s): %7.2f MiB, S (%s): %7.2f MiB"."""
    recurrent = [layer for layer in arch.layers if layer.attention.kind in RECURRENT_KINDS]
    cells = request.batch
    r_bytes = cells * sum(recurrent_state_bytes(layer)[0] for layer in recurrent)
    s_bytes = cells * sum(recurrent_state_bytes(layer)[1] for layer in recurrent)
    on_gpu = [states for *_, states in plan.usage.per_device]
    buffers = [f"CUDA{d} RS buffer size = {_mib(b)}" for d, b in enumerate(on_gpu) if b]
    on_host = r_bytes + s_bytes - sum(on_gpu)
    buffers += [f"CPU RS buffer size = {_mib(on_host)}"] if on_host else []
    attention = [layer for layer in arch.layers if layer.attention.kind not in RECURRENT_KINDS
                 and layer.attention.values_per_token]
    kv = sum(plan.sizes.layer_cache)
    stream = _pad(request.context, profile.ctx_pad.value)
    notes = (f"llama_kv_cache: size = {_mib(kv)} ({plan.sizes.n_ctx:,} cells, {len(attention)} attention layers, "
             f"{cells} stream(s) of {stream:,}), {plan.settings.cache_type}",
             f"llama_memory_recurrent: size = {_mib(r_bytes + s_bytes)} ({cells} cells, {len(recurrent)} recurrent "
             f"layers, {cells} seqs: one cell per --parallel sequence, whatever the context), R (f32): {_mib(r_bytes)}, "
             f"S (f32): {_mib(s_bytes)}",
             "llama_memory_recurrent: " + "; ".join(buffers))
    groups = (CacheGroup("full", len(attention), 1, 1), CacheGroup("state", len(recurrent), 1, 1))
    return PoolLayout(block_size=1, page_bytes=0, layers_per_group=arch.num_layers, groups=groups,
                      state_bytes=max(sum(recurrent_state_bytes(layer)) for layer in recurrent), state_slots=cells,
                      state_pool_bytes=sum(on_gpu), notes=notes)


def _deepseek_v4_layout(arch: Architecture, plan: _Plan, request: Request, profile: LlamacppProfile) -> PoolLayout:
    """The DSV4 cache of every layer (llama_kv_cache_dsv4), summed over the model, for the table."""
    stream = _pad(request.context, profile.ctx_pad.value)
    cache_type = plan.settings.cache_type
    def compressed(layers: list[Layer]) -> int:
        return sum(compressed_cache_bytes(layer, stream, request.batch, cache_type, profile) for layer in layers)

    raw = sum(plan.sizes.layer_cache) - compressed(list(arch.layers))
    ratios = sorted({layer.attention.compress_ratio for layer in arch.layers} - {0})
    kinds = [(ratio, [layer for layer in arch.layers if layer.attention.compress_ratio == ratio]) for ratio in ratios]
    groups = (CacheGroup("window (raw)", arch.num_layers, 1, 1),) + tuple(
        CacheGroup(f"compressed 1/{ratio}", len(layers), 1, 1) for ratio, layers in kinds)
    pad = profile.deepseek_v4_compressed_pad.value
    parts = "; ".join(f"ratio {ratio}: {len(layers)} layers, {_pad(max(1, ceil(stream / ratio)), pad):,} cells a "
                      f"stream, {compressed(layers):,} B with their compressor states" for ratio, layers in kinds)
    note = (f"llama.cpp's DeepSeek-V4 cache (llama_kv_cache_dsv4), {request.batch} stream(s) of {stream:,} cells, "
            f"{cache_type}: raw window (K only) {raw:,} B; {parts}")
    return PoolLayout(block_size=1, page_bytes=0, layers_per_group=arch.num_layers, groups=groups, notes=(note,))


def refusal(arch: Architecture) -> str | None:
    """llama.cpp's recurrent memory (src/llama-memory-recurrent.cpp) is sized for the mixers whose n_embd_r / n_embd_s
    its profile follows (LLAMACPP_RECURRENCES): a model with other recurrent layers is refused."""
    unsized = sorted({layer.attention.recurrence or layer.attention.kind for layer in arch.layers
                      if layer.attention.kind in RECURRENT_KINDS} - set(LLAMACPP_RECURRENCES))
    if unsized:
        return (f"--engine llamacpp: {arch.name} has {'/'.join(unsized)} layers, whose recurrent state the llama.cpp "
                f"profile does not size (it sizes {', '.join(LLAMACPP_RECURRENCES)}); use --engine vllm, sglang or simple")
    return None


def batching(settings: EngineSettings, context: int) -> tuple[int, int | None, int | None]:
    """llama-server splits its n_ctx cells evenly over its slots: each request holds a whole context; a step takes
    --n-batch tokens."""
    return context, settings.n_batch, None


ENGINE = Engine("llamacpp", llamacpp_budget, LlamacppProfile, refusal=refusal, batching=batching,
                cache_sized_by_batch=True, tensor_parallel=False, kv_cache_dtypes=LLAMACPP_CACHE_TYPES_OF_KV_DTYPE,
                kv_cache_dtype_default=None, command="planner.render.export:llamacpp_command")
