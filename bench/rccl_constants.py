#!/usr/bin/env python3
"""The large-message all-reduce on Infinity Fabric, fitted to RCCL's measured all-reduce on 8 x MI300X
(bench/SPEED_PROTOCOL.md, the amendment on the large-message all-reduce on Infinity Fabric).

Source: bench/data/rccl-allreduce-mi300x.csv, transcribed from AMD, "Understanding RCCL Bandwidth and xGMI Performance
on AMD Instinct MI300X" (ROCm blogs, 2025-03-02; github.com/ROCm/rocm-blogs
blogs/software-tools-optimization/mi300x-rccl-xgmi/README.md): rccl-tests all_reduce_perf over 8 GPUs, RCCL 2.22.3,
ROCm 6.3, one process per GPU, graph off, out-of-place float sums; the rows of 64 MiB and up (the large regime of
bench/kernel_constants.py `all_reduce`).

The form is kernel_constants.py's: time = latency + bytes / algorithm bandwidth, least squares on the log of the time;
bus bandwidth = 2 (tp - 1) / tp x the algorithm bandwidth (the catalog's `bus_bandwidth_gbps`).

Standalone: not imported by planner, not run by tests.
  python bench/rccl_constants.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from kernel_constants import err_stats, fit_log  # noqa: E402

DATA = Path(__file__).parent / "data" / "rccl-allreduce-mi300x.csv"
TP = 8  # the blog's run: every GPU of the node
LARGE = 64 * 2**20  # the large regime's smallest message (kernel_constants.py)


def main() -> None:
    rows = pd.read_csv(DATA)
    rows = rows[rows.bytes >= LARGE]
    nbytes = rows.bytes.to_numpy(float)
    t = rows.time_us.to_numpy(float) * 1e-6

    def model(p, idx):
        return p[0] + nbytes[idx] / p[1]

    latency, algbw = fit_log(model, [10e-6, 1e11], [0, 1e8], [1e-2, 1e13], t)
    print(f"{len(rows)} rows of {int(nbytes.min())}-{int(nbytes.max())} bytes at TP {TP}; "
          f"error {err_stats(model([latency, algbw], slice(None)), t)}")
    print(f"  - {{tp: {TP}, large_latency_us: {latency * 1e6:.3g}, bus_bandwidth_gbps: "
          f"{algbw / 1e9 * 2 * (TP - 1) / TP:.3g}}}  (algorithm bandwidth {algbw / 1e9:.3g} GB/s)")


if __name__ == "__main__":
    main()
