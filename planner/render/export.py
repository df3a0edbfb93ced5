"""A solved plan (the JSON `planner solve --format json` writes) -> launch commands and deployment files.

Targets: vLLM, SGLang and llama.cpp server commands, a SkyPilot task, a Kubernetes Deployment
(or a LeaderWorkerSet when a replica spans several nodes). Multi-node replicas run as engines
run them today: vLLM on a Ray cluster (head + workers), SGLang with --nnodes/--node-rank.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from math import ceil
from pathlib import Path
from typing import Any

import yaml

from planner.catalog.load import Catalog, Precision
from planner.errors import PlannerInputError
from planner.estimator.engines.vocabulary import engine_kv_dtype
from planner.plan.configuration import Configuration, ConfiguredBy
from planner.plan.planfile import CheckedPlan, load_plan_file

TARGETS = ("vllm", "sglang", "llamacpp", "skypilot", "kubernetes")
VLLM_DEFAULT_UTILIZATION = 0.90  # vLLM's --gpu-memory-utilization default (vllm/config/cache.py)
MAX_UTILIZATION = 0.95  # leave the driver and fragmentation some room
VLLM_IMAGE = {"nvidia": "vllm/vllm-openai:v0.19.0", "amd": "rocm/vllm:latest"}
VLLM_PORT, SGLANG_PORT, LLAMACPP_PORT = 8000, 30000, 8080
# A plan made with the planning margin leaves SGLang's static share this far below vLLM's utilization: room
# for SGLang's own reserve, which the margin does not model (plans made with an engine carry their own share)
SGLANG_STATIC_BELOW_UTILIZATION = 0.05
# SkyPilot's cloud names for the providers in catalogs/prices.yaml it supports (sky check)
SKYPILOT_CLOUDS = {"aws", "gcp", "azure", "lambda", "runpod", "vast", "paperspace", "oci", "nebius"}


@dataclass(frozen=True)
class ExportPlan(ConfiguredBy):
    """One plan as a deployment needs it: the configuration it was checked with, and where it runs."""

    name: str
    configuration: Configuration
    weights: Precision
    vendor: str
    skypilot_accelerator: str | None
    nodes_per_replica: int
    gpus_per_node: int
    replicas: int
    provider: str
    region: str
    market: str
    gpu_memory_utilization: float  # vLLM: the share of each card the plan was checked with
    mem_fraction_static: float  # SGLang: likewise
    checkpoint_precision: str | None  # what the model ships in; no re-quantized checkpoint needed for it

    @property
    def precision(self) -> Precision:  # type: ignore[override]  # the catalog record: its engine flags
        return self.weights

    @property
    def model_id(self) -> str:
        return self.configuration.model_id

    @property
    def gpu(self) -> str:
        return self.configuration.gpu


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


def load_plan(path: str | Path, catalog: Catalog, plan_index: int = 0, assignment: int | None = None) -> ExportPlan:
    """One plan of PLAN.json (planner.plan.planfile: checked and re-checked); `plan_index` 0 is the best plan,
    N the N-th alternative; `assignment` N picks one assignment of a fleet plan."""
    plans = load_plans(path, catalog, plan_index, assignment)
    if len(plans) > 1:
        raise PlannerInputError(f"--assignment: {Path(path).name!r} is a fleet of {len(plans)} assignments; "
                                f"choose one of 0 to {len(plans) - 1}")
    return plans[0]


def load_plans(path: str | Path, catalog: Catalog, plan_index: int = 0,
               assignment: int | None = None) -> tuple[ExportPlan, ...]:
    """The plans of PLAN.json to deploy: one of a single-configuration plan, each assignment of a fleet."""
    return tuple(export_plan(plan, catalog) for plan in load_plan_file(path, catalog, plan_index, assignment))


def export_plan(plan: CheckedPlan, catalog: Catalog) -> ExportPlan:
    """The plan's own engine settings, verbatim. A plan made with the planning margin (engine "simple") has no
    engine share: it gets the share its re-checked fullest GPU needs, at least vLLM's default, at most 0.95."""
    configuration, record, card = plan.configuration, plan.record, plan.card
    fraction = configuration.memory_fraction
    if fraction is None:
        fullest = max(rank.total_bytes for rank in plan.memory.per_gpu)
        fraction = min(MAX_UTILIZATION, max(VLLM_DEFAULT_UTILIZATION, ceil(fullest / card.memory_bytes * 100) / 100))
        static = fraction - SGLANG_STATIC_BELOW_UTILIZATION
    else:
        static = fraction
    gpus = configuration.gpus
    return ExportPlan(
        name=plan.name, configuration=configuration, weights=catalog.precisions.get(configuration.precision),
        vendor=card.vendor, skypilot_accelerator=card.skypilot_accelerator,
        nodes_per_replica=1 if gpus <= record.gpus_per_instance else ceil(gpus / record.gpus_per_instance),
        gpus_per_node=min(record.gpus_per_instance, gpus), replicas=record.replicas, provider=record.provider,
        region=record.region, market=record.market, gpu_memory_utilization=fraction, mem_fraction_static=static,
        checkpoint_precision=plan.checkpoint_precision,
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
            "--kv-cache-dtype", engine_kv_dtype("vllm", plan.kv_dtype),
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
            "--mem-fraction-static", f"{plan.mem_fraction_static:.2f}",
            "--kv-cache-dtype", engine_kv_dtype("sglang", plan.kv_dtype),
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
    cache = plan.configuration.engine.cache_type or engine_kv_dtype("llamacpp", plan.kv_dtype)
    if cache is None:
        raise PlannerInputError(f"--to llamacpp: no llama.cpp cache type for KV {plan.kv_dtype}")
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


def export_all(plans: tuple[ExportPlan, ...], target: str) -> str:
    """One launch per plan: commands one after the other, Kubernetes documents separated by `---`. A SkyPilot task
    file holds one task, so a fleet of several assignments exports one at a time (--assignment N)."""
    if len(plans) == 1:
        return export(plans[0], target)
    if target == "skypilot":
        raise PlannerInputError(f"--assignment: a SkyPilot task file holds one task and this fleet has {len(plans)} "
                                f"assignments; export each with --assignment 0 to {len(plans) - 1}")
    if target == "kubernetes":
        return "---\n".join(export(plan, target) for plan in plans)
    return "\n".join(f"# assignment {i}: {plan.name}, {plan.replicas} replica(s)\n" + export(plan, target)
                     for i, plan in enumerate(plans))
