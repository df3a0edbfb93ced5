"""The YAML catalogs (GPUs, models, precisions) as typed, validated records, with name lookup.

Catalogs ship inside the package (planner/catalogs in the wheel, top-level catalogs/ in the
repository), so planner works offline from any directory.
"""

from __future__ import annotations

import re
import sys
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from functools import cache, cached_property
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, TypeVar, Union, get_args, get_origin

from planner.errors import PlannerInputError
from planner.units import MiB
from planner.yamlfile import load_yaml_cached, printable

if TYPE_CHECKING:  # pydantic loads only where a pydantic schema is validated (scenarios, plans, prices)
    from pydantic import BaseModel

    from planner.catalog.hosted import HostedPrice
    from planner.catalog.prices import Offer

    M = TypeVar("M", bound=BaseModel)

# What a precision costs in output quality, best first (catalogs/precisions.yaml `quality`; a scenario's
# search.quality_floor names one of these).
Quality = Literal["lossless", "near-lossless", "small loss", "noticeable loss"]
QUALITY_ORDER: tuple[str, ...] = get_args(Quality)


def quality_at_least(quality: str, floor: str) -> bool:
    return QUALITY_ORDER.index(quality) <= QUALITY_ORDER.index(floor)


def bounded(default: Any = MISSING, **bounds: float) -> Any:
    """A record field with bounds (gt, ge, le), checked by _record like pydantic's Field(gt=...)."""
    return field(default=default, metadata=bounds)


@dataclass(frozen=True, kw_only=True)
class _Record:
    """What every catalog entry has: its name (a lowercase slug) and other names it answers to."""

    name: str
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name != self.name.lower() or " " in self.name:
            raise _Invalid(("name",), "Value error, catalog names are lowercase slugs without spaces")


@dataclass(frozen=True, kw_only=True)
class Interconnect:
    """How a GPU talks to the other GPUs of its node."""

    kind: str
    name: str
    bandwidth_gbps: float = bounded(gt=0)


@dataclass(frozen=True, kw_only=True)
class Network:
    """A node's network to other nodes, per GPU (the NICs a KV transfer between disaggregated pools crosses)."""

    name: str
    gbps_per_gpu: float = bounded(gt=0)  # line rate per GPU, decimal Gb/s (10^9 bit/s)
    source: str

    @property
    def bytes_per_s(self) -> float:
        return self.gbps_per_gpu * 1e9 / 8


@dataclass(frozen=True, kw_only=True)
class Gpu(_Record):
    """A GPU of gpus.yaml."""

    display_name: str
    vendor: Literal["nvidia", "amd", "intel", "google"]
    generation: str
    segment: Literal["datacenter", "workstation", "consumer"]
    memory_mib: int = bounded(gt=0)
    memory_marketed: str
    memory_bandwidth_gbps: float = bounded(gt=0)
    dense_tflops: dict[str, float | None]
    native_formats: tuple[str, ...]
    interconnect: Interconnect
    # the inter-node network of the GPU's whole node (HGX/DGX: a NIC per GPU); None where the catalog has no source
    network: Network | None = None
    pcie_gen: int | None = None
    gpus_per_node: int = bounded(gt=0)
    # the GPUs of one host where fewer than the node's NVLink domain (an NVL72 compute tray: 4); None: the node is one
    # host. A tensor-parallel group larger than a host runs the engines' multi-host all-reduce.
    gpus_per_host: int | None = bounded(None, gt=0)
    tdp_watts: float | None = None
    skypilot_accelerator: str | None = None
    source: str
    as_of: str
    notes: str | None = None

    @property
    def memory_bytes(self) -> int:
        """Total memory as the runtime reports it (nvidia-smi memory.total, MiB)."""
        return self.memory_mib * MiB

    @property
    def host_gpus(self) -> int:
        """The GPUs a single-host all-reduce can span."""
        return self.gpus_per_host or self.gpus_per_node


@dataclass(frozen=True, kw_only=True)
class Model(_Record):
    """A model of models.yaml: its Hugging Face repository and config.json."""

    hf_id: str
    family: str
    params: int = bounded(gt=0)
    params_source: str
    source: str
    as_of: str
    config: dict[str, Any]
    notes: str | None = None


@dataclass(frozen=True, kw_only=True)
class AcceptanceFigure(_Record):
    """A published acceptance length of speculative decoding with a model family's own MTP module
    (speculative.yaml): `name` is the checkpoint's model_type."""

    method: Literal["mtp"]
    draft_tokens: int = bounded(ge=1, le=16)
    acceptance_length: float = bounded(ge=1, le=17)
    source: str
    as_of: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.acceptance_length > self.draft_tokens + 1:
            raise _Invalid(("acceptance_length",), f"Value error, at most draft_tokens + 1 = {self.draft_tokens + 1}")


@dataclass(frozen=True, kw_only=True)
class Scales:
    """The scales a quantized format stores beside its weights."""

    granularity: Literal["tensor", "channel", "group", "block"]
    group_size: int | None = bounded(None, gt=0)
    scale_bits: int = bounded(gt=0)
    zero_bits: int = bounded(0, ge=0)


@dataclass(frozen=True, kw_only=True)
class ExpertFormat:
    """The format a checkpoint stores its routed experts in when it differs from its other linear layers."""

    bits: float = bounded(gt=0)
    scales: Scales | None = None


@dataclass(frozen=True, kw_only=True)
class Precision(_Record):
    """A weight precision of precisions.yaml."""

    bits: float = bounded(gt=0)
    scope: Literal["all", "linear", "experts", "gguf"]
    serving_default: bool = False
    scales: Scales | None = None
    experts: ExpertFormat | None = None  # scope linear: routed experts in this format instead (DeepSeek-V4 fp4)
    seed_bits: float = bounded(gt=0)
    quality: Quality
    torch_dtypes: tuple[str, ...] = ()
    hf_quant_methods: tuple[str, ...] = ()
    vllm_flag: str | None = None  # None: vLLM cannot serve it
    sglang_flag: str | None = None
    gguf_type: str | None = None  # None: no llama.cpp file type stores it
    checkpoint: bool = False  # needs a checkpoint already quantized this way
    hf_id_suffixes: tuple[str, ...] = ()  # repo-name endings of checkpoints published in this precision (-FP8 ...)
    source: str
    as_of: str


@dataclass(frozen=True, kw_only=True)
class PrecisionKernels(_Record):
    """One precision as an engine runs it (precision_support.yaml): the GPU generations where its kernels compute in
    the precision's own tensor-core format, and those where they dequantize the weights and compute in 16 bits."""

    native: tuple[str, ...]
    weight_only: tuple[str, ...]
    source: str


@dataclass(frozen=True, kw_only=True)
class EngineKernels(_Record):
    """An engine's precision support as its code at `release` decides it (precision_support.yaml)."""

    release: str
    unlisted: str  # why a precision or generation not listed is refused
    precisions: tuple[PrecisionKernels, ...]


SupportLevel = Literal["native", "weight-only", "unsupported", "unchecked"]


@dataclass(frozen=True)
class Support:
    """Whether and how an engine runs a precision on a GPU: `native` (computes in the format's tensor-core format),
    `weight-only` (dequantizes, computes in 16 bits), `unsupported` (refused, `source` says why) or `unchecked` (the
    table has no entry for the engine: planned, timed at the 16-bit rate)."""

    level: SupportLevel
    engine: str
    precision: str
    gpu: str
    generation: str
    source: str

    @property
    def runs(self) -> bool:
        return self.level != "unsupported"

    @property
    def native(self) -> bool:
        return self.level == "native"

    def reason(self, cited: bool = True) -> str:
        """One line naming the verdict and (`cited`) its source."""
        how = {"native": "runs {} natively", "weight-only": "runs {} with weight-only kernels (16-bit compute)",
               "unsupported": "cannot run {}", "unchecked": "is not checked for {} (no kernel table for it)"}
        where = f"{how[self.level].format(self.precision)} on {self.gpu} ({self.generation})"
        return f"{self.engine} {where}" + (f": {self.source}" if self.source and cited else "")


@dataclass(frozen=True, kw_only=True)
class KvDtype(_Record):
    """A KV cache dtype of precisions.yaml."""

    bits: int = bounded(gt=0)
    source: str


@dataclass(frozen=True, kw_only=True)
class Engine(_Record):
    """A serving engine of engines.yaml."""

    description: str
    overhead_fraction: float = bounded(ge=0, le=1)
    # the CUDA context every GPU holds: filled in from engine_profiles.yaml cuda.context_mib, its one home
    runtime_reserve_mib: int | None = bounded(None, ge=0)
    source: str
    as_of: str

    @property
    def runtime_reserve_bytes(self) -> int:
        return (self.runtime_reserve_mib or 0) * MiB


def __getattr__(name: str) -> Any:
    """`Offer` lives with the prices (planner.catalog.prices, a pydantic model): imported on first use, so a
    command that never prices anything (estimate, fit) loads neither it nor pydantic."""
    if name == "Offer":
        from planner.catalog.prices import Offer

        return Offer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


R = TypeVar("R", bound=_Record)
D = TypeVar("D")


@dataclass(frozen=True)
class Registry(Generic[R]):
    """Records of one kind, looked up by name, alias or HF id, case-insensitively."""

    kind: str
    records: tuple[R, ...]

    @cached_property
    def _index(self) -> dict[str, R]:
        """Built on the first lookup (the solver looks names up tens of thousands of times in one run)."""
        index: dict[str, R] = {}
        for record in self.records:
            keys = [record.name, *record.aliases]
            if isinstance(record, Model):
                keys.append(record.hf_id)
            for key in keys:
                index[key.lower()] = record
        return index

    def get(self, name: str) -> R:
        index = self._index
        found = index.get(name.strip().lower())
        if found is not None:
            return found
        from difflib import get_close_matches  # only for a name not found

        close = get_close_matches(name.strip().lower(), list(index), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"see `planner catalog {self.kind}s`"
        raise PlannerInputError(f"unknown {self.kind} {name!r}: {hint}")

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


_REPO_ID = r"[a-z0-9._-]+(/[a-z0-9._-]+)?"  # compiled by re on a name not found, not at every start


@dataclass(frozen=True)
class Catalog:
    """Every catalog, loaded and validated (load_catalog)."""

    gpus: Registry[Gpu]
    models: Registry[Model]
    precisions: Registry[Precision]
    kv_dtypes: Registry[KvDtype]
    engines: Registry[Engine]
    kernels: Registry[EngineKernels]
    prices_file: Path
    hosted_prices_file: Path

    @cached_property
    def offers(self) -> tuple[Offer, ...]:
        """prices.yaml, read on first use (estimate and fit never price anything); every priced GPU must be
        in the GPU catalog."""
        from planner.catalog.prices import load_offers

        return load_offers(self.prices_file, self.gpus)

    @cached_property
    def hosted_prices(self) -> tuple[HostedPrice, ...]:
        """hosted_prices.yaml, read on first use (a fleet plan compares its cost with them); every row names a
        catalog model."""
        from planner.catalog.hosted import load_hosted_prices

        return load_hosted_prices(self.hosted_prices_file, self.models)

    def support(self, engine: str, precision: Precision, gpu: Gpu) -> Support:
        """How `engine` runs `precision` on `gpu` (precision_support.yaml, the one place that decides it)."""
        table = self.kernels._index.get(engine.lower())
        if table is None:
            return Support("unchecked", engine, precision.name, gpu.name, gpu.generation, "")
        where = f"{table.name} {table.release}"
        row = next((r for r in table.precisions if r.name == precision.name), None)
        if row is not None and gpu.generation in row.native:
            return Support("native", where, precision.name, gpu.name, gpu.generation, row.source)
        if row is not None and gpu.generation in row.weight_only:
            return Support("weight-only", where, precision.name, gpu.name, gpu.generation, row.source)
        return Support("unsupported", where, precision.name, gpu.name, gpu.generation,
                       row.source if row is not None else table.unlisted)

    def model_and_precision(self, name: str) -> tuple[Model, str | None]:
        """A model by name, alias or HF id; failing that, a quantized repo of a catalog model: a precision's
        hf_id_suffixes ending (Qwen/Qwen3.5-35B-A3B-FP8, nvidia/...-NVFP4) resolves to the base entry, whose
        repo name may also differ by -Instruct, and names the precision that repo ships."""
        try:
            return self.models.get(name), None
        except PlannerInputError as not_found:
            wanted = name.strip().lower()
            if not re.fullmatch(_REPO_ID, wanted):  # a URL or a path is not a repo id to match loosely
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
        import planner.catalogs as catalogs
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "catalogs"
    return Path(next(iter(catalogs.__path__)))  # the package's folder (importlib.resources.files, without its imports)


def read_yaml(path: Path) -> dict[str, Any]:
    data = load_yaml_cached(path, f"catalog {path.name}")
    if not isinstance(data, dict):
        raise PlannerInputError(f"catalog {path.name}: expected a mapping at the top level")
    return data


class _Invalid(ValueError):
    """One problem in a catalog row: where (key path) and what, worded as pydantic words it."""

    def __init__(self, loc: tuple[Any, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message

    def inside(self, key: Any) -> _Invalid:
        """The same problem, seen from the mapping or list that holds it under `key`."""
        self.loc = (key, *self.loc)
        return self


# value -> the value as the record keeps it; _Invalid with the key path below the value. The path is built only
# for a problem (on the way out), not for every value checked: the catalogs have thousands.
Check = Callable[[Any], Any]


def _scalar(kind: type) -> Check:
    """str, int, float, bool as they are (an int for a float becomes a float); no string or bool coercion:
    a catalog is hostile input, and the shipped files write every number as a number."""
    wanted = {str: "a valid string", int: "a valid integer", float: "a valid number", bool: "a valid boolean"}[kind]
    accepted = (int, float) if kind is float else kind

    def check(value: Any) -> Any:
        if not isinstance(value, accepted) or (isinstance(value, bool) and kind is not bool):
            raise _Invalid((), f"Input should be {wanted}")
        return float(value) if kind is float else value

    return check


def _any(value: Any) -> Any:
    return value


@cache
def _check(hint: Any) -> Check:
    """The check of one annotation, built once: the shapes the catalog records use."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return _any
    if origin in (Union, UnionType):  # X | None
        inner = _check(next(a for a in args if a is not type(None)))
        return lambda value: None if value is None else inner(value)
    if origin is Literal:
        choices = [repr(a) for a in args]
        message = f"Input should be {', '.join(choices[:-1])} or {choices[-1]}"

        def literal(value: Any) -> Any:
            if isinstance(value, str) and value in args:
                return value
            raise _Invalid((), message)
        return literal
    if origin is tuple:
        return _sequence(_check(args[0]))
    if origin is dict:
        return _mapping(_check(args[0]), _check(args[1]))
    if is_dataclass(hint):
        return lambda value: _record(hint, value)
    return _scalar(hint)


def _sequence(item: Check) -> Check:
    def sequence(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            raise _Invalid((), "Input should be a valid tuple")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except _Invalid as exc:
                raise exc.inside(i) from None
        return tuple(out)
    return sequence


def _mapping(key: Check, item: Check) -> Check:
    def mapping(value: Any) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise _Invalid((), "Input should be a valid dictionary")
        out = {}
        for k, v in value.items():
            try:
                out[key(k)] = item(v)
            except _Invalid as exc:
                raise exc.inside(k) from None
        return out
    return mapping


@cache
def _hint(annotation: str, module: str) -> Any:
    """A field's annotation (text, under `from __future__ import annotations`) evaluated as typing.get_type_hints
    evaluates it, once per spelling: get_type_hints compiles every field's anew, a fifth of reading the catalogs."""
    return eval(annotation, vars(sys.modules[module]))  # noqa: S307 - the record class's own source


def _hints(record_type: type) -> dict[str, Any]:
    """The record's annotations by field name, its bases' first (as get_type_hints)."""
    hints: dict[str, Any] = {}
    for klass in reversed(record_type.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            hints[name] = _hint(annotation, klass.__module__) if isinstance(annotation, str) else annotation
    return hints


@cache
def _fields(record_type: type) -> tuple[tuple[str, bool, Check, tuple[tuple[str, float], ...]], ...]:
    """Each field: its name, whether it is required, its check and its bounds (metadata gt/ge/le)."""
    hints = _hints(record_type)
    return tuple((f.name, f.default is MISSING and f.default_factory is MISSING, _check(hints[f.name]),
                  tuple(f.metadata.items()))
                 for f in fields(record_type))


def _record(record_type: type[D], row: Any) -> D:
    """A record from one mapping: every key known, every required key given, each value of its type and within
    its bounds."""
    if not isinstance(row, dict):
        raise _Invalid((), f"Input should be a valid dictionary or instance of {record_type.__name__}")
    values: dict[str, Any] = {}
    for name, required, check, bounds in _fields(record_type):
        if name not in row:
            if required:
                raise _Invalid((name,), "Field required")
            continue
        try:
            value = values[name] = check(row[name])
        except _Invalid as exc:
            raise exc.inside(name) from None
        for bound, limit in bounds:
            if value is not None and not _BOUNDS[bound][0](value, limit):
                raise _Invalid((name,), f"Input should be {_BOUNDS[bound][1]} {limit}")
    if len(values) < len(row):
        known = {name for name, *_ in _fields(record_type)}
        extra = next(key for key in row if key not in known)
        raise _Invalid((extra,), "Extra inputs are not permitted")
    return record_type(**values)


_BOUNDS: dict[str, tuple[Callable[[Any, float], bool], str]] = {
    "gt": (lambda value, limit: value > limit, "greater than"),
    "ge": (lambda value, limit: value >= limit, "greater than or equal to"),
    "le": (lambda value, limit: value <= limit, "less than or equal to"),
}


def _label(row: Any, index: int) -> Any:
    return row.get("name", index) if isinstance(row, dict) else index


def _one_line(where: str, loc: tuple[Any, ...], message: str) -> PlannerInputError:
    """A key the file names is shown escaped where it holds a newline or the like: the message stays one line."""
    return PlannerInputError(f"{where}{''.join('.' + printable(str(p)) for p in loc)}: {printable(message)}")


def validate_record(record_type: type[M], row: Any, where: str) -> M:
    """Validate one row against a pydantic model (the scenario, plan and profile schemas); the first problem
    becomes a one-line error naming the key path."""
    from pydantic import ValidationError

    try:
        return record_type.model_validate(row)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _one_line(where, first["loc"], first["msg"]) from None


def catalog_record(record_type: type[D], row: Any, where: str) -> D:
    """One catalog row as its record; the first problem becomes a one-line error naming the key path."""
    try:
        return _record(record_type, row)
    except _Invalid as exc:
        raise _one_line(where, exc.loc, exc.message) from None


def _records(path: Path, data: dict[str, Any], key: str, record_type: type[R], kind: str) -> Registry[R]:
    """The records under `key` of the catalog file read from `path`."""
    rows = data.get(key)
    if not isinstance(rows, list):
        raise PlannerInputError(f"catalog {path.name}: missing the list {key!r}")
    records = [catalog_record(record_type, row, f"catalog {path.name}: {key}[{_label(row, i)}]") for i, row in enumerate(rows)]
    seen: dict[str, str] = {}
    for record in records:
        keys = [record.name, *record.aliases] + ([record.hf_id] if isinstance(record, Model) else [])
        for k in {k.lower() for k in keys}:
            if k in seen and seen[k] != record.name:
                raise PlannerInputError(f"catalog {path.name}: {k!r} names both {seen[k]} and {record.name}")
            seen[k] = record.name
    return Registry(kind, tuple(records))


@cache
def load_catalog(directory: str | None = None) -> Catalog:
    """Load and validate the catalog files (cached: catalogs don't change during a run); the prices are read
    when first asked for (Catalog.offers)."""
    base = Path(directory) if directory else catalog_dir()
    gpus = _records(base / "gpus.yaml", read_yaml(base / "gpus.yaml"), "gpus", Gpu, "gpu")
    models = _records(base / "models.yaml", read_yaml(base / "models.yaml"), "models", Model, "model")
    precisions_file = base / "precisions.yaml"
    both = read_yaml(precisions_file)  # weights' precisions and KV cache dtypes: one file, read once
    precisions = _records(precisions_file, both, "precisions", Precision, "precision")
    return Catalog(
        gpus=gpus,
        models=models,
        precisions=precisions,
        kv_dtypes=_records(precisions_file, both, "kv_dtypes", KvDtype, "kv-dtype"),
        engines=_engines(base),
        kernels=_kernels(base / "precision_support.yaml", gpus, precisions),
        prices_file=base / "prices.yaml",
        hosted_prices_file=base / "hosted_prices.yaml",
    )


@cache
def load_acceptance(directory: str | None = None) -> Registry[AcceptanceFigure]:
    """speculative.yaml: the published acceptance lengths by model family (model_type)."""
    path = (Path(directory) if directory else catalog_dir()) / "speculative.yaml"
    return _records(path, read_yaml(path), "acceptance", AcceptanceFigure, "acceptance figure")


def _kernels(path: Path, gpus: Registry[Gpu], precisions: Registry[Precision]) -> Registry[EngineKernels]:
    """precision_support.yaml: every precision a catalog precision, every generation one of a catalog GPU."""
    tables = _records(path, read_yaml(path), "engines", EngineKernels, "engine")
    generations = {g.generation for g in gpus}
    for table in tables:
        for row in table.precisions:
            where = f"catalog {path.name}: engines[{table.name}].precisions[{row.name}]"
            precisions.get(row.name)  # an unknown precision is an error naming it
            unknown = sorted(set(row.native + row.weight_only) - generations)
            if unknown:
                raise PlannerInputError(f"{where}: unknown GPU generation {unknown[0]!r}: one of "
                                        f"{', '.join(sorted(generations))}")
            both = set(row.native) & set(row.weight_only)
            if both:
                raise PlannerInputError(f"{where}: {sorted(both)[0]} is listed both native and weight_only")
    return tables


def _engines(base: Path) -> Registry[Engine]:
    """engines.yaml, each engine's runtime reserve being the CUDA context of engine_profiles.yaml (cuda.context_mib),
    the one place that figure and its measurement live."""
    engines = _records(base / "engines.yaml", read_yaml(base / "engines.yaml"), "engines", Engine, "engine")
    for engine in engines:
        if engine.runtime_reserve_mib is not None:
            raise PlannerInputError(f"catalog engines.yaml: engines[{engine.name}].runtime_reserve_mib: the CUDA context "
                                    "comes from engine_profiles.yaml cuda.context_mib; remove the key")
    cuda = read_yaml(base / "engine_profiles.yaml").get("cuda")
    context = cuda.get("context_mib") if isinstance(cuda, dict) else None
    value = context.get("value") if isinstance(context, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlannerInputError("catalog engine_profiles.yaml: cuda.context_mib.value: must be a whole number of MiB")
    return Registry(engines.kind, tuple(replace(e, runtime_reserve_mib=value) for e in engines))
