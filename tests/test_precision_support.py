"""Precision support as the engines run it (issue 24, item 6): catalogs/precision_support.yaml decides, per engine and
GPU generation, whether a weight precision runs natively, with weight-only kernels, or not at all."""

import shutil

import pytest

from planner.catalog.load import catalog_dir, load_catalog
from planner.errors import PlannerInputError
from planner.estimator.performance import replica_timer
from planner.model.sources import resolve_model
from planner.plan.scenario import parse_scenario
from planner.plan.solver import solve_scenario

CATALOG = load_catalog()


def test_gpt_oss_120b_plans_on_h100_with_vllm():
    """vLLM runs gpt-oss's MXFP4 experts on Hopper with W4A16 kernels (OAI Triton MoE, Marlin): planned by default."""
    result = solve_scenario(parse_scenario({"model": "gpt-oss-120b", "workload": {"context": 8192},
                                            "search": {"gpus": ["h100-sxm"], "precisions": ["mxfp4"]},
                                            "engine": {"name": "vllm"}}), CATALOG)
    assert result.best is not None and result.best.gpu == "h100-sxm" and result.best.precision == "mxfp4"


def test_a_format_the_engine_cannot_run_is_refused_with_its_source():
    """vLLM v0.34.0 has no GGUF method: a GGUF precision is refused, naming the engine's file that says so."""
    result = solve_scenario(parse_scenario({"model": "llama-3.1-8b", "workload": {"context": 8192},
                                            "search": {"gpus": ["h100-sxm"], "precisions": ["q4_k_m"]},
                                            "engine": {"name": "vllm"}}), CATALOG)
    assert result.best is None
    reason = " ".join(result.skipped)
    assert "vllm v0.34.0 cannot run q4_k_m on hopper" in reason
    assert "vllm/model_executor/layers/quantization/__init__.py@v0.34.0" in reason


def test_weight_only_formats_are_left_out_only_when_the_scenario_says_so():
    data = {"model": "llama-3.1-8b", "workload": {"context": 8192},
            "search": {"gpus": ["a100-sxm-80gb"], "precisions": ["fp8"]}, "engine": {"name": "vllm"}}
    assert solve_scenario(parse_scenario(data), CATALOG).best.precision == "fp8"  # Marlin FP8 (W8A16)
    data["search"]["allow_emulated"] = False
    result = solve_scenario(parse_scenario(data), CATALOG)
    assert result.best is None and "runs fp8 on ampere only with weight-only kernels" in " ".join(result.skipped)


@pytest.mark.parametrize("engine, precision, gpu, level", [
    ("vllm", "mxfp4", "h100-sxm", "weight-only"),  # gpt-oss: BF16-activation backends everywhere
    ("vllm", "mxfp4", "b200", "weight-only"),  # FLASHINFER_TRTLLM_MXFP4_BF16 first on SM100
    ("vllm", "mxfp4", "mi300x", "weight-only"),  # AITER W4A16 on gfx942
    ("vllm", "mxfp4", "v100-32gb", "unsupported"),  # Mxfp4Config min capability 80
    ("vllm", "nvfp4", "b200", "native"),
    ("vllm", "nvfp4", "h100-sxm", "weight-only"),  # Marlin NVFP4
    ("vllm", "nvfp4", "mi300x", "unsupported"),  # ROCm: emulation only
    ("vllm", "fp8", "a100-sxm-80gb", "weight-only"),  # Marlin FP8
    ("sglang", "fp8", "t4", "unsupported"),  # SGLang Fp8Config min capability 80
    ("simple", "bf16", "t4", "unsupported"),  # the planning margin is checked as vLLM
    ("llamacpp", "q4_k_m", "rtx-4090", "unchecked"),
    ("trtllm", "fp8", "l40s", "native"),  # FP8 from Ada (TensorRT-LLM's support matrix)
    ("trtllm", "fp8", "a100-sxm-80gb", "unsupported"),  # no FP8 on Ampere
    ("trtllm", "fp8-block", "h100-sxm", "native"),
    ("trtllm", "nvfp4", "b200", "native"),
    ("trtllm", "nvfp4", "h100-sxm", "unsupported"),  # FP4 on Blackwell only
    ("trtllm", "awq", "a100-sxm-80gb", "weight-only"),
    ("trtllm", "bf16", "mi300x", "unsupported"),  # NVIDIA GPUs only
    ("trtllm", "q4_k_m", "h100-sxm", "unsupported"),  # no GGUF loader
])
def test_support_levels_follow_the_engines_code(engine, precision, gpu, level):
    assert CATALOG.support(engine, CATALOG.precisions.get(precision), CATALOG.gpus.get(gpu)).level == level


def test_the_speed_model_times_a_weight_only_format_at_the_16_bit_rate():
    """NVFP4 GEMMs on a B200 run on FP4 tensor cores with vLLM; on an H100 Marlin dequantizes them and computes in
    bf16: the 16-bit rate."""
    arch = resolve_model(CATALOG, "llama-3.1-8b")
    h100 = replica_timer(arch, "nvfp4", "auto", CATALOG.gpus.get("h100-sxm"), 1, 1, CATALOG, "vllm").hw
    b200 = replica_timer(arch, "nvfp4", "auto", CATALOG.gpus.get("b200"), 1, 1, CATALOG, "vllm").hw
    assert h100.low_bit.flops_per_s == h100.wide.flops_per_s
    assert b200.low_bit.flops_per_s > 2 * b200.wide.flops_per_s


@pytest.mark.parametrize("edit, message", [
    (("    release: v0.34.0\n", "    release: v0.34.0\n    tag: x\n"), "engines[vllm].tag: Extra inputs are not permitted"),
    (("weight_only: [turing, ampere]", "weight_only: [turing, amper]"), "unknown GPU generation 'amper'"),
    (("      - name: fp32\n", "      - name: fp33\n"), "unknown precision 'fp33'"),
])
def test_a_bad_support_table_is_one_line_error(tmp_path, edit, message):
    folder = tmp_path / "catalogs"
    shutil.copytree(catalog_dir(), folder)
    table = folder / "precision_support.yaml"
    text = table.read_text()
    assert edit[0] in text
    table.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(PlannerInputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_catalog(str(folder))


def test_the_memory_estimate_judges_the_precision_by_the_engine_asked_for():
    """`planner estimate --engine E` warns with E's own verdict, not the planning margin's (vLLM's)."""
    from planner import api
    from planner.estimator.engines.base import EngineSettings

    for engine in ("sglang", "trtllm"):
        warnings = api.engine_estimate("llama-3.1-8b", EngineSettings(engine), gpu="mi300x", precision="nvfp4",
                                       catalog=CATALOG).memory.warnings
        assert any(w.startswith(f"{engine} ") and "cannot run nvfp4 on mi300x" in w for w in warnings), warnings


def test_perf_refuses_a_precision_the_engine_cannot_run_on_the_gpu():
    """`planner perf` times what could run: TensorRT-LLM on an AMD card, or FP8 on Ampere, is one error naming the
    engine's verdict and its source."""
    from planner import api

    with pytest.raises(PlannerInputError, match=r"^--precision / --gpu: trtllm 1\.1 cannot run bf16 on mi300x"):
        api.perf("llama-3.1-8b", gpu="mi300x", engine="trtllm", precision="bf16", catalog=CATALOG)
    with pytest.raises(PlannerInputError, match=r"cannot run fp8 on a100-sxm-80gb \(ampere\): support-matrix\.md"):
        api.perf("llama-3.1-8b", gpu="a100-sxm-80gb", engine="trtllm", precision="fp8", catalog=CATALOG)
    assert api.perf("llama-3.1-8b", gpu="a100-sxm-80gb", engine="vllm", precision="fp8", catalog=CATALOG).performance
