"""Multi-head latent attention (MLA) MoE decoders: DeepSeek V2/V3/V3.2, Kimi K2, GLM-4.7-Flash and GLM-5.

DeepSeek V3.2 and GLM-5 (glm_moe_dsa) add DeepSeek Sparse Attention: a lightweight indexer per layer
(transformers DeepseekV32Indexer / GlmMoeDsaIndexer) picks the top-k tokens each query attends to and
keeps its own key per token, which joins the layer's cache.
"""

from __future__ import annotations

from planner.errors import PlannerInputError
from planner.model.families.blocks import embedding_and_head, gated_mlp, linear, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE, Tensor

SPARSE_ATTENTION = {"deepseek_v32", "glm_moe_dsa"}
GLM_ROUTERS = {"glm4_moe_lite", "glm_moe_dsa"}


def mla_attention(c: Config, hidden: int, heads: int) -> list[Tensor]:
    q_lora = c.opt_int("q_lora_rank")
    kv_lora, rope_dim = c.int("kv_lora_rank"), c.int("qk_rope_head_dim")
    nope_dim, v_dim = c.int("qk_nope_head_dim"), c.int("v_head_dim")
    q_head = nope_dim + rope_dim
    attn: list[Tensor] = []
    if q_lora:
        attn += linear("self_attn.q_a_proj", q_lora, hidden, "replicated")
        attn += norm("self_attn.q_a_layernorm", q_lora)
        attn += linear("self_attn.q_b_proj", heads * q_head, q_lora, "column")
    else:
        attn += linear("self_attn.q_proj", heads * q_head, hidden, "column")
    attn += linear("self_attn.kv_a_proj_with_mqa", kv_lora + rope_dim, hidden, "replicated")
    attn += norm("self_attn.kv_a_layernorm", kv_lora)
    attn += linear("self_attn.kv_b_proj", heads * (nope_dim + v_dim), kv_lora, "column")
    return attn + linear("self_attn.o_proj", hidden, heads * v_dim, "row")


def mla_cache(c: Config, **indexer: int) -> Attention:
    """What an MLA layer caches (the latent and its rotary key, shared by every head) and the per-head key and value
    the latent is up-projected to where the engines run its prefill as multi-head attention."""
    rope_dim = c.int("qk_rope_head_dim")
    return Attention("mla", latent_dim=c.int("kv_lora_rank") + rope_dim, latent_value_dim=c.int("kv_lora_rank"),
                     k_head_dim=c.int("qk_nope_head_dim") + rope_dim, v_head_dim=c.int("v_head_dim"), **indexer)


def dsa_indexer(c: Config, hidden: int) -> list[Tensor]:
    """Queries from the q LoRA latent, one shared key per token (LayerNorm'd), per-head weights."""
    heads, head_dim = c.int("index_n_heads"), c.int("index_head_dim")
    p = "self_attn.indexer"
    return (linear(f"{p}.wq_b", heads * head_dim, c.int("q_lora_rank"), "replicated")
            + linear(f"{p}.wk", head_dim, hidden, "replicated")
            + norm(f"{p}.k_norm", head_dim, bias=True)
            + linear(f"{p}.weights_proj", heads, hidden, "replicated"))


def _per_layer(c: Config, key: str, num_layers: int, allowed: tuple[str, ...]) -> list[str] | None:
    values = c.list(key)
    if values is None:
        return None
    if len(values) != num_layers or any(v not in allowed for v in values):
        raise PlannerInputError(f"{c.where}: {key!r} must list one of {', '.join(allowed)} for each of the "
                                f"{num_layers} layers")
    return values


def _sparse_layers(c: Config, num_layers: int) -> list[bool]:
    """MoE or dense MLP per layer: mlp_layer_types when given, else first_k_dense_replace and moe_layer_freq."""
    types = _per_layer(c, "mlp_layer_types", num_layers, ("dense", "sparse"))
    if types is not None:
        return [t == "sparse" for t in types]
    first_dense = c.int("first_k_dense_replace", default=0, minimum=0)
    freq = c.int("moe_layer_freq", default=1)
    return [i >= first_dense and i % freq == 0 for i in range(num_layers)]


def _indexed_layers(c: Config, model_type: str, num_layers: int) -> list[bool]:
    """Layers that run their own indexer; GLM-5.x "shared" layers reuse the previous full layer's top-k
    (transformers GlmMoeDsaConfig.indexer_types, default from index_topk_freq / index_skip_topk_offset)."""
    if model_type not in SPARSE_ATTENTION:
        return [False] * num_layers
    types = _per_layer(c, "indexer_types", num_layers, ("full", "shared"))
    if types is not None:
        return [t == "full" for t in types]
    if model_type == "glm_moe_dsa":
        freq = c.int("index_topk_freq", default=1)
        offset = c.int("index_skip_topk_offset", default=2, minimum=0)
        return [max(i - offset + 1, 0) % freq == 0 for i in range(num_layers)]
    return [True] * num_layers


def routed_experts(c: Config, hidden: int, router_bias: bool) -> tuple[MoE, list[Tensor]]:
    """DeepSeek MoE block: router (noaux_tc routing keeps a per-expert score-correction bias next to its
    weight), n_routed_experts gated experts and n_shared_experts fused into one shared MLP."""
    experts, top_k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    expert_intermediate = c.int("moe_intermediate_size")
    shared = c.int("n_shared_experts", default=0, minimum=0) * expert_intermediate
    tensors = linear("mlp.gate", experts, hidden, "replicated", role="router")
    if router_bias:
        tensors += [Tensor("mlp.gate.e_score_correction_bias", (experts,), "router")]
    tensors += gated_mlp("mlp.experts", hidden, expert_intermediate, role="expert", count=experts)
    if shared:
        tensors += gated_mlp("mlp.shared_experts", hidden, shared)
    # noaux_tc: sigmoid scores plus the correction bias, picked within the best topk_group of n_group groups
    routing = "grouped" if router_bias else "softmax"
    return MoE(experts, top_k, expert_intermediate, shared, routing, c.int("n_group", default=1)), tensors


def mtp_modules(c: Config, hidden: int, vocab: int, decoder_layer: list[Tensor]) -> list[Tensor]:
    """Multi-token-prediction modules as DeepSeek-format checkpoints ship them (each a MoE decoder layer
    plus its own embedding, projection and head copy); engines load them only for speculative decoding."""
    mtp: list[Tensor] = []
    for j in range(c.int("num_nextn_predict_layers", default=0, minimum=0)):
        p = f"mtp{j}"
        mtp += [Tensor(f"{p}.{t.name}", t.shape, t.role, t.split, t.count) for t in decoder_layer]
        mtp += norm(f"{p}.enorm", hidden) + norm(f"{p}.hnorm", hidden) + norm(f"{p}.shared_head.norm", hidden)
        mtp += linear(f"{p}.eh_proj", hidden, 2 * hidden, "replicated")
        mtp += [Tensor(f"{p}.embed_tokens.weight", (vocab, hidden), "embedding", "vocab"),
                Tensor(f"{p}.shared_head.head.weight", (vocab, hidden), "lm_head", "vocab")]
    return mtp


def deepseek(c: Config, model_type: str, name: str) -> Architecture:
    """MLA attention, dense first layers, shared + routed experts, MTP modules counted apart. Mistral Small 4
    (mistral4) builds the same tensors; its Mistral4TopkRouter keeps no score-correction bias."""
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, vocab = c.int("num_attention_heads"), c.int("vocab_size")
    attn = mla_attention(c, hidden, heads)
    indexer = dsa_indexer(c, hidden) if model_type in SPARSE_ATTENTION else []
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)

    # GLM's routers (Glm4MoeLiteTopkRouter, GlmMoeDsaTopkRouter) keep the correction bias whatever topk_method says;
    # Mistral4TopkRouter never has one
    router_bias = model_type != "mistral4" and (c.str("topk_method") == "noaux_tc" or model_type in GLM_ROUTERS)
    moe, moe_mlp = routed_experts(c, hidden, router_bias=router_bias)
    dense_intermediate = c.int("intermediate_size")
    dense_mlp = gated_mlp("mlp", hidden, dense_intermediate)

    index_dim = c.int("index_head_dim") if indexer else 0
    index_heads = c.int("index_n_heads") if indexer else 0
    # transformers DeepseekV32Config / GlmMoeDsaConfig `index_topk`: the tokens every layer's queries attend to
    topk = c.int("index_topk") if indexer else 0
    layers = []
    for sparse, indexed in zip(_sparse_layers(c, num_layers), _indexed_layers(c, model_type, num_layers)):
        attention = mla_cache(c, indexer_head_dim=index_dim if indexed else 0,
                              indexer_heads=index_heads if indexed else 0, index_topk=topk)
        tensors = attn + (indexer if indexed else []) + norms + (moe_mlp if sparse else dense_mlp)
        layers.append(Layer(attention, tuple(tensors), is_moe=sparse))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    mtp = mtp_modules(c, hidden, vocab, attn + indexer + norms + moe_mlp)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied, unloaded=tuple(mtp),
        intermediate_size=dense_intermediate, moe=moe,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
