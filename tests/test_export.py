"""planner export: what comes out parses, and every flag is one the engine documents."""

import json
import shlex
from pathlib import Path

import pytest
import yaml

from planner import solve
from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.render.export import export, load_plan
from planner.render.records import solve_json

DATA = Path(__file__).parent / "data"
ENGINE_ARGS = yaml.safe_load((DATA / "engine-args.yaml").read_text())
CATALOG = load_catalog()


def write_plan(tmp_path, scenario: dict) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(solve_json(solve(scenario)))
    return path


@pytest.fixture(scope="module")
def single_node(tmp_path_factory):
    return write_plan(tmp_path_factory.mktemp("p"), {
        "name": "chat 8b", "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 16, "replicas": 3},
        "search": {"gpus": ["l40s", "h100-sxm", "rtx-4090"], "precisions": ["bf16", "fp8"], "kv_dtypes": ["fp8"]}})


@pytest.fixture(scope="module")
def multi_node(tmp_path_factory):
    return write_plan(tmp_path_factory.mktemp("p"), {
        "name": "ds", "model": "deepseek-v3", "workload": {"context": 32768, "concurrency": 32},
        "search": {"gpus": ["h200-sxm"], "precisions": ["fp8-block"], "max_gpus_per_replica": 32}})


def flags_and_values(argv: list[str]) -> dict[str, str]:
    pairs = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            pairs[token] = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
    return pairs


def command_lines(text: str, program: str) -> list[list[str]]:
    return [shlex.split(line)[len(program.split()):] for line in text.splitlines() if line.startswith(program)]


def test_vllm_command_uses_documented_flags_and_the_plan(single_node):
    plan = load_plan(single_node, CATALOG)
    [argv] = command_lines(export(plan, "vllm"), "vllm serve")
    flags = flags_and_values(argv)
    assert argv[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert set(flags) <= set(ENGINE_ARGS["vllm"]["value_flags"])
    assert flags["--tensor-parallel-size"] == str(plan.tp) and flags["--max-model-len"] == "8192"
    assert flags["--max-num-seqs"] == "16" and flags["--kv-cache-dtype"] in ENGINE_ARGS["vllm"]["kv_cache_dtype"]
    assert 0.5 < float(flags["--gpu-memory-utilization"]) <= 0.95
    if "--quantization" in flags:
        assert flags["--quantization"] in ENGINE_ARGS["vllm"]["quantization"]


def test_sglang_command(single_node):
    [argv] = command_lines(export(load_plan(single_node, CATALOG), "sglang"), "python3 -m sglang.launch_server")
    flags = flags_and_values(argv)
    assert set(flags) <= set(ENGINE_ARGS["sglang"]["value_flags"])
    assert flags["--kv-cache-dtype"] in ENGINE_ARGS["sglang"]["kv_cache_dtype"]


def test_llamacpp_needs_a_gguf_precision(single_node, tmp_path):
    plan = load_plan(single_node, CATALOG)
    if plan.precision.gguf_type is None:
        with pytest.raises(PlannerInputError, match="GGUF"):
            export(plan, "llamacpp")
    path = write_plan(tmp_path, {"model": "llama-3.1-8b", "workload": {"context": 4096, "concurrency": 4},
                                 "search": {"gpus": ["rtx-4090"], "precisions": ["q4_k_m"], "allow_emulated": True}})
    [argv] = command_lines(export(load_plan(path, CATALOG), "llamacpp"), "llama-server")
    flags = flags_and_values(argv)
    assert set(flags) <= set(ENGINE_ARGS["llamacpp"]["value_flags"])
    assert flags["--ctx-size"] == str(4096 * 4) and flags["--parallel"] == "4"
    assert flags["--cache-type-k"] in ENGINE_ARGS["llamacpp"]["cache_types"]


def test_skypilot_task_loads_and_requests_the_plans_gpus(single_node):
    plan = load_plan(single_node, CATALOG)
    task = yaml.safe_load(export(plan, "skypilot"))
    accelerator, count = task["resources"]["accelerators"].split(":")
    assert accelerator == CATALOG.gpus.get(plan.gpu).skypilot_accelerator and int(count) == plan.gpus_per_replica
    assert task["num_nodes"] == 1 and task["run"].startswith("vllm serve")


def test_kubernetes_deployment(single_node):
    plan = load_plan(single_node, CATALOG)
    doc = yaml.safe_load(export(plan, "kubernetes"))
    assert doc["kind"] == "Deployment" and doc["spec"]["replicas"] == 3
    container = doc["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == plan.gpus_per_replica
    assert container["command"][:2] == ["vllm", "serve"]
    assert set(flags_and_values(container["command"][2:])) <= set(ENGINE_ARGS["vllm"]["value_flags"])


def test_multi_node_exports_ray_and_leader_worker_set(multi_node):
    plan = load_plan(multi_node, CATALOG)
    assert plan.nodes_per_replica > 1
    vllm = export(plan, "vllm")
    assert "ray start --head" in vllm and "--distributed-executor-backend ray" in vllm
    assert "needs a checkpoint" not in vllm  # DeepSeek-V3 ships in fp8-block
    task = yaml.safe_load(export(plan, "skypilot"))
    assert task["num_nodes"] == plan.nodes_per_replica and "SKYPILOT_NODE_RANK" in task["run"]
    lws = yaml.safe_load(export(plan, "kubernetes"))
    assert lws["kind"] == "LeaderWorkerSet"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == plan.nodes_per_replica
    sglang = export(plan, "sglang")
    assert sglang.count("--node-rank") == plan.nodes_per_replica


def test_plan_index_and_bad_files(single_node, tmp_path):
    data = json.loads(single_node.read_text())
    assert load_plan(single_node, CATALOG, 1).gpu == data["alternatives"][0]["gpu"]
    with pytest.raises(PlannerInputError, match="--plan"):
        load_plan(single_node, CATALOG, 99)
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(PlannerInputError, match="not a `planner solve --format json` output"):
        load_plan(bad, CATALOG)
    with pytest.raises(PlannerInputError, match="cannot read"):
        load_plan(tmp_path / "missing.json", CATALOG)
