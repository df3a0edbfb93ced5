"""NVIDIA Nemotron-H / Nemotron 3 Nano, Super, Ultra (nemotron_h): a stack of single-mixer blocks, each a Mamba-2
mixer, an attention mixer, a MoE or a plain MLP, chosen per block by hybrid_override_pattern (M, *, E, -) or
layers_block_type (transformers models/nemotron_h).

Each Mamba-2 or attention block is one planner layer; the MoE / MLP blocks after it join it (blocks.cache_layers).
The checkpoint's MTP module (mtp.*, which transformers skips and vLLM's nemotron_h_mtp.py loads for speculative
decoding) is counted apart: one block per mtp_hybrid_override_pattern character, enorm / hnorm / eh_proj
before the first and a final norm after the last; it shares the model's embeddings and lm_head.
"""

from __future__ import annotations

from planner.errors import PlannerInputError
from planner.model.families.blocks import (cache_layers, embedding_and_head, head_dim_from, linear, mamba2_mixer, norm,
                                           recurrent_attention)
from planner.model.families.config import MAX_LAYERS, Config
from planner.model.families.core import Architecture, Attention, MoE, Tensor

PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
# older block names (transformers configuration_utils._LEGACY_LAYER_TYPE_REMAP)
LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
MIXERS = ("linear_attention", "full_attention")


def block_types(c: Config) -> list[str]:
    types = c.list("layers_block_type") or c.list("layer_types")
    if types is None:
        pattern = c.str("hybrid_override_pattern")
        if pattern is None or len(pattern) > MAX_LAYERS or any(ch not in PATTERN for ch in pattern):
            raise PlannerInputError(f"{c.where}: 'hybrid_override_pattern' must spell the blocks with M, *, E and -")
        types = [PATTERN[ch] for ch in pattern]
    types = [LEGACY.get(t, t) if isinstance(t, str) else t for t in types]
    if not types or any(t not in PATTERN.values() for t in types):
        raise PlannerInputError(f"{c.where}: block types must be among {', '.join(PATTERN.values())}")
    if not any(t in MIXERS for t in types):
        raise PlannerInputError(f"{c.where}: no Mamba or attention block in the pattern")
    return types


def _attention(c: Config, hidden: int, heads: int, kv_heads: int, head_dim: int) -> list[Tensor]:
    bias = c.bool("attention_bias", False)
    return (linear("mixer.q_proj", heads * head_dim, hidden, "column", bias)
            + linear("mixer.k_proj", kv_heads * head_dim, hidden, "kv", bias)
            + linear("mixer.v_proj", kv_heads * head_dim, hidden, "kv", bias)
            + linear("mixer.o_proj", hidden, heads * head_dim, "row", bias))


def _mlp(prefix: str, hidden: int, intermediate: int, bias: bool, role: str = "linear", count: int = 1) -> list[Tensor]:
    """Non-gated MLP (squared-ReLU): up_proj and down_proj only."""
    return (linear(f"{prefix}.up_proj", intermediate, hidden, "column", bias, role, count)  # type: ignore[arg-type]
            + linear(f"{prefix}.down_proj", hidden, intermediate, "row", bias, role, count))  # type: ignore[arg-type]


def _moe(c: Config, hidden: int) -> tuple[MoE, list[Tensor]]:
    experts, top_k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    inter = c.int("moe_intermediate_size")
    latent = c.opt_int("moe_latent_size")
    bias = c.bool("mlp_bias", False)
    t = linear("mixer.gate", experts, hidden, "replicated", role="router")
    t += [Tensor("mixer.gate.e_score_correction_bias", (experts,), "router")]
    t += _mlp("mixer.experts", latent or hidden, inter, False, "expert", experts)
    shared = c.int("moe_shared_expert_intermediate_size", default=0, minimum=0)
    if shared:
        t += _mlp("mixer.shared_experts", hidden, shared, bias)
    if latent:  # experts run in a smaller latent width, projected in and out around them
        t += linear("mixer.fc1_latent_proj", latent, hidden, "replicated", bias)
        t += linear("mixer.fc2_latent_proj", hidden, latent, "replicated", bias)
    return MoE(experts, top_k, inter, shared), t


def nemotron_h(c: Config, model_type: str, name: str) -> Architecture:
    hidden, vocab = c.int("hidden_size"), c.int("vocab_size")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", default=heads)
    head_dim = head_dim_from(c, hidden, heads)
    types = block_types(c)
    # the Mamba-2 state in the names recurrent_attention reads (Granite-4.0-H / vLLM spelling)
    mamba_keys = Config({"mamba_n_heads": c.int("mamba_num_heads"), "mamba_d_head": c.int("mamba_head_dim"),
                         "mamba_d_state": c.int("ssm_state_size"), "mamba_n_groups": c.int("n_groups", default=1),
                         "mamba_d_conv": c.int("conv_kernel"),
                         "mamba_ssm_cache_dtype": c.str("mamba_ssm_cache_dtype")},
                        c.where) if "linear_attention" in types else None
    block_norm = norm("norm", hidden)
    moe: MoE | None = None
    blocks: list[tuple[Attention | None, list[Tensor], bool]] = []
    for kind in types:
        if kind == "linear_attention":
            mixer = mamba2_mixer(mamba_keys, "mixer", hidden,  # type: ignore[arg-type]
                                 conv_bias=c.bool("use_conv_bias", True), proj_bias=c.bool("use_bias", False))
            blocks.append((recurrent_attention(mamba_keys, "mamba"), mixer + block_norm, False))  # type: ignore[arg-type]
        elif kind == "full_attention":
            blocks.append((Attention("full", kv_heads, head_dim, head_dim),
                           _attention(c, hidden, heads, kv_heads, head_dim) + block_norm, False))
        elif kind == "moe":
            moe, ffn = _moe(c, hidden)
            blocks.append((None, ffn + block_norm, True))
        else:
            blocks.append((None, _mlp("mixer", hidden, c.int("intermediate_size"), c.bool("mlp_bias", False)) + block_norm,
                           False))
    layers = cache_layers(blocks)
    mtp: list[Tensor] = []
    for j in range(c.int("num_nextn_predict_layers", default=0, minimum=0)):
        pattern = c.str("mtp_hybrid_override_pattern") or "*E"
        if len(pattern) > MAX_LAYERS or any(ch not in ("*", "E") for ch in pattern):
            raise PlannerInputError(f"{c.where}: 'mtp_hybrid_override_pattern' must spell the MTP blocks with * and E")
        for k, ch in enumerate(pattern):
            block = (_attention(c, hidden, heads, kv_heads, head_dim) if ch == "*" else _moe(c, hidden)[1]) + block_norm
            if k == 0:
                block += norm("enorm", hidden) + norm("hnorm", hidden) + linear("eh_proj", hidden, 2 * hidden, "column")
            if k == len(pattern) - 1:
                block += norm("final_layernorm", hidden)
            i = j * len(pattern) + k
            mtp += [Tensor(f"mtp.layers.{i}.{t.name}", t.shape, t.role, t.split, t.count) for t in block]
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=layers, embedding=embedding, head=head, tied_embeddings=tied, unloaded=tuple(mtp),
        intermediate_size=c.int("intermediate_size", default=0, minimum=0), moe=moe,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )
