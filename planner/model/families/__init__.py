"""Model families planner counts exactly, one module per family, registered by config model_type.

Importing the package registers every family module (registry.FAMILIES, registry.VISION_TOWERS).
"""

from planner.model.families import deepseek, deepseek_v4, dense, gemma3n, gemma3n_towers, gemma4, glm, kimi_linear, mimo, minimax, minimax_m3, nemotron, nemotron_nas, qwen_hybrid, sparse, step, vision  # noqa: F401  (registration)
from planner.model.families.registry import FAMILIES, VISION_TOWERS

__all__ = ["FAMILIES", "VISION_TOWERS"]
