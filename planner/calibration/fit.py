"""Fitting the named factors (planner.calibration.factors) to measured runs: a coordinate descent on a grid.

The error of a set of factors is the mean over every measured metric of every run of |log(predicted / measured)|
(a run 10% slow and one 10% fast weigh the same; a run with TPOT, TTFT and throughput counts each). Factors live on
the grid 2^(k/16) within [LOWEST, HIGHEST] (steps of 4.4%, finer than the spread of repeated benchmark runs); the
descent moves one factor at a time by 2^(1/2), then 2^(1/4), 2^(1/8), 2^(1/16), taking the move that lowers the
objective most, and each step size until no move does. A factor that changes no prediction (communication at tp 1)
is not informed by the runs and stays 1.0.

The objective is the error plus CHANGE_COST per doubling (or halving) of each factor away from 1.0. Runs at one
operating point (one batch, one shape) pin down one number, the step time there, so every mix of factors that
reproduces it fits equally; of those the fit keeps the smallest change, which is the term that dominates that
step scaled alone. A factor moves further only where runs at other operating points ask for it (the cost is far
below any error a move removes: 0.1% of mean |log error| per doubling). Predictions are cached by grid point, so
the leave-one-out refits (each run predicted by a fit on the others) re-use what the full fit computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import log
from typing import Callable, Sequence

from planner.calibration.factors import FACTORS, HIGHEST, Factors

GRID = 16  # grid points per doubling
STEPS = (8, 4, 2, 1)  # in grid points: 2^(1/2), 2^(1/4), 2^(1/8), 2^(1/16)
LIMIT = round(log(HIGHEST, 2) * GRID)  # LOWEST is 1 / HIGHEST: the grid is symmetric about 1.0
# A prediction that moves by less than this fraction when a factor doubles does not depend on it (float noise).
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
    informed: tuple[str, ...]  # the factors the runs inform (the others stay 1.0)
    error_before: float  # mean |log(predicted / measured)|
    error_after: float
    error_held_out: float | None
    residuals: tuple[Residual, ...]


def factors_at(point: Point) -> Factors:
    return Factors(**{name: 2 ** (k / GRID) for name, k in zip(FACTORS, point)})


def fit_factors(observations: Sequence[Observation], predict: Callable[[Factors, int], Metrics]) -> FitResult:
    """The factors that best predict `observations`; predict(factors, i) gives observation i's metrics."""
    cache: dict[tuple[Point, int], Metrics] = {}

    def predicted(point: Point, i: int) -> Metrics:
        if (point, i) not in cache:
            cache[point, i] = predict(factors_at(point), i)
        return cache[point, i]

    def error(point: Point, runs: Sequence[int]) -> float:
        terms = [abs(log(predicted(point, i)[m] / v)) for i in runs for m, v in observations[i].measured.items()]
        return sum(terms) / len(terms)

    everyone = range(len(observations))
    origin: Point = (0,) * len(FACTORS)
    informed = tuple(k for k in range(len(FACTORS)) if _moves(origin, k, everyone, predicted, observations))

    def objective(point: Point, runs: Sequence[int]) -> float:
        return error(point, runs) + CHANGE_COST * sum(abs(k) for k in point) / GRID

    def descend(runs: Sequence[int]) -> Point:
        point, best = origin, objective(origin, runs)
        for step in STEPS:
            while True:
                moves = {point[:k] + (max(-LIMIT, min(LIMIT, point[k] + sign * step)),) + point[k + 1:]
                         for k in informed for sign in (1, -1)} - {point}
                scored = sorted((objective(candidate, runs), candidate) for candidate in moves)
                if not scored or scored[0][0] >= best:
                    break
                best, point = scored[0]
        return point

    fitted = descend(everyone)
    held: dict[int, Metrics] = {}
    if len(observations) > 1:
        for i in everyone:
            held[i] = predicted(descend([j for j in everyone if j != i]), i)
    residuals = tuple(
        Residual(o.label, m, v, predicted(origin, i)[m], predicted(fitted, i)[m], held[i][m] if held else None)
        for i, o in enumerate(observations) for m, v in o.measured.items())
    return FitResult(
        factors=factors_at(fitted), informed=tuple(FACTORS[k] for k in informed),
        error_before=error(origin, everyone), error_after=error(fitted, everyone),
        error_held_out=_mean_log_error([(r.held_out, r.measured) for r in residuals]) if held else None,
        residuals=residuals)


def _moves(origin: Point, k: int, runs: Sequence[int], predicted: Callable[[Point, int], Metrics],
           observations: Sequence[Observation]) -> bool:
    doubled = origin[:k] + (GRID,) + origin[k + 1:]
    return any(abs(predicted(doubled, i)[m] / predicted(origin, i)[m] - 1) > UNMOVED
               for i in runs for m in observations[i].measured)


def _mean_log_error(pairs: Sequence[tuple[float | None, float]]) -> float:
    terms = [abs(log(p / v)) for p, v in pairs if p is not None]
    return sum(terms) / len(terms)


__all__ = ["FitResult", "Observation", "Residual", "factors_at", "fit_factors"]
