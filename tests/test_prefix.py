"""Prefix caching (issue 22 item 3): a workload's shared prompt prefix is cached once per replica, in whole blocks;
requests prefill and hold only the rest, in the capacity model and the simulator alike."""

from math import ceil

import pytest

from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.estimator.capacity import Scheduler, _mean_held_blocks, steady_state
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.memory import GpuTarget, Request
from planner.estimator.performance import Step, Workload, replica_timer
from planner.estimator.simulate import Arrival, run_engine
from planner.model.sources import resolve_model
from planner.plan.fleet import fleet_problem, plan_fleet
from planner.plan.scenario import parse_scenario
from planner.render.records import assignment_row
from planner.render.summary import prefix_lines

CATALOG = load_catalog()


def pool(block: int, context: int = 8192) -> Scheduler:
    return Scheduler(pool_tokens=100_000, block_tokens=block, max_num_batched_tokens=8192, max_num_seqs=256,
                     max_model_len=context)


@pytest.mark.parametrize("block, prompt, shared, cached", [
    (16, 4000, 3008, 3008),  # 188 whole blocks: prefills 992
    (16, 4000, 3000, 2992),  # 3000 = 187.5 blocks: the cache hits 187 of them, so it prefills 1008
    (16, 4000, 3007, 2992),
    (64, 4000, 3000, 2944),  # vLLM 0.34's 64-token blocks: 46 of them
    (1, 4000, 3007, 3007),  # SGLang's radix cache pages one token
    (16, 3000, 3000, 2992),  # a prompt that is all prefix (a trace): the last token is computed again (2999 -> 2992)
    (8192, 4000, 3000, 0),  # llama-server: a slot holds a whole context, and slots share nothing
])
def test_the_cache_hits_whole_blocks_of_the_shared_prefix(block, prompt, shared, cached):
    assert pool(block).cached_tokens(prompt, shared) == cached


def test_a_model_with_recurrent_layers_is_planned_without_prefix_hits():
    """Nemotron-3-Nano's Mamba-2 layers: vLLM 0.19 runs it without prefix caching, and the caches that keep recurrent
    states do so at checkpoints only (not modelled): no prefill is spared, and the pool holds no shared blocks."""
    card = CATALOG.gpus.get("h100-sxm")
    budget = engine_budget(resolve_model(CATALOG, "nemotron-3-nano-30b-a3b"), Request(context=32768),
                           EngineSettings("vllm", version="0.19.0"), GpuTarget.from_catalog(card), CATALOG)
    scheduler = Scheduler.of(budget)
    assert budget.layout.state_bytes and not scheduler.prefix_cache
    assert scheduler.cached_tokens(4000, 3008) == 0


@pytest.fixture(scope="module")
def h100():
    arch, card = resolve_model(CATALOG, "llama-3.1-8b"), CATALOG.gpus.get("h100-sxm")
    budget = engine_budget(arch, Request(context=8192, batch=1, tp=1, pp=1, precision="bf16", kv_dtype="auto"),
                           EngineSettings("vllm", version="0.19.0"), GpuTarget.from_catalog(card), CATALOG)
    return replica_timer(arch, "bf16", "auto", card, 1, 1, CATALOG), Scheduler.of(budget)


def test_the_steady_state_prefills_the_rest_and_holds_the_prefix_once(h100):
    timer, scheduler = h100
    assert scheduler.block_tokens == 16
    plain, shared = Workload(4000, 200), Workload(4000, 200, 3000)
    without, with_ = steady_state(timer, scheduler, plain, 5.0), steady_state(timer, scheduler, shared, 5.0)
    # each request prefills 1008 tokens and holds its own 1008 + t in whole blocks; the 2992 cached tokens once
    assert with_.kv_tokens_shared == 2992 and without.kv_tokens_shared == 0
    decoding, prefilling = with_.decode_batch, with_.batch - with_.decode_batch
    assert with_.kv_tokens_mean == pytest.approx(decoding * _mean_held_blocks(16, 1008, 200) + prefilling * 1008 + 2992)
    assert with_.kv_tokens_peak == ceil(with_.batch) * (1008 + 208) + 2992  # 1208 tokens in 76 blocks of 16
    # a quarter of the prompt work: a shorter TTFT, less of the prefill budget, less KV
    assert with_.ttft_s < without.ttft_s / 2 and with_.prefill_utilisation < without.prefill_utilisation / 2
    assert with_.kv_tokens_mean < without.kv_tokens_mean / 2
    # the same steady state as a 1008-token prompt but for the prefix: its chunks attend to the cached tokens too
    alone = steady_state(timer, scheduler, Workload(1008, 200), 5.0)
    assert alone.ttft_s < with_.ttft_s


def test_the_simulator_prefills_the_rest_and_holds_the_prefix_once(h100):
    timer, scheduler = h100
    run = run_engine(timer, scheduler, [Arrival(0.0, 4000, 2, 3008)])
    (served,) = run.served
    # one step prefills the 992 tokens after the 3008 cached ones (positions 3009..4000), the next decodes
    first = timer.step_s(Step(0, 0.0, 992, 992 * 3008 + 992 * 993 / 2, 1))
    assert served.first_token_s == pytest.approx(first)
    # the pool: the prefix's 188 blocks once, the request's own 992 + 1 tokens in 63 blocks
    assert run.peak_blocks == 188 + 63
    two = run_engine(timer, scheduler, [Arrival(0.0, 4000, 2, 3008), Arrival(0.0, 4000, 2, 3008)])
    assert two.peak_blocks == 188 + 2 * 63
    plain = run_engine(timer, scheduler, [Arrival(0.0, 4000, 2)])
    assert plain.peak_blocks == 251 and plain.served[0].first_token_s > 3 * served.first_token_s


def scenario(shared: int | None, rps: float = 6.0) -> dict:
    traffic = {"requests_per_s": rps, "prompt_tokens": 4000, "output_tokens": 200}
    if shared is not None:
        traffic["shared_prefix_tokens"] = shared
    return {"name": "rag", "model": "llama-3.1-8b", "engine": {"version": "0.19.0"},
            "workload": {"context": 8192, "traffic": traffic, "slo": {"ttft_s": 1.0, "tpot_s": 0.05}},
            "search": {"gpus": ["l40s"], "precisions": ["bf16"]}, "pricing": {"providers": ["runpod"]}}


def solved(shared: int | None):
    return plan_fleet(fleet_problem(parse_scenario(scenario(shared)), CATALOG), CATALOG, explain=False)


def test_a_shared_prefix_needs_fewer_replicas_and_the_plan_says_so():
    plain, none, cached = solved(None), solved(0), solved(3008)
    replicas = [sum(a.replicas for a in plan.assignments) for plan in (plain, none, cached)]
    assert replicas[0] == replicas[1] > replicas[2] >= 1
    assert none.usd_per_hour == plain.usd_per_hour > cached.usd_per_hour
    row = assignment_row(cached.assignments[0])
    assert row["shared_prefix_tokens"] == 3008 and row["cached_prefill_tokens_per_request"] == 3008
    assert assignment_row(plain.assignments[0])["cached_prefill_tokens_per_request"] == 0
    assert prefix_lines(plain) == []
    assert prefix_lines(cached) == ["rag: the shared 3,008-token prompt prefix cached once per replica (l40s: 3,008 "
                                    "tokens in whole 16-token blocks); each request prefills 992 of its 4,000"]


def test_planner_simulate_runs_the_prefix_the_plan_assumed(tmp_path):
    from planner import api
    from planner.render.records import fleet_json

    data = scenario(3008)
    plan = plan_fleet(fleet_problem(parse_scenario(data), CATALOG), CATALOG)  # explained: it simulates its loads
    runs = api.simulate(parse_scenario(data), catalog=CATALOG)
    assert [a.loads.simulated.ttft_s for a in plan.assignments] == [r.result.ttft_s for r in runs]
    path = tmp_path / "plan.json"
    path.write_text(fleet_json(plan, "rag"))
    # the plan file carries the prefix (its rates are rounded: both runs at one rate)
    assert ([r.result.ttft_s for r in api.simulate(path, rate=2.0, catalog=CATALOG)]
            == [r.result.ttft_s for r in api.simulate(parse_scenario(data), rate=2.0, catalog=CATALOG)])
    # the planned TTFT at the expected load and the simulated one agree, and both are the prefix's
    for a in plan.assignments:
        assert a.loads.simulated.ttft_s.mean == pytest.approx(a.loads.expected.ttft_s, rel=0.3)
    plain = api.simulate(parse_scenario({**data, "workload": {**data["workload"], "traffic": {
        **data["workload"]["traffic"], "shared_prefix_tokens": 0}}}), rate=runs[0].rate_per_replica, catalog=CATALOG)
    assert plain[0].result.ttft_s.mean > 2 * runs[0].result.ttft_s.mean


@pytest.mark.parametrize("shared, needle", [
    (4000, "shared_prefix_tokens: 4000 must be below prompt_tokens (4000)"),
    (-1, "shared_prefix_tokens"),
])
def test_a_prefix_as_long_as_the_prompt_is_a_one_line_error(shared, needle):
    with pytest.raises(PlannerInputError, match=needle.replace("(", r"\(").replace(")", r"\)")) as err:
        parse_scenario(scenario(shared))
    assert "\n" not in str(err.value)


def test_a_bucketed_prefix_is_below_every_buckets_prompt():
    data = scenario(None)
    data["workload"]["traffic"] = {"requests_per_s": 2, "shared_prefix_tokens": 600, "buckets": [
        {"share": 0.5, "prompt_tokens": 4000, "output_tokens": 200},
        {"share": 0.5, "prompt_tokens": 500, "output_tokens": 50}]}
    with pytest.raises(PlannerInputError, match=r"must be below prompt_tokens \(500\)"):
        parse_scenario(data)


def test_exports_keep_the_engines_prefix_caching_on(tmp_path):
    """vLLM v1 caches prefixes by default (enable_prefix_caching None: on for generative models) and SGLang's radix
    cache is on unless --disable-radix-cache: the exports of a plan that counts on it turn neither off."""
    from planner.render.export import export, load_plan
    from planner.render.records import fleet_json

    path = tmp_path / "plan.json"
    path.write_text(fleet_json(solved(3008), "rag"))
    plan = load_plan(path, CATALOG, assignment=0)
    for target, off in (("vllm", "--no-enable-prefix-caching"), ("sglang", "--disable-radix-cache")):
        text = export(plan, target)
        assert text and off not in text and "prefix" not in text.replace("shared_prefix", "")
