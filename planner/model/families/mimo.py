"""MiMo-V2-Flash (mimo_v2_flash): hybrid sliding-window / full attention with K and V of different widths,
attention sinks on the sliding layers (which also have twice the KV heads), a dense first layer, then MoE
layers of sigmoid-routed experts without a shared expert (transformers models/mimo_v2_flash).

The hub config spells the layout as hybrid_layer_pattern (1 = sliding) and moe_layer_freq (1 = MoE); without
them transformers' defaults apply (full attention on layer 0 and every 6th, MoE from layer 1). The sliding
window is sliding_window_size + 1 tokens (the query plus the window, as the reference SGLang code attends).
MTP modules the checkpoint may ship are not in the config and are not counted.
"""

from __future__ import annotations

from planner.errors import PlannerInputError
from planner.model.families.blocks import embedding_and_head, gated_mlp, head_dim_from, linear, moe_block, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE, Tensor


def _flags(c: Config, key: str, num_layers: int, default: list[int]) -> list[int]:
    values = c.int_list(key)
    if values is None:
        return default
    if len(values) != num_layers:
        raise PlannerInputError(f"{c.where}: {key!r} has {len(values)} entries for {num_layers} layers")
    return values


def mimo_v2_flash(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, vocab = c.int("num_attention_heads"), c.int("vocab_size")
    kv_heads = c.int("num_key_value_heads")
    k_dim, v_dim = head_dim_from(c, hidden, heads), c.int("v_head_dim")
    sliding = _flags(c, "hybrid_layer_pattern", num_layers,
                     [int(not (i == 0 or (i + 1) % 6 == 0)) for i in range(num_layers)])
    sparse = _flags(c, "moe_layer_freq", num_layers, [int(i > 0) for i in range(num_layers)])
    window = c.int("sliding_window_size") + 1 if "sliding_window_size" in c else c.int("sliding_window", default=129)
    bias = c.bool("attention_bias", False)
    experts, expert_intermediate = c.int("n_routed_experts"), c.int("moe_intermediate_size")
    moe_mlp = moe_block("mlp", hidden, experts, expert_intermediate, fused=True)
    moe_mlp += [Tensor("mlp.gate.e_score_correction_bias", (experts,), "router")]
    dense_mlp = gated_mlp("mlp", hidden, c.int("intermediate_size"))
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
    layers = []
    for is_sliding, is_moe in zip(sliding, sparse):
        kv = kv_heads * 2 if is_sliding else kv_heads  # MiMoV2FlashAttention: SWA layers double the KV heads
        attn = (linear("self_attn.q_proj", heads * k_dim, hidden, "column", bias)
                + linear("self_attn.k_proj", kv * k_dim, hidden, "kv", bias)
                + linear("self_attn.v_proj", kv * v_dim, hidden, "kv", bias)
                + linear("self_attn.o_proj", hidden, heads * v_dim, "row"))
        if is_sliding:
            attn += [Tensor("self_attn.sinks", (heads,), "norm", "column")]
        attention = Attention("sliding", kv, k_dim, v_dim, window) if is_sliding else Attention("full", kv, k_dim, v_dim)
        layers.append(Layer(attention, tuple(attn + norms + (moe_mlp if is_moe else dense_mlp)), is_moe=bool(is_moe)))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=c.int("intermediate_size"), moe=MoE(experts, c.int("num_experts_per_tok"), expert_intermediate),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
