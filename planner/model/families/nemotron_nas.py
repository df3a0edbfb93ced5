"""Llama-3.x-Nemotron Super / Ultra (nemotron-nas, DeciLM): Llama layers reshaped by neural architecture search,
one block_configs entry per layer. An attention may be absent (no_op) or a single linear (replace_with_linear),
its KV heads are num_attention_heads / n_heads_in_group; each FFN has its own width from ffn_mult
(2 * ffn_mult * hidden / 3 rounded up to 256) or is absent / a linear. Counted after the checkpoint's own
modeling_decilm.py (nvidia/Llama-3_3-Nemotron-Super-49B-v1), as vLLM's nemotron_nas.py does; transformers has
no class for it. Attention-less blocks join the layer before them (blocks.cache_layers).
"""

from __future__ import annotations

from math import ceil

from planner.errors import PlannerInputError
from planner.model.families.blocks import (attention_tensors, cache_layers, embedding_and_head, gated_mlp,
                                           head_dim_from, linear, norm)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Tensor

FFN_ROUNDING = 256  # modeling_decilm._find_multiple(intermediate_size, 256)


def _part(block: object, key: str, where: str) -> Config:
    part = block.get(key) if isinstance(block, dict) else None
    if not isinstance(part, dict):
        raise PlannerInputError(f"{where}: each block_configs entry needs an {key!r} object")
    return Config(part, f"{where} block_configs {key}")


def nemotron_nas(c: Config, model_type: str, name: str) -> Architecture:
    hidden, vocab = c.int("hidden_size"), c.int("vocab_size")
    heads = c.int("num_attention_heads")
    head_dim = head_dim_from(c, hidden, heads)
    block_configs = c.list("block_configs")
    if not block_configs or len(block_configs) != c.int("num_hidden_layers"):
        raise PlannerInputError(f"{c.where}: 'block_configs' must hold one entry per layer (num_hidden_layers)")
    blocks: list[tuple[Attention | None, list[Tensor], bool]] = []
    for block in block_configs:
        attn, ffn = _part(block, "attention", c.where), _part(block, "ffn", c.where)
        attention: Attention | None = None
        tensors: list[Tensor] = []
        if attn.bool("replace_with_linear", False):
            tensors += norm("input_layernorm", hidden) + linear("self_attn.linear_attn", hidden, hidden, "column")
        elif not attn.bool("no_op", False):
            kv_heads = heads // attn.int("n_heads_in_group")
            tensors += norm("input_layernorm", hidden) + attention_tensors(
                c, hidden, heads, kv_heads, head_dim, qkv_bias=c.bool("attention_bias", False),
                o_bias=c.bool("attention_bias", False))
            attention = Attention("full", kv_heads, head_dim, head_dim)
        if ffn.bool("replace_with_linear", False):
            tensors += norm("post_attention_layernorm", hidden) + linear("mlp.linear_mlp", hidden, hidden, "column")
        elif not ffn.bool("no_op", False):
            mult = ffn.data.get("ffn_mult")
            if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult < 1e3:
                raise PlannerInputError(f"{c.where}: block_configs ffn 'ffn_mult' must be a positive number, got {mult!r}")
            width = ceil(int(2 * mult * hidden / 3) / FFN_ROUNDING) * FFN_ROUNDING
            tensors += norm("post_attention_layernorm", hidden) + gated_mlp("mlp", hidden, width, c.bool("mlp_bias", False))
        blocks.append((attention, tensors, False))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=cache_layers(blocks), embedding=embedding, head=head, tied_embeddings=tied,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
