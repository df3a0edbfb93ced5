"""TPU plans are refused for export with one line (issue 24, item 7): vLLM serves TPUs only through its tpu-inference
plugin (vllm-tpu, image vllm/vllm-tpu), versioned apart from the vLLM builds planner's plans and exports follow, so a
CUDA image and nvidia.com/gpu limits (what a Kubernetes export wrote for a TPU plan before) would not run."""

import json
import subprocess
import sys

import pytest
import yaml

from planner.render.export import TARGETS

SCENARIO = {"name": "small", "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 8},
            "search": {"gpus": ["a100-40gb"], "precisions": ["bf16"]}, "engine": {"name": "simple"},
            "pricing": {"providers": ["gcp"]}}


def run(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tpu")
    (folder / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    assert run("solve", "s.yaml", "--format", "json", "-o", "gpu.json", cwd=folder).returncode == 0
    plan = json.loads((folder / "gpu.json").read_text())
    plan["best"]["gpu"], plan["alternatives"] = "tpu-v6e", []  # the same plan on a v6e chip, as a plan file says it
    (folder / "tpu.json").write_text(json.dumps(plan))
    return folder


@pytest.mark.parametrize("target", TARGETS)
def test_a_tpu_plan_is_refused_for_every_target_in_one_line(plans, target):
    proc = run("export", "tpu.json", "--to", target, cwd=plans)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: --to {target}: tpu-v6e is a Google TPU, which vLLM serves only through its "
                                  "TPU plugin (tpu-inference: the vllm-tpu package, image vllm/vllm-tpu)")
    assert proc.stderr.endswith("run vllm-tpu by hand, requesting google.com/tpu chips\n")
    assert proc.stderr.count("\n") == 1


def test_the_same_plan_on_its_gpu_still_exports(plans):
    proc = run("export", "gpu.json", "--to", "kubernetes", cwd=plans)
    assert proc.returncode == 0, proc.stderr
    assert "nvidia.com/gpu: 1" in proc.stdout and "image: vllm/vllm-openai:v0.34.0" in proc.stdout
