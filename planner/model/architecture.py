"""config.json -> Architecture: every weight tensor with its shape, and every layer's cache kind.

Counting tensor by tensor (rather than from a parameter total) is what lets planner apply a
precision to the right tensors (fp8 keeps embeddings in 16-bit, mxfp4 touches only experts),
shard them under tensor parallelism and place them on pipeline stages. The tensor lists follow the
Hugging Face `transformers` modelling files of each family (module names are kept in the tensor
names so a count can be checked against a checkpoint's safetensors index).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from math import isfinite, prod
from pathlib import Path
from typing import Any, Literal

from planner.errors import PlannerInputError
from planner.files import CONFIG, read_bytes

# What a tensor is, which decides how a precision treats it.
Role = Literal["embedding", "lm_head", "linear", "expert", "router", "norm", "bias", "vision", "projector"]
# How tensor parallelism shards it (Megatron style, as vLLM does): column = output rows split,
# row = input columns split, kv = K/V heads split but replicated once tp exceeds the KV heads,
# vocab = embedding rows split, replicated = whole on every rank.
Split = Literal["column", "row", "kv", "vocab", "replicated"]
LayerKind = Literal["full", "sliding", "mla", "linear", "mamba"]


# Bounds on config.json numbers: a value past them is damage or a typo, and would otherwise hang (a
# billion layers built one by one) or overflow (float arithmetic on astronomic sizes).
MAX_LAYERS = 1024  # the deepest published LLMs have under 200 decoder layers
MAX_HEADS = 65_536  # the widest have 128 attention heads; --tp advice lists the divisors of this count
MAX_CONFIG_NUMBER = 2**31 - 1  # transformers configs hold dimensions and counts that fit an int32
_KEY_MAXIMUM = {"num_hidden_layers": MAX_LAYERS, "num_nextn_predict_layers": MAX_LAYERS,
                "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS}


class UnsupportedArchitecture(PlannerInputError):
    """The config names an architecture planner cannot count exactly."""


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    role: Role
    split: Split = "replicated"
    count: int = 1  # identical tensors stored side by side, e.g. the experts of one layer

    @property
    def numel(self) -> int:
        return prod(self.shape) * self.count


@dataclass(frozen=True)
class Attention:
    """What one layer keeps per sequence while it is served."""

    kind: LayerKind
    kv_heads: int = 0
    k_head_dim: int = 0
    v_head_dim: int = 0
    window: int | None = None  # sliding / chunked layers: tokens held at most
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim values per token, shared by all heads
    state_elements: int = 0  # linear-attention / Mamba: constant state per sequence

    @property
    def values_per_token(self) -> int:
        """Cached values per token for the whole layer (all KV heads), before any TP split."""
        if self.kind == "mla":
            return self.latent_dim
        if self.kind in ("full", "sliding"):
            return self.kv_heads * (self.k_head_dim + self.v_head_dim)
        return 0


@dataclass(frozen=True)
class Layer:
    attention: Attention
    tensors: tuple[Tensor, ...] = ()
    is_moe: bool = False

    @cached_property
    def params(self) -> int:
        return sum(t.numel for t in self.tensors)

    def __hash__(self) -> int:
        return _cached_hash(self, lambda: hash((self.attention, self.tensors, self.is_moe)))


@dataclass(frozen=True)
class MoE:
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int = 0


@dataclass(frozen=True)
class Architecture:
    """A model as planner sees it.

    `exact` is False for a model known only by its parameter count (the seed's method): then
    `layers` carry the KV shape but no tensors and `declared_params` is the weight count.
    """

    name: str
    model_type: str
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    layers: tuple[Layer, ...]
    embedding: tuple[Tensor, ...] = ()  # first pipeline stage
    head: tuple[Tensor, ...] = ()  # final norm + lm_head, last pipeline stage
    tied_embeddings: bool = False
    multimodal: tuple[Tensor, ...] = ()  # vision tower + projector, first pipeline stage
    unloaded: tuple[Tensor, ...] = ()  # in the checkpoint, not loaded for serving (e.g. MTP heads)
    intermediate_size: int = 0
    moe: MoE | None = None
    torch_dtype: str | None = None
    quantization_config: dict[str, Any] | None = field(default=None, compare=False)  # a dict: kept out of hash/eq
    exact: bool = True
    declared_params: int | None = None
    stored_bytes: int | None = None  # exact bytes of the weights files (safetensors / GGUF), when read
    stored_precision: str | None = None  # the catalog precision those files are stored in, when known
    max_position_embeddings: int | None = None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def __hash__(self) -> int:
        return _cached_hash(self, lambda: hash((self.name, self.model_type, self.layers, self.embedding, self.head,
                                                self.multimodal, self.exact, self.declared_params, self.stored_bytes)))

    @cached_property
    def language_params(self) -> int:
        if not self.exact:
            return self.declared_params or 0
        return sum(layer.params for layer in self.layers) + _numel(self.embedding) + _numel(self.head)

    @cached_property
    def multimodal_params(self) -> int:
        return _numel(self.multimodal)

    @cached_property
    def loaded_params(self) -> int:
        """What a serving engine loads: language model plus vision tower and projector."""
        return self.language_params + self.multimodal_params

    @cached_property
    def checkpoint_params(self) -> int:
        """What the checkpoint holds (the published count): also modules engines skip."""
        return self.loaded_params + _numel(self.unloaded)

    @cached_property
    def attention_kinds(self) -> set[str]:
        return {layer.attention.kind for layer in self.layers}


def _cached_hash(obj: object, compute) -> int:
    """Hash a large frozen record once: the estimator's caches look architectures up many times per solve."""
    cached = obj.__dict__.get("_hash")
    if cached is None:
        cached = compute()
        object.__setattr__(obj, "_hash", cached)
    return cached


def _numel(tensors: tuple[Tensor, ...]) -> int:
    return sum(t.numel for t in tensors)


# ---------------------------------------------------------------------------------------------
# Reading a config


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a Hugging Face config.json (or the one inside a directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise PlannerInputError(f"model: no config.json at {str(p)!r}; give a catalog name or a path to config.json")
    raw = read_bytes(p, CONFIG)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # also bad UTF-8, a number past the int digit limit, deep nesting
        raise PlannerInputError(f"model: {str(p)!r} is not valid JSON ({exc.__class__.__name__}: {exc}); fix the file") from None
    if not isinstance(data, dict):
        raise PlannerInputError(f"model: {str(p)!r} must hold a JSON object, as config.json does")
    return data


class _Config:
    """Typed access to config.json keys with errors that name the missing key."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data = data
        self.where = where

    def __contains__(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.data.get(key)
        if value is None:
            if default is not None:
                return default
            raise PlannerInputError(f"{self.where}: missing key {key!r}; add it from the model's config.json")
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (isinstance(value, float) and not isfinite(value)) or int(value) != value):
            raise PlannerInputError(f"{self.where}: {key!r} must be a whole number, got {value!r}")
        if value < minimum:
            raise PlannerInputError(f"{self.where}: {key!r} must be at least {minimum}, got {value!r}")
        maximum = _KEY_MAXIMUM.get(key, MAX_CONFIG_NUMBER)
        if value > maximum:
            raise PlannerInputError(f"{self.where}: {key!r} is {value!r}, beyond any real model (at most {maximum:,}); "
                                    "fix the config")
        return int(value)

    def opt_int(self, key: str, minimum: int = 1) -> int | None:
        return self.int(key, minimum=minimum) if key in self else None

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise PlannerInputError(f"{self.where}: {key!r} must be true or false, got {value!r}")
        return value

    def list(self, key: str) -> list[Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise PlannerInputError(f"{self.where}: {key!r} must be a list, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int] | None:
        """A list of whole numbers: layer indexes, or one flag per layer."""
        values = self.list(key)
        if values is not None and any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise PlannerInputError(f"{self.where}: {key!r} must list whole numbers (layer indexes or flags)")
        return values

    def str(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise PlannerInputError(f"{self.where}: {key!r} must be a string, got {value!r}")
        return value


# Defaults of transformers config classes for keys that published config.json files omit
# (save_pretrained writes only non-default values for nested configs).
_CONFIG_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers/models/gemma3/configuration_gemma3.py, Gemma3TextConfig.__init__ (google/gemma-3-4b-it's
    # config.json, for one, leaves out the head counts)
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                    "max_position_embeddings": 131_072, "sliding_window_pattern": 6},
    # transformers/models/siglip/configuration_siglip.py, SiglipVisionConfig.__init__
    "siglip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                            "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16},
}

# HF default of tie_word_embeddings when a config leaves it out, per family (PretrainedConfig
# defaults to True; these families' config classes override it).
_UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "granite", "qwen3_moe", "qwen2_moe", "phi3",
                      "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4_text", "phi", "glm4"}


def architecture_from_config(data: dict[str, Any], name: str = "model") -> Architecture:
    """Turn a config.json dict into an Architecture, counting every tensor exactly."""
    if not isinstance(data, dict):
        raise PlannerInputError(f"{name}: config must be a JSON object")
    outer = _Config(data, f"{name} config")
    text_data = data.get("text_config")
    if text_data is not None and not isinstance(text_data, dict):
        raise PlannerInputError(f"{name} config: 'text_config' must be an object")
    text = _Config(text_data, f"{name} config text_config") if text_data else outer
    model_type = text.str("model_type") or outer.str("model_type")
    if model_type is None:
        raise PlannerInputError(f"{name} config: missing key 'model_type'; add it from the model's config.json")
    # config.json leaves out keys equal to the config class's default: fill them in first
    text.data = {**_CONFIG_CLASS_DEFAULTS.get(model_type, {}), **text.data}
    builder = _FAMILIES.get(model_type)
    if builder is None:
        raise UnsupportedArchitecture(
            f"{name}: architecture {model_type!r} is not one planner counts exactly "
            f"(supported: {', '.join(sorted(_FAMILIES))}); give its size with --params N"
        )
    arch = builder(text, model_type, name)
    multimodal: tuple[Tensor, ...] = ()
    if text_data is not None or "vision_config" in outer:
        multimodal = _multimodal_tensors(outer, arch.hidden_size, name)
    torch_dtype = text.str("torch_dtype") or outer.str("torch_dtype") or text.str("dtype") or outer.str("dtype")
    quant = data.get("quantization_config") or (text_data or {}).get("quantization_config")
    return replace(arch, multimodal=multimodal, torch_dtype=torch_dtype, quantization_config=quant)


# ---------------------------------------------------------------------------------------------
# Building blocks shared by the families


def _norm(name: str, size: int, bias: bool = False) -> list[Tensor]:
    out = [Tensor(f"{name}.weight", (size,), "norm")]
    if bias:
        out.append(Tensor(f"{name}.bias", (size,), "norm"))
    return out


def _linear(name: str, out_features: int, in_features: int, split: Split, bias: bool = False,
            role: Role = "linear", count: int = 1) -> list[Tensor]:
    tensors = [Tensor(f"{name}.weight", (out_features, in_features), role, split, count)]
    if bias:
        # A row-parallel layer adds its bias once, after the all-reduce: every rank holds it whole.
        bias_split: Split = "replicated" if split == "row" else split
        tensors.append(Tensor(f"{name}.bias", (out_features,), "bias", bias_split, count))
    return tensors


def _attention_tensors(c: _Config, hidden: int, heads: int, kv_heads: int, head_dim: int, *,
                       qkv_bias: bool, o_bias: bool, fused_qkv: bool = False,
                       qk_norm: bool = False) -> list[Tensor]:
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    if fused_qkv:
        tensors = _linear("self_attn.qkv_proj", q_out + 2 * kv_out, hidden, "column", qkv_bias)
    else:
        tensors = (_linear("self_attn.q_proj", q_out, hidden, "column", qkv_bias)
                   + _linear("self_attn.k_proj", kv_out, hidden, "kv", qkv_bias)
                   + _linear("self_attn.v_proj", kv_out, hidden, "kv", qkv_bias))
    tensors += _linear("self_attn.o_proj", hidden, q_out, "row", o_bias)
    if qk_norm:
        tensors += _norm("self_attn.q_norm", head_dim) + _norm("self_attn.k_norm", head_dim)
    return tensors


def _gated_mlp(prefix: str, hidden: int, intermediate: int, bias: bool = False, fused: bool = False,
               role: Role = "linear", count: int = 1) -> list[Tensor]:
    if fused:
        up = _linear(f"{prefix}.gate_up_proj", 2 * intermediate, hidden, "column", bias, role, count)
    else:
        up = (_linear(f"{prefix}.gate_proj", intermediate, hidden, "column", bias, role, count)
              + _linear(f"{prefix}.up_proj", intermediate, hidden, "column", bias, role, count))
    return up + _linear(f"{prefix}.down_proj", hidden, intermediate, "row", bias, role, count)


def _head_dim(c: _Config, hidden: int, heads: int) -> int:
    if "head_dim" in c:
        return c.int("head_dim")
    if hidden % heads:
        raise PlannerInputError(f"{c.where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}; add 'head_dim'")
    return hidden // heads


_SLIDING_TYPES = {"sliding_attention": "sliding", "chunked_attention": "sliding", "full_attention": "full",
                  "attention": "full", "linear_attention": "linear", "mamba": "mamba"}


def _layer_kinds(c: _Config, model_type: str, num_layers: int) -> list[tuple[LayerKind, int | None]]:
    """(kind, window) of each layer, from layer_types, sliding_window_pattern or the family rule."""
    window = c.opt_int("sliding_window")
    longest = c.opt_int("max_position_embeddings")
    if window is not None and longest is not None and window >= longest:
        window = None  # a window no shorter than the longest sequence is full attention (e.g. Phi-4-mini)
    layer_types = c.list("layer_types")
    if layer_types is not None:
        if len(layer_types) != num_layers:
            raise PlannerInputError(f"{c.where}: 'layer_types' has {len(layer_types)} entries for {num_layers} layers")
        kinds: list[tuple[LayerKind, int | None]] = []
        for i, layer_type in enumerate(layer_types):
            if not isinstance(layer_type, str):
                raise PlannerInputError(f"{c.where}: layer_types[{i}] must be a string such as 'full_attention', "
                                        f"got {layer_type!r}")
            kind = _SLIDING_TYPES.get(layer_type)
            if kind is None:
                raise UnsupportedArchitecture(f"{c.where}: layer_types[{i}] = {layer_type!r} is not a layer kind planner knows")
            if kind == "sliding":
                size = c.opt_int("attention_chunk_size") if layer_type == "chunked_attention" else window
                if size is None:
                    raise PlannerInputError(f"{c.where}: layer {i} is {layer_type} but 'sliding_window' is missing")
                kinds.append(("sliding", size))
            else:
                kinds.append((kind, None))  # type: ignore[arg-type]
        return kinds
    if model_type == "qwen3_next":
        # transformers Qwen3NextConfig: every full_attention_interval-th layer is full attention, the rest Gated DeltaNet
        interval = c.int("full_attention_interval", default=4)
        return [("full", None) if (i + 1) % interval == 0 else ("linear", None) for i in range(num_layers)]
    if window is None or model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not c.bool("use_sliding_window", False):
        return [("full", None)] * num_layers
    if model_type == "gemma2":
        # transformers Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2)
        return [("sliding", window) if i % 2 == 0 else ("full", None) for i in range(num_layers)]
    if model_type in ("gemma3_text", "gemma3"):
        # transformers Gemma3DecoderLayer (pre layer_types): sliding unless (i + 1) % pattern == 0
        pattern = c.int("sliding_window_pattern", default=6)
        return [("full", None) if (i + 1) % pattern == 0 else ("sliding", window) for i in range(num_layers)]
    # Mistral v0.1, Phi-3: one sliding window on every layer
    return [("sliding", window)] * num_layers


def _recurrent_state_elements(c: _Config, kind: LayerKind) -> int:
    """Values a linear-attention or Mamba layer keeps per sequence, whatever the context length.

    Shapes as vLLM allocates them (vllm/model_executor/layers/mamba/mamba_utils.py,
    MambaStateShapeCalculator): a convolution window of (kernel - 1) steps plus the recurrent state.
    """
    if kind == "linear":  # Gated DeltaNet (Qwen3-Next)
        k_heads, v_heads = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
        k_dim, v_dim = c.int("linear_key_head_dim"), c.int("linear_value_head_dim")
        conv = (2 * k_heads * k_dim + v_heads * v_dim) * (c.int("linear_conv_kernel_dim") - 1)
        return conv + v_heads * k_dim * v_dim
    # Mamba2 (Granite 4.0 H, Nemotron-H, Falcon-H1, ...)
    heads, head_dim = c.int("mamba_n_heads"), c.int("mamba_d_head")
    state, groups = c.int("mamba_d_state"), c.int("mamba_n_groups", default=1)
    conv = (heads * head_dim + 2 * groups * state) * (c.int("mamba_d_conv") - 1)
    return conv + heads * head_dim * state


def _attention_layouts(c: _Config, model_type: str, num_layers: int, kv_heads: int, head_dim: int,
                       recurrent_ok: bool = False) -> list[Attention]:
    layouts = []
    for i, (kind, window) in enumerate(_layer_kinds(c, model_type, num_layers)):
        if kind in ("linear", "mamba"):
            if not recurrent_ok:
                raise UnsupportedArchitecture(
                    f"{c.where}: layer {i} is a {kind} (recurrent-state) layer, whose weights planner does not count "
                    f"for model_type {model_type!r}; give the weights with --params N"
                )
            layouts.append(Attention(kind, state_elements=_recurrent_state_elements(c, kind)))
        else:
            layouts.append(Attention(kind, kv_heads, head_dim, head_dim, window))
    return layouts


def _embedding_and_head(c: _Config, model_type: str, hidden: int, vocab: int, *,
                        norm_bias: bool = False, head_bias: bool = False) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], bool]:
    tied = c.bool("tie_word_embeddings", model_type not in _UNTIED_BY_DEFAULT)
    embedding = (Tensor("embed_tokens.weight", (vocab, hidden), "embedding", "vocab"),)
    head = _norm("norm", hidden, norm_bias)
    if not tied:
        head += [Tensor("lm_head.weight", (vocab, hidden), "lm_head", "vocab")]
        if head_bias:
            head += [Tensor("lm_head.bias", (vocab,), "bias", "vocab")]
    return embedding, tuple(head), tied


# ---------------------------------------------------------------------------------------------
# Families


def _dense_decoder(c: _Config, model_type: str, name: str) -> Architecture:
    """Llama, Mistral, Granite, Qwen2/3, Gemma 1/2/3, Phi-3/4, Cohere, GLM-4 and Phi-2."""
    hidden, layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", default=heads)
    head_dim = _head_dim(c, hidden, heads)
    intermediate, vocab = c.int("intermediate_size"), c.int("vocab_size")

    qkv_bias = o_bias = mlp_bias = norm_bias = head_bias = fused_qkv = fused_mlp = qk_norm = False
    norms_per_layer = 2
    if model_type in ("llama", "granite"):
        qkv_bias = o_bias = c.bool("attention_bias", False)
        mlp_bias = c.bool("mlp_bias", False)
    elif model_type == "qwen2":
        qkv_bias = True  # Qwen2Attention: q/k/v projections always carry a bias, o_proj none
    elif model_type == "qwen3":
        qkv_bias = o_bias = c.bool("attention_bias", False)
        qk_norm = True
    elif model_type in ("gemma2",):
        norms_per_layer = 4
    elif model_type in ("gemma3_text", "gemma3"):
        norms_per_layer, qk_norm = 4, True
    elif model_type == "phi3":
        fused_qkv = fused_mlp = True
    elif model_type == "cohere":
        norms_per_layer = 1  # parallel attention and MLP behind one input_layernorm
        qkv_bias = o_bias = c.bool("attention_bias", False)
        qk_norm = c.bool("use_qk_norm", False)
    elif model_type == "glm4":
        qkv_bias = c.bool("attention_bias", True)
        fused_mlp, norms_per_layer = True, 4  # plus post_self_attn_layernorm and post_mlp_layernorm

    if model_type == "phi":
        return _phi(c, model_type, name, hidden, layers, heads, kv_heads, head_dim, intermediate, vocab)

    layer_tensors = _attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=qkv_bias, o_bias=o_bias,
                                       fused_qkv=fused_qkv, qk_norm=qk_norm)
    layer_tensors += _gated_mlp("mlp", hidden, intermediate, mlp_bias, fused_mlp)
    for i in range(norms_per_layer):
        layer_tensors += _norm(f"norm{i}", hidden, norm_bias)
    if model_type == "cohere" and qk_norm:
        # Cohere's q/k LayerNorms are per head: [heads, head_dim] and [kv_heads, head_dim]
        layer_tensors = [t for t in layer_tensors if "q_norm" not in t.name and "k_norm" not in t.name]
        layer_tensors += [Tensor("self_attn.q_norm.weight", (heads, head_dim), "norm"),
                          Tensor("self_attn.k_norm.weight", (kv_heads, head_dim), "norm")]
    attention = _attention_layouts(c, model_type, layers, kv_heads, head_dim)
    embedding, head, tied = _embedding_and_head(c, model_type, hidden, vocab, norm_bias=norm_bias, head_bias=head_bias)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(Layer(a, tuple(layer_tensors)) for a in attention), embedding=embedding, head=head,
        tied_embeddings=tied, intermediate_size=intermediate,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def _phi(c: _Config, model_type: str, name: str, hidden: int, layers: int, heads: int, kv_heads: int,
         head_dim: int, intermediate: int, vocab: int) -> Architecture:
    """Phi-1/1.5/2: LayerNorms with bias, biased projections, parallel attention and MLP."""
    layer_tensors = _attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=True, o_bias=True)
    layer_tensors = [Tensor(t.name.replace("o_proj", "dense"), t.shape, t.role, t.split) for t in layer_tensors]
    layer_tensors += _linear("mlp.fc1", intermediate, hidden, "column", True)
    layer_tensors += _linear("mlp.fc2", hidden, intermediate, "row", True)
    layer_tensors += _norm("input_layernorm", hidden, bias=True)
    attention = _attention_layouts(c, model_type, layers, kv_heads, head_dim)
    embedding, head, tied = _embedding_and_head(c, model_type, hidden, vocab, norm_bias=True, head_bias=True)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(Layer(a, tuple(layer_tensors)) for a in attention), embedding=embedding, head=head,
        tied_embeddings=tied, intermediate_size=intermediate,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def _moe_block(prefix: str, hidden: int, experts: int, expert_intermediate: int, *, router_bias: bool = False,
               expert_bias: bool = False, fused: bool = False) -> list[Tensor]:
    router = _linear(f"{prefix}.gate", experts, hidden, "replicated", router_bias, role="router")
    router = [Tensor(t.name, t.shape, "router", t.split) for t in router]
    return router + _gated_mlp(f"{prefix}.experts", hidden, expert_intermediate, expert_bias, fused,
                               role="expert", count=experts)


def _sparse_decoder(c: _Config, model_type: str, name: str) -> Architecture:
    """Mixtral, Qwen1.5/2-MoE (shared expert), Qwen3-MoE, gpt-oss and Llama 4 text."""
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", default=heads)
    head_dim = _head_dim(c, hidden, heads)
    vocab = c.int("vocab_size")
    experts = c.int("num_local_experts") if "num_local_experts" in c else c.int("num_experts")
    top_k = c.int("num_experts_per_tok")
    qkv_bias = o_bias = qk_norm = fused = expert_bias = router_bias = False
    if model_type == "qwen2_moe":
        qkv_bias = True
    elif model_type == "qwen3_moe":
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
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        expert_intermediate = c.int("moe_intermediate_size")
        dense_intermediate = c.int("intermediate_size", default=expert_intermediate)
        shared_intermediate = c.int("shared_expert_intermediate_size", default=0, minimum=0)
    else:
        expert_intermediate = dense_intermediate = c.int("intermediate_size")
        shared_intermediate = 0

    moe_layers = _moe_layer_indices(c, model_type, num_layers)
    attention = _attention_layouts(c, model_type, num_layers, kv_heads, head_dim)
    if model_type == "llama4_text" and c.list("layer_types") is None and "attention_chunk_size" in c:
        # Llama 4: rope layers use chunked local attention, every no_rope_layer_interval-th is global NoPE
        interval = c.int("no_rope_layer_interval", default=4)
        rope = c.int_list("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
        if len(rope) < num_layers:
            raise PlannerInputError(f"{c.where}: 'no_rope_layers' has {len(rope)} entries for {num_layers} layers")
        chunk = c.int("attention_chunk_size")
        attention = [Attention("sliding", kv_heads, head_dim, head_dim, chunk) if rope[i] else a
                     for i, a in enumerate(attention)]

    attn = _attention_tensors(c, hidden, heads, kv_heads, head_dim, qkv_bias=qkv_bias, o_bias=o_bias, qk_norm=qk_norm)
    if model_type == "gpt_oss":
        attn += [Tensor("self_attn.sinks", (heads,), "norm", "column")]
    norms = _norm("input_layernorm", hidden) + _norm("post_attention_layernorm", hidden)
    layers = []
    for i in range(num_layers):
        if i in moe_layers:
            mlp = _moe_block("mlp", hidden, experts, expert_intermediate, router_bias=router_bias,
                             expert_bias=expert_bias, fused=fused)
            if shared_intermediate:
                mlp += _gated_mlp("mlp.shared_expert", hidden, shared_intermediate, fused=fused and model_type != "llama4_text")
                if model_type == "qwen2_moe":
                    mlp += [Tensor("mlp.shared_expert_gate.weight", (1, hidden), "router")]
        else:
            mlp = _gated_mlp("mlp", hidden, dense_intermediate)
        layers.append(Layer(attention[i], tuple(attn + norms + mlp), is_moe=i in moe_layers))
    embedding, head, tied = _embedding_and_head(c, model_type, hidden, vocab)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied,
        intermediate_size=dense_intermediate,
        moe=MoE(experts, top_k, expert_intermediate, shared_intermediate),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


def _moe_layer_indices(c: _Config, model_type: str, num_layers: int) -> set[int]:
    if model_type in ("qwen2_moe", "qwen3_moe"):
        # transformers Qwen2MoeDecoderLayer: sparse unless listed in mlp_only_layers, every decoder_sparse_step-th
        step = c.int("decoder_sparse_step", default=1)
        dense = set(c.int_list("mlp_only_layers") or [])
        return {i for i in range(num_layers) if i not in dense and (i + 1) % step == 0}
    if model_type == "llama4_text":
        if c.int_list("moe_layers") is not None:
            return set(c.int_list("moe_layers") or [])
        step = c.int("interleave_moe_layer_step", default=1)
        return set(range(step - 1, num_layers, step))
    return set(range(num_layers))


def _deepseek(c: _Config, model_type: str, name: str) -> Architecture:
    """DeepSeek V2/V3 (and Kimi K2): MLA attention, first_k_dense_replace dense layers, shared + routed experts."""
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads, vocab = c.int("num_attention_heads"), c.int("vocab_size")
    q_lora = c.opt_int("q_lora_rank")
    kv_lora, rope_dim = c.int("kv_lora_rank"), c.int("qk_rope_head_dim")
    nope_dim, v_dim = c.int("qk_nope_head_dim"), c.int("v_head_dim")
    q_head = nope_dim + rope_dim
    attn: list[Tensor] = []
    if q_lora:
        attn += _linear("self_attn.q_a_proj", q_lora, hidden, "replicated")
        attn += _norm("self_attn.q_a_layernorm", q_lora)
        attn += _linear("self_attn.q_b_proj", heads * q_head, q_lora, "column")
    else:
        attn += _linear("self_attn.q_proj", heads * q_head, hidden, "column")
    attn += _linear("self_attn.kv_a_proj_with_mqa", kv_lora + rope_dim, hidden, "replicated")
    attn += _norm("self_attn.kv_a_layernorm", kv_lora)
    attn += _linear("self_attn.kv_b_proj", heads * (nope_dim + v_dim), kv_lora, "column")
    attn += _linear("self_attn.o_proj", hidden, heads * v_dim, "row")
    norms = _norm("input_layernorm", hidden) + _norm("post_attention_layernorm", hidden)

    experts, top_k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    expert_intermediate = c.int("moe_intermediate_size")
    shared = c.int("n_shared_experts", default=0, minimum=0) * expert_intermediate
    dense_intermediate = c.int("intermediate_size")
    first_dense = c.int("first_k_dense_replace", default=0, minimum=0)
    freq = c.int("moe_layer_freq", default=1)
    # noaux_tc routing (V3) keeps a per-expert score-correction bias next to the router weight
    router_bias = c.str("topk_method") == "noaux_tc"
    attention = Attention("mla", latent_dim=kv_lora + rope_dim)

    def moe_layer() -> list[Tensor]:
        mlp = _linear("mlp.gate", experts, hidden, "replicated", role="router")
        if router_bias:
            mlp += [Tensor("mlp.gate.e_score_correction_bias", (experts,), "router")]
        mlp += _gated_mlp("mlp.experts", hidden, expert_intermediate, role="expert", count=experts)
        if shared:
            mlp += _gated_mlp("mlp.shared_experts", hidden, shared)
        return mlp

    layers = []
    moe_indices = set()
    for i in range(num_layers):
        if i >= first_dense and i % freq == 0:
            moe_indices.add(i)
            layers.append(Layer(attention, tuple(attn + norms + moe_layer()), is_moe=True))
        else:
            layers.append(Layer(attention, tuple(attn + norms + _gated_mlp("mlp", hidden, dense_intermediate))))
    embedding, head, tied = _embedding_and_head(c, model_type, hidden, vocab)
    # Multi-token-prediction modules ship in the checkpoint (each a MoE decoder layer plus its own
    # embedding, projection and head copy); engines load them only for speculative decoding.
    mtp: list[Tensor] = []
    for j in range(c.int("num_nextn_predict_layers", default=0, minimum=0)):
        p = f"mtp{j}"
        mtp += [Tensor(f"{p}.{t.name}", t.shape, t.role, t.split, t.count) for t in attn + norms + moe_layer()]
        mtp += _norm(f"{p}.enorm", hidden) + _norm(f"{p}.hnorm", hidden) + _norm(f"{p}.shared_head.norm", hidden)
        mtp += _linear(f"{p}.eh_proj", hidden, 2 * hidden, "replicated")
        mtp += [Tensor(f"{p}.embed_tokens.weight", (vocab, hidden), "embedding", "vocab"),
                Tensor(f"{p}.shared_head.head.weight", (vocab, hidden), "lm_head", "vocab")]
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
        layers=tuple(layers), embedding=embedding, head=head, tied_embeddings=tied, unloaded=tuple(mtp),
        intermediate_size=dense_intermediate, moe=MoE(experts, top_k, expert_intermediate, shared),
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


_FAMILIES = {
    **{t: _dense_decoder for t in ("llama", "mistral", "granite", "qwen2", "qwen3", "gemma", "gemma2",
                                   "gemma3_text", "gemma3", "phi3", "cohere", "glm4", "phi")},
    **{t: _sparse_decoder for t in ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "llama4_text")},
    **{t: _deepseek for t in ("deepseek_v2", "deepseek_v3", "kimi_k2")},
}


# ---------------------------------------------------------------------------------------------
# Vision towers and projectors of multimodal checkpoints


def _multimodal_tensors(outer: _Config, text_hidden: int, name: str) -> tuple[Tensor, ...]:
    vision_data = outer.data.get("vision_config")
    if vision_data is None:
        return ()
    if not isinstance(vision_data, dict):
        raise PlannerInputError(f"{name} config: 'vision_config' must be an object")
    v = _Config(vision_data, f"{name} config vision_config")
    vision_type = v.str("model_type")
    v.data = {**_CONFIG_CLASS_DEFAULTS.get(vision_type or "", {}), **v.data}
    tower = _VISION_TOWERS.get(vision_type or "")
    if tower is None:
        raise UnsupportedArchitecture(
            f"{name}: vision tower {vision_type!r} is not one planner counts exactly "
            f"(supported: {', '.join(sorted(_VISION_TOWERS))}); give the total with --params N"
        )
    return tuple(tower(v, outer, text_hidden))


def _vit_layer(prefix: str, hidden: int, intermediate: int) -> list[Tensor]:
    """A pre-norm ViT block with biased projections and LayerNorms (SigLIP, Llama 4 vision)."""
    t = _norm(f"{prefix}.layer_norm1", hidden, bias=True) + _norm(f"{prefix}.layer_norm2", hidden, bias=True)
    for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
        split: Split = "row" if proj == "out_proj" else "column"
        t += _linear(f"{prefix}.self_attn.{proj}", hidden, hidden, split, bias=True)
    t += _linear(f"{prefix}.mlp.fc1", intermediate, hidden, "column", bias=True)
    t += _linear(f"{prefix}.mlp.fc2", hidden, intermediate, "row", bias=True)
    return t


def _as_vision(tensors: list[Tensor], role: Role = "vision") -> list[Tensor]:
    return [Tensor(f"vision.{t.name}" if role == "vision" else f"projector.{t.name}", t.shape, role, t.split, t.count)
            for t in tensors]


def _siglip(v: _Config, outer: _Config, text_hidden: int) -> list[Tensor]:
    """Gemma 3's SigLIP tower (no pooling head) and its projector (transformers Gemma3MultiModalProjector)."""
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    patch, channels, image = v.int("patch_size"), v.int("num_channels", default=3), v.int("image_size")
    tower = [Tensor("patch_embedding.weight", (hidden, channels, patch, patch), "vision"),
             Tensor("patch_embedding.bias", (hidden,), "vision"),
             Tensor("position_embedding.weight", ((image // patch) ** 2, hidden), "vision")]
    for i in range(v.int("num_hidden_layers")):
        tower += _vit_layer(f"layers.{i}", hidden, inter)
    tower += _norm("post_layernorm", hidden, bias=True)
    projector = [Tensor("mm_input_projection_weight", (hidden, text_hidden), "projector"),
                 Tensor("mm_soft_emb_norm.weight", (hidden,), "projector")]
    return _as_vision(tower) + _as_vision(projector, "projector")


def _pixtral(v: _Config, outer: _Config, text_hidden: int) -> list[Tensor]:
    """Mistral 3's Pixtral tower (RMSNorm, gated MLP, 2-D RoPE) and patch-merger projector."""
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    patch, channels = v.int("patch_size"), v.int("num_channels", default=3)
    tower = [Tensor("patch_conv.weight", (hidden, channels, patch, patch), "vision")] + _norm("ln_pre", hidden)
    for i in range(v.int("num_hidden_layers")):
        p = f"transformer.layers.{i}"
        tower += _norm(f"{p}.attention_norm", hidden) + _norm(f"{p}.ffn_norm", hidden)
        for proj in ("q_proj", "k_proj", "v_proj"):
            tower += _linear(f"{p}.attention.{proj}", hidden, hidden, "column")
        tower += _linear(f"{p}.attention.o_proj", hidden, hidden, "row")
        tower += _gated_mlp(f"{p}.feed_forward", hidden, inter)
    merge = outer.int("spatial_merge_size", default=2)
    bias = outer.bool("multimodal_projector_bias", False)
    projector = (_norm("norm", hidden)
                 + _linear("patch_merger.merging_layer", hidden, hidden * merge * merge, "replicated")
                 + _linear("linear_1", text_hidden, hidden, "column", bias)
                 + _linear("linear_2", text_hidden, text_hidden, "row", bias))
    return _as_vision(tower) + _as_vision(projector, "projector")


def _llama4_vision(v: _Config, outer: _Config, text_hidden: int) -> list[Tensor]:
    """Llama 4's ViT, its pixel-shuffle adapter and the multimodal projector (transformers modeling_llama4)."""
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    patch, channels, image = v.int("patch_size"), v.int("num_channels", default=3), v.int("image_size")
    num_patches = (image // patch) ** 2
    tower = [Tensor("patch_embedding.linear.weight", (hidden, channels * patch * patch), "vision"),
             Tensor("class_embedding", (hidden,), "vision"),
             Tensor("positional_embedding_vlm", (num_patches + 1, hidden), "vision")]
    tower += _norm("layernorm_pre", hidden, bias=True) + _norm("layernorm_post", hidden, bias=True)
    for i in range(v.int("num_hidden_layers")):
        tower += _vit_layer(f"model.layers.{i}", hidden, inter)
    tower += _linear("vision_adapter.mlp.fc1", v.int("projector_input_dim"), inter, "column")
    tower += _linear("vision_adapter.mlp.fc2", v.int("projector_output_dim"), v.int("projector_output_dim"), "row")
    projector = _linear("linear_1", text_hidden, v.int("vision_output_dim"), "column")
    return _as_vision(tower) + _as_vision(projector, "projector")


_VISION_TOWERS = {
    "siglip_vision_model": _siglip,
    "pixtral": _pixtral,
    "llama4_vision_model": _llama4_vision,
}


# ---------------------------------------------------------------------------------------------
# A model known only by its size (the seed's method)


def size_only_architecture_from_config(data: dict[str, Any], name: str, params: int) -> Architecture:
    """An architecture planner cannot count: weights from --params, cache from the config (layer kinds included)."""
    if not isinstance(data, dict):
        raise PlannerInputError(f"{name}: config must be a JSON object")
    text_data = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    c = _Config(text_data, f"{name} config")
    model_type = c.str("model_type") or _Config(data, name).str("model_type") or "unknown"
    hidden, layers = c.int("hidden_size"), c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", default=heads)
    head_dim = _head_dim(c, hidden, heads)
    attention = _attention_layouts(c, model_type, layers, kv_heads, head_dim, recurrent_ok=True)
    return Architecture(
        name=name, model_type=model_type, hidden_size=hidden, num_attention_heads=heads,
        vocab_size=c.int("vocab_size", default=0, minimum=0), layers=tuple(Layer(a) for a in attention),
        torch_dtype=c.str("torch_dtype") or c.str("dtype") or _Config(data, name).str("torch_dtype"),
        quantization_config=data.get("quantization_config"), exact=False, declared_params=params,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
    )


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
    "Architecture", "Attention", "Layer", "MoE", "Tensor", "UnsupportedArchitecture",
    "architecture_from_config", "architecture_from_size", "load_config_file", "size_only_architecture_from_config",
]
