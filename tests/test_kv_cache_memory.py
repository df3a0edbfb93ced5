"""vLLM's KV pool sized by --kv-cache-memory-bytes: the figure vLLM logs "to fully utilize gpu memory", taken by
a scenario's engine.kv_cache_memory (auto: only where gpu_memory_utilization's budget cannot hold one request of
max_model_len), carried by the plan and exported verbatim."""

import json

import pytest

from planner import api
from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.memory import GpuTarget, Request
from planner.model.architecture import Architecture
from planner.model.sources import resolve_model
from planner.render.export import export, load_plans
from planner.render.records import fleet_json
from planner.units import MiB

CATALOG = load_catalog()
GH200 = GpuTarget.from_catalog(CATALOG.gpus.get("gh200"))
LONG = 131_072  # one request of this does not fit gpu_memory_utilization 0.9's pool for 70B fp8 on a GH200
FLEET = {
    "name": "chat", "model": "llama-3.3-70b",
    "workload": {"context": 8192, "concurrency": 64,
                 "traffic": {"requests_per_s": 3, "prompt_tokens": 1500, "output_tokens": 400},
                 "slo": {"ttft_s": 2.0, "tpot_s": 0.05}, "utilisation": 0.7, "redundancy": 1},
    "search": {"precisions": ["bf16", "fp8"], "kv_dtypes": ["auto", "fp8"]},
    "pricing": {"providers": ["aws", "gcp", "azure", "lambda", "runpod", "coreweave", "nebius", "crusoe"]},
    "fleet": {"quotas": [{"provider": "aws", "max_gpus": 16}]},
    # vLLM 0.19.0: --kv-cache-memory-bytes in place of the utilization's budget (0.34's extensible KV cache takes the
    # free memory itself, and kv_cache_memory pins nothing there)
    "engine": {"name": "vllm", "version": "0.19.0"},
}


def _arch() -> Architecture:
    return resolve_model(CATALOG, "llama-3.3-70b")


def _budget(context: int, **settings):
    request = Request(context=context, batch=1, precision="fp8", kv_dtype="fp8")
    return engine_budget(_arch(), request, EngineSettings("vllm", version="0.19.0", **settings), GH200, CATALOG)


def test_full_is_vllms_own_figure_from_the_budgets_parts():
    """compile_or_warm_up_model: free memory at start-up - (weights + activation peak + non-torch + CUDA graphs)
    - 150 MiB, with the free memory what CUDA reports less the CUDA context (one GPU: no NCCL)."""
    profiles = load_profiles()
    util = _budget(8192)
    full = _budget(8192, kv_cache_memory="full")
    free = profiles.cuda.visible_bytes(GH200.memory_bytes) - profiles.cuda.context_mib.value * MiB
    expected = (free - util.weights_bytes - util.activation_bytes - util.non_torch_bytes - util.cuda_graph_bytes
                - 150 * MiB)
    assert full.settings.kv_cache_memory_bytes == full.kv_pool_bytes == expected
    assert full.kv_pool_bytes > util.kv_pool_bytes  # the 10% gpu_memory_utilization 0.9 keeps back, less graphs
    assert full.gpu_memory_utilization is None and full.budget_bytes == (
        util.weights_bytes + util.activation_bytes + util.non_torch_bytes + expected)
    assert full.kv_cache_capacity_tokens > util.kv_cache_capacity_tokens
    assert not any("CUDA graphs" in w for w in full.warnings)  # the figure leaves room to capture them


def test_auto_takes_the_full_figure_only_where_one_request_does_not_fit():
    short = _budget(8192, kv_cache_memory="auto")
    assert short.settings.kv_cache_memory_bytes is None and short.gpu_memory_utilization == 0.9
    plain = _budget(LONG)
    assert not plain.fits and "max seq len (131072)" in plain.message
    assert any("--kv-cache-memory-bytes" in w for w in plain.warnings)  # the estimate names the way out
    auto = _budget(LONG, kv_cache_memory="auto")
    assert auto.fits and auto.settings.kv_cache_memory_bytes == _budget(LONG, kv_cache_memory="full").kv_pool_bytes
    assert any("short of one request of max_model_len 131,072" in w for w in auto.warnings)
    # a gpu_memory_utilization the user chose is kept: vLLM then refuses the context as it would
    chosen = _budget(LONG, kv_cache_memory="auto", gpu_memory_utilization=0.9)
    assert not chosen.fits and chosen.settings.kv_cache_memory_bytes is None


def test_a_given_kv_cache_memory_past_the_free_memory_runs_out_at_start_up():
    full = _budget(LONG, kv_cache_memory="full").kv_pool_bytes
    assert _budget(LONG, kv_cache_memory_bytes=full).fits
    over = _budget(LONG, kv_cache_memory_bytes=full + 200 * MiB)  # more than the 150 MiB margin
    assert not over.fits and over.message.startswith("CUDA out of memory at start-up")
    assert str(full) in over.message
    with pytest.raises(PlannerInputError, match="--kv-cache-memory-bytes"):
        EngineSettings("vllm", version="0.19.0", kv_cache_memory_bytes=0).validate()
    with pytest.raises(PlannerInputError, match="kv_cache_memory"):
        EngineSettings("vllm", version="0.19.0", kv_cache_memory="most").validate()


def _fleet_cost(context: int, **engine) -> float:
    scenario = {**FLEET, "workload": {**FLEET["workload"], "context": context}, "engine": {"name": "vllm", "version": "0.19.0", **engine}}
    plan = api.plan_fleet(scenario, catalog=CATALOG)
    assert plan.usd_per_hour is not None
    return plan.usd_per_hour


def test_a_long_max_model_len_costs_the_fleet_little_when_one_request_fits():
    """Issue 10: the same traffic at context 128K costs at most 15% more than at 8K."""
    short, long = _fleet_cost(8192), _fleet_cost(LONG)
    assert long <= 1.15 * short
    # with the budget alone, the cheapest card cannot start at 128K and the fleet costs more
    assert _fleet_cost(LONG, kv_cache_memory="utilization") > 1.15 * short


def test_the_fleet_plan_carries_the_figure_and_export_passes_it_verbatim(tmp_path):
    scenario = {**FLEET, "workload": {**FLEET["workload"], "context": LONG}}
    plan = api.plan_fleet(scenario, catalog=CATALOG)
    path = tmp_path / "fleet.json"
    path.write_text(fleet_json(plan, "chat"))
    rows = json.loads(path.read_text())["assignments"]
    pinned = [row for row in rows if row["engine"]["kv_cache_memory_bytes"] is not None]
    assert pinned and all(row["engine"]["kv_cache_memory"] == "auto" for row in rows)
    for exported, row in zip(load_plans(path, CATALOG), rows):
        argv = export(exported, "vllm").split("vllm serve ", 1)[1].split()
        value = row["engine"]["kv_cache_memory_bytes"]
        assert (argv[argv.index("--kv-cache-memory-bytes") + 1] == str(value)) if value else (
            "--kv-cache-memory-bytes" not in argv)
        assert "--enforce-eager" not in argv  # the figure leaves vLLM's room for CUDA graphs


def test_estimate_takes_the_exported_flag(tmp_path):
    """`planner estimate --kv-cache-memory-bytes N` sizes the pool an exported launch command asks for."""
    import subprocess
    import sys

    full = _budget(LONG, kv_cache_memory="full").kv_pool_bytes
    args = [sys.executable, "-m", "planner.cli", "estimate", "llama-3.3-70b", "--engine", "vllm", "--gpu", "gh200",
            "--precision", "fp8", "--kv-dtype", "fp8", "--context", "128K", "--format", "json"]
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(args + ["--kv-cache-memory-bytes", str(full)], cwd=tmp_path, capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    engine = json.loads(proc.stdout)["engine"]
    assert engine["kv_pool_bytes"] == full and engine["fits"] is True
    bad = subprocess.run(args + ["--kv-cache-memory-bytes", "0"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--kv-cache-memory-bytes" in bad.stderr
