"""config.json -> Architecture: every weight tensor with its shape, and every layer's cache kind.

The records live in planner.model.families.core, one module per family counts its tensors the way
the family's transformers modelling file builds them (planner.model.families); this module is the
entry point the rest of planner imports.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from planner.errors import PlannerInputError
from planner.model.families import FAMILIES
from planner.model.families.registry import closest_counted
from planner.model.families.blocks import attention_layouts, head_dim_from
from planner.model.families.config import (CONFIG_CLASS_DEFAULTS, MAX_LAYERS, UNTIED_BY_DEFAULT, Config,
                                           load_config_file)
from planner.model.families.core import (
    Architecture,
    Attention,
    Layer,
    LayerKind,
    MoE,
    Role,
    Split,
    Tensor,
    UnsupportedArchitecture,
)
from planner.model.families.vision import multimodal_tensors


def architecture_from_config(data: dict[str, Any], name: str = "model") -> Architecture:
    """Turn a config.json dict into an Architecture, counting every tensor exactly."""
    if not isinstance(data, dict):
        raise PlannerInputError(f"{name}: config must be a JSON object")
    outer = Config(data, f"{name} config")
    text_data = data.get("text_config")
    if text_data is not None and not isinstance(text_data, dict):
        raise PlannerInputError(f"{name} config: 'text_config' must be an object")
    text = Config(text_data, f"{name} config text_config") if text_data else outer
    model_type = text.str("model_type") or outer.str("model_type")
    if model_type is None:
        raise PlannerInputError(f"{name} config: missing key 'model_type'; add it from the model's config.json")
    # config.json leaves out keys equal to the config class's default: fill them in first
    text.data = {**CONFIG_CLASS_DEFAULTS.get(model_type, {}), **text.data}
    if text is not outer:
        # a multimodal model ties its lm_head by the outer config (transformers PreTrainedModel.tie_weights
        # reads self.config, the outer one), whose class default may differ from the text config's
        outer_type = outer.str("model_type") or ""
        tied = outer.bool("tie_word_embeddings", outer_type not in UNTIED_BY_DEFAULT)
        if "tie_word_embeddings" in outer or outer_type in UNTIED_BY_DEFAULT:
            text.data = {**text.data, "tie_word_embeddings": tied}
    builder = FAMILIES.get(model_type)
    if builder is None:
        counted = _count_with_transformers(data, name)
        if counted is not None:
            return counted
        raise UnsupportedArchitecture(f"{name}: architecture {model_type!r} is not one planner counts exactly "
                                      f"({closest_counted(model_type, FAMILIES, 'model_types')}); give its size with --params N"
                                      f"{_transformers_hint()}")
    arch = builder(text, model_type, name)
    multimodal: tuple[Tensor, ...] = ()
    if text_data is not None or "vision_config" in outer:
        try:
            multimodal = multimodal_tensors(outer, arch.hidden_size, name)
        except UnsupportedArchitecture as unknown_tower:  # transformers may build the whole model
            counted = _count_with_transformers(data, name)
            if counted is not None:
                return counted
            raise UnsupportedArchitecture(f"{unknown_tower}{_transformers_hint()}") from None
    torch_dtype = text.str("torch_dtype") or outer.str("torch_dtype") or text.str("dtype") or outer.str("dtype")
    quant = data.get("quantization_config") or (text_data or {}).get("quantization_config")
    vision = outer.data.get("vision_config") if multimodal else None
    vision_dims = (vision.get("num_hidden_layers"), vision.get("hidden_size")) if isinstance(vision, dict) else None
    return _kept_unquantized(replace(arch, multimodal=multimodal, torch_dtype=torch_dtype, quantization_config=quant,
                                     vision_layers_hidden=vision_dims), f"{name} config")


def _kept_unquantized(arch: Architecture, where: str) -> Architecture:
    """The checkpoint's exclusions applied (planner.model.families.exclusions), a module imported only for a config
    with a quantization_config: an unquantized model (most catalog entries) never loads its pattern checks (about
    1 ms of `planner estimate`, python -X importtime)."""
    if arch.quantization_config is None:
        return arch
    from planner.model.families.exclusions import apply_exclusions

    return apply_exclusions(arch, where)


def _transformers_hint() -> str:
    from planner.model.transformers_fallback import transformers_available

    return "" if transformers_available() else (", or install planner's transformers extra "
                                                "(pip install \".[transformers]\") for transformers' own count")


def _count_with_transformers(data: dict[str, Any], name: str) -> Architecture | None:
    """The optional exact fallback (planner.model.transformers_fallback) for a model_type no family counts; its
    module is imported here, when a config needs it (~0.5 ms of every `planner estimate` otherwise)."""
    from planner.model.transformers_fallback import architecture_from_transformers, transformers_available

    if not transformers_available():
        return None
    try:
        shape = size_only_architecture_from_config(data, name, 1)  # the cache layout; the count comes next
    except UnsupportedArchitecture:
        raise  # a cache planner cannot lay out: its reason, not a request for --params that would meet it again
    except PlannerInputError:
        return None
    arch = architecture_from_transformers(data, shape)
    return None if arch is None else _kept_unquantized(arch, f"{name} config")


def size_only_architecture_from_config(data: dict[str, Any], name: str, params: int) -> Architecture:
    """An architecture planner cannot count: weights from --params, cache from the config (layer kinds included)."""
    if not isinstance(data, dict):
        raise PlannerInputError(f"{name}: config must be a JSON object")
    text_data = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    c = Config(text_data, f"{name} config")
    model_type = c.str("model_type") or Config(data, name).str("model_type") or "unknown"
    hidden, layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", default=heads)
    head_dim = head_dim_from(c, hidden, heads)
    attention = attention_layouts(c, model_type, layers, kv_heads, head_dim, recurrent_ok=True)
    if c.data.get("kv_lora_rank") is not None:
        raise UnsupportedArchitecture(
            f"{c.where}: 'kv_lora_rank' describes multi-head latent attention, which engines cache as one latent per "
            f"token for some families (DeepSeek's) and as whole heads for others (MiniCPM3's); planner does not know "
            f"which for model_type {model_type!r}: give the cache with --layers, --kv-heads and --head-dim")
    if c.list("layer_types") is None and not any(a.state_elements for a in attention):
        _refuse_unplaced_recurrent_layers(c, model_type)
    if c.list("layer_types") is None and model_type not in FAMILIES:
        attention = _window_rule_of_an_unknown_family(c, model_type, attention)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads,
        vocab_size=c.int("vocab_size", default=0, minimum=0), layers=tuple(Layer(a) for a in attention),
        torch_dtype=c.str("torch_dtype") or c.str("dtype") or Config(data, name).str("torch_dtype"),
        quantization_config=data.get("quantization_config"), exact=False, declared_params=params,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


# Keys by which a config places or sizes recurrent (Mamba / state-space) layers: Jamba's attn_layer_period, Bamba's
# attn_layer_indices, Zamba2's hybrid_layer_ids, Falcon-H1's mamba_d_ssm, ... (transformers 5.25 config classes)
RECURRENT_KEYS = ("attn_layer_period", "attn_layer_offset", "attn_layer_indices", "hybrid_layer_ids",
                  "layers_block_type", "hybrid_override_pattern", "state_size", "n_mamba_heads")
RECURRENT_PREFIXES = ("mamba_", "ssm_")


def _refuse_unplaced_recurrent_layers(c: Config, model_type: str) -> None:
    """A config of a family planner does not count that describes recurrent layers without a layer_types list: a cache
    sized as if every layer were attention would be wrong (8 times Jamba's KV cache, and no state), so say so."""
    key = next((k for k in c.data if k in RECURRENT_KEYS or k.startswith(RECURRENT_PREFIXES)), None)
    if key is not None:
        raise UnsupportedArchitecture(
            f"{c.where}: {key!r} describes recurrent (Mamba / state-space) layers, which planner does not place for "
            f"model_type {model_type!r}; add 'layer_types' to the config, 'mamba' or 'attention' for each layer")


# Keys by which config classes place sliding-window layers by a rule of their family (transformers 5.25: Gemma 3 /
# EXAONE 4 / Cohere 2 sliding_window_pattern, Qwen2 max_window_layers, AFMoE global_attn_every_n_layers, SmolLM3
# no_rope_layer_interval / no_rope_layers), and keys that chunk or share the cache (Llama 4 attention_chunk_size,
# Gemma 3n num_kv_shared_layers, Hunyuan's use_cla with cla_share_factor)
WINDOW_RULE_KEYS = ("sliding_window_pattern", "max_window_layers", "global_attn_every_n_layers",
                    "no_rope_layer_interval", "no_rope_layers")
CACHE_RULE_KEYS = ("attention_chunk_size", "num_kv_shared_layers", "use_cla")


def _window_rule_of_an_unknown_family(c: Config, model_type: str, attention: list[Attention]) -> list[Attention]:
    """The cache layers of a family planner does not count, which layer_kinds reads as one window on every layer
    (Mistral v0.1's rule) when the config has a sliding_window: none where the config turns the window off
    (use_sliding_window false, in every config class that has the key), refused where a key places windows, chunks or
    shared caches by a rule of its family, which planner does not know."""
    if c.data.get("use_sliding_window") is False:
        attention = [replace(a, kind="full", window=None) if a.kind == "sliding" else a for a in attention]
    sliding = any(a.kind == "sliding" for a in attention)
    key = next((k for k in WINDOW_RULE_KEYS if sliding and c.data.get(k) not in (None, [])), None) or next(
        (k for k in CACHE_RULE_KEYS if c.data.get(k) not in (None, False, 0)), None)
    if key is not None:
        raise UnsupportedArchitecture(
            f"{c.where}: {key!r} places sliding-window, chunked or shared-cache layers by a rule of model_type "
            f"{model_type!r}, which planner does not count; add 'layer_types' to the config ('full_attention' or "
            f"'sliding_attention' for each layer)")
    return attention


def architecture_from_size(params: int, layers: int, kv_heads: int, head_dim: int,
                           attention_heads: int | None = None, name: str = "custom") -> Architecture:
    """A model given by --params/--layers/--kv-heads/--head-dim: weights from the count, KV from the shape."""
    for label, value in (("--params", params), ("--layers", layers), ("--kv-heads", kv_heads), ("--head-dim", head_dim)):
        if value is None or value <= 0:
            raise PlannerInputError(f"{label}: must be a positive number (got {value})")
    if layers > MAX_LAYERS:
        raise PlannerInputError(f"--layers: {layers:,} is beyond any real model (at most {MAX_LAYERS:,})")
    heads = attention_heads or kv_heads
    if heads % kv_heads:
        raise PlannerInputError(f"--heads: {heads} attention heads must be a multiple of --kv-heads {kv_heads}")
    attention = Attention("full", kv_heads, head_dim, head_dim)
    return Architecture(
        name=name, model_type="custom", hidden_size=heads * head_dim, num_attention_heads=heads, vocab_size=0,
        layers=tuple(Layer(attention) for _ in range(layers)), exact=False, declared_params=params,
    )




__all__ = [
    "Architecture", "Attention", "Layer", "LayerKind", "MoE", "Role", "Split", "Tensor", "UnsupportedArchitecture",
    "architecture_from_config", "architecture_from_size", "load_config_file", "size_only_architecture_from_config",
]
