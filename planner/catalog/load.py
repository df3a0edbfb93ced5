"""The YAML catalogs (GPUs, models, precisions) as typed, validated records, with name lookup.

Catalogs ship inside the package (planner/catalogs in the wheel, top-level catalogs/ in the
repository), so planner works offline from any directory.
"""

from __future__ import annotations

import difflib
import re
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


class ExpertFormat(BaseModel):
    """The format a checkpoint stores its routed experts in when it differs from its other linear layers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bits: float = Field(gt=0)
    scales: Scales | None = None


class Precision(_Record):
    bits: float = Field(gt=0)
    scope: Literal["all", "linear", "experts", "gguf"]
    serving_default: bool = False
    scales: Scales | None = None
    experts: ExpertFormat | None = None  # scope linear: routed experts in this format instead (DeepSeek-V4 fp4)
    seed_bits: float = Field(gt=0)
    quality: Quality
    native: tuple[str, ...]
    torch_dtypes: tuple[str, ...] = ()
    hf_quant_methods: tuple[str, ...] = ()
    vllm_flag: str | None = None  # None: vLLM cannot serve it
    sglang_flag: str | None = None
    gguf_type: str | None = None  # None: no llama.cpp file type stores it
    checkpoint: bool = False  # needs a checkpoint already quantized this way
    hf_id_suffixes: tuple[str, ...] = ()  # repo-name endings of checkpoints published in this precision (-FP8 ...)
    source: str
    as_of: str


class KvDtype(_Record):
    bits: int = Field(gt=0)
    source: str


class Engine(_Record):
    description: str
    overhead_fraction: float = Field(ge=0, le=1)
    # the CUDA context every GPU holds: filled in from engine_profiles.yaml cuda.context_mib, its one home
    runtime_reserve_mib: int | None = Field(default=None, ge=0)
    source: str
    as_of: str

    @property
    def runtime_reserve_bytes(self) -> int:
        return (self.runtime_reserve_mib or 0) * MiB


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


_REPO_ID = re.compile(r"[a-z0-9._-]+(/[a-z0-9._-]+)?")


@dataclass(frozen=True)
class Catalog:
    gpus: Registry[Gpu]
    models: Registry[Model]
    precisions: Registry[Precision]
    kv_dtypes: Registry[KvDtype]
    engines: Registry[Engine]
    offers: tuple[Offer, ...]

    def model_and_precision(self, name: str) -> tuple[Model, str | None]:
        """A model by name, alias or HF id; failing that, a quantized repo of a catalog model: a precision's
        hf_id_suffixes ending (Qwen/Qwen3.5-35B-A3B-FP8, nvidia/...-NVFP4) resolves to the base entry, whose
        repo name may also differ by -Instruct, and names the precision that repo ships."""
        try:
            return self.models.get(name), None
        except PlannerInputError as not_found:
            wanted = name.strip().lower()
            if not _REPO_ID.fullmatch(wanted):  # a URL or a path is not a repo id to match loosely
                raise
            endings = sorted(((s.lower(), p.name) for p in self.precisions for s in p.hf_id_suffixes),
                             key=lambda e: -len(e[0]))
            by_repo: dict[str, Model] = {}  # repo names (quantizers republish under their own org)
            by_id: dict[str, Model] = {}  # org/repo as written (a -Instruct toggle keeps the org)
            for m in self.models:  # repo names, also without a precision ending of their own (...-BF16)
                for key in (m.name, m.hf_id, *m.aliases):
                    by_id.setdefault(key.lower(), m)
                    repo_name = key.rsplit("/", 1)[-1].lower()
                    by_repo.setdefault(repo_name, m)
                    for ending, _ in endings:
                        if repo_name.endswith(ending):
                            by_repo.setdefault(repo_name[:len(repo_name) - len(ending)], m)
            for ending, precision in endings:
                repo = wanted.rsplit("/", 1)[-1]
                if repo.endswith(ending):
                    base = repo[:len(repo) - len(ending)]
                    for candidate in (base, base.removesuffix("-instruct"), base + "-instruct"):
                        if candidate in by_repo:
                            return by_repo[candidate], precision
            for candidate in (wanted.removesuffix("-instruct"), wanted + "-instruct"):
                if candidate != wanted and candidate in by_id:
                    return by_id[candidate], None
            raise not_found


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
        engines=_engines(base),
        offers=_offers(base / "prices.yaml", gpus),
    )


def _engines(base: Path) -> Registry[Engine]:
    """engines.yaml, each engine's runtime reserve being the CUDA context of engine_profiles.yaml (cuda.context_mib),
    the one place that figure and its measurement live."""
    engines = _records(base / "engines.yaml", "engines", Engine, "engine")
    for engine in engines:
        if engine.runtime_reserve_mib is not None:
            raise PlannerInputError(f"catalog engines.yaml: engines[{engine.name}].runtime_reserve_mib: the CUDA context "
                                    "comes from engine_profiles.yaml cuda.context_mib; remove the key")
    cuda = read_yaml(base / "engine_profiles.yaml").get("cuda")
    context = cuda.get("context_mib") if isinstance(cuda, dict) else None
    value = context.get("value") if isinstance(context, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlannerInputError("catalog engine_profiles.yaml: cuda.context_mib.value: must be a whole number of MiB")
    return Registry(engines.kind, tuple(e.model_copy(update={"runtime_reserve_mib": value}) for e in engines))
