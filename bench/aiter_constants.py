#!/usr/bin/env python3
"""Kernel-level speed constants for AMD Instinct GPUs, fitted to AITER's own tuned kernel tables.

Source: ROCm/aiter (MIT), `aiter/configs/**/*tuned*.csv` at commit e4048607a535 (2026-08-22). Every row is one
shape's best kernel as AITER's tuners timed it: device time `us` summed from torch.profiler over 101 iterations
with rotating deep copies of the arguments (aiter/test_common.py `perftest`), so the weights are read cold from
HBM. bench/SPEED_PROTOCOL.md (the AITER amendment) says which rows count and how; this script applies it:
  * cu_num 304 -> cdna3 (timed against MI300X's catalog bandwidth and peaks), 256 -> cdna4 (MI355X's);
  * GEMM formats bf16 / fp8 (per-token) / fp8-block / fp4, fitted with bench/kernel_constants.py's gemm_fit;
  * fused-MoE formats bf16 / fp8 / fp8-block / fp4 / w4a16 (bf16 activations on 4-bit weights: the
    a16w4 and int4 tables), fitted with kernel_constants.moe_fit under the tuner's uniformly random routing;
  * the kernel floor: the median of the 10 fastest bf16 GEMM rows.

Standalone: not imported by planner, not run by tests.
  git clone https://github.com/ROCm/aiter && git -C aiter checkout e4048607a535
  python bench/aiter_constants.py --aiter aiter
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from kernel_constants import READ_CEILING, err_stats, gemm_fit, moe_fit

REPO = Path(__file__).resolve().parents[1]
# AITER's CU count -> (planner generation, the catalog GPU whose bandwidth and peaks the rows are timed against)
CU_GENERATIONS = {304: ("cdna3", "mi300x"), 256: ("cdna4", "mi355x")}
# bytes per weight and the catalog peak each format computes at
# w4a16: bf16 activations on 4-bit weights with a scale per 32 (4.25 bits: the MX layout's e8m0 scale; the int4 rows'
# scale width is not in their table and is counted the same), computed at the 16-bit peak
FORMATS = {"bf16": (2.0, "bf16"), "fp8": (1.0, "fp8"), "fp8-block": (1.0, "fp8"), "fp4": (0.5, "fp4"),
           "w4a16": (4.25 / 8, "bf16")}
FLOOR_ROWS = 10


class Gpu:
    """The attributes kernel_constants' fits read: bandwidth, generation, peaks."""

    def __init__(self, entry: dict, generation: str):
        self.system = entry["name"]
        self.generation = generation
        self.bw = entry["memory_bandwidth_gbps"] * 1e9
        self.tflops = entry["dense_tflops"]

    def peak(self, catalog_format: str) -> float:
        return self.tflops.get(catalog_format, float("nan")) * 1e12


def tuned_tables(root: Path, pattern: str) -> pd.DataFrame:
    """Every tuned (not untuned) CSV under aiter/configs matching `pattern`, with its path, at the two CU counts."""
    frames = []
    for path in sorted((root / "aiter" / "configs").rglob(pattern)):
        if "untuned" in path.name:
            continue
        frame = pd.read_csv(path)
        if "us" not in frame.columns or "cu_num" not in frame.columns:
            continue
        frame["file"] = str(path.relative_to(root))
        frames.append(frame[frame.cu_num.isin(CU_GENERATIONS)])
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return rows[(rows.us > 0) & np.isfinite(rows.us)] if len(rows) else rows


def gemm_rows(root: Path) -> dict[str, pd.DataFrame]:
    """Rows m, n, k, latency (ms), cu_num, file per GEMM format; one row per shape (its fastest)."""

    def weights(rows: pd.DataFrame, dtype: str) -> pd.DataFrame:
        return rows[rows.q_dtype_w.astype(str).str.contains(dtype)] if "q_dtype_w" in rows.columns else rows

    bf16 = tuned_tables(root, "*bf16_tuned_gemm*.csv")
    if "dtype" in bf16.columns:
        bf16 = bf16[bf16.dtype.isna() | (bf16.dtype == "torch.bfloat16")]
    per_token = pd.concat([tuned_tables(root, "*a8w8_tuned_gemm*.csv"),
                           tuned_tables(root, "*a8w8_bpreshuffle_tuned_gemm*.csv")], ignore_index=True)
    block = tuned_tables(root, "*a8w8_blockscale*tuned_gemm*.csv")
    out = {"bf16": bf16, "fp8": weights(per_token, "float8"), "fp8-block": weights(block, "float8"),
           "fp4": tuned_tables(root, "*a4w4_blockscale_tuned_gemm*.csv")}
    for name, rows in out.items():
        rows = rows.rename(columns={"M": "m", "N": "n", "K": "k"})
        rows = rows.assign(latency=rows.us / 1e3).sort_values("us")
        out[name] = rows.drop_duplicates(["cu_num", "m", "n", "k"])
    return out


def moe_rows(root: Path) -> dict[str, pd.DataFrame]:
    """Rows in kernel_constants' MoE columns per format: `inter_dim` is the rank's slice as run (moe_tp 1)."""
    rows = pd.concat([tuned_tables(root, "*tuned_fmoe*.csv"), tuned_tables(root, "tuned_grouped_fmoe.csv")],
                     ignore_index=True)
    rows = rows.rename(columns={"token": "num_tokens", "model_dim": "hidden_size", "inter_dim": "inter_size",
                                "expert": "num_experts"})
    # a top-k of -1 marks rows routed otherwise than the tuner's top-k (no routing the model describes)
    rows = rows[(rows.topk >= 1) & (rows.num_experts >= rows.topk)]
    rows = rows.assign(moe_tp_size=1, latency=rows.us / 1e3)
    a, w, q = rows.q_dtype_a.astype(str), rows.q_dtype_w.astype(str), rows.q_type.astype(str)
    kinds = {
        "bf16": (q == "QuantType.No") & w.str.endswith("bfloat16"),
        "fp8": (q == "QuantType.per_Token") & w.str.contains("float8"),
        "fp8-block": (q == "QuantType.per_1x128") & w.str.contains("float8"),
        "fp4": (q == "QuantType.per_1x32") & w.str.contains("float4") & a.str.contains("float4"),
        "w4a16": (q == "QuantType.per_1x32") & (w.str.contains("float4") | w.str.endswith("int4"))
                 & a.str.endswith("bfloat16"),
    }
    keys = ["cu_num", "num_tokens", "hidden_size", "inter_size", "num_experts", "topk"]
    return {name: rows[mask].sort_values("us").drop_duplicates(keys) for name, mask in kinds.items()}


def per_generation(tables: dict[str, pd.DataFrame], gpus: dict[int, Gpu], min_rows: int):
    """(format, GPU, its rows, bytes per weight, peak) for every format a generation has rows of and a peak for."""
    for name, rows in tables.items():
        bpw, peak_format = FORMATS[name]
        for cu, gpu in gpus.items():
            own, peak = rows[rows.cu_num == cu], gpu.peak(peak_format)
            if len(own) >= min_rows and np.isfinite(peak):
                yield name, gpu, own, bpw, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aiter", type=Path, required=True, help="a ROCm/aiter checkout (its aiter/configs folder)")
    args = ap.parse_args()
    catalog = {g["name"]: g for g in yaml.safe_load((REPO / "catalogs" / "gpus.yaml").read_text())["gpus"]}
    gpus = {cu: Gpu(catalog[name], generation) for cu, (generation, name) in CU_GENERATIONS.items()}
    gemms, moes = gemm_rows(args.aiter), moe_rows(args.aiter)

    print("# GEMM: launch + max(bytes / (bandwidth x read), FLOPs / (peak x eff_max M / (M + half_m)))")
    print(f"{'generation':10s} {'format':9s} {'rows':>5s} {'launch_us':>9s} {'read':>6s} {'eff_max':>7s} "
          f"{'half_m':>7s}  err M<=16 / M>=1024  files")
    for name, gpu, own, bpw, peak in per_generation(gemms, gpus, min_rows=1):
        p, pred, m, t, _ = gemm_fit(gpu, own, bpw, peak, "hyperbolic", np.ones(len(own), bool))
        print(f"{gpu.generation:10s} {name:9s} {len(own):5d} {p[0] * 1e6:9.2f} {p[1]:6.3f} {p[2]:7.3f} {p[3]:7.1f}"
              f"  {err_stats(pred, t, m <= 16)} / {err_stats(pred, t, m >= 1024)}  {own.file.nunique()}")

    print("(CDNA4's bf16 GEMM rates are not used: half of its M <= 8 rows over 256 MB read faster than HBM, so those rows"
          " were not cold; bench/SPEED_PROTOCOL.md, the AITER amendment's correction)")
    print("\n# Fused MoE (random routing): launch + max(touched bytes / (bandwidth x read), FLOPs / (peak x eff)"
          " + column_ps per output column of a touched expert; routed rows' activations read with the weights)")
    print(f"{'generation':10s} {'format':9s} {'rows':>5s} {'launch_us':>9s} {'read':>6s} {'eff_max':>7s} "
          f"{'x_half':>7s} {'column_ps':>9s} {'passes':>6s}  err all / T<=16 / T>=1024  ceiling")
    for name, gpu, own, bpw, peak in per_generation(moes, gpus, min_rows=5):
        fit, _ = moe_fit(gpu, own, bpw, peak, balanced=False, l2_mb=0)
        print(f"{gpu.generation:10s} {name:9s} {len(own):5d} {fit['launch_us']:9.2f} {fit['read_eff']:6.3f} "
              f"{fit['eff_max']:7.3f} {fit['x_half']:7.1f} {fit['column_ps']:9.1f} {fit['activation_passes']:6.2f}  "
              f"{fit['err_all']} / {fit['err_small']} / {fit['err_large']}  {READ_CEILING[gpu.generation]}")

    print("\n# Kernel floor: median of the 10 fastest bf16 GEMM rows (device time, us)")
    for cu, gpu in gpus.items():
        own = gemms["bf16"][gemms["bf16"].cu_num == cu]
        floor = np.median(np.sort(own.us.to_numpy())[:FLOOR_ROWS]) if len(own) >= FLOOR_ROWS else float("nan")
        print(f"{gpu.generation:10s} {floor:.2f} us over {min(len(own), FLOOR_ROWS)} of {len(own)} rows")


if __name__ == "__main__":
    main()
