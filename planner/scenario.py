"""The scenario file: what to serve, how much of it, on what, and at what price. Schema and validation.

Every key is checked: unknown or misspelt keys and wrong types are errors naming the key path
(`workload.context.max: ...`). Names (GPUs, precisions, providers) are checked against the
catalogs when the scenario is resolved, so the message can suggest the closest names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import PlannerInputError

Quality = Literal["lossless", "near-lossless", "small loss", "noticeable loss"]
QUALITY_ORDER: tuple[str, ...] = ("lossless", "near-lossless", "small loss", "noticeable loss")
Market = Literal["on-demand", "spot", "any"]

_TOKENS_RE = re.compile(r"^\s*(\d+)\s*([kKmM]?)\s*$")
MAX_SEARCH_VALUES = 64


def parse_tokens(value: Any) -> int:
    """A token count: 8192, or '8K' / '128k' (K = 1024, as context lengths are quoted)."""
    if isinstance(value, bool):
        raise ValueError("must be a whole number of tokens, e.g. 8192 or 8K")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and (m := _TOKENS_RE.match(value)):
        n = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2}[m.group(2).lower()]
    else:
        raise ValueError(f"must be a whole number of tokens, e.g. 8192 or 8K (got {value!r})")
    if n < 1:
        raise ValueError(f"must be at least 1 (got {value!r})")
    return n


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class SearchRange(_Strict):
    """At least `min`, prefer up to `max`: the solver tries min, the powers of two between, and max."""

    min: int
    max: int

    def values(self) -> list[int]:
        values = {self.min, self.max}
        power = 1
        while power < self.max:
            if power > self.min:
                values.add(power)
            power *= 2
        return sorted(values)


def search_values(value: Any) -> tuple[int, ...]:
    """A fixed value (8192, "8K"), a list to try, or {min, max}: the sorted token counts to search."""
    if isinstance(value, dict):
        unknown = set(value) - {"min", "max"}
        if unknown:
            raise ValueError(f"unknown key {sorted(unknown)[0]!r} in a range; a range has min and max")
        if not {"min", "max"} <= set(value):
            raise ValueError("a range needs both min and max, e.g. {min: 8K, max: 32K}")
        lo, hi = parse_tokens(value["min"]), parse_tokens(value["max"])
        if hi < lo:
            raise ValueError(f"max ({hi}) must be at least min ({lo})")
        return tuple(SearchRange(min=lo, max=hi).values())
    if isinstance(value, list):
        if not value:
            raise ValueError("must list at least one value")
        if len(value) > MAX_SEARCH_VALUES:
            raise ValueError(f"lists at most {MAX_SEARCH_VALUES} values")
        return tuple(sorted({parse_tokens(v) for v in value}))
    return (parse_tokens(value),)


class Workload(_Strict):
    context: tuple[int, ...] = Field(description="tokens per sequence (prompt + output): a value, a list or {min, max}")
    concurrency: tuple[int, ...] = Field(default=(1,), description="sequences each replica holds at once")
    replicas: int = Field(default=1, ge=1, le=10_000)

    @field_validator("context", "concurrency", mode="before")
    @classmethod
    def _search(cls, value: Any) -> tuple[int, ...]:
        return search_values(value)


class Search(_Strict):
    precisions: list[str] | None = None  # default: the catalog's serving precisions at or above quality_floor
    quality_floor: Quality = "near-lossless"
    kv_dtypes: list[str] = ["auto"]
    gpus: list[str] | None = None  # default: every priced GPU
    exclude_gpus: list[str] = []
    max_gpus_per_replica: int = Field(default=8, ge=1, le=1024)
    max_gpus_per_node: int | None = Field(default=None, ge=1, le=64)
    allow_emulated: bool = False  # allow precisions the GPU runs only by emulation / dequantization


class EngineSpec(_Strict):
    name: Literal["simple"] = "simple"
    overhead: float | None = Field(default=None, ge=0, le=1)


class Pricing(_Strict):
    providers: list[str] | None = None
    market: Market = "on-demand"
    regions: list[str] | None = None


class SolverSpec(_Strict):
    time_limit_s: float = Field(default=10.0, gt=0, le=3600)
    top: int = Field(default=5, ge=0, le=100)


class Scenario(_Strict):
    name: str | None = None
    description: str | None = None
    model: str
    params: int | str | None = None
    workload: Workload
    search: Search = Search()
    engine: EngineSpec = EngineSpec()
    pricing: Pricing = Pricing()
    objective: Literal["cost_per_hour"] = "cost_per_hour"
    solver: SolverSpec = SolverSpec()
    # where the file was, so model paths resolve relative to it (not part of the YAML)
    base_dir: Path | None = Field(default=None, exclude=True)


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys (the second would silently win)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_scenario(data: Any, label: str = "scenario", base_dir: Path | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise PlannerInputError(f"{label}: the file must hold a mapping of keys (model:, workload:, ...)")
    if "base_dir" in data:
        raise PlannerInputError(f"{label}: base_dir: unknown key; remove it")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        # a misspelt key is the root cause of the "field required" error that comes with it
        first = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
        path = ".".join(str(p) for p in first["loc"] if not str(p).startswith(("function-", "list[", "union[")))
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key; check the spelling against the README's scenario schema"
        raise PlannerInputError(f"{label}: {path}: {message}") from None
    return scenario.model_copy(update={"base_dir": base_dir})


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlannerInputError(f"scenario: cannot read {str(p)!r} ({exc.strerror}); check the path") from None
    except UnicodeDecodeError:
        raise PlannerInputError(f"scenario {p.name}: not UTF-8 text") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlannerInputError(f"scenario {p.name}: invalid YAML{where}: {problem}") from None
    return parse_scenario(data, f"scenario {p.name}", p.resolve().parent)


def model_reference(scenario: Scenario) -> str:
    """The model argument with a relative config path resolved against the scenario's folder."""
    model = scenario.model
    if scenario.base_dir is not None and (model.endswith(".json") or model.startswith(".")):
        candidate = (scenario.base_dir / model).resolve()
        return str(candidate)
    if scenario.base_dir is not None and (scenario.base_dir / model).exists():
        return str((scenario.base_dir / model).resolve())
    return model


def quality_at_least(quality: str, floor: str) -> bool:
    return QUALITY_ORDER.index(quality) <= QUALITY_ORDER.index(floor)
