"""Gemma 3n's encoders: the USM conformer audio tower (transformers Gemma3nAudioEncoder) and the MobileNetV5
vision tower transformers builds through timm (Gemma3nVisionConfig.architecture, "mobilenetv5_300m_enc"), each
followed by a Gemma3nMultimodalEmbedder into the text width.

The vision config names the timm architecture but carries none of its sizes: the block strings below are timm's
(timm 1.0.31, timm/models/mobilenetv5.py, _gen_mobilenet_v5, the non-"base" arch_def), decoded as timm's
_efficientnet_builder does: "er" EdgeResidual (k x k expansion conv, 1x1 projection), "uir"
UniversalInvertedResidual (optional depthwise start a / middle k convs around a 1x1 expansion and projection,
then a layer scale), "mqa" MobileAttention (multi-query attention over 1x1 convs, keys and values downsampled
by a k x k depthwise conv when v > 1). Every norm is an RmsNorm2d (a weight, no bias); the stem conv has a bias.
"""

from __future__ import annotations

from planner.errors import PlannerInputError
from planner.model.families.config import Config
from planner.model.families.core import Tensor, UnsupportedArchitecture

_STAGE2_ATTENTION = ["mqa_r1_k3_h12_v2_s1_d64_c640", "uir_r1_a0_k0_s1_e2_c640"]
_STAGE3_ATTENTION = ["mqa_r1_k3_h16_s1_d96_c1280", "uir_r1_a0_k0_s1_e2_c1280"]
MOBILENETV5_300M = (
    ("er_r1_k3_s2_e4_c128", "er_r1_k3_s1_e4_c128", "er_r1_k3_s1_e4_c128"),
    ("uir_r1_a3_k5_s2_e6_c256", "uir_r1_a5_k0_s1_e4_c256", "uir_r1_a3_k0_s1_e4_c256", "uir_r1_a5_k0_s1_e4_c256",
     "uir_r1_a3_k0_s1_e4_c256"),
    ("uir_r1_a5_k5_s2_e6_c640", *["uir_r1_a5_k0_s1_e4_c640"] * 7, "uir_r1_a0_k0_s1_e1_c640", *_STAGE2_ATTENTION * 14),
    ("uir_r1_a5_k5_s2_e6_c1280", *_STAGE3_ATTENTION * 19),
)
TIMM_ARCHITECTURES = {"mobilenetv5_300m_enc": MOBILENETV5_300M}
STEM_CHANNELS, MSFA_CHANNELS, MSFA_EXPANSION = 64, 2048, 2  # MobileNetV5Encoder: stem_size, num_features; MSFA ffn


def make_divisible(value: float, divisor: int = 8) -> int:
    """timm.layers.make_divisible: round a channel count to the divisor, never more than 10% down."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_norm(prefix: str, out: int, inp: int, kernel: int, depthwise: bool = False) -> list[Tensor]:
    return [Tensor(f"{prefix}.conv.weight", (out, 1 if depthwise else inp, kernel, kernel), "vision"),
            Tensor(f"{prefix}.bn.weight", (out,), "vision")]


def _block(prefix: str, spec: str, inp: int) -> tuple[list[Tensor], int]:
    """One timm block string -> its tensors and output channels."""
    kind, *fields = spec.split("_")
    o = {f[0]: int(f[1:]) for f in fields}
    out = o["c"]
    if kind == "er":  # EdgeResidual
        mid = make_divisible(inp * o["e"])
        return ([Tensor(f"{prefix}.conv_exp.weight", (mid, inp, o["k"], o["k"]), "vision"),
                 Tensor(f"{prefix}.bn1.weight", (mid,), "vision"),
                 Tensor(f"{prefix}.conv_pwl.weight", (out, mid, 1, 1), "vision"),
                 Tensor(f"{prefix}.bn2.weight", (out,), "vision")], out)
    if kind == "uir":  # UniversalInvertedResidual
        mid = make_divisible(inp * o["e"])
        t = _conv_norm(f"{prefix}.dw_start", inp, inp, o["a"], depthwise=True) if o["a"] else []
        t += _conv_norm(f"{prefix}.pw_exp", mid, inp, 1)
        t += _conv_norm(f"{prefix}.dw_mid", mid, mid, o["k"], depthwise=True) if o["k"] else []
        t += _conv_norm(f"{prefix}.pw_proj", out, mid, 1)
        return t + [Tensor(f"{prefix}.layer_scale.gamma", (out,), "vision")], out
    heads, dim, attn = o["h"], o["d"], f"{prefix}.attn"  # mqa: MobileAttention over MultiQueryAttention2d
    t = [Tensor(f"{prefix}.norm.weight", (inp,), "vision"),
         Tensor(f"{attn}.query.proj.weight", (heads * dim, inp, 1, 1), "vision")]
    for branch in ("key", "value"):
        if o.get("v", 1) > 1:
            t += [Tensor(f"{attn}.{branch}.down_conv.weight", (inp, 1, o["k"], o["k"]), "vision"),
                  Tensor(f"{attn}.{branch}.norm.weight", (inp,), "vision")]
        t += [Tensor(f"{attn}.{branch}.proj.weight", (dim, inp, 1, 1), "vision")]
    t += [Tensor(f"{attn}.output.proj.weight", (out, heads * dim, 1, 1), "vision"),
          Tensor(f"{prefix}.layer_scale.gamma", (out,), "vision")]
    return t, out


def mobilenetv5(architecture: str, where: str) -> list[Tensor]:
    stages = TIMM_ARCHITECTURES.get(architecture)
    if stages is None:
        raise UnsupportedArchitecture(f"{where}: vision architecture {architecture!r} is not one planner counts "
                                      f"(supported: {', '.join(TIMM_ARCHITECTURES)}); give the total with --params N")
    p = "timm_model"
    t = [Tensor(f"{p}.conv_stem.conv.weight", (STEM_CHANNELS, 3, 3, 3), "vision"),
         Tensor(f"{p}.conv_stem.conv.bias", (STEM_CHANNELS,), "vision"),
         Tensor(f"{p}.conv_stem.bn.weight", (STEM_CHANNELS,), "vision")]
    channels, stage_out = STEM_CHANNELS, []
    for s, stage in enumerate(stages):
        for b, spec in enumerate(stage):
            block, channels = _block(f"{p}.blocks.{s}.{b}", spec, channels)
            t += block
        stage_out.append(channels)
    # the multi-scale fusion adapter: a UIR feed-forward over the last two stages' channels, then a norm
    fused = sum(stage_out[-2:])
    t += _conv_norm(f"{p}.msfa.ffn.pw_exp", fused * MSFA_EXPANSION, fused, 1)
    t += _conv_norm(f"{p}.msfa.ffn.pw_proj", MSFA_CHANNELS, fused * MSFA_EXPANSION, 1)
    return t + [Tensor(f"{p}.msfa.norm.weight", (MSFA_CHANNELS,), "vision")]


def _conformer_layer(p: str, hidden: int, heads: int, kernel: int) -> list[Tensor]:
    """Gemma3nAudioConformerBlock: feed-forward, relative-position attention, light conv, feed-forward, norm."""
    def dense(name: str, out: int, inp: int) -> Tensor:
        return Tensor(f"{p}.{name}.weight", (out, inp), "vision")

    def vector(name: str, size: int = hidden) -> Tensor:
        return Tensor(f"{p}.{name}", (size,), "vision")

    def ffw(name: str) -> list[Tensor]:  # Gemma3nAudioConformerFeedForward: 4x wide, norms around it
        return [vector(f"{name}.pre_layer_norm.weight"), dense(f"{name}.ffw_layer_1", 4 * hidden, hidden),
                dense(f"{name}.ffw_layer_2", hidden, 4 * hidden), vector(f"{name}.post_layer_norm.weight")]
    attention = [vector("attention.pre_attn_norm.weight"), vector("attention.attn.per_dim_scale", hidden // heads),
                 dense("attention.attn.relative_position_embedding.pos_proj", hidden, hidden)]
    attention += [dense(f"attention.attn.{n}", hidden, hidden) for n in ("q_proj", "k_proj", "v_proj")]
    attention += [dense("attention.post", hidden, hidden), vector("attention.post_norm.weight")]
    conv = [vector("lconv1d.pre_layer_norm.weight"), dense("lconv1d.linear_start", 2 * hidden, hidden),
            Tensor(f"{p}.lconv1d.depthwise_conv1d.weight", (hidden, 1, kernel), "vision"),
            vector("lconv1d.conv_norm.weight"), dense("lconv1d.linear_end", hidden, hidden)]
    return ffw("ffw_layer_start") + attention + conv + ffw("ffw_layer_end") + [vector("norm.weight")]


def _pairs(a: Config, key: str) -> list[tuple[int, int]]:
    """A list of (height, width) pairs of positive whole numbers, one per subsampling conv."""
    values = a.list(key) or []
    if any(not isinstance(v, list) or len(v) != 2 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1
                                                          for x in v) for v in values):
        raise PlannerInputError(f"{a.where}: {key!r} must list [height, width] pairs of positive whole numbers")
    return [(v[0], v[1]) for v in values]


def audio_encoder(a: Config) -> list[Tensor]:
    """Gemma3nAudioEncoder: two strided convs over the mel features (each with a weight-only group norm), a
    projection of their flattened output, then the conformer layers."""
    hidden, features = a.int("hidden_size"), a.int("input_feat_size")
    channels = a.int_list("sscp_conv_channel_size")
    kernels, strides = _pairs(a, "sscp_conv_kernel_size"), _pairs(a, "sscp_conv_stride_size")
    if not channels or not len(channels) == len(kernels) == len(strides) or min(channels) < 1:
        raise PlannerInputError(f"{a.where}: 'sscp_conv_channel_size', 'sscp_conv_kernel_size' and "
                                "'sscp_conv_stride_size' must give each subsampling conv its channels and sizes")
    p, t, inp = "audio_tower.subsample_conv_projection", [], 1
    for i, (out, (kh, kw), (_, sw)) in enumerate(zip(channels, kernels, strides)):
        t += [Tensor(f"{p}.conv_{i}.conv.weight", (out, inp, kh, kw), "vision"),
              Tensor(f"{p}.conv_{i}.norm.weight", (out,), "vision")]
        features, inp = (features + 2 - kw) // sw + 1, out  # frequency padded by one on each side
    t += [Tensor(f"{p}.input_proj_linear.weight", (hidden, inp * features), "vision")]
    heads, kernel = a.int("conf_num_attention_heads"), a.int("conf_conv_kernel_size")
    for i in range(a.int("conf_num_hidden_layers")):
        t += _conformer_layer(f"audio_tower.conformer.{i}", hidden, heads, kernel)
    return t


def _embedder(name: str, vocab: int, width: int, text_hidden: int) -> list[Tensor]:
    """Gemma3nMultimodalEmbedder: a small table of special tokens, two norms and the projection into the text."""
    return [Tensor(f"{name}.embedding.weight", (vocab, width), "projector"),
            Tensor(f"{name}.hard_embedding_norm.weight", (width,), "projector"),
            Tensor(f"{name}.soft_embedding_norm.weight", (width,), "projector"),
            Tensor(f"{name}.embedding_projection.weight", (text_hidden, width), "projector")]


def gemma3n_towers(v: Config, outer: Config, text_hidden: int) -> list[Tensor]:
    audio_data = outer.data.get("audio_config")
    if not isinstance(audio_data, dict):
        raise UnsupportedArchitecture(f"{outer.where}: a Gemma 3n config carries an 'audio_config' object; add it")
    a = Config(audio_data, f"{outer.where} audio_config")
    tower = mobilenetv5(v.str("architecture") or "", v.where)
    vision = [Tensor(f"vision_tower.{t.name}", t.shape, t.role) for t in tower]
    return (vision + _embedder("embed_vision", v.int("vocab_size"), v.int("hidden_size"), text_hidden)
            + audio_encoder(a) + _embedder("embed_audio", a.int("vocab_size"), a.int("hidden_size"), text_hidden))
