"""Which builder counts which config: family builders by model_type, vision towers by their model_type.

The tables name each builder by its module and function, and a family's module is imported the first time a
config of one of its types is counted: a command loads the family it counts, not all of them (importing every
family module cost about 2 ms of `planner estimate`, python -X importtime and best-of-30 runs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import Callable

from planner.model.families.config import Config
from planner.model.families.core import Architecture, Tensor

# (text config, model_type, model name) -> the language model's Architecture
Builder = Callable[[Config, str, str], Architecture]
# (vision config, outer config, text hidden size) -> vision tower and projector tensors
Tower = Callable[[Config, Config, int], list[Tensor]]

# "module.function" of planner.model.families -> the config model_types it counts
FAMILY_BUILDERS: dict[str, tuple[str, ...]] = {
    "dense.dense_decoder": ("llama", "mistral", "ministral3", "granite", "qwen2", "qwen3", "gemma", "gemma2",
                            "gemma3_text", "gemma3", "phi3", "cohere", "glm4", "phi", "qwen3_vl_text", "mimo",
                            "seed_oss", "olmo2", "olmo3", "exaone4", "smollm3", "ernie4_5", "apertus", "arcee",
                            "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "cohere2", "starcoder2",
                            "glm4v", "glm4v_text", "jais2"),
    "sparse.sparse_decoder": ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "llama4_text", "qwen3_vl_moe_text",
                              "olmoe", "ernie4_5_moe", "phimoe", "granitemoe", "granitemoeshared", "hy_v3",
                              "exaone_moe", "solar_open", "afmoe", "cohere2_moe"),
    "deepseek.deepseek": ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "glm4_moe_lite",
                          "mistral4"),
    "deepseek_v4.deepseek_v4": ("deepseek_v4",),
    "gemma3n.gemma3n": ("gemma3n", "gemma3n_text"),
    "gemma4.gemma4": ("gemma4_text", "gemma4"),
    "glm.glm4_moe": ("glm4_moe", "glm4v_moe", "glm4v_moe_text", "sarvam_moe", "param2moe"),
    "falcon_h1.falcon_h1": ("falcon_h1",),
    "granite_hybrid.granite_moe_hybrid": ("granitemoehybrid",),
    "kimi_linear.kimi_linear": ("kimi_linear",),
    "lfm2.lfm2": ("lfm2", "lfm2_moe"),
    "mimo.mimo_v2_flash": ("mimo_v2_flash",),
    "minimax.minimax_m2": ("minimax_m2",),
    "minimax_m3.minimax_m3": ("minimax_m3", "minimax_m3_vl", "minimax_m3_vl_text"),
    "nemotron.nemotron_h": ("nemotron_h",),
    "nemotron_nas.nemotron_nas": ("nemotron-nas",),
    "qwen_hybrid.qwen_hybrid": ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
    "step.step3p5": ("step3p5",),
}
# "module.function" -> the vision config model_types (or the model's own, see vision.multimodal_tensors) it counts
TOWER_BUILDERS: dict[str, tuple[str, ...]] = {
    "vision.siglip": ("siglip_vision_model",),
    "vision.pixtral": ("pixtral",),
    "vision.llama4_vision": ("llama4_vision_model",),
    "vision.qwen3_vision": ("qwen3_vl", "qwen3_vl_vision", "qwen3_vl_moe", "qwen3_vl_moe_vision",
                            "qwen3_5", "qwen3_5_vision", "qwen3_5_moe", "qwen3_5_moe_vision"),
    "vision.moonvit": ("kimi_k25",),
    "vision.qwen2_vision": ("qwen2_vl", "qwen2_vl_vision"),
    "vision.qwen2_5_vision": ("qwen2_5_vl", "qwen2_5_vl_vision"),
    "vision.glm4v_vision": ("glm4v", "glm4v_vision", "glm4v_moe", "glm4v_moe_vision"),
    "gemma3n_towers.gemma3n_towers": ("gemma3n",),
    "gemma4.gemma4_vision": ("gemma4_vision",),
    "kimi_linear.moonvit3d": ("kimi_k3",),
    "minimax_m3.minimax_m3_vision": ("minimax_m3_vl",),
    "step.step3p7_vision": ("step3p7",),
}


class BuilderTable(Mapping[str, Callable]):
    """model_type -> builder, importing the builder's module on its first lookup."""

    def __init__(self, builders: dict[str, tuple[str, ...]]) -> None:
        self._where = {model_type: where for where, model_types in builders.items() for model_type in model_types}

    def __getitem__(self, model_type: str) -> Callable:
        module, function = self._where[model_type].rsplit(".", 1)
        return getattr(import_module(f"{__package__}.{module}"), function)

    def __contains__(self, model_type: object) -> bool:
        return model_type in self._where  # without importing the module

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


FAMILIES: Mapping[str, Builder] = BuilderTable(FAMILY_BUILDERS)
VISION_TOWERS: Mapping[str, Tower] = BuilderTable(TOWER_BUILDERS)


def closest_counted(model_type: str, table: Mapping[str, Callable], noun: str) -> str:
    """What an unknown-type error says of the types planner counts: the nearest ones, not the whole list."""
    # imported by the error alone (~1 ms of every command otherwise)
    from difflib import get_close_matches

    close = get_close_matches(model_type, list(table), n=3)
    return (f"the closest of the {len(table)} it counts: {', '.join(close)}" if close
            else f"it counts {len(table)} {noun}, README 'How the estimate is made'")
