"""The records planner counts a model in: every weight tensor with its shape, every layer's cache kind.

Counting tensor by tensor (rather than from a parameter total) is what lets planner apply a
precision to the right tensors (fp8 keeps embeddings in 16-bit, mxfp4 touches only experts),
shard them under tensor parallelism and place them on pipeline stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from math import ceil, prod
from typing import Any, Literal

from planner.errors import PlannerInputError

# What a tensor is, which decides how a precision treats it.
Role = Literal["embedding", "lm_head", "linear", "expert", "router", "norm", "bias", "vision", "projector"]
# How tensor parallelism shards it (Megatron style, as vLLM does): column = output rows split,
# row = input columns split, kv = K/V heads split but replicated once tp exceeds the KV heads,
# vocab = embedding rows split, replicated = whole on every rank.
Split = Literal["column", "row", "kv", "vocab", "replicated"]
LayerKind = Literal["full", "sliding", "mla", "linear", "mamba"]
# The recurrent mixers whose state planner sizes: Gated DeltaNet (Qwen3-Next, Qwen3.5), Kimi Delta Attention, Mamba-2,
# and LFM2's short convolution (a convolution window alone, no recurrent state beside it)
Recurrence = Literal["gated_delta_net", "kda", "mamba2", "short_conv"]
Routing = Literal["softmax", "sigmoid", "grouped"]
# Bits per value of the dtypes a config may name for a recurrent state (torch element sizes)
STATE_DTYPE_BITS = {"float32": 32, "bfloat16": 16, "float16": 16}

# DSA indexer key cache layout (vLLM DeepseekV32IndexerCache): fp8 keys, one fp32 scale per 128-value block.
INDEXER_QUANT_BLOCK = 128
INDEXER_SCALE_BYTES = 4


class UnsupportedArchitecture(PlannerInputError):
    """The config names an architecture planner cannot count exactly."""


@dataclass(frozen=True)
class Tensor:
    """One weight tensor (or `count` identical ones) with its shape and how tensor parallelism splits it."""

    name: str
    shape: tuple[int, ...]
    role: Role
    split: Split = "replicated"
    count: int = 1  # identical tensors stored side by side, e.g. the experts of one layer
    kept_unquantized: bool = False  # listed in the checkpoint's quantization exclusions: stays 16-bit
    # the width the model's own code stores this unquantized tensor in (fp32 mixing weights, int64 buffers),
    # when it is not the 16-bit activation dtype
    stored_bits: int | None = None

    @property
    def numel(self) -> int:
        return prod(self.shape) * self.count


@dataclass(frozen=True)
class Attention:
    """What one layer keeps per sequence while it is served."""

    kind: LayerKind
    kv_heads: int = 0
    # per KV head; MLA: the per-query-head key (qk_nope + qk_rope) and value its latent is up-projected to, where an
    # engine runs the layer's prefill as multi-head attention (the cache holds the latent alone)
    k_head_dim: int = 0
    v_head_dim: int = 0
    window: int | None = None  # sliding / chunked layers: tokens held at most
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim values per token, shared by all heads
    latent_value_dim: int = 0  # MLA: kv_lora_rank, the latent values an absorbed head sums (the rotary part it does not)
    state_elements: int = 0  # linear-attention / Mamba: constant state per sequence
    # the convolution-window values within state_elements (the rest is the recurrent state): engines hold the two
    # parts in different dtypes (vLLM v0.19 mamba_utils.py MambaStateDtypeCalculator: conv first, then temporal)
    conv_state_elements: int = 0
    recurrence: Recurrence | None = None  # which recurrent mixer keeps the state: engines pick each part's dtype by it
    # the recurrent-state dtype the checkpoint's config asks for (Qwen3.5 mamba_ssm_dtype, Nemotron-H
    # mamba_ssm_cache_dtype), one of STATE_DTYPE_BITS; None: the config asks for none
    config_ssm_dtype: str | None = None
    # Mamba-2: B and C groups, and the convolution-window values of one group (2 x d_state x (d_conv - 1)),
    # for the groups TP replicates (state_elements_on_rank)
    state_groups: int = 0
    state_group_elements: int = 0
    indexer_head_dim: int = 0  # MLA with DeepSeek Sparse Attention: the indexer's key per token
    # the indexer's query heads, each scoring every earlier token's key (DSA; MiniMax Sparse Attention)
    indexer_heads: int = 0
    # the tokens each query attends to at most: DeepSeek Sparse Attention's top-k (layers that reuse another layer's
    # top-k attend as sparsely), MiniMax Sparse Attention's top-k blocks x block size; 0: every token
    index_topk: int = 0
    index_key_dim: int = 0  # GQA with MiniMax Sparse Attention: the indexer's one key per token, in the KV dtype
    # DeepSeek-V4 compressed attention: beside the window, one entry of compressed_dim values per compress_ratio tokens
    # (k_head_dim of them attended, the rest the Lightning Indexer's pooled key)
    compress_ratio: int = 0
    compressed_dim: int = 0
    # the entries each query attends to at most, the indexer's top-k (0: every entry), and the indexer's query heads
    compressed_topk: int = 0
    compressed_index_heads: int = 0
    # DeepSeek-V4's one head is key and value at once (stored once: v_head_dim 0): attention sums its k_head_dim values
    values_are_keys: bool = False
    # Gated DeltaNet: value heads and the key / value head dims its chunked prefill kernels run per head
    delta_heads: int = 0
    delta_key_dim: int = 0
    delta_value_dim: int = 0

    @property
    def values_per_token(self) -> int:
        """Cached values per token for the whole layer (all KV heads), before any TP split."""
        if self.kind == "mla":
            return self.latent_dim
        if self.kind in ("full", "sliding"):
            return self.kv_heads * (self.k_head_dim + self.v_head_dim) + self.index_key_dim
        return 0

    def state_elements_on_rank(self, tp: int) -> int:
        """One sequence's recurrent state on one of `tp` ranks, as vLLM shapes it (vllm/model_executor/layers/
        mamba/mamba_utils.py, MambaStateShapeCalculator: conv (conv_dim / tp, d_conv - 1) and SSM (heads / tp, ...)).
        Mamba-2 heads need their B / C group on the same rank: when tp does not divide the groups, vLLM replicates
        them to tp groups (extra_groups_for_head_shards: n_groups += tp - n_groups) before the conv dim is split."""
        return ceil((self.state_elements + self._replicated_group_elements(tp)) / tp)

    def conv_elements_on_rank(self, tp: int) -> int:
        """The convolution-window part of state_elements_on_rank: the replicated B / C groups are convolution
        channels (vLLM conv_dim = intermediate + 2 x n_groups x d_state), the recurrent state splits by heads."""
        return ceil((self.conv_state_elements + self._replicated_group_elements(tp)) / tp)

    def _replicated_group_elements(self, tp: int) -> int:
        groups = self.state_groups
        replicated = groups if not groups or groups % tp == 0 else tp
        return (replicated - groups) * self.state_group_elements

    @property
    def indexer_bytes_per_token(self) -> int:
        """Bytes the DSA indexer's key cache adds per token, whatever the KV dtype: vLLM stores the key in
        fp8 with one fp32 scale per 128 values (vllm/model_executor/models/deepseek_v2.py,
        DeepseekV32IndexerCache: head_dim = index_head_dim + index_head_dim // quant_block_size * 4, uint8,
        quant_block_size 128); whole on every TP rank like the MLA latent."""
        return indexer_key_bytes(self.indexer_head_dim)

    @property
    def compressed_index_dim(self) -> int:
        """DeepSeek-V4: the Lightning Indexer's pooled key in each compressed entry (CSA layers; 0 elsewhere)."""
        return self.compressed_dim - self.k_head_dim if self.compress_ratio else 0


def indexer_key_bytes(dim: int) -> int:
    """One indexer key as the engines store it whatever the KV dtype: `dim` fp8 values and an fp32 scale per 128
    (the DSA layout, which DeepSeek-V4's pooled keys keep too)."""
    return dim + ceil(dim / INDEXER_QUANT_BLOCK) * INDEXER_SCALE_BYTES


@dataclass(frozen=True)
class Layer:
    """One decoder layer: what it caches per sequence and the tensors it holds."""

    attention: Attention
    tensors: tuple[Tensor, ...] = ()
    is_moe: bool = False

    @cached_property
    def params(self) -> int:
        return sum(t.numel for t in self.tensors)

    def __hash__(self) -> int:
        return _cached_hash(self, lambda: hash((self.attention, self.tensors, self.is_moe)))


@dataclass(frozen=True)
class MoE:
    """The mixture-of-experts shape of a model: experts, how many serve a token, and their widths."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int = 0
    # how the router picks a token's experts, which decides the kernels the engines launch for it: softmax top-k,
    # sigmoid top-k with a score-correction bias (MiniMax-M2), or the same within groups of experts (DeepSeek-V3's
    # noaux_tc: n_group groups, the best topk_group of them)
    routing: Routing = "softmax"
    expert_groups: int = 1


@dataclass(frozen=True)
class Architecture:
    """A model as planner sees it.

    `exact` is False for a model known only by its parameter count (the seed's method): then
    `layers` carry the KV shape but no tensors and `declared_params` is the weight count.
    """

    name: str
    model_type: str
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    layers: tuple[Layer, ...]
    embedding: tuple[Tensor, ...] = ()  # first pipeline stage
    head: tuple[Tensor, ...] = ()  # final norm + lm_head, last pipeline stage
    tied_embeddings: bool = False
    multimodal: tuple[Tensor, ...] = ()  # vision tower + projector, first pipeline stage
    # the vision config's num_hidden_layers and hidden_size as config.json writes them (None: not written); SGLang's
    # default mem_fraction_static for a multimodal model reads them (engines/sglang.py)
    vision_layers_hidden: tuple[int | None, int | None] | None = field(default=None, compare=False)
    unloaded: tuple[Tensor, ...] = ()  # in the checkpoint, not loaded for serving (e.g. MTP heads)
    intermediate_size: int = 0
    moe: MoE | None = None
    torch_dtype: str | None = None
    quantization_config: dict[str, Any] | None = field(default=None, compare=False)  # a dict: kept out of hash/eq
    exact: bool = True
    declared_params: int | None = None
    stored_bytes: int | None = None  # exact bytes of the weights files (safetensors / GGUF), when read
    stored_precision: str | None = None  # the catalog precision those files are stored in, when known
    max_position_embeddings: int | None = None
    # served with speculative decoding (speculative.with_draft): the tokens its MTP draft proposes a cycle, which the
    # target verifies a step beside the one it decodes; engines size scratch for them (SGLang's intermediate states)
    draft_tokens: int = 0

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def __hash__(self) -> int:
        return _cached_hash(self, lambda: hash((self.name, self.model_type, self.layers, self.embedding, self.head,
                                                self.multimodal, self.exact, self.declared_params, self.stored_bytes)))

    @cached_property
    def language_params(self) -> int:
        if not self.exact:
            return self.declared_params or 0
        return sum(layer.params for layer in self.layers) + _numel(self.embedding) + _numel(self.head)

    @cached_property
    def multimodal_params(self) -> int:
        return _numel(self.multimodal)

    @cached_property
    def loaded_params(self) -> int:
        """What a serving engine loads: language model plus vision tower and projector."""
        return self.language_params + self.multimodal_params

    @cached_property
    def checkpoint_params(self) -> int:
        """What the checkpoint holds (the published count): also modules engines skip."""
        return self.loaded_params + _numel(self.unloaded)

    @cached_property
    def attention_kinds(self) -> set[str]:
        return {layer.attention.kind for layer in self.layers}

    @cached_property
    def has_compressed_caches(self) -> bool:
        """Layers keep compressed caches beside their window (DeepSeek-V4's compress_ratios), which every engine
        lays out in pools of their own."""
        return any(layer.attention.compress_ratio for layer in self.layers)


def _cached_hash(obj: object, compute) -> int:
    """Hash a large frozen record once: the estimator's caches look architectures up many times per solve."""
    cached = obj.__dict__.get("_hash")
    if cached is None:
        cached = compute()
        object.__setattr__(obj, "_hash", cached)
    return cached


def _numel(tensors: tuple[Tensor, ...]) -> int:
    return sum(t.numel for t in tensors)

