"""Predicted vs measured: engine start-up logs (bench/data/) run through planner's engine profiles.

    python bench/accuracy.py            # every point the profiles can reconstruct, then the v0.19 summary

For each point the script rebuilds the model (catalog entry, or a config for models the catalog lacks), the
precision, the engine flags and the GPU, asks planner.estimator.engines.engine_budget, and prints predicted and
measured weights, KV pool and maximum concurrency (llama.cpp: GPU weights, KV buffer, compute buffer) with
the relative error. The current profile follows vLLM v0.19; points from other releases are shown for
reference (their defaults and profiling differed, see each note) and are not held to the tolerances.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.model.architecture import Architecture, architecture_from_config, size_only_architecture_from_config
from planner.catalog.load import Catalog, load_catalog
from planner.estimator.engines import EngineBudget, EngineSettings, engine_budget
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.memory import GpuTarget, Request
from planner.units import GiB, MiB

DATA = Path(__file__).parent / "data"
V019_FILE = "vllm-v0.19-h100.jsonl"
VARIOUS_FILE = "engine-logs-various.jsonl"
TOLERANCES = {"weights": 0.01, "kv_pool": 0.03, "max_concurrency": 0.03}  # the bar for v0.19

# Models the catalog does not hold, from their config.json (huggingface.co/<id>/blob/main/config.json)
CODELLAMA_7B = dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=32, vocab_size=32016, max_position_embeddings=16384,
                    tie_word_embeddings=False, torch_dtype="bfloat16")
GLM_4_32B = dict(model_type="glm4", hidden_size=6144, intermediate_size=23040, num_hidden_layers=61,
                 num_attention_heads=48, num_key_value_heads=2, head_dim=128, vocab_size=151552,
                 max_position_embeddings=32768, attention_bias=True, tie_word_embeddings=False, torch_dtype="bfloat16")

# Qwen3.5-27B's text_config (huggingface.co/Qwen/Qwen3.5-27B config.json; the same text model as Qwen3.6-27B): 48 Gated
# DeltaNet layers and 16 gated full-attention layers, 3:1. planner counts qwen3_5 by size only until its family lands,
# which is enough here: the point checks the pool layout, not the weights.
QWEN35_27B = dict(model_type="qwen3_5_text", hidden_size=5120, intermediate_size=17408, num_hidden_layers=64,
                  num_attention_heads=24, num_key_value_heads=4, head_dim=256, vocab_size=248320,
                  max_position_embeddings=262144, tie_word_embeddings=False, torch_dtype="bfloat16",
                  full_attention_interval=4, linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_num_key_heads=16,
                  linear_num_value_heads=48, linear_value_head_dim=128, mamba_ssm_dtype="float32",
                  layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(64)])

# v0.19 checkpoints -> (catalog model, precision); RedHatAI's compressed-tensors checkpoints are the base
# model quantized: w4a16 = int4 (group 128), w8a8 = int8, fp8-dynamic = fp8 per channel
V019_MODELS = {
    "codellama/CodeLlama-7b-hf": (CODELLAMA_7B, None),
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", None),
    "Qwen/Qwen2.5-7B-Instruct": ("qwen2.5-7b", None),
    "RedHatAI/Qwen2.5-7B-Instruct-fp8-dynamic": ("qwen2.5-7b", "fp8"),
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16": ("llama-3.1-8b", "int4"),
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8": ("llama-3.1-8b", "int8"),
    "RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8": ("qwen2.5-7b", "int8"),
}
DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


@dataclass(frozen=True)
class Point:
    """One measured start-up and everything needed to replay it."""

    file: str
    index: int
    label: str
    engine: str
    model: str | dict[str, Any]
    gpu: str | float  # a catalog GPU, or the total CUDA reported in the log (GiB)
    context: int
    precision: str | None = None
    kv_dtype: str | None = None
    batch: int = 1
    tp: int = 1
    pp: int = 1
    settings: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    metrics: tuple[str, ...] | None = None  # only these, when the log's other figures do not apply (e.g. unknown quant)
    params: int | None = None  # a model planner counts by size only: its parameter count
    dp: int = 1  # data-parallel attention groups among the tp GPUs
    ep: int = 1
    all_to_all: str | None = None

    @property
    def current(self) -> bool:
        return self.file == V019_FILE


def _v019_points() -> list[Point]:
    points = []
    for index, record in enumerate(_records(V019_FILE)):
        model, quantized = V019_MODELS[record["model"]]
        quantized = quantized or ("fp8" if record["quant"] == "fp8" else None)  # --quantization fp8 (online)
        kv = None if record["kv_cache_dtype"] == "auto" else record["kv_cache_dtype"]
        points.append(Point(
            V019_FILE, index, record["model"].split("/")[-1], "vllm", model, "h100-sxm", record["max_model_len"],
            precision=quantized or DTYPES[record["dtype"]], kv_dtype=kv, tp=record["tp"], pp=record["pp"],
            settings=dict(gpu_memory_utilization=record["gpu_memory_utilization"],
                          max_num_batched_tokens=record["max_num_batched_tokens"], max_num_seqs=record["max_num_seqs"],
                          block_size=record["block_size"]),
        ))
    return points


def _various(index: int, label: str, engine: str, model: str | dict[str, Any], gpu: str | float, context: int,
             note: str, **kwargs: Any) -> Point:
    return Point(VARIOUS_FILE, index, label, engine, model, gpu, context, note=note, **kwargs)


V0 = "vLLM V0: profiled max_num_batched_tokens x max_num_seqs with its own sampler"
VARIOUS_POINTS = [
    _various(0, "Llama-3-8B v0.6.5", "vllm", "llama-3.1-8b", 79.22, 8192, V0, settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256)),
    _various(1, "Llama-3-8B tp2 v0.6.5", "vllm", "llama-3.1-8b", 79.22, 8192, V0, tp=2, settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256)),
    _various(2, "Llama-3.1-8B L40S v0.8.5", "vllm", "llama-3.1-8b", "l40s", 32768, "V1 v0.8.5; gmu 0.9 assumed by the collector", settings=dict(gpu_memory_utilization=0.9)),
    _various(3, "R1-Distill-Qwen-14B 2x4090", "vllm", "qwen2.5-14b", "rtx-4090", 131072, V0 + "; V0 had no free-memory check at start-up", tp=2, settings=dict(gpu_memory_utilization=0.98)),
    _various(4, "Qwen3-235B-A22B-FP8 tp4", "vllm", "qwen3-235b-a22b", "h100-sxm", 40960, "V1 mid-2025; LMCache connector", precision="fp8-block", tp=4, settings=dict(gpu_memory_utilization=0.9)),
    _various(5, "gpt-oss-120b v0.14.1", "vllm", "gpt-oss-120b", "h100-sxm", 131072, "weights only", precision="mxfp4"),
    _various(6, "gpt-oss-120b v0.10.1", "vllm", "gpt-oss-120b", "h100-sxm", 131072, "V1 Aug 2025", precision="mxfp4", settings=dict(gpu_memory_utilization=0.9)),
    _various(7, "gpt-oss-120b v0.11", "vllm", "gpt-oss-120b", "h100-sxm", 131072, "V1 Oct 2025, --max-num-batched-tokens 1024", precision="mxfp4", settings=dict(gpu_memory_utilization=0.95, max_num_batched_tokens=1024)),
    _various(8, "Llama-3.1-405B-FP8 tp8", "vllm", "llama-3.1-405b", "h100-sxm", 8192, "V0 v0.5.3; weights only", precision="fp8", tp=8),
    _various(10, "Qwen2.5-7B-AWQ RTX 4060", "vllm", "qwen2.5-7b", 8.00, 4096, V0, precision="awq", settings=dict(gpu_memory_utilization=0.7, max_num_batched_tokens=4096, max_num_seqs=256)),
    _various(12, "Phi-4 GPTQ gmu 0.15", "vllm", "phi-4", 79.25, 2048, V0, precision="gptq", settings=dict(gpu_memory_utilization=0.15, max_num_batched_tokens=2048, max_num_seqs=256)),
    _various(14, "DeepSeek-Coder-V2-Lite tp8 A100-40", "vllm", "deepseek-v2-lite", 39.39, 8192, V0 + "; 2 sequences, XFormers", precision="fp16", tp=8, settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=2, block_size=16)),
    _various(15, "DeepSeek-R1 tp8 H200", "vllm", "deepseek-v3", "h200-sxm", 128000, V0, precision="fp8-block", tp=8, settings=dict(gpu_memory_utilization=0.85, max_num_batched_tokens=32000, max_num_seqs=1024, block_size=16)),
    _various(16, "Llama-3.1-8B A10 128K", "vllm", "llama-3.1-8b", 22.07, 131072, V0 + "; chunked prefill", settings=dict(gpu_memory_utilization=0.9)),
    _various(17, "Qwen2.5-Math-1.5B 22 GiB", "vllm", "qwen2.5-1.5b", 22.06, 4096, V0, settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=4096, max_num_seqs=256)),
    _various(18, "Qwen2.5-Math-1.5B 44 GiB", "vllm", "qwen2.5-1.5b", 44.39, 4096, V0, settings=dict(gpu_memory_utilization=0.85, max_num_batched_tokens=4096, max_num_seqs=256)),
    _various(19, "Qwen2.5-1.5B T4 gmu 0.5", "vllm", "qwen2.5-1.5b", 14.56, 32768, V0, precision="fp16", settings=dict(gpu_memory_utilization=0.5)),
    _various(20, "Qwen2.5-0.5B T4", "vllm", "qwen2.5-0.5b", 14.56, 32768, V0, precision="fp16", settings=dict(gpu_memory_utilization=0.9)),
    _various(22, "Llama-3.2-3B T4", "vllm", "llama-3.2-3b", 14.74, 2048, V0, precision="fp16", settings=dict(gpu_memory_utilization=0.89, max_num_batched_tokens=2048, max_num_seqs=256)),
    _various(23, "Phi-4-mini A100-40", "vllm", "phi-4-mini", 39.56, 2048, V0 + "; model inferred by the collector", settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=2048, max_num_seqs=256)),
    _various(24, "Llama-3-8B A100-40", "vllm", "llama-3.1-8b", 39.50, 8192, V0 + "; activation 9.37 GiB: unknown flags", settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256)),
    _various(25, "Qwen2.5-7B V100 32K", "vllm", "qwen2.5-7b", 31.74, 32768, V0 + "; no chunked prefill on V100", precision="fp16", settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=32768, max_num_seqs=256)),
    _various(26, "R1-Distill-Qwen-7B V100", "vllm", "qwen2.5-7b", 31.74, 2048, V0, precision="fp16", settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=2048, max_num_seqs=256)),
    _various(27, "Qwen3-30B-A3B tp4 2080 Ti", "vllm", "qwen3-30b-a3b", 21.66, 32768, V0 + "; --block-size 32", precision="fp16", tp=4, settings=dict(gpu_memory_utilization=0.93, max_num_batched_tokens=4096, block_size=32, disable_custom_all_reduce=True)),
    _various(28, "Qwen3-30B-A3B tp4 128K", "vllm", "qwen3-30b-a3b", 21.66, 131072, V0 + "; --block-size 32", precision="fp16", tp=4, settings=dict(gpu_memory_utilization=0.92, max_num_batched_tokens=2048, block_size=32, disable_custom_all_reduce=True)),
    _various(29, "R1-0528-Qwen3-8B tp4", "vllm", "qwen3-8b", 21.48, 65536, V0 + "; --enforce-eager; PCIe cards of #27", precision="fp16", tp=4, settings=dict(gpu_memory_utilization=0.93, max_num_batched_tokens=8192, enforce_eager=True, disable_custom_all_reduce=True)),
    _various(30, "Gemma-3-27B AWQ 22 GiB", "vllm", "gemma-3-27b", 21.99, 4096, V0, precision="awq", settings=dict(gpu_memory_utilization=0.98)),
    _various(31, "Qwen2.5-7B 24 GB card", "vllm", "qwen2.5-7b", 23.57, 8192, V0, settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256)),
    _various(45, "Llama-2-7B v0.2", "vllm", "llama-2-7b", "a100-sxm-80gb", 4096, "vLLM v0.2 after PR #2031", settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=4096, max_num_seqs=256)),
    _various(46, "Llama-2-70B tp4 v0.2", "vllm", "llama-2-70b", "a100-sxm-80gb", 4096, "vLLM v0.2 after PR #2031", tp=4, settings=dict(gpu_memory_utilization=0.9, max_num_batched_tokens=4096, max_num_seqs=256)),
    _various(49, "Mistral-7B-v0.3", "vllm", "mistral-7b-v0.3", "h100-sxm", 32768, "weights only"),
    _various(51, "Qwen3.5-27B hybrid v0.19.0 H20", "vllm", QWEN35_27B, "h20", 32768,
             "v0.19.0, dummy weights, no memory figures: the hybrid layout only (block size, groups, blocks per request)",
             settings=dict(max_num_seqs=16, max_num_batched_tokens=16384), metrics=("tokens_per_request",),
             params=27 * 10**9),
    _various(32, "Qwen3-235B-A22B-FP8 tp4", "sglang", "qwen3-235b-a22b", "h100-sxm", 40960, "SGLang ~0.4.9", precision="fp8-block", tp=4, settings=dict(mem_fraction_static=0.93)),
    _various(33, "QwQ-32B tp4 L4", "sglang", "qwen2.5-32b", "l4", 131072, "SGLang 0.4.3", tp=4, settings=dict(mem_fraction_static=0.85)),
    _various(34, "Llama-3.1-8B 80 GB", "sglang", "llama-3.1-8b", "h100-sxm", 131072, "SGLang 0.4.1", settings=dict(mem_fraction_static=0.88)),
    _various(35, "Llama-3.1-8B 80 GB default", "sglang", "llama-3.1-8b", "h100-sxm", 131072, "SGLang 0.4.4, whose default fraction was 0.88", settings=dict(mem_fraction_static=0.88)),
    _various(36, "Llama-3.1-8B 24 GB Docker", "sglang", "llama-3.1-8b", 22.90, 131072, "SGLang 0.4.9, default 0.88; total from 'avail mem' before load", settings=dict(mem_fraction_static=0.88)),
    _various(38, "Llama-2-7B Q4_K_M", "llamacpp", "llama-2-7b", 80.0, 2048, "early 2024, no flash attention", precision="q4_k_m", settings=dict(flash_attn=False)),
    _various(39, "Llama-2-7B F16 V100", "llamacpp", "llama-2-7b", "v100-16gb", 2048, "b2500, no flash attention", precision="fp16", settings=dict(flash_attn=False)),
    _various(40, "Llama-3.1-8B Q4_K_M x4", "llamacpp", "llama-3.1-8b", 80.0, 2048, "b4000 (Ollama), 4 sequences of 2048, no flash attention", precision="q4_k_m", batch=4, settings=dict(flash_attn=False)),
    _various(41, "Phi-3-mini Q4 ubatch 256", "llamacpp", "phi-3-mini-4k", 80.0, 4096, "b5500-b6000, no flash attention; the log shows no sliding-window cache for Phi-3", precision="q4_k_m", settings=dict(flash_attn=False, n_batch=256, n_ubatch=256)),
    _various(43, "GLM-4-32B 32K", "llamacpp", GLM_4_32B, 80.0, 32768, "ik_llama.cpp fork; KV only (quant unknown)", precision="q4_k_m", settings=dict(flash_attn=True), metrics=("kv_buffer_mib",)),
    _various(52, "Qwen3.5-27B 2 seqs recurrent", "llamacpp", "qwen3.5-27b", 80.0, 4096, "2026 master, tensor split; the recurrent memory's total only (it depends on neither context nor card)", precision="q4_k_m", batch=2, metrics=("rs_size_mib",)),
    _various(44, "gpt-oss-120b 2x128K", "llamacpp", "gpt-oss-120b", 200.0, 131072, "Ollama 0.30.2 (2026 llama.cpp); KV only", precision="mxfp4", batch=2, settings=dict(n_batch=1024, n_ubatch=1024)),
]
# Gathered blind (no prediction run on them) after the SGLang 0.5.23 oracle fixes; most rows are community rigs whose
# command line the stored excerpt cuts, or checkpoints the catalog does not hold: the replayable ones
LOGS_2026B_FILE = "engine-logs-2026b.jsonl"
LOGS_2026B_POINTS = [
    Point(LOGS_2026B_FILE, 18, "gpt-oss-20b A100 gmu 0.65", "vllm", "gpt-oss-20b", "a100-sxm-80gb", 131072,
          precision="mxfp4", note="v0.19.0; the card's size inferred by the collector",
          settings=dict(gpu_memory_utilization=0.65)),
    Point(LOGS_2026B_FILE, 19, "gemma-4-26B-A4B A100 eager", "vllm", "gemma-4-26b-a4b", "a100-sxm-80gb", 131072,
          note="v0.19.0 (inferred from the page); --enforce-eager; the card's size inferred by the collector",
          settings=dict(gpu_memory_utilization=0.9, enforce_eager=True)),
    # DP attention: each DP rank attends at TP 1, so it holds both of a full-attention layer's 2 KV heads
    Point(LOGS_2026B_FILE, 22, "Qwen3-Next-80B FP8 tp4 dp4 DeepEP", "sglang", "qwen3-next-80b-a3b", "h100-sxm", 32768,
          note="SGLang main Dec 2025; GPU, fraction and context not in the excerpt: the per-rank layout only, on the "
               "0.5.23 profile (the 0.5.9 one sizes no DP attention)",
          precision="fp8-block", tp=4, dp=4, ep=4, all_to_all="deepep", metrics=("kv_bytes_per_token",),
          settings=dict(version="0.5.23")),
]
NOT_REPLAYED_2026B = {
    **dict.fromkeys((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 23, 24, 25, 26, 27, 28, 33, 34),
                    "Qwen3.6 / Qwen3.8 community checkpoints the catalog does not hold"),
    15: "Kimi-K2-Thinking's INT4 experts (the catalog's Kimi-K2 is FP8)", 16: "decode context parallelism",
    17: "Kimi-Linear not in the catalog", 20: "card and KV dtype not stated", 21: "GGUF in vLLM, model not stated",
29: "GLM-5.2 not in the catalog",
    30: "GLM-5.2 not in the catalog", 31: "model not stated", 32: "MiMo-V2-Flash not in the catalog",
}
NOT_REPLAYED = {
    9: "model unidentified", 11: "Qwen1.5 not in the catalog", 13: "LoRA buffers in the weights (Unsloth)",
    21: "LoRA buffers in the weights (Unsloth)", 37: "AMD ROCm with AITER workspace", 42: "two different GPUs",
    47: "aphrodite fork", 48: "aphrodite fork", 50: "TGI on ROCm", 53: "Qwen3.5-9B not in the catalog",
}

_SGLANG_POOL = re.compile(r"#tokens: (\d+), K size: ([\d.]+) GB, V size: ([\d.]+) GB")
_PATTERNS = {
    "weights": [r"Model loading took ([\d.]+) GiB", r"Loading model weights took ([\d.]+) GB", r"Model loading took ([\d.]+) GB",
                r"model weights take\s+([\d.]+)GiB", r"Load weight end\..*mem usage=([\d.]+) GB"],
    "kv_pool": [r"Current kv cache memory in use is (-?[\d.]+) GiB", r"Available KV cache memory: (-?[\d.]+) GiB",
                r"reserved for KV Cache is (?:only )?(-?[\d.]+)GiB", r"available_kv_cache_memory\s+([\d.]+)GiB"],
    "max_concurrency": [r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
                        r"Maximum concurrency for \d+ tokens/request = ([\d.]+)x"],
    "kv_tokens": [r"GPU KV cache size: ([\d,]+) tokens", r"#tokens: (\d+)", r"max_total_num_tokens=(\d+)",
                  r"tokens that can be stored in KV cache \((\d+)\)"],
    "gpu_weights_mib": [r"CUDA0 (?:model )?buffer size =\s+([\d.]+) MiB"],
    "kv_buffer_mib": [r"KV buffer size =\s+([\d.]+) MiB"],
    "kv_self_mib": [r"KV self size\s+=\s+([\d.]+) MiB"],
    "compute_mib": [r"CUDA0 compute buffer size =\s+([\d.]+) MiB"],
    # llama_memory_recurrent (hybrid / recurrent models): per device, and the total with its R / S parts
    "rs_buffer_mib": [r"RS buffer size =\s+([\d.]+) MiB"],
    "rs_size_mib": [r"llama_memory_recurrent: size =\s+([\d.]+) MiB"],
}


def _records(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _lines(value: Any) -> list[str]:
    if isinstance(value, list):
        return [line for item in value for line in _lines(item)]
    return [str(value)]


def measured_values(record: dict[str, Any]) -> dict[str, float]:
    """The figures a log states: the first match per metric; the KV pool is the smallest worker's, KV buffers add up."""
    lines = [line for value in record["measured"].values() for line in _lines(value)]
    found: dict[str, float] = {}
    for metric, patterns in _PATTERNS.items():
        values = [float(m.group(1).replace(",", "")) for p in patterns for line in lines for m in [re.search(p, line)] if m]
        if not values:
            continue
        if metric == "kv_pool":
            found[metric] = min(values)
        elif metric in ("kv_buffer_mib", "rs_buffer_mib"):
            found[metric] = sum(values)
        else:
            found[metric] = values[0]
    # llama.cpp logs the cache per device ("KV buffer size") or, in older builds, only the total ("KV self size")
    # SGLang's token pool: "#tokens: N, K size: X GB, V size: Y GB" (its GB are GiB), bytes a token on the rank
    cell = next((m for line in lines for m in [_SGLANG_POOL.search(line)] if m), None)
    if cell:
        found["kv_bytes_per_token"] = (float(cell.group(2)) + float(cell.group(3))) * GiB / int(cell.group(1))
    total = found.pop("kv_self_mib", None)
    if total is not None:
        found.setdefault("kv_buffer_mib", total)
    return found


def _architecture(catalog: Catalog, model: str | dict[str, Any], params: int | None = None) -> Architecture:
    if isinstance(model, dict):
        return size_only_architecture_from_config(model, "config", params) if params else architecture_from_config(model, "config")
    record = catalog.models.get(model)
    return architecture_from_config(record.config, record.name)


def _gpu(catalog: Catalog, gpu: str | float) -> GpuTarget:
    if isinstance(gpu, str):
        return GpuTarget.from_catalog(catalog.gpus.get(gpu))
    # a card known by the total CUDA reported: add back what the driver keeps, so the profile sees that total
    reserved = load_profiles().cuda.driver_reserved_mib.value * MiB
    return GpuTarget(f"{gpu:.2f} GiB card", round(gpu * GiB) + reserved)


# The profile each engine's logs are replayed on: the logs in bench/data are of vLLM releases up to 0.19 and SGLang
# up to 0.5.x, checked against the 0.19.0 and 0.5.9 profiles; none is of vLLM 0.34 or SGLang 0.5.23 (a point may name
# its own version in settings)
LOGGED_VERSIONS = {"vllm": "0.19.0", "sglang": "0.5.9"}


def predict(point: Point, catalog: Catalog) -> EngineBudget:
    request = Request(context=point.context, batch=point.batch, tp=point.tp, pp=point.pp, precision=point.precision,
                      kv_dtype=point.kv_dtype, dp=point.dp, ep=point.ep, all_to_all=point.all_to_all)
    settings = EngineSettings(name=point.engine, **{"version": LOGGED_VERSIONS.get(point.engine), **point.settings})
    return engine_budget(_architecture(catalog, point.model, point.params), request, settings, _gpu(catalog, point.gpu),
                         catalog)


@dataclass(frozen=True)
class Comparison:
    point: Point
    metric: str
    unit: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        if self.measured == 0:
            return 0.0 if self.predicted == 0 else float("inf")
        return (self.predicted - self.measured) / abs(self.measured)


def _predicted(budget: EngineBudget, metric: str) -> tuple[str, float] | None:
    layout = budget.layout
    # llama.cpp: the recurrent states on the GPUs are part of kv_pool_bytes, and the layout's state pool
    recurrent_on_gpus = layout.state_pool_bytes if layout else 0
    recurrent_layers = sum(g.layers for g in layout.groups if g.kind == "state") if layout else 0
    table = {
        "weights": ("GiB", budget.weights_bytes / GiB),
        # a pool the engine found negative is reported as 0; logs that print the negative figure compare with it
        "kv_pool": ("GiB", budget.kv_pool_bytes / GiB if budget.kv_pool_bytes else
                    (budget.budget_bytes - budget.weights_bytes - budget.activation_bytes - budget.non_torch_bytes) / GiB),
        "max_concurrency": ("x", budget.max_concurrency),
        "kv_tokens": ("tokens", budget.kv_cache_capacity_tokens),
        "gpu_weights_mib": ("MiB", sum(r.weights_bytes for r in budget.per_rank) / MiB),
        "kv_buffer_mib": ("MiB", (budget.kv_pool_bytes - recurrent_on_gpus) / MiB),
        "rs_buffer_mib": ("MiB", recurrent_on_gpus / MiB),
        "rs_size_mib": ("MiB", layout.state_bytes * recurrent_layers * layout.state_slots / MiB if layout else 0.0),
        "compute_mib": ("MiB", budget.per_rank[0].activation_bytes / MiB),
        # the pool's layout, whatever its size: ("GPU KV cache size" / "Maximum concurrency") = the smallest block
        # size x blocks one request takes / KV cache groups
        "tokens_per_request": ("tokens", budget.kv_cache_capacity_tokens / budget.max_concurrency
                               if budget.max_concurrency else float("nan")),
        # SGLang's token pool cell: the bytes one token takes over the rank's attention layers
        "kv_bytes_per_token": ("B", layout.page_bytes if layout and layout.block_size == 1 else float("nan")),
    }
    return table.get(metric)


def compare(points: list[Point], catalog: Catalog) -> list[Comparison]:
    records = {name: _records(name) for name in (V019_FILE, VARIOUS_FILE, LOGS_2026B_FILE)}
    out = []
    for point in points:
        budget = predict(point, catalog)
        found = measured_values(records[point.file][point.index])
        if point.metrics and "tokens_per_request" in point.metrics:
            found["tokens_per_request"] = found["kv_tokens"] / found["max_concurrency"]
        for metric, measured in found.items():
            if point.metrics is not None and metric not in point.metrics:
                continue
            unit, predicted = _predicted(budget, metric)
            out.append(Comparison(point, metric, unit, predicted, measured))
    return out


def all_points() -> list[Point]:
    return _v019_points() + VARIOUS_POINTS + LOGS_2026B_POINTS


def main() -> int:
    catalog = load_catalog()
    comparisons = compare(all_points(), catalog)
    print(f"{'point':<46} {'metric':<24} {'predicted':>12} {'measured':>12} {'error':>8}")
    last = None
    for c in comparisons:
        name = f"{'v0.19' if c.point.current else c.point.engine} #{c.point.index} {c.point.label}"
        first = name != last
        print(f"{(name if first else ''):<46} {f'{c.metric} ({c.unit})':<24} {c.predicted:>12,.2f} {c.measured:>12,.2f} "
              f"{c.error:>+8.1%}" + (f"   ({c.point.note})" if c.point.note and first else ""))
        last = name
    print("\nnot replayed (engine-logs-various.jsonl): " + "; ".join(f"#{i} {why}" for i, why in NOT_REPLAYED.items()))
    reasons: dict[str, list[int]] = {}
    for index, why in sorted(NOT_REPLAYED_2026B.items()):
        reasons.setdefault(why, []).append(index)
    print(f"not replayed ({LOGS_2026B_FILE}): "
          + "; ".join(f"{' '.join(f'#{i}' for i in rows)} {why}" for why, rows in reasons.items()))
    print("\nvLLM v0.19 on H100 (28 start-ups): absolute relative error")
    failed = False
    for metric, tolerance in TOLERANCES.items():
        errors = [abs(c.error) for c in comparisons if c.point.current and c.metric == metric]
        worst = max(errors)
        failed |= worst > tolerance
        print(f"  {metric:<16} n={len(errors):>2}  median {statistics.median(errors):6.2%}  max {worst:6.2%}  (bar {tolerance:.0%})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
