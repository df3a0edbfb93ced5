"""GLM-4.5 / 4.6 / 4.7 (glm4_moe), GLM-4.5V / 4.6V's language model (glm4v_moe_text) and Sarvam-MoE / Param-2 MoE (their
config classes are GLM-4-MoE's), the same decoder: GQA attention with biased q/k/v and optional per-head q/k norms, dense first
layers, then DeepSeek-style MoE (sigmoid router with score-correction bias, shared expert); MTP layers in
the DeepSeek checkpoint format (transformers models/glm4_moe; vLLM glm4_moe_mtp.py)."""

from __future__ import annotations

from planner.model.families.blocks import (attention_layouts, attention_tensors, decoder_shape, embedding_and_head,
                                           gated_mlp, norm)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Layer
from planner.model.families.deepseek import mtp_modules, routed_experts


def glm4_moe(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    attn = attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=c.bool("attention_bias", False),
                             o_bias=False, qk_norm=c.bool("use_qk_norm", False))
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
    # Glm4MoeTopkRouter always keeps e_score_correction_bias
    moe, moe_mlp = routed_experts(c, hidden, router_bias=True)
    dense_intermediate = c.int("intermediate_size")
    dense_mlp = gated_mlp("mlp", hidden, dense_intermediate)
    first_dense = c.int("first_k_dense_replace", default=1, minimum=0)
    attention = attention_layouts(c, model_type, num_layers, kv_heads, head_dim)
    layers = tuple(Layer(a, tuple(attn + norms + (moe_mlp if i >= first_dense else dense_mlp)), is_moe=i >= first_dense)
                   for i, a in enumerate(attention))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=layers, embedding=embedding, head=head, tied_embeddings=tied,
        unloaded=tuple(mtp_modules(c, hidden, vocab, attn + norms + moe_mlp)),
        intermediate_size=dense_intermediate, moe=moe, max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
