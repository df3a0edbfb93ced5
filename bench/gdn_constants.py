#!/usr/bin/env python3
"""The Gated DeltaNet prefill kernels, fitted to aiconfigurator's measured tables (bench/SPEED_PROTOCOL.md, the
amendment on the Gated DeltaNet prefill kernels).

Source: NVIDIA aiconfigurator-core 0.12.0 (Apache-2.0), systems/data/<gpu>/linear_attention/{sglang/0.5.14,
vllm/0.24.0}/gdn_perf.parquet, phase "context": one GDN layer's causal_conv1d_fn and its chunked delta rule
(chunk_gated_delta_rule: FLA's Triton kernels; vLLM's chunk_gated_delta_rule_flashinfer / _triton, the kernel its
release picks on that GPU), every Qwen3.5 model (its value heads on one rank, d_k = d_v = 128), batch_size sequences
of seq_len tokens each. Columns: latency ms per call.

The form is planner's (planner.estimator.performance `_delta_prefill`): per layer,
    intercept + ceil(seq_len / 64) x chunk_us + batch x seq_len x value heads x F / (16-bit peak x compute_efficiency)
with F = 2 C d_k + 4 C (d_k + d_v) + 6 d_k d_v FLOPs per token and value head (C = 64, the kernels' CHUNK_SIZE): the
state pass steps through a sequence's chunks in order, the rest runs in parallel over chunks and heads. The intercept
(the kernels' launches) is fitted but not used: planner counts a layer's launches elsewhere. Least squares on the log
of the time, the GPUs of a generation together (each at its own 16-bit peak, catalogs/gpus.yaml).

Standalone: not imported by planner, not run by tests.
  python bench/gdn_constants.py --data /path/to/aiconfigurator_core
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

REPO = Path(__file__).resolve().parents[1]
CHUNK = 64  # FLA CHUNK_SIZE (SGLang kernels/ops/attention/fla/chunk.py @ v0.5.23; vLLM layers/fla/ops)
KEY_DIM = VALUE_DIM = 128  # every Qwen3.5 / Qwen3-Next config: linear_key_head_dim, linear_value_head_dim
FLOPS_PER_HEAD_TOKEN = 2 * CHUNK * KEY_DIM + 4 * CHUNK * (KEY_DIM + VALUE_DIM) + 6 * KEY_DIM * VALUE_DIM
# aiconfigurator system -> (planner GPU, planner generation)
SYSTEMS = {
    "h100_sxm": ("h100-sxm", "hopper"), "h200_sxm": ("h200-sxm", "hopper"),
    "b200_sxm": ("b200", "blackwell"), "b300_sxm": ("b300", "blackwell-ultra"), "gb200": ("gb200", "blackwell"),
    "gb300": ("gb300", "blackwell-ultra"), "l40s": ("l40s", "ada"),
    "rtx_pro_6000_server": ("rtx-pro-6000", "blackwell-sm120"),
}
ENGINES = {"sglang": "0.5.14", "vllm": "0.24.0"}


def table(root: Path, system: str, engine: str) -> pd.DataFrame | None:
    path = root / "systems" / "data" / system / "linear_attention" / engine / ENGINES[engine] / "gdn_perf.parquet"
    if not path.exists():
        return None
    rows = pd.read_parquet(path)
    rows = rows[rows.phase == "context"]
    if not rows.kernel_source.str.startswith("chunk_gated_delta_rule").any():
        return None  # the convolution alone (aiconfigurator's a100 table): the chunked rule is not timed
    keys = ["model_name", "num_v_heads", "batch_size", "seq_len"]
    summed = rows.groupby(keys + ["kernel_source"]).latency.median().reset_index()
    kernel = sorted(k for k in summed.kernel_source.unique() if k.startswith("chunk_gated_delta_rule"))
    layer = summed.groupby(keys).agg(latency=("latency", "sum"), kernels=("kernel_source", "count")).reset_index()
    layer = layer[layer.kernels == 2]  # both kernels measured at that point
    layer["kernel"] = kernel[0]
    return layer


def fit(root: Path, generation: str, engine: str) -> dict | None:
    gpus = {g["name"]: g for g in yaml.safe_load((REPO / "catalogs" / "gpus.yaml").read_text())["gpus"]}
    parts = []
    for system, (name, gen) in SYSTEMS.items():
        if gen != generation:
            continue
        rows = table(root, system, engine)
        if rows is None:
            continue
        rows["peak"] = gpus[name]["dense_tflops"]["bf16"] * 1e12
        rows["system"] = system
        parts.append(rows)
    if not parts:
        return None
    rows = pd.concat(parts)
    chunks = np.ceil(rows.seq_len.to_numpy() / CHUNK)
    flops = (rows.batch_size * rows.seq_len * rows.num_v_heads).to_numpy() * FLOPS_PER_HEAD_TOKEN
    peak = rows.peak.to_numpy()
    measured = rows.latency.to_numpy() * 1e-3

    def model(p: np.ndarray) -> np.ndarray:
        intercept_us, chunk_us, efficiency = p
        return intercept_us * 1e-6 + chunks * chunk_us * 1e-6 + flops / (peak * efficiency)

    solved = least_squares(lambda p: np.log(model(p) / measured), x0=[20.0, 1.0, 0.05],
                           bounds=([0.0, 0.0, 1e-4], [1e4, 1e3, 1.0]))
    intercept_us, chunk_us, efficiency = solved.x
    errors = np.abs(model(solved.x) / measured - 1)
    large = rows.batch_size * rows.seq_len >= 2048
    return {"generation": generation, "engine": engine, "kernel": sorted(rows.kernel.unique()),
            "systems": sorted(rows.system.unique()), "rows": len(rows), "intercept_us": intercept_us,
            "chunk_us": chunk_us, "compute_efficiency": efficiency,
            "median_error": float(statistics.median(errors)),
            "median_error_2048_tokens_up": float(statistics.median(errors[large.to_numpy()]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the unpacked aiconfigurator_core package")
    args = parser.parse_args()
    for generation in dict.fromkeys(gen for _, gen in SYSTEMS.values()):
        for engine in ENGINES:
            result = fit(args.data, generation, engine)
            if result is None:
                continue
            print(f"{generation:16s} {engine:6s} {','.join(result['kernel']):36s} rows {result['rows']:5d}  "
                  f"chunk_us {result['chunk_us']:.3g}  compute_efficiency {result['compute_efficiency']:.3g}  "
                  f"(intercept {result['intercept_us']:.3g} us)  median |error| {result['median_error']:.1%}, "
                  f"{result['median_error_2048_tokens_up']:.1%} at 2,048+ tokens  [{', '.join(result['systems'])}]")
    print(f"F = {FLOPS_PER_HEAD_TOKEN:,} FLOPs per token and value head")


if __name__ == "__main__":
    main()
