"""Gemma 3n (gemma3n, text model gemma3n_text) as transformers builds it (models/gemma3n): a Gemma decoder with
AltUp (altup_num_inputs parallel streams, a router and prediction / correction coefficients per layer), a LAuReL
low-rank residual per layer, per-layer embeddings (hidden_size_per_layer_input), per-layer MLP widths, and the
last num_kv_shared_layers reusing an earlier layer's cache (no k/v weights); plus its USM conformer audio
encoder and timm's MobileNetV5 vision encoder, each with an embedder into the text width.
"""

from __future__ import annotations


from planner.errors import PlannerInputError
from planner.model.families.blocks import cache_layers, embedding_and_head, gated_mlp, layer_kinds, linear, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Tensor
from planner.model.families.gemma4 import kv_sharing


def _widths(c: Config, num_layers: int) -> list[int]:
    """intermediate_size: one width for every layer, or a list with one per layer (MatFormer slices)."""
    if isinstance(c.data.get("intermediate_size"), list):
        widths = c.int_list("intermediate_size") or []
        if len(widths) != num_layers:
            raise PlannerInputError(f"{c.where}: 'intermediate_size' lists {len(widths)} widths for {num_layers} layers")
        return widths
    return [c.int("intermediate_size")] * num_layers


def gemma3n(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, vocab, head_dim = c.int("num_attention_heads"), c.int("vocab_size"), c.int("head_dim")
    kv_heads = c.int("num_key_value_heads", default=heads)
    streams, laurel, ple = c.int("altup_num_inputs"), c.int("laurel_rank"), c.int("hidden_size_per_layer_input")
    kinds = layer_kinds(c, model_type, num_layers)
    sharing = kv_sharing(c, [kind for kind, _ in kinds])
    # Gemma3nTextAltUp, Gemma3nTextLaurelBlock and the per-layer-input gate of each decoder layer
    per_layer = ([Tensor("altup.correct_output_scale", (hidden,), "norm"),
                  Tensor("altup.correction_coefs.weight", (streams, streams), "norm"),
                  Tensor("altup.prediction_coefs.weight", (streams * streams, streams), "norm")]
                 + linear("altup.modality_router", streams, hidden, "replicated") + norm("altup.router_norm", hidden)
                 + linear("laurel.linear_left", laurel, hidden, "replicated")
                 + linear("laurel.linear_right", hidden, laurel, "replicated") + norm("laurel.post_laurel_norm", hidden)
                 + linear("per_layer_input_gate", ple, hidden, "replicated")
                 + linear("per_layer_projection", hidden, ple, "replicated") + norm("post_per_layer_input_norm", hidden))
    blocks: list[tuple[Attention | None, list[Tensor], bool]] = []
    for (kind, window), mode, width in zip(kinds, sharing, _widths(c, num_layers)):
        reuse = mode == "reuse"
        t = linear("self_attn.q_proj", heads * head_dim, hidden, "column") + norm("self_attn.q_norm", head_dim)
        if not reuse:  # a KV-shared layer reads another layer's keys and values: no k/v projections of its own
            t += (linear("self_attn.k_proj", kv_heads * head_dim, hidden, "kv")
                  + linear("self_attn.v_proj", kv_heads * head_dim, hidden, "kv") + norm("self_attn.k_norm", head_dim))
        t += linear("self_attn.o_proj", hidden, heads * head_dim, "row") + gated_mlp("mlp", hidden, width)
        t += (norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
              + norm("pre_feedforward_layernorm", hidden) + norm("post_feedforward_layernorm", hidden) + per_layer)
        blocks.append((None if reuse else Attention(kind, kv_heads, head_dim, head_dim, window), t, False))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    embedding += (Tensor("embed_tokens_per_layer.weight", (c.int("vocab_size_per_layer_input"), num_layers * ple),
                         "embedding", "vocab"),
                  *linear("per_layer_model_projection", num_layers * ple, hidden, "replicated"),
                  *norm("per_layer_projection_norm", ple))
    for j in range(1, streams):  # AltUp's extra streams: projected in after the embedding, out before the norm
        embedding += tuple(linear(f"altup_projections.{j - 1}", hidden, hidden, "replicated"))
        head = tuple(linear(f"altup_unembed_projections.{j - 1}", hidden, hidden, "replicated")) + head
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=cache_layers(blocks), embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=max(_widths(c, num_layers)), max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
