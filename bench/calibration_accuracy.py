"""Does calibrating on one run of a deployment predict its other runs better? On the published series.

Reads the rows bench/throughput_accuracy.py maps (its files, mapping and skip reasons), groups them into series (the
same source (its numbers blanked), model, precision, KV dtype, GPU, engine, TP, PP, EP, DP and settings, and the same
way of running: rows that differ only in batch / concurrency and lengths), and for every series of at least MIN_ROWS rows with a measured TPOT fits the named
factors (planner.calibration.fit, as `planner calibrate` fits them: on every one of TPOT, TTFT and output tokens/s the
row states) to its lowest-batch row alone, then predicts the other rows' TPOT with and without them. Prints per series the calibration row's own error before and after the fit,
the median |TPOT error| of the other rows before and after, the change in points (WORSE past WORSE_POINTS) and the
factors (starred at a bound; a factor the row asked past a bound stays 1.0 and is named,
bench/CALIBRATION_PROTOCOL.md); then over every predicted row against the calibration issue's targets: the overall
median halved, and no series worse by more than WORSE_POINTS points (with each series that misses it).

    python bench/calibration_accuracy.py
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from throughput_accuracy import Measurement, load_measurements, predict  # noqa: E402

from planner.calibration.factors import HIGHEST, LOWEST, Factors, calibrated_catalog, floors  # noqa: E402
from planner.calibration.fit import GRID, Observation, fit_factors, grid_floor  # noqa: E402
from planner.catalog.load import load_catalog  # noqa: E402
from planner.errors import PlannerInputError  # noqa: E402
from planner.estimator.performance import load_performance_catalog  # noqa: E402

MIN_ROWS = 3  # the calibration row and at least two to predict (the rule)
WORSE_POINTS = 5.0  # the target: no series worse by more than 5 points of median |TPOT error|


def series_key(m: Measurement) -> tuple[str, ...]:
    """The source with its numbers blanked (some sources name each run's own file: ..._conc4.json, ..._conc8.json),
    then what must be the same: the row's whole deployment (its expert- and data-parallel sizes and settings too) and
    the way it was run (bench/CALIBRATION_PROTOCOL.md, the correction on a series being one deployment)."""
    # a setting the recipe sets from the run's concurrency (InferenceX's --max-running-requests ${CONC}) is one setting
    settings = tuple((name, "the concurrency" if name == "max_running_requests" and value == m.batch else value)
                     for name, value in m.settings)
    return (re.sub(r"\d+", "N", m.source), m.model, m.precision, m.kv_dtype, m.gpu, m.engine, str(m.tp), str(m.pp),
            str(m.ep), str(m.dp), m.form, str(m.release), str(m.speculation), str(m.max_running), str(m.prefix_cache),
            str(m.lengths_vary), str(settings), str(m.moe_kernel), str(m.attention_backend),
            str(m.prefill_delay_passes))


@dataclass(frozen=True)
class SeriesResult:
    label: str
    rows: int
    fitted_row: tuple[float, float]  # the calibration row's own |TPOT error| before and after the fit
    errors: list[tuple[float, float]]  # each predicted row's |TPOT error| before and after
    factors: Factors
    past_bounds: tuple[str, ...] = ()  # identified by the row, but asked past a bound: left at 1.0
    floors: dict[str, float] = field(default_factory=dict)  # factors.floors of its generation x engine

    @property
    def before(self) -> float:
        return statistics.median(e for e, _ in self.errors) * 100

    @property
    def after(self) -> float:
        return statistics.median(e for _, e in self.errors) * 100

    @property
    def change(self) -> float:
        """Points of median |TPOT error| the calibration adds (negative: removes)."""
        return self.after - self.before

    @property
    def worse(self) -> bool:
        return self.change > WORSE_POINTS

    @property
    def at_bounds(self) -> list[str]:
        """The factors the fit pushed to a bound, its generation's floor (the fit's lowest grid point for it) or
        LOWEST / HIGHEST: the one row asked for more than the bounds allow."""
        low = {name: 2 ** (grid_floor(value) / GRID) for name, value in self.floors.items()}
        return [name for name, value in self.factors.as_dict().items()
                if value in (LOWEST, HIGHEST) or value == low.get(name)]


def measured_metrics(m: Measurement) -> dict[str, float]:
    """What `planner calibrate` fits of a run (planner.calibration.calibrate.measured_metrics), as the row states it:
    its TPOT, TTFT and output tokens/s (bench/CALIBRATION_PROTOCOL.md, the amendment on fitting a row as the tool
    fits a run)."""
    values = {"tpot_ms": m.tpot_s * 1000 if m.tpot_s else None, "ttft_ms": m.ttft_s * 1000 if m.ttft_s else None,
              "output_tok_s": m.output_tokens_per_s}
    return {k: v for k, v in values.items() if v}


def calibrate_series(catalog, performance, rows) -> SeriesResult:
    """Fit on the series' lowest-batch row, predict the rest with and without the fit."""
    rows.sort(key=lambda row: (row[0].batch, row[0].prompt_tokens, row[0].output_tokens))
    (first, first_arch), rest = rows[0], rows[1:]
    gpu = catalog.gpus.get(first.gpu)
    profile = performance.engine(first.engine).name
    assert first.tpot_s is not None

    def metrics(factors) -> dict[str, float]:
        p = predict(catalog, first, first_arch, calibrated_catalog(performance, gpu.generation, profile, factors))
        return {"tpot_ms": p.tpot_s * 1000, "ttft_ms": p.ttft_s * 1000, "output_tok_s": p.output_tokens_per_s}

    lowest = floors(performance, gpu.generation, profile)
    fit = fit_factors([Observation(first.row, measured_metrics(first))], lambda f, i: metrics(f), lowest)
    scaled = calibrated_catalog(performance, gpu.generation, profile, fit.factors)
    errors = [(abs(predict(catalog, m, arch).tpot_s / m.tpot_s - 1),
               abs(predict(catalog, m, arch, scaled).tpot_s / m.tpot_s - 1)) for m, arch in rest if m.tpot_s]
    own = next(r for r in fit.residuals if r.metric == "tpot_ms")
    label = f"{first.row} {first.model} {first.gpu} {first.engine} tp{first.tp} {first.form}"
    return SeriesResult(label, len(rows), (abs(own.before / own.measured - 1), abs(own.after / own.measured - 1)),
                        errors, fit.factors, fit.past_bounds, lowest)


def main() -> None:
    catalog = load_catalog()
    performance = load_performance_catalog()
    usable, _, total = load_measurements(catalog)
    groups: dict[tuple[str, ...], list] = defaultdict(list)
    for m, arch in usable:
        if m.tpot_s is not None:
            groups[series_key(m)].append((m, arch))
    series = [rows for rows in groups.values() if len(rows) >= MIN_ROWS]
    print(f"{total} rows read, {len(usable)} mapped, {sum(len(g) for g in groups.values())} with a TPOT, "
          f"{len(series)} series of {MIN_ROWS}+ rows")
    print("median |TPOT error| of each series' other rows, before and after calibrating on its lowest-batch row")
    print(f"(fitted: that row's own error before -> after; change in points; WORSE: more than {WORSE_POINTS:g} points "
          "worse; factors at a bound starred)")
    print(f"{'series':<58} {'rows':>4} {'fitted':>13} {'before':>7} {'after':>7} {'change':>7}       factors")
    results = []
    for rows in series:
        try:
            r = calibrate_series(catalog, performance, rows)
        except PlannerInputError as exc:
            print(f"  skipped {rows[0][0].row}: {exc}")
            continue
        results.append(r)
        factors = ", ".join(f"{k} {v:.2f}{'*' if k in r.at_bounds else ''}" for k, v in r.factors.as_dict().items()
                            if v != 1.0) or "none"
        if r.past_bounds:
            factors += f" (past bounds: {', '.join(r.past_bounds)})"
        fitted = f"{r.fitted_row[0]:.0%} -> {r.fitted_row[1]:.0%}"
        print(f"{r.label[:58]:<58} {r.rows:>4} {fitted:>13} {r.before:>6.1f}% {r.after:>6.1f}% {r.change:>+7.1f} "
              f"{'WORSE' if r.worse else '':<5} {factors}")
    if not results:
        print("no series to calibrate")
        return
    before = statistics.median(e for r in results for e, _ in r.errors) * 100
    after = statistics.median(e for r in results for _, e in r.errors) * 100
    rows = sum(len(r.errors) for r in results)
    print(f"overall median |TPOT error| of {rows} predicted rows: before {before:.1f}%, after {after:.1f}% "
          f"(target: at most {before / 2:.1f}%: {'met' if after <= before / 2 else 'not met'})")
    worse = [r for r in results if r.worse]
    better = sum(r.change < -WORSE_POINTS for r in results)
    print(f"series: {len(results)}; better by more than {WORSE_POINTS:g} points: {better}; within {WORSE_POINTS:g} "
          f"points: {len(results) - better - len(worse)}; worse by more than {WORSE_POINTS:g} points: {len(worse)}")
    print(f"target: no series worse by more than {WORSE_POINTS:g} points: "
          + ("met" if not worse else f"not met ({len(worse)} of {len(results)} series)"))
    for r in worse:
        bounds = f"; at a bound: {', '.join(r.at_bounds)}" if r.at_bounds else ""
        print(f"  {r.label}: {r.before:.1f}% -> {r.after:.1f}% ({r.change:+.1f} points), its fitted row "
              f"{r.fitted_row[0]:.0%} -> {r.fitted_row[1]:.0%}{bounds}")


if __name__ == "__main__":
    main()
