"""TII Falcon-H1 (falcon_h1): every decoder layer runs a Mamba-2 mixer and GQA attention side by side on the same
normed input, then a gated MLP (transformers 5.25 models/falcon_h1, FalconH1DecoderLayer).

Each decoder layer keeps both caches, a recurrent state and a KV cache, as the engines lay them out: vLLM's
FalconH1ParallelHybrid holds a MambaMixer2 and an Attention, two layers of its KV-cache spec (models/falcon_h1.py
@ v0.34.0); planner's layers are cache layers, so a decoder layer is two of them, the Mamba-2 one (its mixer and the
shared input norm) then the attention one (attention, MLP and the pre-MLP norm).
"""

from __future__ import annotations

from planner.model.families.blocks import (attention_tensors, decoder_shape, embedding_and_head, gated_mlp,
                                           mamba2_mixer, mamba2_sizes, norm, recurrent_attention)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer


def falcon_h1(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    # FalconH1Mixer: the width mamba_d_ssm where the config gives one, else mamba_expand x hidden_size
    inner = c.int("mamba_d_ssm") if c.data.get("mamba_d_ssm") is not None else c.int("mamba_expand") * hidden
    sizes = mamba2_sizes(c, inner)
    mixer = mamba2_mixer(sizes, "mamba", hidden, conv_bias=c.bool("mamba_conv_bias", True),
                         proj_bias=c.bool("mamba_proj_bias", False), out_bias=c.bool("projectors_bias", False),
                         gated_norm=c.bool("mamba_rms_norm", False))
    attention_bias = c.bool("attention_bias", False)
    attention = attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=attention_bias, o_bias=attention_bias)
    mlp = gated_mlp("feed_forward", hidden, c.int("intermediate_size"), c.bool("mlp_bias", False))
    mamba_layer = Layer(recurrent_attention(sizes, "mamba"), tuple(mixer + norm("input_layernorm", hidden)))
    attention_layer = Layer(Attention("full", kv_heads, head_dim, head_dim),
                            tuple(attention + mlp + norm("pre_ff_layernorm", hidden)))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=(mamba_layer, attention_layer) * num_layers, embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=c.int("intermediate_size"), max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
