"""Inference memory: weights + KV cache + overhead, per GPU under tensor and pipeline parallelism.

Method (the seed's, made exact):
  weights  = every tensor in its precision's layout (architecture.py x precision.py), or
             params x bytes per param for a model known only by its size;
  KV cache = per layer: full attention 2 x kv_heads x head_dim x bytes x context; sliding-window
             layers hold min(context, window) tokens; MLA layers hold (kv_lora_rank +
             qk_rope_head_dim) values per token, no factor 2; all x batch;
  overhead = a planning margin of (weights + KV) on each GPU, never less than the per-GPU runtime
             reserve (the CUDA context every GPU holds; see catalogs/engines.yaml).
Under TP the block weights and KV heads are split across ranks (KV heads replicated once tp
exceeds them; an MLA latent is whole on every rank); under PP layers are split into stages, the
first holding the embeddings (and any vision tower), the last the final norm and lm_head.
With data-parallel attention (dp) and expert parallelism (ep) the tensors are placed as
layout.rank_share says; each attention-DP group caches only its own share of the batch (its
attention TP tp / dp splits the KV heads; an MLA latent is whole in each group), and with the DeepEP
all-to-all (SGLang --moe-a2a-backend deepep) its buffers are a named part of every GPU's memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from functools import lru_cache
from math import ceil

from planner.model.architecture import Architecture, Attention, Layer, Tensor
from planner.catalog.load import Catalog, Engine, Gpu, Precision
from planner.errors import PlannerInputError
from planner.estimator.layout import (kv_heads_per_rank, layer_kv_heads, layout_name, model_kv_heads, parallel_refusal, pipeline_stages,
                                      rank_share, shard_shape, tied_lm_head)
from planner.estimator.engines.registry import resolve_engine_kv_dtype
from planner.model.precision import resolve_kv_dtype, resolve_precision, tensor_bytes
from planner.units import MAX_BATCH, MAX_CONTEXT, MAX_GPUS_PER_REPLICA, format_bytes


HEADROOM_WARNING_FRACTION = Fraction(5, 100)  # below 5% of the card left: "filling the GPU to 100%"
KV_RIVALS_WEIGHTS_FRACTION = Fraction(1, 2)  # KV at half the weights or more "rivals the weights"
RECURRENT_KINDS = ("linear", "mamba")  # layers that keep a constant state per sequence instead of per-token KV


@dataclass(frozen=True)
class GpuTarget:
    """The card a plan must fit on: a catalog GPU or a custom --gpu-memory size."""

    name: str
    memory_bytes: int
    generation: str | None = None

    @classmethod
    def from_catalog(cls, gpu: Gpu) -> GpuTarget:
        return cls(gpu.name, gpu.memory_bytes, gpu.generation)


@dataclass(frozen=True)
class RankMemory:
    """What one GPU of the replica holds: its layers, weights, KV cache and overhead."""

    rank: int
    tp_rank: int
    pp_stage: int
    first_layer: int
    last_layer: int  # exclusive
    weights_bytes: int
    kv_bytes_per_token: int
    kv_cache_bytes: int
    overhead_bytes: int
    total_bytes: int
    dp_rank: int = 0  # the attention-DP group whose requests this GPU caches
    buffers_bytes: int = 0  # the expert-parallel all-to-all buffers (DeepEP)


@dataclass(frozen=True)
class GpuFit:
    """Whether the replica fits the target card, and by how much on its fullest GPU."""

    name: str
    memory_bytes: int
    fits: bool
    headroom_bytes: int  # on the fullest GPU; negative when it does not fit


@dataclass(frozen=True)
class MemoryEstimate:
    """The memory one replica needs (the JSON contract of `planner estimate`), in total and per GPU."""

    model: str
    params: int
    precision: str
    kv_dtype: str
    context: int
    batch: int
    tp: int
    pp: int
    weights_bytes: int
    kv_bytes_per_token: int
    kv_cache_bytes: int
    overhead_bytes: int
    total_bytes: int
    per_gpu: tuple[RankMemory, ...]
    gpu: GpuFit | None
    warnings: tuple[str, ...]
    # Extras beyond the JSON contract
    exact: bool = True
    language_params: int = 0
    multimodal_params: int = 0
    checkpoint_params: int = 0
    kv_sliding_bytes_per_token: int = 0
    kv_state_bytes_per_sequence: int = 0  # linear-attention / Mamba layers, whatever the context
    sliding_windows: tuple[int, ...] = ()
    overhead_fraction: float = 0.10
    runtime_reserve_bytes: int = 0
    quality: str = ""
    attention_kinds: tuple[str, ...] = field(default_factory=tuple)
    dp: int = 1  # attention-DP groups among the tp GPUs
    ep: int = 1  # expert-parallel size
    buffers_bytes: int = 0  # all GPUs' expert-parallel all-to-all buffers
    all_to_all: str | None = None  # the experts' all-to-all backend (None: outputs all-reduced in place)

    @property
    def layout(self) -> str:
        return layout_name(self.tp, self.pp, self.dp, self.ep)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_frame(self):
        """The per-GPU breakdown as a pandas DataFrame, one row per rank."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.per_gpu])


@dataclass(frozen=True)
class Request:
    """What the user asked for, before catalog lookups."""

    context: int
    batch: int = 1
    tp: int = 1
    pp: int = 1
    precision: str | None = None  # None/auto: from the checkpoint
    kv_dtype: str | None = None  # None/auto: the model's activation dtype
    overhead_fraction: float | None = None  # None: the engine default (10%)
    dp: int = 1  # data-parallel attention groups among the tp GPUs (SGLang --enable-dp-attention --dp-size)
    ep: int = 1  # expert-parallel size (SGLang --ep-size; vLLM --enable-expert-parallel makes it tp x dp)
    all_to_all: str | None = None  # the experts' all-to-all backend: "deepep" (SGLang --moe-a2a-backend), None: none


# --------------------------------------------------------------------------------------------
# Validation


def validate_request(arch: Architecture, req: Request) -> None:
    checks = (("--context", req.context, MAX_CONTEXT), ("--batch", req.batch, MAX_BATCH),
              ("--tp", req.tp, MAX_GPUS_PER_REPLICA), ("--pp", req.pp, MAX_GPUS_PER_REPLICA),
              ("--dp", req.dp, MAX_GPUS_PER_REPLICA), ("--ep", req.ep, MAX_GPUS_PER_REPLICA))
    for flag, value, limit in checks:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlannerInputError(f"{flag}: must be a whole number, got {value!r}")
        if value < 1:
            raise PlannerInputError(f"{flag}: must be at least 1, got {value}")
        if value > limit:
            raise PlannerInputError(f"{flag}: {value:,} is beyond any real deployment (limit {limit:,}); check the number")
    if req.tp * req.pp > MAX_GPUS_PER_REPLICA:
        raise PlannerInputError(f"--tp x --pp: {req.tp * req.pp} GPUs per replica is beyond the limit of {MAX_GPUS_PER_REPLICA}")
    if req.overhead_fraction is not None and not 0 <= req.overhead_fraction <= 1:
        raise PlannerInputError(f"--overhead: {req.overhead_fraction} must be a fraction between 0 and 1 (0.10 = 10%)")
    refusal = parallel_refusal(arch, req.tp, req.pp, req.dp, req.ep)
    if refusal:
        raise PlannerInputError(refusal)
    if req.all_to_all not in ALL_TO_ALL_BACKENDS:
        raise PlannerInputError(f"--all-to-all: {req.all_to_all!r} is not modelled; use deepep, or leave it out (the "
                                "experts' outputs all-reduced)")
    if req.all_to_all and req.ep != req.tp:
        # sglang/srt/arg_groups/overrides.py @ v0.5.23 _a2a_ep_size: an all-to-all backend sets ep_size = tp_size
        raise PlannerInputError(f"--all-to-all {req.all_to_all}: the all-to-all spans the TP group, so --ep must equal "
                                f"--tp ({req.tp}), got {req.ep}")
    if req.all_to_all == "deepep" and req.ep not in DEEPEP_CONFIGS:
        sizes = ", ".join(str(n) for n in DEEPEP_CONFIGS)
        raise PlannerInputError(f"--ep: DeepEP has all-to-all configs for {sizes} ranks only (deep_ep/buffer.py "
                                f"get_dispatch_config @ v1.2.1); use one of them")


# --------------------------------------------------------------------------------------------
# Expert-parallel all-to-all buffers: SGLang's DeepEP dispatcher in its default `auto` mode enables both the normal
# (prefill) and the low-latency (decode) kernels and allocates one NVLink buffer and one RDMA buffer per GPU
# (sglang/srt/layers/moe/token_dispatcher/deepep.py @ v0.5.23, DeepEPBuffer.get_deepep_buffer: num_nvl_bytes =
# max of the normal configs' hints, num_rdma_bytes = max of theirs and the low-latency hint), sized by DeepEP
# (github.com/deepseek-ai/DeepEP @ v1.2.1 csrc/config.hpp Config / LowLatencyLayout).

# deep_ep/buffer.py Buffer.get_dispatch_config / get_combine_config: EP ranks -> (NVL receive tokens, RDMA send
# tokens, RDMA receive tokens) of the dispatch and the combine Config
DEEPEP_CONFIGS = {
    2: ((256, 6, 128), (256, 6, 128)), 4: ((256, 6, 128), (256, 6, 128)), 8: ((256, 6, 128), (256, 6, 128)),
    16: ((288, 20, 128), (288, 12, 128)), 24: ((288, 32, 128), (288, 8, 128)), 32: ((288, 32, 128), (288, 8, 128)),
    64: ((288, 28, 128), (288, 20, 128)), 128: ((560, 32, 128), (560, 12, 128)),
    144: ((720, 12, 128), (720, 8, 128)), 160: ((720, 12, 128), (720, 8, 128)),
}
DEEPEP_NUM_SMS = 20  # deep_ep/buffer.py Buffer.num_sms; config.hpp: num_channels = num_sms / 2
NVL_PEERS = 8  # csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS: ranks beyond 8 are reached over RDMA
BUFFER_ALIGNMENT = 128  # configs.cuh NUM_BUFFER_ALIGNMENT_BYTES; the hints round to 128 bytes too
MAX_TOPK = MAX_SCALES = 128  # config.hpp kNumMaxTopK, kNumMaxScales
SOURCE_META_BYTES = 8  # csrc/kernels/internode.cu SourceMeta: two ints
INT_BYTES, FLOAT_BYTES, INT64_BYTES, INT4_BYTES, BF16_BYTES = 4, 4, 8, 16, 2  # CUDA int, float, int64_t, int4, bf16
SCALE_GROUP = 128  # LowLatencyLayout: num_scales = hidden / 128
# sglang/srt/environ.py @ v0.5.23 SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK = EnvInt(128)
DISPATCH_TOKENS_PER_RANK = 128


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def deepep_normal_bytes(hidden: int, ranks: int) -> tuple[int, int]:
    """(NVLink, RDMA) buffer bytes of DeepEP's normal kernels on `ranks` EP ranks: config.hpp Config
    get_nvl_buffer_size_hint / get_rdma_buffer_size_hint over the dispatch and combine configs, the larger of each;
    hidden states travel in bf16 (deepep.py: self.params_bytes = 2)."""
    hidden_bytes = hidden * BF16_BYTES
    channels = DEEPEP_NUM_SMS // 2
    rdma_ranks, nvl_ranks = max(ranks // NVL_PEERS, 1), min(ranks, NVL_PEERS)
    per_token_meta = SOURCE_META_BYTES + MAX_TOPK * (INT64_BYTES + FLOAT_BYTES) + MAX_SCALES * FLOAT_BYTES
    nvl = rdma = 0
    for nvl_recv, rdma_send, rdma_recv in DEEPEP_CONFIGS[ranks]:
        nvl = max(nvl, _round_up(channels * nvl_ranks * (2 * rdma_ranks + 3) * INT_BYTES
                                 + channels * nvl_ranks * nvl_recv * (hidden_bytes + per_token_meta), BUFFER_ALIGNMENT))
        if ranks > NVL_PEERS:  # within one NVLink domain the normal kernels need no RDMA buffer
            recv = _round_up(rdma_recv, rdma_send)  # Config(): the RDMA receive size rounds up to the send size
            rdma = max(rdma, _round_up(channels * rdma_ranks * (NVL_PEERS * 2 + 2) * 2 * INT_BYTES
                                       + channels * rdma_ranks * recv * (hidden_bytes + per_token_meta + INT4_BYTES) * 2,
                                       BUFFER_ALIGNMENT))
    return nvl, rdma


def deepep_low_latency_bytes(hidden: int, experts: int, tokens: int = DISPATCH_TOKENS_PER_RANK) -> int:
    """RDMA buffer bytes of DeepEP's low-latency kernels: LowLatencyLayout's double-buffered send, receive and
    signalling buffers, via get_low_latency_rdma_size_hint (which rounds up past the next 128 bytes)."""
    scales = hidden // SCALE_GROUP
    dispatch_msg = INT4_BYTES + max(hidden * BF16_BYTES, hidden + scales * FLOAT_BYTES)
    combine_msg = scales * 2 * BF16_BYTES + hidden * BF16_BYTES  # per-128-channel min/max as nv_bfloat162
    send = max(tokens * dispatch_msg, experts * tokens * combine_msg)
    receive = max(experts * tokens * dispatch_msg, experts * tokens * combine_msg)
    signalling = _round_up(experts * INT_BYTES, BUFFER_ALIGNMENT)
    total = 2 * (send + receive + signalling)
    return (total + BUFFER_ALIGNMENT) // BUFFER_ALIGNMENT * BUFFER_ALIGNMENT


ALL_TO_ALL_BACKENDS = (None, "deepep")


def all_to_all_buffer_bytes(arch: Architecture, ep: int, all_to_all: str | None) -> int:
    """Each GPU's DeepEP buffers (NVLink + RDMA) with the DeepEP all-to-all over `ep` ranks (SGLang
    --moe-a2a-backend deepep, which sets ep_size = tp_size: arg_groups/overrides.py _a2a_ep_size); 0 without it,
    where the experts' outputs are all-reduced in place."""
    if all_to_all != "deepep" or ep == 1 or arch.moe is None:
        return 0
    nvl, rdma = deepep_normal_bytes(arch.hidden_size, ep)
    return nvl + max(rdma, deepep_low_latency_bytes(arch.hidden_size, arch.moe.num_experts))


# --------------------------------------------------------------------------------------------
# Splitting across GPUs


@lru_cache(maxsize=4096)
def _stage_weights(arch: Architecture, precision: Precision, tp: int, stage: int, pp: int,
                   layers: tuple[int, int], dp: int = 1, ep: int = 1, all_to_all: str | None = None) -> int:
    """Weight bytes on each TP rank of one pipeline stage (cached: the solver asks many times)."""
    kv_heads = model_kv_heads(arch)

    def on_rank(t: Tensor, heads: int) -> int:
        ways, count = rank_share(t, tp, dp, ep, all_to_all)
        return tensor_bytes(shard_shape(t, ways, heads), count, t, precision)

    def total(tensors: Iterable[Tensor], heads: int = kv_heads) -> int:
        return sum(on_rank(t, heads) for t in tensors)

    tensors: list[Tensor] = []
    if stage == 0:
        tensors.extend(arch.embedding)
        tensors.extend(arch.multimodal)
    if stage == pp - 1:
        tensors.extend(arch.head)
        if pp > 1:
            # the last stage cannot share the first stage's embedding: it holds its own lm_head copy
            tensors.extend(tied_lm_head(arch))
    # most layers repeat another's tensors: each distinct one is sized once (comparing two layers costs far
    # less than sizing their tensors in exact fractions)
    per_layer: dict[Layer, int] = {}
    for layer in arch.layers[layers[0]:layers[1]]:
        if layer not in per_layer:  # a layer's K/V projections split by its own KV heads
            per_layer[layer] = total(layer.tensors, layer_kv_heads(layer, kv_heads))
    return total(tensors) + sum(per_layer[layer] for layer in arch.layers[layers[0]:layers[1]])


def attention_bytes_per_token(attention: Attention, tp: int, kv_bits: int) -> int:
    """Cache bytes one token adds to this layer on one TP rank."""
    if attention.kind == "mla":
        # the latent is whole on every rank; a DSA indexer adds its own fp8 key cache (0 without one)
        return attention.latent_dim * kv_bits // 8 + attention.indexer_bytes_per_token
    if attention.kind in ("full", "sliding"):
        heads = kv_heads_per_rank(attention.kv_heads, tp)
        # a MiniMax Sparse Attention indexer's single key per token is whole on every rank (0 without one)
        return (heads * (attention.k_head_dim + attention.v_head_dim) + attention.index_key_dim) * kv_bits // 8
    return 0


def state_bytes_per_sequence(attention: Attention, tp: int, conv_bits: int, recurrent_bits: int | None = None) -> int:
    """Bytes of one sequence's recurrent state (convolution window + recurrent state) in a linear-attention or
    Mamba layer on one TP rank: the state is split over TP ranks by heads; the window held in `conv_bits`, the
    recurrent state in `recurrent_bits` (the same when not given)."""
    conv = attention.conv_elements_on_rank(tp)
    recurrent = attention.state_elements_on_rank(tp) - conv
    return (conv * conv_bits + recurrent * (recurrent_bits or conv_bits)) // 8


def _layers_kv(layers: tuple, tp: int, kv_bits: int, state_bits: int, context: int) -> tuple[int, int]:
    """(bytes per token of the layers that grow with every token, cache bytes per sequence).

    Recurrent layers keep a constant state per sequence, split over TP ranks by heads and held in
    the model's dtype (vLLM's mamba cache dtype `auto`), not the KV dtype."""
    growing = per_sequence = 0
    for layer in layers:
        a = layer.attention
        per_token = attention_bytes_per_token(a, tp, kv_bits)
        if a.kind == "sliding":
            per_sequence += per_token * min(context, a.window or context)
            if a.compress_ratio:  # DeepSeek-V4: one compressed entry per compress_ratio tokens beside the window
                entry = a.compressed_dim * kv_bits // 8  # one shared entry, whole on every rank like the window's head
                growing += entry // a.compress_ratio
                per_sequence += entry * (context // a.compress_ratio)
        elif a.kind in RECURRENT_KINDS:
            per_sequence += state_bytes_per_sequence(a, tp, state_bits)
        else:
            growing += per_token
            per_sequence += per_token * context
    return growing, per_sequence


# The candidate search estimates every GPU type at the same layouts and contexts: the KV sums, which do not
# depend on the GPU, are cached by their arguments (an Architecture hashes once).
@lru_cache(maxsize=4096)
def _stage_kv(arch: Architecture, layers: tuple[int, int], tp: int, kv_bits: int, state_bits: int,
              context: int) -> tuple[int, int]:
    """_layers_kv of the pipeline stage holding `layers` (first, last + 1)."""
    return _layers_kv(arch.layers[layers[0]:layers[1]], tp, kv_bits, state_bits, context)


@lru_cache(maxsize=1024)
def _model_kv(arch: Architecture, kv_bits: int, state_bits: int, context: int) -> tuple[int, int, int, tuple[int, ...]]:
    """The whole model's cache on one rank: (bytes per token of the layers that grow with every token, of its
    sliding-window layers, recurrent state bytes per sequence, the sliding windows)."""
    growing, _ = _layers_kv(arch.layers, 1, kv_bits, state_bits, context)
    sliding = sum(attention_bytes_per_token(layer.attention, 1, kv_bits)
                  for layer in arch.layers if layer.attention.kind == "sliding")
    state = _layers_kv(tuple(l for l in arch.layers if l.attention.kind in RECURRENT_KINDS), 1, kv_bits, state_bits,
                       context)[1]
    windows = tuple(sorted({layer.attention.window for layer in arch.layers
                            if layer.attention.kind == "sliding" and layer.attention.window}))
    return growing, sliding, state, windows


# --------------------------------------------------------------------------------------------
# The estimate


def estimate_memory(arch: Architecture, req: Request, catalog: Catalog, gpu: GpuTarget | None = None,
                    engine: Engine | None = None, served_by: str | None = None) -> MemoryEstimate:
    """`served_by`: the serving engine whose kernels the warnings judge the precision by (default `engine`'s)."""
    validate_request(arch, req)
    engine = engine or catalog.engines.get("simple")
    precision = resolve_precision(catalog, arch, req.precision)
    kv_name = resolve_engine_kv_dtype(served_by or engine.name, arch, precision, req.kv_dtype)
    kv_bits = catalog.kv_dtypes.get(kv_name).bits
    state_bits = catalog.kv_dtypes.get(resolve_kv_dtype(arch, precision, None)).bits
    margin = Fraction(str(req.overhead_fraction if req.overhead_fraction is not None else engine.overhead_fraction))
    reserve = engine.runtime_reserve_bytes

    stages = pipeline_stages(arch.num_layers, req.pp)
    as_stored = arch.stored_bytes is not None and (req.precision is None or req.precision.lower() == "auto")
    size_only_weights = (arch.stored_bytes if as_stored else
                         ceil(Fraction(arch.declared_params or 0) * Fraction(str(precision.seed_bits)) / 8))

    attention_tp = req.tp // req.dp
    buffers = all_to_all_buffer_bytes(arch, req.ep, req.all_to_all)
    ranks: list[RankMemory] = []
    for stage, layers in enumerate(stages):
        # the cache is split over each attention-DP group's attention TP
        per_token, per_sequence = _stage_kv(arch, layers, attention_tp, kv_bits, state_bits, req.context)
        # every TP rank of a stage holds the same shard sizes
        if arch.exact:
            weights = _stage_weights(arch, precision, req.tp, stage, req.pp, layers, req.dp, req.ep, req.all_to_all)
        else:
            # a size-only model: the weights follow the layers, split evenly over TP ranks
            weights = ceil(size_only_weights * Fraction(layers[1] - layers[0], arch.num_layers) / req.tp)
        for tp_rank in range(req.tp):
            # SGLang runtime_context.py @ v0.5.23 derive_attention_ranks: attn_dp_rank = tp_rank // attn_tp_size; the
            # requests are spread over the DP groups, the first batch % dp groups holding one more
            dp_rank = tp_rank // attention_tp
            kv = per_sequence * (req.batch // req.dp + (dp_rank < req.batch % req.dp))
            overhead = max(int(margin * (weights + kv)), reserve) if (weights + kv) else 0
            ranks.append(RankMemory(
                rank=stage * req.tp + tp_rank, tp_rank=tp_rank, pp_stage=stage,
                first_layer=layers[0], last_layer=layers[1], weights_bytes=weights,
                kv_bytes_per_token=per_token, kv_cache_bytes=kv, overhead_bytes=overhead,
                total_bytes=weights + kv + buffers + overhead, dp_rank=dp_rank, buffers_bytes=buffers,
            ))

    growing_whole, sliding_per_token, state_per_sequence, sliding_windows = _model_kv(arch, kv_bits, state_bits,
                                                                                       req.context)
    weights_total = sum(r.weights_bytes for r in ranks)
    kv_total = sum(r.kv_cache_bytes for r in ranks)
    fit = _fit(ranks, gpu)
    estimate = MemoryEstimate(
        model=arch.name, params=arch.loaded_params if arch.exact else arch.declared_params or 0,  # what the engine loads
        precision=precision.name, kv_dtype=kv_name, context=req.context, batch=req.batch, tp=req.tp, pp=req.pp,
        weights_bytes=weights_total, kv_bytes_per_token=growing_whole, kv_cache_bytes=kv_total,
        overhead_bytes=sum(r.overhead_bytes for r in ranks), total_bytes=sum(r.total_bytes for r in ranks),
        per_gpu=tuple(ranks), gpu=fit, warnings=(),
        exact=arch.exact, language_params=arch.language_params, multimodal_params=arch.multimodal_params,
        checkpoint_params=arch.checkpoint_params if arch.exact else arch.declared_params or 0,
        kv_sliding_bytes_per_token=sliding_per_token, kv_state_bytes_per_sequence=state_per_sequence,
        sliding_windows=sliding_windows,
        overhead_fraction=float(margin), runtime_reserve_bytes=reserve, quality=precision.quality,
        attention_kinds=tuple(sorted(arch.attention_kinds)),
        dp=req.dp, ep=req.ep, buffers_bytes=sum(r.buffers_bytes for r in ranks), all_to_all=req.all_to_all,
    )
    kernels = _kernels(catalog, served_by or engine.name, precision, gpu)
    return replace(estimate, warnings=tuple(_warnings(arch, estimate, precision, gpu) + kernels))


def _fit(ranks: list[RankMemory], gpu: GpuTarget | None) -> GpuFit | None:
    if gpu is None:
        return None
    fullest = max(r.total_bytes for r in ranks)
    headroom = gpu.memory_bytes - fullest
    return GpuFit(gpu.name, gpu.memory_bytes, headroom >= 0, headroom)


def _warnings(arch: Architecture, est: MemoryEstimate, precision: Precision, gpu: GpuTarget | None) -> list[str]:
    out: list[str] = []
    if est.gpu is not None:
        if not est.gpu.fits:
            out.append(f"does not fit: the fullest GPU needs {format_bytes(-est.gpu.headroom_bytes)} more than "
                       f"{est.gpu.name} holds; lower --context/--batch, use a smaller precision, or split with --tp/--pp")
        elif est.gpu.headroom_bytes < HEADROOM_WARNING_FRACTION * est.gpu.memory_bytes:
            out.append(f"little headroom: {format_bytes(est.gpu.headroom_bytes)} left on {est.gpu.name}; "
                       "do not plan to fill a GPU to 100%: fragmentation and load spikes need room")
    if est.weights_bytes and est.kv_cache_bytes >= KV_RIVALS_WEIGHTS_FRACTION * est.weights_bytes:
        share = est.kv_cache_bytes / est.weights_bytes
        remedy = "a shorter context or fewer sequences" if est.kv_dtype == "fp8" else "an fp8 KV cache or a shorter context"
        out.append(f"KV cache is {share:.0%} of the weights at context {est.context:,} x batch {est.batch}: "
                   f"it grows linearly with both; consider {remedy}")
    if precision.quality in ("small loss", "noticeable loss"):
        out.append(f"{precision.name} quality: {precision.quality}; quantization does affect output quality, test it on your task")
    if arch.max_position_embeddings and est.context > arch.max_position_embeddings:
        out.append(f"context {est.context:,} exceeds the model's max_position_embeddings "
                   f"({arch.max_position_embeddings:,}): it was not trained for that length")
    return out


def _kernels(catalog: Catalog, engine: str, precision: Precision, gpu: GpuTarget | None) -> list[str]:
    """How the engine runs the precision on a catalog GPU, where it does not run it natively (Catalog.support)."""
    card = catalog.gpus._index.get(gpu.name.lower()) if gpu is not None else None
    support = catalog.support(engine, precision, card) if card is not None else None
    if support is None or support.level not in ("weight-only", "unsupported"):
        return []
    return [support.reason(cited=not support.runs)]


__all__ = ["GpuFit", "GpuTarget", "MemoryEstimate", "RankMemory", "Request", "all_to_all_buffer_bytes",
           "deepep_low_latency_bytes", "deepep_normal_bytes", "estimate_memory",
           "pipeline_stages", "shard_shape", "kv_heads_per_rank", "RECURRENT_KINDS", "state_bytes_per_sequence"]
