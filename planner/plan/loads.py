"""A fleet replica at the three loads a capacity review reads, each figure said of its own load:

- at the SLO limit: the most requests/s one replica takes with TTFT and TPOT within the SLO (what
  planner.plan.serving searched for), and its TTFT and TPOT there, at the SLO's limit;
- planned: the utilisation ceiling times that, the capacity the fleet buys (workload.utilisation);
- expected: the requests/s the demand puts on the replica (planner.plan.fleet: its bucket's demand split over the
  bucket's replicas by capacity), with the steady state there and, where cheap enough, the simulator's percentiles
  (the run `planner simulate` makes by default: SIMULATED_S of Poisson arrivals, seed 0).

The steady-state TTFT and TPOT are at the SLO's percentile (the mean when it names none), as the SLO is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.estimator.capacity import steady_state
from planner.estimator.simulate import Percentiles, poisson_arrivals, run_too_large, simulate
from planner.plan.deadline import Deadline
from planner.plan.serving import FleetWorkload, ServingConfig

SIMULATED_S = 600.0  # seconds of arrivals: `planner simulate`'s default --duration
# The engine steps a plan simulates at most per replica type, reckoned as the expected load's output tokens over its
# steady state's running requests (each step emits one token of each). Measured on the 2-core machine, multi-model-fleet
# at its expected loads: 5.6-10 us a step (8,675 requests of 600 + 150 tokens on an L40S, ~19,000 steps, in 0.19 s;
# 2,702 of 3,000 + 500 on an H100, ~39,000 steps, in 0.40 s), so this is about a second at most.
MOST_SIMULATED_STEPS = 100_000


@dataclass(frozen=True)
class LoadLevel:
    """One replica at one load, the steady state of planner.estimator.capacity."""

    requests_per_s: float  # arriving at the replica
    running: float  # requests running at once, mean
    ttft_s: float  # at the SLO's percentile (ReplicaLoads.statistic)
    tpot_s: float


@dataclass(frozen=True)
class SimulatedLoad:
    """The expected load through the discrete-event simulator (planner.estimator.simulate)."""

    duration_s: float  # of arrivals
    requests: int
    running: float  # requests scheduled per step, the mean
    ttft_s: Percentiles
    tpot_s: Percentiles


@dataclass(frozen=True)
class ReplicaLoads:
    statistic: str  # what the levels' TTFT and TPOT are: "mean", or the SLO's percentile ("p90")
    slo_limit: LoadLevel
    utilisation: float  # planned = this x the SLO limit's requests/s
    planned: LoadLevel
    expected: LoadLevel
    simulated: SimulatedLoad | None
    not_simulated: str  # why simulated is None; empty when it is not


def replica_loads(config: ServingConfig, workload: FleetWorkload, expected_rps: float, deadline: Deadline,
                  simulated: bool) -> ReplicaLoads:
    """`config`'s replica at the SLO limit, planned and expected (`expected_rps`); `simulated`: run the expected load
    through the simulator too, unless the run is larger than a plan simulates or the deadline has run out."""
    slo = config.role_slo or workload.slo  # a disaggregated role's share of the SLO
    statistic = "mean" if slo.percentile is None else f"p{slo.percentile:g}"

    def level(rps: float) -> LoadLevel:
        state = steady_state(config.times, config.scheduler, config.shape, rps, slo)
        return LoadLevel(rps, state.batch, state.ttft_s, state.tpot_s)

    top = config.performance
    limit, expected = LoadLevel(top.requests_per_s, top.batch, top.ttft_s, top.tpot_s), level(expected_rps)
    steps = expected_rps * SIMULATED_S * config.shape.output_tokens / max(1.0, expected.running)
    run, why = None, ""
    if not simulated:
        why = "not asked for"
    elif too_large := run_too_large(expected_rps, SIMULATED_S, config.shape):
        why = f"{too_large}; run `planner simulate` with a shorter --duration"
    elif steps > MOST_SIMULATED_STEPS:
        why = (f"about {steps:,.0f} engine steps in {SIMULATED_S:g} s, more than the {MOST_SIMULATED_STEPS:,} a plan "
               "simulates; run `planner simulate`")
    elif deadline.expired():
        why = f"the {deadline.limit_s:g} s time limit ran out first; run `planner simulate`"
    else:
        arrivals = poisson_arrivals(expected_rps, SIMULATED_S, config.shape, seed=0)
        if not arrivals:
            why = f"no request arrives in {SIMULATED_S:g} s at {expected_rps:g} requests/s"
        else:
            result = simulate(config.times.timer, config.scheduler, arrivals)
            run = SimulatedLoad(SIMULATED_S, result.completed, result.mean_batch, result.ttft_s, result.tpot_s)
    return ReplicaLoads(statistic, limit, workload.utilisation, level(config.capacity_rps), expected, run, why)
