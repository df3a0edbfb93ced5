"""Which builder counts which config: family builders by model_type, vision towers by their model_type."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from planner.model.families.config import Config
from planner.model.families.core import Architecture, Tensor

# (text config, model_type, model name) -> the language model's Architecture
Builder = Callable[[Config, str, str], Architecture]
# (vision config, outer config, text hidden size) -> vision tower and projector tensors
Tower = Callable[[Config, Config, int], list[Tensor]]

FAMILIES: dict[str, Builder] = {}
VISION_TOWERS: dict[str, Tower] = {}
F = TypeVar("F", bound=Callable[..., Any])


def _registrar(table: dict[str, Any]) -> Callable[..., Callable[[F], F]]:
    def names(*model_types: str) -> Callable[[F], F]:
        def register(counter: F) -> F:
            for model_type in model_types:
                table[model_type] = counter
            return counter
        return register
    return names


family = _registrar(FAMILIES)  # @family("llama", ...) over a Builder
vision_tower = _registrar(VISION_TOWERS)  # @vision_tower("siglip_vision_model", ...) over a Tower
