#!/usr/bin/env python3
"""SGLang's DeepSeek Sparse Attention prefill kernels, fitted to aiconfigurator's measured tables (bench/SPEED_PROTOCOL.md,
the amendment on SGLang's sparse prefill).

Source: NVIDIA aiconfigurator-core 0.12.0 (Apache-2.0), systems/data/{h200_sxm,b200_sxm}/sparse_attention/sglang/0.5.14/:
  * glm5_dsa_attn_module_perf    flash_mla_sparse_fwd alone, GLM-5's 64 heads on one rank, top-k 2048
  * glm5_mqa_logits_module_perf  deep_gemm.fp8_mqa_logits alone (the indexer's 32 heads x 128)
  * glm5_topk_module_perf        fast_topk_transform_fused alone (score_mode "flat")
  * dsa_context_module_perf      the whole attention module per layer, by kernel_source (sglang_dsa_indexer_<kernel>)
Columns: latency ms per call; batch_size sequences of isl new tokens after `step` cached ones.

Every constant is a fraction of planner's own peaks (catalogs/gpus.yaml), in the form planner's timer uses
(planner.estimator.performance `_sparse_prefill`):
  * a FlashMLA kernel's time per prompt token = head_block-padded heads x top-k x 4 x latent_dim FLOPs (planner's
    per-position MLA FLOPs) / (16-bit peak x compute_efficiency);
  * trtllm's time per prompt token = top-k latents of latent_dim bytes at FP8 / (bandwidth x read_efficiency);
  * the logits: 2 x index heads x index head dim FLOPs per (query, earlier key) / (FP8 peak x logits_compute_efficiency);
  * the top-k: topk_us per query whose context exceeds top-k.
flashmla_kv and trtllm are timed alone in no kernel table: their time is flash_mla_sparse_fwd's (kernel table) plus
the module's difference between them and flashmla_sparse at the same model, heads and length (the module's GEMMs,
indexer and cache writes are the same kernels on both sides).

Standalone: not imported by planner, not run by tests.
  python bench/dsa_constants.py --data /path/to/aiconfigurator_core
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import pandas as pd
import yaml

from kernel_constants import fetch_wheel

REPO = Path(__file__).resolve().parents[1]
# aiconfigurator system -> (planner GPU, planner generation, SGLang's flashmla_sparse head block on it:
# dsa_backend.py _forward_flashmla_sparse `required_padding = 128 if self.device_sm_major >= 10 else 64`)
SYSTEMS = {"h200_sxm": ("h200-sxm", "hopper", 64), "b200_sxm": ("b200", "blackwell", 128)}
FP8_KERNEL = {"hopper": "flashmla_kv", "blackwell": "trtllm"}  # SGLang's FP8-KV prefill kernel from 0.5.10
FLASHMLA_KV_BLOCK = 64  # flashmla_kv_num_q_heads: 64 for a rank of at most 64 heads
TOPK = 2048  # GLM-5 and DeepSeek-V3.2 index_topk (config.json)
LATENT_DIM = 576  # kv_lora_rank 512 + qk_rope_head_dim 64
INDEX_HEADS, INDEX_DIM = 32, 128  # GLM-5 config.json index_n_heads, index_head_dim: the logits table's model
MODULE_MODEL = "zai-org/GLM-5-FP8"
MODULE_HEADS = (8, 16)  # heads a rank runs at TP 8 / TP 4 of GLM-5's 64
MODULE_LENGTHS = (4096, 8192, 16384)  # above the dense threshold (index_topk)


def per_query_flops(heads: int) -> float:
    return heads * TOPK * 4 * LATENT_DIM


def fit(root: Path, system: str) -> dict:
    name, generation, block = SYSTEMS[system]
    gpu = next(g for g in yaml.safe_load((REPO / "catalogs" / "gpus.yaml").read_text())["gpus"] if g["name"] == name)
    bf16, fp8 = gpu["dense_tflops"]["bf16"] * 1e12, gpu["dense_tflops"]["fp8"] * 1e12
    bandwidth = gpu["memory_bandwidth_gbps"] * 1e9
    folder = root / "systems" / "data" / system / "sparse_attention" / "sglang" / "0.5.14"

    attn = pd.read_parquet(folder / "glm5_dsa_attn_module_perf.parquet")
    attn = attn[attn.isl >= 1024]
    sparse_s = statistics.median(attn.latency / 1e3 / (attn.batch_size * attn.isl))  # per query, any context
    padded = math.ceil(attn.num_heads.iloc[0] / block) * block
    sparse_eff = per_query_flops(padded) / sparse_s / bf16

    logits = pd.read_parquet(folder / "glm5_mqa_logits_module_perf.parquet")
    pairs = logits.batch_size * (logits.isl * logits.step + logits.isl * (logits.isl + 1) / 2)
    big = pairs >= 4 * 2**20  # past the launch floor
    logits_eff = statistics.median(2 * INDEX_HEADS * INDEX_DIM * pairs[big] / (logits.latency[big] / 1e3) / fp8)

    topk = pd.read_parquet(folder / "glm5_topk_module_perf.parquet")
    topk = topk[topk.score_mode == "flat"]
    past = topk.batch_size * (topk.isl - (TOPK - topk.step).clip(lower=0)).clip(lower=0)
    topk_us = statistics.median(topk.latency[past >= 1024] * 1e3 / past[past >= 1024])

    module = pd.read_parquet(folder / "dsa_context_module_perf.parquet")
    module = module[(module.model == MODULE_MODEL) & (module.batch_size == 1) & (module.step == 0)
                    & module.num_heads.isin(MODULE_HEADS) & module.isl.isin(MODULE_LENGTHS)]
    kernel = FP8_KERNEL[generation]
    times = module.pivot_table(index=["num_heads", "isl"], columns="kernel_source", values="latency")
    own = times[f"sglang_dsa_indexer_{kernel}"]
    difference = (own - times["sglang_dsa_indexer_flashmla_sparse"]) / 1e3 / own.index.get_level_values("isl")
    kernel_s = statistics.median(sparse_s + difference)  # per query
    entry: dict = {"sparse_prefill": {16: {"kernel": "flashmla_sparse", "head_block": block,
                                           "compute_efficiency": round(sparse_eff, 3)}},
                   "indexer": {"logits_compute_efficiency": round(logits_eff, 3), "topk_us": round(topk_us, 4)}}
    if kernel == "flashmla_kv":
        entry["sparse_prefill"][8] = {"kernel": kernel, "head_block": FLASHMLA_KV_BLOCK,
                                      "compute_efficiency": round(per_query_flops(FLASHMLA_KV_BLOCK) / kernel_s / bf16, 3)}
    else:
        entry["sparse_prefill"][8] = {"kernel": kernel, "read_efficiency": round(TOPK * LATENT_DIM / kernel_s / bandwidth, 3)}
    print(f"# {system} ({name}, {generation}): flash_mla_sparse_fwd {sparse_s * 1e6:.3f} us a query at {padded} heads; "
          f"{kernel} {kernel_s * 1e6:.3f} us a query (from {len(difference)} module pairs, "
          f"{min(sparse_s + difference) * 1e6:.3f}-{max(sparse_s + difference) * 1e6:.3f})")
    return {generation: entry}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, help="unpacked aiconfigurator_core folder (default: pip download the wheel)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "planner-aic")
    args = ap.parse_args()
    root = args.data or fetch_wheel(args.cache)
    out: dict = {}
    for system in SYSTEMS:
        out.update(fit(root, system))
    print(yaml.safe_dump(out, sort_keys=False))


if __name__ == "__main__":
    main()
