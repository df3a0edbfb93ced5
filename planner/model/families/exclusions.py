"""Modules a quantized checkpoint leaves in 16-bit, from its quantization_config.

ModelOpt (NVFP4 / FP8) and compressed-tensors list them under `ignore` (ModelOpt's hf_quant_config.json
spells it `exclude_modules`), transformers' FP8 configs under `modules_to_not_convert`: exact module
names or fnmatch-style globs over the checkpoint's full names ("lm_head", "*.mlp.shared_expert.*",
"model.language_model.layers.0.linear_attn*"). Each layer tensor is matched under the module paths
checkpoints use for decoder layers.
"""

from __future__ import annotations

import re
from dataclasses import replace
from fnmatch import translate
from typing import Any

from planner.errors import PlannerInputError
from planner.model.families.core import Architecture, Layer, Tensor

EXCLUSION_KEYS = ("ignore", "exclude_modules", "modules_to_not_convert")
# where decoder layers live: text models, multimodal wrappers, Nemotron-H, vLLM-style names
LAYER_PATHS = ("model.layers.{i}.", "model.language_model.layers.{i}.", "language_model.model.layers.{i}.",
               "backbone.layers.{i}.")
OUTSIDE_PATHS = ("model.", "model.language_model.", "language_model.model.", "backbone.", "")
MAX_PATTERNS = 100_000  # a real list holds one entry per excluded module: a few thousand at most


def exclusion_pattern(quantization_config: Any, where: str) -> re.Pattern[str] | None:
    if not isinstance(quantization_config, dict):
        return None
    entries: list[str] = []
    for key in EXCLUSION_KEYS:
        value = quantization_config.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) > MAX_PATTERNS:
            raise PlannerInputError(f"{where}: quantization_config {key!r} must list module names, got {value!r:.80}")
        entries += value
    if not entries:
        return None
    return re.compile("|".join(translate(e) for e in entries))


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name


def _mark(tensors: tuple[Tensor, ...], paths: list[str], pattern: re.Pattern[str]) -> tuple[Tensor, ...]:
    out = []
    for t in tensors:
        names = [p + n for p in paths for n in (t.name, _module(t.name))]
        out.append(replace(t, kept_unquantized=True) if any(pattern.match(n) for n in names) else t)
    return tuple(out)


def apply_exclusions(arch: Architecture, where: str) -> Architecture:
    """Mark the tensors the checkpoint's quantization_config keeps unquantized."""
    pattern = exclusion_pattern(arch.quantization_config, where)
    if pattern is None:
        return arch
    layers = tuple(Layer(layer.attention, _mark(layer.tensors, [p.format(i=i) for p in LAYER_PATHS], pattern),
                         layer.is_moe) for i, layer in enumerate(arch.layers))
    outside = list(OUTSIDE_PATHS)
    return replace(arch, layers=layers, embedding=_mark(arch.embedding, outside, pattern),
                   head=_mark(arch.head, outside, pattern))
