"""Step-3.5 / Step-3.7 (text model_type step3p5, the VLM step3p7): GQA attention whose sliding-window layers
may have more query heads than the full ones, q/k norms per head and a sigmoid gate per head (g_proj), dense
first layers, then MoE layers of fused experts with a router correction bias and one always-on shared expert;
Step-3.7's perception-encoder vision tower with two stride-2 downsampling convolutions and a linear projector
(transformers models/step3p7, modeling_step3p7.py).

The checkpoints also append num_nextn_predict_layers MTP layers; transformers skips them on load and builds
none, so planner does not count them either: `params` is the model without its MTP layers.
"""

from __future__ import annotations

from planner.errors import PlannerInputError
from planner.model.families.blocks import attention_layouts, embedding_and_head, gated_mlp, linear, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Layer, MoE, Tensor
from planner.model.families.vision import as_vision, vit_layer


def _first(c: Config, *keys: str) -> int:
    """The first of a key and its legacy hub aliases the config gives (Step3p7TextConfig.attribute_map)."""
    for key in keys[:-1]:
        if key in c:
            return c.int(key)
    return c.int(keys[-1])


def _per_layer(c: Config, key: str, layers: int) -> list | None:
    """A per-layer list, without the trailing entries hub configs add for the MTP layers."""
    values = c.list(key)
    if values is None:
        return None
    if len(values) not in (layers, layers + c.int("num_nextn_predict_layers", default=0, minimum=0)):
        raise PlannerInputError(f"{c.where}: {key!r} has {len(values)} entries for {layers} layers")
    return values[:layers]


def _sparse_layers(c: Config, layers: int) -> list[bool]:
    """mlp_layer_types, else the legacy moe_layers_enum ("3,4,..." or a list), else MoE from layer 3 on
    (Step3p7TextConfig.__post_init__)."""
    types = _per_layer(c, "mlp_layer_types", layers)
    if types is not None:
        if any(t not in ("dense", "sparse") for t in types):
            raise PlannerInputError(f"{c.where}: 'mlp_layer_types' entries must be 'dense' or 'sparse'")
        return [t == "sparse" for t in types]
    enum = c.data.get("moe_layers_enum")
    if enum is None:
        return [i >= 3 for i in range(layers)]
    items = enum.split(",") if isinstance(enum, str) else enum
    try:
        sparse = {int(i) for i in items if str(i).strip()}
    except (TypeError, ValueError):
        raise PlannerInputError(f"{c.where}: 'moe_layers_enum' must list layer indexes, got {enum!r}") from None
    return [i in sparse for i in range(layers)]


def _heads_per_layer(c: Config, layer_types: list[str], heads: int) -> list[int]:
    """Query heads of each layer: sliding-window layers take num_sliding_attention_heads, or the legacy
    attention_other_setting's num_attention_heads (per_layer_config, written back by transformers, wins)."""
    sliding = c.data.get("num_sliding_attention_heads")
    if sliding is None:
        other = c.data.get("attention_other_setting") or {}
        if not isinstance(other, dict):
            raise PlannerInputError(f"{c.where}: 'attention_other_setting' must be an object")
        sliding = other.get("num_attention_heads", heads)
    per_layer = c.data.get("per_layer_config") or {}
    if not isinstance(per_layer, dict):
        raise PlannerInputError(f"{c.where}: 'per_layer_config' must be an object")
    out = []
    for i, layer_type in enumerate(layer_types):
        override = per_layer.get(str(i)) or per_layer.get(i) or {}
        value = override.get("num_attention_heads") if isinstance(override, dict) else None
        out.append(value if value is not None else sliding if layer_type == "sliding_attention" else heads)
    for i, h in enumerate(out):
        if isinstance(h, bool) or not isinstance(h, int) or h < 1:
            raise PlannerInputError(f"{c.where}: layer {i} has {h!r} attention heads; give a whole number")
    return out


def _attention(c: Config, hidden: int, heads: int, kv_heads: int, head_dim: int) -> list[Tensor]:
    """Step3p7Attention: q/k/v/o, per-head RMSNorms on q and k, and g_proj, one gate per head (gating true or
    "per-head") or per head channel."""
    bias = c.bool("attention_bias", False)
    gating = c.data.get("gating", True)
    gate = heads if gating is True or gating == "per-head" else heads * head_dim
    return (linear("self_attn.q_proj", heads * head_dim, hidden, "column", bias)
            + linear("self_attn.k_proj", kv_heads * head_dim, hidden, "kv", bias)
            + linear("self_attn.v_proj", kv_heads * head_dim, hidden, "kv", bias)
            + linear("self_attn.o_proj", hidden, heads * head_dim, "row", bias)
            + norm("self_attn.q_norm", head_dim) + norm("self_attn.k_norm", head_dim)
            + linear("self_attn.g_proj", gate, hidden, "column"))


def step3p5(c: Config, model_type: str, name: str) -> Architecture:
    hidden, layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, vocab, head_dim = c.int("num_attention_heads"), c.int("vocab_size"), c.int("head_dim")
    kv_heads = _first(c, "num_key_value_heads", "num_attention_groups")
    layer_types = _per_layer(c, "layer_types", layers) or ["full_attention"] * layers
    mlp_bias = c.bool("mlp_bias", False)
    experts = _first(c, "n_routed_experts", "moe_num_experts")
    expert_intermediate, shared = c.int("moe_intermediate_size"), _first(c, "share_expert_dim", "share_expert_dims")
    moe_mlp = (linear("mlp.gate", experts, hidden, "replicated", role="router")
               + [Tensor("mlp.gate.e_score_correction_bias", (experts,), "router")]
               + gated_mlp("mlp.experts", hidden, expert_intermediate, fused=True, role="expert", count=experts)
               + gated_mlp("mlp.shared_experts", hidden, shared, mlp_bias))
    dense_mlp = gated_mlp("mlp", hidden, c.int("intermediate_size"), mlp_bias)
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
    trimmed = Config({**c.data, "layer_types": layer_types}, c.where)
    attention = attention_layouts(trimmed, model_type, layers, kv_heads, head_dim)
    sparse = _sparse_layers(c, layers)
    built = [Layer(a, tuple(_attention(c, hidden, h, kv_heads, head_dim) + norms + (moe_mlp if s else dense_mlp)),
                   is_moe=s)
             for a, h, s in zip(attention, _heads_per_layer(c, layer_types, heads), sparse)]
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(built), embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=c.int("intermediate_size"),
        moe=MoE(experts, _first(c, "num_experts_per_tok", "moe_top_k"), expert_intermediate, shared),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def step3p7_vision(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Step3p7VisionModel: bias-free patch conv, a learned position table, a pre-LayerNorm, ViT blocks with two
    layer-scale vectors each (lambda_1/2), then downsampler1/2 (3x3 stride-2 convs doubling the width twice);
    the projector maps 4 x width to the text width. Hub configs spell width / layers / heads; the MLP width is
    int(width x mlp_ratio) whatever intermediate_size says (Step3p7VisionConfig.__post_init__)."""
    hidden = v.int("width") if "width" in v else v.int("hidden_size")
    layers = v.int("layers") if "layers" in v else v.int("num_hidden_layers")
    ratio = v.data.get("mlp_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 64:
        raise PlannerInputError(f"{v.where}: 'mlp_ratio' must be a positive number, got {ratio!r}")
    inter = int(hidden * ratio)
    patch, channels, image = v.int("patch_size"), v.int("num_channels", default=3), v.int("image_size")
    tower = [Tensor("embeddings.patch_embedding.weight", (hidden, channels, patch, patch), "vision"),
             Tensor("embeddings.position_embedding.weight", ((image // patch) ** 2, hidden), "vision")]
    tower += norm("pre_layernorm", hidden, bias=True)
    for i in range(layers):
        block = vit_layer(f"layers.{i}", hidden, inter)
        tower += [Tensor(t.name.replace("layer_norm1", "layernorm_before").replace("layer_norm2", "layernorm_after"),
                         t.shape, t.role, t.split) for t in block]
        tower += [Tensor(f"layers.{i}.lambda_{k}", (hidden,), "vision") for k in (1, 2)]
    tower += [Tensor("downsampler1.weight", (2 * hidden, hidden, 3, 3), "vision"),
              Tensor("downsampler1.bias", (2 * hidden,), "vision"),
              Tensor("downsampler2.weight", (4 * hidden, 2 * hidden, 3, 3), "vision"),
              Tensor("downsampler2.bias", (4 * hidden,), "vision")]
    projector = linear("multi_modal_projector", text_hidden, 4 * hidden, "replicated",
                       outer.bool("projector_bias", False))
    return as_vision(tower) + as_vision(projector, "projector")
