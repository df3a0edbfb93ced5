"""Kimi Linear and Kimi-K3 (kimi_linear; kimi_k3 with its MoonViT3d tower): Kimi Delta Attention (KDA) linear layers
interleaved with multi-head latent attention, a dense first layer, then sigmoid-routed MoE with shared experts.

transformers has no class for either: they are counted as the checkpoints' own remote code builds them
(moonshotai/Kimi-K3 modeling_kimi_linear.py, KimiLinearForCausalLM; modeling_kimi_k3.py, KimiK3ForConditionalGeneration).
K3 adds to Kimi Linear: an output gate on MLA (mla_use_output_gate), routed experts that run in a smaller latent width
(routed_expert_hidden_size, projected down and back up around them, with an RMSNorm when latent_moe_use_norm), and
attention residuals (attn_res_block_size): every layer mixes the earlier block outputs before its attention and its MLP
with a learned RMSNorm and a 1-wide projection each, and the model mixes them once more before its final norm.
"""

from __future__ import annotations

from math import prod

from planner.errors import PlannerInputError
from planner.model.families.blocks import embedding_and_head, gated_mlp, linear, norm
from planner.model.families.config import Config
from planner.model.families.core import Architecture, Attention, Layer, MoE, Tensor, UnsupportedArchitecture
from planner.model.families.deepseek import mla_attention, mla_cache
from planner.model.families.vision import as_vision


def _linear_attn_config(c: Config) -> Config | None:
    data = c.data.get("linear_attn_config")
    if data is None:
        return None
    if not isinstance(data, dict):
        raise PlannerInputError(f"{c.where}: 'linear_attn_config' must be an object")
    return Config(data, f"{c.where} linear_attn_config")


def _kda_layers(la: Config | None, num_layers: int) -> list[bool]:
    """KimiLinearConfig.is_kda_layer: kda_layers lists layers 1-based; every other layer is MLA."""
    if la is None:
        return [False] * num_layers
    listed = la.int_list("kda_layers")
    if listed is None:
        raise PlannerInputError(f"{la.where}: missing key 'kda_layers'; add it from the model's config.json")
    ones = set(listed)
    return [i + 1 in ones for i in range(num_layers)]


def kda_attention(la: Config, hidden: int) -> list[Tensor]:
    """KimiDeltaAttention: q/k/v projections each through a depthwise short convolution (fla ShortConvolution,
    no bias), a low-rank forget gate (f_a, f_b) with per-channel dt_bias and per-head A_log, a per-head beta, an
    output gate (full rank, or g_a/g_b), a gated RMSNorm over head_dim (fla FusedRMSNormGated) and o_proj."""
    heads, head_dim = la.int("num_heads"), la.int("head_dim")
    width, kernel = heads * head_dim, la.int("short_conv_kernel_size")
    p = "self_attn"
    t: list[Tensor] = []
    for proj in ("q", "k", "v"):
        t += linear(f"{p}.{proj}_proj", width, hidden, "column")
        t += [Tensor(f"{p}.{proj}_conv1d.weight", (width, 1, kernel), "linear", "column")]
    t += [Tensor(f"{p}.A_log", (heads,), "norm", "column")]
    t += linear(f"{p}.f_a_proj", head_dim, hidden, "replicated") + linear(f"{p}.f_b_proj", width, head_dim, "column")
    t += [Tensor(f"{p}.dt_bias", (width,), "norm", "column")]
    t += linear(f"{p}.b_proj", heads, hidden, "column")
    if la.bool("use_full_rank_gate", False):
        t += linear(f"{p}.g_proj", width, hidden, "column")
    else:
        t += linear(f"{p}.g_a_proj", head_dim, hidden, "replicated") + linear(f"{p}.g_b_proj", width, head_dim, "column")
    return t + norm(f"{p}.o_norm", head_dim) + linear(f"{p}.o_proj", hidden, width, "row")


def kda_state(la: Config) -> Attention:
    """One sequence's KDA state as vLLM allocates it (vllm/model_executor/layers/mamba/mamba_utils.py,
    MambaStateShapeCalculator.kda_state_shape): a (kernel - 1)-step window for each of the q, k and v
    convolutions, and a head_dim x head_dim recurrent state per head; the engines give each part its dtype."""
    heads, head_dim = la.int("num_heads"), la.int("head_dim")
    conv = 3 * heads * head_dim * (la.int("short_conv_kernel_size") - 1)
    return Attention("linear", state_elements=conv + heads * head_dim * head_dim, conv_state_elements=conv,
                     recurrence="kda")


def _attention_residual(prefix: str, hidden: int) -> list[Tensor]:
    return norm(f"{prefix}_res_norm", hidden) + linear(f"{prefix}_res_proj", 1, hidden, "replicated")


def _sparse_moe(c: Config, hidden: int) -> tuple[MoE, list[Tensor]]:
    """KimiSparseMoeBlock: router weight and score-correction bias (both parameters), experts w1/w3 (gate, up) and
    w2 (down) in the latent width when there is one, shared experts as one MLP of num_shared_experts widths."""
    experts, top_k = c.int("num_experts"), c.int("num_experts_per_token")
    inter = c.int("moe_intermediate_size")
    latent = c.opt_int("routed_expert_hidden_size")
    width = latent or hidden
    p = "block_sparse_moe"
    t = [Tensor(f"{p}.gate.weight", (experts, hidden), "router"),
         Tensor(f"{p}.gate.e_score_correction_bias", (experts,), "router")]
    t += (linear(f"{p}.experts.w1", inter, width, "column", role="expert", count=experts)
          + linear(f"{p}.experts.w3", inter, width, "column", role="expert", count=experts)
          + linear(f"{p}.experts.w2", width, inter, "row", role="expert", count=experts))
    shared = c.int("num_shared_experts", default=0, minimum=0) * inter
    t += gated_mlp(f"{p}.shared_experts", hidden, shared)  # built even at zero width, as KimiMLP is
    if latent:  # replicated like vLLM's other latent-MoE projections (NemotronH fc1/fc2_latent_proj)
        t += linear(f"{p}.routed_expert_down_proj", latent, hidden, "replicated")
        t += linear(f"{p}.routed_expert_up_proj", hidden, latent, "replicated")
        if c.bool("latent_moe_use_norm", False):
            t += norm(f"{p}.routed_expert_norm", latent)
    return MoE(experts, top_k, inter, shared), t


def _mla(c: Config, hidden: int, heads: int) -> list[Tensor]:
    t = mla_attention(c, hidden, heads)
    if c.bool("mla_use_output_gate", False):
        t += linear("self_attn.g_proj", heads * c.int("v_head_dim"), hidden, "column")
    return t


def kimi_linear(c: Config, model_type: str, name: str) -> Architecture:
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, vocab = c.int("num_attention_heads"), c.int("vocab_size")
    la = _linear_attn_config(c)
    kda = _kda_layers(la, num_layers)
    latent_cache = mla_cache(c)
    residuals = "attn_res_block_size" in c
    norms = norm("input_layernorm", hidden) + norm("post_attention_layernorm", hidden)
    if residuals:
        norms += _attention_residual("self_attention", hidden) + _attention_residual("mlp", hidden)
    moe, moe_mlp = _sparse_moe(c, hidden) if "num_experts" in c else (None, [])
    dense_intermediate = c.int("intermediate_size")
    dense_mlp = gated_mlp("mlp", hidden, dense_intermediate)
    first_dense, freq = c.int("first_k_dense_replace", default=0, minimum=0), c.int("moe_layer_freq", default=1)
    mla = _mla(c, hidden, heads)
    kda_mixer, kda_cache = (kda_attention(la, hidden), kda_state(la)) if la is not None else ([], latent_cache)
    layers = []
    for i, is_kda in enumerate(kda):
        sparse = moe is not None and i >= first_dense and i % freq == 0
        mixer, cache = (kda_mixer, kda_cache) if is_kda else (mla, latent_cache)
        layers.append(Layer(cache, tuple(mixer + norms + (moe_mlp if sparse else dense_mlp)), is_moe=sparse))
    embedding, head, tied = embedding_and_head(c, model_type, hidden, vocab)
    if residuals:  # KimiLinearModel mixes the blocks once more before its final norm
        head = tuple(_attention_residual("output_attn", hidden)) + head
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=dense_intermediate, moe=moe, max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def moonvit3d(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Kimi-K3's MoonViT3d (modeling_kimi_k3.py MoonViT3dPretrainedModel): 2-D patch conv, a learned height x width
    position grid (its temporal table is a fixed sin-cos buffer, not stored), pre-norm blocks with a fused qkv of
    qkv_hidden_size per projection and a two-layer MLP, a final norm; then PatchMergerMLPV2 (two bias-free linears
    over the 2x2-merged patch and an RMSNorm after them)."""
    hidden, inter = v.int("vt_hidden_size"), v.int("vt_intermediate_size")
    qkv = v.int("qkv_hidden_size", default=hidden)
    patch = v.int("patch_size")
    norm_type = v.str("norm_type") or "rmsnorm"  # KimiK3VisionConfig's default
    if norm_type not in ("rmsnorm", "layernorm"):
        raise UnsupportedArchitecture(f"{v.where}: norm_type {norm_type!r} is not one MoonViT3d builds")
    rms = norm_type == "rmsnorm"
    attn_bias, mlp_bias = v.bool("attn_bias", False), v.bool("linear_bias", False)
    tower = [Tensor("patch_embed.proj.weight", (hidden, 3, patch, patch), "vision")]
    if v.bool("patch_embed_proj_bias", False):
        tower.append(Tensor("patch_embed.proj.bias", (hidden,), "vision"))
    tower.append(Tensor("patch_embed.pos_emb.weight",
                        (v.int("init_pos_emb_height"), v.int("init_pos_emb_width"), hidden), "vision"))
    for i in range(v.int("vt_num_hidden_layers")):
        p = f"encoder.blocks.{i}"
        tower += norm(f"{p}.norm0", hidden, bias=not rms) + norm(f"{p}.norm1", hidden, bias=not rms)
        tower += linear(f"{p}.wqkv", 3 * qkv, hidden, "column", attn_bias)
        tower += linear(f"{p}.wo", hidden, qkv, "row", attn_bias)
        tower += linear(f"{p}.mlp.fc0", inter, hidden, "column", mlp_bias)
        tower += linear(f"{p}.mlp.fc1", hidden, inter, "row", mlp_bias)
    tower += norm("encoder.final_layernorm", hidden, bias=not rms)
    merged = v.int("mm_hidden_size", default=hidden) * prod(v.int_list("merge_kernel_size") or [2, 2])
    out = v.int("text_hidden_size", default=text_hidden)
    projector = (linear("proj.0", merged, merged, "column") + linear("proj.2", out, merged, "row")
                 + norm("post_norm", out))
    return as_vision(tower) + as_vision(projector, "projector")
