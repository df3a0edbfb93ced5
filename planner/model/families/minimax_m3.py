"""MiniMax-M3 (minimax_m3; minimax_m3_vl with its vision tower): GQA attention with per-head q/k RMSNorms on every
layer, and on the "sparse" layers MiniMax Sparse Attention's lightning indexer, which scores key blocks with its
own single key per token; dense first layers, then sigmoid-routed MoE with one shared expert (transformers
models/minimax_m3_vl, MiniMaxM3VLTextModel; transformers 5.24 registers no text-only minimax_m3 class, and the
text checkpoint's decoder is the one the VL checkpoint nests under text_config).

The indexer's key joins the layer's cache: transformers' MiniMaxM3VLSparseCacheLayer.update_index keeps one
index_head_dim key per token beside K and V, in the same dtype. The config's MTP modules (num_mtp_modules) are not
built by transformers and are not counted.
"""

from __future__ import annotations

from typing import Any

from planner.errors import PlannerInputError
from planner.model.families.blocks import (decoder_shape, embedding_and_head, gated_mlp, linear, moe_block, norm)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE, Tensor
from planner.model.families.vision import as_vision, vit_layer

SPARSE_LAYER = "minimax_m3_sparse"


def _per_layer(c: Config, num_layers: int, types_key: str, flags: list[Any] | None, on: str, off: str,
               default: str) -> list[str]:
    """Per-layer types from `types_key`, else from a 0/1 flag list (MiniMaxM3VLTextConfig.__post_init__)."""
    types = c.list(types_key)
    if types is None and flags is not None:
        types = [on if flag else off for flag in flags]
    types = types if types is not None else [default] * num_layers
    if len(types) != num_layers or any(t not in (on, off) for t in types):
        raise PlannerInputError(f"{c.where}: {types_key!r} (or its 0/1 list) must give one of {on}, {off} for each "
                                f"of the {num_layers} layers")
    return types


def _sparse_config(c: Config) -> Config:
    data = c.data.get("sparse_attention_config") or {}
    if not isinstance(data, dict):
        raise PlannerInputError(f"{c.where}: 'sparse_attention_config' must be an object")
    return Config(data, f"{c.where} sparse_attention_config")


def minimax_m3(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    sparse = _sparse_config(c)
    attention_types = _per_layer(c, num_layers, "layer_types", sparse.list("sparse_attention_freq"), SPARSE_LAYER,
                                 "full_attention", "full_attention")
    mlp_types = _per_layer(c, num_layers, "mlp_layer_types", c.list("moe_layer_freq"), "sparse", "dense", "sparse")
    index_heads = c.int("index_n_heads", default=sparse.int("sparse_num_index_heads", default=4))
    index_dim = c.int("index_head_dim", default=sparse.int("sparse_index_dim", default=128))
    # a sparse layer's query attends to its top-k key blocks, its local block forced in among them
    # (MiniMaxM3VLConfig index_topk_blocks / index_block_size, 16 and 128 by default)
    attended = (c.int("index_topk_blocks", default=sparse.int("sparse_topk_blocks", default=16))
                * c.int("index_block_size", default=sparse.int("sparse_block_size", default=128)))
    experts, expert_intermediate = c.int("num_local_experts", default=128), c.int("intermediate_size")
    shared = c.int("shared_intermediate_size", default=3072)
    dense_intermediate = c.int("dense_intermediate_size", default=12288)
    moe = MoE(experts, c.int("num_experts_per_tok", default=4), expert_intermediate, shared)
    moe_mlp = moe_block("mlp", hidden, experts, expert_intermediate, fused=True)
    moe_mlp += [Tensor("mlp.gate.e_score_correction_bias", (experts,), "router")]
    moe_mlp += gated_mlp("mlp.shared_experts", hidden, shared, fused=True)
    dense_mlp = gated_mlp("mlp", hidden, dense_intermediate, fused=True)
    # MiniMaxM3VLAttention builds the per-head q/k norms whatever use_qk_norm says
    attn = (linear("self_attn.q_proj", heads * head_dim, hidden, "column")
            + linear("self_attn.k_proj", kv_heads * head_dim, hidden, "kv")
            + linear("self_attn.v_proj", kv_heads * head_dim, hidden, "kv")
            + linear("self_attn.o_proj", hidden, heads * head_dim, "row")
            + norm("self_attn.q_norm", head_dim) + norm("self_attn.k_norm", head_dim))
    indexer = (linear("self_attn.indexer.q_proj", index_heads * index_dim, hidden, "replicated")
               + linear("self_attn.indexer.k_proj", index_dim, hidden, "replicated")
               + norm("self_attn.indexer.q_norm", index_dim) + norm("self_attn.indexer.k_norm", index_dim))
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
    layers = []
    for attention_type, mlp_type in zip(attention_types, mlp_types):
        indexed = attention_type == SPARSE_LAYER
        cache = Attention("full", kv_heads, head_dim, head_dim, index_key_dim=index_dim if indexed else 0,
                          index_topk=attended if indexed else 0, indexer_heads=index_heads if indexed else 0)
        tensors = attn + (indexer if indexed else []) + norms + (moe_mlp if mlp_type == "sparse" else dense_mlp)
        layers.append(Layer(cache, tuple(tensors), is_moe=mlp_type == "sparse"))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied, intermediate_size=dense_intermediate,
        moe=moe, max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def minimax_m3_vision(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """MiniMaxM3VLVisionModel (a 3-D patch conv without bias, a pre-LayerNorm, CLIP-style biased blocks, no final
    norm) and MiniMaxM3VLMultiModalProjector: two biased linears from the ViT width, two more over the 2x2-merged
    text-width patches. temporal_patch_size and spatial_merge_size default to 2 (MiniMaxM3VLVisionConfig)."""
    hidden, inter, patch = v.int("hidden_size"), v.int("intermediate_size"), v.int("patch_size")
    temporal, channels = v.int("temporal_patch_size", default=2), v.int("num_channels", default=3)
    tower = [Tensor("embeddings.proj.weight", (hidden, channels, temporal, patch, patch), "vision")]
    tower += norm("pre_layrnorm", hidden, bias=True)
    for i in range(v.int("num_hidden_layers")):
        tower += vit_layer(f"layers.{i}", hidden, inter)
    projector_hidden = outer.int("projector_hidden_size")
    merged = text_hidden * v.int("spatial_merge_size", default=2) ** 2
    projector = (linear("linear_1", projector_hidden, hidden, "column", True)
                 + linear("linear_2", text_hidden, projector_hidden, "row", True)
                 + linear("merge_linear_1", projector_hidden, merged, "column", True)
                 + linear("merge_linear_2", text_hidden, projector_hidden, "row", True))
    return as_vision(tower) + as_vision(projector, "projector")
