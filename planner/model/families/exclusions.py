"""Modules a quantized checkpoint leaves in 16-bit, from its quantization_config.

ModelOpt (NVFP4 / FP8) and compressed-tensors list them under `ignore` (ModelOpt's hf_quant_config.json
spells it `exclude_modules`), transformers' FP8 configs under `modules_to_not_convert`: exact module
names or fnmatch-style globs over the checkpoint's full names ("lm_head", "*.mlp.shared_expert.*",
"model.language_model.layers.0.linear_attn*"), and, in compressed-tensors, regular expressions marked
"re:" and matched from the start of the name ("re:.*self_attn.*"). Each layer tensor is matched under the
module paths checkpoints use for decoder layers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fnmatch import translate
from typing import Any

from planner.errors import PlannerInputError
from planner.model.families.core import Architecture, Layer, Tensor

EXCLUSION_KEYS = ("ignore", "exclude_modules", "modules_to_not_convert")
# where decoder layers live: text models, multimodal wrappers, Nemotron-H, vLLM-style names
LAYER_PATHS = ("model.layers.{i}.", "model.language_model.layers.{i}.", "language_model.model.layers.{i}.",
               "backbone.layers.{i}.")
OUTSIDE_PATHS = ("model.", "model.language_model.", "language_model.model.", "backbone.", "")
# A real list holds one entry per excluded module (a few thousand at most) and a handful of globs; exact names
# are looked up in a set, globs matched as one regex, which stays fast only while they are few.
MAX_NAMES = 1_000_000
MAX_GLOBS = 2_000
GLOB_CHARS = frozenset("*?[")
REGEX_PREFIX = "re:"
# a file's regex must stay cheap to run on every tensor name: short, no quantified group ((a+)+ backtracks
# exponentially), at most two unbounded repeats (each one multiplies the work by the name's length)
MAX_REGEX_CHARS = 256
QUANTIFIED_GROUP = re.compile(r"\)[*+?{]")
UNBOUNDED = re.compile(r"(?<!\\)[*+]")
MAX_UNBOUNDED = 2


@dataclass(frozen=True)
class Exclusions:
    """The modules a checkpoint keeps unquantized: exact names, and globs or regexes as one pattern."""

    names: frozenset[str]
    globs: re.Pattern[str] | None

    def match(self, name: str) -> bool:
        return name in self.names or (self.globs is not None and self.globs.match(name) is not None)


def exclusions(quantization_config: Any, where: str) -> Exclusions | None:
    if not isinstance(quantization_config, dict):
        return None
    entries: list[str] = []
    for key in EXCLUSION_KEYS:
        value = quantization_config.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) > MAX_NAMES:
            raise PlannerInputError(f"{where}: quantization_config {key!r} must list module names, got {value!r:.80}")
        entries += value
    if not entries:
        return None
    regexes = [e[len(REGEX_PREFIX):] for e in entries if e.startswith(REGEX_PREFIX)]
    globs = [translate(e) for e in entries if not e.startswith(REGEX_PREFIX) and GLOB_CHARS & set(e)]
    if len(globs) + len(regexes) > MAX_GLOBS:
        raise PlannerInputError(f"{where}: quantization_config lists {len(globs) + len(regexes):,} wildcard module "
                                f"patterns (at most {MAX_GLOBS:,}); list the modules by name")
    for regex in regexes:
        if (len(regex) > MAX_REGEX_CHARS or QUANTIFIED_GROUP.search(regex)
                or len(UNBOUNDED.findall(regex)) > MAX_UNBOUNDED):
            raise PlannerInputError(f"{where}: quantization_config pattern {REGEX_PREFIX + regex!r:.100} is too complex "
                                    "to match safely; spell the modules out")
    try:
        pattern = re.compile("|".join([*globs, *(f"(?:{r})" for r in regexes)])) if globs or regexes else None
    except re.error as exc:
        raise PlannerInputError(f"{where}: quantization_config holds an invalid module pattern ({exc})") from None
    return Exclusions(frozenset(entries), pattern)


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name


def _mark(tensors: tuple[Tensor, ...], paths: list[str], excluded: Exclusions) -> tuple[Tensor, ...]:
    out = []
    for t in tensors:
        names = [p + n for p in paths for n in (t.name, _module(t.name))]
        out.append(replace(t, kept_unquantized=True) if any(excluded.match(n) for n in names) else t)
    return tuple(out)


def apply_exclusions(arch: Architecture, where: str) -> Architecture:
    """Mark the tensors the checkpoint's quantization_config keeps unquantized."""
    excluded = exclusions(arch.quantization_config, where)
    if excluded is None:
        return arch
    layers = tuple(Layer(layer.attention, _mark(layer.tensors, [p.format(i=i) for p in LAYER_PATHS], excluded),
                         layer.is_moe) for i, layer in enumerate(arch.layers))
    outside = list(OUTSIDE_PATHS)
    return replace(arch, layers=layers, embedding=_mark(arch.embedding, outside, excluded),
                   head=_mark(arch.head, outside, excluded))
