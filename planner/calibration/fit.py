"""Fitting the named factors (planner.calibration.factors) to measured runs (bench/CALIBRATION_PROTOCOL.md).

The error of a set of factors is the mean over every measured metric of every run of |log(predicted / measured)|
(a run 10% slow and one 10% fast weigh the same; a run with TPOT, TTFT and throughput counts each).

Which factors move: a measured metric at one operating point pins one number, so it informs one factor, the one
whose terms dominate it: the largest elasticity of its prediction to a factor at 1.0 (|d log predicted / d log f|,
by one grid step up; in the step-time sum, the share of that factor's terms, only the binding side of a
max(read, compute) counting, other requests' prefills inside a closed loop's TPOT counting as compute). The fit
moves only the factors some metric identifies; the others stay 1.0 (a batch-4 decode dominated by launches
calibrates `fixed` and leaves the reads of the batch-128 runs alone).

Bounds: up to HIGHEST; down to `lowest` per factor (factors.floors: no read faster than the datasheet's bandwidth,
no kernel faster than its peak FLOP rate), else LOWEST. A fit that ends at a bound with one grid step past it
fitting better (by the descent's own objective, the error with its tie-break charge) asks for more than the term can
be off by: not a calibration of that term. The factor goes back to 1.0 (not clamped: the clamped move would carry a
wrong-model run's error to every other operating point), the fit is redone without it, and the result names it
(past_bounds).

The fit itself: factors on the grid 2^(k/16) (steps of 4.4%, finer than the spread of repeated benchmark runs); a
coordinate descent moving one identified factor at a time by 2^(1/2), then 2^(1/4), 2^(1/8), 2^(1/16), taking the
move that lowers the objective most, and each step size until no move does. The objective is the error plus
CHANGE_COST per doubling of each factor away from 1.0 (a tie-break toward the smallest change where several mixes
of the identified factors fit equally). Predictions are cached by grid point, so the leave-one-out refits (each run
predicted by a fit on the others, by the same rule) re-use what the full fit computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, log
from typing import Callable, Mapping, Sequence

from planner.calibration.factors import FACTORS, HIGHEST, LOWEST, Factors

GRID = 16  # grid points per doubling
STEPS = (8, 4, 2, 1)  # in grid points: 2^(1/2), 2^(1/4), 2^(1/8), 2^(1/16)
LIMIT = round(log(HIGHEST, 2) * GRID)  # the highest grid exponent
# A prediction that moves by less than this fraction for one grid step of a factor does not depend on it (float
# noise).
UNMOVED = 1e-9
CHANGE_COST = 1e-3  # mean |log error| charged per doubling of a factor: breaks ties toward the smallest change

Point = tuple[int, ...]  # a grid exponent per factor of FACTORS
Metrics = dict[str, float]


@dataclass(frozen=True)
class Observation:
    label: str  # the run it is of
    measured: Metrics  # metric name -> measured value (every value above 0)


@dataclass(frozen=True)
class Residual:
    label: str
    metric: str
    measured: float
    before: float  # predicted with every factor 1.0
    after: float  # with the fitted factors
    held_out: float | None  # by a fit on the other runs (None: a single run, nothing to refit on)


@dataclass(frozen=True)
class FitResult:
    factors: Factors
    informed: tuple[str, ...]  # the factors the runs identify and the fit moved (the others stay 1.0)
    error_before: float  # mean |log(predicted / measured)|
    error_after: float
    error_held_out: float | None
    residuals: tuple[Residual, ...]
    past_bounds: tuple[str, ...] = ()  # identified, but the runs ask them past a bound: left at 1.0


def factors_at(point: Point) -> Factors:
    return Factors(**{name: 2 ** (k / GRID) for name, k in zip(FACTORS, point)})


def grid_floor(lowest: float) -> int:
    """The lowest grid exponent whose factor is at least `lowest` (and at least LOWEST)."""
    return ceil(log(max(lowest, LOWEST), 2) * GRID - 1e-9)


def fit_factors(observations: Sequence[Observation], predict: Callable[[Factors, int], Metrics],
                lowest: Mapping[str, float] | None = None) -> FitResult:
    """The factors that best predict `observations` by the rule above; predict(factors, i) gives observation i's
    metrics; `lowest`: a factor's lower bound where it is above LOWEST (factors.floors)."""
    cache: dict[tuple[Point, int], Metrics] = {}

    def predicted(point: Point, i: int) -> Metrics:
        if (point, i) not in cache:
            cache[point, i] = predict(factors_at(point), i)
        return cache[point, i]

    def error(point: Point, runs: Sequence[int]) -> float:
        terms = [abs(log(predicted(point, i)[m] / v)) for i in runs for m, v in observations[i].measured.items()]
        return sum(terms) / len(terms)

    def objective(point: Point, runs: Sequence[int]) -> float:
        return error(point, runs) + CHANGE_COST * sum(abs(k) for k in point) / GRID

    everyone = range(len(observations))
    origin: Point = (0,) * len(FACTORS)
    low = tuple(grid_floor((lowest or {}).get(name, LOWEST)) for name in FACTORS)
    dominant = {(i, m): _dominant(origin, i, m, predicted) for i in everyone for m in observations[i].measured}

    def moved(point: Point, k: int, by: int) -> Point:
        return point[:k] + (point[k] + by,) + point[k + 1:]

    def descend(runs: Sequence[int], free: Sequence[int]) -> Point:
        point, best = origin, objective(origin, runs)
        for step in STEPS:
            while True:
                moves = {point[:k] + (max(low[k], min(LIMIT, point[k] + sign * step)),) + point[k + 1:]
                         for k in free for sign in (1, -1)} - {point}
                scored = sorted((objective(candidate, runs), candidate) for candidate in moves)
                if not scored or scored[0][0] >= best:
                    break
                best, point = scored[0]
        return point

    def asks_past(point: Point, k: int, runs: Sequence[int]) -> bool:
        past = 1 if point[k] == LIMIT else -1 if point[k] == low[k] else 0
        return past != 0 and objective(moved(point, k, past), runs) < objective(point, runs)

    def solve(runs: Sequence[int]) -> tuple[Point, tuple[int, ...], tuple[int, ...]]:
        """(the fitted point, the factors it moves, the factors the runs ask past a bound) for these runs."""
        free = tuple(sorted({k for (i, _), k in dominant.items() if i in runs and k is not None}))
        rejected: tuple[int, ...] = ()
        while True:
            point = descend(runs, free)
            beyond = tuple(k for k in free if asks_past(point, k, runs))
            if not beyond:
                return point, free, rejected
            rejected += beyond
            free = tuple(k for k in free if k not in beyond)

    fitted, informed, rejected = solve(everyone)
    held: dict[int, Metrics] = {}
    if len(observations) > 1:
        for i in everyone:
            held[i] = predicted(solve([j for j in everyone if j != i])[0], i)
    residuals = tuple(
        Residual(o.label, m, v, predicted(origin, i)[m], predicted(fitted, i)[m], held[i][m] if held else None)
        for i, o in enumerate(observations) for m, v in o.measured.items())
    return FitResult(
        factors=factors_at(fitted), informed=tuple(FACTORS[k] for k in informed),
        error_before=error(origin, everyone), error_after=error(fitted, everyone),
        error_held_out=_mean_log_error([(r.held_out, r.measured) for r in residuals]) if held else None,
        residuals=residuals, past_bounds=tuple(FACTORS[k] for k in rejected))


def elasticities(origin: Point, i: int, metric: str, predicted: Callable[[Point, int], Metrics]) -> list[float]:
    """|d log predicted / d log factor| of observation i's metric at `origin`, per factor of FACTORS, by one grid
    step up (0.0 where the step moves it by less than UNMOVED)."""
    base = predicted(origin, i)[metric]
    out = []
    for k in range(len(FACTORS)):
        ratio = predicted(origin[:k] + (origin[k] + 1,) + origin[k + 1:], i)[metric] / base
        out.append(abs(log(ratio)) * GRID / log(2) if abs(ratio - 1) > UNMOVED else 0.0)
    return out


def _dominant(origin: Point, i: int, metric: str, predicted: Callable[[Point, int], Metrics]) -> int | None:
    """The factor whose terms dominate observation i's metric (the first of FACTORS on a tie); None: no factor
    moves it."""
    shares = elasticities(origin, i, metric, predicted)
    best = max(shares)
    return shares.index(best) if best > 0 else None


def _mean_log_error(pairs: Sequence[tuple[float | None, float]]) -> float:
    terms = [abs(log(p / v)) for p, v in pairs if p is not None]
    return sum(terms) / len(terms)


__all__ = ["FitResult", "Observation", "Residual", "elasticities", "factors_at", "fit_factors", "grid_floor"]
