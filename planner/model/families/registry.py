"""Which builder counts which config: family builders by model_type, vision towers by their model_type."""

from __future__ import annotations

from typing import Callable

from planner.model.families.config import Config
from planner.model.families.core import Architecture, Tensor

# (text config, model_type, model name) -> the language model's Architecture
Builder = Callable[[Config, str, str], Architecture]
# (vision config, outer config, text hidden size) -> vision tower and projector tensors
Tower = Callable[[Config, Config, int], list[Tensor]]

FAMILIES: dict[str, Builder] = {}
VISION_TOWERS: dict[str, Tower] = {}


def family(*model_types: str) -> Callable[[Builder], Builder]:
    def register(builder: Builder) -> Builder:
        for model_type in model_types:
            FAMILIES[model_type] = builder
        return builder
    return register


def vision_tower(*model_types: str) -> Callable[[Tower], Tower]:
    def register(tower: Tower) -> Tower:
        for model_type in model_types:
            VISION_TOWERS[model_type] = tower
        return tower
    return register
