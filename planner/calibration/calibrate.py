"""`planner calibrate`: measured benchmark runs replayed on the simulator, the named factors fitted to them, and the
calibration file that records both (read back by `--calibration`).

Each run is replayed as `planner bench` replays a `vllm bench serve` run (planner.estimator.benchmark): its request
rate and max concurrency, its mean prompt and output lengths fixed (the results keep totals, not the draws), and
fewer prompts where it sent many (replay_prompts): enough waves of its requests in flight to reach the steady state,
within REPLAY_STEPS steps. Compared: mean TPOT, mean TTFT and output tokens/s, where the run measured them; a closed
loop's output tokens/s at the concurrency the run held (simulated_metrics).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from math import ceil, inf
from pathlib import Path
from typing import Any, Sequence

from planner.calibration.factors import FACTORS, Factors, calibrated_catalog, floors
from planner.calibration.fit import FitResult, Observation, Residual, fit_factors
from planner.calibration.readers import MeasuredRun
from planner.catalog.load import bounded, catalog_record
from planner.errors import PlannerInputError
from planner.files import FileKind, read_text
from planner.units import MiB
from planner.estimator.benchmark import BenchmarkResult, BenchmarkRun
from planner.yamlfile import parse_yaml

SCHEMA_VERSION = 1
# A calibration file is a few KB: a residual row per metric per run (3 x the runs).
CALIBRATION = FileKind("--calibration", 4 * MiB, "give a file written by `planner calibrate ... -o FILE`")
# A replay's simulated steps, about: the simulator takes ~3 us a step on this project's 2-core machine (Llama 3.1 8B,
# H100, one request at a time: 20 prompts of 1,000 + 200 tokens in 12 ms), so a replay costs at most ~6 ms and ten
# runs' fit and leave-one-out refits (a few hundred new grid points' replays, the rest cached) stay within 10 s.
REPLAY_STEPS = 2000
# Waves of a run's requests in flight a replay keeps at least: the first wave arrives together, the second is the
# steady state's first.
MIN_WAVES = 2
METRICS = ("tpot_ms", "ttft_ms", "output_tok_s")


@dataclass(frozen=True, kw_only=True)
class ResultFile:
    name: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class FittedOn:
    """What the factors were fitted on."""

    model: str
    gpu: str
    generation: str
    engine: str
    engine_versions: tuple[str, ...] = ()  # as the results record them
    tp: int = bounded(ge=1)
    pp: int = bounded(ge=1)
    ep: int = bounded(1, ge=1)  # expert-parallel ranks among the tp GPUs
    dp: int = bounded(1, ge=1)  # data-parallel attention groups among them
    precision: str
    kv_dtype: str
    dates: tuple[str, ...] = ()
    results: tuple[ResultFile, ...]
    moe_kernel: str | None = None  # the fused-MoE kernel the runs were replayed on (None: the release's pick)


CALIBRATED, EXTRAPOLATED, NOT_CALIBRATED = "calibrated", "extrapolated", "not calibrated"


@dataclass(frozen=True, kw_only=True)
class TimedReplica:
    """A replica configuration a calibration may time: what Calibration.coverage holds against its runs'."""

    model: str  # the architecture's catalog name
    gpu: str
    generation: str
    engine: str  # its speed profile's name
    tp: int
    pp: int
    precision: str  # resolved: a catalog precision's name
    kv_dtype: str  # resolved
    ep: int = 1
    dp: int = 1
    moe_kernel: str | None = None  # the fused-MoE kernel the engine is told to run (None: the release's pick)
    release: str | None = None  # the engine release asked for (None: the engine's default)
    speculative: bool = False
    pool: str | None = None  # a disaggregated pair's prefill or decode pool (None: an aggregated replica)


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """What a calibration is to one replica: `calibrated` (the configuration its runs ran, on the generation x engine
    it was fitted on), `extrapolated` (its factors scale another configuration of that generation x engine; `differs`
    names each change) or `not calibrated` (another generation x engine, timed on the catalog's constants; `differs`
    names it)."""

    state: str
    fitted_on: str  # "<generation> x <engine>"
    differs: tuple[str, ...] = ()
    moe_kernel: str | None = None  # the kernel its runs were told to run, where they were told one

    @property
    def applied(self) -> bool:
        """Whether its factors time the replica."""
        return self.state != NOT_CALIBRATED

    def describe(self) -> str:
        """As a plan's speed: line says it."""
        kernel = f", fitted on runs of its {self.moe_kernel} MoE kernel" if self.moe_kernel else ""
        if self.state == CALIBRATED:
            return f"calibrated ({self.fitted_on}{kernel})"
        if self.state == EXTRAPOLATED:
            return f"extrapolated ({self.fitted_on}{kernel}; {'; '.join(self.differs)})"
        return f"not calibrated ({self.differs[0]}; the calibration is for {self.fitted_on}{kernel})"

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "fitted_on": self.fitted_on, "differs": list(self.differs),
                "moe_kernel": self.moe_kernel}


def _release_outside(replica: TimedReplica, versions: Sequence[str]) -> str | None:
    """"engine release R, not V" when the runs recorded their engine's release and the replica runs another (its
    stated one, else the engine's default); None when they match or the runs recorded none."""
    from planner.estimator.engines.registry import profiled_engines
    from planner.estimator.performance import default_release, release_key

    fitted = {release_key(v): v for v in versions if release_key(v)}
    if not fitted or replica.engine not in profiled_engines():  # llama.cpp: no releases kept
        return None
    release = replica.release or default_release(replica.engine)
    if release_key(release) in fitted:
        return None
    return f"engine release {release}, not {' / '.join(fitted.values())}"


@dataclass(frozen=True, kw_only=True)
class ResidualRow:
    result: str  # the run: its file's name (#N for the N-th run of a file)
    metric: str
    measured: float
    before: float
    after: float
    held_out: float | None = None


@dataclass(frozen=True, kw_only=True)
class Errors:
    """Mean |log(predicted / measured)| over every residual."""

    before: float = bounded(ge=0)
    after: float = bounded(ge=0)
    held_out: float | None = bounded(None, ge=0)


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """A calibration file's content."""

    schema_version: int
    factors: Factors
    informed: tuple[str, ...]  # the factors the runs identify (each the dominant one of a measured metric), fitted
    fitted_on: FittedOn
    prompts_per_replay: tuple[int, ...]
    errors: Errors
    residuals: tuple[ResidualRow, ...]
    # identified, but the runs asked them past a bound: not a calibration of their terms, left at 1.0
    past_bounds: tuple[str, ...] = ()

    def applies_to(self, generation: str, engine: str) -> bool:
        return generation == self.fitted_on.generation and engine == self.fitted_on.engine

    def coverage(self, replica: TimedReplica) -> Coverage:
        """What it is to `replica`: its factors scale the GPU generation x engine they were fitted on, whatever the
        configuration; a replica that is not the one its runs ran (another model, card of the generation, layout,
        precision, KV dtype, MoE kernel, engine release, or serving mode) is timed by extrapolation, and each
        difference is named."""
        fitted = self.fitted_on
        on = f"{fitted.generation} x {fitted.engine}"
        if not self.applies_to(replica.generation, replica.engine):
            return Coverage(state=NOT_CALIBRATED, fitted_on=on,
                            differs=(f"{replica.generation} x {replica.engine}",))
        differs = [f"{what} {here}, not {there}" for what, here, there in (
            ("model", replica.model, fitted.model), ("GPU", replica.gpu, fitted.gpu),
            ("layout", f"tp {replica.tp} x pp {replica.pp}", f"tp {fitted.tp} x pp {fitted.pp}"),
            ("precision", replica.precision, fitted.precision), ("KV dtype", replica.kv_dtype, fitted.kv_dtype),
            ("MoE kernel", replica.moe_kernel or "the release's pick", fitted.moe_kernel or "the release's pick"),
            ("expert parallel", replica.ep, fitted.ep), ("DP attention", replica.dp, fitted.dp))
            if here != there]
        release = _release_outside(replica, fitted.engine_versions)
        if release:
            differs.append(release)
        if replica.speculative:  # calibrations are fitted on replicas without it
            differs.append("MTP speculation")
        if replica.pool is not None:  # and on aggregated ones: benchmark results are of a whole server
            differs.append(f"{replica.pool} pool of a disaggregated pair")
        return Coverage(state=EXTRAPOLATED if differs else CALIBRATED, fitted_on=on, differs=tuple(differs),
                        moe_kernel=fitted.moe_kernel)

    def to_yaml(self) -> str:
        import yaml

        header = ("# planner calibrate: factors on the speed model's terms (each multiplies the time of its terms) for "
                  f"{self.fitted_on.generation} x {self.fitted_on.engine}\n")
        return header + yaml.safe_dump(_plain(asdict(self)), sort_keys=False, allow_unicode=True)


def _plain(value: Any) -> Any:
    """Tuples as lists, for yaml.safe_dump."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def load_calibration(path: str | Path) -> Calibration:
    """A calibration file, every key known and every factor within its bounds, else one line naming the key."""
    p = Path(path)
    data = parse_yaml(read_text(p, CALIBRATION), f"--calibration {p.name}")
    try:
        calibration = catalog_record(Calibration, data, f"--calibration {p.name}")
    except PlannerInputError as exc:
        raise PlannerInputError(f"{exc}; {CALIBRATION.fix}") from None
    if calibration.schema_version != SCHEMA_VERSION:
        raise PlannerInputError(f"--calibration {p.name}: schema_version {calibration.schema_version} is not "
                                f"{SCHEMA_VERSION}; write it again with this planner's `planner calibrate`")
    unknown = next((name for name in (*calibration.informed, *calibration.past_bounds) if name not in FACTORS), None)
    if unknown is not None:
        raise PlannerInputError(f"--calibration {p.name}: informed names {unknown!r}; the factors are "
                                f"{', '.join(FACTORS)}")
    _check_floors(calibration, p.name)
    return replace(calibration, fitted_on=_catalog_dtypes(calibration.fitted_on))


def _check_floors(calibration: Calibration, name: str) -> None:
    """A fit never moves `memory` or `compute` below its generation x engine's floor (factors.floors: a read faster
    than the datasheet bandwidth, a kernel faster than its peak); a file that says otherwise was edited by hand."""
    from planner.estimator.performance import load_performance_catalog

    on = calibration.fitted_on
    try:
        lowest = floors(load_performance_catalog(), on.generation, on.engine)
    except PlannerInputError as exc:
        raise PlannerInputError(f"--calibration {name}: fitted_on: {exc}") from None
    for factor in ("memory", "compute"):
        value = getattr(calibration.factors, factor)
        if value < lowest[factor] * (1 - 1e-9):
            raise PlannerInputError(
                f"--calibration {name}: factors.{factor} {value:g} is below {lowest[factor]:.4g}, the lowest "
                f"{on.generation} x {on.engine} allows (its terms would beat the datasheet); write it again with "
                f"`planner calibrate`")


def _catalog_dtypes(fitted: FittedOn) -> FittedOn:
    """The precision and KV dtype as the catalog names them for the fitted model: files written before fits recorded
    resolved names say `auto` (the checkpoint's) or the name as typed (`BF16`). Left as written where the catalog
    does not know the model (a config.json's, not resolved from the file's text) or the names."""
    from planner.catalog.load import load_catalog
    from planner.estimator.engines.registry import resolve_engine_kv_dtype
    from planner.model.architecture import architecture_from_config
    from planner.model.precision import resolve_precision

    catalog = load_catalog()
    try:
        arch = architecture_from_config(catalog.models.get(fitted.model).config, fitted.model)
        precision = resolve_precision(catalog, arch, fitted.precision)
        kv_dtype = catalog.kv_dtypes.get(resolve_engine_kv_dtype(fitted.engine, arch, precision, fitted.kv_dtype)).name
    except PlannerInputError:
        return fitted
    return replace(fitted, precision=precision.name, kv_dtype=kv_dtype)


def runs_release(runs: Sequence[MeasuredRun], stated: str | None) -> str | None:
    """The engine release whose profile replays `runs`: `stated` (--engine-version; None: the engine's default), which
    every release the results record (SGLang's server_info; vLLM's results record none) must be, else one line.
    A recorded release alone does not pick the profile: planner keeps profiles of a few releases only."""
    from planner.estimator.performance import release_key

    other = next((r.engine_version for r in runs if stated is not None and r.engine_version
                  and release_key(r.engine_version) and release_key(r.engine_version) != release_key(stated)), None)
    if other is not None:
        raise PlannerInputError(f"--engine-version: {stated}, and the results record release {other}; give the "
                                "release the runs' server ran, or drop --engine-version")
    return stated


def replay_prompts(run: MeasuredRun) -> int:
    """The prompts a replay of `run` sends: its requests in flight (its max concurrency; at a request rate, its
    rate x mean E2E latency by Little's law; all of them when sent at once) times the waves REPLAY_STEPS allows,
    never fewer than MIN_WAVES of them, never more than it completed."""
    if run.max_concurrency is not None:
        in_flight = float(run.max_concurrency)
    elif run.request_rate == inf:
        in_flight = float(run.completed)
    else:
        e2e_ms = run.e2el.mean_ms or ((run.ttft.mean_ms or 0) + (run.tpot.mean_ms or 0) * (run.mean_output_tokens - 1))
        in_flight = max(1.0, run.request_rate * e2e_ms / 1000)
    waves = max(MIN_WAVES, REPLAY_STEPS // ceil(run.mean_output_tokens))
    return max(1, min(run.completed, ceil(in_flight) * waves))


def replay_run(run: MeasuredRun) -> BenchmarkRun:
    return BenchmarkRun(num_prompts=replay_prompts(run), request_rate=run.request_rate,
                        max_concurrency=run.max_concurrency, input_len=max(1, round(run.mean_input_tokens)),
                        output_len=max(1, round(run.mean_output_tokens)))


def measured_metrics(run: MeasuredRun) -> dict[str, float]:
    """What the run measured of METRICS (a value of 0 is no measurement: a log cannot compare it)."""
    values = {"tpot_ms": run.tpot.mean_ms if round(run.mean_output_tokens) > 1 else None,
              "ttft_ms": run.ttft.mean_ms, "output_tok_s": run.output_throughput}
    return {k: v for k, v in values.items() if v}


def in_flight(request_throughput: float | None, mean_e2e_ms: float | None) -> float | None:
    """A run's mean concurrency, by Little's law: its requests/s times its mean E2E latency (SGLang's bench_serving
    prints it as 'Concurrency', its E2E latencies summed over its duration); None where it lacks either."""
    if not request_throughput or not mean_e2e_ms:
        return None
    return request_throughput * mean_e2e_ms / 1000


def at_held_concurrency(throughput: float, held: float, clients: int, predicted_held: float) -> float:
    """A closed loop's predicted output tokens/s, made at `predicted_held` requests in flight on average, as a run of
    `clients` clients that held `held` shows it (Little's law: the same mean E2E latency, `held` in flight). No run
    holds more than its clients' requests: a figure above them is its stored figures' rounding (or a hostile file's
    overflow) and counts as `clients`."""
    return throughput * min(held, clients) / predicted_held


def simulated_metrics(result: BenchmarkResult, run: MeasuredRun) -> dict[str, float]:
    """The replay's figures as `run` would have shown them. A closed loop (a fixed number of clients, no request
    rate) delivers L / W requests/s: the engine sets W, the mean E2E latency; the clients set L, the requests in
    flight on average, which a finite run's drain at its end lowers (more so where its lengths vary) and the replay's
    drain does not match. So its output tokens/s is the replay's at the run's own L: x L_run / L_replay
    (bench/CALIBRATION_PROTOCOL.md, the correction on a closed-loop run's throughput)."""
    throughput = result.output_throughput
    held = in_flight(run.request_throughput, run.e2el.mean_ms)
    replayed = in_flight(result.request_throughput, result.e2el.mean_ms)
    if run.max_concurrency is not None and run.request_rate == inf and held and replayed:
        throughput = at_held_concurrency(throughput, held, run.max_concurrency, replayed)
    return {"tpot_ms": result.tpot.mean_ms, "ttft_ms": result.ttft.mean_ms, "output_tok_s": throughput}


def fit_runs(runs: Sequence[MeasuredRun], replay: Any, lowest: dict[str, float] | None = None) -> FitResult:
    """The factors fitted to `runs`; replay(factors, run) -> BenchmarkResult simulates one; `lowest`: the factors'
    floors on the replica's generation x engine (factors.floors)."""
    observations = [Observation(r.label, measured_metrics(r)) for r in runs]
    empty = next((r.label for r, o in zip(runs, observations) if not o.measured), None)
    if empty is not None:
        raise PlannerInputError(f"result: {empty} measured none of mean TPOT, mean TTFT or output throughput; "
                                "give runs that did")

    def predict(factors: Factors, i: int) -> dict[str, float]:
        return simulated_metrics(replay(factors, runs[i]), runs[i])

    return fit_factors(observations, predict, lowest)


def calibration_record(fit: FitResult, runs: Sequence[MeasuredRun], fitted_on: FittedOn) -> Calibration:
    return Calibration(
        schema_version=SCHEMA_VERSION, factors=fit.factors, informed=fit.informed, fitted_on=fitted_on,
        prompts_per_replay=tuple(replay_prompts(r) for r in runs),
        errors=Errors(before=fit.error_before, after=fit.error_after, held_out=fit.error_held_out),
        residuals=tuple(_row(r) for r in fit.residuals), past_bounds=fit.past_bounds)


def _row(r: Residual) -> ResidualRow:
    return ResidualRow(result=r.label, metric=r.metric, measured=r.measured, before=r.before, after=r.after,
                       held_out=r.held_out)


__all__ = ["CALIBRATION", "Calibration", "FittedOn", "ResultFile", "calibrated_catalog", "calibration_record",
           "fit_runs", "load_calibration", "replay_run"]
