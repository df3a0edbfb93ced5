"""The YAML catalogs (GPUs, models, precisions) as typed, validated records, with name lookup.

Catalogs ship inside the package (planner/catalogs in the wheel, top-level catalogs/ in the
repository), so planner works offline from any directory.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import PlannerInputError
from planner.units import MiB
from planner.yamlfile import load_yaml_cached

# What a precision costs in output quality, best first (catalogs/precisions.yaml `quality`; a scenario's
# search.quality_floor names one of these).
Quality = Literal["lossless", "near-lossless", "small loss", "noticeable loss"]
QUALITY_ORDER: tuple[str, ...] = get_args(Quality)


def quality_at_least(quality: str, floor: str) -> bool:
    return QUALITY_ORDER.index(quality) <= QUALITY_ORDER.index(floor)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    aliases: tuple[str, ...] = ()

    @field_validator("name")
    @classmethod
    def _lowercase_name(cls, value: str) -> str:
        if value != value.lower() or " " in value:
            raise ValueError("catalog names are lowercase slugs without spaces")
        return value


class Interconnect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    name: str
    bandwidth_gbps: float = Field(gt=0)


class Gpu(_Record):
    display_name: str
    vendor: Literal["nvidia", "amd", "intel", "google"]
    generation: str
    segment: Literal["datacenter", "workstation", "consumer"]
    memory_mib: int = Field(gt=0)
    memory_marketed: str
    memory_bandwidth_gbps: float = Field(gt=0)
    dense_tflops: dict[str, float | None]
    native_formats: tuple[str, ...]
    interconnect: Interconnect
    pcie_gen: int | None = None
    gpus_per_node: int = Field(gt=0)
    tdp_watts: float | None = None
    skypilot_accelerator: str | None = None
    source: str
    as_of: str
    notes: str | None = None

    @property
    def memory_bytes(self) -> int:
        """Total memory as the runtime reports it (nvidia-smi memory.total, MiB)."""
        return self.memory_mib * MiB


class Model(_Record):
    hf_id: str
    family: str
    params: int = Field(gt=0)
    params_source: str
    source: str
    as_of: str
    config: dict[str, Any]
    notes: str | None = None


class Scales(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    granularity: Literal["tensor", "channel", "group", "block"]
    group_size: int | None = Field(default=None, gt=0)
    scale_bits: int = Field(gt=0)
    zero_bits: int = Field(default=0, ge=0)


class Precision(_Record):
    bits: float = Field(gt=0)
    scope: Literal["all", "linear", "experts", "gguf"]
    serving_default: bool = False
    scales: Scales | None = None
    seed_bits: float = Field(gt=0)
    quality: Quality
    native: tuple[str, ...]
    torch_dtypes: tuple[str, ...] = ()
    hf_quant_methods: tuple[str, ...] = ()
    vllm_flag: str | None = None  # None: vLLM cannot serve it
    sglang_flag: str | None = None
    gguf_type: str | None = None  # None: no llama.cpp file type stores it
    checkpoint: bool = False  # needs a checkpoint already quantized this way
    source: str
    as_of: str


class KvDtype(_Record):
    bits: int = Field(gt=0)
    source: str


class Engine(_Record):
    description: str
    overhead_fraction: float = Field(ge=0, le=1)
    runtime_reserve_mib: int = Field(ge=0)
    source: str
    as_of: str

    @property
    def runtime_reserve_bytes(self) -> int:
        return self.runtime_reserve_mib * MiB


class Offer(BaseModel):
    """One rentable shape: an instance of `gpus` GPUs at a provider, in a region, with its prices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str
    instance: str
    gpu: str
    gpus: int = Field(gt=0)
    region: str
    on_demand_usd_per_hour: float | None = Field(default=None, gt=0)
    spot_usd_per_hour: float | None = Field(default=None, gt=0)
    as_of: str
    source: str

    def price(self, market: str) -> float | None:
        return self.on_demand_usd_per_hour if market == "on-demand" else self.spot_usd_per_hour


R = TypeVar("R", bound=_Record)


@dataclass(frozen=True)
class Registry(Generic[R]):
    """Records of one kind, looked up by name, alias or HF id, case-insensitively."""

    kind: str
    records: tuple[R, ...]

    def _index(self) -> dict[str, R]:
        index: dict[str, R] = {}
        for record in self.records:
            keys = [record.name, *record.aliases]
            if isinstance(record, Model):
                keys.append(record.hf_id)
            for key in keys:
                index[key.lower()] = record
        return index

    def get(self, name: str) -> R:
        index = self._index()
        found = index.get(name.strip().lower())
        if found is not None:
            return found
        close = difflib.get_close_matches(name.strip().lower(), list(index), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"see `planner catalog {self.kind}s`"
        raise PlannerInputError(f"unknown {self.kind} {name!r}: {hint}")

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


@dataclass(frozen=True)
class Catalog:
    gpus: Registry[Gpu]
    models: Registry[Model]
    precisions: Registry[Precision]
    kv_dtypes: Registry[KvDtype]
    engines: Registry[Engine]
    offers: tuple[Offer, ...]


def catalog_dir() -> Path:
    """Where the YAML files are: inside the installed package, or catalogs/ in a source checkout."""
    try:
        return Path(str(resources.files("planner.catalogs")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "catalogs"


def read_yaml(path: Path) -> dict[str, Any]:
    data = load_yaml_cached(path, f"catalog {path.name}")
    if not isinstance(data, dict):
        raise PlannerInputError(f"catalog {path.name}: expected a mapping at the top level")
    return data


M = TypeVar("M", bound=BaseModel)


def _label(row: Any, index: int) -> Any:
    return row.get("name", index) if isinstance(row, dict) else index


def validate_record(record_type: type[M], row: Any, where: str) -> M:
    """Validate one row; the first problem becomes a one-line error naming the key path."""
    try:
        return record_type.model_validate(row)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        raise PlannerInputError(f"{where}.{path}: {first['msg']}") from None


def _records(path: Path, key: str, record_type: type[R], kind: str) -> Registry[R]:
    data = read_yaml(path)
    rows = data.get(key)
    if not isinstance(rows, list):
        raise PlannerInputError(f"catalog {path.name}: missing the list {key!r}")
    records = [validate_record(record_type, row, f"catalog {path.name}: {key}[{_label(row, i)}]") for i, row in enumerate(rows)]
    seen: dict[str, str] = {}
    for record in records:
        keys = [record.name, *record.aliases] + ([record.hf_id] if isinstance(record, Model) else [])
        for k in {k.lower() for k in keys}:
            if k in seen and seen[k] != record.name:
                raise PlannerInputError(f"catalog {path.name}: {k!r} names both {seen[k]} and {record.name}")
            seen[k] = record.name
    return Registry(kind, tuple(records))


def _offers(path: Path, gpus: Registry[Gpu]) -> tuple[Offer, ...]:
    rows = read_yaml(path).get("prices")
    if not isinstance(rows, list):
        raise PlannerInputError(f"catalog {path.name}: missing the list 'prices'")
    offers = tuple(validate_record(Offer, row, f"catalog {path.name}: prices[{i}]") for i, row in enumerate(rows))
    for offer in offers:
        gpus.get(offer.gpu)  # every priced GPU must be in the GPU catalog
    return offers


@cache
def load_catalog(directory: str | None = None) -> Catalog:
    """Load and validate every catalog file (cached: catalogs don't change during a run)."""
    base = Path(directory) if directory else catalog_dir()
    gpus = _records(base / "gpus.yaml", "gpus", Gpu, "gpu")
    return Catalog(
        gpus=gpus,
        models=_records(base / "models.yaml", "models", Model, "model"),
        precisions=_records(base / "precisions.yaml", "precisions", Precision, "precision"),
        kv_dtypes=_records(base / "precisions.yaml", "kv_dtypes", KvDtype, "kv-dtype"),
        engines=_records(base / "engines.yaml", "engines", Engine, "engine"),
        offers=_offers(base / "prices.yaml", gpus),
    )
