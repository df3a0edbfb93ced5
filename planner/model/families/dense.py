"""Dense decoders: one attention block and one MLP per layer, all layers alike."""

from __future__ import annotations

from planner.model.families.blocks import (attention_layouts, attention_tensors, decoder_shape, embedding_and_head,
                                           gated_mlp, linear, norm, plain_mlp, whole_qk_norms)
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Layer, Tensor


# Qwen2-VL's and Qwen2.5-VL's language models: Qwen2's decoder (a released config.json spells it at its top level,
# a transformers 5 one under text_config)
QWEN2_VL_TEXT = ("qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text")


def dense_decoder(c: Config, model_type: str, name: str) -> Architecture:
    """Llama, Mistral, Granite, Qwen2/3, Gemma 1/2/3, Phi-3/4, Cohere, GLM-4, Phi-2, Seed-OSS, OLMo 2/3, EXAONE 4,
    SmolLM3, ERNIE 4.5, Apertus, Arcee (AFM), Cohere 2 (Command A / R7B), StarCoder2, Jais 2, and Qwen2-VL / Qwen2.5-VL's
    and GLM-4.1V's language models. Ministral 3 (Ministral 3, Devstral 2) is Mistral's decoder: its
    Ministral3Attention only scales the queries, with no tensor of its own. Tensors as transformers 5.25 builds each
    (models/<model_type>/modeling_<model_type>.py)."""
    hidden, layers, heads, kv_heads, head_dim, vocab = decoder_shape(c)
    intermediate = c.int("intermediate_size")

    qkv_bias = o_bias = mlp_bias = norm_bias = head_bias = fused_qkv = fused_mlp = qk_norm = whole_qk_norm = False
    gated = True
    norms_per_layer = 2
    if model_type in ("llama", "granite", "smollm3", "arcee", "apertus"):
        qkv_bias = o_bias = c.bool("attention_bias", False)
        mlp_bias = c.bool("mlp_bias", False)
        gated = model_type not in ("arcee", "apertus")  # ArceeMLP (ReLU^2) and ApertusMLP (xIELU): up and down only
        qk_norm = model_type == "apertus"
    elif model_type == "seed_oss":  # SeedOssAttention: q/k/v biases by attention_bias, o_proj's by attention_out_bias
        qkv_bias, o_bias = c.bool("attention_bias", True), c.bool("attention_out_bias", False)
        mlp_bias = c.bool("mlp_bias", False)
    elif model_type in ("olmo2", "olmo3"):  # q_norm / k_norm over the whole projections; post-norms only
        qkv_bias = o_bias = c.bool("attention_bias", False)
        whole_qk_norm = True
    elif model_type == "exaone4":  # per-head q_norm / k_norm; post-norms only
        qk_norm = True
    elif model_type == "ernie4_5":
        qkv_bias = o_bias = mlp_bias = c.bool("use_bias", False)  # its lm_head has none (Ernie4_5ForCausalLM)
    elif model_type in ("qwen2", "mimo", *QWEN2_VL_TEXT):  # MiMo-7B: Qwen2 layers plus MTP layers
        qkv_bias = True  # Qwen2Attention: q/k/v projections always carry a bias, o_proj none
    elif model_type in ("qwen3", "qwen3_vl_text"):
        qkv_bias = o_bias = c.bool("attention_bias", False)
        qk_norm = True
    elif model_type in ("gemma2",):
        norms_per_layer = 4
    elif model_type in ("gemma3_text", "gemma3"):
        norms_per_layer, qk_norm = 4, True
    elif model_type == "phi3":
        fused_qkv = fused_mlp = True
    elif model_type in ("cohere", "cohere2"):
        norms_per_layer = 1  # parallel attention and MLP behind one input_layernorm
        qkv_bias = o_bias = c.bool("attention_bias", False)
        qk_norm = model_type == "cohere" and c.bool("use_qk_norm", False)  # Cohere2Attention has none
    elif model_type == "starcoder2":  # biased projections and LayerNorms, a plain GELU MLP (c_fc, c_proj)
        qkv_bias = o_bias = mlp_bias = norm_bias = c.bool("use_bias", True)
        gated = False
    elif model_type == "jais2":  # StarCoder2's layout with a ReLU^2 MLP, its biases by two flags
        qkv_bias = o_bias = c.bool("attention_bias", True)
        mlp_bias, norm_bias, gated = c.bool("mlp_bias", True), True, False
    elif model_type in ("glm4", "glm4v", "glm4v_text"):  # GLM-4.1V's language model is GLM-4's
        qkv_bias = c.bool("attention_bias", True)
        fused_mlp, norms_per_layer = True, 4  # plus post_self_attn_layernorm and post_mlp_layernorm

    if model_type == "phi":
        return _phi(c, model_type, name, hidden, layers, heads, kv_heads, head_dim, intermediate, vocab)

    layer_tensors = attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=qkv_bias, o_bias=o_bias,
                                       fused_qkv=fused_qkv, qk_norm=qk_norm)
    if whole_qk_norm:
        layer_tensors += whole_qk_norms(heads, kv_heads, head_dim)
    layer_tensors += (gated_mlp("mlp", hidden, intermediate, mlp_bias, fused_mlp) if gated
                      else plain_mlp("mlp", hidden, intermediate, mlp_bias))
    if model_type == "apertus":  # XIELUActivation: alpha_p, alpha_n and the persistent beta, eps, one value each
        layer_tensors += [Tensor(f"mlp.act_fn.{n}", (1,), "norm") for n in ("alpha_p", "alpha_n", "beta", "eps")]
    for i in range(norms_per_layer):
        layer_tensors += norm(f"norm{i}", hidden, norm_bias)
    if model_type == "cohere" and qk_norm:
        # Cohere's q/k LayerNorms are per head: [heads, head_dim] and [kv_heads, head_dim]
        layer_tensors = [t for t in layer_tensors if "q_norm" not in t.name and "k_norm" not in t.name]
        layer_tensors += [Tensor("self_attn.q_norm.weight", (heads, head_dim), "norm"),
                          Tensor("self_attn.k_norm.weight", (kv_heads, head_dim), "norm")]
    attention = attention_layouts(c, model_type, layers, kv_heads, head_dim)
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab, norm_bias=norm_bias, head_bias=head_bias)
    # MiMo's MTP layers (its modeling_mimo.py MiMoMTPLayers, model.mtp_layers.N): a Qwen2 decoder layer plus
    # token / hidden / final norms and an input projection over [embedding; hidden]; engines load them only
    # for speculative decoding
    mtp: list[Tensor] = []
    for j in range(c.int("num_nextn_predict_layers", default=0, minimum=0) if model_type == "mimo" else 0):
        p = f"mtp_layers.{j}"
        mtp += [Tensor(f"{p}.{t.name}", t.shape, t.role, t.split, t.count) for t in layer_tensors]
        mtp += norm(f"{p}.token_layernorm", hidden) + norm(f"{p}.hidden_layernorm", hidden)
        mtp += norm(f"{p}.final_layernorm", hidden) + linear(f"{p}.input_proj", hidden, 2 * hidden, "replicated")
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(Layer(a, tuple(layer_tensors)) for a in attention), embedding=embedding, head=head,
        tied_embeddings=tied, intermediate_size=intermediate, unloaded=tuple(mtp),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def _phi(c: Config, model_type: str, name: str, hidden: int, layers: int, heads: int, kv_heads: int,
         head_dim: int, intermediate: int, vocab: int) -> Architecture:
    """Phi-1/1.5/2: LayerNorms with bias, biased projections, parallel attention and MLP."""
    layer_tensors = attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=True, o_bias=True)
    layer_tensors = [Tensor(t.name.replace("o_proj", "dense"), t.shape, t.role, t.split) for t in layer_tensors]
    layer_tensors += linear("mlp.fc1", intermediate, hidden, "column", True)
    layer_tensors += linear("mlp.fc2", hidden, intermediate, "row", True)
    layer_tensors += norm("input_layernorm", hidden, bias=True)
    attention = attention_layouts(c, model_type, layers, kv_heads, head_dim)
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab, norm_bias=True, head_bias=True)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(Layer(a, tuple(layer_tensors)) for a in attention), embedding=embedding, head=head,
        tied_embeddings=tied, intermediate_size=intermediate,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
