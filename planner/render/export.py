"""A solved plan (the JSON `planner solve --format json` writes) -> launch commands and deployment files.

Targets: vLLM, SGLang and llama.cpp server commands, a SkyPilot task, a Kubernetes Deployment
(or a LeaderWorkerSet when a replica spans several nodes). Multi-node replicas run as engines
run them today: vLLM on a Ray cluster (head + workers), SGLang with --nnodes/--node-rank.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from math import ceil
from pathlib import Path
from typing import Any

import yaml

from planner.catalog.load import Catalog, Precision
from planner.errors import PlannerInputError
from planner.files import PLAN, read_bytes

TARGETS = ("vllm", "sglang", "llamacpp", "skypilot", "kubernetes")
VLLM_DEFAULT_UTILIZATION = 0.90  # vLLM's --gpu-memory-utilization default (vllm/config/cache.py)
MAX_UTILIZATION = 0.95  # leave the driver and fragmentation some room
VLLM_IMAGE = {"nvidia": "vllm/vllm-openai:v0.19.0", "amd": "rocm/vllm:latest"}
VLLM_PORT, SGLANG_PORT, LLAMACPP_PORT = 8000, 30000, 8080
SGLANG_KV_DTYPES = {"fp8": "fp8_e4m3"}  # SGLang names the fp8 flavour (server_args.py --kv-cache-dtype)
# SkyPilot's cloud names for the providers in catalogs/prices.yaml it supports (sky check)
SKYPILOT_CLOUDS = {"aws", "gcp", "azure", "lambda", "runpod", "vast", "paperspace", "oci", "nebius"}
LLAMACPP_KV_TYPES = {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp8": "q8_0"}  # llama.cpp --cache-type-k/v


@dataclass(frozen=True)
class ExportPlan:
    """The fields of one plan that a deployment needs."""

    name: str
    model_id: str
    gpu: str
    vendor: str
    skypilot_accelerator: str | None
    gpus_per_replica: int
    tp: int
    pp: int
    nodes_per_replica: int
    gpus_per_node: int
    replicas: int
    precision: Precision
    kv_dtype: str
    context: int
    concurrency: int
    provider: str
    region: str
    market: str
    gpu_memory_utilization: float
    checkpoint_precision: str | None  # what the model ships in; no re-quantized checkpoint needed for it


class _Dumper(yaml.SafeDumper):
    """Block-style multi-line strings (readable `run:` scripts) and no &anchors for repeated objects."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def _dump(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120)


def load_plan(path: str | Path, catalog: Catalog, plan_index: int = 0) -> ExportPlan:
    """Read PLAN.json; `plan_index` 0 is the best plan, N the N-th alternative."""
    p = Path(path)
    try:
        data = json.loads(read_bytes(p, PLAN))
    except OSError as exc:
        raise PlannerInputError(f"plan: cannot read {str(p)!r} ({exc.strerror}); write one with "
                                "`planner solve SCENARIO --format json -o PLAN.json`") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise PlannerInputError(f"plan: {p.name} is not JSON; write it with `planner solve SCENARIO --format json -o PLAN.json`") from None
    if not isinstance(data, dict) or "best" not in data or "alternatives" not in data:
        raise PlannerInputError(f"plan: {p.name} is not a `planner solve --format json` output (no 'best'/'alternatives')")
    options = ([data["best"]] if data["best"] else []) + list(data["alternatives"])
    if not options:
        raise PlannerInputError(f"plan: {p.name} holds no plan (the scenario was infeasible)")
    if not 0 <= plan_index < len(options):
        raise PlannerInputError(f"--plan: {plan_index} is out of range; {p.name} has plans 0 (best) to {len(options) - 1}")
    try:
        return _export_plan(data, options[plan_index], catalog)
    except (KeyError, TypeError) as exc:
        raise PlannerInputError(f"plan: {p.name} lacks {exc}; re-run `planner solve` to write a complete plan") from None


def _export_plan(data: dict[str, Any], option: dict[str, Any], catalog: Catalog) -> ExportPlan:
    gpu = catalog.gpus.get(option["gpu"])
    memory = option["memory"]
    fullest = max(rank["total_bytes"] for rank in memory["per_gpu"])
    needed = ceil(fullest / gpu.memory_bytes * 100) / 100
    return ExportPlan(
        name=str(data.get("scenario") or "planner"), model_id=data["model_id"], gpu=gpu.name, vendor=gpu.vendor,
        skypilot_accelerator=gpu.skypilot_accelerator, gpus_per_replica=option["gpus_per_replica"],
        tp=option["tp"], pp=option["pp"], nodes_per_replica=option["nodes_per_replica"],
        gpus_per_node=min(option["gpus_per_instance"], option["gpus_per_replica"]),
        replicas=option["replicas"], precision=catalog.precisions.get(option["precision"]),
        kv_dtype=option["kv_dtype"], context=option["context"], concurrency=option["concurrency"],
        provider=option["provider"], region=option["region"], market=option["market"],
        gpu_memory_utilization=min(MAX_UTILIZATION, max(VLLM_DEFAULT_UTILIZATION, needed)),
        checkpoint_precision=data.get("model_precision"),
    )


# --------------------------------------------------------------------------------------------
# Engine commands


def _checkpoint_note(plan: ExportPlan) -> list[str]:
    if not plan.precision.checkpoint or plan.precision.name == plan.checkpoint_precision:
        return []
    return [f"# {plan.precision.name} needs a checkpoint already quantized that way: point the model at a "
            f"{plan.precision.name} build of {plan.model_id} (or quantize it first)"]


def vllm_args(plan: ExportPlan) -> list[str]:
    if plan.precision.vllm_flag is None:
        raise PlannerInputError(f"--to vllm: vLLM does not serve {plan.precision.name}; export to llamacpp or re-solve with another precision")
    args = [plan.model_id, "--tensor-parallel-size", str(plan.tp), "--pipeline-parallel-size", str(plan.pp),
            "--max-model-len", str(plan.context), "--max-num-seqs", str(plan.concurrency),
            "--gpu-memory-utilization", f"{plan.gpu_memory_utilization:.2f}",
            "--kv-cache-dtype", "fp8" if plan.kv_dtype == "fp8" else "auto",
            "--host", "0.0.0.0", "--port", str(VLLM_PORT)]
    args += plan.precision.vllm_flag.split()
    if plan.nodes_per_replica > 1:
        args += ["--distributed-executor-backend", "ray"]
    return args


def vllm_command(plan: ExportPlan) -> str:
    lines = _checkpoint_note(plan)
    serve = "vllm serve " + shlex.join(vllm_args(plan))
    if plan.nodes_per_replica > 1:
        lines += [f"# {plan.nodes_per_replica} nodes of {plan.gpus_per_node} GPUs per replica: a Ray cluster, then serve from the head",
                  "# on the head node:", f"ray start --head --port=6379 --num-gpus={plan.gpus_per_node}",
                  f"# on each of the {plan.nodes_per_replica - 1} worker nodes:",
                  f"ray start --address=$HEAD_IP:6379 --num-gpus={plan.gpus_per_node}", "# then on the head node:"]
    return "\n".join(lines + [serve]) + "\n"


def sglang_args(plan: ExportPlan, node_rank: int | None = None) -> list[str]:
    if plan.precision.sglang_flag is None:
        raise PlannerInputError(f"--to sglang: SGLang does not serve {plan.precision.name}; export to llamacpp or re-solve with another precision")
    args = ["--model-path", plan.model_id, "--tp-size", str(plan.tp), "--pp-size", str(plan.pp),
            "--context-length", str(plan.context), "--max-running-requests", str(plan.concurrency),
            "--mem-fraction-static", f"{plan.gpu_memory_utilization - 0.05:.2f}",
            "--kv-cache-dtype", SGLANG_KV_DTYPES.get(plan.kv_dtype, "auto"),
            "--host", "0.0.0.0", "--port", str(SGLANG_PORT)]
    args += plan.precision.sglang_flag.split()
    if plan.nodes_per_replica > 1:
        args += ["--nnodes", str(plan.nodes_per_replica), "--node-rank", str(node_rank or 0),
                 "--dist-init-addr", "$HEAD_IP:5000"]
    return args


def sglang_command(plan: ExportPlan) -> str:
    lines = _checkpoint_note(plan)
    if plan.nodes_per_replica > 1:
        lines.append(f"# one command per node; node 0 is the head ($HEAD_IP), nodes 1..{plan.nodes_per_replica - 1} join it")
        for rank in range(plan.nodes_per_replica):
            lines.append("python3 -m sglang.launch_server " + shlex.join(sglang_args(plan, rank)).replace("'$HEAD_IP:5000'", "$HEAD_IP:5000"))
    else:
        lines.append("python3 -m sglang.launch_server " + shlex.join(sglang_args(plan)))
    return "\n".join(lines) + "\n"


def llamacpp_args(plan: ExportPlan) -> list[str]:
    if plan.precision.gguf_type is None:
        raise PlannerInputError(f"--to llamacpp: llama.cpp runs GGUF files; {plan.precision.name} has no GGUF type "
                                "(re-solve with bf16/fp16 or a GGUF precision such as q4_k_m)")
    if plan.nodes_per_replica > 1:
        raise PlannerInputError("--to llamacpp: this plan spans several nodes; llama.cpp serves from one machine")
    if plan.kv_dtype not in LLAMACPP_KV_TYPES:
        raise PlannerInputError(f"--to llamacpp: no llama.cpp cache type for KV {plan.kv_dtype}")
    cache = LLAMACPP_KV_TYPES[plan.kv_dtype]
    # llama-server's --ctx-size is shared by its --parallel slots: each slot gets ctx-size / parallel
    args = ["--model", f"{plan.model_id.split('/')[-1]}-{plan.precision.gguf_type}.gguf",
            "--ctx-size", str(plan.context * plan.concurrency), "--parallel", str(plan.concurrency),
            "--n-gpu-layers", "999", "--cache-type-k", cache, "--cache-type-v", cache,
            "--host", "0.0.0.0", "--port", str(LLAMACPP_PORT)]
    if plan.gpus_per_replica > 1:
        args += ["--split-mode", "layer", "--tensor-split", ",".join(["1"] * plan.gpus_per_replica)]
    return args


def llamacpp_command(plan: ExportPlan) -> str:
    return (f"# the GGUF file: convert {plan.model_id} with llama.cpp's convert_hf_to_gguf.py and llama-quantize "
            f"to {plan.precision.gguf_type}, or download a published {plan.precision.gguf_type} GGUF\n"
            "llama-server " + shlex.join(llamacpp_args(plan)) + "\n")


# --------------------------------------------------------------------------------------------
# SkyPilot and Kubernetes


def skypilot_task(plan: ExportPlan) -> str:
    if plan.skypilot_accelerator is None:
        raise PlannerInputError(f"--to skypilot: no SkyPilot accelerator name is known for {plan.gpu} "
                                "(add skypilot_accelerator to its catalogs/gpus.yaml entry)")
    resources: dict[str, Any] = {"accelerators": f"{plan.skypilot_accelerator}:{plan.gpus_per_node}",
                                 "use_spot": plan.market == "spot", "ports": VLLM_PORT}
    if plan.provider in SKYPILOT_CLOUDS:
        resources["cloud"] = plan.provider
        if re.fullmatch(r"[a-z0-9-]+", plan.region) and plan.region not in ("all", "unspecified"):
            resources["region"] = plan.region  # a cloud region id, not a marketplace location
    serve = "vllm serve " + shlex.join(vllm_args(plan))
    if plan.nodes_per_replica > 1:
        run = ("if [ \"$SKYPILOT_NODE_RANK\" = \"0\" ]; then\n"
               f"  ray start --head --port=6379 --num-gpus={plan.gpus_per_node}\n"
               f"  until [ \"$(ray status | grep -c node_)\" -ge {plan.nodes_per_replica} ]; do sleep 5; done\n"
               f"  {serve}\nelse\n"
               "  HEAD_IP=$(echo \"$SKYPILOT_NODE_IPS\" | head -n1)\n"
               f"  ray start --address=$HEAD_IP:6379 --num-gpus={plan.gpus_per_node} --block\nfi\n")
    else:
        run = serve + "\n"
    task: dict[str, Any] = {"name": _slug(plan.name), "resources": resources, "num_nodes": plan.nodes_per_replica,
                            "setup": "pip install vllm", "run": run}
    header = (f"# SkyPilot task for one replica of {plan.model_id} ({plan.replicas} in the plan: launch it "
              f"{plan.replicas} times, or use `sky serve` with replicas: {plan.replicas})\n")
    notes = "".join(line + "\n" for line in _checkpoint_note(plan))
    return header + notes + _dump(task)


def kubernetes_manifest(plan: ExportPlan) -> str:
    name = _slug(plan.name)
    resource = "amd.com/gpu" if plan.vendor == "amd" else "nvidia.com/gpu"
    image = VLLM_IMAGE.get(plan.vendor, VLLM_IMAGE["nvidia"])
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    labels = {"app": name}

    def container(role: str, command: list[str]) -> dict[str, Any]:
        return {"name": role, "image": image, "command": command,
                "ports": [{"containerPort": VLLM_PORT}] if role in ("vllm", "leader") else [],
                "resources": {"limits": {resource: plan.gpus_per_node}},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}

    if plan.nodes_per_replica == 1:
        doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
               "spec": {"replicas": plan.replicas, "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"containers": [container("vllm", ["vllm", "serve", *vllm_args(plan)])],
                                              "volumes": [shm]}}}}
    else:
        serve = "vllm serve " + shlex.join(vllm_args(plan))
        leader = ["sh", "-c", f"ray start --head --port=6379 --num-gpus={plan.gpus_per_node} && {serve}"]
        worker = ["sh", "-c", f"ray start --address=$LWS_LEADER_ADDRESS:6379 --num-gpus={plan.gpus_per_node} --block"]
        doc = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
               "metadata": {"name": name, "labels": labels},
               "spec": {"replicas": plan.replicas, "leaderWorkerTemplate": {
                   "size": plan.nodes_per_replica,
                   "leaderTemplate": {"metadata": {"labels": {**labels, "role": "leader"}},
                                      "spec": {"containers": [container("leader", leader)], "volumes": [shm]}},
                   "workerTemplate": {"spec": {"containers": [container("worker", worker)], "volumes": [shm]}}}}}
    notes = "".join(line + "\n" for line in _checkpoint_note(plan))
    return notes + _dump(doc)


def _slug(text: str) -> str:
    slug = "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")
    return slug[:63] or "planner"


def export(plan: ExportPlan, target: str) -> str:
    renderers = {"vllm": vllm_command, "sglang": sglang_command, "llamacpp": llamacpp_command,
                 "skypilot": skypilot_task, "kubernetes": kubernetes_manifest}
    if target not in renderers:
        raise PlannerInputError(f"--to: unknown target {target!r}; use one of {', '.join(TARGETS)}")
    return renderers[target](plan)
