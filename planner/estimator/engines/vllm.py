"""vLLM (V1 engine) start-up, rank by rank, as the release of the chosen profile sizes its KV cache (v0.19 below,
then what v0.34 changed; catalogs/engine_profiles.yaml cites each constant at its release).

  1. Worker init (vllm/v1/worker/gpu_worker.py init_device): the CUDA context (and NCCL when the replica
     has several GPUs) is up; requested = gpu_memory_utilization x total memory as CUDA reports it. vLLM
     refuses to start when the free memory at that point is below `requested`.
  2. determine_available_memory: load the weights, run profile_run() (gpu_model_runner.py): one forward
     pass of max_num_batched_tokens tokens spread over min(max_num_seqs, tokens) requests, then on the
     last pipeline stage a dummy sampler run over those requests' logits. KV memory = requested - weights
     - torch peak increase (the activation peak) - non-torch increase (cuBLAS workspaces, NCCL and custom
     all-reduce buffers when tp > 1) [- CUDA graph memory when the release subtracts it; v0.19 does not].
  3. get_kv_cache_config (vllm/v1/core/kv_cache_utils.py): layers of one attention type share a page size
     (block_size tokens x KV heads x head dim x 2 x dtype; MLA: block_size x latent x dtype, a DSA indexer's
     key cache joining the latent as one more layer of the same block size); hybrid models are split into
     groups of equal layer count; num_blocks = memory // (page x layers per group), the minimum over all
     workers. check_enough_kv_cache_memory raises when one request of max_model_len does not fit and
     estimates the longest that would. "Maximum concurrency for N tokens per request" = num_blocks / blocks
     one request needs (sliding-window layers need only window - 1 + max_num_batched_tokens).
  Recurrent layers (Gated DeltaNet linear attention, Kimi Delta Attention, Mamba-2) live in the same pool: each
  keeps one sequence's state (convolution window in the model dtype + recurrent state in the dtype the profile's
  state_dtypes gives its mixer, MambaSpec) in one block of its own group.
  HybridAttentionMambaModelConfig (vllm/model_executor/models/config.py) raises the attention block size to
  the smallest multiple of 16 (MLA: 64) tokens whose page holds a whole state, and pads the state page up
  to the attention page, so every group shares one page size; a request then takes one block in each state
  group (no prefix caching for these models in v0.19, mamba_cache_mode "none") beside its attention blocks.
  DeepSeek-V4's window, compressed and compressor-state caches (a later release) are laid out in vllm_deepseek_v4.

v0.34 (profile "0.34.0"): the extensible KV cache (on by default on CUDA and ROCm unless --kv-cache-memory-bytes is
given) sizes the pool after warmup and CUDA graph capture: utilization defaults to 1.0 and KV = min(utilization x
total - resident, free at start - resident - margin) - activation peak, resident = weights + non-torch + CUDA graphs,
margin = max(1 GiB, 0.75 x peak) (extensible_kv_cache.py measure_kv_cache_bytes); without it CUDA graph memory is
subtracted from the budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on). Blocks are 64 tokens, cards of >= 160 GiB
default to 16384 batched tokens, "GPU KV cache size" is concurrency x max_model_len and concurrency sums whole blocks
per group; a sliding window holds max_num_batched_tokens for each batch in flight (pp + 1 with async scheduling).
Hybrid models run prefix caching in mamba_cache_mode "align": a request holds 2 state blocks per recurrent group (+1
prefill checkpoint for Mamba-2, and for Gated DeltaNet on Hopper), and blocks align to 64 tokens (MLA 128). Nemotron-H
keeps its SSM state in float32 when its config names no mamba_ssm_cache_dtype (v0.19: float16).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property
from math import ceil

from planner.model.architecture import Architecture, Layer
from planner.catalog.load import Catalog
from planner.estimator.engines.base import (CacheGroup, EngineBudget, EngineSettings, Memo, PoolLayout, RankBudget,
                                            ServedModel, Stage, catalog_card, largest_passing, limiting_rank, serve)
from planner.estimator.engines.profiles import VllmProfile, load_profiles
from planner.estimator.engines.registry import Engine, vllm_auto_kv_dtype
from planner.estimator.engines.vllm_deepseek_v4 import (PackedLayout, check_kv_dtype,
                                                        packed_layout, pool_layout)
from planner.errors import PlannerInputError
from planner.estimator.memory import RECURRENT_KINDS, GpuTarget, Request
from planner.units import GiB, MiB, gib

FP32_BYTES = 4
# vLLM --kv-cache-dtype (vllm/config/cache.py CacheDType): "fp8" is e4m3 on CUDA; any other dtype runs "auto"
VLLM_KV_CACHE_DTYPES = {"fp8": "fp8"}


STATE = "state"  # a recurrent layer's spec (MambaSpec): one block holds one sequence's whole state


@dataclass(frozen=True)
class LayerSpec:
    """A layer's KV cache spec as vLLM builds it (FullAttentionSpec / SlidingWindowSpec / MLAAttentionSpec / MambaSpec)."""

    kind: str  # full | sliding | state (MLA layers are full-attention pages with a latent instead of K and V)
    window: int | None
    page_bytes: int  # one block of this layer on one rank
    state_blocks: int = 1  # a state layer: the blocks one request holds (MambaSpec.max_memory_usage_bytes / page)


@dataclass(frozen=True)
class StateShape:
    """How vLLM sizes the recurrent layers' pages: one state per block, padded to the attention page."""

    state_bytes: int  # one sequence's state in one recurrent layer on one rank (0: no recurrent layers)
    token_bytes: int  # one token of one attention layer on one rank (0: no attention layers)
    alignment: int  # the attention backend's block-size multiple

    def block_size(self) -> int:
        """The smallest aligned attention block whose page holds a whole state (HybridAttentionMambaModelConfig)."""
        return self.alignment * ceil(self.state_bytes / (self.alignment * self.token_bytes))


@dataclass(frozen=True)
class KvLayout:
    """One worker's KV cache configuration."""

    specs: tuple[LayerSpec, ...]
    group_size: int  # layers per KV cache group (= memory pools shared by one layer of every group)
    groups: tuple[LayerSpec, ...]  # one entry per group: the spec its layers share
    page_bytes: int
    batched_tokens: int  # in-flight tokens (in_flight_tokens): a sliding window holds that many new tokens
    per_group: bool  # the release counts a request's blocks group by group and reports concurrency x max_model_len

    def num_blocks(self, available: int) -> int:
        return max(0, available // (self.page_bytes * self.group_size))

    def capacity_tokens(self, num_blocks: int, block_size: int, max_model_len: int) -> int:
        """'GPU KV cache size: N tokens' as vLLM logs it: int(concurrency x max_model_len) (`per_group`), else blocks
        per group x the smallest group block size (a state group's block_size is mamba_block_size = max_model_len)."""
        if self.per_group:
            return int(num_blocks / self.blocks_per_request(max_model_len, self.batched_tokens, block_size) * max_model_len)
        smallest = min(max_model_len if g.kind == STATE else block_size for g in self.groups)
        return num_blocks // len(self.groups) * smallest

    def group_blocks(self, group: LayerSpec, max_model_len: int, batched_tokens: int, block_size: int) -> int:
        return ceil(_max_usage_bytes(group, max_model_len, batched_tokens, block_size) / self.page_bytes)

    def blocks_per_request(self, max_model_len: int, batched_tokens: int, block_size: int) -> int:
        """Blocks one request of max_model_len takes (get_max_concurrency_for_kv_cache_config): the whole blocks of
        every group summed (`per_group`, v0.34), or the summed usage in blocks (v0.19)."""
        if self.per_group:
            return sum(self.group_blocks(g, max_model_len, batched_tokens, block_size) for g in self.groups)
        usage = sum(_max_usage_bytes(g, max_model_len, batched_tokens, block_size) for g in self.groups)
        return ceil(usage / self.page_bytes)

    def needed_bytes(self, max_model_len: int, batched_tokens: int, block_size: int) -> int:
        """KV memory one request of max_model_len needs on this worker (check_enough_kv_cache_memory)."""
        return sum(count * _max_usage_bytes(s, max_model_len, batched_tokens, block_size)
                   for s, count in self._spec_counts)

    @cached_property
    def _spec_counts(self) -> tuple[tuple[LayerSpec, int], ...]:
        """The specs and how many layers share each (a model repeats a few), asked at every length tried."""
        return tuple(Counter(self.specs).items())

    @cached_property
    def kind_counts(self) -> tuple[Counter[str], Counter[str]]:
        """(layers, groups) of each kind, for the pool table every budget of this layout explains."""
        return Counter(spec.kind for spec in self.specs), Counter(group.kind for group in self.groups)


def _max_usage_bytes(spec: LayerSpec, max_model_len: int, batched_tokens: int, block_size: int) -> int:
    """KVCacheSpec.max_memory_usage_bytes (vllm/v1/kv_cache_interface.py)."""
    if spec.kind == STATE:
        return spec.state_blocks * spec.page_bytes  # MambaSpec: one block ("none"), or 2 + checkpoints ("align")
    if spec.kind == "sliding" and spec.window:
        # the last window - 1 computed tokens plus a chunk of newly scheduled ones, never more than
        # max_model_len; +1 block because the window need not start at a block boundary
        tokens = min(spec.window - 1 + batched_tokens, max_model_len)
        return (ceil(tokens / block_size) + 1) * spec.page_bytes
    return ceil(max_model_len / block_size) * spec.page_bytes


# Memoised: the layout (and a stage's largest MLP transient) depends on the model's layers, tp, pp and dtypes, not on
# the card or the context, and the candidate search sizes each layout at several contexts on every card
_SHAPES, _LAYOUTS, _TRANSIENTS = Memo(), Memo(), Memo()


def state_shape(model: ServedModel, gpu: GpuTarget, profile: VllmProfile) -> StateShape:
    """The recurrent state and attention token sizes of the model on one rank (vLLM computes them model-wide:
    every stage pads its states to the same page), and the block-size multiple of the attention backend. The card
    matters only as one of the FlashInfer head-256 cards or not: the key says which, so every other card shares one."""
    head256_card = gpu.name in profile.hybrid_head256_gpus.value
    key = (model.arch, model.request.tp, model.kv_bits, model.activation_bits, head256_card)
    return _SHAPES.get(key, (profile,), lambda: _state_shape(model, head256_card, profile))


def _state_shape(model: ServedModel, head256_card: bool, profile: VllmProfile) -> StateShape:
    layers = model.arch.layers
    # mamba_cache_dtype / mamba_ssm_cache_dtype left "auto": each state part in the dtype the profile's rule gives it
    state = max((model.layer_state_bytes(layer, *model.state_bits(layer, profile.state_dtypes.value)) for layer in layers
                 if layer.attention.kind in RECURRENT_KINDS), default=0)
    attention = [layer for layer in layers if layer.attention.kind not in RECURRENT_KINDS]
    token = max((model.layer_bytes_per_token(layer) for layer in attention), default=0)
    if "mla" in model.arch.attention_kinds:
        alignment = profile.hybrid_mla_block_alignment.value
    elif head256_card and any(layer.attention.k_head_dim == 256 for layer in attention):
        alignment = profile.hybrid_head256_block_alignment.value  # FlashInfer on compute capability 10.0
    else:
        alignment = profile.hybrid_block_alignment.value
    return StateShape(state, token, alignment)


def state_blocks(gpu: GpuTarget, profile: VllmProfile, draft_tokens: int = 0) -> tuple[tuple[str, int], ...]:
    """Blocks one request holds in a recurrent group, by mixer, on this card (Gated DeltaNet exports one more
    prefill checkpoint where its prefill runs FlashInfer), and one more for each token an MTP draft proposes
    (MambaSpec.num_speculative_blocks = num_speculative_tokens, layers/mamba/abstract.py:94-98 @ v0.34.0, :53-57 @
    v0.19.0; counted in max_memory_usage_bytes in both cache modes, v1/kv_cache_interface.py:1168-1174 @ v0.34.0,
    :292-300 @ v0.19.0)."""
    blocks = {mixer: count + draft_tokens for mixer, count in profile.state_blocks_per_request.value.items()}
    if gpu.name in profile.gdn_checkpoint_gpus.value and "gated_delta_net" in blocks:
        blocks["gated_delta_net"] += 1
    # LFM2's ShortConv exports no prefill checkpoint (layers/mamba/short_conv.py @ v0.34.0 takes MambaBase's
    # get_kv_cache_spec, abstract.py:78-98, num_prefill_checkpoint_blocks left 0): it holds MambaSpec.
    # max_memory_usage_bytes's base count (v1/kv_cache_interface.py:1168-1174: page x 1 in "none", x 2 in "align"),
    # the fewest any mixer holds
    blocks.setdefault("short_conv", min(blocks.values()))
    return tuple(sorted(blocks.items()))


def kv_layout(model: ServedModel, stage: Stage, block_size: int, in_flight: int, shape: StateShape,
              blocks: tuple[tuple[str, int], ...], profile: VllmProfile) -> KvLayout:
    """One worker's KV cache configuration (a stage's layers follow from the model, pp and the stage's index)."""
    key = (model.arch, model.request.tp, model.request.pp, model.kv_bits, stage.index, block_size, in_flight, shape,
           blocks)
    return _LAYOUTS.get(key, (profile,), lambda: _kv_layout(model, stage, block_size, in_flight, shape, dict(blocks),
                                                            profile))


def _kv_layout(model: ServedModel, stage: Stage, block_size: int, in_flight: int, shape: StateShape,
               blocks: dict[str, int], profile: VllmProfile) -> KvLayout:
    # mamba_page_size_padded: a state page grows to the attention page (an attention-free model keeps its own)
    state_page = block_size * shape.token_bytes if shape.token_bytes else shape.state_bytes
    specs = tuple(LayerSpec(STATE, None, state_page, blocks.get(layer.attention.recurrence or "", 1))
                  if layer.attention.kind in RECURRENT_KINDS else
                  LayerSpec("sliding" if layer.attention.kind == "sliding" else "full",
                            layer.attention.window if layer.attention.kind == "sliding" else None,
                            block_size * model.layer_bytes_per_token(layer))
                  for layer in model.cache_layers(stage))
    counts = Counter(specs)
    fewest, most = min(counts.values()), max(counts.values())
    # _get_kv_cache_groups_uniform_page_size: groups of the fewest layers of one type, or of the most
    # when the types are nearly balanced; a type's last group is padded up to the group size
    group_size = most if most < fewest * profile.hybrid_group_ratio.value else fewest
    groups = tuple(spec for spec, count in counts.items() for _ in range(ceil(count / group_size)))
    # vLLM needs one page size across groups; layer types of one model share head shapes in the
    # families planner counts and states are padded to the attention page, so the largest page is the page
    return KvLayout(specs, group_size, groups, max(s.page_bytes for s in specs), in_flight,
                    profile.kv_cache_size_from_concurrency.value)


def _pool_layout(layout: KvLayout, shape: StateShape, settings: EngineSettings, context: int, num_blocks: int,
                 default_block: int) -> PoolLayout:
    """What the table explains: the groups, their pages and how many sequences' states the pool holds."""
    batched, block_size = layout.batched_tokens, settings.block_size
    kinds, group_counts = layout.kind_counts
    groups = tuple(CacheGroup(kind, kinds[kind], group_counts[kind],
                              layout.group_blocks(next(g for g in layout.groups if g.kind == kind), context, batched,
                                                  block_size))
                   for kind in kinds)
    state_groups = group_counts[STATE]
    state_blocks = next((g.state_blocks for g in layout.groups if g.kind == STATE), 1)
    reason = None
    if shape.state_bytes and shape.token_bytes and block_size == shape.block_size() != default_block:
        reason = (f"the smallest multiple of {shape.alignment} tokens whose attention page "
                  f"({shape.token_bytes:,} B per token) holds one {shape.state_bytes:,} B recurrent state")
    return PoolLayout(block_size=block_size, page_bytes=layout.page_bytes, layers_per_group=layout.group_size,
                      groups=groups, state_bytes=shape.state_bytes,
                      state_slots=(min(num_blocks // (state_groups * state_blocks), settings.max_num_seqs)
                                   if state_groups else 0),
                      block_size_reason=reason)


def _batch_defaults(gpu: GpuTarget, visible_bytes: int, profile: VllmProfile) -> tuple[int, int]:
    tier = next(t for t in profile.batch_defaults.value
                if visible_bytes >= t.min_gib * GiB and not (t.not_a100 and "a100" in gpu.name.lower()))
    return tier.max_num_batched_tokens, tier.max_num_seqs


def in_flight_tokens(settings: EngineSettings, pp: int, profile: VllmProfile) -> int:
    """The new tokens a sliding window holds beside its window: max_num_batched_tokens for each batch in flight
    (VllmConfig.max_in_flight_tokens: pp + 1 batches with async scheduling), or for one (v0.19)."""
    batches = pp + 1 if profile.window_holds_concurrent_batches.value else 1
    return batches * settings.max_num_batched_tokens


def extensible(settings: EngineSettings, profile: VllmProfile) -> bool:
    """The release sizes the pool with its extensible KV cache: on by default unless --kv-cache-memory-bytes is given."""
    return profile.extensible_kv_cache is not None and settings.kv_cache_memory_bytes is None


def default_block_size(arch: Architecture, profile: VllmProfile) -> int:
    if arch.has_compressed_caches:
        return profile.deepseek_v4_block_size.value
    mla = arch.attention_kinds == {"mla"}
    return profile.mla_block_size.value if mla else profile.block_size.value


def resolve_settings(settings: EngineSettings, gpu: GpuTarget, visible_bytes: int, arch: Architecture,
                     shape: StateShape, profile: VllmProfile) -> EngineSettings:
    batched_default, seqs_default = _batch_defaults(gpu, visible_bytes, profile)
    block_size = settings.block_size or default_block_size(arch, profile)
    if shape.state_bytes and shape.token_bytes:
        # HybridAttentionMambaModelConfig overrides a block size left unset or too small to hold a state
        block_size = max(block_size, shape.block_size()) if settings.block_size else shape.block_size()
    resolved = replace(
        settings,
        # resolved_gpu_memory_utilization (vllm/config/cache.py @ v0.34.0): 1.0 with the extensible KV cache
        gpu_memory_utilization=settings.gpu_memory_utilization or (1.0 if extensible(settings, profile)
                                                                   else profile.gpu_memory_utilization.value),
        max_num_batched_tokens=settings.max_num_batched_tokens or batched_default,
        max_num_seqs=settings.max_num_seqs or seqs_default,
        block_size=block_size,
    )
    if resolved.max_num_batched_tokens < resolved.max_num_seqs:
        raise PlannerInputError(
            f"--max-num-batched-tokens: vLLM requires max_num_batched_tokens ({resolved.max_num_batched_tokens}) to be "
            f"greater than or equal to max_num_seqs ({resolved.max_num_seqs}); raise it or lower --max-num-seqs"
        )
    return resolved


def _layer_transient_elements(layer: Layer, arch: Architecture, tp: int, tokens: int, profile: VllmProfile) -> int:
    """Elements the layer's MLP allocates for `tokens` tokens on one rank beyond its input and output."""
    moe = arch.moe
    if layer.is_moe and moe is not None:
        # fused_experts (vllm/model_executor/layers/fused_moe/fused_moe.py): intermediate_cache1/3 share
        # one buffer of chunk x top_k x max(2 x I/tp, hidden), cache2 holds chunk x top_k x I/tp; the
        # router logits (tokens x experts) and a shared expert's gate_up + activation come on top
        chunk = min(tokens, profile.fused_moe_chunk_tokens.value)
        expert = ceil(moe.expert_intermediate_size / tp)
        routed = chunk * moe.experts_per_token * (max(2 * expert, arch.hidden_size) + expert)
        shared = tokens * 3 * ceil(moe.shared_intermediate_size / tp)
        return routed + shared + tokens * moe.num_experts
    # the gate_up projection (2 x I/tp per token) and the activated half (I/tp) are alive together
    return tokens * 3 * ceil(arch.intermediate_size / tp)


def activation_peak(model: ServedModel, stage: Stage, settings: EngineSettings, profile: VllmProfile) -> int:
    """The torch peak increase of profile_run on one rank of `stage` (bytes)."""
    arch, tp = model.arch, model.request.tp
    tokens, dtype = settings.max_num_batched_tokens, model.activation_bytes
    hidden = arch.hidden_size
    transient = _TRANSIENTS.get((arch, tp, model.request.pp, stage.index, tokens), (profile,), lambda: max(
        _layer_transient_elements(layer, arch, tp, tokens, profile) for layer in stage.layers))
    forward = dtype * (tokens * profile.hidden_buffers_in_forward.value * hidden + transient)
    peak = forward
    if stage.last:
        requests = min(settings.max_num_seqs, tokens)
        vocab = arch.vocab_size
        # logits in the model dtype (an fp32 model's cast is the same tensor) + fp32 copies, the Triton
        # top-k/top-p row buffer, and the forward pass's hidden states still held by profile_run
        logits_bytes = dtype if dtype != FP32_BYTES else 0
        sampler = (requests * vocab * (logits_bytes + FP32_BYTES * profile.sampler_fp32_copies.value)
                   + profile.sampler_workspace_rows.value * vocab * FP32_BYTES
                   + tokens * hidden * dtype + profile.sampler_extra_mib.value * MiB)
        peak = max(forward, sampler)
    if not stage.first:
        # IntermediateTensors (hidden states + residual) received from the previous stage, allocated
        # once for max_num_batched_tokens by _dummy_run and kept
        peak += 2 * tokens * hidden * dtype
    return peak


def non_torch_bytes(tp: int, pp: int, custom_all_reduce: bool, profile: VllmProfile) -> int:
    if tp == 1:
        mib = profile.non_torch_single_gpu_mib.value if pp == 1 else profile.non_torch_pipeline_only_mib.value
        return mib * MiB
    if not custom_all_reduce:
        return profile.non_torch_tensor_parallel_pcie_mib.value * MiB
    measured = profile.non_torch_tensor_parallel_mib.value
    return measured[max(size for size in measured if size <= tp)] * MiB


def _custom_all_reduce(settings: EngineSettings, gpu: GpuTarget, catalog: Catalog) -> bool:
    """vLLM's custom all-reduce needs NVLink (vllm/distributed/device_communicators/custom_all_reduce.py turns it
    off on PCIe-only cards beyond two GPUs); a card outside the catalog is taken as NVLink-connected."""
    if settings.disable_custom_all_reduce:
        return False
    card = catalog_card(gpu, catalog)
    return card is None or card.interconnect.kind == "nvlink"


def _gib(n_bytes: int) -> str:
    return f"{gib(n_bytes):.2f}"


@dataclass(frozen=True)
class _StageUse:
    """What each rank of a pipeline stage holds beside its KV cache (bytes)."""

    weights: int
    activation: int  # the torch peak increase of profile_run
    non_torch: int

    @property
    def total(self) -> int:
        return self.weights + self.activation + self.non_torch


def vllm_budget(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget,
                catalog: Catalog) -> EngineBudget:
    profiles = load_profiles()
    profile, cuda = profiles.vllm.get(settings.version, "vllm"), profiles.cuda
    model = serve(arch, request, catalog, "vllm")
    visible = cuda.visible_bytes(gpu.memory_bytes)
    shape = state_shape(model, gpu, profile)
    resolved = resolve_settings(settings, gpu, visible, arch, shape, profile)
    utilization, block_size = resolved.gpu_memory_utilization, resolved.block_size
    batched, context = resolved.max_num_batched_tokens, request.context
    requested = int(visible * utilization)
    free_at_start = visible - cuda.startup_bytes(model.gpus, profile.distributed_init_mib)
    graphs = 0 if resolved.enforce_eager else profile.cuda_graph_mib.value * MiB
    custom_all_reduce = _custom_all_reduce(resolved, gpu, catalog)

    compressed = arch.has_compressed_caches
    warnings = [w for w in (check_kv_dtype(model) if compressed else None,) if w]
    layouts: dict[int, KvLayout | PackedLayout] = {
        # DeepSeek-V4's packed caches follow their own release (deepseek_v4_release): one batch of new tokens a window
        stage.index: (packed_layout(model, stage, block_size, batched, profile) if compressed else
                      kv_layout(model, stage, block_size, in_flight_tokens(resolved, request.pp, profile), shape,
                                state_blocks(gpu, profile, arch.draft_tokens), profile))
        for stage in model.stages}
    uses = {stage.index: _StageUse(stage.weights_bytes, activation_peak(model, stage, resolved, profile),
                                   non_torch_bytes(request.tp, request.pp, custom_all_reduce, profile))
            for stage in model.stages}
    subtracted = graphs if profile.subtract_cuda_graph.value else 0
    available = {index: requested - use.total - subtracted for index, use in uses.items()}
    grows = extensible(resolved, profile)
    if grows:
        card = catalog_card(gpu, catalog)
        rocm = card is not None and card.vendor == "amd"
        available = {index: _extensible_pool(use, graphs, requested, free_at_start, rocm, profile)
                     for index, use in uses.items()}
    # compile_or_warm_up_model's suggestion "to fully utilize gpu memory": one value every worker is given
    full = min(free_at_start - use.total - graphs - profile.redundancy_buffer_mib.value * MiB for use in uses.values())
    # the extensible KV cache already takes what is free after warmup: kv_cache_memory's modes pin nothing there
    pinned = None if grows else _kv_cache_memory_bytes(resolved, settings, layouts, available, full, context)
    if pinned is not None:
        warnings.append(_pinned_note(pinned, full, available, layouts, resolved, context))
        resolved = replace(resolved, kv_cache_memory_bytes=pinned)
        available = dict.fromkeys(uses, pinned)
    elif (not grows and full > 0 and not _holds_one_request(layouts, available, context, resolved)
          and _holds_one_request(layouts, dict.fromkeys(layouts, full), context, resolved)):
        warnings.append(f"--kv-cache-memory-bytes {full} ({_gib(full)} GiB), the figure vLLM logs \"to fully utilize "
                        f"gpu memory\", holds one request of {context:,} tokens (a scenario's engine.kv_cache_memory: "
                        "auto takes it)")
    budgets = {index: requested if pinned is None else use.total + pinned for index, use in uses.items()}

    # every TP rank of a stage holds the same: its pool is sized once per stage
    capacity = {s: layouts[s].capacity_tokens(layouts[s].num_blocks(available[s]), block_size, context) for s in layouts}
    ranks = tuple(
        RankBudget(rank=stage.index * request.tp + tp_rank, pp_stage=stage.index, layers=len(stage.layers),
                   memory_bytes=visible, budget_bytes=budgets[stage.index], weights_bytes=stage.weights_bytes,
                   activation_bytes=uses[stage.index].activation, non_torch_bytes=uses[stage.index].non_torch,
                   cuda_graph_bytes=graphs, kv_pool_bytes=max(available[stage.index], 0),
                   kv_capacity_tokens=capacity[stage.index])
        for stage in model.stages for tp_rank in range(request.tp))

    # unify_kv_cache_configs: every worker uses the smallest worker's block count
    num_blocks = min(layouts[s].num_blocks(available[s]) for s in layouts)
    limit = limiting_rank(ranks)
    layout, memory = layouts[limit.pp_stage], available[limit.pp_stage]
    concurrency = num_blocks / layout.blocks_per_request(context, layout.batched_tokens, block_size)

    message, longest = _out_of_memory(uses, graphs, free_at_start, pinned, full)
    if message is None:
        message, longest = _start_up_failure(model, layouts, available, visible, free_at_start,
                                             0 if grows else requested, resolved)
    fits = message is None and concurrency >= request.batch
    if message is None and not fits:
        message = (f"vLLM starts, but its KV cache holds {concurrency:.2f} requests of {context:,} tokens at once "
                   f"(\"Maximum concurrency for {context:,} tokens per request: {concurrency:.2f}x\"), fewer than "
                   f"--batch {request.batch}; the others wait in the queue")
    return EngineBudget(
        name="vllm", release=(f"{profile.release}; DeepSeek-V4 caches as {profile.deepseek_v4_release.value}" if compressed
                              else profile.release), gpu_memory_utilization=utilization if pinned is None else None,
        budget_bytes=limit.budget_bytes, weights_bytes=limit.weights_bytes, activation_bytes=limit.activation_bytes,
        non_torch_bytes=limit.non_torch_bytes, cuda_graph_bytes=graphs, kv_pool_bytes=max(memory, 0),
        kv_cache_capacity_tokens=layout.capacity_tokens(num_blocks, block_size, context), max_concurrency=concurrency,
        fits=fits, max_context_that_fits=longest, message=message, context=context, batch=request.batch,
        settings=resolved, per_rank=ranks,
        warnings=tuple(warnings + (_warnings(free_at_start - requested, graphs, resolved, profile) if pinned is None else [])),
        layout=(pool_layout(layout, block_size, context, num_blocks) if isinstance(layout, PackedLayout) else
                _pool_layout(layout, shape, resolved, context, num_blocks, default_block_size(arch, profile))),
    )


def _extensible_pool(use: _StageUse, graphs: int, requested: int, free_at_start: int, rocm: bool,
                     profile: VllmProfile) -> int:
    """measure_kv_cache_bytes (vllm/v1/worker/extensible_kv_cache.py): min(requested - resident, free at start -
    resident - margin) - transient peak, resident = weights + non-torch + CUDA graphs, margin = max(floor, fraction x
    peak)."""
    assert profile.extensible_kv_cache is not None
    rule = profile.extensible_kv_cache.value
    resident = use.weights + use.non_torch + graphs
    floor = rule.rocm_margin_floor_mib if rocm else rule.margin_floor_mib
    margin = max(floor * MiB, int(use.activation * rule.margin_fraction))
    return min(requested - resident, free_at_start - resident - margin) - use.activation


def _holds_one_request(layouts: dict[int, KvLayout | PackedLayout], available: dict[int, int], context: int,
                       settings: EngineSettings) -> bool:
    """check_enough_kv_cache_memory passes: every worker's memory holds one request of max_model_len."""
    return all(0 < available[s] and layouts[s].needed_bytes(context, layouts[s].batched_tokens,
                                                            settings.block_size) <= available[s] for s in layouts)


def _kv_cache_memory_bytes(resolved: EngineSettings, given: EngineSettings, layouts: dict[int, KvLayout | PackedLayout],
                           available: dict[int, int], full: int, context: int) -> int | None:
    """The --kv-cache-memory-bytes vLLM is started with (None: gpu_memory_utilization's budget sizes the pool).
    "auto" takes vLLM's full figure only where the user left gpu_memory_utilization to the planner, its budget
    cannot hold one request of max_model_len (vLLM would refuse to start) and the full figure can."""
    if resolved.kv_cache_memory_bytes is not None:
        return resolved.kv_cache_memory_bytes
    mode = resolved.kv_cache_memory
    if full <= 0 or mode == "utilization" or (mode == "auto" and given.gpu_memory_utilization is not None):
        return None
    if mode == "full":
        return full
    if _holds_one_request(layouts, available, context, resolved):
        return None
    return full if _holds_one_request(layouts, dict.fromkeys(layouts, full), context, resolved) else None


def _pinned_note(pinned: int, full: int, available: dict[int, int], layouts: dict[int, KvLayout | PackedLayout],
                 settings: EngineSettings, context: int) -> str:
    """The pool sized by --kv-cache-memory-bytes, against what gpu_memory_utilization's budget would have left."""
    budget = max(min(available.values()), 0)
    short = ("" if _holds_one_request(layouts, available, context, settings) else
             f", short of one request of max_model_len {context:,}")
    figure = ("vLLM's figure" if pinned == full else f"vLLM's figure here is {max(full, 0)} ({_gib(max(full, 0))} GiB),")
    return (f"KV cache: --kv-cache-memory-bytes {pinned} ({_gib(pinned)} GiB) in place of gpu_memory_utilization "
            f"{settings.gpu_memory_utilization}'s budget ({_gib(budget)} GiB{short}); {figure} \"to fully utilize gpu "
            "memory\": the free memory at start-up less weights, activation peak, non-torch and CUDA graph memory and "
            f"its 150 MiB margin")


def _out_of_memory(uses: dict[int, _StageUse], graphs: int, free: int, pinned: int | None,
                   full: int) -> tuple[str | None, None]:
    """A given --kv-cache-memory-bytes is allocated as asked (vLLM skips its memory profile): past the free memory,
    the start-up runs out of CUDA memory."""
    if pinned is None:
        return None, None
    need = max(use.total for use in uses.values()) + graphs + pinned
    if need <= free:
        return None, None
    return (f"CUDA out of memory at start-up: --kv-cache-memory-bytes {pinned} with the weights, activation peak, "
            f"non-torch and CUDA graph memory needs {_gib(need)} GiB of the {_gib(free)} GiB free; vLLM's figure to "
            f"fully utilize gpu memory here is {max(full, 0)}"), None


def _start_up_failure(model: ServedModel, layouts: dict[int, KvLayout | PackedLayout], available: dict[int, int], visible: int,
                      free: int, requested: int, settings: EngineSettings) -> tuple[str | None, int | None]:
    """vLLM's own error when it cannot start, and the longest max_model_len it would estimate (`requested` 0: the
    release does not check the free memory against its budget at start-up, as with the extensible KV cache)."""
    if free < requested:
        return (f"Free memory on device ({_gib(free)}/{_gib(visible)} GiB) on startup is less than desired GPU memory "
                f"utilization ({settings.gpu_memory_utilization}, {_gib(requested)} GiB). Decrease GPU memory "
                "utilization or reduce GPU memory used by other processes."), None
    if min(available.values()) <= 0:
        return ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine."), None
    context, block_size = model.request.context, settings.block_size
    for stage, layout in layouts.items():
        needed = layout.needed_bytes(context, layout.batched_tokens, block_size)
        if needed > available[stage]:
            longest = largest_passing(1, context, lambda n: _holds_one_request(layouts, available, n, settings))
            estimate = (f"Based on the available memory, the estimated maximum model length is {longest}. "
                        if longest else "")
            return (f"To serve at least one request with the models's max seq len ({context}), ({_gib(needed)} GiB KV "
                    f"cache is needed, which is larger than the available KV cache memory ({_gib(available[stage])} GiB). "
                    f"{estimate}Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
                    "the engine."), longest
    return None, None


def _warnings(outside: int, graphs: int, settings: EngineSettings, profile: VllmProfile) -> list[str]:
    """`outside`: what stays free beyond the budget once CUDA (and NCCL) are up."""
    out = []
    needs = graphs + profile.redundancy_buffer_mib.value * MiB
    if not profile.subtract_cuda_graph.value and outside < needs:
        out.append(f"gpu_memory_utilization {settings.gpu_memory_utilization} leaves {_gib(max(outside, 0))} GiB outside "
                   f"vLLM's budget for CUDA graphs ({_gib(graphs)} GiB) and its {profile.redundancy_buffer_mib.value} MiB "
                   "margin: start-up may run out of memory capturing CUDA graphs; lower --gpu-memory-utilization "
                   "or add --enforce-eager")
    return out


def batching(settings: EngineSettings, context: int) -> tuple[int, int | None, int | None]:
    """vLLM allocates blocks of block_size tokens, takes max_num_batched_tokens a step and runs at most max_num_seqs."""
    return settings.block_size or 1, settings.max_num_batched_tokens, settings.max_num_seqs


# vLLM's pool is what its budget leaves beside the weights: activations and non-torch memory, and from v0.34 the CUDA
# graphs (and the extensible KV cache's margin and the CUDA context, its budget being the whole card)
ENGINE = Engine("vllm", vllm_budget, VllmProfile, batching=batching, scheduler_caps_sequences=True,
                workspace="remainder", kv_cache_dtypes=VLLM_KV_CACHE_DTYPES, command="planner.render.export:vllm_command",
                expert_parallel="full", auto_kv_dtype=vllm_auto_kv_dtype)
