"""workload.min_tokens_per_s (issue 24, item 5): a single configuration's speed counts in the search. The floor is one
replica's output tokens/s running `concurrency` requests that each hold the whole context (the speed the plan prints:
concurrency / the decode step); configurations below it are left out, and the plan says which and how fast."""

import pytest

from planner.api import solve
from planner.errors import PlannerInputError
from planner.plan.scenario import parse_scenario

FAST_8B = {"name": "8b-fast", "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 16},
           "search": {"gpus": ["rtx-4090", "l40s", "a100-sxm-80gb", "h100-sxm"], "max_gpus_per_replica": 2},
           "pricing": {"market": "on-demand"}}


def with_floor(tokens_per_s: float) -> dict:
    return {**FAST_8B, "workload": {**FAST_8B["workload"], "min_tokens_per_s": tokens_per_s}}


def test_a_plan_without_traffic_prints_its_speed_and_cost_per_token():
    best = solve(FAST_8B).best
    # one replica running 16 requests of 8,192 tokens: 16 tokens per decode step
    assert best.full_context_output_tokens_per_s == pytest.approx(16 / best.full_context_step_s)
    assert best.usd_per_million_output_tokens == pytest.approx(
        best.usd_per_hour / (16 / best.full_context_step_s * 3600) * 1e6)


def test_configurations_below_the_floor_are_left_out_with_their_speed():
    cheapest = solve(FAST_8B).best
    floor = cheapest.full_context_output_tokens_per_s + 1  # the cheapest plan is 1 token/s too slow
    result = solve(with_floor(floor))
    best = result.best
    assert best.full_context_output_tokens_per_s >= floor
    assert best.usd_per_hour >= cheapest.usd_per_hour
    assert best.configuration != cheapest.configuration
    assert all(p.full_context_output_tokens_per_s >= floor for p in result.alternatives)
    # what was left out is named, at most at the plan's price, each under the floor; on the cheapest plan's GPU
    # type the fastest left out is that plan, 1 token/s short
    assert all(s.output_tokens_per_s < floor and s.usd_per_hour <= best.usd_per_hour for s in result.too_slow)
    [same_gpu] = [s for s in result.too_slow if s.gpu == cheapest.gpu]
    assert (same_gpu.configuration, same_gpu.usd_per_hour) == (cheapest.configuration, cheapest.usd_per_hour)
    assert same_gpu.output_tokens_per_s == pytest.approx(floor - 1)
    # a floor at the plan's own speed keeps it: below means strictly below
    assert solve(with_floor(cheapest.full_context_output_tokens_per_s)).best.usd_per_hour == cheapest.usd_per_hour


def test_a_floor_no_configuration_reaches_says_so():
    result = solve(with_floor(1e6))
    assert result.best is None
    assert result.infeasible.reason.startswith("every configuration that fits runs below workload.min_tokens_per_s "
                                               "(1e+06 output tokens/s per replica at the full context); the fastest, ")
    assert result.infeasible.suggestions[0].startswith("lower workload.min_tokens_per_s")


def test_the_floor_is_for_a_single_configuration():
    fleet = {**FAST_8B, "workload": {"context": 8192, "min_tokens_per_s": 100,
                                     "traffic": {"requests_per_s": 1, "prompt_tokens": 100, "output_tokens": 100}}}
    with pytest.raises(PlannerInputError, match=r"^scenario: workload: min_tokens_per_s: with traffic, speed is the "
                                                r"SLO's \(workload.slo.tpot_s\)"):
        parse_scenario(fleet)
    with pytest.raises(PlannerInputError, match="workload.min_tokens_per_s: Input should be greater than 0"):
        parse_scenario(with_floor(0))
