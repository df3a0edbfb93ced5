"""Qwen3-Next and Qwen3.5 (dense and MoE): Gated DeltaNet linear-attention layers interleaved with gated
full attention (transformers models/qwen3_next, qwen3_5, qwen3_5_moe modelling files).

The checkpoints also ship a multi-token-prediction module (mtp.*) that transformers does not build and
engines load only for speculative decoding: counted apart, in `unloaded`.
"""

from __future__ import annotations

from planner.model.families.blocks import (attention_layouts, decoder_shape, embedding_and_head, gated_mlp, linear,
                                           moe_block, norm)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Layer, MoE, Tensor

FUSED_PROJECTIONS = {"qwen3_next"}  # in_proj_qkvz / in_proj_ba; Qwen3.5 splits them into four


def gated_attention(c: Config, hidden: int, heads: int, kv_heads: int, head_dim: int) -> list[Tensor]:
    """Full attention with an output gate: q_proj yields queries and the gate (2 x heads x head_dim)."""
    bias = c.bool("attention_bias", False)
    return (linear("self_attn.q_proj", 2 * heads * head_dim, hidden, "column", bias)
            + linear("self_attn.k_proj", kv_heads * head_dim, hidden, "kv", bias)
            + linear("self_attn.v_proj", kv_heads * head_dim, hidden, "kv", bias)
            + linear("self_attn.o_proj", hidden, heads * head_dim, "row", bias)
            + norm("self_attn.q_norm", head_dim) + norm("self_attn.k_norm", head_dim))


def gated_deltanet(c: Config, model_type: str, hidden: int) -> list[Tensor]:
    k_heads, v_heads = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    key_dim = k_heads * c.int("linear_key_head_dim")
    v_head_dim = c.int("linear_value_head_dim")
    value_dim = v_heads * v_head_dim
    conv_dim = 2 * key_dim + value_dim
    p = "linear_attn"
    if model_type in FUSED_PROJECTIONS:
        proj = (linear(f"{p}.in_proj_qkvz", 2 * key_dim + 2 * value_dim, hidden, "column")
                + linear(f"{p}.in_proj_ba", 2 * v_heads, hidden, "column"))
    else:
        proj = (linear(f"{p}.in_proj_qkv", conv_dim, hidden, "column")
                + linear(f"{p}.in_proj_z", value_dim, hidden, "column")
                + linear(f"{p}.in_proj_b", v_heads, hidden, "column")
                + linear(f"{p}.in_proj_a", v_heads, hidden, "column"))
    # depthwise causal convolution over q, k and v: one kernel per channel
    conv = [Tensor(f"{p}.conv1d.weight", (conv_dim, 1, c.int("linear_conv_kernel_dim")), "linear", "column")]
    per_head = [Tensor(f"{p}.dt_bias", (v_heads,), "norm", "column"), Tensor(f"{p}.A_log", (v_heads,), "norm", "column")]
    return (proj + conv + per_head + norm(f"{p}.norm", v_head_dim)
            + linear(f"{p}.out_proj", hidden, value_dim, "row"))


def _is_moe(c: Config, model_type: str) -> bool:
    return model_type in ("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text")


def _moe_layers(c: Config, model_type: str, num_layers: int) -> set[int]:
    if not _is_moe(c, model_type):
        return set()
    if model_type != "qwen3_next":
        return set(range(num_layers))  # Qwen3_5MoeDecoderLayer: a sparse MoE block on every layer
    # Qwen3NextDecoderLayer: sparse unless in mlp_only_layers, every decoder_sparse_step-th layer
    step = c.int("decoder_sparse_step", default=1)
    dense = set(c.int_list("mlp_only_layers") or [])
    return {i for i in range(num_layers) if i not in dense and (i + 1) % step == 0}


def qwen_hybrid(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    moe: MoE | None = None
    moe_mlp: list[Tensor] = []
    if _is_moe(c, model_type):
        experts, top_k = c.int("num_experts"), c.int("num_experts_per_tok")
        expert_intermediate = c.int("moe_intermediate_size")
        shared = c.int("shared_expert_intermediate_size", default=0, minimum=0)
        moe = MoE(experts, top_k, expert_intermediate, shared)
        moe_mlp = moe_block("mlp", hidden, experts, expert_intermediate, fused=True)
        if shared:
            moe_mlp += gated_mlp("mlp.shared_expert", hidden, shared)
            moe_mlp += [Tensor("mlp.shared_expert_gate.weight", (1, hidden), "router")]
    dense_intermediate = c.int("intermediate_size") if "intermediate_size" in c or moe is None else 0
    dense_mlp = gated_mlp("mlp", hidden, dense_intermediate) if dense_intermediate else []
    moe_layers = _moe_layers(c, model_type, num_layers)

    attention = attention_layouts(c, model_type, num_layers, kv_heads, head_dim, recurrent_ok=True)
    full = gated_attention(c, hidden, heads, kv_heads, head_dim)
    deltanet = gated_deltanet(c, model_type, hidden)
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
    layers = []
    for i, a in enumerate(attention):
        mixer = deltanet if a.kind == "linear" else full
        mlp = moe_mlp if i in moe_layers else dense_mlp
        layers.append(Layer(a, tuple(mixer + norms + mlp), is_moe=i in moe_layers))

    # MTP (vLLM qwen3_next_mtp.py / qwen3_5_mtp.py): fc over [embedding; hidden], full-attention decoder
    # layers with the model's MLP, three norms; embeddings and lm_head shared with the model
    mtp: list[Tensor] = []
    mtp_layers = c.int("mtp_num_hidden_layers", default=0, minimum=0) or c.int("num_nextn_predict_layers", default=0,
                                                                              minimum=0)
    if mtp_layers:
        mtp += linear("mtp.fc", hidden, 2 * hidden, "replicated")
        mtp += norm("mtp.pre_fc_norm_embedding", hidden) + norm("mtp.pre_fc_norm_hidden", hidden) + norm("mtp.norm", hidden)
        for j in range(mtp_layers):
            mtp += [Tensor(f"mtp.layers.{j}.{t.name}", t.shape, t.role, t.split, t.count)
                    for t in full + norms + (moe_mlp or dense_mlp)]
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied, unloaded=tuple(mtp),
        intermediate_size=dense_intermediate, moe=moe, max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
