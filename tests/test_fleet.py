"""The fleet model: CP-SAT against brute force, quotas, SLOs, redundancy, unmet demand explained."""

import itertools
import re
from pathlib import Path
from dataclasses import replace
from math import ceil

import pytest

from planner.plan.search import build_search_space
from planner.catalog.load import load_catalog
from planner.plan.fleet import FleetProblem, Pool, Quota, _fits_pool, fleet_problem, plan_fleet
from planner.plan.serving import CAPACITY_UNITS_PER_RPS, Bucket, FleetWorkload, Slo, serving_configs
from planner.errors import PlannerInputError
from planner.plan.deadline import Deadline, OutOfTime
from planner.plan.scenario import load_scenario, parse_scenario

CATALOG = load_catalog()


def space(model="llama-3.1-8b", gpus=("l40s", "h100-sxm"), providers=("runpod", "lambda"), context=4096, market="on-demand"):
    s = parse_scenario({"model": model, "workload": {"context": context},
                        "search": {"gpus": list(gpus), "precisions": ["bf16", "fp8"]},
                        "pricing": {"providers": list(providers), "market": market}})
    return build_search_space(s, CATALOG)


def workload(rps=20.0, slo=Slo(2.0, 0.05), **kw):
    return FleetWorkload("chat", kw.pop("space", None) or space(), (Bucket(rps, 1000, 200),), slo, **kw)


def brute_force(problem: FleetProblem, max_replicas: int = 8) -> float | None:
    w = problem.workloads[0]
    configs = serving_configs(w, CATALOG)
    pools = list(dict.fromkeys(Pool(o, m) for o, m in w.space.offers))
    pairs = [(c, p) for c in configs for p in pools if p.offer.gpu == c.candidate.gpu.name and _fits_pool(c, p)]
    assert len(pairs) <= 5, "keep the brute force small"
    demand = ceil(w.buckets[0].requests_per_s * CAPACITY_UNITS_PER_RPS)
    best = None
    for counts in itertools.product(range(max_replicas + 1), repeat=len(pairs)):
        if sum(counts) < w.min_replicas:
            continue
        capacity = sum(n * c.capacity_units for n, (c, _) in zip(counts, pairs))
        used = [c for n, (c, _) in zip(counts, pairs) if n]
        if capacity < demand or any(capacity < demand + w.redundancy * c.capacity_units for c in used):
            continue
        gpus_per_pool: dict[Pool, int] = {}
        for n, (c, p) in zip(counts, pairs):
            gpus_per_pool[p] = gpus_per_pool.get(p, 0) + n * c.candidate.gpus
        cost = sum(ceil(g / p.offer.gpus) * p.price_units for p, g in gpus_per_pool.items())
        best = cost if best is None else min(best, cost)
    return None if best is None else best / 10_000


@pytest.mark.parametrize("rps, redundancy", [(5.0, 0), (20.0, 0), (12.0, 1), (30.0, 1)])
def test_fleet_matches_brute_force(rps, redundancy):
    w = workload(rps=rps, redundancy=redundancy, space=space(gpus=("l40s",), providers=("lambda", "runpod")))
    plan = plan_fleet(FleetProblem((w,)), CATALOG, explain=False)
    expected = brute_force(FleetProblem((w,)))
    assert plan.status == "OPTIMAL"
    assert plan.usd_per_hour == pytest.approx(expected)


def test_plan_meets_demand_slo_and_memory():
    w = workload(rps=25.0)
    plan = plan_fleet(FleetProblem((w,)), CATALOG, explain=False)
    capacity = sum(a.replicas * a.config.capacity_rps for a in plan.assignments)
    assert capacity >= 25.0
    for a in plan.assignments:
        assert a.memory.gpu.fits
        assert a.config.performance.tpot_s <= 0.05 and a.config.performance.ttft_s <= 2.0
    assert plan.usd_per_hour == pytest.approx(sum(u.usd_per_hour for u in plan.pools))
    assert plan.token_costs.usd_per_million_output_tokens == pytest.approx(plan.usd_per_hour / (25.0 * 200 * 3600) * 1e6, rel=1e-3)


def test_redundancy_survives_losing_a_replica():
    plan = plan_fleet(FleetProblem((workload(rps=10.0, redundancy=1),)), CATALOG, explain=False)
    capacity = sum(a.replicas * a.config.capacity_rps for a in plan.assignments)
    assert all(capacity - a.config.capacity_rps >= 10.0 - 1e-3 for a in plan.assignments)


def test_a_binding_quota_moves_the_fleet_and_prices_one_more_unit():
    w = workload(rps=40.0)
    free = plan_fleet(FleetProblem((w,)), CATALOG, explain=False)
    main_provider = max(free.pools, key=lambda u: u.instances * u.pool.offer.gpus).pool.offer.provider
    quota = Quota(max_gpus=1, provider=main_provider)
    limited = plan_fleet(FleetProblem((w,), quotas=(quota,)), CATALOG)
    assert limited.usd_per_hour >= free.usd_per_hour
    used = sum(u.instances * u.pool.offer.gpus for u in limited.pools if u.pool.offer.provider == main_provider)
    assert used <= 1
    assert any("is used up" in b and "would save" in b for b in limited.binding)


def test_workloads_share_a_quota():
    a, b = workload(rps=5.0), replace(workload(rps=5.0), name="second")
    both = plan_fleet(FleetProblem((a, b), quotas=(Quota(max_gpus=2),)), CATALOG, explain=False)
    assert both.status == "OPTIMAL"
    assert sum(u.instances * u.pool.offer.gpus for u in both.pools) <= 2
    assert {x.workload for x in both.assignments} == {"chat", "second"}
    squeezed = plan_fleet(FleetProblem((a, b), quotas=(Quota(max_gpus=1),)), CATALOG, explain=False)
    assert squeezed.status == "INFEASIBLE" and squeezed.unmet  # one GPU cannot host a replica of each


def test_an_impossible_slo_is_reported_as_unmet_demand():
    plan = plan_fleet(FleetProblem((workload(slo=Slo(ttft_s=1e-6)),)), CATALOG, explain=False)
    assert plan.status == "INFEASIBLE" and plan.usd_per_hour is None
    assert any("chat bucket 0" in u and "SLO" in u for u in plan.unmet)


def test_a_quota_too_small_names_itself_as_the_block():
    plan = plan_fleet(FleetProblem((workload(rps=500.0),), quotas=(Quota(max_gpus=1),)), CATALOG, explain=False)
    assert plan.status == "INFEASIBLE"
    assert any("unserved" in u and "quota all <= 1 GPUs" in u for u in plan.unmet)


def test_on_demand_share_with_spot_allowed():
    w = workload(rps=20.0, space=space(providers=("runpod", "aws", "lambda", "vast"), market="any"))
    plan = plan_fleet(FleetProblem((w,), on_demand_share=0.5), CATALOG, explain=False)
    on_demand = sum(a.replicas * a.config.capacity_rps for a in plan.assignments if a.pool.market == "on-demand")
    assert on_demand >= 10.0 - 1e-3


def test_max_configs_caps_distinct_configurations():
    w = workload(rps=60.0, max_configs=1)
    plan = plan_fleet(FleetProblem((w,)), CATALOG, explain=False)
    assert len({(a.config.candidate.gpu.name, a.config.candidate.gpus) for a in plan.assignments}) == 1


def test_same_problem_same_fleet():
    problem = FleetProblem((workload(rps=33.0),))
    first, second = plan_fleet(problem, CATALOG, explain=False), plan_fleet(problem, CATALOG, explain=False)
    key = lambda p: [(a.config.candidate.gpu.name, a.pool.label, a.replicas) for a in p.assignments]  # noqa: E731
    assert key(first) == key(second)


FLEET_SCENARIOS = [p for p in sorted((Path(__file__).parent.parent / "scenarios").glob("*.yaml"))
                   if load_scenario(p).is_fleet]


@pytest.mark.parametrize("path", FLEET_SCENARIOS, ids=lambda p: p.stem)
def test_shipped_fleet_scenarios_serve_every_bucket(path):
    scenario = load_scenario(path)
    problem = fleet_problem(scenario, CATALOG)
    plan = plan_fleet(problem, CATALOG, explain=False)
    assert plan.status == "OPTIMAL" and plan.usd_per_hour > 0
    for w in problem.workloads:
        for b, bucket in enumerate(w.buckets):
            served = sum(a.replicas * a.config.capacity_rps for a in plan.assignments
                         if a.workload == w.name and a.bucket == b)
            assert served >= bucket.requests_per_s - 1e-3, (w.name, b)
    assert all(a.memory.gpu.fits for a in plan.assignments)
    for quota in problem.quotas:
        assert sum(u.instances * u.pool.offer.gpus for u in plan.pools if quota.covers(u.pool.offer)) <= quota.max_gpus


@pytest.mark.parametrize("data, needle", [
    ({"workloads": [{"name": "a", "model": "llama-3.1-8b", "workload": {"context": 4096}}]}, "needs workload.traffic"),
    ({"model": "llama-3.1-8b", "workload": {"context": 4096, "traffic": {"requests_per_s": 1}}}, "prompt_tokens"),
    ({"model": "llama-3.1-8b", "workload": {"context": 4096, "traffic": {
        "requests_per_s": 1, "buckets": [{"share": 0.5, "prompt_tokens": 10, "output_tokens": 10}]}}}, "add up to 1"),
    ({"model": "llama-3.1-8b", "workload": {"context": 4096, "traffic": {
        "requests_per_s": 1, "output_tokens_per_s": 5, "prompt_tokens": 1, "output_tokens": 1}}}, "one of"),
    # without traffic the plan is ranked by cost per hour: the other objective would be accepted and ignored
    ({"model": "llama-3.1-8b", "workload": {"context": 4096}, "objective": "cost_per_million_output_tokens"},
     "objective: cost_per_million_output_tokens .* no traffic"),
])
def test_traffic_errors_name_the_problem(data, needle):
    with pytest.raises(PlannerInputError, match=needle):
        parse_scenario(data)


def test_a_search_cut_short_by_the_time_limit_is_not_called_infeasible():
    problem = fleet_problem(load_scenario(Path(__file__).parents[1] / "scenarios" / "multi-model-fleet.yaml"), CATALOG,
                            time_limit_s=1e-6)
    with pytest.raises(OutOfTime, match=r"1e-06 s time limit .* after sizing the replicas of 0 of 3 workloads, before "
                                        r"any fleet was found; raise --time-limit"):
        plan_fleet(problem, CATALOG, explain=False)


class _NoTimeForCpSat(Deadline):
    """A deadline the serving configurations fit in but CP-SAT gets no time of."""

    def expired(self) -> bool:
        return False

    def remaining_s(self) -> float:
        return 0.0


def test_cp_sat_cut_short_before_any_fleet_is_out_of_time_not_infeasible():
    w = workload(space=space(gpus=("l40s",)))
    configs = len(serving_configs(w, CATALOG))
    with pytest.raises(OutOfTime, match=rf"after CP-SAT's search of {configs} serving configurations, before any "
                                        "fleet was found"):
        plan_fleet(FleetProblem((w,)), CATALOG, explain=False, deadline=_NoTimeForCpSat(1.0, 0.0))


def test_unmet_demand_is_explained_at_demands_that_would_overflow_a_weighted_objective():
    scenario = parse_scenario({
        "model": "llama-3.1-8b",
        "workload": {"context": 4096, "traffic": {"requests_per_s": 1e7, "prompt_tokens": 500, "output_tokens": 100}},
        "search": {"gpus": ["l40s"], "precisions": ["bf16"]}, "pricing": {"providers": ["lambda", "runpod"]},
        "fleet": {"quotas": [{"max_gpus": 0}]}})
    plan = plan_fleet(fleet_problem(scenario, CATALOG), CATALOG, explain=False)
    assert plan.status == "INFEASIBLE" and plan.usd_per_hour is None
    assert len(plan.unmet) == 1 and "10,000,000.000 req/s unserved" in plan.unmet[0] and "<= 0 GPUs" in plan.unmet[0]


FLEET_8B = {"model": "llama-3.1-8b",
            "workload": {"context": 4096, "traffic": {"requests_per_s": 2, "prompt_tokens": 500, "output_tokens": 100}},
            "search": {"gpus": ["l40s"], "precisions": ["bf16"]}, "pricing": {"providers": ["lambda", "runpod"]}}


@pytest.mark.parametrize("quota, needle", [
    ({"gpu": "h10", "max_gpus": 0}, "fleet.quotas[0].gpu: unknown gpu 'h10'"),
    ({"provider": "aws5", "max_gpus": 0}, "did you mean aws"),
    ({"region": "nowhere", "max_gpus": 1}, "fleet.quotas[0].region"),
])
def test_quotas_that_would_cover_nothing_are_refused(quota, needle):
    with pytest.raises(PlannerInputError, match=re.escape(needle)):
        fleet_problem(parse_scenario({**FLEET_8B, "fleet": {"quotas": [quota]}}), CATALOG)


def test_a_quota_names_its_provider_in_any_case():
    problem = fleet_problem(parse_scenario({**FLEET_8B, "fleet": {"quotas": [{"provider": "LAMBDA", "max_gpus": 1}]}}),
                            CATALOG)
    assert problem.quotas[0].provider == "lambda"


def test_a_cheaper_gpu_left_out_says_why():
    """At 128K the GH200 (cheaper per GPU-hour, sold one per instance) cannot hold one 131,072-token request in
    vLLM's gpu_memory_utilization budget, so with the budget alone (kv_cache_memory: utilization) the fleet rents
    dearer H200s; the plan says so with the engine's reason, not silently."""
    scenario = parse_scenario({
        "name": "long", "model": "llama-3.3-70b",
        "workload": {"context": "128K", "traffic": {"requests_per_s": 1, "prompt_tokens": 1500, "output_tokens": 400},
                     "slo": {"ttft_s": 2.0, "tpot_s": 0.05}},
        "search": {"gpus": ["gh200", "h200-sxm"], "precisions": ["fp8"], "kv_dtypes": ["fp8"]},
        # vLLM 0.19.0's budget (0.34.0's extensible cache gives the GH200 the room)
        "engine": {"name": "vllm", "kv_cache_memory": "utilization", "version": "0.19.0"},
        "pricing": {"providers": ["lambda", "runpod"]}})
    plan = plan_fleet(fleet_problem(scenario, CATALOG), CATALOG)
    assert plan.assignments and {a.config.candidate.gpu.name for a in plan.assignments} == {"h200-sxm"}
    gh200 = [line for line in plan.left_out if " gh200 " in line]
    assert len(gh200) == 1 and "1 GPU(s) per replica" in gh200[0] and "131072" in gh200[0]
    dearest = max(u.pool.offer.price(u.pool.market) / u.pool.offer.gpus for u in plan.pools)
    for line in plan.left_out:  # only cards cheaper per GPU-hour than the dearest rented are listed
        assert float(re.search(r"from \$([0-9.]+)/GPU-hour", line).group(1)) < dearest


def test_a_fleet_costs_per_million_input_output_and_blended_tokens_at_its_demand():
    import json

    from planner.render.markdown import fleet_markdown
    from planner.render.records import fleet_json
    from planner.render.summary import fleet_cost_line

    scenario = load_scenario(Path(__file__).parents[1] / "scenarios" / "multi-model-fleet.yaml")
    plan = plan_fleet(fleet_problem(scenario, load_catalog()), load_catalog())
    demand = [(b.requests_per_s * b.prompt_tokens * 3600, b.requests_per_s * b.output_tokens * 3600)
              for w in fleet_problem(scenario, load_catalog()).workloads for b in w.buckets]
    prompt, output = sum(p for p, _ in demand), sum(o for _, o in demand)
    costs = plan.token_costs
    assert costs.usd_per_million_input_tokens == pytest.approx(plan.usd_per_hour / prompt * 1e6, abs=1e-4)
    assert costs.usd_per_million_output_tokens == pytest.approx(plan.usd_per_hour / output * 1e6, abs=1e-4)
    assert costs.usd_per_million_tokens == pytest.approx(plan.usd_per_hour / (prompt + output) * 1e6, abs=1e-4)
    # the blended figure weighs input and output at the demand's mix: 1 / blended = 1 / input + 1 / output, up to
    # the figures' rounding to 4 decimals (d(1/x) = dx / x^2, |dx| <= 5e-5 each)
    blended, inputs, outputs = (costs.usd_per_million_tokens, costs.usd_per_million_input_tokens,
                                costs.usd_per_million_output_tokens)
    assert 1 / blended == pytest.approx(1 / inputs + 1 / outputs,
                                        abs=5e-5 * (1 / blended**2 + 1 / inputs**2 + 1 / outputs**2))
    body = json.loads(fleet_json(plan, "x"))
    assert (body["usd_per_million_input_tokens"], body["usd_per_million_output_tokens"], body["usd_per_million_tokens"]) == (
        costs.usd_per_million_input_tokens, costs.usd_per_million_output_tokens, costs.usd_per_million_tokens)
    line = fleet_cost_line(plan)
    assert (f"${costs.usd_per_million_input_tokens:,.3f} input, ${costs.usd_per_million_output_tokens:,.3f} output, "
            f"${costs.usd_per_million_tokens:,.3f} blended") in line
    assert f"**{line}**" in fleet_markdown("x", plan)


CHAT_70B = Path(__file__).parents[1] / "scenarios" / "70b-chat.yaml"


def test_a_fleet_row_labels_each_figure_by_its_load():
    """issue 24: TTFT, TPOT and running were at the SLO limit, req/s at the utilisation ceiling, and the real load
    (the demand per replica) was nowhere; now one replica is given at each load, named."""
    from planner import api
    from planner.render.markdown import fleet_markdown
    from planner.render.records import assignment_row

    problem = fleet_problem(load_scenario(CHAT_70B), CATALOG)
    plan = plan_fleet(problem, CATALOG)
    (a,) = plan.assignments
    loads, w = a.loads, problem.workloads[0]
    # at the SLO limit: the capacity search's steady state, TPOT at its limit (mean: the SLO names no percentile)
    assert loads.statistic == "mean" and loads.slo_limit.requests_per_s == a.config.performance.requests_per_s
    assert loads.slo_limit.tpot_s == pytest.approx(w.slo.tpot_s, rel=0.01) and loads.slo_limit.ttft_s <= w.slo.ttft_s
    # planned: 70% of it (workload.utilisation 0.7); expected: 3 req/s over the 4 replicas
    assert loads.planned.requests_per_s == pytest.approx(0.7 * loads.slo_limit.requests_per_s) == a.config.capacity_rps
    assert a.replicas == 4 and loads.expected.requests_per_s == a.expected_rps_per_replica == pytest.approx(3 / 4)
    # less load, fewer requests running, a shorter TPOT
    assert loads.expected.running < loads.planned.running < loads.slo_limit.running
    assert loads.expected.tpot_s < loads.planned.tpot_s < loads.slo_limit.tpot_s
    # the simulator at the expected load: the run `planner simulate SCENARIO` makes (600 s, seed 0)
    (run,) = api.simulate(CHAT_70B, catalog=CATALOG)
    assert loads.simulated.ttft_s == run.result.ttft_s and loads.simulated.tpot_s == run.result.tpot_s
    assert loads.simulated.requests == run.result.completed
    row = assignment_row(a)
    assert row["slo_limit_tpot_s"] == round(loads.slo_limit.tpot_s, 5) and row["expected_rps_per_replica"] == 0.75
    assert row["simulated_tpot_p50_s"] == round(run.result.tpot_s.p50, 5) and "tpot_s" not in row
    text = fleet_markdown("70b-chat", plan)
    for level in ("at the SLO limit (mean)", "planned: 70% of the limit (mean)", "expected: the demand (mean)",
                  "expected, simulated p50", "expected, simulated p99"):
        assert f"| {level} |" in text
    assert f"| expected, simulated p50 | 0.75 | - | {run.result.ttft_s.p50:.3f} | {run.result.tpot_s.p50 * 1000:.1f} |" in text


def test_an_expected_load_too_large_to_simulate_says_so(monkeypatch):
    from planner.plan import loads
    from planner.render.summary import not_simulated_lines

    plan = plan_fleet(fleet_problem(load_scenario(CHAT_70B), CATALOG), CATALOG)
    (a,) = plan.assignments
    # 0.75 req/s x 600 s x 400 output tokens over its 10.5 requests running: about 17,000 steps
    steps = 0.75 * 600 * 400 / a.loads.expected.running
    assert a.loads.simulated is not None and 16_000 < steps < 18_000
    monkeypatch.setattr(loads, "MOST_SIMULATED_STEPS", 10_000)
    plan = plan_fleet(fleet_problem(load_scenario(CHAT_70B), CATALOG), CATALOG)
    (a,) = plan.assignments
    assert a.loads.simulated is None and a.loads.expected.requests_per_s == pytest.approx(0.75)
    assert not_simulated_lines(plan) == [f"70b-chat: 1 x gh200: expected load not simulated: about {steps:,.0f} engine "
                                         "steps in 600 s, more than the 10,000 a plan simulates; run `planner simulate`"]


def test_binding_lines_only_where_the_cost_moves():
    # 2 req/s of 500 + 100 tokens is one L40S at a loose SLO and at one 20% tighter: the SLO binds nothing
    loose = {**FLEET_8B, "workload": {**FLEET_8B["workload"], "slo": {"ttft_s": 20.0, "tpot_s": 0.5}}}
    plan = plan_fleet(fleet_problem(parse_scenario(loose), CATALOG), CATALOG)
    assert plan.usd_per_hour is not None and plan.binding == ()
    tight = {**FLEET_8B, "workload": {**FLEET_8B["workload"], "slo": {"ttft_s": 2.0, "tpot_s": 0.05}}}
    plan = plan_fleet(fleet_problem(parse_scenario(tight), CATALOG), CATALOG)
    for line in plan.binding:
        assert "$+0.00" not in line and "$0.00" not in line


def test_a_left_out_gpu_names_the_cause_before_the_engines_words():
    """issue 24: an L40 was left out with vLLM's advice to raise gpu_memory_utilization, though Llama 3.3 70B's fp8
    weights alone (72.7 GB on one GPU) do not fit its 48.3 GB."""
    plan = plan_fleet(fleet_problem(load_scenario(CHAT_70B), CATALOG), CATALOG)
    (l40,) = [line for line in plan.left_out if ": l40 " in line]
    weights = CATALOG.models.get("llama-3.3-70b").params  # fp8: one byte a parameter, plus the bf16 embeddings
    assert weights / 1e9 < 72.7 < 1.05 * weights / 1e9
    assert l40.endswith("1 GPU(s) per replica: weights 72.7 GB per GPU > the l40's "
                        f"{CATALOG.gpus.get('l40').memory_bytes / 1e9:.1f} GB")
    assert "gpu_memory_utilization" not in " ".join(plan.left_out)


@pytest.mark.parametrize("gpu, utilization, context, cause", [
    # the weights fit the card, not the share vLLM budgets of it: raising gpu_memory_utilization is the fix it names
    ("h100-sxm", 0.5, 32768, "weights 72.7 GB per GPU > the {budget} vllm budgets of the h100-sxm's {card}; vllm says: "),
    # the weights fit the budget; the KV pool left beside them does not hold one request of the context: 7.0 GB at
    # 80 layers x 8 KV heads x 128 x 2 (K and V) x 1 byte (fp8) = 163,840 bytes a token holds 42,432 tokens (16-token
    # blocks)
    ("h100-pcie", None, 65536, "the KV pool left beside the weights ({pool} per GPU) holds 42,432 tokens of one "
                               "request, not 65,536; vllm says: To serve at least one request"),
])
def test_an_engine_refusal_says_what_does_not_fit_then_the_engine(gpu, utilization, context, cause):
    from planner.estimator.engines import EngineSettings
    from planner.estimator.engines.need import engine_need
    from planner.estimator.memory import GpuTarget, Request
    from planner.plan.search import engine_refusal_reason

    card = CATALOG.gpus.get(gpu)
    from planner.model.sources import resolve_model

    need = engine_need(resolve_model(CATALOG, "llama-3.3-70b"), Request(context=context, precision="fp8", kv_dtype="fp8"),
                       EngineSettings("vllm", gpu_memory_utilization=utilization), GpuTarget.from_catalog(card), CATALOG)
    reason = engine_refusal_reason(need, card, context)
    budget = need.budget
    assert reason.startswith(cause.format(budget=f"{budget.budget_bytes / 1e9:.1f} GB",
                                          card=f"{card.memory_bytes / 1e9:.1f} GB",
                                          pool=f"{budget.kv_pool_bytes / 1e9:.1f} GB"))
    assert reason.endswith(need.reason)  # the engine's own words, second
    if budget.max_context_that_fits:
        assert budget.kv_pool_bytes // (80 * 8 * 128 * 2) // 16 * 16 == budget.max_context_that_fits == 42_432


def test_each_workload_rents_only_what_its_own_pricing_admits():
    """Two workloads on the same GPU, one priced on AWS only and on demand, the other on RunPod or spot: the union of
    their offers is the fleet's, but each workload's replicas go where its own pricing lets them."""
    def named(name, pricing):
        return {"name": name, "model": "llama-3.1-8b", "pricing": pricing,
                "workload": {"context": "4K", "traffic": {"requests_per_s": 2, "prompt_tokens": 500, "output_tokens": 100},
                             "slo": {"ttft_s": 2.0, "tpot_s": 0.05}},
                "search": {"precisions": ["fp8"], "gpus": ["l40s"]}}

    for pricing_a, pricing_b, ok in (
            ({"providers": ["aws"]}, {"providers": ["runpod"]}, lambda a: a.pool.offer.provider == "aws"),
            ({"market": "on-demand"}, {"market": "spot"}, lambda a: a.pool.market == "on-demand")):
        problem = fleet_problem(parse_scenario({"name": "two", "workloads": [named("a", pricing_a),
                                                                            named("b", pricing_b)]}), CATALOG)
        plan = plan_fleet(problem, CATALOG, explain=False)
        first = [a for a in plan.assignments if a.workload == "a"]
        assert plan.status == "OPTIMAL" and first and all(ok(a) for a in first)
        admitted = {w.name: {Pool(o, m) for o, m in w.space.offers} for w in problem.workloads}
        assert all(a.pool in admitted[a.workload] for a in plan.assignments)


def test_a_concurrency_of_one_caps_each_replica_at_one_request():
    """workload.concurrency caps the batch of a fleet's replica when the scenario gives it, 1 included; left out,
    the engine's own limits alone decide (it read an explicit 1 as no cap: one replica ran 133 requests)."""
    def plan(**workload):
        scenario = {"name": "cap", "model": "llama-3.1-8b",
                    "workload": {"context": "4K", "traffic": {"requests_per_s": 20, "prompt_tokens": 500,
                                                              "output_tokens": 100},
                                 "slo": {"ttft_s": 2.0, "tpot_s": 0.05}, **workload},
                    "search": {"precisions": ["fp8"], "gpus": ["l40s"]}, "pricing": {"providers": ["runpod"]}}
        return plan_fleet(fleet_problem(parse_scenario(scenario), CATALOG), CATALOG, explain=False)

    free, one, two = plan(), plan(concurrency=1), plan(concurrency=2)
    assert {a.config.scheduler.max_num_seqs for a in one.assignments} == {1}
    assert {a.config.scheduler.max_num_seqs for a in two.assignments} == {2}
    assert max(a.config.performance.batch for a in one.assignments) <= 1
    assert max(a.config.performance.batch for a in free.assignments) > 2
    replicas = {name: sum(a.replicas for a in p.assignments) for name, p in (("free", free), ("one", one), ("two", two))}
    assert replicas["one"] > replicas["two"] > replicas["free"]


@pytest.mark.parametrize("change, needle", [
    # a key the named engine does not read would change nothing
    ({"engine": {"name": "vllm", "overhead": 0.9}}, "overhead: engine vllm does not read it"),
    ({"engine": {"name": "vllm", "mem_fraction_static": 0.3}}, "mem_fraction_static: engine vllm does not read it"),
    ({"engine": {"name": "sglang", "gpu_memory_utilization": 0.3}}, "gpu_memory_utilization: engine sglang"),
    ({"engine": {"name": "sglang", "kv_cache_memory": "full"}}, "kv_cache_memory: engine sglang"),
    ({"engine": {"name": "simple", "max_num_seqs": 1}}, "max_num_seqs: engine simple"),
    # an SLO without a target constrains nothing
    ({"workload": {**FLEET_8B["workload"], "slo": {"percentile": 90}}}, "give ttft_s, tpot_s or both"),
    ({"workload": {**FLEET_8B["workload"], "slo": {}}}, "give ttft_s, tpot_s or both"),
    # a fleet plan lists no alternatives
    ({"solver": {"top": 3}}, "solver.top: the alternatives it lists are a single configuration's"),
])
def test_scenario_keys_that_would_change_nothing_are_refused(change, needle):
    with pytest.raises(PlannerInputError, match=re.escape(needle)):
        parse_scenario({**FLEET_8B, **change})
    assert parse_scenario({**FLEET_8B, "engine": {"name": "sglang", "max_num_seqs": 32}}).engine.max_num_seqs == 32


def test_a_quality_floor_beside_a_precision_list_refuses_what_it_excludes():
    data = {**FLEET_8B, "workload": {"context": 4096}, "search": {"gpus": ["l40s"], "precisions": ["int4", "bf16"],
                                                                  "quality_floor": "lossless"}}
    with pytest.raises(PlannerInputError, match="search.precisions: int4 below search.quality_floor lossless"):
        build_search_space(parse_scenario(data), CATALOG)
    kept = build_search_space(parse_scenario({**data, "search": {"gpus": ["l40s"], "precisions": ["int4", "bf16"]}}),
                              CATALOG)
    assert [p.name for p in kept.precisions] == ["int4", "bf16"]  # without a floor the list is the user's


def test_a_workloads_own_sections_override_the_scenarios_key_by_key():
    """Top-level search / pricing keys a workload's own section leaves out still apply to it (they were dropped as a
    whole: the top-level precisions and KV dtypes vanished once the workload named its GPUs)."""
    scenario = parse_scenario({"name": "tl", "search": {"precisions": ["bf16"], "kv_dtypes": ["fp8"]},
                               "pricing": {"providers": ["runpod"]},
                               "workloads": [{"name": "w", "model": "llama-3.1-8b",
                                              "workload": {"context": "4K", "traffic": {
                                                  "requests_per_s": 2, "prompt_tokens": 500, "output_tokens": 100}},
                                              "search": {"gpus": ["l40s"]}, "pricing": {"market": "any"}}]})
    [(_, part)] = scenario.fleet_parts()
    assert (part.search.precisions, part.search.kv_dtypes, part.search.gpus) == (["bf16"], ["fp8"], ["l40s"])
    assert (part.pricing.providers, part.pricing.market) == (["runpod"], "any")
    with pytest.raises(PlannerInputError, match="mem_fraction_static: engine vllm does not read it"):
        parse_scenario({"name": "e", "engine": {"name": "sglang", "mem_fraction_static": 0.8},
                        "workloads": [{"name": "w", "model": "llama-3.1-8b", "engine": {"name": "vllm"},
                                       "workload": {"context": "4K", "traffic": {
                                           "requests_per_s": 2, "prompt_tokens": 500, "output_tokens": 100}}}]})
