"""Vision towers and projectors of multimodal checkpoints, found by the vision config's model_type."""

from __future__ import annotations

from math import prod

from planner.errors import PlannerInputError
from planner.model.families.blocks import gated_mlp, linear, norm
from planner.model.families.config import VISION_CLASS_DEFAULTS, Config
from planner.model.families.core import Role, Split, Tensor, UnsupportedArchitecture
from planner.model.families.registry import VISION_TOWERS, closest_counted


def multimodal_tensors(outer: Config, text_hidden: int, name: str) -> tuple[Tensor, ...]:
    vision_data = outer.data.get("vision_config")
    if vision_data is None:
        return ()
    if not isinstance(vision_data, dict):
        raise PlannerInputError(f"{name} config: 'vision_config' must be an object")
    v = Config(vision_data, f"{name} config vision_config")
    # a tower registered under the model's own type is the one its config class builds, whatever the vision
    # config calls itself (MiniMax-M3-VL's says clip_vision_model); a vision config without its own model_type
    # (Kimi-K2.5's MoonViT) is known by the model's too
    outer_type = outer.str("model_type")
    vision_type = outer_type if outer_type in VISION_TOWERS else v.str("model_type") or outer_type
    v.data = {**VISION_CLASS_DEFAULTS.get(vision_type or "", {}), **v.data}
    tower = VISION_TOWERS.get(vision_type or "")
    if tower is None:
        raise UnsupportedArchitecture(
            f"{name}: vision tower {vision_type!r} is not one planner counts exactly "
            f"({closest_counted(vision_type or '', VISION_TOWERS, 'towers')}); give the total with --params N"
        )
    return tuple(tower(v, outer, text_hidden))


def vit_layer(prefix: str, hidden: int, intermediate: int) -> list[Tensor]:
    """A pre-norm ViT block with biased projections and LayerNorms (SigLIP, Llama 4 vision)."""
    t = norm(f"{prefix}.layer_norm1", hidden, bias=True) + norm(f"{prefix}.layer_norm2", hidden, bias=True)
    for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
        split: Split = "row" if proj == "out_proj" else "column"
        t += linear(f"{prefix}.self_attn.{proj}", hidden, hidden, split, bias=True)
    t += linear(f"{prefix}.mlp.fc1", intermediate, hidden, "column", bias=True)
    t += linear(f"{prefix}.mlp.fc2", hidden, intermediate, "row", bias=True)
    return t


def as_vision(tensors: list[Tensor], role: Role = "vision") -> list[Tensor]:
    return [Tensor(f"vision.{t.name}" if role == "vision" else f"projector.{t.name}", t.shape, role, t.split, t.count)
            for t in tensors]


def siglip(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Gemma 3's SigLIP tower (no pooling head) and its projector (transformers Gemma3MultiModalProjector)."""
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    patch, channels, image = v.int("patch_size"), v.int("num_channels", default=3), v.int("image_size")
    tower = [Tensor("patch_embedding.weight", (hidden, channels, patch, patch), "vision"),
             Tensor("patch_embedding.bias", (hidden,), "vision"),
             Tensor("position_embedding.weight", ((image // patch) ** 2, hidden), "vision")]
    for i in range(v.int("num_hidden_layers")):
        tower += vit_layer(f"layers.{i}", hidden, inter)
    tower += norm("post_layernorm", hidden, bias=True)
    projector = [Tensor("mm_input_projection_weight", (hidden, text_hidden), "projector"),
                 Tensor("mm_soft_emb_norm.weight", (hidden,), "projector")]
    return as_vision(tower) + as_vision(projector, "projector")


def pixtral(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Mistral 3's Pixtral tower (RMSNorm, gated MLP, 2-D RoPE) and patch-merger projector."""
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    patch, channels = v.int("patch_size"), v.int("num_channels", default=3)
    tower = [Tensor("patch_conv.weight", (hidden, channels, patch, patch), "vision")] + norm("ln_pre", hidden)
    for i in range(v.int("num_hidden_layers")):
        p = f"transformer.layers.{i}"
        tower += norm(f"{p}.attention_norm", hidden) + norm(f"{p}.ffn_norm", hidden)
        for proj in ("q_proj", "k_proj", "v_proj"):
            tower += linear(f"{p}.attention.{proj}", hidden, hidden, "column")
        tower += linear(f"{p}.attention.o_proj", hidden, hidden, "row")
        tower += gated_mlp(f"{p}.feed_forward", hidden, inter)
    merge = outer.int("spatial_merge_size", default=2)
    bias = outer.bool("multimodal_projector_bias", False)
    projector = (norm("norm", hidden)
                 + linear("patch_merger.merging_layer", hidden, hidden * merge * merge, "replicated")
                 + linear("linear_1", text_hidden, hidden, "column", bias)
                 + linear("linear_2", text_hidden, text_hidden, "row", bias))
    return as_vision(tower) + as_vision(projector, "projector")


def llama4_vision(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Llama 4's ViT, its pixel-shuffle adapter and the multimodal projector (transformers modeling_llama4)."""
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    patch, channels, image = v.int("patch_size"), v.int("num_channels", default=3), v.int("image_size")
    num_patches = (image // patch) ** 2
    tower = [Tensor("patch_embedding.linear.weight", (hidden, channels * patch * patch), "vision"),
             Tensor("class_embedding", (hidden,), "vision"),
             Tensor("positional_embedding_vlm", (num_patches + 1, hidden), "vision")]
    tower += norm("layernorm_pre", hidden, bias=True) + norm("layernorm_post", hidden, bias=True)
    for i in range(v.int("num_hidden_layers")):
        tower += vit_layer(f"model.layers.{i}", hidden, inter)
    tower += linear("vision_adapter.mlp.fc1", v.int("projector_input_dim"), inter, "column")
    tower += linear("vision_adapter.mlp.fc2", v.int("projector_output_dim"), v.int("projector_output_dim"), "row")
    projector = linear("linear_1", text_hidden, v.int("vision_output_dim"), "column")
    return as_vision(tower) + as_vision(projector, "projector")


def _qwen3_merger(prefix: str, hidden: int, merged: int, out: int, postshuffle: bool) -> list[Tensor]:
    """Qwen3VLVisionPatchMerger: LayerNorm (after the 2x2 shuffle for deepstack mergers), then two biased linears."""
    return (norm(f"{prefix}.norm", merged if postshuffle else hidden, bias=True)
            + linear(f"{prefix}.linear_fc1", merged, merged, "column", True)
            + linear(f"{prefix}.linear_fc2", out, merged, "row", True))


def qwen3_vision(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Qwen3-VL / Qwen3.5 ViT (transformers Qwen3VLVisionModel): 3-D patch conv, learned positions, biased
    blocks, a patch merger into the text width and, for Qwen3-VL, one deepstack merger per listed layer."""
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    patch, temporal, channels = v.int("patch_size"), v.int("temporal_patch_size"), v.int("in_channels")
    merged = hidden * v.int("spatial_merge_size") ** 2
    out = v.int("out_hidden_size")
    tower = [Tensor("patch_embed.proj.weight", (hidden, channels, temporal, patch, patch), "vision"),
             Tensor("patch_embed.proj.bias", (hidden,), "vision"),
             Tensor("pos_embed.weight", (v.int("num_position_embeddings"), hidden), "vision")]
    for i in range(v.int("depth")):
        p = f"blocks.{i}"
        tower += norm(f"{p}.norm1", hidden, bias=True) + norm(f"{p}.norm2", hidden, bias=True)
        tower += linear(f"{p}.attn.qkv", 3 * hidden, hidden, "column", True)
        tower += linear(f"{p}.attn.proj", hidden, hidden, "row", True)
        tower += linear(f"{p}.mlp.linear_fc1", inter, hidden, "column", True)
        tower += linear(f"{p}.mlp.linear_fc2", hidden, inter, "row", True)
    projector = _qwen3_merger("merger", hidden, merged, out, postshuffle=False)
    for j, _ in enumerate(v.int_list("deepstack_visual_indexes") or []):
        projector += _qwen3_merger(f"deepstack_merger_list.{j}", hidden, merged, out, postshuffle=True)
    return as_vision(tower) + as_vision(projector, "projector")


def qwen2_vision(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Qwen2-VL's ViT (transformers Qwen2VisionTransformerPretrainedModel): a 3-D patch conv without bias, LayerNorm
    blocks with a biased qkv and a GELU MLP of mlp_ratio x embed_dim, and the patch merger (LayerNorm, two biased
    linears over the 2x2-merged patch) into the text width, hidden_size."""
    hidden = v.int("embed_dim")
    inter = hidden * v.int("mlp_ratio", default=4)
    return _qwen2_tower(v, hidden, v.int("hidden_size"), layer_norm=True,
                        mlp=lambda p: (linear(f"{p}.mlp.fc1", inter, hidden, "column", True)
                                       + linear(f"{p}.mlp.fc2", hidden, inter, "row", True)))


def qwen2_5_vision(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Qwen2.5-VL's ViT (transformers Qwen2_5_VisionTransformerPretrainedModel): Qwen2-VL's with RMSNorms and a
    biased SwiGLU MLP; its merger maps into out_hidden_size."""
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    return _qwen2_tower(v, hidden, v.int("out_hidden_size"), layer_norm=False,
                        mlp=lambda p: gated_mlp(f"{p}.mlp", hidden, inter, bias=True))


def _qwen2_tower(v: Config, hidden: int, out: int, layer_norm: bool, mlp) -> list[Tensor]:
    patch, temporal = v.int("patch_size"), v.int("temporal_patch_size")
    # released configs spell the channels in_chans (Qwen2VLVisionConfig reads in_channels)
    channels = v.int("in_channels") if "in_channels" in v else v.int("in_chans", default=3)
    merged = hidden * v.int("spatial_merge_size") ** 2
    tower = [Tensor("patch_embed.proj.weight", (hidden, channels, temporal, patch, patch), "vision")]
    for i in range(v.int("depth")):
        p = f"blocks.{i}"
        tower += norm(f"{p}.norm1", hidden, bias=layer_norm) + norm(f"{p}.norm2", hidden, bias=layer_norm)
        tower += linear(f"{p}.attn.qkv", 3 * hidden, hidden, "column", True)
        tower += linear(f"{p}.attn.proj", hidden, hidden, "row", True)
        tower += mlp(p)
    projector = (norm("merger.ln_q", hidden, bias=layer_norm) + linear("merger.mlp.0", merged, merged, "column", True)
                 + linear("merger.mlp.2", out, merged, "row", True))
    return as_vision(tower) + as_vision(projector, "projector")


def glm4v_vision(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """GLM-4.1V / GLM-4.5V's ViT (transformers Glm4vVisionModel): learned positions, a biased 3-D patch conv, RMSNorm
    blocks whose SwiGLU MLP is out_hidden_size wide (no biases; qkv's by attention_bias), a 2x2 downsampling conv into
    out_hidden_size, and the merger (a linear, a LayerNorm, a SwiGLU of intermediate_size)."""
    hidden, out, inter = v.int("hidden_size"), v.int("out_hidden_size"), v.int("intermediate_size")
    patch, temporal, channels = v.int("patch_size"), v.int("temporal_patch_size"), v.int("in_channels", default=3)
    merge = v.int("spatial_merge_size")
    qkv_bias = v.bool("attention_bias", False)
    tower = [Tensor("embeddings.position_embedding.weight", ((v.int("image_size") // patch) ** 2, hidden), "vision"),
             Tensor("patch_embed.proj.weight", (hidden, channels, temporal, patch, patch), "vision"),
             Tensor("patch_embed.proj.bias", (hidden,), "vision")]
    for i in range(v.int("depth")):
        p = f"blocks.{i}"
        tower += norm(f"{p}.norm1", hidden) + norm(f"{p}.norm2", hidden)
        tower += linear(f"{p}.attn.qkv", 3 * hidden, hidden, "column", qkv_bias)
        tower += linear(f"{p}.attn.proj", hidden, hidden, "row")
        tower += gated_mlp(f"{p}.mlp", hidden, out)
    tower += norm("post_conv_layernorm", hidden) + norm("post_layernorm", hidden)
    tower += [Tensor("downsample.weight", (out, hidden, merge, merge), "vision"), Tensor("downsample.bias", (out,), "vision")]
    projector = (linear("merger.proj", out, out, "column") + norm("merger.post_projection_norm", out, bias=True)
                 + gated_mlp("merger", out, inter))
    return as_vision(tower) + as_vision(projector, "projector")


def moonvit(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    """Kimi-K2.5's MoonViT (transformers Kimi_K25VisionModel; the checkpoint's remote-code config names its
    sizes vt_*): 2-D patch conv, a learned height x width position grid, biased pre-norm blocks, and the
    patch-merger projector (LayerNorm, then two linears over the 2x2-merged patch)."""
    hidden, inter = v.int("vt_hidden_size"), v.int("vt_intermediate_size")
    patch = v.int("patch_size")
    kernel = v.int_list("merge_kernel_size") or [2, 2]
    merged = hidden * prod(kernel)
    tower = [Tensor("patch_embed.proj.weight", (hidden, 3, patch, patch), "vision"),
             Tensor("patch_embed.proj.bias", (hidden,), "vision"),
             Tensor("patch_embed.pos_emb.position_embeddings",
                    (v.int("init_pos_emb_height"), v.int("init_pos_emb_width"), hidden), "vision")]
    for i in range(v.int("vt_num_hidden_layers")):
        p = f"layers.{i}"
        tower += norm(f"{p}.norm1", hidden, bias=True) + norm(f"{p}.norm2", hidden, bias=True)
        for proj in ("q_proj", "k_proj", "v_proj"):
            tower += linear(f"{p}.attn.{proj}", hidden, hidden, "column", True)
        tower += linear(f"{p}.attn.proj", hidden, hidden, "row", True)
        tower += linear(f"{p}.mlp.fc1", inter, hidden, "column", True)
        tower += linear(f"{p}.mlp.fc2", hidden, inter, "row", True)
    tower += norm("final_layernorm", hidden, bias=True)
    projector = (norm("pre_norm", v.int("mm_hidden_size", default=hidden), bias=True)
                 + linear("in_proj", merged, merged, "column", True)
                 + linear("out_proj", text_hidden, merged, "row", True))
    return as_vision(tower) + as_vision(projector, "projector")
