"""Gemma 4 (gemma4 / gemma4_text), dense and MoE, with its vision tower (transformers models/gemma4).

Per layer: sliding layers use head_dim and num_key_value_heads, full-attention layers global_head_dim and, with
attention_k_eq_v, num_global_key_value_heads and no v_proj (values are the keys); the last num_kv_shared_layers
reuse an earlier layer's cache and hold no k/v weights (and, with use_double_wide_mlp, a doubled MLP); they join
the layer before them as planner layers are cache layers (blocks.cache_layers). MoE
layers run a 128-expert block next to the dense MLP. Per-layer embeddings (hidden_size_per_layer_input) add
a packed embedding table and per-layer gates. The audio tower of the small models is not counted: a config
with an audio_config is refused (give --params).
"""

from __future__ import annotations

from planner.model.families.blocks import cache_layers, embedding_and_head, gated_mlp, layer_kinds, linear, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, MoE, Tensor, UnsupportedArchitecture
from planner.model.families.vision import as_vision


def kv_sharing(c: Config, kinds: list[str]) -> list[str | None]:
    """transformers Gemma4TextConfig.kv_sharing_modes: the last num_kv_shared_layers reuse ("reuse") the cache
    of the last earlier layer of their type ("store")."""
    n = len(kinds)
    shared = c.int("num_kv_shared_layers", default=0, minimum=0)
    first = n - min(shared, n)
    modes: list[str | None] = [None if i < first else "reuse" for i in range(n)]
    for kind in set(kinds[first:]):
        producers = [i for i in range(first) if kinds[i] == kind]
        if producers:
            modes[producers[-1]] = "store"
    return modes


def gemma4(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, vocab = c.int("num_attention_heads"), c.int("vocab_size")
    kinds = layer_kinds(c, model_type, num_layers)
    k_eq_v = c.bool("attention_k_eq_v", False)
    bias = c.bool("attention_bias", False)
    sharing = kv_sharing(c, [k for k, _ in kinds])
    ple = c.int("hidden_size_per_layer_input", default=0, minimum=0)
    moe: MoE | None = None
    moe_tensors: list[Tensor] = []
    if c.bool("enable_moe_block", False):
        experts, moe_inter = c.int("num_experts"), c.int("moe_intermediate_size")
        moe = MoE(experts, c.int("top_k_experts"), moe_inter)
        moe_tensors = (linear("router.proj", experts, hidden, "replicated", role="router")
                       + [Tensor("router.scale", (hidden,), "router"), Tensor("router.per_expert_scale", (experts,), "router")]
                       + gated_mlp("experts", hidden, moe_inter, fused=True, role="expert", count=experts)
                       + norm("post_feedforward_layernorm_1", hidden) + norm("post_feedforward_layernorm_2", hidden)
                       + norm("pre_feedforward_layernorm_2", hidden))
    blocks: list[tuple[Attention | None, list[Tensor], bool]] = []
    for i, (kind, window) in enumerate(kinds):
        full = kind == "full"
        head_dim = c.int("global_head_dim") if full and "global_head_dim" in c else c.int("head_dim")
        kv_heads = c.int("num_global_key_value_heads") if full and k_eq_v and "num_global_key_value_heads" in c \
            else c.int("num_key_value_heads", default=heads)
        t = linear("self_attn.q_proj", heads * head_dim, hidden, "column", bias) + norm("self_attn.q_norm", head_dim)
        reuse = sharing[i] == "reuse"
        if not reuse:
            t += norm("self_attn.k_norm", head_dim) + linear("self_attn.k_proj", kv_heads * head_dim, hidden, "kv", bias)
            if not (full and k_eq_v):
                t += linear("self_attn.v_proj", kv_heads * head_dim, hidden, "kv", bias)
        t += linear("self_attn.o_proj", hidden, heads * head_dim, "row", bias)
        wide = 2 if reuse and c.bool("use_double_wide_mlp", False) else 1
        t += gated_mlp("mlp", hidden, c.int("intermediate_size") * wide)
        t += (norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
              + norm("pre_feedforward_layernorm", hidden) + norm("post_feedforward_layernorm", hidden))
        t += [Tensor("layer_scalar", (1,), "norm")]
        if ple:
            t += (linear("per_layer_input_gate", ple, hidden, "replicated")
                  + linear("per_layer_projection", hidden, ple, "replicated") + norm("post_per_layer_input_norm", hidden))
        t += moe_tensors
        # a layer that reuses another's cache adds none of its own
        attention = None if reuse else Attention(kind, kv_heads, head_dim, head_dim, window)
        blocks.append((attention, t, moe is not None))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    if ple:
        embedding += (Tensor("embed_tokens_per_layer.weight", (c.int("vocab_size_per_layer_input"), num_layers * ple),
                             "embedding", "vocab"),
                      *linear("per_layer_model_projection", num_layers * ple, hidden, "replicated"),
                      *norm("per_layer_projection_norm", ple))
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=cache_layers(blocks), embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=c.int("intermediate_size"), moe=moe, max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def gemma4_vision(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Gemma4VisionModel: linear patch embedder with a 2-D position table, Gemma-style encoder layers (q/k norms,
    four norms, gated MLP), optional standardisation, and the embed_vision projection into the text width."""
    if outer.data.get("audio_config") is not None:
        raise UnsupportedArchitecture(f"{outer.where}: the Gemma 4 audio tower is not one planner counts; give --params N")
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    heads, head_dim = v.int("num_attention_heads"), v.int("head_dim")
    kv_heads = v.int("num_key_value_heads", default=heads)
    patch = v.int("patch_size")
    tower = linear("patch_embedder.input_proj", hidden, 3 * patch * patch, "replicated")
    tower += [Tensor("patch_embedder.position_embedding_table", (2, v.int("position_embedding_size"), hidden), "vision")]
    for i in range(v.int("num_hidden_layers")):
        p = f"encoder.layers.{i}"
        tower += linear(f"{p}.self_attn.q_proj.linear", heads * head_dim, hidden, "column")
        tower += linear(f"{p}.self_attn.k_proj.linear", kv_heads * head_dim, hidden, "column")
        tower += linear(f"{p}.self_attn.v_proj.linear", kv_heads * head_dim, hidden, "column")
        tower += linear(f"{p}.self_attn.o_proj.linear", hidden, heads * head_dim, "row")
        tower += norm(f"{p}.self_attn.q_norm", head_dim) + norm(f"{p}.self_attn.k_norm", head_dim)
        tower += gated_mlp(f"{p}.mlp", hidden, inter)
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            tower += norm(f"{p}.{n}", hidden)
    if v.bool("standardize", False):
        tower += [Tensor("std_bias", (hidden,), "vision"), Tensor("std_scale", (hidden,), "vision")]
    projector = linear("embed_vision.embedding_projection", text_hidden, hidden, "replicated")
    return as_vision(tower) + as_vision(projector, "projector")
