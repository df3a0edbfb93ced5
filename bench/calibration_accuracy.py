"""Does calibrating on one run of a deployment predict its other runs better? On the published series.

Reads the rows bench/throughput_accuracy.py maps (its files, mapping and skip reasons), groups them into series (the
same source (its numbers blanked), model, precision, KV dtype, GPU, engine, TP and PP, and the same way of running: rows that differ only in
batch / concurrency and lengths), and for every series of at least MIN_ROWS rows with a measured TPOT fits the named
factors (planner.calibration.fit, as `planner calibrate` fits them) to its lowest-batch row alone, then predicts the
other rows' TPOT with and without them. Prints the median |TPOT error| of those other rows before and after, per
series and over every predicted row, against the calibration issue's target: the overall median halved, and no
series worse by more than WORSE_POINTS points.

    python bench/calibration_accuracy.py
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from throughput_accuracy import Measurement, load_measurements, predict  # noqa: E402

from planner.calibration.factors import calibrated_catalog  # noqa: E402
from planner.calibration.fit import Observation, fit_factors  # noqa: E402
from planner.catalog.load import load_catalog  # noqa: E402
from planner.errors import PlannerInputError  # noqa: E402
from planner.estimator.performance import load_performance_catalog  # noqa: E402

MIN_ROWS = 3  # the calibration row and at least two to predict (the rule)
WORSE_POINTS = 5.0  # the target: no series worse by more than 5 points of median |TPOT error|


def series_key(m: Measurement) -> tuple[str, ...]:
    """The source with its numbers blanked (some sources name each run's own file: ..._conc4.json, ..._conc8.json),
    then what must be the same."""
    return (re.sub(r"\d+", "N", m.source), m.model, m.precision, m.kv_dtype, m.gpu, m.engine, str(m.tp), str(m.pp),
            m.form)


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
    print(f"{'series':<64} {'rows':>4} {'factors':<34} {'before':>7} {'after':>7}")
    before_all: list[float] = []
    after_all: list[float] = []
    worse = []
    for rows in series:
        rows.sort(key=lambda row: (row[0].batch, row[0].prompt_tokens, row[0].output_tokens))
        (first, first_arch), rest = rows[0], rows[1:]
        gpu = catalog.gpus.get(first.gpu)
        profile = performance.engine(first.engine).name
        assert first.tpot_s is not None

        def tpot_ms(factors, m=first, arch=first_arch):
            scaled = calibrated_catalog(performance, gpu.generation, profile, factors)
            return predict(catalog, m, arch, scaled).tpot_s * 1000

        try:
            fit = fit_factors([Observation(first.row, {"tpot_ms": first.tpot_s * 1000})], lambda f, i: {"tpot_ms": tpot_ms(f)})
            scaled = calibrated_catalog(performance, gpu.generation, profile, fit.factors)
            errors = [(abs(predict(catalog, m, arch).tpot_s / m.tpot_s - 1),
                       abs(predict(catalog, m, arch, scaled).tpot_s / m.tpot_s - 1)) for m, arch in rest if m.tpot_s]
        except PlannerInputError as exc:
            print(f"  skipped {first.row}: {exc}")
            continue
        before = statistics.median(e for e, _ in errors) * 100
        after = statistics.median(e for _, e in errors) * 100
        before_all += [e for e, _ in errors]
        after_all += [e for _, e in errors]
        changed = ", ".join(f"{k} {v:.2f}" for k, v in fit.factors.as_dict().items() if v != 1.0) or "none"
        label = f"{first.row} {first.model} {first.gpu} {first.engine} tp{first.tp} {first.form}"
        print(f"{label[:64]:<64} {len(rows):>4} {changed[:34]:<34} {before:>6.1f}% {after:>6.1f}%")
        if after > before + WORSE_POINTS:
            worse.append(label)
    if not before_all:
        print("no series to calibrate")
        return
    before, after = statistics.median(before_all) * 100, statistics.median(after_all) * 100
    print(f"overall median |TPOT error| of {len(before_all)} predicted rows: before {before:.1f}%, after {after:.1f}% "
          f"(target: at most {before / 2:.1f}%: {'met' if after <= before / 2 else 'not met'})")
    print(f"series worse by more than {WORSE_POINTS:g} points: {len(worse)}"
          + (": " + "; ".join(worse) if worse else ""))


if __name__ == "__main__":
    main()
