#!/usr/bin/env python3
"""Kernel-level speed constants for planner's performance model, fitted to measured kernel tables.

Source: NVIDIA aiconfigurator-core 0.12.0 (Apache-2.0), which ships per-GPU / per-op / per-engine
kernel timings as parquet under systems/data/<gpu>/<op>/<engine>/<version>/.  Every constant printed
here comes from one of those kernel tables (never from an end-to-end fit).  For every
(GPU, op, engine) the newest engine version whose table holds the rows a fit needs is used, and its
path is printed beside the result.

Column meanings (from aiconfigurator's collector and Rust perf_database sources):
  * latency is milliseconds per kernel call, timed inside a CUDA graph (collector/helper.py
    benchmark_with_power; vLLM fp8_block GEMMs are timed eagerly).
  * gemm m, n, k: activations [m, k] x weight [n, k]^T.
  * moe num_tokens: tokens entering the layer (before top-k); balanced routing gives every token
    k distinct experts and spreads tokens so min(E, tokens*k) experts are hit.
  * generation attention / MLA: kv length = isl + step - 1 (Rust generation_attention_sol).
  * custom all-reduce and NCCL message_size are ELEMENTS (bf16/half = 2 bytes).

Peaks are planner's own catalog (catalogs/gpus.yaml), so every efficiency is a fraction of
planner's numbers; aiconfigurator's system-yaml peaks are printed beside them.

Standalone: not imported by planner, not run by tests.
  python bench/kernel_constants.py --data /path/to/aiconfigurator_core
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from packaging.version import InvalidVersion, Version
from scipy.optimize import least_squares

REPO = Path(__file__).resolve().parents[1]
WHEEL = "aiconfigurator-core==0.12.0"

# aiconfigurator system name -> planner catalog name (L4 has no kernel tables in the wheel).
SYSTEMS = {
    "a100_sxm": "a100-sxm-80gb",
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200-sxm",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
    "rtx_pro_6000_server": "rtx-pro-6000",
    "l40s": "l40s",
    "l4": "l4",
}
ENGINES = ("vllm", "sglang", "trtllm")
# L2 cache per GPU, MB. A weight matrix that fits (or half fits) in L2 is read from it, not from HBM, at a rate no
# HBM model explains: the GEMM and MoE fits use only rows whose weights are at least twice the L2. Sources: NVIDIA
# A100 / H100 architecture whitepapers (40 MB; 50 MB, H200 the same GH100 die); Chips and Cheese, "Nvidia's
# B200: Keeping the CUDA Juggernaut Rolling" (126 MB; B300 / GB200 / GB300 taken as B200's, the same dual-die
# design); NVIDIA RTX Blackwell whitepaper (GB202: 128 MB); NVIDIA Ada whitepaper (AD102: 96 MB, the L40S's die).
L2_MB = {"a100_sxm": 40, "h100_sxm": 50, "h200_sxm": 50, "b200_sxm": 126, "b300_sxm": 126, "gb200": 126, "gb300": 126,
         "rtx_pro_6000_server": 128, "l40s": 96, "l4": 48}
# GPUs in one node where fewer than the system's NVLink domain: a GB200 / GB300 NVL72 compute tray holds 4 (NVIDIA
# Enterprise Reference Architecture, NVL72 AI factory, components). The engines' custom all-reduce runs within a node,
# so rows of a larger group time another path: they stay out of the in-node fits (bench/SPEED_PROTOCOL.md, the
# correction on the parts whose node holds the group) and make the fits across hosts (the amendment on a TP group
# across NVL72 trays).
NODE_GPUS = {"gb200": 4, "gb300": 4}
# MoE shapes whose aiconfigurator cases route the balanced logits through a group-limited top-k (DeepSeek-V3: 8 groups
# of 32, the best 4 kept; collector/cases/models/DeepseekV3ForCausalLM_cases.yaml): every token lands in the same 4
# tied groups, so the rows touch about 4 min(T, 32) + 4 experts, not the min(E, T k) the fit counts (bench/
# SPEED_PROTOCOL.md, the amendment on MoE rows not routed as the fit assumes). (hidden, expert width, experts, top-k)
GROUP_ROUTED_SHAPES = {(7168, 2048, 256, 8)}
# Fused-MoE kernels an engine chooses between by model family, quantization, GPU and version (catalogs/
# performance.yaml engines[].moe_kernel_rules): the tables' kernel_source -> the name the rules use.
MOE_KERNEL_NAMES = {"sglang_fused_moe_triton": "triton", "sglang_flashinfer_trtllm_moe": "flashinfer_trtllm"}
# w4a16_mxfp4: weight-only MXFP4 experts (4-bit values and one 8-bit scale per 32: 4.25 bits), computed in 16 bits
# a routed row's activations between the fused MoE's kernels: 16-bit (the engines' bf16 activations)
ACTIVATION_BYTES = 2
# w4a8_mxfp4_mxfp8: MXFP4 experts on MXFP8 activations (DeepSeek-V4's experts on Blackwell), at the FP8 rate: the
# mixed FP8 x FP4 MMA runs at it (bench/SPEED_PROTOCOL.md, the amendment on DeepSeek-V4's mixed precision)
BYTES_PER_WEIGHT = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5, "w4a16_mxfp4": 4.25 / 8,
                    "w4a8_mxfp4_mxfp8": 4.25 / 8}
CATALOG_PEAK = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "w4a16_mxfp4": "bf16",
                "int4_wo": "bf16", "w4a8_mxfp4_mxfp8": "fp8"}
AIC_PEAK = {"bfloat16": "bfloat16_tc_flops", "fp8": "fp8_tc_flops", "fp8_block": "fp8_tc_flops", "nvfp4": "fp4_tc_flops",
            "w4a16_mxfp4": "bfloat16_tc_flops", "int4_wo": "bfloat16_tc_flops", "w4a8_mxfp4_mxfp8": "fp8_tc_flops"}
# MoE formats whose runner no moe_kernel rule chooses: compute capability fixes int4's, DeepSeek-V4's own override
# (SGLang 0.5.23 arg_groups/model_overrides/deepseek_v4.py) the w4a8 one's
RUNNER_FIXED_DTYPES = ("int4_wo", "w4a8_mxfp4_mxfp8")
# int4_wo: group-quantized integer 4-bit experts (Marlin's int4 path; FlashInfer's TRT-LLM MoE on SGLang 10.x), computed
# in 16 bits, a 16-bit scale per group. Fused-MoE tables only (bench/SPEED_PROTOCOL.md, the amendment on integer
# experts' own tables). The collectors time each case's own group size from vLLM 0.24.0 (collector d5bad971c) and
# SGLang 0.5.14 (e23be5a79), whose only int4 cases are Kimi-K2.5's, group 32 (collector/cases/models/
# KimiK25ForConditionalGeneration_cases.yaml); before, their default 128 (collector/sglang/collect_moe.py
# `group_size = 128` at 507f0fb07). A later collector with other int4 cases needs its groups read per case.
INT4_GROUPED_SINCE = {"vllm": Version("0.24.0"), "sglang": Version("0.5.14")}


def moe_bytes_per_weight(dtype: str, engine: str, version: str) -> float:
    if dtype != "int4_wo":
        return BYTES_PER_WEIGHT[dtype]
    since = INT4_GROUPED_SINCE.get(engine)
    group = 32 if since is not None and version_key(version) >= (1, since) else 128
    return (4 + 16 / group) / 8
MAX_FIT_ROWS = 20000


# ----------------------------------------------------------------------------------------- data


def fetch_wheel(cache: Path) -> Path:
    """Download the pinned wheel with pip and unzip it; return the aiconfigurator_core folder."""
    target = cache / "aiconfigurator_core"
    if not target.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(cache), WHEEL], check=True)
        with zipfile.ZipFile(next(cache.glob("aiconfigurator_core-*.whl"))) as whl:
            whl.extractall(cache)
    return target


def version_key(name: str):
    try:
        return (1, Version(name))
    except InvalidVersion:
        return (0, Version("0"))


class Gpu:
    """Peaks of one GPU: planner's catalog (used for every fraction) and aiconfigurator's yaml."""

    def __init__(self, system: str, catalog: dict, aic_yaml: Path):
        self.system = system
        self.name = catalog["name"]
        self.generation = catalog["generation"]
        self.interconnect = catalog["interconnect"]["kind"]
        self.bw = catalog["memory_bandwidth_gbps"] * 1e9
        self.tflops = catalog["dense_tflops"]
        spec = yaml.safe_load(aic_yaml.read_text())["gpu"] if aic_yaml.exists() else {}
        self.aic_bw = spec.get("mem_bw", float("nan"))
        self.aic = spec

    def peak(self, dtype: str) -> float:
        return self.tflops.get(CATALOG_PEAK[dtype], float("nan")) * 1e12

    def aic_peak(self, dtype: str) -> float:
        return float(self.aic.get(AIC_PEAK[dtype], float("nan")))


class Tables:
    """Locates the newest engine version of a kernel table that holds the wanted rows."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "systems" / "data"

    def latest(self, system: str, op: str, engine: str, filename: str, keep=lambda df: df):
        folder = self.data / system / op / engine
        if not folder.is_dir():
            return None, None
        for version in sorted((p.name for p in folder.iterdir()), key=version_key, reverse=True):
            path = folder / version / filename
            if path.exists():
                rows = keep(pd.read_parquet(path))
                if len(rows):
                    return str(path.relative_to(self.root)), rows
        return None, None


def major_kernel(df: pd.DataFrame, exclude=()) -> pd.DataFrame:
    """Rows of the kernel_source with the most rows (the engine's primary kernel for that dtype)."""
    sources = df[~df.kernel_source.isin(exclude)].kernel_source.value_counts()
    return df[df.kernel_source == sources.index[0]] if len(sources) else df.iloc[:0]


# ----------------------------------------------------------------------------------------- fitting


def fit_log(model, x0, lower, upper, measured, sample=None):
    """Least squares on log(pred / measured): every row weighs by its relative error."""
    idx = sample if sample is not None else slice(None)

    def resid(p):
        return np.log(model(p, idx) / measured[idx])

    return least_squares(resid, x0, bounds=(lower, upper), x_scale="jac").x


def fit_log_best(model, starts, lower, upper, measured, sample=None):
    """fit_log from each start, keeping the fit with the least squared log error (terms that can stand in for each
    other on a table, as the fused MoE's activation traffic and compute side, leave local minima by start)."""
    idx = sample if sample is not None else slice(None)
    fits = [fit_log(model, x0, lower, upper, measured, sample) for x0 in starts]
    return min(fits, key=lambda q: float(np.sum(np.log(model(q, idx) / measured[idx]) ** 2)))


def subsample(n: int) -> np.ndarray | None:
    if n <= MAX_FIT_ROWS:
        return None
    return np.sort(np.random.default_rng(0).choice(n, MAX_FIT_ROWS, replace=False))


def err_stats(pred, measured, mask=None) -> str:
    rel = np.abs(pred / measured - 1)
    if mask is not None:
        rel = rel[mask]
    if not len(rel):
        return "n/a"
    return f"{np.median(rel) * 100:.0f}%/{np.percentile(rel, 90) * 100:.0f}% (n={len(rel)})"


def saturating(form: str, x, emax, half):
    if form == "hyperbolic":
        return emax * x / (x + half)
    return emax * (1 - np.exp(-x / half))


# ----------------------------------------------------------------------------------------- ops


def gemm_fit(gpu, df: pd.DataFrame, bpw: float, peak: float, form: str, rate_rows):
    """launch_s + max(bytes / (bw x read_eff), 2MNK / (peak x compute_eff(M))) over rows m, n, k, latency (ms): the
    launch is the intercept of a fit over every row, the rates a fit over `rate_rows` with the launch held.
    (params, predicted s, m, measured s, rate rows) or None when no row is a rate row."""

    def arrays(rows):
        m, n, k = (rows[c].to_numpy(float) for c in ("m", "n", "k"))
        return m, n * k * bpw + m * k * 2 + m * n * 2, 2 * m * n * k, rows.latency.to_numpy() / 1e3

    def timing(m, nbytes, flops):
        def model(p, idx):
            launch, read, emax, half = p
            eff = saturating(form, m[idx], emax, half)
            return launch + np.maximum(nbytes[idx] / (gpu.bw * read), flops[idx] / (peak * eff))
        return model

    m, nbytes, flops, t = arrays(df)
    launch = fit_log(timing(m, nbytes, flops), [5e-6, 0.7, 0.7, 64], [0, 0.02, 0.02, 0.01], [1e-3, 2, 2, 1e5], t,
                     subsample(len(t)))[0]
    df = df[rate_rows]
    if not len(df):
        return None
    m, nbytes, flops, t = arrays(df)
    model = timing(m, nbytes, flops)
    rates = fit_log(lambda q, idx: model([launch, *q], idx), [0.7, 0.7, 64], [0.02, 0.02, 0.01], [2, 2, 1e5], t,
                    subsample(len(t)))
    p = [launch, *rates]
    return p, model(p, slice(None)), m, t, df


def gemm(gpu: Gpu, tables: Tables, engine: str, form: str) -> list[dict]:
    """launch_s + max(bytes / (bw x read_eff), 2MNK / (peak x compute_eff(M)))."""
    out = []
    for dtype, bpw in BYTES_PER_WEIGHT.items():
        if engine == "vllm" and dtype == "fp8_block":
            continue  # timed eagerly (collector/vllm/collect_gemm.py use_cuda_graph=False): not kernel time
        path, df = tables.latest(gpu.system, "gemm", engine, "gemm_perf.parquet", lambda d: d[d.gemm_dtype == dtype])
        if df is None or not np.isfinite(gpu.peak(dtype)):
            continue
        df = major_kernel(df)
        peak = gpu.peak(dtype)
        # the rates are what HBM reads show: rows whose weights are at least twice the L2
        fitted = gemm_fit(gpu, df, bpw, peak, form, df.n * df.k * bpw >= 2 * L2_MB[gpu.system] * 2**20)
        if fitted is None:
            continue
        p, pred, m, t, df = fitted
        out.append(dict(gpu=gpu.system, engine=engine, dtype=dtype, kernel=df.kernel_source.iloc[0],
                        launch_us=p[0] * 1e6, read_eff=p[1], eff_max=p[2], m_half=p[3],
                        err_small=err_stats(pred, t, m <= 16), err_large=err_stats(pred, t, m >= 1024),
                        peak_tflops=peak / 1e12, aic_peak_tflops=gpu.aic_peak(dtype) / 1e12, file=path))
    return out


def moe_distinct(tokens, topk, experts, balanced: bool):
    """Experts a batch touches: balanced routing hits min(E, T*k); random routing E(1-(1-k/E)^T)."""
    if balanced:
        return np.minimum(experts, tokens * topk)
    return experts * (1 - (1 - topk / experts) ** tokens)


def moe_tables(gpu: Gpu, tables: Tables, engine: str, dtype: str):
    """Balanced-routing rows of the engine's gated MoE kernels (GROUP_ROUTED_SHAPES left out), whole experts (ep = 1)
    at every moe_tp (the tensor-parallel slices are what a served model runs; bench/SPEED_PROTOCOL.md, the amendment
    on expert slices):
    (file, rows, kernel name, primary) for the primary kernel (the one with the most rows) and for every other kernel
    MOE_KERNEL_NAMES names (those an engine's kernel choice in catalogs/performance.yaml can pick)."""
    # left out: non-gated experts (relu2, another shape of work), and TensorRT-LLM's min-latency rows, which
    # aiconfigurator's collector times on another backend (TRTLLMGenFusedMoE) called with do_finalize=False, its routed
    # outputs not reduced: not a whole MoE layer (collector/trtllm/collect_moe.py run_moe_torch, 006afd78)
    exclude = ("moe_torch_flow_nongated", "moe_torch_flow_min_latency")

    def keep(d):
        shapes = pd.MultiIndex.from_frame(d[["hidden_size", "inter_size", "num_experts", "topk"]])
        return d[(d.moe_dtype == dtype) & (d.distribution == "balanced") & (d.moe_ep_size == 1)
                 & ~d.kernel_source.isin(exclude) & ~shapes.isin(GROUP_ROUTED_SHAPES)]

    path, rows = tables.latest(gpu.system, "moe", engine, "moe_perf.parquet", keep)
    if rows is None:
        return []
    primary = major_kernel(rows).kernel_source.iloc[0]
    return [(path, rows[rows.kernel_source == source], MOE_KERNEL_NAMES.get(source), source == primary)
            for source in rows.kernel_source.unique() if source == primary or source in MOE_KERNEL_NAMES]


def moe_model(p, tokens, hidden, inter, experts, topk, bpw, gpu: Gpu, peak: float, balanced=True):
    """`inter`: one expert's intermediate size on the rank (inter / moe_tp). Every touched expert's two GEMMs pay
    `column_ps` per output column (2 inter of gate-up, hidden of down): their tiles' fixed prologue and epilogue, SM
    time that runs while the weights stream in (bench/SPEED_PROTOCOL.md, the amendment on the tiles' overlap). Every
    routed row moves its activations through memory beside the weights: its input (hidden) and its GEMMs' outputs
    (2 inter, hidden), `activation_passes` times at ACTIVATION_BYTES a value (gathered, written, read back by the
    activation, the next GEMM and the weighted sum: bench/SPEED_PROTOCOL.md, the amendment on the routed rows'
    activation traffic)."""
    launch, read, emax, half, column_ps, passes = p
    distinct = moe_distinct(tokens, topk, experts, balanced)
    expert_bytes = 3 * hidden * inter * bpw
    row_bytes = tokens * topk * ACTIVATION_BYTES * (hidden + 2 * inter + hidden) * passes
    flops = tokens * topk * 3 * 2 * hidden * inter
    eff = saturating("hyperbolic", tokens * topk / distinct, emax, half)
    tiles = distinct * (2 * inter + hidden) * column_ps * 1e-12
    return launch + np.maximum((distinct * expert_bytes + row_bytes) / (gpu.bw * read), flops / (peak * eff) + tiles)


# Fused-MoE kernels two engines call alike, measured in one engine's tables only: (engine measured, format, kernel
# name) -> the engine that can be told to run it. FlashInfer's trtllm_mxint4_block_scale_moe runs group-32 int4
# experts in SGLang (0.5.23 compressed_tensors_w4a4_mxint4_moe.py:45, :341) and in vLLM with
# VLLM_USE_FLASHINFER_MOE_INT4=1 on 10.x (0.21.0 quantization/utils/flashinfer_mxint4_moe.py:24-31, :217-241)
# (bench/SPEED_PROTOCOL.md, the amendment on the kernel a run states). FlashInfer's trtllm_fp8_block_scale_moe and
# trtllm_fp4_block_scale_moe are TensorRT-LLM's trtllm-gen MoE runner, vendored (flashinfer-python 0.7.4
# data/csrc/trtllm_fused_moe_runner.cu, namespace tensorrt_llm::kernels::trtllmgen_moe): what TensorRT-LLM runs when
# told `moe_config: {backend: TRTLLM}` (the amendment on TensorRT-LLM's TRTLLM MoE backend).
SHARED_KERNELS = {("sglang", "int4_wo", "flashinfer_trtllm"): "vllm",
                  ("sglang", "fp8_block", "flashinfer_trtllm"): "trtllm",
                  ("sglang", "nvfp4", "flashinfer_trtllm"): "trtllm"}


def shared_kernel_rows(moe_rows: list[dict]) -> list[dict]:
    """The fits of SHARED_KERNELS' kernels again, as the other engine's alternative kernel."""
    return [{**row, "engine": SHARED_KERNELS[key], "primary": False} for row in moe_rows
            if (key := (row["engine"], row["dtype"], row["kernel_name"])) in SHARED_KERNELS]


def moe(gpu: Gpu, tables: Tables, engine: str) -> tuple[list[dict], list[dict]]:
    """Fit launch_s / moe_read_eff / compute_eff(tokens per expert) / column_ps per kernel; test a cost per expert
    held; report t(4 tokens) / t(1 token) for real shapes (primary kernels)."""
    fits, ratios = [], []
    for dtype in (*BYTES_PER_WEIGHT, "int4_wo"):
        if not np.isfinite(gpu.peak(dtype)):
            continue
        for path, df, name, primary in moe_tables(gpu, tables, engine, dtype):
            bpw = moe_bytes_per_weight(dtype, engine, Path(path).parent.name)
            fit, p = moe_fit(gpu, df, bpw, gpu.peak(dtype))
            if fit is None:
                continue
            fits.append(dict(gpu=gpu.system, engine=engine, dtype=dtype, kernel=df.kernel_source.iloc[0],
                             kernel_name=name, primary=primary, **fit, file=path))
            if primary:
                ratios += moe_ratios(gpu, engine, dtype, df, p, bpw)
    return fits, ratios


def moe_fit(gpu: Gpu, df: pd.DataFrame, bpw: float, peak: float, balanced: bool = True, l2_mb: float | None = None
            ) -> tuple[dict | None, list[float]]:
    """`balanced`: the rows' routing (aiconfigurator's balanced, or uniformly random scores); `l2_mb`: the cache whose
    twice no rate row's touched experts may fit in (default: the GPU's L2; 0 for tables timed with cold copies)."""
    def arrays(rows):
        cols = {c: rows[c].to_numpy(float) for c in ("num_tokens", "hidden_size", "inter_size", "num_experts", "topk")}
        cols["inter_size"] = cols["inter_size"] / rows.moe_tp_size.to_numpy(float)  # one rank's slice
        return cols, rows.latency.to_numpy() / 1e3

    def timing(cols):
        return lambda p, idx: moe_model(p, *(cols[c][idx] for c in cols), bpw, gpu, peak, balanced)

    # as gemm(): the launch from every row, the rates from rows whose touched experts outgrow the L2; no GPU reads
    # faster than its generation's streaming ceiling
    ceiling = READ_CEILING[gpu.generation]
    cols, t = arrays(df)
    # the activation traffic started at none (the form without it) and at 2 passes
    launch = fit_log_best(timing(cols), [[10e-6, 0.5, 0.5, 16, 10, passes] for passes in (0, 2)],
                          [0, 0.01, 0.01, 0.01, 0, 0], [2e-3, ceiling, 2, 1e5, 1e3, 100], t, subsample(len(t)))[0]
    touched = moe_distinct(df.num_tokens, df.topk, df.num_experts, balanced)
    cache_mb = L2_MB[gpu.system] if l2_mb is None else l2_mb
    df = df[touched * 3 * df.hidden_size * df.inter_size / df.moe_tp_size * bpw >= 2 * cache_mb * 2**20]
    if not len(df):
        return None, []
    cols, t = arrays(df)
    model = timing(cols)
    rates = fit_log_best(lambda q, idx: model([launch, *q], idx), [[0.5, 0.5, 16, 10, passes] for passes in (0, 2)],
                         [0.01, 0.01, 0.01, 0, 0], [ceiling, 2, 1e5, 1e3, 100], t, subsample(len(t)))
    p = [launch, *rates]
    pred = model(p, slice(None))
    slope, slope_se, slope_med, n_groups = held_expert_slope(df)
    return dict(launch_us=p[0] * 1e6, read_eff=p[1], eff_max=p[2], x_half=p[3], column_ps=p[4], activation_passes=p[5],
                err_all=err_stats(pred, t), err_sliced=err_stats(pred, t, df.moe_tp_size.to_numpy() >= 4),
                err_small=err_stats(pred, t, cols["num_tokens"] <= 16),
                err_large=err_stats(pred, t, cols["num_tokens"] >= 1024),
                slope_us=slope, slope_se_us=slope_se, slope_median_us=slope_med, groups=n_groups), p


def moe_ratios(gpu: Gpu, engine: str, dtype: str, df: pd.DataFrame, p: list[float], bpw: float) -> list[dict]:
    out = []
    for label, shape in (("DeepSeek-V3 7168x2048 E256 k8", (7168, 2048, 256, 8)),
                         ("Qwen3-235B 4096x1536 E128 k8", (4096, 1536, 128, 8))):
        sel = df[(df.hidden_size == shape[0]) & (df.inter_size == shape[1]) & (df.num_experts == shape[2])
                 & (df.topk == shape[3]) & (df.moe_tp_size == 1)].groupby("num_tokens").latency.median()
        if 1 in sel.index and 4 in sel.index:
            args = [np.array([1.0, 4.0]), shape[0], shape[1], shape[2], shape[3], bpw, gpu, gpu.peak(dtype)]
            balanced, random = moe_model(p, *args), moe_model(p, *args, balanced=False)
            out.append(dict(gpu=gpu.system, engine=engine, dtype=dtype, shape=label,
                            t1_us=sel[1] * 1e3, t4_us=sel[4] * 1e3, ratio=sel[4] / sel[1],
                            model_balanced=balanced[1] / balanced[0], model_random=random[1] / random[0]))
    return out


def held_expert_slope(df: pd.DataFrame):
    """Cost per expert merely held: at fixed (hidden, inter, k, tokens) with tokens*k <= every E of
    the group, balanced routing touches exactly tokens*k experts whatever E is, so any growth of
    latency with E is a per-expert-held cost.  Pooled within-group OLS slope (us per expert) with its
    standard error, and the median of the per-group slopes."""
    keys = ["hidden_size", "inter_size", "moe_tp_size", "topk", "num_tokens"]
    d = df[["latency", "num_experts", *keys]].copy()
    d["min_e"] = d.groupby(keys).num_experts.transform("min")
    d["n_e"] = d.groupby(keys).num_experts.transform("nunique")
    d = d[(d.num_tokens * d.topk <= d.min_e) & (d.n_e >= 2)]
    if len(d) < 4:
        return float("nan"), float("nan"), float("nan"), 0
    y = d.latency * 1e3 - d.groupby(keys).latency.transform("mean") * 1e3
    x = d.num_experts - d.groupby(keys).num_experts.transform("mean")
    slope = (x * y).sum() / (x * x).sum()
    groups = d.groupby(keys).ngroups
    dof = max(len(d) - groups - 1, 1)
    se = np.sqrt(((y - slope * x) ** 2).sum() / dof / (x * x).sum())
    per_group = [np.polyfit(g.num_experts, g.latency * 1e3, 1)[0] for _, g in d.groupby(keys)]
    return slope, se, float(np.median(per_group)), groups


def decode_attention(gpu: Gpu, tables: Tables, engine: str) -> list[dict]:
    """launch_s + kv_bytes / (bw x kv_eff), kv_bytes = batch x kv_len x kv_heads x head_dim x 2 x bytes."""
    out = []
    for kv_dtype, kv_b in (("bfloat16", 2), ("fp8", 1)):
        def keep(d):
            return major_kernel(d[(d.window_size == 0) & (d.kv_cache_dtype == kv_dtype)]) if "window_size" in d \
                else major_kernel(d[d.kv_cache_dtype == kv_dtype])

        path, df = tables.latest(gpu.system, "attention", engine, "generation_attention_perf.parquet", keep)
        if df is None:
            continue
        kv_len = (df.isl + df.step - 1).to_numpy(float)
        kv_bytes = df.batch_size * kv_len * df.num_key_value_heads * df.head_dim * 2 * kv_b
        kv_bytes = kv_bytes.to_numpy(float)
        t = df.latency.to_numpy() / 1e3

        def model(p, idx):
            return p[0] + kv_bytes[idx] / (gpu.bw * p[1])

        p = fit_log(model, [5e-6, 0.5], [0, 0.01], [1e-3, 2], t, subsample(len(t)))
        pred = model(p, slice(None))
        out.append(dict(gpu=gpu.system, engine=engine, kv_dtype=kv_dtype, kernel=df.kernel_source.iloc[0],
                        launch_us=p[0] * 1e6, kv_eff=p[1], err_small=err_stats(pred, t, kv_bytes < 16e6),
                        err_large=err_stats(pred, t, kv_bytes >= 256e6), file=path))
    return out


def mla_decode(gpu: Gpu, tables: Tables, engine: str) -> list[dict]:
    """MLA decode: launch_s + max(latent_bytes / (bw x latent_eff), flops / (bf16 peak x compute_eff)),
    latent_bytes = batch x kv_len x 576 x bytes, flops = 2 x batch x heads x kv_len x (576 + 512)."""
    out = []
    for kv_dtype, kv_b in (("bfloat16", 2), ("fp8", 1)):
        path, df = tables.latest(gpu.system, "mla", engine, "generation_mla_perf.parquet",
                                 lambda d: d[d.kv_cache_dtype == kv_dtype])
        if df is None:
            continue
        kv_len = (df.isl + df.step - 1).to_numpy(float)
        latent = (df.batch_size * kv_len * 576 * kv_b).to_numpy(float)
        flops = (2 * df.batch_size * df.num_heads * kv_len * (576 + 512)).to_numpy(float)
        t = df.latency.to_numpy() / 1e3
        peak = gpu.peak("bfloat16")

        def model(p, idx):
            return p[0] + np.maximum(latent[idx] / (gpu.bw * p[1]), flops[idx] / (peak * p[2]))

        p = fit_log(model, [5e-6, 0.5, 0.5], [0, 0.01, 0.01], [1e-3, 2, 2], t)
        pred = model(p, slice(None))
        # the rows whose compute side binds at the fit: none, and compute_eff is the fit's start, not a measurement
        compute_rows = float(np.mean(flops / (peak * p[2]) > latent / (gpu.bw * p[1])))
        out.append(dict(gpu=gpu.system, engine=engine, kv_dtype=kv_dtype, launch_us=p[0] * 1e6,
                        latent_eff=p[1], compute_eff=p[2], compute_rows=compute_rows,
                        err_small=err_stats(pred, t, latent < 16e6),
                        err_large=err_stats(pred, t, latent >= 256e6), file=path))
    return out


def prefill_attention(gpu: Gpu, tables: Tables, engine: str, row_positions: float | None = None) -> list[dict]:
    """launch_s + (causal flops + rows x row_positions x flops per position) / (bf16 peak x compute_eff); flops per
    position = 2 x heads x (d_k + d_v), rows = batch x s, causal positions = batch x s(s+1)/2.  MHA/GQA tables
    (d_k = d_v = head_dim) and MLA tables (192 + 128).  row_positions: each query row's fixed cost (its query tile's
    load, the softmax's last rescale, the output's write, the diagonal tile), in attended positions; fitted with the
    others, or held at the value given (bench/SPEED_PROTOCOL.md, the amendment on prefill attention's per-row cost)."""
    out = []
    specs = (
        ("attention", "context_attention_perf.parquet", "mha/gqa",
         lambda d: major_kernel(d[(d.window_size == 0) & (d.kv_cache_dtype == "bfloat16") & (d.attn_dtype == "bfloat16")]
                                if "window_size" in d else d[d.kv_cache_dtype == "bfloat16"])),
        ("mla", "context_mla_perf.parquet", "mla", lambda d: d[d.kv_cache_dtype == "bfloat16"]),
    )
    for op, filename, kind, keep in specs:
        path, df = tables.latest(gpu.system, op, engine, filename, keep)
        if df is None:
            continue
        s = df.isl.to_numpy(float)
        dkv = 2 * df.head_dim.to_numpy(float) if kind == "mha/gqa" else np.full(len(df), 192.0 + 128.0)
        per_position = 2 * df.num_heads.to_numpy(float) * dkv
        flops = per_position * df.batch_size.to_numpy(float) * s * (s + 1) / 2
        row_flops = per_position * df.batch_size.to_numpy(float) * s
        t = df.latency.to_numpy() / 1e3
        peak = gpu.peak("bfloat16")

        def model(p, idx):
            rows = p[2] if row_positions is None else row_positions
            return p[0] + (flops[idx] + rows * row_flops[idx]) / (peak * p[1])

        if row_positions is None:
            p = fit_log(model, [10e-6, 0.5, 500], [0, 0.01, 0], [1e-3, 2, 1e5], t, subsample(len(t)))
        else:
            p = [*fit_log(model, [10e-6, 0.5], [0, 0.01], [1e-3, 2], t, subsample(len(t))), row_positions]
        pred = model(p, slice(None))
        out.append(dict(gpu=gpu.system, engine=engine, kind=kind, launch_us=p[0] * 1e6, compute_eff=p[1],
                        row_positions=p[2], err_all=err_stats(pred, t), err_short=err_stats(pred, t, s <= 512),
                        err_long=err_stats(pred, t, s >= 4096), file=path))
    return out


def generation_row_positions(free_fits: list[dict], gpus: dict) -> dict[str, float]:
    """Each generation's prefill row_positions: the median over its engines and kinds of the GPUs' median free fits."""
    df = _per_engine(free_fits, gpus, ["kind"], ["row_positions"])
    return df.groupby("generation").row_positions.median().to_dict()


def all_reduce(gpu: Gpu, tables: Tables) -> tuple[list[dict], list[dict]]:
    """latency(tp) + bytes / busbw(tp), fitted separately on decode-sized messages (<= 1 MiB) and on
    large ones (>= 64 MiB); bandwidths are algorithm bandwidth (bytes / time) and ring bus bandwidth
    2(tp-1)/tp x that.  Also: the message size above which the engine's all-reduce is no faster than
    plain NCCL (within 5%)."""
    sources = {"nccl": tables.latest(gpu.system, "comm", "nccl", "nccl_perf.parquet",
                                     lambda d: d[(d.op_name == "all_reduce") & (d.nccl_dtype == "half")])}
    for engine in ENGINES:
        sources[engine] = tables.latest(gpu.system, "comm", engine, "custom_allreduce_perf.parquet",
                                        lambda d: d[~d.kernel_source.str.contains("eager")])
    fits, crossover = [], []
    nccl = sources["nccl"][1]
    for name, (path, df) in sources.items():
        if df is None:
            continue
        for tp, g in df.groupby("num_gpus"):
            # a group of more GPUs than a node (an NVL72 tray) holds runs the engine's multi-host path: fitted apart
            across = tp > NODE_GPUS.get(gpu.system, tp)
            g = g.groupby("message_size").latency.min()
            nbytes = g.index.to_numpy(float) * 2
            t = g.to_numpy() / 1e3
            row = dict(gpu=gpu.system, impl=name, tp=tp, file=path, across_hosts=across)
            for regime, mask in (("small", nbytes <= 2**20), ("large", nbytes >= 64 * 2**20)):
                if mask.sum() < 3:
                    continue
                b, t_r = nbytes[mask], t[mask]

                def model(p, idx):
                    return p[0] + b[idx] / p[1]

                p = fit_log(model, [10e-6, 1e11], [0, 1e8], [1e-2, 1e13], t_r)
                row[f"{regime}_lat_us"] = p[0] * 1e6
                row[f"{regime}_algbw_gbs"] = p[1] / 1e9
                row[f"{regime}_busbw_gbs"] = p[1] / 1e9 * 2 * (tp - 1) / tp
                row[f"{regime}_err"] = err_stats(model(p, slice(None)), t_r)
            fits.append(row)
            if name != "nccl" and nccl is not None:
                ref = nccl[nccl.num_gpus == tp].groupby("message_size").latency.min()
                both = g.to_frame("custom").join(ref.rename("nccl"), how="inner")
                if both.empty:
                    continue
                slower = both.custom >= 0.95 * both.nccl
                faster_sizes = both.index[~slower]
                last_faster = faster_sizes.max() * 2 if len(faster_sizes) else float("nan")
                crossover.append(dict(gpu=gpu.system, engine=name, tp=tp, last_faster_bytes=last_faster,
                                      max_bytes=both.index.max() * 2,
                                      ratio_64tok_7168=ratio_at(both, 64 * 7168)))
    return fits, crossover


def ratio_at(both: pd.DataFrame, elements: int) -> float:
    """custom / NCCL latency at the measured size nearest to `elements` (log distance)."""
    i = np.argmin(np.abs(np.log(both.index.to_numpy(float) / elements)))
    return float(both.custom.iloc[i] / both.nccl.iloc[i])


def small_kernel_floor(gpu: Gpu, tables: Tables, engine: str) -> dict:
    """Median of the 10 fastest rows of each small-kernel table: a latency-bound kernel's cost inside
    a CUDA graph (gemm bf16, fp8 quantize scale_matrix, MLA bmm, decode attention).  The
    computescale table is left out: vLLM/SGLang store it as a difference of two kernels."""
    row = dict(gpu=gpu.system, engine=engine)
    probes = (
        ("gemm_bf16", "gemm", "gemm_perf.parquet", lambda d: d[d.gemm_dtype == "bfloat16"]),
        ("quant_apply", "quantize", "scale_matrix_perf.parquet", lambda d: d),
        ("mla_bmm", "mla_bmm", "mla_bmm_perf.parquet", lambda d: d),
        ("decode_attn", "attention", "generation_attention_perf.parquet", lambda d: d),
    )
    for label, op, filename, keep in probes:
        path, df = tables.latest(gpu.system, op, engine, filename, keep)
        if df is not None:
            row[label] = float(np.median(np.sort(df.latency.to_numpy())[:10]) * 1e3)
    return row


# ----------------------------------------------------------------------------------------- output


def table(title: str, rows: list[dict], columns: list[str]) -> None:
    print(f"\n### {title}\n")
    if not rows:
        print("(no data)")
        return
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |")


def fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return "-"
        if abs(v) >= 1e4:
            return f"{v:.3g}"
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return "-" if v is None else str(v)


def generation_summary(title: str, rows: list[dict], gpus: dict, by: list[str], values: list[str]) -> None:
    """Median over a generation's GPUs (per engine and the other `by` keys)."""
    if not rows:
        return
    df = pd.DataFrame(rows)
    df["generation"] = df.gpu.map(lambda s: gpus[s].generation)
    keys = ["generation", *by]
    present = [v for v in values if v in df]
    summary = df.groupby(keys)[present].median().reset_index()
    summary["gpus"] = df.groupby(keys).gpu.apply(lambda s: ",".join(sorted(set(s)))).to_numpy()
    table(f"{title} — per generation (median over GPUs)", summary.to_dict("records"), [*keys, *present, "gpus"])


# catalogs/performance.yaml's kernel formats and the tables' dtypes; the read ceilings every read is capped at
CATALOG_FORMAT = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "fp4", "w4a16_mxfp4": "w4a16",
                  "int4_wo": "w4a16-int4", "w4a8_mxfp4_mxfp8": "w4a8"}
KV_BITS = {"bfloat16": 16, "fp8": 8}
# (cdna3: BabelStream HIP on MI300X, catalogs/performance.yaml's read_ceiling_source; cdna4 has no streaming
# measurement and borrows it: bench/aiter_constants.py)
READ_CEILING = {"hopper": 0.933, "blackwell": 0.977, "blackwell-ultra": 0.977, "blackwell-sm120": 0.977, "ampere": 0.858, "ada": 0.977,
                "cdna3": 0.804, "cdna4": 0.804}


def _per_engine(rows: list[dict], gpus: dict, keys: list[str], values: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["generation"] = df.gpu.map(lambda s: gpus[s].generation)
    return df.groupby(["generation", "engine", *keys])[values].median().reset_index()


def _number(value: float) -> str:
    if abs(value) < 1e-3:  # an intercept the fit pinned at its bound
        return "0"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _moe_entries(moe_rows: list[dict], gpus: dict) -> dict:
    """(generation, engine) -> {"kernel": the named kernel `moe` measures or None, "moe": {dtype: medians},
    "alternatives": {kernel name: {dtype: medians}}}, medians over the generation's GPUs. `moe` is, per format, the
    kernel that is primary (most rows) on most of the generation's GPUs; it is named only where that is one named
    kernel in every format (a table whose formats come from different kernels names none: compute capability 12.0's
    SGLang runs Triton for bf16, FlashInfer CUTLASS for NVFP4 and Marlin for W4A16); the alternatives are the other
    kernels MOE_KERNEL_NAMES names."""
    df = pd.DataFrame(moe_rows)
    df["generation"] = df.gpu.map(lambda s: gpus[s].generation)
    df["name"] = df.kernel_name.fillna(df.kernel)
    values = ["launch_us", "read_eff", "eff_max", "x_half", "column_ps", "activation_passes"]
    out: dict = {}
    for (generation, engine, dtype), rows in df.groupby(["generation", "engine", "dtype"]):
        entry = out.setdefault((generation, engine), {"kernel": None, "moe": {}, "alternatives": {}})
        main = rows[rows.primary].name.mode().iloc[0]
        entry["moe"][dtype] = rows[rows.name == main][values].median()
        if dtype not in RUNNER_FIXED_DTYPES:  # no rule chooses their runner (SPEED_PROTOCOL)
            entry.setdefault("mains", set()).add(main)
        elif main in MOE_KERNEL_NAMES.values():  # the label does not name it: listed under its own name as well
            entry["alternatives"].setdefault(main, {})[dtype] = entry["moe"][dtype]
        for other, alt in rows[(rows.name != main) & rows.name.isin(MOE_KERNEL_NAMES.values())].groupby("name"):
            entry["alternatives"].setdefault(other, {})[dtype] = alt[values].median()
    for entry in out.values():
        mains = entry.pop("mains", set())
        named = next(iter(mains)) if len(mains) == 1 else None
        entry["kernel"] = named if named in MOE_KERNEL_NAMES.values() else None
    return out


def _moe_line(indent: str, dtype: str, r, ceiling: float) -> str:
    return (f"{indent}{CATALOG_FORMAT[dtype]}: {{launch_us: {_number(r.launch_us)}, read_efficiency: "
            f"{_number(min(r.read_eff, ceiling))}, compute_efficiency: {_number(r.eff_max)}, half_m: "
            f"{_number(r.x_half)}, column_ps: {_number(r.column_ps)}, activation_passes: {_number(r.activation_passes)}}}")


def print_catalog_yaml(gpus: dict, gemm_rows, moe_rows, dec, mla, pre, ar_rows) -> None:
    """Each generation's fused-MoE medians and per-engine kernel rates (medians over its GPUs) and each engine's
    all-reduce fits, in catalogs/performance.yaml's shape: paste under the generation and into `interconnects:`."""
    gemm_df = _per_engine(gemm_rows, gpus, ["dtype"], ["launch_us", "read_eff", "eff_max", "m_half"])
    # the engines' MLA prefill kernels, their FLOPs counted in the multi-head form (prefill_attention)
    mla_prefill = _per_engine([r for r in pre if r["kind"] == "mla"], gpus, [], ["compute_eff"])
    mha_prefill = _per_engine([r for r in pre if r["kind"] == "mha/gqa"], gpus, [], ["compute_eff"])
    # the generation's prefill attention: the median over its engines and kinds (row_positions held alike)
    prefill = _per_engine(pre, gpus, ["kind"], ["compute_eff", "row_positions"]).groupby("generation")[
        ["compute_eff", "row_positions"]].median()
    moe = _moe_entries(moe_rows, gpus)
    dec_df = _per_engine(dec, gpus, ["kv_dtype"], ["launch_us", "kv_eff"])
    mla_df = _per_engine(mla, gpus, ["kv_dtype"], ["latent_eff"])
    # the MLA decode kernels' compute side, from the tables whose fit binds on it for some rows (elsewhere the fitted
    # value is the fit's start; bench/SPEED_PROTOCOL.md, the amendment on MLA decode's compute side)
    mla_compute = _per_engine([r for r in mla if r["compute_rows"] > 0], gpus, ["kv_dtype"], ["compute_eff"])
    for generation in sorted(set(gemm_df.generation)):
        ceiling = READ_CEILING[generation]
        # the generation's own fused-MoE entry: the median over the engines of their `moe` entries
        own = [entry["moe"] for (g, _), entry in moe.items() if g == generation]
        print(f"# {generation}\n    moe:")
        for dtype in CATALOG_FORMAT:
            measured = [by_dtype[dtype] for by_dtype in own if dtype in by_dtype]
            if measured:
                print(_moe_line("      ", dtype, pd.DataFrame(measured).median(), ceiling))
        if generation in prefill.index:
            print(f"    prefill_attention_compute_efficiency: {_number(prefill.compute_eff[generation])}\n"
                  f"    prefill_attention_row_positions: {_number(prefill.row_positions[generation])}")
        # the generation's attention.<bits>.latent_compute_efficiency: the median over its engines that have one
        own_compute = mla_compute[mla_compute.generation == generation].groupby("kv_dtype").compute_eff.median()
        for kv_dtype, value in own_compute.items():
            print(f"    # attention.{KV_BITS[kv_dtype]}: latent_compute_efficiency: {_number(value)}")
        print("    engines:")
        for engine in ENGINES:
            print(f"      {engine}:")
            sel = gemm_df[(gemm_df.generation == generation) & (gemm_df.engine == engine)]
            if len(sel):
                print("        gemm:")
            for r in sel.itertuples():
                print(f"          {CATALOG_FORMAT[r.dtype]}: {{launch_us: {_number(r.launch_us)}, read_efficiency: "
                      f"{_number(min(r.read_eff, ceiling))}, compute_efficiency: {_number(r.eff_max)}, "
                      f"half_m: {_number(r.m_half)}}}")
            entry = moe.get((generation, engine))
            if entry:
                if entry["kernel"]:
                    print(f"        moe_kernel: {entry['kernel']}")
                print("        moe:")
                for dtype, r in entry["moe"].items():
                    print(_moe_line("          ", dtype, r, ceiling))
                if entry["alternatives"]:
                    print("        moe_kernels:")
                for name, by_dtype in entry["alternatives"].items():
                    print(f"          {name}:")
                    for dtype, r in by_dtype.items():
                        print(_moe_line("            ", dtype, r, ceiling))
            sel = dec_df[(dec_df.generation == generation) & (dec_df.engine == engine)]
            if len(sel):
                print("        attention:")
            for r in sel.itertuples():
                latent = mla_df[(mla_df.generation == generation) & (mla_df.engine == engine) & (mla_df.kv_dtype == r.kv_dtype)]
                part = f", latent_read_efficiency: {_number(min(latent.latent_eff.iloc[0], ceiling))}" if len(latent) else ""
                computed = mla_compute[(mla_compute.generation == generation) & (mla_compute.engine == engine)
                                       & (mla_compute.kv_dtype == r.kv_dtype)]
                if len(computed):
                    part += f", latent_compute_efficiency: {_number(computed.compute_eff.iloc[0])}"
                print(f"          {KV_BITS[r.kv_dtype]}: {{launch_us: {_number(r.launch_us)}, kv_read_efficiency: "
                      f"{_number(min(r.kv_eff, ceiling))}{part}}}")
            for name, fits in (("mla_prefill_compute_efficiency", mla_prefill),
                               ("prefill_attention_compute_efficiency", mha_prefill)):
                sel = fits[(fits.generation == generation) & (fits.engine == engine)]
                if len(sel):
                    print(f"        {name}: {_number(sel.compute_eff.iloc[0])}")
    ar = pd.DataFrame(ar_rows)
    ar = ar[ar.impl.isin(ENGINES)]
    # an all-reduce is the interconnect's: group by the catalog's kind (RTX PRO 6000 Server is a PCIe Blackwell)
    ar["kind"] = ar.gpu.map(lambda s: gpus[s].interconnect)
    ar["generation"] = ar.gpu.map(lambda s: gpus[s].generation)
    columns = ["small_lat_us", "small_algbw_gbs", "large_lat_us", "large_busbw_gbs"]
    in_host, across = ar[~ar.across_hosts], ar[ar.across_hosts]
    print("# interconnects")
    for engine in (None, *ENGINES):  # the engines' median first, then each engine's own
        rows = in_host if engine is None else in_host[in_host.impl == engine]
        by_gpu = rows.groupby(["kind", "generation", "gpu", "tp"])[columns].median().reset_index()
        fits = by_gpu.groupby(["kind", "generation", "tp"])[columns].median().reset_index()
        systems = by_gpu.groupby(["kind", "generation"]).gpu.apply(
            lambda s: ",".join(f"{g} up to {NODE_GPUS[g]} GPUs" if g in NODE_GPUS else g for g in sorted(set(s))))
        for (kind, generation), sel in fits.groupby(["kind", "generation"]):
            who = f"comm/{engine}/" if engine else "comm/{vllm,sglang,trtllm}/ (medians over the engines)"
            print(f"  - kind: {kind}\n    generation: {generation}" + (f"\n    engine: {engine}" if engine else "")
                  + f"\n    source: \"aiconfigurator-core 0.12.0 systems/data/{{{systems[(kind, generation)]}}}/{who} "
                  f"(CUDA-graph rows; medians over the GPUs)\"\n    allreduce:")
            print_fits(row for row in sel.itertuples() if row.tp <= 8)
    # groups across the hosts of one NVLink domain (NVL72 trays): each kind's, of no generation, the measured parts
    # serving the kind's other ones (bench/SPEED_PROTOCOL.md, the amendment on a TP group across NVL72 trays)
    for engine in (None, *ENGINES):
        rows = across if engine is None else across[across.impl == engine]
        by_gpu = rows.groupby(["kind", "gpu", "tp"])[columns].median().reset_index()
        for kind, sel in by_gpu.groupby("kind")[["gpu", "tp", *columns]]:
            fits = sel.groupby("tp")[columns].median().reset_index()
            who = f"comm/{engine}/" if engine else "comm/{vllm,sglang,trtllm}/ (medians over the engines)"
            print(f"  - kind: {kind}\n    across_hosts: true" + (f"\n    engine: {engine}" if engine else "")
                  + f"\n    source: \"aiconfigurator-core 0.12.0 systems/data/{{{','.join(sorted(set(sel.gpu)))}}}/{who}"
                  " at more GPUs than a tray's 4 (CUDA-graph rows; medians over the GPUs); for the kind's other parts"
                  " of several hosts, a bound\"\n    allreduce:")
            print_fits(fits.itertuples())


def print_fits(rows) -> None:
    """An interconnect entry's `allreduce` lines."""
    for r in rows:
        print(f"      - {{tp: {r.tp}, latency_us: {_number(r.small_lat_us)}, bandwidth_gbps: "
              f"{_number(r.small_algbw_gbs)}, large_latency_us: {_number(r.large_lat_us)}, bus_bandwidth_gbps: "
              f"{_number(r.large_busbw_gbs)}}}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, help="unpacked aiconfigurator_core folder (default: pip download the wheel)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "planner-aic")
    ap.add_argument("--compute-form", choices=("hyperbolic", "exponential"), default="hyperbolic",
                    help="GEMM compute_eff(M): eff_max*M/(M+m_half) or eff_max*(1-exp(-M/m_half))")
    ap.add_argument("--yaml", action="store_true",
                    help="print only the per-engine entries of catalogs/performance.yaml (generations' `engines`, "
                         "interconnects with an `engine`)")
    args = ap.parse_args()
    root = args.data or fetch_wheel(args.cache)
    if args.yaml:
        sys.stdout = open(os.devnull, "w")  # the tables go nowhere; the YAML is printed at the end
    tables = Tables(root)
    catalog = {g["name"]: g for g in yaml.safe_load((REPO / "catalogs" / "gpus.yaml").read_text())["gpus"]}
    gpus = {s: Gpu(s, catalog[c], root / "systems" / f"{s}.yaml") for s, c in SYSTEMS.items()}
    with_data = [g for g in gpus.values() if any((tables.data / g.system).rglob("*.parquet"))]
    missing = sorted(set(gpus) - {g.system for g in with_data})

    print(f"# Kernel constants from {root}\n\nGPUs without kernel tables in the wheel: {', '.join(missing) or 'none'}")
    table("Peaks: planner catalog vs aiconfigurator system yaml",
          [dict(gpu=g.system, catalog=g.name, generation=g.generation, bw_gbs=g.bw / 1e9, aic_bw_gbs=g.aic_bw / 1e9,
                **{f"{d}_tflops": g.peak(d) / 1e12 for d in ("bfloat16", "fp8", "nvfp4")},
                **{f"aic_{d}_tflops": g.aic_peak(d) / 1e12 for d in ("bfloat16", "fp8", "nvfp4")}) for g in with_data],
          ["gpu", "catalog", "generation", "bw_gbs", "aic_bw_gbs", "bfloat16_tflops", "aic_bfloat16_tflops",
           "fp8_tflops", "aic_fp8_tflops", "nvfp4_tflops", "aic_nvfp4_tflops"])

    gemm_rows = [r for g in with_data for e in ENGINES for r in gemm(g, tables, e, args.compute_form)]
    table(f"1. GEMM ({args.compute_form} compute_eff); err = median/p90 |rel err|", gemm_rows,
          ["gpu", "engine", "dtype", "kernel", "launch_us", "read_eff", "eff_max", "m_half", "err_small", "err_large",
           "peak_tflops", "aic_peak_tflops", "file"])
    generation_summary("1. GEMM", gemm_rows, gpus, ["engine", "dtype"], ["launch_us", "read_eff", "eff_max", "m_half"])

    moe_rows, ratio_rows = [], []
    for g in with_data:
        for e in ENGINES:
            fits, ratios = moe(g, tables, e)
            moe_rows += fits
            ratio_rows += ratios
    moe_rows += shared_kernel_rows(moe_rows)
    table("2. Fused MoE (balanced routing, ep=1, every moe_tp); compute_eff(x = tokens*k/D); column_ps per output "
          "column of a touched expert; err_sliced: rows at moe_tp >= 4; slope = us per expert held",
          moe_rows, ["gpu", "engine", "dtype", "kernel", "primary", "launch_us", "read_eff", "eff_max", "x_half", "column_ps",
                     "activation_passes", "err_all", "err_sliced", "err_small", "err_large", "slope_us", "slope_se_us", "slope_median_us", "groups",
                     "file"])
    generation_summary("2. Fused MoE", moe_rows, gpus, ["engine", "dtype", "kernel"],
                       ["launch_us", "read_eff", "eff_max", "x_half", "column_ps", "activation_passes", "slope_us",
                        "slope_se_us"])
    table("2b. MoE t(4 tokens) / t(1 token): measured (balanced routing) vs fitted model", ratio_rows,
          ["gpu", "engine", "dtype", "shape", "t1_us", "t4_us", "ratio", "model_balanced", "model_random"])

    dec = [r for g in with_data for e in ENGINES for r in decode_attention(g, tables, e)]
    table("3a. Decode attention (GQA/MHA, window 0); err small = kv < 16 MB, large = kv >= 256 MB", dec,
          ["gpu", "engine", "kv_dtype", "kernel", "launch_us", "kv_eff", "err_small", "err_large", "file"])
    generation_summary("3a. Decode attention", dec, gpus, ["engine", "kv_dtype"], ["launch_us", "kv_eff"])
    mla = [r for g in with_data for e in ENGINES for r in mla_decode(g, tables, e)]
    table("3b. MLA decode (576-wide latent)", mla,
          ["gpu", "engine", "kv_dtype", "launch_us", "latent_eff", "compute_eff", "compute_rows", "err_small", "err_large",
           "file"])
    generation_summary("3b. MLA decode", mla, gpus, ["engine", "kv_dtype"],
                       ["launch_us", "latent_eff", "compute_eff", "compute_rows"])
    free = [r for g in with_data for e in ENGINES for r in prefill_attention(g, tables, e)]
    columns = ["gpu", "engine", "kind", "launch_us", "compute_eff", "row_positions", "err_all", "err_short", "err_long",
               "file"]
    table("3c. Prefill attention (causal, bf16), every term fitted", free, columns)
    rows_held = generation_row_positions(free, gpus)
    pre = [r for g in with_data for e in ENGINES for r in prefill_attention(g, tables, e, rows_held[g.generation])]
    table("3d. Prefill attention, row_positions held at the generation's", pre, columns)
    generation_summary("3d. Prefill attention", pre, gpus, ["engine", "kind"], ["launch_us", "compute_eff",
                                                                                "row_positions"])
    table("3e. Prefill attention per generation: the median over the engines and kinds",
          [dict(generation=g, prefill_attention_compute_efficiency=e, prefill_attention_row_positions=rows_held[g])
           for g, e in _per_engine(pre, gpus, ["kind"], ["compute_eff"]).groupby("generation").compute_eff.median()
           .items()], ["generation", "prefill_attention_compute_efficiency", "prefill_attention_row_positions"])

    ar_rows, cross_rows = [], []
    for g in with_data:
        fits, cross = all_reduce(g, tables)
        ar_rows += fits
        cross_rows += cross
    table("4. All-reduce (CUDA-graph custom AR of each engine; NCCL half); small <= 1 MiB, large >= 64 MiB",
          ar_rows, ["gpu", "impl", "tp", "across_hosts", "small_lat_us", "small_algbw_gbs", "small_busbw_gbs",
                    "small_err", "large_lat_us", "large_algbw_gbs", "large_busbw_gbs", "large_err", "file"])
    generation_summary("4. All-reduce (groups within a host)", [r for r in ar_rows if not r["across_hosts"]], gpus,
                       ["impl", "tp"], ["small_lat_us", "small_algbw_gbs", "large_lat_us", "large_busbw_gbs"])
    table("4b. Engine all-reduce vs NCCL: largest size still >5% faster than NCCL; ratio at 64 tok x 7168",
          cross_rows, ["gpu", "engine", "tp", "last_faster_bytes", "max_bytes", "ratio_64tok_7168"])

    if args.yaml:
        sys.stdout = sys.__stdout__
        print_catalog_yaml(gpus, gemm_rows, moe_rows, dec, mla, pre, ar_rows)
        return

    floor = [small_kernel_floor(g, tables, e) for g in with_data for e in ENGINES]
    table("5. Small-kernel floor, us (median of the 10 fastest rows per table)", floor,
          ["gpu", "engine", "gemm_bf16", "quant_apply", "mla_bmm", "decode_attn"])
    generation_summary("5. Small-kernel floor", floor, gpus, ["engine"],
                       ["gemm_bf16", "quant_apply", "mla_bmm", "decode_attn"])


if __name__ == "__main__":
    main()
