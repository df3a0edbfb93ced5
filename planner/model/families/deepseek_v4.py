"""DeepSeek-V4 (deepseek_v4), as transformers 5.24 builds it (models/deepseek_v4, DeepseekV4ForCausalLM).

Every layer attends over a sliding window of one shared key=value head (head_dim wide) plus, per its
compress ratio (config compress_ratios, or layer_types), a compressed history: "compressed sparse attention"
layers (ratio 4) pool every 4 tokens into one head_dim entry and run a Lightning Indexer over its own pooled
index_head_dim keys; "heavily compressed attention" layers (ratio 128) pool every 128 tokens; ratio 0 layers
keep the window only. Queries come through a LoRA (q_a / q_b), outputs through a grouped projection (o_a, one
block per o_group) then o_b; each head has an attention sink. The residual is hc_mult parallel streams mixed by
manifold-constrained hyper-connections (attn_hc / ffn_hc per layer, hc_head before the final norm). Every MLP is
a MoE with one shared expert; the first num_hash_layers route by a frozen token -> expert table (tid2eid).

The cache is what DeepseekV4HCACache / DeepseekV4CSACache keep: the window of keys (values are the same tensor)
and the compressed entries, one per compress_ratio tokens. The MTP layer the checkpoint ships
(num_nextn_predict_layers) is not built by transformers and is not counted.
"""

from __future__ import annotations

from planner.errors import PlannerInputError
from planner.model.families.blocks import embedding_and_head, linear, moe_block, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE, Tensor
from planner.model.families.registry import family

# DeepseekV4Config: compress_ratios entries -> layer types, and the ratio each compressed type pools
LAYER_TYPE_OF_RATIO = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
RATIO_OF_LAYER_TYPE = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}


def _layer_types(c: Config, num_layers: int) -> list[str]:
    """layer_types, else compress_ratios, else DeepseekV4Config's default (2 HCA layers, then CSA / HCA alternating)."""
    types = c.list("layer_types")
    if types is None and c.list("compress_ratios") is not None:
        ratios = c.int_list("compress_ratios") or []
        if any(r not in LAYER_TYPE_OF_RATIO for r in ratios):
            raise PlannerInputError(f"{c.where}: 'compress_ratios' entries must be 0, 4 or 128")
        types = [LAYER_TYPE_OF_RATIO[r] for r in ratios]
    if types is None:
        types = ["heavily_compressed_attention"] * min(num_layers, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(num_layers - 2)]
    types = types[:num_layers]  # DeepseekV4Config keeps the first num_hidden_layers (the rest are the MTP layer's)
    if len(types) != num_layers or any(t not in RATIO_OF_LAYER_TYPE for t in types):
        raise PlannerInputError(f"{c.where}: 'compress_ratios' / 'layer_types' must give each of the {num_layers} "
                                f"layers one of {', '.join(RATIO_OF_LAYER_TYPE)}")
    return types


def _compressor(prefix: str, hidden: int, ratio: int, out: int, width: int) -> list[Tensor]:
    """A pooling compressor: kv and gate projections `width` wide, a per-slot position bias, a norm over `out`."""
    return ([Tensor(f"{prefix}.position_bias", (ratio, width), "norm")]
            + linear(f"{prefix}.kv_proj", width, hidden, "replicated")
            + linear(f"{prefix}.gate_proj", width, hidden, "replicated") + norm(f"{prefix}.kv_norm", out))


def _attention(c: Config, hidden: int, heads: int, head_dim: int, layer_type: str) -> list[Tensor]:
    q_lora, groups, o_rank = c.int("q_lora_rank"), c.int("o_groups"), c.int("o_lora_rank")
    if heads * head_dim % groups:
        raise PlannerInputError(f"{c.where}: 'o_groups' {groups} must divide num_attention_heads x head_dim")
    t = [Tensor("self_attn.sinks", (heads,), "norm", "column")]
    t += linear("self_attn.q_a_proj", q_lora, hidden, "replicated") + norm("self_attn.q_a_norm", q_lora)
    t += linear("self_attn.q_b_proj", heads * head_dim, q_lora, "column")
    t += linear("self_attn.kv_proj", head_dim, hidden, "replicated") + norm("self_attn.kv_norm", head_dim)
    # DeepseekV4GroupedLinear: one (o_lora_rank x heads*head_dim/o_groups) block per group, groups split over ranks
    t += linear("self_attn.o_a_proj", groups * o_rank, heads * head_dim // groups, "column")
    t += linear("self_attn.o_b_proj", hidden, groups * o_rank, "row")
    ratio = RATIO_OF_LAYER_TYPE[layer_type]
    if layer_type == "heavily_compressed_attention":  # DeepseekV4HCACompressor: one head_dim series
        t += _compressor("self_attn.compressor", hidden, ratio, head_dim, head_dim)
    elif layer_type == "compressed_sparse_attention":  # DeepseekV4CSACompressor: two overlapping series + indexer
        index_heads, index_dim = c.int("index_n_heads"), c.int("index_head_dim")
        p = "self_attn.compressor"
        t += _compressor(p, hidden, ratio, head_dim, 2 * head_dim)
        t += _compressor(f"{p}.indexer", hidden, ratio, index_dim, 2 * index_dim)
        t += linear(f"{p}.indexer.q_b_proj", index_heads * index_dim, q_lora, "replicated")
        t += linear(f"{p}.indexer.scorer.weights_proj", index_heads, hidden, "replicated")
    return t


def _hyper_connection(prefix: str, hc: int, hidden: int) -> list[Tensor]:
    """DeepseekV4HyperConnection: a projection of the hc streams to (2 + hc) x hc mixing weights, three scales."""
    mix = (2 + hc) * hc
    return [Tensor(f"{prefix}.fn", (mix, hc * hidden), "norm"), Tensor(f"{prefix}.base", (mix,), "norm"),
            Tensor(f"{prefix}.scale", (3,), "norm")]


@family("deepseek_v4")
def deepseek_v4(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, head_dim, vocab = c.int("num_attention_heads"), c.int("head_dim"), c.int("vocab_size")
    experts, top_k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    expert_intermediate, hc = c.int("moe_intermediate_size"), c.int("hc_mult")
    hash_layers = c.int("num_hash_layers", default=3, minimum=0)
    mlp = moe_block("mlp", hidden, experts, expert_intermediate, fused=True)
    # DeepseekV4MLP: the shared expert is moe_intermediate_size wide (config intermediate_size maps to it)
    shared = (linear("mlp.shared_experts.gate_proj", expert_intermediate, hidden, "column")
              + linear("mlp.shared_experts.up_proj", expert_intermediate, hidden, "column")
              + linear("mlp.shared_experts.down_proj", hidden, expert_intermediate, "row"))
    hashed = [Tensor("mlp.gate.tid2eid", (vocab, top_k), "router")]  # frozen token -> expert table (a buffer)
    scored = [Tensor("mlp.gate.e_score_correction_bias", (experts,), "router")]
    rest = (norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
            + _hyper_connection("attn_hc", hc, hidden) + _hyper_connection("ffn_hc", hc, hidden))
    layers = []
    for i, layer_type in enumerate(_layer_types(c, num_layers)):
        ratio = RATIO_OF_LAYER_TYPE[layer_type]
        # the compressed entry: head_dim values, plus the indexer's pooled key on CSA layers
        entry = head_dim + (c.int("index_head_dim") if layer_type == "compressed_sparse_attention" else 0)
        cache = Attention("sliding", 1, head_dim, 0, c.int("sliding_window"), compress_ratio=ratio,
                          compressed_dim=entry if ratio else 0)
        tensors = (_attention(c, hidden, heads, head_dim, layer_type) + mlp + (hashed if i < hash_layers else scored)
                   + shared + rest)
        layers.append(Layer(cache, tuple(tensors), is_moe=True))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    hc_head = [Tensor("hc_head.hc_fn", (hc, hc * hidden), "norm"), Tensor("hc_head.hc_base", (hc,), "norm"),
               Tensor("hc_head.hc_scale", (1,), "norm")]
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=tuple(hc_head) + head, tied_embeddings=tied,
        moe=MoE(experts, top_k, expert_intermediate, expert_intermediate),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
