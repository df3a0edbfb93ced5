"""Reading config.json: typed access to its keys, errors naming the key, defaults its writers leave out."""

from __future__ import annotations

import json
from math import isfinite
from pathlib import Path
from typing import Any

from planner.errors import PlannerInputError
from planner.files import CONFIG, read_bytes

# Bounds on config.json numbers: a value past them is damage or a typo, and would otherwise hang (a
# billion layers built one by one) or overflow (float arithmetic on astronomic sizes).
MAX_LAYERS = 1024  # the deepest published LLMs have under 200 decoder layers
MAX_HEADS = 65_536  # the widest have 128 attention heads; --tp advice lists the divisors of this count
MAX_CONFIG_NUMBER = 2**31 - 1  # transformers configs hold dimensions and counts that fit an int32
KEY_MAXIMUM = {"num_hidden_layers": MAX_LAYERS, "num_nextn_predict_layers": MAX_LAYERS,
               "mtp_num_hidden_layers": MAX_LAYERS, "depth": MAX_LAYERS, "vt_num_hidden_layers": MAX_LAYERS,
               "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a Hugging Face config.json (or the one inside a directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists() and not p.is_symlink():
        raise PlannerInputError(f"model: no config.json at {str(p)!r}; give a catalog name or a path to config.json")
    raw = read_bytes(p, CONFIG)  # refuses FIFOs, devices, folders and oversized files in one line
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # also bad UTF-8, a number past the int digit limit, deep nesting
        raise PlannerInputError(f"model: {str(p)!r} is not valid JSON ({exc.__class__.__name__}: {exc}); fix the file") from None
    if not isinstance(data, dict):
        raise PlannerInputError(f"model: {str(p)!r} must hold a JSON object, as config.json does")
    return data


class Config:
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
        maximum = KEY_MAXIMUM.get(key, MAX_CONFIG_NUMBER)
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
        if len(value) > MAX_LAYERS:  # per-layer lists (layer_types, block_configs, ...): one entry per layer at most
            raise PlannerInputError(f"{self.where}: {key!r} has {len(value):,} entries, beyond any real model "
                                    f"(at most {MAX_LAYERS:,}); fix the config")
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
CONFIG_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers/models/gemma3/configuration_gemma3.py, Gemma3TextConfig.__init__ (google/gemma-3-4b-it's
    # config.json, for one, leaves out the head counts)
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                    "max_position_embeddings": 131_072, "sliding_window_pattern": 6},
    # transformers 5.25 Ernie4_5Config: head_dim 128 unless the config says otherwise (ERNIE-4.5-0.3B: 16 heads of
    # 128 on a hidden size of 1024)
    "ernie4_5": {"head_dim": 128},
    # Olmo3Config and Exaone4Config: a 4,096-token window, every 4th layer full attention (layer_kinds)
    "olmo3": {"sliding_window": 4096},
    "exaone4": {"sliding_window": 4096, "sliding_window_pattern": 4},
    "cohere2": {"sliding_window": 4096, "sliding_window_pattern": 4},  # Cohere2Config, the same rule
    "cohere2_moe": {"sliding_window": 4096},  # Cohere2MoeConfig (layer_kinds: its prefix and rest patterns)
    "exaone_moe": {"sliding_window": 4096, "sliding_window_pattern": 4},  # ExaoneMoeConfig, the same rule
    # AfmoeConfig: a 1,024-token window, every global_attn_every_n_layers-th layer full attention
    "afmoe": {"sliding_window": 1024, "global_attn_every_n_layers": 4, "head_dim": 128},
    # SarvamMoEConfig and Param2MoeConfig: GLM-4-MoE's config with per-head q/k norms on and 64-wide heads
    "sarvam_moe": {"use_qk_norm": True, "head_dim": 64},
    "param2moe": {"use_qk_norm": True, "head_dim": 64},
    # GraniteMoeHybridConfig and FalconH1Config (5.25): every size their classes default (save_pretrained writes
    # the keys that differ from them); an explicit null mamba_d_ssm is Falcon-H1's mamba_expand x hidden_size
    "granitemoehybrid": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                         "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 2048,
                         "num_local_experts": 8, "num_experts_per_tok": 2, "shared_intermediate_size": 1024,
                         "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_head": "auto",
                         "mamba_d_conv": 4, "mamba_expand": 2},
    "falcon_h1": {"vocab_size": 128000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192,
                  "mamba_d_ssm": 1024, "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256,
                  "mamba_d_head": "auto", "mamba_d_conv": 4, "mamba_expand": 2},
}

# The same for vision configs, keyed by the vision config's model_type.
VISION_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers/models/qwen3_vl/configuration_qwen3_vl.py, Qwen3VLVisionConfig (5.25; Qwen3.5's vision config
    # class has the same defaults and no deepstack mergers)
    **{t: {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
           "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
           "num_position_embeddings": 2304} for t in ("qwen3_5", "qwen3_5_vision", "qwen3_5_moe", "qwen3_5_moe_vision")},
    **{t: {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
           "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
           "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]}
       for t in ("qwen3_vl", "qwen3_vl_vision", "qwen3_vl_moe", "qwen3_vl_moe_vision")},
    # transformers/models/step3p7/configuration_step3p7.py, Step3p7VisionConfig (5.24; hub configs spell the first
    # two width and layers)
    "step3p7": {"hidden_size": 1536, "num_hidden_layers": 47, "num_channels": 3, "image_size": 728, "patch_size": 14,
                "mlp_ratio": 8960 / 1536},
    # transformers/models/siglip/configuration_siglip.py, SiglipVisionConfig.__init__
    "siglip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                            "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16},
}

# HF default of tie_word_embeddings when a config leaves it out, per family (PretrainedConfig
# defaults to True; these families' config classes override it).
UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "granite", "qwen3_moe", "qwen2_moe", "phi3",
                      "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4_text", "phi", "glm4", "qwen3_next",
                     "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_vl", "qwen3_vl_text",
                     "qwen3_vl_moe", "deepseek_v32", "glm_moe_dsa", "kimi_k25", "glm4_moe", "minimax_m2",
                     "nemotron_h", "nemotron-nas", "mimo_v2_flash", "mimo", "glm4_moe_lite", "minimax_m3",
                     "minimax_m3_vl", "minimax_m3_vl_text", "deepseek_v4", "kimi_linear", "ministral3", "mistral4",
                     "step3p5", "step3p7", "seed_oss", "olmo2", "olmo3", "olmoe", "exaone4", "apertus", "arcee",
                     "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "phimoe", "granitemoe",
                     "granitemoeshared", "glm4v", "glm4v_text", "glm4v_moe", "glm4v_moe_text", "hy_v3",
                     "exaone_moe", "solar_open", "afmoe", "jais2", "sarvam_moe", "granitemoehybrid", "falcon_h1"}

