"""Speculative decoding in fleets sized by traffic (issue 22): a replica running the checkpoint's MTP module decodes in
cycles (s - 1 draft forwards, a verify of s + 1 tokens a request, a draft extend), each request gaining the acceptance
length L tokens a cycle, so its decoding requests make batch x L / cycle tokens/s; the fleet searches it beside no
speculation, CP-SAT picks the cheaper, and the plan file, the rendered plan and the exports carry it."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from test_cli import run

from planner import api
from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.estimator.capacity import Scheduler, StepTimes, steady_state
from planner.estimator.engines import engine_budget
from planner.estimator.memory import GpuTarget, estimate_memory
from planner.estimator.performance import Step, Workload, replica_timer
from planner.estimator.speculative import (
    SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS,
    draft_architecture,
    speculation,
    speculative_timer,
    token_steps,
    with_draft,
)
from planner.model.sources import resolve_model
from planner.plan.configuration import check_configuration
from planner.plan.fleet import fleet_problem, plan_fleet
from planner.plan.planfile import load_plan_file
from planner.plan.scenario import parse_scenario
from planner.plan.serving import ServingCache, replica_scheduler
from planner.render.export import export
from planner.render.markdown import fleet_markdown, md
from planner.render.records import fleet_json
from planner.render.summary import speculative_choice_lines

CATALOG = load_catalog()
ROOT = Path(__file__).parents[1]
MODEL, GPU = "deepseek-v3", "b200"
SPEC = speculation("mtp", 3, 2.5)


@pytest.fixture(scope="module")
def timers():
    arch = resolve_model(CATALOG, MODEL)
    card = CATALOG.gpus.get(GPU)
    target = replica_timer(arch, "auto", "auto", card, 8, 1, CATALOG, "sglang")
    draft = replica_timer(draft_architecture(arch), "auto", "auto", card, 8, 1, CATALOG, "sglang")
    return target, draft, speculative_timer(target, draft, SPEC)


def _cycle_by_hand(target, draft, batch: float, context: float, prompt_tokens: int = 0, positions: float = 0.0,
                   prompt_seqs: int = 0) -> float:
    """s = 3: the target verifies 4 tokens a request (1 decoded + 3 drafted, every token's logits) with the step's
    prompt tokens beside them, under a graph unless the step carries prompt tokens; the draft runs 2 one-token
    forwards and one over the 3 drafted tokens, its engine step inside the target's (subtracted)."""
    drafted = batch * 3
    verifier = target if prompt_tokens else target.graphed()
    verify = verifier.forward_s(Step(batch, context, drafted + prompt_tokens, drafted * context + positions,
                                     drafted + prompt_seqs))
    engine_step = draft.hw.step_overhead_s
    wide = Step(batch, context, drafted, drafted * context, drafted)
    return (verify + 2 * (draft.step_s(Step(batch, context)) - engine_step) + draft.graphed().forward_s(wide)
            - engine_step)


def test_a_decode_step_is_the_cycle_by_hand(timers):
    target, draft, spec_timer = timers
    times = StepTimes(spec_timer)
    batch, context = 24, 2300.0
    by_hand = _cycle_by_hand(target, draft, batch, context)
    assert times.mean_step(batch, context, 0, 2000) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(spec_timer.cycle(batch, context).cycle_s, rel=1e-12)
    # a request gains L tokens a cycle: the batch's decode capacity is batch x L / cycle tokens/s
    decode_tokens_per_s = batch * SPEC.acceptance_length / by_hand
    assert times.decode_steps(601) == pytest.approx(600 / 2.5)
    assert batch * 600 / (times.decode_steps(601) * times.mean_step(batch, context, 0, 2000)) == \
        pytest.approx(decode_tokens_per_s, rel=1e-12)
    # and each takes s + 1 = 4 tokens of the step's token budget (vLLM schedules num_tokens_with_spec); SGLang sizes a
    # prefill batch without the running requests
    vllm = StepTimes(speculative_timer(replace(target, mixes_prefill=True), draft, SPEC))
    assert vllm.decode_room(8192, batch) == 8192 - 4 * batch and times.decode_room(8192, batch) == 8192


def test_prompt_tokens_join_the_verify_pass_where_the_engine_mixes_them(timers):
    """Prefill is unchanged: on an engine that mixes prompts into decode steps (vLLM) a step's prompt tokens are the
    target's work in the verify pass (run eagerly where the engine runs prefill eagerly), the draft's forwards those
    of the decoding requests; SGLang runs them as a pass of their own before the cycle."""
    sglang_target, draft, _ = timers
    assert not sglang_target.mixes_prefill
    target = replace(sglang_target, mixes_prefill=True)
    spec_timer = speculative_timer(target, draft, SPEC)
    batch, context, prompt = 8, 1500.0, 512
    positions = prompt * (prompt + 1) / 2
    by_hand = _cycle_by_hand(target, draft, batch, context, prompt, positions, 1)
    assert StepTimes(spec_timer).step_s(batch, context, prompt, positions, 1) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand > _cycle_by_hand(target, draft, batch, context)
    apart = sglang_target.forward_s(Step(0, context, prompt, positions, 1)) + _cycle_by_hand(target, draft, batch,
                                                                                             context)
    sglang = speculative_timer(sglang_target, draft, SPEC)
    assert StepTimes(sglang).step_s(batch, context, prompt, positions, 1) == pytest.approx(apart, rel=1e-12)


def test_the_steady_state_decodes_l_tokens_a_cycle(timers):
    """At a rate, the decoding requests B make B x L / (mean step) tokens/s: the rate's (N - 1) tokens a request
    (Little's law over (N - 1) / L cycles); a request's TPOT is the mean step over L. Without MTP, B / (mean step)."""
    target, _, spec_timer = timers
    scheduler = Scheduler(pool_tokens=2_000_000, block_tokens=1, max_num_batched_tokens=16384, max_num_seqs=None,
                          max_model_len=32768)
    shape, rate = Workload(2000, 600), 4.0
    state = steady_state(StepTimes(spec_timer), scheduler, shape, rate, window_spread=False)
    assert not state.limit
    assert state.decode_batch * SPEC.acceptance_length / state.step_s == pytest.approx(rate * 599, rel=1e-9)
    assert state.tpot_mean_s == pytest.approx(state.step_s / SPEC.acceptance_length, rel=1e-12)
    plain = steady_state(StepTimes(target), scheduler, shape, rate, window_spread=False)
    assert plain.decode_batch / plain.step_s == pytest.approx(rate * 599, rel=1e-9)


def _fleet(**search) -> dict:
    return {"name": "dsv32", "model": "deepseek-v3.2",
            "workload": {"context": "32K", "concurrency": 128,
                         "traffic": {"requests_per_s": 30, "prompt_tokens": 2000, "output_tokens": 500},
                         "slo": {"ttft_s": 3.0, "tpot_s": 0.05}},
            "search": {"precisions": ["fp8-block"], "kv_dtypes": ["auto"], "gpus": ["b200"],
                       "max_gpus_per_replica": 8, **search},
            "engine": {"name": "sglang"}, "solver": {"time_limit_s": 120}}


@pytest.fixture(scope="module")
def fleets():
    """The fleet searched with both settings (explained), and held to each alone."""
    both = plan_fleet(fleet_problem(parse_scenario(_fleet(speculative=["none", "mtp"])), CATALOG), CATALOG)
    alone = {name: api.plan_fleet(parse_scenario(_fleet(speculative=[name])), catalog=CATALOG).usd_per_hour
             for name in ("none", "mtp")}
    return both, alone


def test_the_fleet_picks_the_cheaper_setting(fleets):
    plan, alone = fleets
    assert plan.status == "OPTIMAL"
    assert plan.usd_per_hour == min(alone.values())
    picked = {a.configuration.speculation for a in plan.assignments}
    cheaper = min(alone, key=alone.get)
    assert alone["mtp"] != alone["none"]  # the scenario tells them apart
    assert picked == ({None} if cheaper == "none" else {speculation("mtp", 3, 2.65)})
    # the plan says what it runs and what the fleet costs held to the other setting: the other's own fleet
    [choice] = plan.speculative
    other = "none" if cheaper == "mtp" else "mtp"
    assert choice.other_usd_per_hour == alone[other] > plan.usd_per_hour
    [line] = speculative_choice_lines(plan)
    assert line.startswith("dsv32: speculative decoding MTP 3 tokens, acceptance length 2.65 (published for "
                           "deepseek_v32") if cheaper == "mtp" else line.startswith("dsv32: speculative decoding none")
    assert f"next best {'without MTP' if cheaper == 'mtp' else 'with MTP'}" in line
    assert f"${alone[other]:,.2f}/hour (+{alone[other] - plan.usd_per_hour:,.2f}), {choice.other_replicas}" in line
    assert re.fullmatch(r"\d+ x \(8 x (b200|h200-sxm), tp 8 x pp 1\)( \+ \d+ x \(8 x (b200|h200-sxm), tp 8 x pp 1\))*",
                        choice.other_replicas)
    assert f"- speculative: {md(line)}" in fleet_markdown("dsv32", plan)


def test_the_picked_replica_is_rechecked_with_the_draft(fleets):
    """Every printed replica is re-checked by the estimator: an MTP replica with the draft's layer (its weights and
    its cache a token), which the model alone does not hold."""
    plan, _ = fleets
    arch = resolve_model(CATALOG, "deepseek-v3.2")
    for a in plan.assignments:
        assert a.configuration.speculation is not None and a.memory.gpu.fits
        card = GpuTarget.from_catalog(a.config.candidate.gpu)
        assert a.memory == check_configuration(arch, a.configuration, card, CATALOG)
        alone = estimate_memory(arch, a.configuration.request(), CATALOG, card)
        assert a.memory.weights_bytes > alone.weights_bytes and a.memory.kv_bytes_per_token > alone.kv_bytes_per_token


def test_an_mtp_replica_pool_holds_the_draft_cache():
    """The KV pool an MTP replica is sized with is the engine's for the model with the draft's layer (one more layer of
    cache a token, and its weights): what the single-configuration search and the plan's re-check hold."""
    problem = fleet_problem(parse_scenario(_fleet(speculative=["mtp"])), CATALOG)
    [workload] = problem.workloads
    plan = plan_fleet(problem, CATALOG, explain=False)
    a = plan.assignments[0]
    c = a.config.candidate
    target = GpuTarget.from_catalog(c.gpu)
    request = replace(c.configuration.request(), batch=1)
    drafted = engine_budget(with_draft(workload.space.arch, c.configuration.speculation.draft_tokens), request, workload.space.engine, target, CATALOG)
    alone = engine_budget(workload.space.arch, request, workload.space.engine, target, CATALOG)
    assert a.config.scheduler.pool_tokens == drafted.kv_cache_capacity_tokens < alone.kv_cache_capacity_tokens
    plain = replace(c, configuration=replace(c.configuration, speculation=None))
    assert replica_scheduler(workload.space, plain, CATALOG).pool_tokens == alone.kv_cache_capacity_tokens


def test_sglang_runs_48_requests_with_mtp_unless_the_plan_says_otherwise():
    """Without workload.concurrency an SGLang MTP replica is sized with SGLang's own limit under speculative decoding
    (48 running requests: server_args.py), and its export states it."""
    data = _fleet(speculative=["mtp"])
    data["workload"].pop("concurrency", None)
    plan = api.plan_fleet(parse_scenario(data), catalog=CATALOG)
    assert {a.config.scheduler.max_num_seqs for a in plan.assignments} == {SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS}
    assert all(a.config.performance.batch <= 48 for a in plan.assignments)
    without = api.plan_fleet(parse_scenario({**data, "search": {**data["search"], "speculative": ["none"]}}),
                             catalog=CATALOG)
    # without MTP, SGLang's default max_running_requests, clamp(tokens / context x 512, 2048, 4096): 4,096 here (the
    # pool holds at least 8 full-context requests), far above what the pool runs at once, which decides
    assert {a.config.scheduler.max_num_seqs for a in without.assignments} == {4096}
    assert all(a.config.scheduler.pool_tokens // a.config.scheduler.max_model_len * 512 >= 4096
               for a in without.assignments)


def test_the_plan_file_and_exports_carry_mtp(fleets, tmp_path):
    plan, _ = fleets
    path = tmp_path / "fleet.json"
    path.write_text(fleet_json(plan, "dsv32"))
    data = json.loads(path.read_text())
    assert data["assignments"][0]["speculation"] == {"method": "mtp", "draft_tokens": 3, "acceptance_length": 2.65}
    assert data["speculative"][0]["running"] == "MTP 3 tokens, acceptance length 2.65"
    [checked] = load_plan_file(path, CATALOG)  # re-checked with the draft's layer on load
    assert checked.configuration.speculation == speculation("mtp", 3, 2.65)
    [deployed] = api.export_plans(path, catalog=CATALOG)
    launch = export(deployed, "sglang")
    assert launch.rstrip().endswith("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
                                    "--speculative-num-draft-tokens 4")
    # the running requests the replica was sized with (workload.concurrency 128), stated: SGLang's own limit under
    # speculative decoding would be 48
    assert data["assignments"][0]["max_num_seqs"] == 128 and " --max-running-requests 128 " in launch
    assert "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'" in export(deployed, "vllm")
    # a disaggregated replica is sized without MTP: a plan file saying otherwise is refused in one line
    data["assignments"][0]["role"] = "decode"
    data["assignments"].append({**data["assignments"][0], "role": "prefill", "speculation": None})
    path.write_text(json.dumps(data))
    with pytest.raises(PlannerInputError, match=re.escape("speculation: a disaggregated decode replica is sized "
                                                          "without speculative decoding")) as refusal:
        load_plan_file(path, CATALOG)
    assert "\n" not in str(refusal.value)


def test_token_steps_by_hand(timers):
    """The simulator runs an MTP replica in token steps: a decode-only step is the cycle over L (one token a request),
    a step with prompt tokens adds their cost (SGLang: their own pass); no draft runs when nothing decodes."""
    target, draft, spec_timer = timers
    steps = token_steps(spec_timer)
    batch, context, prompt = 16, 3000.0, 1024
    positions = prompt * (prompt + 1) / 2
    cycle = _cycle_by_hand(target, draft, batch, context)
    assert steps.step_s(Step(batch, context)) == pytest.approx(cycle / 2.5, rel=1e-12)
    with_prompt = target.forward_s(Step(0, context, prompt, positions, 1)) + cycle  # SGLang: the prompts' own pass
    assert steps.step_s(Step(batch, context, prompt, positions, 1)) == pytest.approx(cycle / 2.5 + with_prompt - cycle,
                                                                                    rel=1e-12)
    assert steps.step_s(Step(0, 0.0, prompt, positions, 1)) == pytest.approx(
        target.step_s(Step(0, 0.0, prompt, positions, 1)), rel=1e-12)
    assert (steps.tokens_per_step, steps.budget_per_decode) == (1.0, 4)


def test_simulate_runs_an_mtp_fleet_near_its_steady_state(fleets, tmp_path):
    """`planner simulate` of the plan file runs each MTP replica at its expected load in token steps; its TPOT is
    the steady state's within the run's spread (a minute of arrivals from an empty engine)."""
    plan, _ = fleets
    path = tmp_path / "fleet.json"
    path.write_text(fleet_json(plan, "dsv32"))
    [replica] = api.simulate(str(path), duration_s=60, catalog=CATALOG)
    [a] = plan.assignments
    assert replica.result.completed > 0 and replica.result.preemptions == 0
    assert replica.result.tpot_s.p50 == pytest.approx(a.loads.expected.tpot_s, rel=0.25)


def test_check_replays_and_replan_refuses_an_mtp_replica(fleets, tmp_path):
    """`planner check` replays a run on the MTP replica in token steps; `--replan` fits no calibration on it (the
    factors are fitted on replicas without MTP) and says so in one line."""
    plan, _ = fleets
    path = tmp_path / "fleet.json"
    path.write_text(fleet_json(plan, "dsv32"))
    example = ROOT / "examples" / "calibration" / "vllm-llama-3.1-8b-h100-c8.json"  # its shape, another model
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps({**json.loads(example.read_text()), "model_id": "deepseek-ai/DeepSeek-V3.2",
                                    "tokenizer_id": "deepseek-ai/DeepSeek-V3.2"}))
    [checked] = api.check(path, [run_file], catalog=CATALOG)
    assert checked.gpu == plan.assignments[0].config.candidate.gpu.name and checked.predicted
    scenario = tmp_path / "dsv32.yaml"
    scenario.write_text(json.dumps(_fleet(speculative=["none", "mtp"])))
    with pytest.raises(PlannerInputError, match=re.escape("--replan: the measured replica runs MTP speculative "
                                                          "decoding (MTP 3 tokens, acceptance length 2.65)")) as no:
        api.replan(path, [run_file], scenario, catalog=CATALOG)
    assert "\n" not in str(no.value)


def test_disaggregated_pairs_are_searched_without_mtp_beside_aggregated_replicas_with_it():
    """search.serving [aggregated, disaggregated] with search.speculative [none, mtp]: aggregated replicas are searched
    with and without MTP, prefill / decode pairs without it (not modelled), and the plan says so."""
    plan = api.plan_fleet(parse_scenario(_fleet(speculative=["none", "mtp"], serving=["aggregated", "disaggregated"])),
                          catalog=CATALOG)
    assert plan.status == "OPTIMAL"
    problem = fleet_problem(parse_scenario(_fleet(speculative=["none", "mtp"], serving=["aggregated",
                                                                                         "disaggregated"])), CATALOG)
    configs = ServingCache(CATALOG).configs(problem.workloads[0])
    pairs = [c for c in configs if c.role != "both"]
    assert pairs and all(c.candidate.configuration.speculation is None for c in pairs)
    assert any(c.candidate.configuration.speculation is not None for c in configs if c.role == "both")
    [choice] = plan.speculative
    assert choice.pairs_without_mtp
    [line] = speculative_choice_lines(plan)
    assert line.endswith("disaggregated prefill/decode pairs are searched without MTP (a decode pool's MTP cycles "
                         "beside transferred prompts are not modelled)")


@pytest.mark.parametrize("data, message", [
    (_fleet(speculative=["none", "mtp"], serving=["disaggregated"]),
     ("search.speculative (dsv32): mtp is sized for aggregated replicas; a disaggregated decode pool's MTP cycles "
      "beside transferred prompts are not modelled yet: add aggregated to search.serving or remove mtp")),
])
def test_fleet_refusals_name_the_field(data, message):
    with pytest.raises(PlannerInputError, match=re.escape(message)) as refusal:
        parse_scenario(data)
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("change, message", [
    ({"model": "qwen3-30b-a3b"}, "search.speculative: qwen3-30b-a3b's checkpoint ships no MTP module"),
    ({"engine": {"name": "llamacpp"}}, "search.speculative: mtp is planned for engine.name sglang or vllm"),
])
def test_what_a_fleet_cannot_plan_is_refused(change, message):
    with pytest.raises(PlannerInputError, match=re.escape(message)) as refusal:
        api.plan_fleet(parse_scenario({**_fleet(speculative=["none", "mtp"]), **change}), catalog=CATALOG)
    assert "\n" not in str(refusal.value)


def test_the_shipped_fleet_scenario_prints_what_it_picked_and_the_next_best(tmp_path):
    """`planner solve` on the shipped fleet scenario: its replicas run MTP (the pool's line says so), and the plan
    prints the fleet's cost without it; the JSON carries the same; `planner simulate` runs it."""
    path = ROOT / "scenarios" / "deepseek-v3.2-chat-fleet-mtp.yaml"
    proc = run("solve", str(path), "--format", "json", "-o", "fleet.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "fleet.json").read_text())
    [choice] = data["speculative"]
    assert choice["running"] == "MTP 3 tokens, acceptance length 2.65" and choice["other"] == "without MTP"
    assert choice["other_usd_per_hour"] > data["usd_per_hour"]
    assert all(a["speculation"]["draft_tokens"] == 3 for a in data["assignments"])
    proc = run("solve", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # the terminal wraps long lines
    assert "MTP 3 tokens, acceptance length 2.65" in text
    assert (f"next best without MTP: ${choice['other_usd_per_hour']:,.2f}/hour "
            f"(+{choice['other_usd_per_hour'] - data['usd_per_hour']:,.2f})") in text
    proc = run("simulate", str(tmp_path / "fleet.json"), "--duration", "30", cwd=tmp_path)
    assert proc.returncode == 0 and "TPOT  p50" in proc.stdout, proc.stderr
