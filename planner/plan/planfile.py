"""Plan files (`planner solve --format json`): their schema, and the one loader every command that reads a
plan uses. A plan file is untrusted input: it is read only if it is a regular file of a few MB, parsed
without NaN / Infinity / numbers past the float range, checked field by field against the schema (types,
ranges, names in the catalogs), and each configuration is re-checked by the estimator with the settings the
plan was made with, as `planner solve` does before printing it.

Layout (schema_version 2): {"schema_version", "kind": "plan" | "fleet", "scenario", ...}. A "plan" holds
"best" and "alternatives"; a "fleet" holds "assignments". Every plan and assignment carries its
configuration's fields at its top level (model, model_id, gpu, tp, pp, dp, ep, all_to_all, precision, kv_dtype,
context, concurrency, engine {name and resolved settings}, ...) plus how it is rented (replicas, provider, region,
market, gpus_per_instance).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from planner.catalog.load import Catalog, Gpu, validate_record
from planner.catalog.prices import MAX_INSTANCE_GPUS, one_line
from planner.errors import PlannerInputError
from planner.files import PLAN, read_bytes
from planner.estimator.engines import ENGINE_NAMES, EngineSettings
from planner.estimator.engines.base import KV_CACHE_MEMORY_MODES, MOE_KERNEL_ENGINES, MOE_KERNEL_PATTERN
from planner.estimator.engines.registry import spoken_list
from planner.estimator.layout import parallel_refusal
from planner.estimator.memory import ALL_TO_ALL_BACKENDS, GpuTarget, MemoryEstimate
from planner.estimator.speculative import SPECULATIVE_ENGINES, SPECULATIVE_METHODS, Speculation, draft_architecture
from planner.model.sources import resolve_model
from planner.plan.configuration import Configuration, check_configuration, loaded_model_id
from planner.plan.roles import BOTH, ROLES
from planner.units import MAX_BATCH, MAX_CONTEXT, MAX_COUNT, MAX_GPUS_PER_REPLICA, MAX_SIZE_BYTES, format_bytes

SCHEMA_VERSION = 2  # 2: plans carry the model, the engine and its resolved settings (1 had neither)
MAX_REPLICAS = 10_000  # as a scenario's workload.replicas
WRITE_ONE = "write one with `planner solve SCENARIO --format json -o PLAN.json`"



# A name from a catalog or a provider: printable ASCII without spaces.
Token = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]
# A model as given or loaded (an HF id or a path, which may hold spaces), a scenario name: one printable line.
Line = Annotated[str, StringConstraints(min_length=1, max_length=1000), AfterValidator(one_line)]


class _Schema(BaseModel):
    # strict: "8" is not 8; extra keys are ignored (the file also holds prices, breakdowns, explanations)
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")


class EngineRecord(_Schema):
    name: Literal[ENGINE_NAMES]  # type: ignore[valid-type]
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    block_size: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)
    enforce_eager: bool = False
    disable_custom_all_reduce: bool = False
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    n_batch: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)
    n_ubatch: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)
    n_gpu_layers: int | None = Field(default=None, ge=0, le=100_000)
    cache_type: Token | None = None
    flash_attn: bool | None = None
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1, le=MAX_SIZE_BYTES)
    kv_cache_memory: Literal[KV_CACHE_MEMORY_MODES] = "utilization"  # type: ignore[valid-type]
    version: Token | None = None  # the engine release the plan was checked against (None: planned with the margin)
    # the fused-MoE kernel the plan was timed on, told to the engine (None: the release's pick)
    moe_kernel: str | None = Field(default=None, pattern=MOE_KERNEL_PATTERN)
    # the attention backend the SGLang servers are told (None: the one SGLang picks)
    attention_backend: str | None = Field(default=None, pattern=MOE_KERNEL_PATTERN)
    # the SGLang servers' --max-running-requests (None: the release's own limit)
    max_running_requests: int | None = Field(default=None, ge=1, le=MAX_BATCH)

    @model_validator(mode="after")
    def _kernel_of_an_engine_told_one(self) -> EngineRecord:
        if self.moe_kernel is not None and self.name not in MOE_KERNEL_ENGINES:
            raise ValueError(f"moe_kernel: {self.name} is not told which fused-MoE kernel to run; a plan names one "
                             f"for {spoken_list(MOE_KERNEL_ENGINES)} only")
        if self.attention_backend is not None and self.name != "sglang":
            raise ValueError(f"attention_backend: {self.name} is not told an attention backend here; a plan names one "
                             "for sglang only")
        if self.max_running_requests is not None and self.name != "sglang":
            raise ValueError(f"max_running_requests: SGLang's flag, not {self.name}'s; a plan names it for sglang only")
        return self


class SpeculationRecord(_Schema):
    """A plan's speculative decoding (planner.estimator.speculative.Speculation): the checkpoint's MTP module drafts
    draft_tokens a cycle, a request gaining acceptance_length of them (the bonus token included)."""

    method: Literal[SPECULATIVE_METHODS]  # type: ignore[valid-type]
    draft_tokens: int = Field(ge=1, le=16)
    acceptance_length: float = Field(ge=1, le=17)  # at most draft_tokens + 1: checked in _speculation_runs

    def speculation(self) -> Speculation:
        return Speculation(self.method, self.draft_tokens, self.acceptance_length)


class PlanRecord(_Schema):
    """One configuration and how it is rented: a plan of a "plan" file or an assignment of a "fleet" file."""

    model: Line
    model_id: Line
    params: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    gpu: Token
    tp: int = Field(ge=1, le=MAX_GPUS_PER_REPLICA)
    pp: int = Field(ge=1, le=MAX_GPUS_PER_REPLICA)
    precision: Token
    kv_dtype: Token
    context: int = Field(ge=1, le=MAX_CONTEXT)
    concurrency: int = Field(ge=1, le=MAX_BATCH)
    engine: EngineRecord
    overhead_fraction: float | None = Field(default=None, ge=0, le=1)
    replicas: int = Field(ge=1, le=MAX_REPLICAS)
    provider: Token
    region: Line
    market: Literal["on-demand", "spot"]
    gpus_per_instance: int = Field(ge=1, le=MAX_INSTANCE_GPUS)
    workload: Line | None = None  # fleet assignments: the workload served
    # fleet assignments: the requests a replica may run at once, as its capacity was planned (the engine's
    # max_num_seqs capped by workload.concurrency); None: the engine's own limit (SGLang's: its pool and the running
    # requests its budget admits, its default max_running_requests or a hybrid model's state slots)
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    # data-parallel attention groups among the tp GPUs, the expert-parallel size and the experts' all-to-all backend
    # (plans written before them are TP x PP: 1, 1, none); checked against the model and tp in _checked
    dp: int = Field(default=1, ge=1, le=MAX_GPUS_PER_REPLICA)
    ep: int = Field(default=1, ge=1, le=MAX_GPUS_PER_REPLICA)
    all_to_all: Literal[ALL_TO_ALL_BACKENDS] = None  # type: ignore[valid-type]
    speculation: SpeculationRecord | None = None  # None: no speculative decoding (and plans written before it)

    def configuration(self) -> Configuration:
        engine = EngineSettings(**self.engine.model_dump())
        return Configuration(self.model, self.model_id, self.gpu, self.tp, self.pp, self.precision, self.kv_dtype,
                             self.context, self.concurrency, engine, self.overhead_fraction, self.params, self.dp,
                             self.ep, self.all_to_all, self.speculation and self.speculation.speculation())


class PlanFile(_Schema):
    schema_version: Literal[SCHEMA_VERSION]  # type: ignore[valid-type]
    kind: Literal["plan"]
    scenario: Line | None = None
    model_precision: Token | None = None
    best: PlanRecord | None
    alternatives: list[PlanRecord] = Field(max_length=100)


class SloRecord(_Schema):
    """A workload's SLO as its scenario states it (planner.plan.scenario.SloSpec): each target null when it sets none,
    percentile null for the mean. Every key is the planner's own: an unknown one is an error."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")
    ttft_s: float | None = Field(default=None, gt=0, le=3600)
    tpot_s: float | None = Field(default=None, gt=0, le=60)
    percentile: float | None = Field(default=None, gt=0, lt=100)


class FleetAssignment(PlanRecord):
    """An assignment of a "fleet" file, with the request shape and capacity its replicas were sized for, the load
    they are expected to carry (what `planner simulate` replays) and its workload's SLO (what `planner check` holds
    runs to); optional, as deploying needs none of them, and plans written before them lack them."""

    # the precision the assignment's model ships in (a pre-quantized checkpoint loads as it is); plans written before
    # it lack it
    model_precision: Token | None = None
    prompt_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)
    output_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)
    shared_prefix_tokens: int | None = Field(default=None, ge=0, le=MAX_CONTEXT)  # of prompt_tokens: cached once
    # what the replica's prefix cache spares each request (the shared prefix in whole blocks), as planned
    cached_prefill_tokens_per_request: int | None = Field(default=None, ge=0, le=MAX_CONTEXT)
    capacity_rps_per_replica: float | None = Field(default=None, gt=0, lt=1e9)
    # the load the fleet expects of it (planner.plan.fleet: its bucket's demand split by capacity)
    demand_share: float | None = Field(default=None, gt=0, le=1)
    expected_rps_per_replica: float | None = Field(default=None, gt=0, lt=1e9)
    slo: SloRecord | None = None
    # both: an aggregated replica; prefill / decode: one of a disaggregated pair (planner.plan.disaggregated), which
    # exports with the engine's disaggregation flags; plans written before it are aggregated
    role: Literal[ROLES] = "both"  # type: ignore[valid-type]
    bucket: int = Field(default=0, ge=0, le=10_000)  # the workload's request bucket (its traffic.buckets index)


class FleetFile(_Schema):
    schema_version: Literal[SCHEMA_VERSION]  # type: ignore[valid-type]
    kind: Literal["fleet"]
    scenario: Line | None = None
    usd_per_hour: float | None = Field(default=None, ge=0, lt=1e12)  # None: the fleet was infeasible
    assignments: list[FleetAssignment] = Field(max_length=10_000)

    @model_validator(mode="after")
    def _pairs_whole(self) -> FleetFile:
        """A disaggregated workload bucket has both pools: prefill replicas without decode ones (or the reverse)
        serve no request."""
        roles: dict[tuple[str | None, int], set[str]] = {}
        for a in self.assignments:
            roles.setdefault((a.workload, a.bucket), set()).add(a.role)
        for (workload, bucket), held in roles.items():
            split = held - {"both"}
            if split and (len(split) == 1 or "both" in held):
                missing = ({"prefill", "decode"} - split) or {"both"}
                raise ValueError(f"assignments: workload {workload} bucket {bucket} has {'/'.join(sorted(held))} "
                                 f"replicas: a disaggregated pair needs prefill and decode replicas and no aggregated "
                                 f"ones (missing or extra: {', '.join(sorted(missing))}); write the plan again with "
                                 "`planner solve`")
        return self


@dataclass(frozen=True)
class CheckedPlan:
    """One plan of a plan file, its configuration re-checked by the estimator."""

    name: str
    record: PlanRecord
    configuration: Configuration
    card: Gpu
    memory: MemoryEstimate
    checkpoint_precision: str | None  # what the model ships in


def load_plan_file(path: str | Path, catalog: Catalog, plan_index: int = 0,
                   assignment: int | None = None) -> tuple[CheckedPlan, ...]:
    """The plans of PLAN.json to deploy. A single-configuration plan: the one at `plan_index` (0 the best, N the
    N-th alternative). A fleet plan: every assignment, or only assignment N (0-based) when `assignment` is given."""
    p = Path(path)
    data = _read_json(p)
    if isinstance(data, dict) and data.get("kind") == "fleet":
        fleet = _validate(FleetFile, data, p)
        if not fleet.assignments:
            raise PlannerInputError(f"plan: {_name(p)} holds no assignment (the fleet was infeasible)")
        chosen = _pick(list(enumerate(fleet.assignments)), assignment, "--assignment", p)
        return tuple(_checked(r, _assignment_name(fleet.scenario, r.workload, i), r.model_precision, catalog, p)
                     for i, r in chosen)
    plan = _validate(PlanFile, data, p)
    if assignment is not None:
        raise PlannerInputError(f"--assignment: {_name(p)} is a single-configuration plan; choose one with --plan")
    records = ([plan.best] if plan.best else []) + list(plan.alternatives)
    if not records:
        raise PlannerInputError(f"plan: {_name(p)} holds no plan (the scenario was infeasible)")
    [(_, record)] = _pick(list(enumerate(records)), plan_index, "--plan", p)
    return (_checked(record, plan.scenario or "planner", plan.model_precision, catalog, p),)


def load_fleet_file(path: str | Path) -> FleetFile:
    """A fleet plan file checked against its schema, for what it was solved from and what it costs (load_plan_file
    re-checks its assignments)."""
    p = Path(path)
    data = _read_json(p)
    if not isinstance(data, dict) or data.get("kind") != "fleet":
        raise PlannerInputError(f"plan: {_name(p)} is not a fleet plan; write one with `planner solve SCENARIO "
                                "--format json -o PLAN.json` for a scenario with traffic")
    return _validate(FleetFile, data, p)


def _assignment_name(scenario: str | None, workload: str | None, index: int) -> str:
    """Distinct per assignment (deployments of one fleet must not share a name)."""
    parts = [scenario or "fleet", workload if workload != scenario else None, str(index)]
    return "-".join(part for part in parts if part)


def _pick(records: list[tuple[int, PlanRecord]], index: int | None, flag: str, p: Path) -> list[tuple[int, PlanRecord]]:
    if index is None:
        return records
    if not 0 <= index < len(records):
        raise PlannerInputError(f"{flag}: {index} is out of range; {_name(p)} has 0 to {len(records) - 1}")
    return [records[index]]


def _read_json(p: Path) -> object:
    raw = read_bytes(p, PLAN)  # a regular file under the plan cap, or one line
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise PlannerInputError(f"plan: {_name(p)} is not JSON; {WRITE_ONE}") from None
    except RecursionError:
        raise PlannerInputError(f"plan: {_name(p)} is nested too deeply to be a plan file; {WRITE_ONE}") from None
    except ValueError as exc:  # NaN / Infinity / 1e400, or an integer past Python's digit limit
        raise PlannerInputError(f"plan: {_name(p)}: {exc}; a plan file holds finite numbers") from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond the range of a number")
    return value


def _validate(schema: type[_Schema], data: object, p: Path):
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise PlannerInputError(f"plan: {_name(p)} is not a `planner solve --format json` output of this planner "
                                f"(schema_version {SCHEMA_VERSION}); {WRITE_ONE}")
    return validate_record(schema, data, f"plan: {_name(p)}")


def _checked(record: PlanRecord, name: str, precision: str | None, catalog: Catalog, p: Path) -> CheckedPlan:
    """Names against the catalogs, the layout against the model, and the estimator's verdict."""
    configuration = record.configuration()
    try:
        card = catalog.gpus.get(record.gpu)
        catalog.precisions.get(record.precision)
        catalog.kv_dtypes.get(record.kv_dtype)
        configuration.engine.validate()
        arch = resolve_model(catalog, configuration.model, configuration.params)
    except PlannerInputError as exc:  # the same message, said of the plan file
        raise PlannerInputError(f"plan: {_name(p)}: {exc}") from None
    expected = loaded_model_id(catalog, configuration.model)
    if configuration.model_id != expected:  # an export launches model_id: it must be the model re-checked here
        raise PlannerInputError(f"plan: {_name(p)}: model_id {configuration.model_id!r} is not what the plan's model "
                                f"{configuration.model!r} loads ({expected!r}); re-run `planner solve`")
    refusal = parallel_refusal(arch, configuration.tp, configuration.pp, configuration.dp, configuration.ep)
    if refusal:
        raise PlannerInputError(f"plan: {_name(p)}: {refusal.removeprefix('--')}")
    if configuration.speculation is not None:
        _speculation_runs(arch, record, configuration, p)
    try:
        memory = check_configuration(arch, configuration, GpuTarget.from_catalog(card), catalog)
    except PlannerInputError as exc:  # e.g. tp x pp beyond any replica: said of the plan file
        raise PlannerInputError(f"plan: {_name(p)}: {exc}") from None
    if memory.gpu is None or not memory.gpu.fits:
        raise PlannerInputError(f"plan: {_name(p)}: the estimator does not confirm this configuration on {card.name} "
                                f"(headroom {format_bytes(memory.gpu.headroom_bytes if memory.gpu else 0)}); "
                                "re-run `planner solve`")
    return CheckedPlan(name, record, configuration, card, memory, precision)


def _speculation_runs(arch, record: PlanRecord, configuration: Configuration, p: Path) -> None:
    """A plan's MTP draft as planner plans it: the checkpoint's own module, on one pipeline stage, under SGLang or
    vLLM, in a single-configuration plan or an aggregated fleet replica (planner.plan.search, planner.plan.serving; a
    disaggregated pair is sized without it)."""
    where = f"plan: {_name(p)}: speculation"
    spec = configuration.speculation
    role = getattr(record, "role", BOTH)
    if role != BOTH:
        raise PlannerInputError(f"{where}: a disaggregated {role} replica is sized without speculative decoding "
                                "(planner plans MTP for aggregated replicas); re-run `planner solve`")
    if spec.acceptance_length > spec.draft_tokens + 1:
        raise PlannerInputError(f"{where}: acceptance_length {spec.acceptance_length:g} must be at most draft_tokens + 1 "
                                f"= {spec.draft_tokens + 1} (the bonus token included); re-run `planner solve`")
    try:
        draft_architecture(arch)
    except PlannerInputError as exc:
        raise PlannerInputError(f"{where}: {str(exc).removeprefix('--speculative mtp: ')}; re-run `planner solve`") from None
    if configuration.pp > 1:
        raise PlannerInputError(f"{where}: speculative decoding is planned on one pipeline stage, and the plan has pp "
                                f"{configuration.pp}; re-run `planner solve`")
    if configuration.engine.name not in SPECULATIVE_ENGINES:
        raise PlannerInputError(f"{where}: MTP is planned for {' or '.join(SPECULATIVE_ENGINES)}, and the plan's engine "
                                f"is {configuration.engine.name}; re-run `planner solve`")


def _name(p: Path) -> str:
    text = p.name
    return text if text.isprintable() else repr(text)
