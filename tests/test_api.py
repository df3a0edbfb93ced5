"""The Python API shown in README: from planner import estimate, solve, load_catalog."""

from pathlib import Path

import pytest

from planner import estimate, load_catalog, solve
from planner.errors import PlannerInputError


def test_estimate_returns_a_dataclass_with_a_per_gpu_frame():
    est = estimate("llama-3.1-8b", precision="fp8", context=32768, tp=2, gpu="l40s")
    assert est.gpu.fits and est.tp == 2
    frame = est.to_frame()
    assert list(frame["rank"]) == [0, 1]
    assert frame["total_bytes"].sum() == est.total_bytes


def test_estimate_by_size_matches_the_seed():
    est = estimate(params="8e9", layers=32, kv_heads=8, head_dim=128, precision="fp16", context=8192)
    assert round(est.total_bytes / 1e9, 1) == 18.8


def test_solve_a_scenario_dict_and_tabulate_it():
    result = solve({"model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 4},
                    "search": {"gpus": ["l4", "l40s"], "precisions": ["bf16"]}})
    assert result.best is not None and result.model_id == "meta-llama/Llama-3.1-8B-Instruct"
    frame = result.to_frame()
    assert frame.iloc[0]["rank"] == "best" and frame.iloc[0]["usd_per_hour"] == result.best.usd_per_hour


def test_solve_a_scenario_file():
    path = Path(__file__).parent.parent / "scenarios" / "8b-budget.yaml"
    assert solve(path).status == "OPTIMAL"


def test_load_catalog_and_errors():
    assert load_catalog().gpus.get("h100").name.startswith("h100")
    with pytest.raises(PlannerInputError):
        estimate("no-such-model")


def test_what_if_compares_the_standard_variants():
    from planner.api import what_if

    rows = what_if({"name": "w", "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 4},
                    "search": {"gpus": ["l4", "l40s", "h100-sxm"], "precisions": ["bf16"]}})
    labels = [r.variant for r in rows]
    assert labels[:4] == ["as written", "concurrency x2", "context 32K", "spot allowed"]
    assert labels[4].startswith("without ")
    base = rows[0].usd_per_hour
    for r in rows[1:]:
        if r.usd_per_hour is not None:
            assert r.change_usd_per_hour == pytest.approx(r.usd_per_hour - base)
    assert rows[2].usd_per_hour >= base  # a longer context never costs less
