"""Multi-head latent attention (MLA) MoE decoders: DeepSeek V2/V3 and their derivatives."""

from __future__ import annotations

from planner.errors import PlannerInputError
from planner.model.families.blocks import (attention_layouts, attention_tensors, embedding_and_head, gated_mlp,
                                           head_dim_from, linear, moe_block, norm)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE, Tensor
from planner.model.families.registry import family


@family("deepseek_v2", "deepseek_v3", "kimi_k2")
def deepseek(c: Config, model_type: str, name: str) -> Architecture:
    """DeepSeek V2/V3 (and Kimi K2): MLA attention, first_k_dense_replace dense layers, shared + routed experts."""
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, vocab = c.int("num_attention_heads"), c.int("vocab_size")
    q_lora = c.opt_int("q_lora_rank")
    kv_lora, rope_dim = c.int("kv_lora_rank"), c.int("qk_rope_head_dim")
    nope_dim, v_dim = c.int("qk_nope_head_dim"), c.int("v_head_dim")
    q_head = nope_dim + rope_dim
    attn: list[Tensor] = []
    if q_lora:
        attn += linear("self_attn.q_a_proj", q_lora, hidden, "replicated")
        attn += norm("self_attn.q_a_layernorm", q_lora)
        attn += linear("self_attn.q_b_proj", heads * q_head, q_lora, "column")
    else:
        attn += linear("self_attn.q_proj", heads * q_head, hidden, "column")
    attn += linear("self_attn.kv_a_proj_with_mqa", kv_lora + rope_dim, hidden, "replicated")
    attn += norm("self_attn.kv_a_layernorm", kv_lora)
    attn += linear("self_attn.kv_b_proj", heads * (nope_dim + v_dim), kv_lora, "column")
    attn += linear("self_attn.o_proj", hidden, heads * v_dim, "row")
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)

    experts, top_k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    expert_intermediate = c.int("moe_intermediate_size")
    shared = c.int("n_shared_experts", default=0, minimum=0) * expert_intermediate
    dense_intermediate = c.int("intermediate_size")
    first_dense = c.int("first_k_dense_replace", default=0, minimum=0)
    freq = c.int("moe_layer_freq", default=1)
    # noaux_tc routing (V3) keeps a per-expert score-correction bias next to the router weight
    router_bias = c.str("topk_method") == "noaux_tc"
    attention = Attention("mla", latent_dim=kv_lora + rope_dim)

    def moe_layer() -> list[Tensor]:
        mlp = linear("mlp.gate", experts, hidden, "replicated", role="router")
        if router_bias:
            mlp += [Tensor("mlp.gate.e_score_correction_bias", (experts,), "router")]
        mlp += gated_mlp("mlp.experts", hidden, expert_intermediate, role="expert", count=experts)
        if shared:
            mlp += gated_mlp("mlp.shared_experts", hidden, shared)
        return mlp

    layers = []
    moe_indices = set()
    for i in range(num_layers):
        if i >= first_dense and i % freq == 0:
            moe_indices.add(i)
            layers.append(Layer(attention, tuple(attn + norms + moe_layer()), is_moe=True))
        else:
            layers.append(Layer(attention, tuple(attn + norms + gated_mlp("mlp", hidden, dense_intermediate))))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    # Multi-token-prediction modules ship in the checkpoint (each a MoE decoder layer plus its own
    # embedding, projection and head copy); engines load them only for speculative decoding.
    mtp: list[Tensor] = []
    for j in range(c.int("num_nextn_predict_layers", default=0, minimum=0)):
        p = f"mtp{j}"
        mtp += [Tensor(f"{p}.{t.name}", t.shape, t.role, t.split, t.count) for t in attn + norms + moe_layer()]
        mtp += norm(f"{p}.enorm", hidden) + norm(f"{p}.hnorm", hidden) + norm(f"{p}.shared_head.norm", hidden)
        mtp += linear(f"{p}.eh_proj", hidden, 2 * hidden, "replicated")
        mtp += [Tensor(f"{p}.embed_tokens.weight", (vocab, hidden), "embedding", "vocab"),
                Tensor(f"{p}.shared_head.head.weight", (vocab, hidden), "lm_head", "vocab")]
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied, unloaded=tuple(mtp),
        intermediate_size=dense_intermediate, moe=MoE(experts, top_k, expert_intermediate, shared),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
