"""MiniMax-M2.x (minimax_m2): GQA attention with q/k RMSNorms over all heads, every layer a sigmoid-routed MoE
with a per-expert score-correction bias, no shared expert (transformers models/minimax_m2).

The config announces MTP modules (use_mtp, num_mtp_modules) but the published checkpoints ship none: the
safetensors total equals the transformers count, so nothing is counted for them.
"""

from __future__ import annotations

from planner.model.families.blocks import (attention_layouts, attention_tensors, decoder_shape, embedding_and_head,
                                           moe_block, norm)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Layer, MoE, Tensor


def minimax_m2(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    experts, top_k = c.int("num_local_experts"), c.int("num_experts_per_tok")
    expert_intermediate = c.int("intermediate_size")
    attn = attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=False, o_bias=False)
    if c.bool("use_qk_norm", True):
        # MiniMaxM2Attention: one norm across all query heads, one across all key heads
        attn += norm("self_attn.q_norm", heads * head_dim) + norm("self_attn.k_norm", kv_heads * head_dim)
    mlp = moe_block("mlp", hidden, experts, expert_intermediate, fused=True)
    mlp += [Tensor("mlp.e_score_correction_bias", (experts,), "router")]
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
    layers = tuple(Layer(a, tuple(attn + norms + mlp), is_moe=True)
                   for a in attention_layouts(c, model_type, num_layers, kv_heads, head_dim))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=layers, embedding=embedding, head=head, tied_embeddings=tied, intermediate_size=0,
        moe=MoE(experts, top_k, expert_intermediate, routing="sigmoid"), max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
