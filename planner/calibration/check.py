"""`planner check`'s verdicts on one measured run of a deployed fleet plan: each target of the plan's SLO against the
run's statistics at the SLO's percentile, and the run's load against the load the plan puts on a replica.

A run reports the mean, the median (p50) and the p99 of its TTFT and TPOT. An SLO at the mean or at p50 / p99 is read
off directly. At another percentile p the run's p-th percentile lies between the ones it reports, so the verdict
follows only where they bound it: met when a reported percentile at or above p is within the limit, missed when one
at or below p is beyond it, else undetermined (with what the run reported).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.calibration.readers import Latency, MeasuredRun
from planner.estimator.capacity import Slo


@dataclass(frozen=True)
class SloVerdict:
    """One SLO target against one run: met (True), missed (False) or undetermined (None)."""

    metric: str  # ttft_ms | tpot_ms
    limit_ms: float
    statistic: str  # what the SLO holds: mean, or p<N> (the scenario's percentile)
    reported: dict[str, float]  # the run's statistics of the metric: mean, p50, p99 (those it reports)
    decided_by: str | None  # the reported statistic that decides it (None: undetermined)

    @property
    def meets(self) -> bool | None:
        if self.decided_by is None:
            return None
        return self.reported[self.decided_by] <= self.limit_ms


@dataclass(frozen=True)
class LoadCheck:
    """The run's load (requests/s it completed) against the load the plan puts on a replica at most (its planned
    capacity: the SLO's largest rate times the utilisation ceiling)."""

    measured_rps: float | None  # None: the run reports neither request nor output throughput
    planned_rps: float

    @property
    def at_or_below_planned(self) -> bool | None:
        return None if self.measured_rps is None else self.measured_rps <= self.planned_rps


def slo_verdicts(run: MeasuredRun, slo: Slo) -> tuple[SloVerdict, ...]:
    """Each target the SLO sets (TTFT, then TPOT) against the run."""
    out = []
    for metric, limit_s, latency in (("ttft_ms", slo.ttft_s, run.ttft), ("tpot_ms", slo.tpot_s, run.tpot)):
        if limit_s is None:
            continue
        reported = _reported(latency)
        statistic = "mean" if slo.percentile is None else f"p{slo.percentile:g}"
        out.append(SloVerdict(metric, limit_s * 1000, statistic, reported,
                              _decided_by(reported, limit_s * 1000, slo.percentile)))
    return tuple(out)


def _reported(latency: Latency) -> dict[str, float]:
    values = {"mean": latency.mean_ms, "p50": latency.median_ms, "p99": latency.p99_ms}
    return {k: v for k, v in values.items() if v is not None}


def _decided_by(reported: dict[str, float], limit_ms: float, percentile: float | None) -> str | None:
    """The reported statistic that settles the target: a percentile within the limit at or above the SLO's, or one
    beyond it at or below (the nearest first, so the SLO's own where the run reports it)."""
    if percentile is None:
        return "mean" if "mean" in reported else None
    for p, name in sorted(((50.0, "p50"), (99.0, "p99")), key=lambda known: abs(known[0] - percentile)):
        if name in reported and ((p >= percentile and reported[name] <= limit_ms)
                                 or (p <= percentile and reported[name] > limit_ms)):
            return name
    return None


def load_check(run: MeasuredRun, planned_rps: float) -> LoadCheck:
    """The run's request throughput (else its output throughput over its mean output length)."""
    measured = run.request_throughput
    if measured is None and run.output_throughput is not None:
        measured = run.output_throughput / run.mean_output_tokens
    return LoadCheck(measured, planned_rps)


__all__ = ["LoadCheck", "SloVerdict", "load_check", "slo_verdicts"]
