"""Disaggregated prefill and decode: a decode replica holding transferred prompts, a prefill replica making first
tokens, the KV transfer by bytes over the NIC, the SLO split, and CP-SAT choosing the cheaper mode."""

from math import ceil
from pathlib import Path

import pytest

from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.estimator.capacity import Scheduler, Slo, steady_state
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.memory import GpuTarget, Request
from planner.estimator.performance import Workload, replica_timer
from planner.model.sources import resolve_model
from planner.plan.disaggregated import DECODE, PREFILL, decode_slo, prefill_slo, role_shape
from planner.plan.fleet import fleet_problem, plan_fleet
from planner.plan.scenario import parse_scenario
from planner.plan.serving import Bucket, ServingCache

CATALOG = load_catalog()


def replica(model="llama-3.1-8b", gpu="h100-sxm"):
    """A vLLM 0.19.0 replica (16-token blocks) of one GPU at 8K."""
    arch = resolve_model(CATALOG, model)
    card = CATALOG.gpus.get(gpu)
    budget = engine_budget(arch, Request(context=8192, batch=1, tp=1, pp=1, precision="bf16", kv_dtype="auto"),
                           EngineSettings("vllm", version="0.19.0"), GpuTarget.from_catalog(card), CATALOG)
    return replica_timer(arch, "bf16", "auto", card, 1, 1, CATALOG), Scheduler.of(budget)


def test_a_decode_replica_holds_each_transferred_prompt_whole_and_computes_one_token():
    timer, scheduler = replica()
    decode = Workload(1500, 400, prefilled=True)
    # computes its last prompt token (attending to the 1,499 before it) and holds all 1,500 of its own
    assert scheduler.own_prompt(decode) == (1, 1499, 1500, 0)
    state = steady_state(timer, scheduler, decode, 4.0)
    mean_decoding = sum(ceil((1500 + t) / 16) * 16 for t in range(1, 400)) / 399
    prefilling = state.batch - state.decode_batch
    assert state.kv_tokens_mean == pytest.approx(state.decode_batch * mean_decoding + prefilling * 1504)
    assert state.kv_tokens_peak == ceil(state.batch) * 1904  # P + N = 1,900 tokens in 119 blocks per request
    assert state.kv_tokens_shared == 0


def test_a_transferred_prompt_is_not_a_prefix_cache_hit():
    _, scheduler = replica()
    # a shared prefix of 1,000 tokens: the cache holds 992 (62 whole blocks) once and each request its other 508
    assert scheduler.own_prompt(Workload(1500, 400, 1000)) == (508, 992, 508, 992)
    # the decode pool of a disaggregated pair gets each prompt's KV whole, per request (role_shape drops the prefix)
    decode = role_shape(Bucket(4.0, 1500, 400, 1000), DECODE)
    assert decode == Workload(1500, 400, 0, prefilled=True)
    assert scheduler.own_prompt(decode) == (1, 1499, 1500, 0)


def test_a_prefill_replica_makes_the_first_token_only():
    timer, scheduler = replica()
    prefill = role_shape(Bucket(4.0, 1500, 400, 1000), PREFILL)
    assert prefill == Workload(1500, 1, 1000)  # its prefix cache still serves the shared prefix
    state = steady_state(timer, scheduler, prefill, 4.0)
    assert state.decode_batch == 0 and state.output_tokens_per_s == 4.0


def test_the_slo_split():
    slo = Slo(3.0, 0.04)
    # decode: the step under way and its own first step, each within the TPOT target: 2 x 40 ms
    assert decode_slo(slo) == Slo(0.08, 0.04)
    # prefill: 3 s - 26.2144 ms of transfer - 80 ms
    assert prefill_slo(slo, 0.0262144).ttft_s == pytest.approx(2.8937856)
    assert prefill_slo(slo, 0.0262144).tpot_s is None
    assert prefill_slo(Slo(0.1, 0.04), 0.03) is None  # nothing left for the prefill


def rag(rps, serving=("aggregated", "disaggregated"), engine="vllm", **workload):
    return parse_scenario({"engine": {"name": engine},
        "name": "rag", "model": "llama-3.3-70b",
        "workload": {"context": "16K", "traffic": {"requests_per_s": rps, "prompt_tokens": 8000, "output_tokens": 250},
                     "slo": {"ttft_s": 3.0, "tpot_s": 0.04}, **workload},
        "search": {"precisions": ["fp8"], "kv_dtypes": ["fp8"], "gpus": ["h100-sxm"], "serving": list(serving)},
        "pricing": {"providers": ["runpod"]}})


def test_the_kv_transfer_is_the_prompts_kv_per_gpu_over_its_nic():
    problem = fleet_problem(rag(12), CATALOG)
    configs = ServingCache(CATALOG).configs(problem.workloads[0])
    transfers = {c.candidate.gpus: c.transfer for c in configs if c.role == PREFILL}
    # Llama 3.3 70B, fp8 KV: 80 layers x 8 KV heads x (128 + 128) x 1 byte = 163,840 bytes per token; 8,000 tokens
    # over one GPU's 400 Gb/s ConnectX-7 (50 GB/s): 1,310,720,000 B in 26.2144 ms; TP 2 halves each GPU's heads
    assert transfers[1].bytes_per_gpu == 163_840 * 8000 and transfers[1].seconds == pytest.approx(0.0262144)
    assert transfers[2].bytes_per_gpu == 81_920 * 8000 and transfers[2].seconds == pytest.approx(0.0131072)
    assert transfers[8].bytes_per_gpu == 20_480 * 8000
    for c in configs:
        if c.role == PREFILL:
            assert c.role_slo.ttft_s == pytest.approx(3.0 - c.transfer.seconds - 0.08)


def test_cp_sat_takes_the_cheaper_mode_and_prices_the_other():
    problem = fleet_problem(rag(12), CATALOG)
    cache = ServingCache(CATALOG)
    configs = cache.configs(problem.workloads[0])
    capacity = {(c.role, c.candidate.gpus): c.capacity_rps for c in configs}
    plan = plan_fleet(problem, CATALOG, cache=cache)
    (choice,) = plan.serving
    node = 23.92  # runpod 8x_H100-SXM_SECURE, the only 8-GPU H100 node the scenario rents
    # aggregated: the cheapest is 48 GPUs (12 replicas of 4 at 1.072 req/s, or 6 of 8): 6 nodes
    assert ceil(12 / capacity["both", 4]) * 4 == 48
    assert choice.other_mode == "aggregated" and choice.other_usd_per_hour == pytest.approx(6 * node)
    # disaggregated: the fewest GPUs are 12 prefill replicas of 2 GPUs (1.026 req/s each; 1 GPU: 25, 4: 28, 8: 32)
    # and 4 decode replicas of 2 (3.456 req/s; 4 GPUs: 2 x 4), 32 GPUs: 4 nodes
    assert ceil(12 / capacity["prefill", 2]) == 12 and ceil(12 / capacity["decode", 2]) == 4
    assert min(ceil(12 / capacity["prefill", g]) * g for g in (1, 2, 4, 8)) == 24
    for role in ("prefill", "decode"):
        assert sum(a.replicas * a.config.capacity_rps for a in plan.assignments if a.config.role == role) >= 12
    assert sum(u.instances for u in plan.pools) == 4
    assert choice.mode == "disaggregated" and plan.usd_per_hour == pytest.approx(4 * node)
    assert sum(a.replicas * a.config.candidate.gpus for a in plan.assignments) <= 32
    # TTFT re-checked: the slowest prefill replica's at its SLO limit + its transfer (26.2 ms from one GPU, 13.1 ms
    # from two) + the decode replica's share
    slowest = max(a.config.transfer.seconds for a in plan.assignments if a.config.role == "prefill")
    assert choice.transfer_s == slowest and slowest in (pytest.approx(0.0262144), pytest.approx(0.0131072))
    assert choice.ttft_s <= 3.0


def test_at_equal_cost_a_bucket_stays_aggregated():
    # at 4 req/s both modes take two 8-GPU nodes: the plan keeps one pool and no transfer
    plan = plan_fleet(fleet_problem(rag(4), CATALOG), CATALOG)
    (choice,) = plan.serving
    assert choice.mode == "aggregated" and choice.other_usd_per_hour == plan.usd_per_hour == pytest.approx(2 * 23.92)
    assert all(a.config.role == "both" for a in plan.assignments)


def test_the_default_plans_aggregated_without_a_serving_line():
    plan = plan_fleet(fleet_problem(rag(4, serving=("aggregated",)), CATALOG), CATALOG, explain=False)
    assert plan.serving == () and all(a.config.role == "both" for a in plan.assignments)


@pytest.mark.parametrize("change, message", [
    ({"workload": {"context": 8192}}, "search.serving: disaggregated sizes prefill and decode pools by traffic"),
    ({"engine": {"name": "llamacpp"}}, "disaggregated is planned for vllm and sglang"),
    ({"workload": {"context": "16K", "traffic": {"requests_per_s": 1, "prompt_tokens": 8000, "output_tokens": 250},
                   "slo": {"ttft_s": 3.0}}}, "give both ttft_s and tpot_s"),
    ({"search": {"serving": ["split"]}}, "search.serving.0"),
])
def test_bad_serving_input_is_one_line(change, message):
    data = {"name": "rag", "model": "llama-3.3-70b",
            "workload": {"context": "16K", "traffic": {"requests_per_s": 1, "prompt_tokens": 8000,
                                                       "output_tokens": 250}, "slo": {"ttft_s": 3.0, "tpot_s": 0.04}},
            "search": {"gpus": ["h100-sxm"], "serving": ["disaggregated"]}}
    data.update(change)
    with pytest.raises(PlannerInputError, match=message.replace("(", r"\(")) as error:
        fleet_problem(parse_scenario(data), CATALOG)
    assert "\n" not in str(error.value)


# --------------------------------------------------------------------------------------------
# The plan file and the exports

from test_cli import refused  # noqa: E402
from test_parallel_layouts import VLLM_SOURCE, _commands, _vllm_flags, sglang_parser  # noqa: E402,F401

import json  # noqa: E402

from planner.plan.planfile import load_fleet_file  # noqa: E402
from planner.render.export import export, load_plans  # noqa: E402
from planner.render.records import fleet_json  # noqa: E402


@pytest.fixture(scope="module")
def pair_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plans") / "rag.json"
    path.write_text(fleet_json(plan_fleet(fleet_problem(rag(12, engine="sglang"), CATALOG), CATALOG, explain=False),
                               "rag"))
    return path


def test_the_plan_file_carries_each_replicas_role(pair_file):
    data = json.loads(pair_file.read_text())
    roles = {row["role"] for row in data["assignments"]}
    assert roles == {"prefill", "decode"}
    prefill = next(row for row in data["assignments"] if row["role"] == "prefill")
    assert prefill["output_tokens"] == 1 and prefill["role_slo"]["tpot_s"] is None
    assert prefill["kv_transfer"]["bytes_per_gpu"] == 163_840 * 8000 // prefill["tp"]
    assert {a.role for a in load_fleet_file(pair_file).assignments} == {"prefill", "decode"}


@pytest.mark.parametrize("change, message", [
    (lambda rows: rows[0].update(role="both"), "a disaggregated pair needs prefill and decode replicas"),
    (lambda rows: rows.__setitem__(slice(None), [r for r in rows if r["role"] == "prefill"]),
     "a disaggregated pair needs prefill and decode replicas"),
    (lambda rows: rows[0].update(role="prefil"), "role"),
])
def test_a_damaged_pair_is_refused_in_one_line(pair_file, tmp_path, change, message):
    data = json.loads(pair_file.read_text())
    data["assignments"].sort(key=lambda row: row["role"] != "prefill")  # the prefill rows first
    change(data["assignments"])
    (tmp_path / "plan.json").write_text(json.dumps(data))
    refused("export", "plan.json", "--to", "vllm", cwd=tmp_path, needle=message)


def test_exports_write_each_roles_flags(pair_file):
    plans = load_plans(pair_file, CATALOG)
    roles = {plan.role for plan in plans}
    assert roles == {"prefill", "decode"}
    for plan in plans:
        vllm = export(plan, "vllm")
        kv_role = {"prefill": "kv_producer", "decode": "kv_consumer"}[plan.role]
        assert f"--kv-transfer-config '{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"{kv_role}\"}}'" in vllm
        sglang = export(plan, "sglang")
        assert f"--disaggregation-mode {plan.role} --disaggregation-transfer-backend mooncake" in sglang
        assert "sglang_router.launch_router --pd-disaggregation" in sglang
        with pytest.raises(PlannerInputError, match="--to llamacpp: the plan's .* replica is one of a disaggregated"):
            export(plan, "llamacpp")


def test_sglang_parses_the_exported_roles(pair_file, sglang_parser):
    for plan in load_plans(pair_file, CATALOG):
        [argv] = _commands(export(plan, "sglang"), "python3 -m sglang.launch_server")
        args = sglang_parser.parse_args(argv)
        assert (args.disaggregation_mode, args.disaggregation_transfer_backend) == (plan.role, "mooncake")


def test_vllm_knows_the_exported_kv_transfer_config(pair_file):
    if not VLLM_SOURCE.is_dir():
        pytest.skip(f"vLLM 0.34.0's source is not unpacked at {VLLM_SOURCE}")
    assert "--kv-transfer-config" in _vllm_flags()
    # KVTransferConfig's roles (vllm/config/kv_transfer.py): kv_producer and kv_consumer are among them
    source = (VLLM_SOURCE / "vllm" / "config" / "kv_transfer.py").read_text()
    assert 'KVProducer = Literal["kv_producer", "kv_both"]' in source
    assert 'KVConsumer = Literal["kv_consumer", "kv_both"]' in source


def test_the_simulator_runs_each_pool_of_a_pair_as_it_serves(pair_file):
    """A prefill replica's requests end at their first token; a decode replica's arrive with their prompt's KV
    computed: each holds the whole prompt of its own (8,000 tokens in whole blocks) and computes only its last token,
    so its TTFT is about a decode step, not a prefill. A run through the pair's router is not replayed."""
    from planner import api

    runs = api.simulate(pair_file, duration_s=60, catalog=CATALOG)
    roles = {run.role for run in runs}
    assert roles == {"prefill", "decode"}
    for run in runs:
        served = run.result
        assert served.completed > 0
        if run.role == "prefill":
            assert run.output_tokens == 1 and served.tpot_s.p50 == 0.0
        else:
            assert run.output_tokens == 250 and served.ttft_s.p50 < 0.1 < served.e2e_s.p50
    with pytest.raises(PlannerInputError, match="rag.json: every replica is one of a disaggregated prefill/decode pair"):
        api.check(pair_file, [Path(__file__).parents[1] / "examples" / "calibration" / "vllm-llama-3.1-8b-h100-c1.json"],
                  catalog=CATALOG)


def test_a_prefilled_arrival_holds_its_whole_prompt_and_computes_one_token():
    """The simulator's decode-side request: blocks for all P prompt tokens at admission, one token of prefill work."""
    from planner.estimator.performance import Workload, replica_timer
    from planner.estimator.simulate import poisson_arrivals, run_engine

    arch = resolve_model(CATALOG, "llama-3.1-8b")
    timer = replica_timer(arch, "bf16", "auto", CATALOG.gpus.get("h100-sxm"), 1, 1, CATALOG, "vllm")
    scheduler = Scheduler(pool_tokens=1_000_000, block_tokens=16, max_num_batched_tokens=8192, max_num_seqs=None,
                          max_model_len=16384)
    [prefilled] = poisson_arrivals(1.0, 1.0, Workload(8000, 4, prefilled=True), seed=3)[:1]
    [plain] = poisson_arrivals(1.0, 1.0, Workload(8000, 4), seed=3)[:1]
    fast, slow = (run_engine(timer, scheduler, [a], None) for a in (prefilled, plain))
    first = lambda run: run.served[0].first_token_s - run.served[0].sent_s  # noqa: E731
    assert first(fast) < first(slow) / 10
    assert fast.peak_blocks == slow.peak_blocks == -(-(8000 + 3) // 16)  # its own blocks for P + N - 1 tokens


def test_a_day_profile_scales_each_pool_of_a_pair_to_the_hours_demand():
    from planner.plan.profile import plan_day

    scenario = rag(12, engine="sglang")
    day = scenario.model_copy(update={"workload": scenario.workload.model_copy(update={"traffic": scenario.workload
        .traffic.model_copy(update={"requests_per_s": None, "profile": (2.0,) * 12 + (12.0,) * 12})})})
    plan = plan_fleet(fleet_problem(day, CATALOG), CATALOG, explain=False)
    hours = plan_day(day, plan).hours
    for hour, demand in ((0, 2.0), (12, 12.0)):
        for role in ("prefill", "decode"):
            capacity = sum(n * a.config.capacity_rps for n, a in zip(hours[hour].assignment_replicas, plan.assignments)
                           if a.config.role == role)
            assert capacity >= demand


@pytest.mark.parametrize("prefill_rps, mode, nodes", [
    # aggregated: 4 req/s / 1.0 = 4 replicas of 8 GPUs: 4 nodes
    (2.0, "disaggregated", 3),  # ceil(4 / 2.0) = 2 prefill + ceil(4 / 8.0) = 1 decode replica: 3 nodes
    (1.2, "aggregated", 4),  # ceil(4 / 1.2) = 4 prefill + 1 decode: 5 nodes, dearer than 4
    (4 / 3, "aggregated", 4),  # 3 prefill + 1 decode: 4 nodes, as dear as aggregated: one pool wins the tie
])
def test_cp_sat_picks_the_cheaper_mode_of_a_constructed_case(prefill_rps, mode, nodes):
    from dataclasses import replace

    from planner.plan.fleet import Pool, _build, _solve

    problem = fleet_problem(rag(4), CATALOG)
    (w,) = problem.workloads
    configs = ServingCache(CATALOG).configs(w)
    # one 8-GPU replica of each role, its capacity set by hand
    picked = [replace(next(c for c in configs if c.role == role and c.candidate.gpus == 8), capacity_rps=rps)
              for role, rps in (("both", 1.0), ("prefill", prefill_rps), ("decode", 8.0))]
    pools = [Pool(o, m) for o, m in w.space.offers if o.gpus == 8][:1]
    built = _build(problem, picked, pools, allow_unmet=False)
    solver, _ = _solve(built, 10)
    replicas = {picked[ci].role: solver.value(var) for (ci, _), var in built.replicas.items() if solver.value(var)}
    assert sum(solver.value(var) for var in built.instances.values()) == nodes
    assert set(replicas) == ({"both"} if mode == "aggregated" else {"prefill", "decode"})


def test_a_gpu_without_a_network_figure_serves_aggregated_only_and_the_plan_says_why():
    scenario = parse_scenario({
        "model": "llama-3.1-8b",
        "workload": {"context": 8192, "traffic": {"requests_per_s": 4, "prompt_tokens": 2000, "output_tokens": 200},
                     "slo": {"ttft_s": 2.0, "tpot_s": 0.05}},
        "search": {"gpus": ["l40s"], "serving": ["disaggregated"]}})
    plan = plan_fleet(fleet_problem(scenario, CATALOG), CATALOG, explain=False)
    assert plan.usd_per_hour is None
    assert "disaggregated replicas need a GPU with a node network figure in catalogs/gpus.yaml (b200, h100-sxm, " \
           "h200-sxm)" in plan.unmet[0]


def test_the_cli_refuses_disaggregated_without_traffic_in_one_line(tmp_path):
    (tmp_path / "s.yaml").write_text("model: llama-3.1-8b\nworkload: {context: 8192}\n"
                                     "search: {serving: [disaggregated]}\n")
    refused("solve", "s.yaml", cwd=tmp_path, needle="search.serving: disaggregated sizes prefill and decode pools")
