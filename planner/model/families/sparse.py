"""Mixture-of-experts decoders with GQA attention: Mixtral, Qwen-MoE, gpt-oss, Llama 4 text, OLMoE, ERNIE 4.5 MoE,
Phi-3.5-MoE, Granite MoE, Cohere 2 MoE, HY-V3, EXAONE MoE, Solar Open and Arcee's AFMoE (sigmoid routing with a
score-correction bias and shared experts)."""

from __future__ import annotations

from dataclasses import replace

from planner.errors import PlannerInputError
from planner.model.families.blocks import (attention_layouts, attention_tensors, decoder_shape, embedding_and_head,
                                           gated_mlp, linear, moe_block, norm, whole_qk_norms)
from planner.model.families.config import Config
from planner.model.families.core import STATE_DTYPE_BITS, Architecture, Attention, Layer, MoE, Tensor


# MoE whose router is float32 with a score-correction bias, beside shared experts one MLP of moe_intermediate_size x
# their count: the key of that count, its default, the bias tensor's name (transformers 5.25; all but ERNIE route by
# sigmoid scores)
BIASED_ROUTERS = {
    "ernie4_5_moe": ("moe_num_shared_experts", 0, "mlp.gate.moe_statics.e_score_correction_bias"),
    "hy_v3": ("num_shared_experts", 1, "mlp.e_score_correction_bias"),
    "exaone_moe": ("num_shared_experts", 1, "mlp.gate.e_score_correction_bias"),
    "solar_open": ("n_shared_experts", 1, "mlp.gate.e_score_correction_bias"),
    "afmoe": ("num_shared_experts", 2, "mlp.expert_bias"),
}


def sparse_decoder(c: Config, model_type: str, name: str) -> Architecture:
    """The families of the module docstring, Qwen1.5/2-MoE with its shared expert, the BIASED_ROUTERS ones with theirs."""
    hidden, num_layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    biased = BIASED_ROUTERS.get(model_type)
    ernie, afmoe = model_type == "ernie4_5_moe", model_type == "afmoe"
    cohere = model_type == "cohere2_moe"  # Command A's MoE: a parallel block behind one norm, routed by its config
    biased_sigmoid = biased is not None and not ernie
    sigmoid = biased_sigmoid or (cohere and c.str("expert_selection_fn") == "sigmoid")
    if ernie:
        experts, top_k = c.int("moe_num_experts"), c.int("moe_k")
    elif model_type == "solar_open":  # DeepSeek's key names
        experts, top_k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    else:
        experts = c.int("num_local_experts") if "num_local_experts" in c else c.int("num_experts")
        top_k = c.int("num_experts_per_tok")
    qkv_bias = o_bias = qk_norm = fused = expert_bias = router_bias = mlp_bias = head_bias = norm_bias = False
    if ernie:
        qkv_bias = o_bias = mlp_bias = head_bias = c.bool("use_bias", False)
    elif biased_sigmoid:  # per-head q/k norms but on Solar Open
        qkv_bias = o_bias = c.bool("attention_bias", False)
        mlp_bias, qk_norm = c.bool("mlp_bias", False), model_type != "solar_open"
    elif model_type in ("olmoe", "granitemoe", "granitemoeshared", "cohere2_moe"):
        qkv_bias = o_bias = c.bool("attention_bias", False)
    elif model_type == "phimoe":  # LayerNorms with biases; PhimoeForCausalLM's lm_head bias by lm_head_bias
        qkv_bias = o_bias = c.bool("attention_bias", False)
        norm_bias, head_bias = True, c.bool("lm_head_bias", False)
    elif model_type == "qwen2_moe":
        qkv_bias = True
    elif model_type in ("qwen3_moe", "qwen3_vl_moe_text"):
        qkv_bias = o_bias = c.bool("attention_bias", False)
        qk_norm = True
    elif model_type == "gpt_oss":
        qkv_bias = o_bias = True
        fused = expert_bias = router_bias = True
    elif model_type == "llama4_text":
        qkv_bias = o_bias = c.bool("attention_bias", False)
        fused = True

    if model_type == "llama4_text":
        expert_intermediate = c.int("intermediate_size")
        dense_intermediate = c.int("intermediate_size_mlp")
        shared_intermediate = expert_intermediate  # Llama4TextMoe.shared_expert uses intermediate_size
    elif model_type in ("qwen2_moe", "qwen3_moe", "qwen3_vl_moe_text"):
        expert_intermediate = c.int("moe_intermediate_size")
        dense_intermediate = c.int("intermediate_size", default=expert_intermediate)
        shared_intermediate = c.int("shared_expert_intermediate_size", default=0, minimum=0)
    elif cohere:  # Cohere2MoeMLP: dense layers prefix_dense_intermediate_size wide, shared experts one MLP
        expert_intermediate = c.int("intermediate_size")
        dense_intermediate = c.int("prefix_dense_intermediate_size") if c.data.get(
            "prefix_dense_intermediate_size") is not None else expert_intermediate
        shared_intermediate = expert_intermediate * c.int("num_shared_experts", default=0, minimum=0)
    elif model_type == "granitemoeshared":  # GraniteMoeSharedMLP: one gated MLP of shared_intermediate_size
        expert_intermediate = dense_intermediate = c.int("intermediate_size")
        shared_intermediate = c.int("shared_intermediate_size", default=0, minimum=0)
    elif biased is not None:
        expert_intermediate = c.int("moe_intermediate_size")
        dense_intermediate = c.int("intermediate_size", default=expert_intermediate)
        count_key, count_default, _ = biased
        shared_intermediate = expert_intermediate * c.int(count_key, default=count_default, minimum=0)
    else:
        expert_intermediate = dense_intermediate = c.int("intermediate_size")
        shared_intermediate = 0

    moe_layers = _moe_layer_indices(c, model_type, num_layers)
    attention = attention_layouts(c, model_type, num_layers, kv_heads, head_dim)
    if model_type == "llama4_text" and c.list("layer_types") is None and "attention_chunk_size" in c:
        # Llama 4: rope layers use chunked local attention, every no_rope_layer_interval-th is global NoPE
        interval = c.int("no_rope_layer_interval", default=4)
        rope = c.int_list("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
        if len(rope) < num_layers:
            raise PlannerInputError(f"{c.where}: 'no_rope_layers' has {len(rope)} entries for {num_layers} layers")
        chunk = c.int("attention_chunk_size")
        attention = [Attention("sliding", kv_heads, head_dim, head_dim, chunk) if rope[i] else a
                     for i, a in enumerate(attention)]

    attn = attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=qkv_bias, o_bias=o_bias, qk_norm=qk_norm)
    if model_type == "olmoe":
        attn += whole_qk_norms(heads, kv_heads, head_dim)
    if afmoe:  # AfmoeAttention's sigmoid output gate, one value per query channel
        attn += linear("self_attn.gate_proj", heads * head_dim, hidden, "column")
    if model_type == "gpt_oss":
        attn += [Tensor("self_attn.sinks", (heads,), "norm", "column")]
    norms = norm("input_layernorm", hidden, norm_bias)
    if not cohere:
        norms += norm("post_attention_layernorm", hidden, norm_bias)
    if afmoe:  # AfmoeDecoderLayer: the MLP between its own pre- and post-norms
        norms += norm("pre_mlp_layernorm", hidden) + norm("post_mlp_layernorm", hidden)
    layers = []
    for i in range(num_layers):
        if i in moe_layers:
            mlp = moe_block("mlp", hidden, experts, expert_intermediate, router_bias=router_bias,
                             expert_bias=expert_bias, fused=fused)
            if biased is not None:  # the router in float32 with its score-correction bias, as vLLM loads them too
                # (models/ernie45_moe.py, hy_v3.py, afmoe.py @ v0.34.0: params_dtype float32; transformers
                # _keep_in_fp32_modules_strict for the others)
                fp32 = STATE_DTYPE_BITS["float32"]
                mlp = [replace(t, stored_bits=fp32) if t.role == "router" else t for t in mlp]
                mlp += [Tensor(biased[2], (1, experts) if ernie else (experts,), "router", stored_bits=fp32)]
            if shared_intermediate:
                mlp += gated_mlp("mlp.shared_expert", hidden, shared_intermediate, mlp_bias,
                                 fused=fused and model_type != "llama4_text")
                if model_type == "qwen2_moe":
                    mlp += [Tensor("mlp.shared_expert_gate.weight", (1, hidden), "router")]
        else:
            mlp = gated_mlp("mlp", hidden, dense_intermediate, mlp_bias)
        layers.append(Layer(attention[i], tuple(attn + norms + mlp), is_moe=i in moe_layers))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab, norm_bias=norm_bias, head_bias=head_bias)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=dense_intermediate,
        moe=MoE(experts, top_k, expert_intermediate, shared_intermediate, routing="sigmoid" if sigmoid else "softmax"),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def _moe_layer_indices(c: Config, model_type: str, num_layers: int) -> set[int]:
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_vl_moe_text"):
        # transformers Qwen2MoeDecoderLayer: sparse unless listed in mlp_only_layers, every decoder_sparse_step-th
        step = c.int("decoder_sparse_step", default=1)
        dense = set(c.int_list("mlp_only_layers") or [])
        return {i for i in range(num_layers) if i not in dense and (i + 1) % step == 0}
    if model_type in ("hy_v3", "exaone_moe", "solar_open", "cohere2_moe"):
        # HYV3Config / ExaoneMoeConfig mlp_layer_types, by default first_k_dense_replace dense layers (HY-V3: one;
        # Solar Open: none), then sparse ones
        first = c.int("first_k_dense_replace", default=0 if model_type in ("solar_open", "cohere2_moe") else 1,
                      minimum=0)
        kinds = c.list("mlp_layer_types") or ["dense" if i < first else "sparse" for i in range(num_layers)]
        if len(kinds) != num_layers or not all(kind in ("dense", "sparse") for kind in kinds):
            raise PlannerInputError(f"{c.where}: 'mlp_layer_types' must list 'dense' or 'sparse' for each of the "
                                    f"{num_layers} layers")
        return {i for i, kind in enumerate(kinds) if kind == "sparse"}
    if model_type == "afmoe":  # AfmoeDecoderLayer: MoE from num_dense_layers on
        return set(range(c.int("num_dense_layers", default=1, minimum=0), num_layers))
    if model_type == "ernie4_5_moe":
        # Ernie4_5_MoeDecoderLayer: every moe_layer_interval-th layer from moe_layer_start_index to
        # moe_layer_end_index (-1: the last)
        step = c.int("moe_layer_interval", default=1)
        start = c.int("moe_layer_start_index", default=1, minimum=0)
        end = c.data.get("moe_layer_end_index", -1)
        end = num_layers - 1 if end == -1 else c.int("moe_layer_end_index", minimum=0)
        return {i for i in range(num_layers) if (i + 1) % step == 0 and start <= i <= end}
    if model_type == "llama4_text":
        if c.int_list("moe_layers") is not None:
            return set(c.int_list("moe_layers") or [])
        step = c.int("interleave_moe_layer_step", default=1)
        return set(range(step - 1, num_layers, step))
    return set(range(num_layers))
