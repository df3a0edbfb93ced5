"""IBM Granite 4.0 (granitemoehybrid): every decoder layer is a mixer, a Mamba-2 layer or GQA attention chosen per
layer by layer_types, followed by a shared gated MLP of shared_intermediate_size and, when num_local_experts is not 0,
a routed MoE beside it (transformers 5.25 models/granitemoehybrid, GraniteMoeHybridDecoderLayer).

Granite 4.0 H (Small, Tiny, Micro) mixes the two; Granite 4.0 Micro and the 1B / 350M models list attention only,
so they hold no recurrent state and are plain GQA decoders with the shared MLP.
"""

from __future__ import annotations

from planner.errors import PlannerInputError
from planner.model.families.blocks import (attention_tensors, decoder_shape, embedding_and_head, gated_mlp,
                                           mamba2_mixer, mamba2_sizes, moe_block, norm, recurrent_attention)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE

# layer_types as checkpoints spell them and as transformers 5 renames them (configuration_utils
# _LEGACY_LAYER_TYPE_REMAP: mamba -> linear_attention, attention -> full_attention)
MAMBA = ("mamba", "linear_attention")
ATTENTION = ("attention", "full_attention")


def _layer_types(c: Config, num_layers: int) -> list[str]:
    types = c.list("layer_types") or c.list("layers_block_type")
    if types is None:  # GraniteMoeHybridConfig.__post_init__: every layer Mamba when the config names none
        return ["mamba"] * num_layers
    if len(types) != num_layers or any(t not in MAMBA + ATTENTION for t in types):
        raise PlannerInputError(f"{c.where}: 'layer_types' must name each of the {num_layers} layers 'mamba' or "
                                f"'attention'")
    return ["mamba" if t in MAMBA else "attention" for t in types]


def granite_moe_hybrid(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    types = _layer_types(c, num_layers)
    experts = c.int("num_local_experts", minimum=0)
    expert_intermediate, shared = c.int("intermediate_size"), c.int("shared_intermediate_size", minimum=0)
    attention_bias = c.bool("attention_bias", False)
    mixers = {"attention": (Attention("full", kv_heads, head_dim, head_dim),
                            attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=attention_bias,
                                              o_bias=attention_bias))}
    if "mamba" in types:
        sizes = mamba2_sizes(c, c.int("mamba_expand") * hidden)
        mixers["mamba"] = (recurrent_attention(sizes, "mamba"),
                           mamba2_mixer(sizes, "mamba", hidden, conv_bias=c.bool("mamba_conv_bias", True),
                                        proj_bias=c.bool("mamba_proj_bias", False)))
    ffn = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
    if experts:  # GraniteMoeHybridMoE: a bias-free router over the experts
        ffn += moe_block("mlp", hidden, experts, expert_intermediate)
    if shared:  # GraniteMoeHybridMLP on every layer (transformers builds an empty one at 0, vLLM none)
        ffn += gated_mlp("mlp.shared_expert", hidden, shared)
    layers = tuple(Layer(mixers[kind][0], tuple(mixers[kind][1] + ffn), is_moe=bool(experts)) for kind in types)
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=layers, embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=shared, moe=MoE(experts, c.int("num_experts_per_tok"), expert_intermediate, shared)
        if experts else None,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
