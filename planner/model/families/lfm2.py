"""Liquid AI LFM2 / LFM2.5 (lfm2) and LFM2-MoE (lfm2_moe): double-gated short-convolution blocks interleaved with GQA
attention blocks (per-head q / k RMSNorm), each followed by a SwiGLU MLP, or past `num_dense_layers` a sigmoid-routed
MoE (transformers 5.24.0 models/lfm2/modeling_lfm2.py and models/lfm2_moe/modeling_lfm2_moe.py).

A short-convolution block (Lfm2ShortConv, modeling_lfm2.py:316-383): in_proj to B, C and x (3 x hidden), B * x through
a depthwise causal conv1d of conv_L_cache taps, C times its output, out_proj. What it keeps per sequence is the
convolution window alone, (conv_L_cache - 1) x hidden values, whatever the context: a recurrent layer of recurrence
"short_conv" with no recurrent state beside its window (vllm/model_executor/layers/mamba/mamba_utils.py @ v0.19.0
short_conv_state_shape; SGLang 0.5.9 configs/lfm2.py mamba2_cache_params; llama.cpp src/llama-hparams.cpp n_embd_r).
"""

from __future__ import annotations

from math import isfinite

from planner.errors import PlannerInputError
from planner.model.families.blocks import decoder_shape, linear, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE, Tensor, UnsupportedArchitecture

CONV, ATTENTION = "conv", "full_attention"  # the layer_types transformers' Lfm2DecoderLayer tells apart
FP32_BITS = 32  # vLLM keeps the router's expert bias in float32 (models/lfm2_moe.py @ v0.19.0:141-145)


def _number(c: Config, key: str, default: float | None) -> float | None:
    value = c.data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not isfinite(value) or value <= 0:
        raise PlannerInputError(f"{c.where}: {key!r} must be a positive number, got {value!r}")
    return value


def conv_layers(c: Config, model_type: str, num_layers: int) -> list[bool]:
    """Whether each layer is a short-convolution block: layer_types ("conv" or "full_attention"), else (lfm2 only,
    Lfm2Config.__post_init__, configuration_lfm2.py) full attention on the layers full_attn_idxs lists, every layer
    when it lists none. Lfm2MoeConfig has no such fallback: its layers index layer_types."""
    types = c.list("layer_types")
    if types is None:
        if model_type != "lfm2":
            raise PlannerInputError(f"{c.where}: missing key 'layer_types'; add it from the model's config.json")
        listed = c.int_list("full_attn_idxs")
        if listed is None:
            return [False] * num_layers
        outside = [i for i in listed if not 0 <= i < num_layers]
        if outside:
            raise PlannerInputError(f"{c.where}: 'full_attn_idxs' lists layer {outside[0]} of a {num_layers}-layer model")
        attention = set(listed)
        return [i not in attention for i in range(num_layers)]
    if len(types) != num_layers:
        raise PlannerInputError(f"{c.where}: 'layer_types' has {len(types)} entries for {num_layers} layers")
    for i, layer_type in enumerate(types):
        if layer_type not in (CONV, ATTENTION):
            # transformers builds attention for any type but "conv", vLLM a short convolution for any but
            # "full_attention": a third name has no one meaning
            raise UnsupportedArchitecture(f"{c.where}: layer_types[{i}] = {layer_type!r}; an LFM2 layer is 'conv' or "
                                          "'full_attention'")
    return [layer_type == CONV for layer_type in types]


def _same_width(c: Config, hidden: int) -> None:
    """conv_dim / block_dim: written by LFM2 checkpoints, always hidden_size; transformers builds every width from
    hidden_size (vLLM reads conv_dim), so another value has no one count."""
    for key in ("conv_dim", "block_dim"):
        if key in c and c.int(key) != hidden:
            raise UnsupportedArchitecture(f"{c.where}: {key!r} {c.int(key)} differs from hidden_size {hidden}; "
                                          "transformers builds LFM2 blocks hidden_size wide")


def short_conv(c: Config, hidden: int) -> list[Tensor]:
    """Lfm2ShortConv (modeling_lfm2.py:316-338): a depthwise Conv1d (hidden, 1, conv_L_cache), in_proj and out_proj,
    all biased with conv_bias; vLLM shards the channels (ShortConv: conv ColumnParallelLinear, in_proj
    MergedColumnParallelLinear of three hidden-wide outputs, out_proj RowParallelLinear)."""
    bias = c.bool("conv_bias", False)
    t = [Tensor("conv.conv.weight", (hidden, 1, c.int("conv_L_cache", default=3)), "linear", "column")]
    if bias:
        t += [Tensor("conv.conv.bias", (hidden,), "bias", "column")]
    return t + linear("conv.in_proj", 3 * hidden, hidden, "column", bias) + linear("conv.out_proj", hidden, hidden, "row", bias)


def conv_state(c: Config, hidden: int) -> Attention:
    """One sequence's short-convolution window, (conv_L_cache - 1) x hidden values, all of it convolution state: vLLM
    short_conv_state_shape (conv_kernel - 1, conv_dim / tp) in the model dtype (short_conv_state_dtype), SGLang a
    Mamba2StateShape of state_size 0 (conv (hidden / tp, conv_kernel - 1), an empty temporal state), llama.cpp
    n_embd_r = n_embd x (n_shortconv_l_cache - 1) f32 values."""
    window = (c.int("conv_L_cache", default=3, minimum=2) - 1) * hidden
    return Attention("linear", state_elements=window, conv_state_elements=window, recurrence="short_conv")


def attention(c: Config, hidden: int, heads: int, kv_heads: int, head_dim: int) -> list[Tensor]:
    """Lfm2Attention (modeling_lfm2.py:201-218): bias-free q / k / v / out projections, per-head q and k RMSNorm."""
    return (linear("self_attn.q_proj", heads * head_dim, hidden, "column")
            + linear("self_attn.k_proj", kv_heads * head_dim, hidden, "kv")
            + linear("self_attn.v_proj", kv_heads * head_dim, hidden, "kv")
            + linear("self_attn.out_proj", hidden, heads * head_dim, "row")
            + norm("self_attn.q_layernorm", head_dim) + norm("self_attn.k_layernorm", head_dim))


def swiglu(intermediate: int, hidden: int) -> list[Tensor]:
    """Lfm2MLP / Lfm2MoeMLP: w1 (gate) and w3 (up), w2 (down), no bias."""
    return (linear("feed_forward.w1", intermediate, hidden, "column") + linear("feed_forward.w3", intermediate, hidden, "column")
            + linear("feed_forward.w2", hidden, intermediate, "row"))


def dense_width(c: Config) -> int:
    """Lfm2MLP's width (modeling_lfm2.py:111-122): block_ff_dim, else intermediate_size (Lfm2Config pops block_ff_dim
    into intermediate_size); with block_auto_adjust_ff_dim, int(2 x it / 3), and when block_ffn_dim_multiplier is
    set, int(multiplier x that) rounded up to a multiple of block_multiple_of."""
    width = c.int("block_ff_dim") if "block_ff_dim" in c else c.int("intermediate_size")
    if c.bool("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier = _number(c, "block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            multiple = c.int("block_multiple_of", default=256)
            width = int(multiplier * width)
            width = multiple * ((width + multiple - 1) // multiple)
    if width < 1:
        raise PlannerInputError(f"{c.where}: the MLP width comes out at {width}; check 'intermediate_size'")
    return width


def sparse_moe(c: Config, hidden: int) -> tuple[MoE, list[Tensor]]:
    """Lfm2MoeSparseMoeBlock (modeling_lfm2_moe.py:132-206): the router's weight, its expert_bias (a persistent
    buffer, with use_expert_bias), and the experts' fused gate_up_proj (E, 2 x I, hidden) and down_proj (E, hidden, I);
    sigmoid scores, top-k by score + bias."""
    experts, top_k = c.int("num_experts"), c.int("num_experts_per_tok")
    if top_k > experts:
        raise PlannerInputError(f"{c.where}: 'num_experts_per_tok' {top_k} exceeds 'num_experts' {experts}")
    inter = c.int("moe_intermediate_size")
    t = [Tensor("feed_forward.gate.weight", (experts, hidden), "router")]
    if c.bool("use_expert_bias", True):
        t += [Tensor("feed_forward.expert_bias", (experts,), "router", stored_bits=FP32_BITS)]
    t += [Tensor("feed_forward.experts.gate_up_proj", (2 * inter, hidden), "expert", "column", experts),
          Tensor("feed_forward.experts.down_proj", (hidden, inter), "expert", "row", experts)]
    return MoE(experts, top_k, inter, routing="sigmoid"), t


def lfm2(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    _same_width(c, hidden)
    convs = conv_layers(c, model_type, num_layers)
    moe: MoE | None = None
    if model_type == "lfm2_moe":  # Lfm2MoeDecoderLayer: a dense MLP of intermediate_size on the first layers
        dense = c.int("intermediate_size")
        moe, sparse = sparse_moe(c, hidden)
        first_sparse = c.int("num_dense_layers", default=2, minimum=0)
    else:
        dense, sparse, first_sparse = dense_width(c), [], num_layers
    mixers = {True: (conv_state(c, hidden) if any(convs) else None, short_conv(c, hidden) if any(convs) else []),
              False: (Attention("full", kv_heads, head_dim, head_dim), attention(c, hidden, heads, kv_heads, head_dim))}
    norms = norm("operator_norm", hidden) + norm("ffn_norm", hidden)
    mlp = swiglu(dense, hidden)
    layers = []
    for i, is_conv in enumerate(convs):
        cache, mixer = mixers[is_conv]
        is_moe = i >= first_sparse
        layers.append(Layer(cache, tuple(mixer + (sparse if is_moe else mlp) + norms), is_moe=is_moe))
    # Lfm2Config / Lfm2MoeConfig.__post_init__: tie_embedding, when written, decides; tied by default
    tied = c.bool("tie_embedding", c.bool("tie_word_embeddings", True))
    embedding = (Tensor("embed_tokens.weight", (vocab, hidden), "embedding", "vocab"),)
    head = tuple(norm("embedding_norm", hidden)) + (() if tied else (Tensor("lm_head.weight", (vocab, hidden),
                                                                            "lm_head", "vocab"),))
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied, intermediate_size=dense, moe=moe,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
