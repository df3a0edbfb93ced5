"""Data-parallel attention and expert parallelism in `planner solve`, the plan file and the exports (issue 22):
DeepSeek-V3 on 16 x H100 fits as tp 16 x dp 16 x ep 16 and is exported with SGLang's and vLLM's own flags, parsed
by their argument parsers built from the released sources (SGLang 0.5.23; vLLM 0.34.0's flag names)."""

import ast
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from planner import api
from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings
from planner.estimator.layout import ParallelLayout, expert_layouts
from planner.model.sources import resolve_model
from planner.plan.scenario import load_scenario, parse_scenario
from planner.render.export import export, load_plan
from planner.render.records import solve_json

ROOT = Path(__file__).parents[1]
SCENARIO = ROOT / "scenarios" / "deepseek-v3-dp-ep-h100.yaml"
CATALOG = load_catalog()
# the engines' wheels unpacked (`pip download --no-deps sglang==0.5.23 vllm==0.34.0`, then unzip each into
# src-sglang-0.5.23 / src-vllm-0.34.0 here): the parser tests skip without them (CI checks tests/data/engine-args.yaml)
SOURCES = Path(os.environ.get("PLANNER_ENGINE_SOURCES", "/nonexistent"))
SGLANG_SOURCE = SOURCES / "src-sglang-0.5.23"
VLLM_SOURCE = SOURCES / "src-vllm-0.34.0"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    path.write_text(solve_json(api.solve(load_scenario(SCENARIO), catalog=CATALOG)))
    return path


def test_deepseek_v3_fits_16_h100_with_dp_attention_and_ep(plan_file):
    best = json.loads(plan_file.read_text())["best"]
    assert (best["gpu"], best["tp"], best["pp"], best["dp"], best["ep"], best["all_to_all"]) == \
        ("h100-sxm", 16, 1, 16, 16, None)
    assert (best["context"], best["concurrency"], best["engine"]["name"]) == (32768, 64, "sglang")
    # two 8-GPU nodes: the TP group spans them, attention TP 16 / 16 = 1 stays within one
    assert best["gpus_per_instance"] == 8 and best["gpus_per_replica"] == 16


def test_sglang_default_fraction_reserves_for_dp_attention_and_deepep():
    """memory_hook.py @ v0.5.23 on an H100 (81,559 MiB): 512 + 1.5 x 8,192 + 2 x 32 (graph batch) + 16 GPUs x 128
    + 1,536 (MLA prefill graphs) = 16,448 MiB; DP attention adds 32 x 16 groups x 3 = 1,536 -> 17,984 (above the
    10 GiB floor): (81,559 - 17,984) / 81,559 = 0.779. DeepEP adds 1,024 (prefill graphs) and 2,048 on top of the
    floor: 21,056 -> 0.742."""
    settings = EngineSettings("sglang", max_num_seqs=32)
    common = dict(context=32768, tp=16, dp=16, ep=16, precision="fp8-block", gpu="h100-sxm", catalog=CATALOG)
    plain = api.engine_estimate("deepseek-v3", settings, **common).engine
    deepep = api.engine_estimate("deepseek-v3", settings, all_to_all="deepep", **common).engine
    assert plain.settings.mem_fraction_static == 0.779
    assert deepep.settings.mem_fraction_static == 0.742
    # each of the 16 groups has its own pool: the replica holds 16 x what one rank's pool holds
    assert plain.max_concurrency == pytest.approx(16 * plain.kv_cache_capacity_tokens / 32768)


def test_expert_layouts_of_deepseek_v3_at_tp_16():
    """256 routed experts, 128 heads: at tp 16 over 8-GPU nodes the attention TP 16 / dp must fit a node, so dp is
    2, 4, 8 or 16; SGLang's ep any divisor of 16 (5), vLLM's 1 or 16; DeepEP only at ep 16."""
    arch = resolve_model(CATALOG, "deepseek-v3")
    at_16 = lambda layouts: [l for l in layouts if l.tp == 16]
    assert len(at_16(expert_layouts(arch, 8, 16, "any"))) == 4 * 5
    assert len(at_16(expert_layouts(arch, 8, 16, "full"))) == 4 * 2
    deepep = at_16(expert_layouts(arch, 8, 16, "any", (None, "deepep")))
    assert [l for l in deepep if l.all_to_all] == [ParallelLayout(16, 1, dp, 16, "deepep") for dp in (2, 4, 8, 16)]
    assert ParallelLayout(16, 1, 16, 16, "deepep").name == "tp 16 x dp 16 x ep 16 x pp 1, deepep"


@pytest.mark.parametrize("change, message", [
    ({"layouts": ["tp", "dp_ep"], "layout": 1}, "search.layout: unknown key"),
    ({"layouts": ["ep"]}, "search.layouts.0: Input should be 'tp' or 'dp_ep'"),
    ({"all_to_all": ["deepep"]}, "search: all_to_all: an all-to-all backend carries expert-parallel traffic"),
])
def test_scenario_keys_are_checked(change, message):
    data = {"model": "deepseek-v3", "workload": {"context": "8K"}, "search": change}
    with pytest.raises(PlannerInputError, match=message.replace("(", r"\(")):
        parse_scenario(data)


def test_solve_names_the_best_plan_in_the_other_layout_family():
    """With tp and dp_ep searched, the plan says what the best of the other family costs and runs at (the cheapest
    first: never below the plan)."""
    from planner.render.summary import layout_lines

    data = {"model": "deepseek-v3", "workload": {"context": "8K", "concurrency": 8},
            "search": {"precisions": ["fp8-block"], "gpus": ["h200-sxm"], "layouts": ["tp", "dp_ep"]},
            "engine": {"name": "sglang"}}
    result = api.solve(parse_scenario(data), catalog=CATALOG)
    best, other = result.best, result.layout_alternative
    assert result.layouts_compared and best is not None and other is not None
    family = [(c.dp, c.ep, c.all_to_all) != (1, 1, None) for c in (best.configuration, other.configuration)]
    assert family[0] != family[1] and other.usd_per_hour >= best.usd_per_hour
    [line] = layout_lines(result)
    assert line.startswith("next best with ") and f"${other.usd_per_hour:,.2f}/hour" in line and other.layout in line
    plain = api.solve(parse_scenario({**data, "search": {**data["search"], "layouts": ["tp"]}}), catalog=CATALOG)
    assert not plain.layouts_compared and layout_lines(plain) == []


FLEET = {"name": "dp-ep-fleet", "model": "deepseek-v3",
         "workload": {"context": "16K", "traffic": {"requests_per_s": 4, "prompt_tokens": 2000, "output_tokens": 500},
                      "slo": {"ttft_s": 3, "tpot_s": 0.08}},
         "search": {"precisions": ["fp8-block"], "gpus": ["h100-sxm"], "max_gpus_per_replica": 16,
                    "max_gpus_per_node": 8, "layouts": ["tp", "dp_ep"]},
         "engine": {"name": "sglang", "max_num_seqs": 32}, "pricing": {"market": "on-demand"},
         "solver": {"time_limit_s": 60}}


@pytest.fixture(scope="module")
def dp_fleet():
    return api.plan_fleet(parse_scenario(FLEET), catalog=CATALOG)


def test_a_fleet_sized_by_traffic_runs_dp_attention_and_expert_parallelism(dp_fleet):
    """The fleet's DeepSeek-V3 replica on 16 x H100 is SGLang's DP attention + EP: it spans two 8-GPU instances
    (each attention-TP group of tp / dp GPUs inside one), and its scheduler's pool is every DP group's own pool, each
    the per-rank pool the engine budget sizes (the requests dealt evenly over the groups)."""
    from dataclasses import replace

    from planner.estimator.engines import engine_budget
    from planner.estimator.memory import GpuTarget
    from planner.plan.rental import footprint

    [a] = dp_fleet.assignments
    c = a.config.candidate
    assert (c.tp, c.pp, c.configuration.ep) == (16, 1, 16) and c.configuration.dp > 1
    assert c.node_group == 16 // c.configuration.dp <= 8 and a.pool.offer.gpus == 8
    assert footprint(16, c.node_group, 8) == 16 and footprint(16, 16, 8) is None
    budget = engine_budget(resolve_model(CATALOG, "deepseek-v3"), replace(c.configuration.request(), batch=1),
                           c.configuration.engine, GpuTarget.from_catalog(c.gpu), CATALOG)
    assert a.config.scheduler.pool_tokens == c.configuration.dp * budget.kv_cache_capacity_tokens
    assert a.memory.gpu.fits and dp_fleet.usd_per_hour > 0


def test_the_fleet_names_the_best_layout_of_the_other_family(dp_fleet):
    """The serving configurations keep the layout that takes most on 16 x H100; the plan says what the best TP x PP
    layout of the same GPUs takes at the SLO limit (less: it lost)."""
    from planner.render.summary import layout_comparison_lines

    [a] = dp_fleet.assignments
    [compared] = dp_fleet.layouts
    assert compared.layout == a.config.candidate.configuration.parallel and compared.layout.expert_parallel
    assert compared.other is not None and not compared.other.expert_parallel and compared.other.gpus == 16
    assert compared.capacity_rps == a.config.performance.requests_per_s > compared.other_capacity_rps > 0
    [line] = layout_comparison_lines(dp_fleet)
    assert f"the best TP x PP layout of those GPUs, {compared.other.name}, takes {compared.other_capacity_rps:,.2f}" in line


def test_a_dp_ep_fleet_plan_file_exports_and_replays_its_layout(dp_fleet, tmp_path):
    """The plan file carries the layout and the checkpoint's own precision: the export loads the FP8 checkpoint as it
    ships with SGLang's DP and EP flags, and a simulation of the file runs the replica at its layout."""
    from planner.render.records import fleet_json

    path = tmp_path / "fleet.json"
    path.write_text(fleet_json(dp_fleet, "dp-ep-fleet"))
    [row] = json.loads(path.read_text())["assignments"]
    dp = dp_fleet.assignments[0].config.candidate.configuration.dp
    assert (row["tp"], row["dp"], row["ep"], row["model_precision"]) == (16, dp, 16, "fp8-block")
    script = export(load_plan(path, CATALOG), "sglang")
    assert f"--attn-dp-size {dp} --ep-size 16" in script and "--model-path deepseek-ai/DeepSeek-V3 " in script
    [spec] = api._plan_file_replicas(path, CATALOG)
    assert (spec.dp, spec.ep) == (dp, 16)
    [run] = api.simulate(path, duration_s=60, catalog=CATALOG)
    assert run.result.completed > 0


def test_an_engine_without_the_layouts_is_refused():
    vllm = {"model": "deepseek-v3", "workload": {"context": "8K"}, "search": {"layouts": ["tp", "dp_ep"]}}
    with pytest.raises(PlannerInputError, match="search.layouts: dp_ep: the vllm memory profile does not size"):
        api.solve(parse_scenario(vllm), catalog=CATALOG)


@pytest.mark.parametrize("field, value, message", [
    ("dp", "16", "best.dp: Input should be a valid integer"),
    ("dp", 3, "dp: 3 does not divide --tp 16"),
    ("ep", 0, "best.ep: Input should be greater than or equal to 1"),
    ("ep", 3, "ep: 3 does not divide --tp 16"),
    ("all_to_all", "DeepEP", "best.all_to_all: Input should be None or 'deepep'"),
])
def test_plan_file_layout_is_validated(plan_file, tmp_path, field, value, message):
    data = json.loads(plan_file.read_text())
    data["best"][field] = value
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(data))
    with pytest.raises(PlannerInputError, match=message) as refused:
        load_plan(hostile, CATALOG)
    assert "\n" not in str(refused.value)


def test_sglang_and_vllm_exports_carry_the_layout(plan_file):
    plan = load_plan(plan_file, CATALOG)
    sglang = [line for line in export(plan, "sglang").splitlines() if line.startswith("python3")]
    assert len(sglang) == 2  # one per node
    assert "--tp-size 16 --pp-size 1 --attn-dp-size 16 --ep-size 16 --cuda-graph-max-bs-decode 32" in sglang[0]
    vllm = export(plan, "vllm").splitlines()[-1]
    assert ("--tensor-parallel-size 1 --pipeline-parallel-size 1 --data-parallel-size 16 --enable-expert-parallel"
            in vllm and vllm.endswith("--data-parallel-backend ray"))
    assert "--data-parallel-size 16 --enable-expert-parallel" in export(plan, "kubernetes")


def _commands(text: str, prefix: str) -> list[list[str]]:
    return [shlex.split(line.replace('"$HEAD_IP:5000"', "head:5000"))[len(prefix.split()):]
            for line in text.splitlines() if line.startswith(prefix)]


@pytest.fixture(scope="module")
def sglang_parser():
    """SGLang 0.5.23's own parser (ServerArgs.add_cli_args), its GPU-only imports stubbed."""
    if not SGLANG_SOURCE.is_dir():
        pytest.skip(f"SGLang 0.5.23's source is not unpacked at {SGLANG_SOURCE}")
    pytest.importorskip("msgspec")  # ServerArgs is a msgspec Struct: the parser reads its fields
    pytest.importorskip("pybase64")
    import argparse

    from engine_stubs import StubFinder

    # SGLang's modules and the stubs standing in for its GPU-only imports (some of which share a name with a real
    # package planner uses) leave with the fixture, as does anything its import sets in the environment
    modules, environment = set(sys.modules), dict(os.environ)
    sys.path.insert(0, str(SGLANG_SOURCE))
    finder = StubFinder()
    sys.meta_path.append(finder)
    try:
        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(exit_on_error=False)
        ServerArgs.add_cli_args(parser)
        yield parser
    finally:
        sys.meta_path.remove(finder)
        sys.path.remove(str(SGLANG_SOURCE))
        for name in set(sys.modules) - modules:
            del sys.modules[name]
        os.environ.clear()
        os.environ.update(environment)


@pytest.mark.parametrize("all_to_all", [None, "deepep"])
def test_sglang_parses_the_exported_layout(plan_file, tmp_path, sglang_parser, all_to_all):
    data = json.loads(plan_file.read_text())
    path = tmp_path / "plan.json"
    if all_to_all:  # the layout with DeepEP, whose buffers and reserves leave a pool of 38 sequences: 32 of them
        data["best"].update(all_to_all=all_to_all, concurrency=32)
        data["best"]["engine"]["mem_fraction_static"] = 0.742
    path.write_text(json.dumps(data))
    for argv in _commands(export(load_plan(path, CATALOG), "sglang"), "python3 -m sglang.launch_server"):
        args = sglang_parser.parse_args(argv)
        assert (args.tp_size, args.attn_dp_size, args.ep_size) == (16, 16, 16)
        assert args.moe_a2a_backend == (all_to_all or "none")
        assert (args.nnodes, args.cuda_graph_max_bs_decode) == (2, 32)


def _vllm_flags() -> set[str]:
    """Every flag vLLM 0.34.0's EngineArgs / serve parsers add (add_argument("--name", ...) in the sources)."""
    flags = set()
    for path in (VLLM_SOURCE / "vllm" / "engine" / "arg_utils.py",
                 VLLM_SOURCE / "vllm" / "entrypoints" / "openai" / "cli_args.py"):
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


def test_vllm_knows_every_exported_flag(plan_file):
    if not VLLM_SOURCE.is_dir():
        pytest.skip(f"vLLM 0.34.0's source is not unpacked at {VLLM_SOURCE}")
    known = _vllm_flags()
    [argv] = _commands(export(load_plan(plan_file, CATALOG), "vllm"), "vllm serve")
    exported = {token for token in argv if token.startswith("--")}
    assert {"--data-parallel-size", "--enable-expert-parallel", "--data-parallel-backend"} <= exported
    assert exported - known <= {"--host", "--port"}, exported - known  # the server's own, in its frontend args


def test_the_planning_margin_pools_each_dp_group_for_its_own_requests():
    """Under data-parallel attention a rank caches only its group's requests: the margin's pool per group is the same
    whatever the batch (it was 0 at batch 1, where all but one group held none, and dp times too large at batch >= dp),
    and the replica holds dp of them."""
    from planner.estimator.engines import engine_budget
    from planner.estimator.memory import GpuTarget, Request

    arch, card = resolve_model(CATALOG, "deepseek-v3"), GpuTarget.from_catalog(CATALOG.gpus.get("h200-sxm"))
    budgets = [engine_budget(arch, Request(context=32768, batch=b, tp=8, dp=8, ep=8), EngineSettings("simple"), card,
                             CATALOG) for b in (1, 8, 16)]
    assert len({b.kv_cache_capacity_tokens for b in budgets}) == 1 and budgets[0].kv_cache_capacity_tokens > 0
    assert budgets[0].max_concurrency == pytest.approx(8 * budgets[0].kv_cache_capacity_tokens / 32768)


def test_a_fleet_sized_by_the_margin_searches_dp_ep_layouts():
    """The margin borrows SGLang's batching for DP / EP layouts, which vLLM's profile refuses (the fleet stopped at
    "--engine vllm: its memory profile does not size data-parallel attention")."""
    scenario = parse_scenario({
        "name": "dp-simple", "model": "qwen3-30b-a3b", "engine": {"name": "simple"},
        "workload": {"context": "8K", "concurrency": 32,
                     "traffic": {"requests_per_s": 2, "prompt_tokens": 1000, "output_tokens": 200}},
        "search": {"precisions": ["bf16"], "gpus": ["h100-sxm"], "max_gpus_per_replica": 4, "layouts": ["dp_ep"]}})
    assert api.plan_fleet(scenario, catalog=CATALOG).usd_per_hour > 0
