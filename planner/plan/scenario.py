"""The scenario file: what to serve, how much of it, on what, and at what price. Schema and validation.

Every key is checked: unknown or misspelt keys and wrong types are errors naming the key path
(`workload.context.max: ...`). Names (GPUs, precisions, providers) are checked against the
catalogs when the scenario is resolved, so the message can suggest the closest names.
"""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from planner.catalog.load import Quality
from planner.catalog.prices import MAX_PRICE_AGE_DAYS, PRICE_KINDS, PriceKind, Term
from planner.errors import PlannerInputError
from planner.estimator.engines.base import MOE_KERNEL_PATTERN, READ_BY
from planner.estimator.engines.registry import PLANNING_MARGIN, profiled_engines
from planner.plan.failure import Survive, interruption_rate
from planner.yamlfile import parse_yaml, printable
from planner.files import SCENARIO, FileKind, read_text
from planner.units import MAX_BATCH, MAX_CONTEXT, MiB, parse_tokens, shown

Market = Literal["on-demand", "spot", "any"]

MAX_SEARCH_VALUES = 64
# The estimator's own bounds, checked here so the error names the scenario key, not a CLI flag.
_LIMITS = {"context": MAX_CONTEXT, "concurrency": MAX_BATCH}

class _Strict(BaseModel):
    # strict: `replicas: true` or `allow_emulated: "no"` is an error, not silently 1 or True
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


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


def search_values(value: Any, limit: int = MAX_CONTEXT) -> tuple[int, ...]:
    """A fixed value (8192, "8K"), a list to try, or {min, max}: the sorted token counts to search."""
    if isinstance(value, dict):
        unknown = set(value) - {"min", "max"}
        if unknown:
            raise ValueError(f"unknown key {shown(min(unknown, key=repr))} in a range; a range has min and max")
        if not {"min", "max"} <= set(value):
            raise ValueError("a range needs both min and max, e.g. {min: 8K, max: 32K}")
        lo, hi = parse_tokens(value["min"], limit), parse_tokens(value["max"], limit)
        if hi < lo:
            raise ValueError(f"max ({hi}) must be at least min ({lo})")
        return tuple(SearchRange(min=lo, max=hi).values())
    if isinstance(value, list):
        if not value:
            raise ValueError("must list at least one value")
        if len(value) > MAX_SEARCH_VALUES:
            raise ValueError(f"lists at most {MAX_SEARCH_VALUES} values")
        return tuple(sorted({parse_tokens(v, limit) for v in value}))
    return (parse_tokens(value, limit),)


# The fleet model counts demand in whole milli-requests per second (plan/serving.py CAPACITY_UNITS_PER_RPS):
# a smaller rate would round to nothing, and $/million tokens over it would print absurd figures.
MIN_REQUESTS_PER_S = 1e-3
MAX_REQUESTS_PER_S = 1e7
HOURS_PER_DAY = 24
_PERIOD_KEYS = ("hour", "requests_per_s")


# ~30 B a row: a month of samples a minute apart (43,200 rows) is ~1.3 MB
PROFILE_CSV = FileKind("the profile's CSV", 4 * MiB, "give a CSV of timestamp,requests_per_s rows beside the scenario")


def hourly_rates(value: Any, base_dir: Path | None = None) -> tuple[float, ...] | None:
    """A day profile as requests/s for each UTC hour 0..23: 24 rates, periods [{hour, requests_per_s}, ...], each
    period's rate holding from its hour until the next period's (the first at hour 0, hours increasing), or the path
    of a CSV of samples (csv_hourly_rates) relative to the scenario's folder `base_dir`."""
    if value is None:
        return None
    if isinstance(value, str):
        return csv_hourly_rates(value, base_dir)
    if not isinstance(value, list) or not value:
        raise ValueError("give 24 requests/s, one per UTC hour from 0, periods [{hour: 0, requests_per_s: 1.5}, ...], "
                         "or a CSV file of timestamp,requests_per_s rows")
    if not all(isinstance(v, dict) for v in value):
        if any(isinstance(v, dict) for v in value):
            raise ValueError("give either 24 rates or a list of periods {hour, requests_per_s}, not both")
        if len(value) != HOURS_PER_DAY:
            raise ValueError(f"lists {len(value)} rates; a day profile lists {HOURS_PER_DAY}, one per UTC hour from 0 "
                             "(or give periods [{hour, requests_per_s}, ...])")
        return tuple(_rate(v, f"hour {h}") for h, v in enumerate(value))
    starts: list[int] = []
    rates: list[float] = []
    for i, period in enumerate(value):
        unknown = set(period) - set(_PERIOD_KEYS)
        if unknown:
            raise ValueError(f"period {i}: unknown key {shown(min(unknown, key=repr))}; a period has hour and "
                             "requests_per_s")
        if set(_PERIOD_KEYS) - set(period):
            raise ValueError(f"period {i}: give hour and requests_per_s, e.g. {{hour: 9, requests_per_s: 2.5}}")
        hour = period["hour"]
        if isinstance(hour, bool) or not isinstance(hour, int) or not 0 <= hour < HOURS_PER_DAY:
            raise ValueError(f"period {i}: hour {shown(hour)} must be a whole UTC hour from 0 to 23")
        if starts and hour <= starts[-1]:
            raise ValueError(f"period {i}: hour {hour} must come after the previous period's hour {starts[-1]}")
        starts.append(hour)
        rates.append(_rate(period["requests_per_s"], f"period {i}"))
    if starts[0] != 0:
        raise ValueError(f"the first period starts at hour {starts[0]}; start it at hour 0 so every hour has a rate")
    ends = starts[1:] + [HOURS_PER_DAY]
    return tuple(rate for start, end, rate in zip(starts, ends, rates) for _ in range(start, end))


def csv_hourly_rates(name: str, base_dir: Path | None) -> tuple[float, ...]:
    """A CSV of `timestamp,requests_per_s` rows under that header (ISO 8601 times, UTC unless they give an offset) as
    a day profile: the samples of each clock hour averaged, and each UTC hour of the day the highest of its days'
    averages (the day is sized for its busiest days); every hour 0..23 needs a sample. Read only beside a scenario
    file: a scenario given as keys (the Python API's dict, the web planner's form) names no folder to read from."""
    if base_dir is None:
        raise ValueError(f"{shown(name)}: a CSV profile is read from the scenario file's folder, and this scenario is "
                         "no file; give the 24 rates, or the scenario as a file")
    rows = csv.reader(io.StringIO(read_text(base_dir / name, PROFILE_CSV)))
    if [cell.strip() for cell in next(rows, [])] != ["timestamp", "requests_per_s"]:
        raise ValueError(f"{shown(name)} line 1: the header must be timestamp,requests_per_s")
    hours: dict[tuple[date, int], list[float]] = {}
    for line, row in enumerate(rows, start=2):
        if not row:
            continue
        where = f"{shown(name)} line {line}"
        if len(row) != 2:
            raise ValueError(f"{where}: give timestamp,requests_per_s (2 cells, not {len(row)})")
        try:
            when = datetime.fromisoformat(row[0].strip())
        except ValueError:
            raise ValueError(f"{where}: {shown(row[0])} is not an ISO 8601 time, e.g. 2026-11-02T10:00:00Z") from None
        when = when.astimezone(timezone.utc) if when.tzinfo else when
        try:
            rate = float(row[1])
        except ValueError:
            rate = row[1]  # _rate names it
        hours.setdefault((when.date(), when.hour), []).append(_rate(rate, where))
    by_hour = [[sum(v) / len(v) for (_, h), v in hours.items() if h == hour] for hour in range(HOURS_PER_DAY)]
    missing = [hour for hour, means in enumerate(by_hour) if not means]
    if missing:
        hours_named = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
        raise ValueError(f"{shown(name)}: no sample in UTC hour{'s' * (len(missing) > 1)} {hours_named}; the samples "
                         "must cover every hour of a day")
    return tuple(max(means) for means in by_hour)


def _rate(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_REQUESTS_PER_S:
        raise ValueError(f"{where}: {shown(value)} requests/s must be a number from 0 to {MAX_REQUESTS_PER_S:g}")
    return float(value)


class TrafficBucket(_Strict):
    """A share of the requests with one shape (e.g. short chats vs long documents)."""

    share: float = Field(gt=0, le=1)
    prompt_tokens: int = Field(ge=1, le=MAX_CONTEXT)
    output_tokens: int = Field(ge=1, le=MAX_CONTEXT)


class Traffic(_Strict):
    """Demand: a request rate or an output-token rate, and the request shape (mean, or buckets with shares)."""

    requests_per_s: float | None = Field(default=None, gt=0, le=MAX_REQUESTS_PER_S)
    output_tokens_per_s: float | None = Field(default=None, gt=0, le=1e10)
    prompt_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)
    output_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)
    buckets: list[TrafficBucket] | None = Field(default=None, min_length=1, max_length=16)
    # tokens at the start of every prompt that are the same for all its requests (a system prompt): the engines'
    # prefix cache holds them once per replica, and each request prefills the rest (Scheduler.cached_tokens)
    shared_prefix_tokens: int = Field(default=0, ge=0, le=MAX_CONTEXT)
    # requests/s by UTC hour over a day (hourly_rates): the fleet is sized for the peak hour, then hour by hour from
    # that plan (planner.plan.profile)
    profile: tuple[float, ...] | None = None

    @field_validator("profile", mode="before")
    @classmethod
    def _hourly(cls, value: Any, info: ValidationInfo) -> tuple[float, ...] | None:
        return hourly_rates(value, (info.context or {}).get("base_dir"))

    @model_validator(mode="after")
    def _complete(self) -> Traffic:
        if sum(rate is not None for rate in (self.requests_per_s, self.output_tokens_per_s, self.profile)) != 1:
            raise ValueError("give one of requests_per_s, output_tokens_per_s or profile (requests/s by hour)")
        if self.buckets is None and (self.prompt_tokens is None or self.output_tokens is None):
            raise ValueError("give prompt_tokens and output_tokens (the mean request), or buckets")
        if self.buckets is not None:
            if self.prompt_tokens is not None or self.output_tokens is not None:
                raise ValueError("give either buckets or prompt_tokens/output_tokens, not both")
            total = sum(b.share for b in self.buckets)
            if abs(total - 1) > 1e-6:
                raise ValueError(f"bucket shares add up to {total:g}; they must add up to 1")
        shortest = min(prompt for _, prompt, _ in self.shapes())
        if self.shared_prefix_tokens >= shortest:
            raise ValueError(f"shared_prefix_tokens: {self.shared_prefix_tokens} must be below prompt_tokens "
                             f"({shortest}): the shared prefix is the start of every prompt")
        if self.total_requests_per_s < MIN_REQUESTS_PER_S:
            peak = "the profile's peak hour, " if self.profile is not None else ""
            raise ValueError(f"{peak}{self.total_requests_per_s:.3g} requests/s is below the {MIN_REQUESTS_PER_S:g} the fleet "
                             "model counts (whole milli-requests per second); a smaller demand is one replica")
        return self

    def shapes(self) -> list[tuple[float, int, int]]:
        """(share of requests, prompt tokens, output tokens) per bucket."""
        if self.buckets is None:
            return [(1.0, self.prompt_tokens or 1, self.output_tokens or 1)]
        return [(b.share, b.prompt_tokens, b.output_tokens) for b in self.buckets]

    def scaled(self, times: float) -> Traffic:
        """The same traffic with every rate `times` as high."""
        return self.model_copy(update={
            "requests_per_s": self.requests_per_s and times * self.requests_per_s,
            "output_tokens_per_s": self.output_tokens_per_s and times * self.output_tokens_per_s,
            "profile": self.profile and tuple(times * rate for rate in self.profile)})

    def hour_requests_per_s(self, hour: int) -> float:
        """The requests/s of a UTC hour: the profile's, or the one rate all day."""
        return self.profile[hour] if self.profile is not None else self.total_requests_per_s

    @property
    def total_requests_per_s(self) -> float:
        """The requests/s the fleet is sized for: the rate given, or a profile's peak hour's."""
        if self.profile is not None:
            return max(self.profile)
        if self.requests_per_s is not None:
            return self.requests_per_s
        mean_output = sum(share * output for share, _, output in self.shapes())
        return (self.output_tokens_per_s or 0) / mean_output


class SloSpec(_Strict):
    ttft_s: float | None = Field(default=None, gt=0, le=3600)  # time to first token
    tpot_s: float | None = Field(default=None, gt=0, le=60)  # time per output token
    percentile: float | None = Field(default=None, gt=0, lt=100)  # the targets hold at this percentile; omit: the mean

    @model_validator(mode="after")
    def _has_a_target(self) -> SloSpec:
        if self.ttft_s is None and self.tpot_s is None:  # a percentile alone would constrain nothing
            raise ValueError("give ttft_s, tpot_s or both (a percentile holds targets), or remove slo")
        return self


# a calibration scales the speed a fleet's replicas are sized with; a single configuration is chosen by memory and price
CALIBRATION_NEEDS_TRAFFIC = "a calibration scales a fleet's speed, and this scenario has no traffic; add workload.traffic"
_FLEET_ONLY = ("slo", "utilisation", "redundancy", "min_replicas", "max_configs")


class WorkloadSpec(_Strict):
    context: tuple[int, ...] = Field(description="tokens per sequence (prompt + output): a value, a list or {min, max}")
    concurrency: tuple[int, ...] = Field(default=(1,), description="sequences each replica holds at once")
    replicas: int = Field(default=1, ge=1, le=10_000)
    # fleet sizing (with traffic): replicas follow from demand, and `concurrency` caps the batch searched
    traffic: Traffic | None = None
    slo: SloSpec | None = None
    utilisation: float = Field(default=0.8, gt=0, le=1)  # plan replicas at most this busy, for bursts
    redundancy: int = Field(default=0, ge=0, le=100)  # N+k: spare replicas' worth of capacity
    min_replicas: int = Field(default=1, ge=0, le=10_000)
    max_configs: int | None = Field(default=None, ge=1, le=100)  # distinct configurations at most
    # a single configuration (no traffic): the least output tokens/s one replica must make running `concurrency`
    # requests that each hold the whole context (the plan's "speed at the full context"); slower ones are left out
    min_tokens_per_s: float | None = Field(default=None, gt=0, le=1e9)

    @field_validator("context", "concurrency", mode="before")
    @classmethod
    def _search(cls, value: Any, info: ValidationInfo) -> tuple[int, ...]:
        return search_values(value, _LIMITS[info.field_name])

    @model_validator(mode="after")
    def _keys_that_apply(self) -> WorkloadSpec:
        """A key the plan would not read is an error: fleet keys need traffic, and traffic sets the replicas."""
        if self.traffic is None:
            given = [key for key in _FLEET_ONLY if key in self.model_fields_set]
            if given:
                raise ValueError(f"{given[0]} sizes a fleet under load and needs traffic (requests_per_s or "
                                 f"output_tokens_per_s); add workload.traffic or remove {given[0]}")
        elif self.min_tokens_per_s is not None:
            raise ValueError("min_tokens_per_s: with traffic, speed is the SLO's (workload.slo.tpot_s) and the "
                             "replicas follow from demand; remove min_tokens_per_s")
        elif "replicas" in self.model_fields_set:
            raise ValueError("replicas: with traffic the replica count follows from demand; remove replicas "
                             "(min_replicas sets a floor)")
        return self


class Search(_Strict):
    # an empty list would search nothing: omit the key for the default instead
    precisions: list[str] | None = Field(default=None, min_length=1)  # default: serving precisions at or above the floor
    quality_floor: Quality = "near-lossless"
    kv_dtypes: list[str] = Field(default=["auto"], min_length=1)
    gpus: list[str] | None = Field(default=None, min_length=1)  # default: every priced GPU
    exclude_gpus: list[str] = []
    max_gpus_per_replica: int = Field(default=8, ge=1, le=1024)
    max_gpus_per_node: int | None = Field(default=None, ge=1, le=64)
    # plan precisions the engine runs only with weight-only kernels (dequantized, 16-bit compute: MXFP4 on Hopper,
    # FP8 on Ampere; catalogs/precision_support.yaml), timed at the 16-bit rate; false: only native kernels
    allow_emulated: bool = True
    # the parallel layouts searched: tp (TP within a node, PP across nodes: the default) and dp_ep (a MoE model's
    # data-parallel attention and expert parallelism, as SGLang runs them: planner/estimator/layout.py expert_layouts)
    layouts: list[Literal["tp", "dp_ep"]] = Field(default=["tp"], min_length=1)
    # the experts' all-to-all backends dp_ep layouts are searched with: none (outputs all-reduced) and/or deepep
    all_to_all: list[Literal["none", "deepep"]] = Field(default=["none"], min_length=1)
    # speculative decoding searched (planner.estimator.speculative): none, and/or mtp (the checkpoint's own MTP module
    # drafts) with draft_tokens a cycle and the acceptance length L a request gains a cycle (default: the model
    # family's published figure, catalogs/speculative.yaml)
    speculative: list[Literal["none", "mtp"]] = Field(default=["none"], min_length=1)
    draft_tokens: int | None = Field(default=None, ge=1, le=16)
    acceptance_length: float | None = Field(default=None, ge=1, le=17)
    # with traffic: aggregated replicas and/or separate prefill and decode pools (planner/plan/disaggregated.py)
    serving: list[Literal["aggregated", "disaggregated"]] = Field(default=["aggregated"], min_length=1)

    @model_validator(mode="after")
    def _all_to_all_needs_expert_parallel(self) -> Search:
        if "deepep" in self.all_to_all and "dp_ep" not in self.layouts:
            raise ValueError("all_to_all: an all-to-all backend carries expert-parallel traffic; add dp_ep to "
                             "search.layouts or remove all_to_all")
        given = [key for key in ("draft_tokens", "acceptance_length") if getattr(self, key) is not None]
        if given and "mtp" not in self.speculative:
            raise ValueError(f"{given[0]}: sets the MTP draft, and search.speculative has no mtp; add mtp to "
                             f"search.speculative or remove {given[0]}")
        if None not in (self.draft_tokens, self.acceptance_length) and \
                self.acceptance_length > self.draft_tokens + 1:  # type: ignore[operator]
            raise ValueError(f"acceptance_length: {self.acceptance_length:g} must be at most draft_tokens + 1 = "
                             f"{self.draft_tokens + 1} (the bonus token included)")  # type: ignore[operator]
        return self


# the engines that read each engine key of a scenario: the flags' own table (engines.base.READ_BY) for those the
# section shares with the command line, and the margin's overhead and vLLM's pool mode besides (the others are
# validated by EngineSettings.validate)
ENGINE_KEYS = {"overhead": (PLANNING_MARGIN,), "kv_cache_memory": ("vllm",),
               **{key: engines for key, (_, engines) in READ_BY.items()
                  if key in ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "mem_fraction_static")}}


class EngineSpec(_Strict):
    """The memory model that decides what fits: an engine's own budget (vLLM by default) or the seed's margin."""

    name: Literal[(*profiled_engines(), PLANNING_MARGIN)] = "vllm"  # type: ignore[valid-type]  # the registry's
    # the engine release whose profile sizes it (catalogs/engine_profiles.yaml); default: the engine's current release
    version: str | None = Field(default=None, min_length=1, max_length=40)
    overhead: float | None = Field(default=None, ge=0, le=1)  # simple only: the margin of weights + KV
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)  # vLLM (default 0.9)
    # vLLM: how the KV pool is sized. auto: gpu_memory_utilization's budget, or where that cannot hold one request of
    # the context (and gpu_memory_utilization is left unset), the figure vLLM logs "to fully utilize gpu memory",
    # passed as --kv-cache-memory-bytes; utilization: always the budget; full: always that figure
    kv_cache_memory: Literal["auto", "utilization", "full"] = "auto"
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_BATCH)  # vLLM
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=10_000_000)  # vLLM
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)  # SGLang
    # SGLang --max-running-requests (each DP attention group runs its N // dp share); default: the release's own limit
    max_running_requests: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    # the fused-MoE kernel the servers are told to run (SGLang --moe-runner-backend; vLLM's
    # VLLM_USE_FLASHINFER_MOE_INT4=1 is flashinfer_trtllm); default: the kernel the release picks
    moe_kernel: str | None = Field(default=None, pattern=MOE_KERNEL_PATTERN)
    # SGLang --attention-backend (on AMD it decides the 0.85 of the fraction above 8K); default: the one SGLang picks
    attention_backend: str | None = Field(default=None, pattern=MOE_KERNEL_PATTERN)

    @model_validator(mode="after")
    def _read_by_the_engine(self) -> EngineSpec:
        """A key the named engine does not read would change nothing: refused, not ignored (the engines read them in
        planner/estimator/engines: SGLang's max_num_seqs is its CUDA-graph batch, max_num_batched_tokens its chunked
        prefill; TensorRT-LLM's are its max_batch_size, max_num_tokens and free-memory fraction)."""
        for key, engines in ENGINE_KEYS.items():
            if key in self.model_fields_set and self.name not in engines:
                raise ValueError(f"{key}: engine {self.name} does not read it (engine {' or '.join(engines)} does); "
                                 "remove it or set engine.name")
        return self


class Pricing(_Strict):
    providers: list[str] | None = Field(default=None, min_length=1)
    market: Market = "on-demand"
    regions: list[str] | None = Field(default=None, min_length=1)
    # which kinds of price count (catalogs/prices.yaml's kind): every kind by default, since list prices alone leave
    # shipped scenarios without an offer (glm-5-nvfp4-b200's 8 x B200 is priced only by a quote); plans say the kind
    kinds: list[PriceKind] = Field(default=list(PRICE_KINDS), min_length=1)
    # the commitments whose prices count beside on-demand ones (1m, 1y, 3y); none by default: a commitment is a business
    # decision, paid every hour of its term used or not
    terms: list[Term] = []

    @model_validator(mode="after")
    def _terms_are_on_demand(self) -> Pricing:
        if self.terms and self.market == "spot":
            raise ValueError("terms: a commitment is priced as on-demand capacity, and market is spot; set market: "
                             "on-demand or any, or remove terms")
        return self
    # a plan paying a price older than this (days since the end of its as_of) warns that it is stale
    max_price_age_days: int = Field(default=MAX_PRICE_AGE_DAYS, ge=0)


class SolverSpec(_Strict):
    time_limit_s: float = Field(default=10.0, gt=0, le=3600)
    top: int = Field(default=5, ge=0, le=100)


class QuotaSpec(_Strict):
    """At most max_gpus GPUs rented from what matches (provider / region / GPU type), across all workloads.
    The names are checked against the catalog when the fleet is built (plan/fleet.py)."""

    max_gpus: int = Field(ge=0, le=1_000_000)
    provider: str | None = None
    region: str | None = None
    gpu: str | None = None


class SpotSpec(_Strict):
    """What spot capacity a fleet counts on (planner.plan.failure): the share of spot instances reclaimed a month, for
    every spot pool or per provider, and the minutes a reclaimed replica takes to be replaced."""

    interruption_rate: float | dict[str, float]
    replace_minutes: float | None = Field(default=None, ge=0, le=24 * 60)  # default: fleet.scale_up_minutes

    @field_validator("interruption_rate", mode="before")
    @classmethod
    def _rates(cls, value: Any) -> float | dict[str, float]:
        if not isinstance(value, dict):
            return interruption_rate(value)
        if not value:
            raise ValueError("names no provider; give one rate, or {provider: rate, ...}")
        rates = {}
        for provider, rate in value.items():
            try:
                rates[str(provider)] = interruption_rate(rate)
            except ValueError as exc:
                raise ValueError(f"{printable(str(provider))}: {exc}") from None
        return rates


class FleetSpec(_Strict):
    quotas: list[QuotaSpec] = Field(default=[], max_length=100)
    on_demand_share: float | None = Field(default=None, ge=0, le=1)  # of each workload's demand, with spot allowed
    # with a traffic profile: minutes a replica added for an hour takes to serve (start, load weights, warm up); it
    # starts that long before its hour, which pays for it (planner.plan.profile)
    scale_up_minutes: float = Field(default=10, ge=0, le=60)
    spot: SpotSpec | None = None  # spot replicas count at their expected availability (planner.plan.failure)
    survive: Survive | None = None  # demand met with any one region (provider) lost

    @property
    def replace_minutes(self) -> float:
        """Minutes a reclaimed spot replica takes to serve again: fleet.spot.replace_minutes, or scale_up_minutes."""
        given = self.spot.replace_minutes if self.spot else None
        return self.scale_up_minutes if given is None else given


class NamedWorkload(_Strict):
    """One service of a multi-model fleet; search / engine / pricing default to the scenario's."""

    name: str = Field(min_length=1, max_length=100)
    model: str = Field(min_length=1)
    params: int | float | str | None = None
    workload: WorkloadSpec
    search: Search | None = None
    engine: EngineSpec | None = None
    pricing: Pricing | None = None


class Scenario(_Strict):
    name: str | None = None
    description: str | None = None
    model: str | None = None  # with workload; or a `workloads:` list for a multi-model fleet
    params: int | float | str | None = None  # 70e9 reads as a float in YAML
    workload: WorkloadSpec | None = None
    workloads: list[NamedWorkload] | None = Field(default=None, min_length=1, max_length=200)
    fleet: FleetSpec | None = None
    search: Search = Search()
    engine: EngineSpec = EngineSpec()
    pricing: Pricing = Pricing()
    # for a fleet with fixed demand both rank plans alike; the plan prints both figures
    objective: Literal["cost_per_hour", "cost_per_million_output_tokens"] = "cost_per_hour"
    solver: SolverSpec = SolverSpec()
    # a `planner calibrate` file (relative to the scenario's folder): the speed model's factors for the GPU generation
    # x engine it was fitted on
    calibration: str | None = Field(default=None, min_length=1, max_length=4096)
    # where the file was, so model paths resolve relative to it (not part of the YAML)
    base_dir: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _one_form(self) -> Scenario:
        if self.workloads is not None:
            if self.model is not None or self.workload is not None:
                raise ValueError("give either model + workload (one service) or workloads (a fleet), not both")
            if self.params is not None:
                raise ValueError("params: a fleet's workloads each give their own (workloads[].params); move it there")
            names = [w.name for w in self.workloads]
            if len(set(names)) != len(names):
                raise ValueError("workloads: names must be unique")
            if any(w.workload.traffic is None for w in self.workloads):
                raise ValueError("workloads: every workload of a fleet needs workload.traffic")
            if self.params is not None:
                raise ValueError("params: each workload of a fleet gives its own params; move it into that workload")
        elif self.model is None or self.workload is None:
            raise ValueError("model and workload are required (or a workloads list for a fleet)")
        if self.fleet is not None and not self.is_fleet:
            raise ValueError("fleet: quotas and on_demand_share shape a fleet, which needs workload.traffic (or a "
                             "workloads list); add traffic or remove fleet")
        if self.is_fleet:
            for where, part in self.fleet_parts():
                if "mtp" in part.search.speculative and "aggregated" not in part.search.serving:
                    raise ValueError(f"search.speculative ({where}): mtp is sized for aggregated replicas; a "
                                     "disaggregated decode pool's MTP cycles beside transferred prompts are not "
                                     "modelled yet: add aggregated to search.serving or remove mtp")
        if self.calibration is not None and not self.is_fleet:
            raise ValueError(f"calibration: {CALIBRATION_NEEDS_TRAFFIC} or remove calibration")
        if self.is_fleet and "top" in self.solver.model_fields_set:
            raise ValueError("solver.top: the alternatives it lists are a single configuration's; a fleet plan is one "
                             "fleet (its left-out and layout lines say what else was weighed); remove top")
        if self.objective != "cost_per_hour" and not self.is_fleet:
            # with a fixed demand the two objectives rank plans alike; without one the plan is ranked by cost per hour
            raise ValueError("objective: cost_per_million_output_tokens ranks a fleet serving fixed traffic (as cost "
                             "per hour does), and this scenario has no traffic; add workload.traffic or set "
                             "objective: cost_per_hour")
        if not self.is_fleet and "disaggregated" in self.search.serving:
            raise ValueError("search.serving: disaggregated sizes prefill and decode pools by traffic; add "
                             "workload.traffic or remove disaggregated")
        self._on_demand_share_applies()
        if self.fleet is not None and "scale_up_minutes" in self.fleet.model_fields_set and not self.has_profile:
            raise ValueError("fleet.scale_up_minutes times the replicas a day profile adds, and no workload has one; "
                             "add workload.traffic.profile or remove fleet.scale_up_minutes")
        return self

    def _on_demand_share_applies(self) -> None:
        """The share splits demand between on-demand and spot pools: with one market it would change nothing
        (on-demand) or leave nothing to rent (spot). fleet.spot needs spot allowed somewhere."""
        if self.fleet is None:
            return
        if self.fleet.spot is not None and self.is_fleet:
            parts = [part.pricing.market for _, part in self.fleet_parts()]
            if all(market == "on-demand" for market in parts):
                raise ValueError("fleet.spot: interruption rates apply to spot pools, and pricing.market is on-demand; "
                                 "set pricing.market: spot or any, or remove fleet.spot")
        if self.fleet.on_demand_share is None:
            return
        markets = [(f"workloads[{i}].pricing.market", w.pricing.market) if w.pricing is not None
                   else ("pricing.market", self.pricing.market) for i, w in enumerate(self.workloads or ())]
        markets = markets or [("pricing.market", self.pricing.market)]
        for where, market in markets:
            if market != "any":
                raise ValueError(f"fleet.on_demand_share applies only when spot is allowed, and {where} is {market}; "
                                 f"set {where}: any, or remove fleet.on_demand_share")

    @property
    def is_fleet(self) -> bool:
        """Traffic given: size a fleet of replicas rather than pick one configuration."""
        return self.workloads is not None or (self.workload is not None and self.workload.traffic is not None)

    @property
    def has_profile(self) -> bool:
        """Some workload's traffic is a day profile: the fleet is also planned hour by hour."""
        return any(part.workload.traffic is not None and part.workload.traffic.profile is not None
                   for _, part in self.fleet_parts()) if self.is_fleet else False

    def with_calibration(self, path: str) -> Scenario:
        """The scenario with `path` (--calibration FILE: a path from where the command runs) in place of its
        calibration:, by the rule the key follows."""
        if not self.is_fleet:
            raise PlannerInputError(f"--calibration: {CALIBRATION_NEEDS_TRAFFIC} or drop --calibration")
        return self.model_copy(update={"calibration": path})

    def with_max_price_age(self, days: int) -> Scenario:
        """The scenario with every pricing section's max_price_age_days set to `days` (--max-price-age)."""
        workloads = [w.model_copy(update={"pricing": w.pricing.model_copy(update={"max_price_age_days": days})})
                     if w.pricing else w for w in self.workloads] if self.workloads else self.workloads
        return self.model_copy(update={"pricing": self.pricing.model_copy(update={"max_price_age_days": days}),
                                       "workloads": workloads})

    def fleet_parts(self) -> list[tuple[str, Scenario]]:
        """Each service of the fleet as a one-service scenario: its own search / engine / pricing keys over the
        scenario's (a key the workload leaves out is the scenario's, not the section's default)."""
        if self.workloads is None:
            return [(self.name or self.model or "workload", self)]
        return [(w.name, self.model_copy(update={
            "name": w.name, "model": w.model, "params": w.params, "workload": w.workload, "workloads": None,
            "search": _over(self.search, w.search), "engine": _over(self.engine, w.engine),
            "pricing": _over(self.pricing, w.pricing),
        })) for w in self.workloads]

    @field_validator("name", "description", "model")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        # a lone surrogate (YAML "\ud800") can be neither printed nor used as a path; no name or path holds NUL
        if value is not None and ("\x00" in value or any("\ud800" <= c <= "\udfff" for c in value)):
            raise ValueError("holds a character no name or path can: NUL or a lone surrogate such as \\ud800")
        return value


def _over(section: _Strict, own: _Strict | None) -> Any:
    """A workload's section over the scenario's, key by key, validated again as one section."""
    if own is None:
        return section
    return type(section).model_validate({**section.model_dump(exclude_unset=True), **own.model_dump(exclude_unset=True)})


def parse_scenario(data: Any, label: str = "scenario", base_dir: Path | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise PlannerInputError(f"{label}: the file must hold a mapping of keys (model:, workload:, ...)")
    if "base_dir" in data:
        raise PlannerInputError(f"{label}: base_dir: unknown key; remove it")
    try:
        scenario = Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        # a misspelt key is the root cause of the "field required" error that comes with it
        first = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
        path = ".".join(printable(str(p)) for p in first["loc"]
                        if not str(p).startswith(("function-", "list[", "union[")))
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key; check the spelling against the README's scenario schema"
        raise PlannerInputError(f"{label}: {path}: {message}" if path else f"{label}: {message}") from None
    return scenario.model_copy(update={"base_dir": base_dir})


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    label = f"scenario {printable(p.name)}"
    text = read_text(p, SCENARIO)
    data = parse_yaml(text, label)
    return parse_scenario(data, label, p.resolve().parent)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long to be a path is no path
        return False


def model_reference(scenario: Scenario) -> str:
    """The model argument with a relative config path resolved against the scenario's folder."""
    model = scenario.model
    if scenario.base_dir is not None and (model.endswith(".json") or model.startswith(".")):
        candidate = (scenario.base_dir / model).resolve()
        return str(candidate)
    if scenario.base_dir is not None and _exists(scenario.base_dir / model):
        return str((scenario.base_dir / model).resolve())
    return model
