"""Tensor-shape helpers every family builds its layers from, and the per-layer cache kinds.

Tensor names keep the module names of the transformers modelling files, so a count can be checked
against a checkpoint's safetensors index.
"""

from __future__ import annotations

from typing import NamedTuple

from planner.errors import PlannerInputError
from planner.model.families.config import UNTIED_BY_DEFAULT, Config
from planner.model.families.core import (STATE_DTYPE_BITS, Attention, Layer, LayerKind, Role, Split, Tensor,
                                         UnsupportedArchitecture)


def norm(name: str, size: int, bias: bool = False) -> list[Tensor]:
    out = [Tensor(f"{name}.weight", (size,), "norm")]
    if bias:
        out.append(Tensor(f"{name}.bias", (size,), "norm"))
    return out


def linear(name: str, out_features: int, in_features: int, split: Split, bias: bool = False,
            role: Role = "linear", count: int = 1) -> list[Tensor]:
    tensors = [Tensor(f"{name}.weight", (out_features, in_features), role, split, count)]
    if bias:
        # A row-parallel layer adds its bias once, after the all-reduce: every rank holds it whole.
        bias_split: Split = "replicated" if split == "row" else split
        tensors.append(Tensor(f"{name}.bias", (out_features,), "bias", bias_split, count))
    return tensors


def attention_tensors(c: Config, hidden: int, heads: int, kv_heads: int, head_dim: int, *,
                       qkv_bias: bool, o_bias: bool, fused_qkv: bool = False,
                       qk_norm: bool = False) -> list[Tensor]:
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    if fused_qkv:
        tensors = linear("self_attn.qkv_proj", q_out + 2 * kv_out, hidden, "column", qkv_bias)
    else:
        tensors = (linear("self_attn.q_proj", q_out, hidden, "column", qkv_bias)
                   + linear("self_attn.k_proj", kv_out, hidden, "kv", qkv_bias)
                   + linear("self_attn.v_proj", kv_out, hidden, "kv", qkv_bias))
    tensors += linear("self_attn.o_proj", hidden, q_out, "row", o_bias)
    if qk_norm:
        tensors += norm("self_attn.q_norm", head_dim) + norm("self_attn.k_norm", head_dim)
    return tensors


def gated_mlp(prefix: str, hidden: int, intermediate: int, bias: bool = False, fused: bool = False,
               role: Role = "linear", count: int = 1) -> list[Tensor]:
    if fused:
        up = linear(f"{prefix}.gate_up_proj", 2 * intermediate, hidden, "column", bias, role, count)
    else:
        up = (linear(f"{prefix}.gate_proj", intermediate, hidden, "column", bias, role, count)
              + linear(f"{prefix}.up_proj", intermediate, hidden, "column", bias, role, count))
    return up + linear(f"{prefix}.down_proj", hidden, intermediate, "row", bias, role, count)


def plain_mlp(prefix: str, hidden: int, intermediate: int, bias: bool = False) -> list[Tensor]:
    """An MLP without a gate: up_proj, the activation, down_proj."""
    return (linear(f"{prefix}.up_proj", intermediate, hidden, "column", bias)
            + linear(f"{prefix}.down_proj", hidden, intermediate, "row", bias))


def whole_qk_norms(heads: int, kv_heads: int, head_dim: int) -> list[Tensor]:
    """OLMo's q_norm / k_norm, over the whole query and key projections rather than one head: split with the heads."""
    return [Tensor("self_attn.q_norm.weight", (heads * head_dim,), "norm", "column"),
            Tensor("self_attn.k_norm.weight", (kv_heads * head_dim,), "norm", "kv")]


class DecoderShape(NamedTuple):
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


def decoder_shape(c: Config) -> DecoderShape:
    """The sizes every decoder config spells the same way (num_key_value_heads defaults to MHA)."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    return DecoderShape(hidden, c.int("num_hidden_layers"), heads, c.int("num_key_value_heads", default=heads),
                        head_dim_from(c, hidden, heads), c.int("vocab_size"))


def head_dim_from(c: Config, hidden: int, heads: int) -> int:
    if "head_dim" in c:
        return c.int("head_dim")
    if hidden % heads:
        raise PlannerInputError(f"{c.where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}; add 'head_dim'")
    return hidden // heads


LAYER_TYPES = {"sliding_attention": "sliding", "chunked_attention": "sliding", "full_attention": "full",
               "attention": "full", "linear_attention": "linear", "mamba": "mamba"}
# Families whose modelling code has no sliding window, whatever a config's sliding_window says (transformers 5.25)
NO_SLIDING_WINDOW = {"olmo2", "seed_oss", "ernie4_5", "ernie4_5_moe", "apertus", "arcee"}
# Families whose config, without layer_types, makes every full_attention_interval-th layer full attention
HYBRID_BY_INTERVAL = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}


def layer_kinds(c: Config, model_type: str, num_layers: int) -> list[tuple[LayerKind, int | None]]:
    """(kind, window) of each layer, from layer_types, sliding_window_pattern or the family rule."""
    window = c.opt_int("sliding_window")
    longest = c.opt_int("max_position_embeddings")
    covers_every_position = window is not None and longest is not None and window >= longest
    if covers_every_position:
        window = None  # a window no shorter than the longest sequence is full attention (e.g. Phi-4-mini)
    layer_types = c.list("layer_types")
    if layer_types is not None:
        if len(layer_types) != num_layers:
            raise PlannerInputError(f"{c.where}: 'layer_types' has {len(layer_types)} entries for {num_layers} layers")
        kinds: list[tuple[LayerKind, int | None]] = []
        for i, layer_type in enumerate(layer_types):
            if not isinstance(layer_type, str):
                raise PlannerInputError(f"{c.where}: layer_types[{i}] must be a string such as 'full_attention', "
                                        f"got {layer_type!r}")
            kind = LAYER_TYPES.get(layer_type)
            if kind is None:
                raise UnsupportedArchitecture(f"{c.where}: layer_types[{i}] = {layer_type!r} is not a layer kind planner knows")
            if kind == "sliding":
                size = c.opt_int("attention_chunk_size") if layer_type == "chunked_attention" else window
                if size is None and covers_every_position and layer_type != "chunked_attention":
                    kinds.append(("full", None))
                    continue
                if size is None:
                    raise PlannerInputError(f"{c.where}: layer {i} is {layer_type} but 'sliding_window' is missing")
                kinds.append(("sliding", size))
            else:
                kinds.append((kind, None))  # type: ignore[arg-type]
        return kinds
    if model_type in NO_SLIDING_WINDOW:
        return [("full", None)] * num_layers
    if model_type == "olmo3" and window is not None:
        # transformers Olmo3Config: sliding_attention but every 4th layer
        return [("full", None) if (i + 1) % 4 == 0 else ("sliding", window) for i in range(num_layers)]
    if model_type in ("exaone4", "exaone_moe", "cohere2", "afmoe"):
        # transformers Exaone4Config / ExaoneMoeConfig / Cohere2Config: local attention but every
        # sliding_window_pattern-th layer (AfmoeConfig's global_attn_every_n_layers-th); SGLang's exaone4.py takes a
        # string pattern such as "LLLG" by its length
        if window is None:
            return [("full", None)] * num_layers
        pattern = c.data.get("sliding_window_pattern")
        every = len(pattern) if isinstance(pattern, str) and pattern else c.int(
            "global_attn_every_n_layers" if model_type == "afmoe" else "sliding_window_pattern", default=4)
        return [("full", None) if (i + 1) % every == 0 else ("sliding", window) for i in range(num_layers)]
    if model_type == "cohere2_moe" and window is not None:
        # transformers Cohere2MoeConfig: the first_k_dense_replace dense layers slide but every
        # prefix_dense_sliding_window_pattern-th (1: none slides), the rest but every sliding_window_pattern-th
        first = c.int("first_k_dense_replace", default=0, minimum=0)
        prefix, rest = c.int("prefix_dense_sliding_window_pattern", default=1), c.int("sliding_window_pattern", default=4)
        return [("full", None) if (i + 1 if i < first else i - first + 1) % (prefix if i < first else rest) == 0
                else ("sliding", window) for i in range(num_layers)]
    if model_type == "smollm3":
        # transformers SmolLM3Config: with use_sliding_window, the layers without RoPE slide (no_rope_layers[i] 0)
        interval = c.int("no_rope_layer_interval", default=4)
        rope = c.int_list("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
        slides = c.bool("use_sliding_window", False) and window is not None
        return [("sliding", window) if slides and i < len(rope) and not rope[i] else ("full", None)
                for i in range(num_layers)]
    if model_type in HYBRID_BY_INTERVAL:
        # transformers Qwen3NextConfig / Qwen3_5TextConfig: every full_attention_interval-th layer is full attention, the rest Gated DeltaNet
        interval = c.int("full_attention_interval", default=4)
        return [("full", None) if (i + 1) % interval == 0 else ("linear", None) for i in range(num_layers)]
    if window is None or model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_vl_text", "qwen3_vl_moe_text", "mimo",
                                          "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text") and not c.bool("use_sliding_window", False):
        return [("full", None)] * num_layers
    if model_type == "gemma2":
        # transformers Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2)
        return [("sliding", window) if i % 2 == 0 else ("full", None) for i in range(num_layers)]
    if model_type in ("gemma3_text", "gemma3"):
        # transformers Gemma3DecoderLayer (pre layer_types): sliding unless (i + 1) % pattern == 0
        pattern = c.int("sliding_window_pattern", default=6)
        return [("full", None) if (i + 1) % pattern == 0 else ("sliding", window) for i in range(num_layers)]
    # Mistral v0.1, Phi-3: one sliding window on every layer
    return [("sliding", window)] * num_layers


def recurrent_state_parts(c: Config, kind: LayerKind) -> tuple[int, int]:
    """(convolution-window, recurrent-state) values a linear-attention or Mamba layer keeps per sequence, whatever
    the context length.

    Shapes as vLLM allocates them (vllm/model_executor/layers/mamba/mamba_utils.py,
    MambaStateShapeCalculator): a convolution window of (kernel - 1) steps plus the recurrent state.
    """
    if kind == "linear":  # Gated DeltaNet (Qwen3-Next, Qwen3.5)
        k_heads, v_heads = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
        k_dim, v_dim = c.int("linear_key_head_dim"), c.int("linear_value_head_dim")
        conv = (2 * k_heads * k_dim + v_heads * v_dim) * (c.int("linear_conv_kernel_dim") - 1)
        return conv, v_heads * k_dim * v_dim
    # Mamba2 (Granite 4.0 H, Nemotron-H, Falcon-H1, ...)
    heads, head_dim = c.int("mamba_n_heads"), c.int("mamba_d_head")
    state, groups = c.int("mamba_d_state"), c.int("mamba_n_groups", default=1)
    conv = (heads * head_dim + 2 * groups * state) * (c.int("mamba_d_conv") - 1)
    return conv, heads * head_dim * state


def mamba2_sizes(c: Config, inner: int) -> Config:
    """A Mamba-2 layer's sizes in the spelling mamba2_mixer and recurrent_attention read, for configs that give the
    mixer's width (`inner`) and let mamba_d_head be "auto": inner / mamba_n_heads (GraniteMoeHybridConfig and
    FalconH1Config __post_init__, which refuse heads that do not fill the width)."""
    heads = c.int("mamba_n_heads")
    head_dim = inner // heads if c.data.get("mamba_d_head") == "auto" else c.int("mamba_d_head")
    if heads * head_dim != inner:
        raise PlannerInputError(f"{c.where}: mamba_n_heads {heads} x mamba_d_head {head_dim} must equal the Mamba "
                                f"width {inner} (mamba_expand x hidden_size, or mamba_d_ssm)")
    return Config({"mamba_n_heads": heads, "mamba_d_head": head_dim, "mamba_d_state": c.int("mamba_d_state"),
                   "mamba_n_groups": c.int("mamba_n_groups"), "mamba_d_conv": c.int("mamba_d_conv")}, c.where)


def mamba2_mixer(m: Config, prefix: str, hidden: int, *, conv_bias: bool, proj_bias: bool,
                 out_bias: bool | None = None, gated_norm: bool = True) -> list[Tensor]:
    """A Mamba-2 mixer's weights as transformers builds them (NemotronHMamba2Mixer, GraniteMoeHybridMambaLayer,
    FalconH1Mixer): one in_proj giving z, x, B, C and dt, the depthwise convolution over x, B and C, per-head dt_bias /
    A_log / D, the gated RMSNorm over the inner width (Falcon-H1's is optional), out_proj (whose bias Falcon-H1 sets
    apart). `m` spells the sizes as recurrent_state_parts reads them."""
    heads, state, groups = m.int("mamba_n_heads"), m.int("mamba_d_state"), m.int("mamba_n_groups", default=1)
    inner = heads * m.int("mamba_d_head")
    conv_dim = inner + 2 * groups * state
    t = linear(f"{prefix}.in_proj", inner + conv_dim + heads, hidden, "column", proj_bias)
    t += [Tensor(f"{prefix}.conv1d.weight", (conv_dim, 1, m.int("mamba_d_conv")), "linear", "column")]
    if conv_bias:
        t += [Tensor(f"{prefix}.conv1d.bias", (conv_dim,), "bias", "column")]
    t += [Tensor(f"{prefix}.{p}", (heads,), "norm", "column") for p in ("dt_bias", "A_log", "D")]
    if gated_norm:
        t += [Tensor(f"{prefix}.norm.weight", (inner,), "norm", "column")]
    return t + linear(f"{prefix}.out_proj", hidden, inner, "row", proj_bias if out_bias is None else out_bias)


def config_state_dtype(c: Config, key: str) -> str | None:
    """The recurrent-state dtype a config names under `key` (None when it names none)."""
    dtype = c.str(key)
    if dtype is not None and dtype not in STATE_DTYPE_BITS:
        raise PlannerInputError(f"{c.where}: {key!r} must be one of {', '.join(STATE_DTYPE_BITS)}, got {dtype!r}")
    return dtype


def recurrent_attention(c: Config, kind: LayerKind) -> Attention:
    """A linear-attention or Mamba layer's cache: its state in two parts, the recurrent-state dtype its config asks
    for (Qwen3.5 mamba_ssm_dtype; Nemotron-H mamba_ssm_cache_dtype), and for Mamba-2 the B / C groups TP may
    replicate."""
    conv, recurrent = recurrent_state_parts(c, kind)
    if kind != "mamba":
        return Attention(kind, state_elements=conv + recurrent, conv_state_elements=conv, recurrence="gated_delta_net",
                         config_ssm_dtype=config_state_dtype(c, "mamba_ssm_dtype"),
                         delta_heads=c.int("linear_num_value_heads"), delta_key_dim=c.int("linear_key_head_dim"),
                         delta_value_dim=c.int("linear_value_head_dim"))
    return Attention(kind, state_elements=conv + recurrent, conv_state_elements=conv, recurrence="mamba2",
                     config_ssm_dtype=config_state_dtype(c, "mamba_ssm_cache_dtype"),
                     state_groups=c.int("mamba_n_groups", default=1),
                     state_group_elements=2 * c.int("mamba_d_state") * (c.int("mamba_d_conv") - 1))


def attention_layouts(c: Config, model_type: str, num_layers: int, kv_heads: int, head_dim: int,
                       recurrent_ok: bool = False) -> list[Attention]:
    layouts = []
    for i, (kind, window) in enumerate(layer_kinds(c, model_type, num_layers)):
        if kind in ("linear", "mamba"):
            if not recurrent_ok:
                raise UnsupportedArchitecture(
                    f"{c.where}: layer {i} is a {kind} (recurrent-state) layer, whose weights planner does not count "
                    f"for model_type {model_type!r}; give the weights with --params N"
                )
            layouts.append(recurrent_attention(c, kind))
        else:
            layouts.append(Attention(kind, kv_heads, head_dim, head_dim, window))
    return layouts


def embedding_and_head(c: Config, model_type: str, hidden: int, vocab: int, *,
                        norm_bias: bool = False, head_bias: bool = False) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], bool]:
    tied = c.bool("tie_word_embeddings", model_type not in UNTIED_BY_DEFAULT)
    embedding = (Tensor("embed_tokens.weight", (vocab, hidden), "embedding", "vocab"),)
    head = norm("norm", hidden, norm_bias)
    if not tied:
        head += [Tensor("lm_head.weight", (vocab, hidden), "lm_head", "vocab")]
        if head_bias:
            head += [Tensor("lm_head.bias", (vocab,), "bias", "vocab")]
    return embedding, tuple(head), tied


def moe_block(prefix: str, hidden: int, experts: int, expert_intermediate: int, *, router_bias: bool = False,
               expert_bias: bool = False, fused: bool = False) -> list[Tensor]:
    router = linear(f"{prefix}.gate", experts, hidden, "replicated", router_bias, role="router")
    router = [Tensor(t.name, t.shape, "router", t.split) for t in router]
    return router + gated_mlp(f"{prefix}.experts", hidden, expert_intermediate, expert_bias, fused,
                               role="expert", count=experts)




def cache_layers(blocks: list[tuple[Attention | None, list[Tensor], bool]]) -> tuple[Layer, ...]:
    """planner's layers are cache layers: a block without a cache of its own (an MoE or MLP-only block, a
    no-op attention, a layer reusing another's KV) joins the layer before it (the first one, when it leads),
    so engines see one layer per cache and pipeline stages split the stack at cache layers.
    Each block is (its cache, or None; its tensors; whether it holds experts)."""
    layers: list[tuple[Attention, list[Tensor], bool]] = []
    leading: list[Tensor] = []
    leading_moe = False
    for attention, tensors, is_moe in blocks:
        if attention is not None:
            layers.append((attention, leading + tensors, leading_moe or is_moe))
            leading, leading_moe = [], False
        elif layers:
            previous, held, has_moe = layers[-1]
            layers[-1] = (previous, held + tensors, has_moe or is_moe)
        else:
            leading, leading_moe = leading + tensors, leading_moe or is_moe
    if not layers:
        raise UnsupportedArchitecture("no layer of this model keeps a cache; planner cannot size it")
    return tuple(Layer(a, tuple(t), is_moe=m) for a, t, m in layers)
