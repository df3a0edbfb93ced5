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
(num_nextn_predict_layers) is not built by transformers: it is counted apart, in `unloaded`.

Stored widths are those of DeepSeek's own inference code (deepseek-ai/DeepSeek-V4-Flash inference/model.py); with
them the count gives both checkpoints' model.safetensors.index.json total_size to the byte (tests/test_deepseek_v4.py)
and each of the Hub's per-dtype element counts of DeepSeek-V4-Pro: the attention sinks, compressor position biases, router correction bias and hyper-connection weights are
float32, the hash table tid2eid int64, the compressors' kv / gate projections and the indexer's weights_proj
bfloat16 beside the fp8 linear layers; with expert_dtype "fp4" the routed experts are fp4 (catalog precision
fp8-block-mxfp4-experts, which the checkpoint is then stored in).
"""

from __future__ import annotations

from dataclasses import replace

from planner.errors import PlannerInputError
from planner.model.families.blocks import embedding_and_head, linear, moe_block, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE, Tensor

# DeepseekV4Config: compress_ratios entries -> layer types, and the ratio each compressed type pools
LAYER_TYPE_OF_RATIO = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
RATIO_OF_LAYER_TYPE = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
# config expert_dtype -> the catalog precision the checkpoint is stored in (see the module docstring)
STORED_PRECISION = {"fp4": "fp8-block-mxfp4-experts"}
FP32_BITS, INT64_BITS = 32, 64


def _stored(tensors: list[Tensor], bits: int) -> list[Tensor]:
    return [replace(t, stored_bits=bits) for t in tensors]


def _bf16(tensors: list[Tensor]) -> list[Tensor]:
    """Linear layers the checkpoint keeps in bfloat16 beside its fp8 ones."""
    return [replace(t, kept_unquantized=True) for t in tensors]


def _layer_types(c: Config, num_layers: int) -> list[str]:
    """layer_types, else compress_ratios, else DeepseekV4Config's default (2 HCA layers, then CSA / HCA alternating);
    past the num_layers decoder layers, the MTP layers' types when the config lists them."""
    types = c.list("layer_types")
    if types is None and c.list("compress_ratios") is not None:
        ratios = c.int_list("compress_ratios") or []
        if any(r not in LAYER_TYPE_OF_RATIO for r in ratios):
            raise PlannerInputError(f"{c.where}: 'compress_ratios' entries must be 0, 4 or 128")
        types = [LAYER_TYPE_OF_RATIO[r] for r in ratios]
    if types is None:
        types = ["heavily_compressed_attention"] * min(num_layers, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(num_layers - 2)]
    if len(types) < num_layers or any(t not in RATIO_OF_LAYER_TYPE for t in types):
        raise PlannerInputError(f"{c.where}: 'compress_ratios' / 'layer_types' must give each of the {num_layers} "
                                f"layers one of {', '.join(RATIO_OF_LAYER_TYPE)}")
    return types


def _compressor(prefix: str, hidden: int, ratio: int, out: int, width: int) -> list[Tensor]:
    """A pooling compressor: kv and gate projections `width` wide, a per-slot position bias, a norm over `out`."""
    return (_stored([Tensor(f"{prefix}.position_bias", (ratio, width), "norm")], FP32_BITS)
            + _bf16(linear(f"{prefix}.kv_proj", width, hidden, "replicated")
                    + linear(f"{prefix}.gate_proj", width, hidden, "replicated")) + norm(f"{prefix}.kv_norm", out))


def _attention(c: Config, hidden: int, heads: int, head_dim: int, layer_type: str) -> list[Tensor]:
    q_lora, groups, o_rank = c.int("q_lora_rank"), c.int("o_groups"), c.int("o_lora_rank")
    if heads * head_dim % groups:
        raise PlannerInputError(f"{c.where}: 'o_groups' {groups} must divide num_attention_heads x head_dim")
    t = _stored([Tensor("self_attn.sinks", (heads,), "norm", "column")], FP32_BITS)
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
        t += _bf16(linear(f"{p}.indexer.scorer.weights_proj", index_heads, hidden, "replicated"))
    return t


def _hyper_connection(prefix: str, hc: int, hidden: int) -> list[Tensor]:
    """DeepseekV4HyperConnection: a projection of the hc streams to (2 + hc) x hc mixing weights, three scales."""
    mix = (2 + hc) * hc
    return _stored([Tensor(f"{prefix}.fn", (mix, hc * hidden), "norm"), Tensor(f"{prefix}.base", (mix,), "norm"),
                    Tensor(f"{prefix}.scale", (3,), "norm")], FP32_BITS)


def _hc_head(prefix: str, hc: int, hidden: int) -> list[Tensor]:
    """The hyper-connection mix of the hc streams into one before a final norm and the head."""
    return _stored([Tensor(f"{prefix}.hc_fn", (hc, hc * hidden), "norm"), Tensor(f"{prefix}.hc_base", (hc,), "norm"),
                    Tensor(f"{prefix}.hc_scale", (1,), "norm")], FP32_BITS)


def _block(c: Config, layer_type: str, hashed: bool) -> list[Tensor]:
    """One decoder block's tensors: attention, MoE with its shared expert, norms and hyper-connections."""
    hidden, heads, head_dim = c.int("hidden_size"), c.int("num_attention_heads"), c.int("head_dim")
    experts, top_k, intermediate = c.int("n_routed_experts"), c.int("num_experts_per_tok"), c.int("moe_intermediate_size")
    hc = c.int("hc_mult")
    mlp = moe_block("mlp", hidden, experts, intermediate, fused=True)
    # DeepseekV4MLP: the shared expert is moe_intermediate_size wide (config intermediate_size maps to it)
    shared = (linear("mlp.shared_experts.gate_proj", intermediate, hidden, "column")
              + linear("mlp.shared_experts.up_proj", intermediate, hidden, "column")
              + linear("mlp.shared_experts.down_proj", hidden, intermediate, "row"))
    if hashed:  # frozen token -> expert table (a buffer)
        gate = _stored([Tensor("mlp.gate.tid2eid", (c.int("vocab_size"), top_k), "router")], INT64_BITS)
    else:
        gate = _stored([Tensor("mlp.gate.e_score_correction_bias", (experts,), "router")], FP32_BITS)
    rest = (norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
            + _hyper_connection("attn_hc", hc, hidden) + _hyper_connection("ffn_hc", hc, hidden))
    return _attention(c, hidden, heads, head_dim, layer_type) + mlp + gate + shared + rest


def _mtp(c: Config, layer_types: list[str]) -> list[Tensor]:
    """The MTP layers (inference/model.py MTPBlock): a block plus e_proj / h_proj, three norms and an hc head; they
    share the model's embedding and head. Counted only when the config gives their layer types."""
    hidden = c.int("hidden_size")
    out: list[Tensor] = []
    for j, layer_type in enumerate(layer_types):
        p = f"mtp.{j}"
        out += [replace(t, name=f"{p}.{t.name}") for t in _block(c, layer_type, hashed=False)]
        out += linear(f"{p}.e_proj", hidden, hidden, "replicated") + linear(f"{p}.h_proj", hidden, hidden, "replicated")
        out += norm(f"{p}.enorm", hidden) + norm(f"{p}.hnorm", hidden) + norm(f"{p}.norm", hidden)
        out += _hc_head(p, c.int("hc_mult"), hidden)
    return out


def deepseek_v4(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, head_dim, vocab = c.int("num_attention_heads"), c.int("head_dim"), c.int("vocab_size")
    experts, top_k, intermediate = c.int("n_routed_experts"), c.int("num_experts_per_tok"), c.int("moe_intermediate_size")
    hash_layers = c.int("num_hash_layers", default=3, minimum=0)
    types = _layer_types(c, num_layers)
    layers = []
    for i, layer_type in enumerate(types[:num_layers]):
        ratio = RATIO_OF_LAYER_TYPE[layer_type]
        # the compressed entry: head_dim values, plus the indexer's pooled key on CSA layers, whose indexer picks the
        # index_topk entries a query attends to (HCA layers attend to every entry)
        sparse = layer_type == "compressed_sparse_attention"
        entry = head_dim + (c.int("index_head_dim") if sparse else 0)
        cache = Attention("sliding", 1, head_dim, 0, c.int("sliding_window"), compress_ratio=ratio,
                          compressed_dim=entry if ratio else 0, compressed_topk=c.int("index_topk") if sparse else 0,
                          compressed_index_heads=c.int("index_n_heads") if sparse else 0, values_are_keys=True)
        layers.append(Layer(cache, tuple(_block(c, layer_type, hashed=i < hash_layers)), is_moe=True))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    mtp_types = types[num_layers:num_layers + c.int("num_nextn_predict_layers", default=0, minimum=0)]
    quantized = isinstance(c.data.get("quantization_config"), dict)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=tuple(_hc_head("hc_head", c.int("hc_mult"), hidden)) + head,
        tied_embeddings=tied, unloaded=tuple(_mtp(c, mtp_types)),
        moe=MoE(experts, top_k, intermediate, intermediate),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
        stored_precision=STORED_PRECISION.get(c.str("expert_dtype") or "") if quantized else None,
    )
