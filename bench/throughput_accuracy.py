"""Predicted against measured serving speed, for every row of the published measurements, by class.

Reads bench/data/throughput-measured.jsonl (the reference set) and bench/data/throughput-2026.jsonl (runs
gathered for issue 20 without looking at predictions), maps each row to a catalog model, precision, KV dtype,
GPU, engine, batch and prompt/output lengths (or skips it and counts why), predicts it with
planner.estimator.performance and prints predicted against measured TPOT, decode tokens/s and single-request
TTFT, then the errors by class (bench/SPEED_PROTOCOL.md: which rows count, which classes, the targets).
Nothing here fits a constant: catalogs/performance.yaml takes every constant from kernel-level measurements.

    python bench/throughput_accuracy.py            # every row, then the class table
    python bench/throughput_accuracy.py --summary  # the class table only
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner import api
from planner.model.architecture import Architecture, architecture_from_config
from planner.calibration.calibrate import at_held_concurrency, in_flight
from planner.catalog.load import Catalog, load_catalog
from planner.errors import PlannerInputError
from planner.estimator.benchmark import BenchmarkRun, closed_loop_run
from planner.estimator.capacity import Scheduler
from planner.estimator.closed_loop import admits_past_pool, closed_loop
from planner.estimator.engines import EngineSettings, engine_budget, registry
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.engines.sglang import PREFILL_DELAYER_PASSES, prefill_delayer
from planner.estimator.memory import GpuTarget, Request, estimate_memory
from planner.estimator.speculative import Speculation, speculation
from planner.model.precision import resolve_precision
from planner.estimator.engines.moe_kernels import TRTLLM_BACKENDS, VLLM_SWITCHES
from planner.estimator.performance import (PerformanceCatalog, ReplicaPerformance, ReplicaTimer,
                                           UnmeasuredMoeKernel, Workload, replica_timer, timer_performance)

DATA = Path(__file__).parent / "data"
# Each file and the prefix its rows are labelled with (a row of the reference set keeps its 0-based line number,
# the number catalogs and notes quote).
DATA_FILES = (("", DATA / "throughput-measured.jsonl"), ("2026:", DATA / "throughput-2026.jsonl"),
              ("2026b:", DATA / "throughput-2026b.jsonl"), ("2026c:", DATA / "throughput-2026c.jsonl"),
              ("2026d:", DATA / "throughput-2026d.jsonl"), ("2026e:", DATA / "throughput-2026e.jsonl"),
              ("2026f:", DATA / "throughput-2026f.jsonl"), ("2026g:", DATA / "throughput-2026g.jsonl"),
              ("2026h:", DATA / "throughput-2026h.jsonl"), ("2026i:", DATA / "throughput-2026i.jsonl"),
              ("2026j:", DATA / "throughput-2026j.jsonl"), ("2026k:", DATA / "throughput-2026k.jsonl"),
              ("2026l:", DATA / "throughput-2026l.jsonl"), ("2026m:", DATA / "throughput-2026m.jsonl"),
              ("2026n:", DATA / "throughput-2026n.jsonl"), ("2026o:", DATA / "throughput-2026o.jsonl"),
              ("2026p:", DATA / "throughput-2026p.jsonl"), ("2026q:", DATA / "throughput-2026q.jsonl"))

ENGINES = {"TensorRT-LLM": "trtllm", "TensorRT-LLM (trtllm-serve, PyTorch backend)": "trtllm",
           "TensorRT-LLM (trtllm-bench, PyTorch backend)": "trtllm",
           "TensorRT-LLM (trtllm-serve)": "trtllm",
           "NVIDIA NIM (TensorRT-LLM backend)": "trtllm", "vLLM": "vllm",
           "vLLM (ROCm)": "vllm", "vLLM (AMD ROCm fork)": "vllm", "SGLang": "sglang", "SGLang (ROCm)": "sglang",
           "llama.cpp": "llama.cpp", "llama.cpp (CUDA)": "llama.cpp"}  # llama.cpp's Vulkan backend: no profile

# First match wins (lowercase substring of the row's gpu text -> catalog GPU; None: skip the row).
# A100/H100 without a stated form factor are taken as SXM, as the reference rows that name the
# system (DGX/HGX, the TensorRT-LLM docs) are; the PCIe card would be 5% (A100) slower on bandwidth.
GPUS: tuple[tuple[str, str | None], ...] = (
    ("unverified", None), ("exact sku not stated", None), ("pcie per one transcription", None),
    ("gb300", "gb300"), ("gb200", "gb200"), ("b300", "b300"), ("gb10", None), ("gh200", "gh200"), ("h20 ", "h20"), ("h200", "h200-sxm"), ("h100 nvl", "h100-nvl"),
    ("h100 pcie", "h100-pcie"), ("h100", "h100-sxm"), ("a100-pcie", "a100-pcie-80gb"),
    ("a100 80gb pcie", "a100-pcie-80gb"), ("a100", "a100-sxm-80gb"), ("l40s", "l40s"), ("l4 ", "l4"),
    ("rtx pro 6000 blackwell server", "rtx-pro-6000"), ("rtx pro 6000 blackwell workstation", "rtx-pro-6000-ws"), ("rtx a6000", "rtx-a6000"), ("rtx 4090", "rtx-4090"),
    ("rtx 5090", "rtx-5090"), ("rtx 3090 ti", None), ("rtx 3090", "rtx-3090"), ("rtx 4080 super", None),
    ("rtx 4080", "rtx-4080"), ("mi300x", "mi300x"), ("mi325x", "mi325x"), ("mi355x", "mi355x"), ("b200", "b200"),
)

# Checkpoints published under another name with a catalog model's exact tensor shapes.
SAME_ARCHITECTURE = {
    # Llama 3 and 3.1 config.json files differ only in rope_scaling and max_position_embeddings
    "meta-llama/meta-llama-3-8b": "llama-3.1-8b",
    "meta-llama/meta-llama-3-70b": "llama-3.1-70b",
    # a run naming only "DSv3" (vLLM PR 47276): DeepSeek-V3 and R1 share one config.json architecture
    "deepseek-v3 family": "deepseek-v3",
}
# Suffixes of quantized re-publications (nvidia/...-FP8, amd/...-FP8-KV): the same model's tensors.
QUANTIZED_SUFFIX = re.compile(r"-(fp8-kv|fp8|nvfp4|mxfp4|fp4|awq)(-v2)?$")  # -v2: NVIDIA's second NVFP4 releases
# Re-quantizations a row names without a repository id: the catalog model whose tensors they hold.
REQUANTIZED = (("kimi k2.5", "kimi-k2.5"), ("minimax-m2.5 nvfp4", "minimax-m2.5"),
               # ModelOpt re-quantizations (vLLM issue 49723: "Mistral-24B", a Mistral-Small-3.x-24B, one text
               # architecture; NVIDIA's FP8 releases of its Nemotron models)
               ("mistral 24b", "mistral-small-3.1-24b"), ("nemotron-3-nano-30b-a3b-fp8", "nemotron-3-nano-30b-a3b"),
               ("llama-3_3-nemotron-super-49b-v1 fp8", "llama-3.3-nemotron-super-49b"),
               # DeepSeek-R1 (DeepseekV3ForCausalLM, DeepSeek-V3's shapes) and GLM-5's FP8 release, named without a
               # repository id (the correction note on model names)
               ("deepseek-r1 fp8", "deepseek-v3"), ("deepseek-r1 fp4", "deepseek-v3"), ("glm-5 fp8", "glm-5"))

# The measured-precision text -> catalog precision, first match wins.
PRECISIONS: tuple[tuple[str, str | None], ...] = (
    ("unverified", None), ("mlc q4f16_1", None), ("fp4 (mxfp4)", None),
    ("gguf f16", "fp16"), ("gguf q4_0", "q4_0"), ("gguf q4_k_m", "q4_k_m"),
    ("fp8 (native block", "fp8-block"), ("fp8", "fp8"), ("mxfp4", "mxfp4"), ("nvfp4", "nvfp4"),
    # AMD's Quark MXFP4 checkpoints quantize the activations too (the protocol's Quark MXFP4 amendment)
    ("mxfp4 (amd quark mxfp4", "mxfp4-w4a4"), ("mxfp4 (amd mxfp4 checkpoint", "mxfp4-w4a4"),
    # DeepSeek-V4's released format (FP8 linear layers, FP4 routed experts), as InferenceX prints it ("FP4")
    ("fp4 moe experts", "fp8-block-mxfp4-experts"), ("int4 weights (native kimi", "int4-g32"),
    # Kimi-K2.5's own experts: compressed-tensors W4A16, group 32 (the precision `auto` resolves it to)
    ("int4 routed experts (checkpoint native compressed-tensors w4a16)", "int4-g32"),
    ("int4 weights (gptq", "gptq"), ("int4 weights (awq", "awq"), ("awq int4", "awq"),
    ("int4 awq", "awq"), ("int4 gptq", "gptq"), ("fp16/bf16", "fp16"), ("bf16/fp16", "bf16"),
    ("bf16", "bf16"), ("fp16", "fp16"),
)

# Engines whose memory profile schedules a closed loop (`planner perf --concurrency`); TensorRT-LLM has none yet
# (issue 21), so its concurrency rows are timed as a static batch.
CLOSED_LOOP_ENGINES = ("vllm", "sglang")

# llama-bench's default generation length (`-n 128`, llama.cpp tools/llama-bench README) for the
# rows that report only its average decode speed.
LLAMA_BENCH_GENERATED = 128

# Rows the reference notes themselves flag as not representative.
EXCLUDED = {"370": "flagged 'likely misconfigured' in the reference notes"}
# Rows a later file copied from a source an earlier file already quotes (the same run, counted once)
DUPLICATES = {**{f"2026i:{row}": f"the same run as 2026:{row - 12} (InferenceX issue 870, quoted by both files)"
                 for row in range(21, 25)},
              **{f"2026l:{row}": f"the same run as 2026b:{row + 105} (InferenceX PR 1053, which PR 1061 reopens with "
                                 "identical text)" for row in range(4)}}
# Builds the same machine's other rows contradict (vLLM ROCm 0.6.3.dev109 running Meta's FP8 405B 4-5x slower than
# AMD's FP8 checkpoint on the same 8 x MI300X; vLLM ROCm 0.6.3.dev116 prefilling 7x slower than TGI on it).
NOT_REPRESENTATIVE = {str(row) for row in (*range(386, 392), *range(405, 409))}

# Means first; a run that published only medians is compared on its median.
TPOT_MS_KEYS = ("Mean TPOT (ms)", "mean_tpot_ms", "TPOT ms (mean)", "TPOT_ms", "ITL_ms", "Mean TPOT", "mean TPOT (ms)",
                "Mean TPOT (ms/token), arithmetic mean of 5 repeats", "Mean TPOT (ms) (across the repeat means)",
                "mean TPOT (ms) (printed as 'mean TPOT 12.6ms' for the non-MTP arm in the MTP entry)",
                "Median TPOT (ms)", "median_tpot_ms", "tpot_ms (P50, as printed)", "Median ITL (ms)", "tpot_ms (as printed)",
                "TPOT (ms, as printed; mean or median not stated)", "TPOT (ms)", "ITL (ms)",
                "TPOT (ms) (mean, per table heading)", "TPOT (ms) (mean or median not stated)", "tpot_ms (P50)",
                "TPOT p50 (ms)", "tpot_ms", "Average time-per-output-token [TPOT] (ms)", "TPOT", "TPOT/ITL (median)",
                "ITL (median)", "ITL (median) column, printed as", "Median TPOT", "TPOT p50", "TPOT P50 ms", "TPOT P50 (ms)")
TTFT_MS_KEYS = ("Mean TTFT (ms)", "mean_ttft_ms", "TTFT ms (mean)", "TTFT_ms", "first_token_latency_ms", "Mean TTFT",
                "Mean TTFT (ms) (across the repeat means)", "Median TTFT (ms)", "ttft_ms (P50, as printed)",
                "ttft_ms (as printed)", "TTFT (ms)", "TTFT (ms) (statistic not named)", "ttft_ms (P50)", "TTFT p50 (ms)",
                "ttft_ms", "TTFT P50 ms", "TTFT P50 (ms)")
# the same in seconds
# a TPOT key naming its statistic a median, unless it says its statistic is not stated ("mean or median not stated")
MEDIAN_KEY = re.compile(r"^(?!.*not stated).*(?:median|p50)", re.IGNORECASE)
TPOT_S_KEYS = ("ITL p50 (s)",)
TTFT_S_KEYS = ("TTFT p50 (s)", "ttft_seconds")
# A single request's (prompt + generated tokens) over its whole time (the Qwen speed benchmark's "Speed"): the
# request took (prompt + output) / speed seconds, of which the output tokens' rate is output / that
REQUEST_SPEED_KEYS = ("Speed (tokens/s) ((prompt+generated tokens)/time)",)
# A time-boxed decode sweep (llm_decode_bench.py): the server's generation rate over C, measured once every request
# is past its prefill (a scout request warms the prefix cache first), and the tokens all requests generated (their
# mean is the run's output length per request). C > 1 is a decode window (the protocol's decode-window amendment).
PER_REQUEST_TOKS_KEYS = ("per_request_avg_tps (tok/s)",)
DECODE_WINDOW = "decode window"
OUTPUT_TOKS_KEYS = ("Output token throughput (tok/s)", "output_tok_s_replica", "output_throughput", "output_tok_s", "Throughput_tok_s",
                    "derived_output_tok_s", "output_token_throughput_tok_s", "Output throughput (tok/s)", "Output throughput",
                    "Output tok/s", "Output Tok/s", "Output Tokens/s", "Output throughput in token per second (TPS)",
                    "output tok/s", "Output token throughput (tok/s) (approximate, as written)", "Output TPS")
PER_GPU_OUTPUT_TOKS_KEYS = ("output_tokens_per_s_per_gpu", "output_tok_s_per_gpu", "Output tok/s/GPU", "Out tok/GPU",
                            "Output tput/GPU (tok/s/GPU)", "OTPS / GPU (Before, FP32 gate)")
# A closed-loop run's mean concurrency (SGLang's bench_serving 'Concurrency': its E2E latencies summed over its
# duration), else its requests/s and mean E2E latency, whose product it is (Little's law; the protocol's amendment on a
# finite run's throughput)
MEAN_CONCURRENCY_KEYS = ("Concurrency",)
REQUEST_RATE_KEYS = ("Request throughput (req/s)",)
FINITE_RATE = re.compile(r"\s*\d+(\.\d*)?\s*")
MEAN_E2E_MS_KEYS = ("Mean E2E Latency (ms)", "Mean E2EL (ms)")
# A static batch's whole run (`vllm bench latency`: prefill and every decode step of `batch` requests), in seconds
# or milliseconds: batch x output tokens over it is the batch's output tokens/s
BATCH_LATENCY_S_KEYS = ("Average latency in seconds", "Latency (s) (column printed as 'Latency (sec)')",
                        "Latency (s) (column printed as 'Latency2')")
BATCH_LATENCY_MS_KEYS = ("Mean latency (ms)",)
SINGLE_STREAM_DECODE = re.compile(r"^(tg(\d+)(?:_tok_s| t/s)|avg_eval_tok_s|avg_eval_tok_s_and_prompt)$")
SINGLE_STREAM_PREFILL = re.compile(r"^pp(\d+)_tok_s$")


@dataclass(frozen=True)
class Measurement:
    """One reference row, normalised to what replica_performance takes and what it predicts."""

    row: str  # the file's prefix and the 0-based line number
    engine: str
    model: str
    precision: str
    kv_dtype: str
    gpu: str
    tp: int
    pp: int
    ep: int  # expert parallelism with tensor-parallel attention (the protocol's EP amendment)
    dp: int  # data-parallel attention groups (the protocol's DP amendment: timed at the stated batch)
    batch: int
    prompt_tokens: int
    output_tokens: int
    output_tokens_per_s: float | None  # the whole replica
    tpot_s: float | None
    ttft_s: float | None  # single-request rows only
    source: str
    form: str  # how it was run: static batch, closed loop (a concurrency), decode window or a single stream
    speculation: Speculation | None = None  # the protocol's speculative-decoding amendment
    release: str | None = None  # the engine release the row states (its MoE kernel choice); None: the default
    # the running-request cap the row's server command states (the protocol's running-cap amendment); None: the engine's
    max_running: int | None = None
    prefix_cache: bool = True  # off where the row's server command disables it (SGLang --disable-radix-cache)
    # the run's lengths scattered around its means (its totals differ from the requested lengths, or none were asked)
    lengths_vary: bool = False
    # the integer ranges InferenceX's harness drew each prompt's and each output's length from, uniformly (the lengths
    # amendment); None: another harness, whose distribution the row does not state
    drawn_lengths: tuple[tuple[int, int], tuple[int, int]] | None = None
    # the step budget and memory share the row's server command states (the protocol's budget amendment): EngineSettings
    # fields -> values; empty: the engine's defaults
    settings: tuple[tuple[str, float], ...] = ()
    recv_interval: int = 1  # SGLang's --scheduler-recv-interval as the row's server command states it (the protocol)
    # SGLang's --enable-prefill-delayer on a DP-attention row's server command: its max delay passes; 0: off (the
    # protocol's DP prefill amendment)
    prefill_delay_passes: int = 0
    # the fused-MoE kernel the row's server was told to run, where the catalog measures it (the protocol's stated-kernel
    # amendment); `unmeasured_kernel`: one it states that no table measures (timed on the release's pick)
    moe_kernel: str | None = None
    # the attention backend the row's SGLang server was told to run (the protocol's attention-backend amendment); None:
    # the one SGLang resolves
    attention_backend: str | None = None
    unmeasured_kernel: str | None = None
    # a closed-loop run's requests in flight on average, where it states them (MEAN_CONCURRENCY_KEYS); None: not stated
    mean_concurrency: float | None = None
    # the row's TPOT is a median (its key says so): a replayed row is compared on the replay's median (the protocol)
    tpot_median: bool = False


class Skip(Exception):
    """A row the bench cannot use; the message is the reason, counted in the summary."""


def number(text: Any) -> float:
    match = re.search(r"\d[\d,]*\.?\d*", str(text))
    if not match:
        raise Skip("a measured value is not a number")
    return float(match.group().replace(",", ""))


def first_match(text: str, table: tuple[tuple[str, str | None], ...], what: str) -> str:
    """The entry whose text comes first in `text` (the longest on a tie): 'A100 (80GB SXM per doc's
    H100-HBM3-80GB/A100 systems)' is an A100. An entry mapped to None anywhere skips the row."""
    lowered = f"{text.lower()} "
    found = [(lowered.find(needle), -len(needle), name) for needle, name in table if needle in lowered]
    if not found:
        raise Skip(f"{what} not in the catalog")
    if any(name is None for _, _, name in found):
        raise Skip(f"{what} not identified")
    return min(found)[2]


def stated_precision(text: str) -> str:
    """The catalog precision a row's precision text names (PRECISIONS); "fp8" of a checkpoint the text says is stored
    block-scaled is that checkpoint's "fp8-block" (bench/SPEED_PROTOCOL.md, the correction on stated block-FP8
    checkpoints)."""
    precision = first_match(text, PRECISIONS, "precision")
    return "fp8-block" if precision == "fp8" and "block" in text.lower() else precision


def catalog_model(catalog: Catalog, text: str) -> str:
    name = re.sub(r"\s*\(.*$", "", text).strip()  # the model is what precedes a first parenthesis
    candidates = [name, SAME_ARCHITECTURE.get(name.lower(), "")]
    base = name.split("/")[-1]
    stripped = QUANTIZED_SUFFIX.sub("", base.lower())
    candidates += [stripped, f"meta-llama/{stripped}", SAME_ARCHITECTURE.get(f"meta-llama/{stripped}", "")]
    candidates += [model for needle, model in REQUANTIZED if needle in text.lower()]
    for candidate in filter(None, candidates):
        try:
            return catalog.models.get(candidate).name
        except PlannerInputError:
            continue
    raise Skip("model not in the catalog")


def kv_dtype(text: str) -> str:
    lowered = text.lower()
    if lowered.startswith("fp8"):
        return "fp8"
    if lowered.startswith(("f16", "fp16")):
        return "fp16"
    if lowered.startswith("bf16"):
        return "bf16"
    return "auto"  # auto, not stated: the engine's default, the model's dtype


def whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def excluded(label: str, raw: dict[str, Any]) -> None:
    """The protocol's exclusions (bench/SPEED_PROTOCOL.md, section 3), each a reason counted in the summary."""
    if label in EXCLUDED:
        raise Skip(EXCLUDED[label])
    if label in DUPLICATES:
        raise Skip("the same run as a row of an earlier file (counted once)")
    if label in NOT_REPRESENTATIVE:
        raise Skip("ROCm build 4-7x slower than other rows of the same machine (not representative)")
    speculative = raw.get("speculative")
    if speculative and str(speculative).startswith("not stated"):
        raise Skip("speculative decoding not stated (excluded: may be on)")
    if (raw.get("ep") or 1) > 1 and "deepep" in json.dumps(raw).lower():
        raise Skip("expert parallelism over a DeepEP all-to-all (not modelled yet)")
    if raw.get("enforce_eager"):
        raise Skip("eager mode (the model times CUDA-graph replay)")
    if raw.get("tp") is None and raw.get("num_gpus") is None:
        raise Skip("parallelism not stated")


SPEC_STEPS = re.compile(r"--speculative-num-steps\s+(\d+)")
SPEC_TOPK = re.compile(r"--speculative-eagle-topk\s+(\d+)")
ACCEPT_KEYS = ("Accept length", "accept_length", "Mean acceptance length")


def speculation_of(raw: dict[str, Any]) -> Speculation | None:
    """A row's speculative decoding as the protocol's amendment times it: a chain draft (top-k 1) of the
    checkpoint's MTP module (SGLang EAGLE / NEXTN on it) with the acceptance length the row states."""
    text = str(raw.get("speculative") or "")
    if not text:
        return None
    steps, topk = SPEC_STEPS.search(text), SPEC_TOPK.search(text)
    accept = next((raw["measured"][k] for k in ACCEPT_KEYS if k in raw["measured"]), None)
    if accept is None:
        raise Skip("speculative decoding without a stated acceptance length")
    if "ngram" in text.lower() or "eagle3" in text.lower().replace("-", "") or steps is None \
            or (topk is not None and int(topk.group(1)) != 1):
        raise Skip("speculative decoding other than a chain draft of the MTP module (not modelled yet)")
    try:
        return speculation("mtp", int(steps.group(1)), number(accept))
    except PlannerInputError:  # e.g. an acceptance length above steps + 1: the run drafted otherwise than stated
        raise Skip("speculative setting inconsistent (acceptance length above the draft steps + 1)") from None


def normalise(label: str, raw: dict[str, Any], catalog: Catalog) -> Measurement:
    excluded(label, raw)
    spec = speculation_of(raw)
    engine = ENGINES.get(raw["engine"])
    if engine is None:
        raise Skip("engine without a performance profile")
    measured: dict[str, str] = raw["measured"]
    tp, pp = raw.get("tp") or 1, raw.get("pp") or 1
    batch = whole(raw.get("batch_size")) or whole(raw.get("concurrency"))
    form = "static" if whole(raw.get("batch_size")) else "closed loop"
    # mean lengths may be fractional; a length given as text ("not stated") is none
    prompt, output = (v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
                      for v in (raw.get("isl"), raw.get("osl")))
    tpot_s = ttft_s = toks = None
    tpot_key: str | None = None
    lengths_vary = False
    drawn = None

    decode_key = next((k for k in measured if SINGLE_STREAM_DECODE.match(k)), None)
    prefill_key = next((k for k in measured if SINGLE_STREAM_PREFILL.match(k)), None)
    if decode_key or prefill_key:
        # llama-bench: tgN decodes N tokens from an empty context, ppN prefills an N-token prompt
        batch, form = 1, "single stream"
        if decode_key:
            generated = SINGLE_STREAM_DECODE.match(decode_key).group(2)  # type: ignore[union-attr]
            rate = number(measured[decode_key])
            tpot_s, toks = 1 / rate, rate
            prompt, output = 1, int(generated) if generated else LLAMA_BENCH_GENERATED
        else:
            tokens = int(SINGLE_STREAM_PREFILL.match(prefill_key).group(1))  # type: ignore[union-attr]
            ttft_s = tokens / number(measured[prefill_key])
            prompt, output = tokens, 1
    else:
        if batch is None:
            raise Skip("batch not stated (max-throughput or request-rate run)")
        per_request = next((number(measured[k]) for k in PER_REQUEST_TOKS_KEYS if k in measured), None)
        # a server that fills the KV cache instead of prefilling (`prefill_skipped`): its requests only decode
        if per_request is not None or (raw.get("prefill_skipped") and batch > 1):
            form = DECODE_WINDOW
        if per_request is not None and output is None and "total_tokens" in measured:
            output = number(measured["total_tokens"]) / number(measured["num_completed"])
        ttft_only = batch == 1 and not any(k in measured for k in (*TPOT_MS_KEYS, *TPOT_S_KEYS, *OUTPUT_TOKS_KEYS,
                                                                      *PER_REQUEST_TOKS_KEYS, *REQUEST_SPEED_KEYS))
        if output is None and ttft_only:
            output = 1  # a single request's TTFT: its prompt is all that is timed
        run_lengths = lengths_run(measured)
        if run_lengths is None and prompt and output:
            drawn = inferencex_ranges(raw, prompt, output)
            run_lengths = drawn and tuple((low + high) / 2 for low, high in drawn)  # type: ignore[assignment]
        if run_lengths is not None:  # what the run drew (random lengths below the requested, or a dataset's)
            lengths_vary = not all(asked and abs(ran / asked - 1) <= LENGTHS_AS_ASKED
                                   for ran, asked in zip(run_lengths, (prompt, output)))
            prompt, output = run_lengths
        if prompt is None or output is None:
            raise Skip("prompt/output lengths not stated")
        prompt = max(1, prompt)
        tpot_key = next((k for k in TPOT_MS_KEYS if k in measured), None)
        tpot_ms = number(measured[tpot_key]) if tpot_key else None
        if tpot_ms is None and per_request is not None:
            tpot_ms = 1000 / per_request
        if tpot_ms is None:
            tpot_ms = next((number(measured[k]) * 1000 for k in TPOT_S_KEYS if k in measured), None)
        tpot_s = tpot_ms / 1000 if tpot_ms is not None and output > 1 else None
        total = next((measured[k] for k in OUTPUT_TOKS_KEYS if k in measured), None)
        per_gpu = next((measured[k] for k in PER_GPU_OUTPUT_TOKS_KEYS if k in measured), None)
        latency_s = next((number(measured[k]) for k in BATCH_LATENCY_S_KEYS if k in measured), None)
        latency_ms = next((number(measured[k]) for k in BATCH_LATENCY_MS_KEYS if k in measured), None)
        if total is not None:
            toks = number(total)
        elif per_gpu is not None:
            toks = number(per_gpu) * raw["num_gpus"]
        elif form == "static" and (latency_s or latency_ms):
            toks = batch * output / (latency_s or latency_ms / 1000)
        elif batch == 1 and any(k in measured for k in REQUEST_SPEED_KEYS):
            speed = next(number(measured[k]) for k in REQUEST_SPEED_KEYS if k in measured)
            toks = output / ((prompt + output) / speed)
        ttft_ms = next((number(measured[k]) for k in TTFT_MS_KEYS if k in measured), None)
        if ttft_ms is None:
            ttft_ms = next((number(measured[k]) * 1000 for k in TTFT_S_KEYS if k in measured), None)
        if ttft_ms is not None and batch == 1:
            ttft_s = ttft_ms / 1000
    if tpot_s is None and toks is None and ttft_s is None:
        raise Skip("no TPOT, output tokens/s or single-request TTFT measured")
    if batch == 1:
        form = "single stream"
    # the clients set a closed loop's concurrency; at a request rate the arrivals set its throughput
    sent_at_a_rate = FINITE_RATE.fullmatch(str(raw.get("request_rate") or ""))
    held = mean_concurrency(measured) if form == "closed loop" and not sent_at_a_rate else None
    if spec is not None and form == "closed loop":
        raise Skip("speculative decoding in a closed loop (its scheduler is not modelled yet)")
    return Measurement(
        row=label, engine=engine, model=catalog_model(catalog, raw["model"]),
        precision=stated_precision(raw["precision"]), kv_dtype=kv_dtype(raw["kv_cache_dtype"]),
        gpu=first_match(raw["gpu"], GPUS, "gpu"), tp=tp, pp=pp, ep=raw.get("ep") or 1, dp=raw.get("dp_attention") or 1, batch=batch,
        prompt_tokens=max(1, round(prompt)), output_tokens=max(1, round(output)),
        output_tokens_per_s=toks, tpot_s=tpot_s, ttft_s=ttft_s, source=raw["source"], form=form, speculation=spec,
        release=stated_release(raw.get("engine_version")), max_running=stated_running_cap(raw.get("notes")),
        prefix_cache=not PREFIX_CACHE_OFF_FLAG.search(str(raw.get("notes") or "")), lengths_vary=lengths_vary,
        drawn_lengths=drawn,
        settings=stated_settings(engine, raw.get("notes")), recv_interval=stated_recv_interval(engine, raw.get("notes")),
        prefill_delay_passes=stated_prefill_delay(engine, raw.get("dp_attention") or 1, raw.get("notes")),
        moe_kernel=stated_moe_kernel(engine, raw.get("notes")),
        attention_backend=stated_attention_backend(engine, raw.get("notes")), mean_concurrency=held,
        tpot_median=bool(tpot_key and MEDIAN_KEY.search(tpot_key)),
    )


def mean_concurrency(measured: dict[str, Any]) -> float | None:
    """The requests the run held in flight on average: as stated, else by Little's law (planner.calibration.calibrate
    in_flight) from its requests/s and mean E2E latency."""
    stated = next((number(measured[k]) for k in MEAN_CONCURRENCY_KEYS if k in measured), None)
    if stated is not None:
        return stated
    rate = next((number(measured[k]) for k in REQUEST_RATE_KEYS if k in measured), None)
    return in_flight(rate, next((number(measured[k]) for k in MEAN_E2E_MS_KEYS if k in measured), None))


# The totals `vllm bench serve` and SGLang's bench_serving print over a run (the protocol's run-lengths amendment)
RUN_TOTALS = ("Total input tokens", "Total generated tokens", "Successful requests")
LENGTHS_AS_ASKED = 0.02  # run means within 2% of the requested lengths: a fixed-length run (the SGLang-prefill amendment)


# ... or the same run's rates over its duration, which benchmark_serving computes as each total over the duration (the
# protocol's run-rates correction)
RUN_RATES = ("Input token throughput (tok/s)", "Output token throughput (tok/s)", "Benchmark duration (s)",
             "Successful requests")


def lengths_run(measured: dict[str, str]) -> tuple[float, float] | None:
    """(mean prompt, mean output tokens) of the requests a run completed, from its printed totals, or its rates
    times its duration; None without either."""
    if all(k in measured for k in RUN_TOTALS):
        inputs, generated, completed = (number(measured[k]) for k in RUN_TOTALS)
    elif all(k in measured for k in RUN_RATES):
        input_rate, output_rate, duration, completed = (number(measured[k]) for k in RUN_RATES)
        inputs, generated = input_rate * duration, output_rate * duration
    else:
        return None
    return (inputs / completed, generated / completed) if completed else None


# InferenceX's harness (the protocol's InferenceX-lengths amendment): its benchmark_serving.py draws each prompt and
# output length uniformly over the integers [int(R L), L], R its --random-range-ratio, 0.8 in its CI workflow
INFERENCEX_SOURCE = re.compile(r"SemiAnalysisAI/InferenceX", re.IGNORECASE)
INFERENCEX_HARNESS = re.compile(r"InferenceX", re.IGNORECASE)
INFERENCEX_RANGE_RATIO = 0.8
STATED_RANGE_RATIO = re.compile(r"range[ _-]ratio[ =]+(0?\.\d+|1(?:\.0+)?)\b", re.IGNORECASE)


def inferencex_ranges(raw: dict[str, Any], prompt: float, output: float
                      ) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The integer ranges [int(R L), L] InferenceX's harness drew a row's prompt and output lengths from, uniformly;
    None for another harness."""
    stated = " ".join(str(raw.get(k) or "") for k in ("dataset", "bench_type"))
    if not (INFERENCEX_SOURCE.search(raw["source"]) or INFERENCEX_HARNESS.search(stated)):
        return None
    ratios = STATED_RANGE_RATIO.findall(f"{stated} {raw.get('notes') or ''}")
    ratio = float(ratios[0]) if ratios else INFERENCEX_RANGE_RATIO
    return tuple((math.floor(ratio * length), math.floor(length)) for length in (prompt, output))  # type: ignore[return-value]


# SGLang's and vLLM's flags capping the requests the engine runs at once, as a server command writes them
RUNNING_CAP_FLAG = re.compile(r"--(?:max-running-requests|max-num-seqs)[ =](\d+)\b")
# TensorRT-LLM's MoE backend as a row's LLM API options state it ("moe_config {backend: TRTLLM}",
# "moe_config: {backend: ...}")
TRTLLM_MOE_BACKEND = re.compile(r"moe_config:?\s*\{\s*backend:\s*([A-Z_]+)")


# the flags that turn an engine's prefix cache off, as a server command writes them
PREFIX_CACHE_OFF_FLAG = re.compile(r"--disable-radix-cache\b|--no-enable-prefix-caching\b")


# each engine's flags for its step budget and memory share (vLLM: and its KV block size; SGLang: its running requests), as
# a server command writes them
# -> EngineSettings fields
SETTING_FLAGS = {
    "vllm": {"max_num_batched_tokens": "--max-num-batched-tokens", "gpu_memory_utilization": "--gpu-memory-utilization",
             "block_size": "--block-size"},
    "sglang": {"max_num_batched_tokens": "--chunked-prefill-size", "mem_fraction_static": "--mem-fraction-static",
               "max_running_requests": "--max-running-requests"},
}
INTEGER_SETTINGS = ("max_num_batched_tokens", "block_size", "max_running_requests")


def stated_value(flag: str, notes: Any) -> float | None:
    """The number a row's server command gives `flag`, where it states one (a recipe's per-concurrency branches that
    state two are not read); InferenceX's recipes that set it from the run's concurrency write `flag ${CONC} (=N)`."""
    values = {float(v) for v in re.findall(re.escape(flag) + r"(?:[ =]|\s+\$\{CONC\}\s+\(=)(\d+(?:\.\d+)?)(?![\d.])",
                                           str(notes or ""))}
    return values.pop() if len(values) == 1 else None


def stated_settings(engine: str, notes: Any) -> tuple[tuple[str, float], ...]:
    """The step budget, memory share, (vLLM) KV block size and (SGLang) running requests a row's server command
    states."""
    found = []
    for field, flag in SETTING_FLAGS.get(engine, {}).items():
        value = stated_value(flag, notes)
        if value is not None:
            found.append((field, int(value) if field in INTEGER_SETTINGS else value))
    return tuple(found)


def stated_moe_kernel(engine: str, notes: Any) -> str | None:
    """The fused-MoE kernel a row's server command tells the engine to run (SGLang --moe-runner-backend, one name;
    vLLM's switches and TensorRT-LLM's moe_config backends, planner.estimator.engines.moe_kernels), the protocol's
    stated-kernel amendment and its TensorRT-LLM one. Whether it reaches the row's experts is the timer's to say
    (with_measured_kernel)."""
    text = str(notes or "")
    if engine == "sglang":
        return named_once("--moe-runner-backend", text)
    if engine == "vllm":
        return next((kernel for kernel, switch in VLLM_SWITCHES.items()
                     if all(re.search(rf"{name}={value}\b", text) for name, value in switch.environment)), None)
    if engine == "trtllm":
        backends = set(TRTLLM_MOE_BACKEND.findall(text))
        return next((kernel for kernel, backend in TRTLLM_BACKENDS.items() if backends == {backend}), None)
    return None


def stated_attention_backend(engine: str, notes: Any) -> str | None:
    """The attention backend a row's SGLang server command names (--attention-backend, one name; the protocol's
    attention-backend amendment)."""
    return named_once("--attention-backend", str(notes or "")) if engine == "sglang" else None


def named_once(flag: str, text: str) -> str | None:
    """The one name a server command gives `flag` (a command naming two is not read)."""
    names = set(re.findall(re.escape(flag) + r"[ =]([a-z][a-z0-9_]*)", text))
    return names.pop() if len(names) == 1 else None


def with_measured_kernel(catalog: Catalog, m: Measurement, arch: Architecture) -> Measurement:
    """The row as timed: a stated kernel no table measures for its engine, GPU generation and experts' format is
    kept as `unmeasured_kernel` and the row timed on its release's pick."""
    if m.moe_kernel is None:
        return m
    try:
        timer(catalog, m, arch)
    except UnmeasuredMoeKernel:
        return replace(m, moe_kernel=None, unmeasured_kernel=m.moe_kernel)
    return m


def stated_recv_interval(engine: str, notes: Any) -> int:
    """SGLang's decode steps between polls for new requests as the row's server command states them (the protocol's
    receive-interval amendment); 1 (every loop) otherwise."""
    value = stated_value("--scheduler-recv-interval", notes) if engine == "sglang" else None
    return int(value) if value else 1


def stated_prefill_delay(engine: str, dp: int, notes: Any) -> int:
    """The passes SGLang's prefill delayer may hold a prefill, where a DP-attention row's server command turns it on
    (`--enable-prefill-delayer`, with `--prefill-delayer-max-delay-passes N` where stated); 0 otherwise (the
    protocol's DP prefill amendment)."""
    if engine != "sglang" or dp == 1 or "--enable-prefill-delayer" not in str(notes or ""):
        return 0
    value = stated_value("--prefill-delayer-max-delay-passes", notes)
    return int(value) if value else PREFILL_DELAYER_PASSES


def stated_running_cap(notes: Any) -> int | None:
    """The cap a row's server command states (the smallest, if it names several), or None."""
    caps = [int(n) for n in RUNNING_CAP_FLAG.findall(str(notes or ""))]
    return min(caps) if caps else None


def stated_release(text: Any) -> str | None:
    """The release number a row's engine_version starts with ("v0.5.12 (image ...)" -> "0.5.12"); None when it
    states none (a commit, "not stated", or setuptools-scm's 0.0.0 of a build with no release tag in reach, as
    "0.0.0.dev1+g631db6c75": a dev build of an unknown release)."""
    found = re.match(r"\s*v?(\d+(?:\.\d+)+)", str(text or ""))
    return found.group(1) if found and set(found.group(1)) != {"0", "."} else None


def as_checkpoint(catalog: Catalog, m: Measurement) -> Measurement:
    """A row that says "fp8" of a checkpoint stored in block-scaled FP8 (DeepSeek, Qwen3 FP8, MiniMax) ran that
    checkpoint: its block-fp8 kernels."""
    arch = architecture_from_config(catalog.models.get(m.model).config, m.model)
    native = resolve_precision(catalog, arch, "auto").name
    return replace(m, precision=native) if m.precision == "fp8" and native == "fp8-block" else m


def schedules_closed_loop(m: Measurement) -> bool:
    """Whether the row is predicted as a closed loop the engine schedules (its pool and limits admit R of the C
    clients); under DP attention, with its groups' pools, as `planner perf --concurrency --dp` on an engine whose memory
    planner sizes under DP attention (SGLang; the protocol's amendment on DP-attention closed loops); on another engine
    DP attention is timed at the stated batch."""
    return (m.form == "closed loop" and m.engine in CLOSED_LOOP_ENGINES
            and (m.dp == 1 or registry.engine(m.engine).sizes_expert_parallel))


def architecture(catalog: Catalog, m: Measurement) -> Architecture:
    """The model, checked to hold the stated batch at its full context (else the engine ran fewer at once: skipped,
    unless the closed loop's admission schedules it; the protocol's amendment on closed loops whose concurrency the
    engine could not run at once)."""
    arch = architecture_from_config(catalog.models.get(m.model).config, m.model)
    running = min(m.batch, m.max_running) if m.max_running and m.form == "closed loop" else m.batch
    request = Request(context=m.prompt_tokens + m.output_tokens, batch=running, tp=m.tp, pp=m.pp,
                      precision=m.precision, kv_dtype=m.kv_dtype, ep=m.ep, dp=m.dp)
    try:
        fit = estimate_memory(arch, request, catalog, GpuTarget.from_catalog(catalog.gpus.get(m.gpu))).gpu
    except PlannerInputError as exc:
        raise Skip(f"configuration planner rejects ({str(exc).split(':')[0]})") from None
    if (fit is None or not fit.fits) and not schedules_closed_loop(m):
        raise Skip("stated batch does not fit in memory (the engine ran fewer at once)")
    return arch


def timer(catalog: Catalog, m: Measurement, arch: Architecture,
          performance: PerformanceCatalog | None = None) -> ReplicaTimer:
    return replica_timer(arch, m.precision, m.kv_dtype, catalog.gpus.get(m.gpu), m.tp, m.pp, catalog, m.engine,
                         performance, m.ep, m.dp, m.release, m.prefix_cache, m.moe_kernel)


def predict(catalog: Catalog, m: Measurement, arch: Architecture,
            performance: PerformanceCatalog | None = None) -> ReplicaPerformance:
    """As `steady_state`, its output tokens/s as the row's run shows it: a closed loop's at the concurrency the run held
    (its stated mean concurrency L of its C clients, x L / C: the protocol's amendment on a finite run's throughput)."""
    predicted = steady_state(catalog, m, arch, performance)
    if m.mean_concurrency is None:
        return predicted
    # the loop's steady state holds all C clients' requests
    return replace(predicted, output_tokens_per_s=at_held_concurrency(predicted.output_tokens_per_s,
                                                                      m.mean_concurrency, m.batch, m.batch))


def steady_state(catalog: Catalog, m: Measurement, arch: Architecture,
                 performance: PerformanceCatalog | None = None) -> ReplicaPerformance:
    """A static batch as timer_performance times it; a closed loop (C clients) as `planner perf --concurrency`
    gives its steady state (bench/SPEED_PROTOCOL.md), where the engine has a memory profile to schedule with.
    `performance`: the speed model's constants (default catalogs/performance.yaml; a calibration's, for
    bench/calibration_accuracy.py)."""
    if m.speculation is not None:
        return api.perf(m.model, gpu=m.gpu, tp=m.tp, pp=m.pp, ep=m.ep, precision=m.precision, kv_dtype=m.kv_dtype,
                        engine=m.engine, batch=m.batch, prompt_tokens=m.prompt_tokens, output_tokens=m.output_tokens,
                        speculation=m.speculation, catalog=catalog, performance=performance,
                        moe_kernel=m.moe_kernel).performance
    shape = Workload(m.prompt_tokens, m.output_tokens)
    step_timer = timer(catalog, m, arch, performance)
    static = timer_performance(step_timer, m.batch, shape)
    if m.form == DECODE_WINDOW:  # every request decoding, none prefilling: the batch's decode step is the TPOT
        return replace(static, tpot_s=static.decode_step_s, output_tokens_per_s=m.batch / static.decode_step_s)
    if not schedules_closed_loop(m):
        return static
    # as `planner perf --concurrency --engine-version R` (api._replica): the pool of the row's release where planner
    # keeps a profile of it, else the engine's default (the protocol's release-pool amendment); the release's kernels
    card = catalog.gpus.get(m.gpu)
    pool_release = m.release if m.release and load_profiles().versions(m.engine).knows(m.release) else None
    settings = EngineSettings(m.engine, **dict(m.settings), version=pool_release,  # type: ignore[arg-type]
                              attention_backend=m.attention_backend)

    def scheduler_at(context: int) -> Scheduler:
        request = Request(context=context, batch=1, tp=m.tp, pp=m.pp, precision=m.precision, kv_dtype=m.kv_dtype,
                          dp=m.dp)
        budget = engine_budget(arch, request, settings, GpuTarget.from_catalog(card), catalog)
        if not budget.fits:
            raise PlannerInputError(f"--engine {m.engine}: one request does not fit: {budget.message}")
        return Scheduler.of(budget, max_seqs_cap=m.max_running, dp=m.dp)  # every DP group's own pool

    scheduler = scheduler_at(m.prompt_tokens + m.output_tokens)
    delayer = prefill_delayer(pool_release, m.prefill_delay_passes) if m.prefill_delay_passes else None
    loop = closed_loop(step_timer, scheduler, shape, m.batch, m.lengths_vary, m.recv_interval, delayer)
    if admits_past_pool(scheduler, loop, m.lengths_vary and m.drawn_lengths is None):
        # admitted past what the pool holds to the end, then preempted: the simulator replays the run (the protocol's
        # amendments on SGLang's admission before 0.5.22 and on vLLM's, the harness's lengths drawn), on a replica
        # sized as `planner bench` sizes it, its max-model-len the longest request drawn
        lengths, ratio, longest = replayed_lengths(m)
        replica = scheduler if longest == m.prompt_tokens + m.output_tokens else scheduler_at(longest)
        # a server with its prefix cache off recomputes every token of a request it preempted
        replica = replace(replica, prefix_cache=replica.prefix_cache and m.prefix_cache)
        run = closed_loop_run(step_timer, replica, lengths, m.batch, range_ratio=ratio)
        tpot_ms = run.tpot.median_ms if m.tpot_median else run.tpot.mean_ms
        return replace(static, tpot_s=tpot_ms / 1000, output_tokens_per_s=run.output_throughput,
                       requests_per_s=run.request_throughput, ttft_s=run.ttft.mean_ms / 1000)
    return replace(static, tpot_s=loop.tpot_s, output_tokens_per_s=loop.output_tokens_per_s,
                   requests_per_s=loop.requests_per_s, ttft_s=loop.ttft_s)


def replayed_lengths(m: Measurement) -> tuple[Workload, float, int]:
    """The lengths a replay of the row draws, as `closed_loop_run` takes them, and its longest request's tokens: its
    own where they are fixed; where InferenceX's harness drew them, the floor of each range's mean and the prompt
    range's relative half-width, vLLM's random dataset within a token of the harness's ranges (the protocol's amendment
    on replaying them)."""
    if not m.lengths_vary or m.drawn_lengths is None:
        return Workload(m.prompt_tokens, m.output_tokens), 0.0, m.prompt_tokens + m.output_tokens
    (prompt_low, prompt_high), (output_low, output_high) = m.drawn_lengths
    ratio = (prompt_high - prompt_low) / (prompt_high + prompt_low)
    drawn = BenchmarkRun(num_prompts=1, input_len=(prompt_low + prompt_high) // 2,
                         output_len=(output_low + output_high) // 2, range_ratio=ratio)
    return Workload(drawn.input_len, drawn.output_len), ratio, drawn.input_bounds[1] + drawn.output_high


@dataclass(frozen=True)
class Comparison:
    measurement: Measurement
    predicted: ReplicaPerformance

    @staticmethod
    def error(predicted: float, measured: float | None) -> float | None:
        return None if measured is None else predicted / measured - 1

    @property
    def toks_error(self) -> float | None:
        return self.error(self.predicted.output_tokens_per_s, self.measurement.output_tokens_per_s)

    @property
    def tpot_error(self) -> float | None:
        return self.error(self.predicted.tpot_s, self.measurement.tpot_s)

    @property
    def ttft_error(self) -> float | None:
        return self.error(self.predicted.ttft_s, self.measurement.ttft_s)


def load_measurements(catalog: Catalog) -> tuple[list[tuple[Measurement, Architecture]], Counter[str], int]:
    """(usable rows with their architecture, skip reasons counted, rows read) over every data file."""
    usable, skipped, total = [], Counter[str](), 0
    for prefix, path in DATA_FILES:
        if not path.exists():
            continue
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        total += len(rows)
        for index, raw in enumerate(rows):
            try:
                m = as_checkpoint(catalog, normalise(f"{prefix}{index}", raw, catalog))
                arch = architecture(catalog, m)
                usable.append((with_measured_kernel(catalog, m, arch), arch))
            except Skip as reason:
                skipped[str(reason)] += 1
    return usable, skipped, total


def compare(catalog: Catalog, usable: list[tuple[Measurement, Architecture]], skipped: Counter[str]
            ) -> list[Comparison]:
    """Every usable row predicted; one whose engine cannot hold a single request at its layout (the closed loop
    schedules with the engine's memory budget) is counted as skipped with that reason."""
    out = []
    for m, arch in usable:
        try:
            out.append(Comparison(m, predict(catalog, m, arch)))
        except PlannerInputError:
            skipped["the engine's memory budget does not hold one request at the stated layout"] += 1
    return out


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def print_table(comparisons: list[Comparison]) -> None:
    header = (f"{'row':>7} {'engine':9} {'model':16} {'prec':9} {'gpu':13} {'tpxpp':>5} {'batch':>5} {'isl/osl':>11} "
              f"{'tok/s meas':>10} {'pred':>9} {'err':>5}  {'TPOT ms meas':>12} {'pred':>7} {'err':>5}  "
              f"{'TTFT ms meas':>12} {'pred':>8} {'err':>5}  bound")
    print(header)
    for c in comparisons:
        m, p = c.measurement, c.predicted
        print(f"{m.row:>7} {m.engine:9} {m.model[:16]:16} {m.precision:9} {m.gpu[:13]:13} {f'{m.tp}x{m.pp}':>5} "
              f"{m.batch:>5} {f'{m.prompt_tokens}/{m.output_tokens}':>11} "
              f"{_fmt(m.output_tokens_per_s):>10} {_fmt(p.output_tokens_per_s if m.output_tokens_per_s else None):>9} "
              f"{_pct(c.toks_error):>5}  {_fmt(m.tpot_s, 1000, 2):>12} {_fmt(p.tpot_s if m.tpot_s else None, 1000, 2):>7} "
              f"{_pct(c.tpot_error):>5}  {_fmt(m.ttft_s, 1000):>12} {_fmt(p.ttft_s if m.ttft_s else None, 1000):>8} "
              f"{_pct(c.ttft_error):>5}  {p.decode_bound}")


# ---------------------------------------------------------------------------------------------
# The class table (bench/SPEED_PROTOCOL.md, section 3)

TARGETS = {"overall": 0.15, "MoE, batch <= 4": 0.20, "class": 0.25, "ratio": 2.0, "TTFT": 0.25}


def classes(m: Measurement, arch: Architecture, catalog: Catalog) -> list[str]:
    """Every class a row is scored in."""
    generation = catalog.gpus.get(m.gpu).generation
    kind = "MoE" if arch.moe is not None else "dense"
    prefix, _, _ = m.row.rpartition(":")
    out = [f"{kind}, batch {'<= 4' if m.batch <= 4 else '> 4'}", f"engine {m.engine}", f"generation {generation}",
           f"form {m.form}", f"file {prefix or 'reference'}"]
    if generation.startswith("cdna"):
        out.append("AMD")
    if m.ep > 1:
        out.append("expert parallel (tensor-parallel attention)")
    if m.speculation is not None:
        out.append("speculative (MTP)")
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _ratio(error: float) -> float:
    """max(predicted / measured, measured / predicted)."""
    return max(1 + error, 1 / (1 + error))


def _line(label: str, errors: list[float]) -> str:
    if not errors:
        return f"  {label:28} {0:>5}"
    absolute = [abs(e) for e in errors]
    return (f"  {label:28} {len(errors):>5} {statistics.median(absolute):>7.1%} {_quantile(absolute, 0.9):>7.1%} "
            f"{max(_ratio(e) for e in errors):>6.2f} {statistics.median(errors):>+8.1%}")


def print_summary(comparisons: list[Comparison], usable: list[tuple[Measurement, Architecture]], catalog: Catalog,
                  skipped: Counter[str], total: int) -> None:
    print(f"\nrows read {total}: scored {len(comparisons)}, skipped {sum(skipped.values())}")
    for reason, count in skipped.most_common():
        print(f"  skipped {count:>3}: {reason}")
    stated = Counter(m.moe_kernel for m, _ in usable if m.moe_kernel)
    unmeasured = Counter(m.unmeasured_kernel for m, _ in usable if m.unmeasured_kernel)
    print(f"  a stated MoE kernel timed on its table: {sum(stated.values())} rows "
          f"({', '.join(f'{k} {n}' for k, n in stated.most_common()) or 'none'}); stated but measured by no table "
          f"(timed on the release's pick): {sum(unmeasured.values())} "
          f"({', '.join(f'{k} {n}' for k, n in unmeasured.most_common()) or 'none'})")
    by_class: dict[str, list[float]] = {}
    archs = {m.row: arch for m, arch in usable}
    for c in comparisons:
        if c.tpot_error is None:
            continue
        for name in ["all", *classes(c.measurement, archs[c.measurement.row], catalog)]:
            by_class.setdefault(name, []).append(c.tpot_error)
    print(f"\nTPOT |predicted / measured - 1|\n  {'class':28} {'rows':>5} {'median':>7} {'p90':>7} {'max x':>6} {'signed':>8}")
    for name in sorted(by_class, key=lambda n: (n != "all", n)):
        print(_line(name, by_class[name]))
    toks = [c.toks_error for c in comparisons if c.toks_error is not None]
    ttft = [c.ttft_error for c in comparisons if c.ttft_error is not None]
    print(_line("decode tokens/s, all", toks))
    print(_line("TTFT, single request", ttft))
    everything = by_class.get("all", [])
    moe_small = by_class.get("MoE, batch <= 4", [])
    checks = {
        f"TPOT median <= {TARGETS['overall']:.0%}": bool(everything) and statistics.median(map(abs, everything)) <= TARGETS["overall"],
        f"MoE batch <= 4 median <= {TARGETS['MoE, batch <= 4']:.0%}":
            bool(moe_small) and statistics.median(map(abs, moe_small)) <= TARGETS["MoE, batch <= 4"],
        f"no class median above {TARGETS['class']:.0%}":
            all(statistics.median(map(abs, e)) <= TARGETS["class"] for e in by_class.values()),
        f"no run beyond {TARGETS['ratio']:g}x": all(_ratio(e) <= TARGETS["ratio"] for e in everything),
        f"TTFT median <= {TARGETS['TTFT']:.0%}": bool(ttft) and statistics.median(map(abs, ttft)) <= TARGETS["TTFT"],
    }
    print("\ntargets (issue 20):")
    for name, met in checks.items():
        print(f"  {'met    ' if met else 'MISSED '} {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summary", action="store_true", help="print the class table only")
    args = parser.parse_args()
    catalog = load_catalog()
    usable, skipped, total = load_measurements(catalog)
    comparisons = compare(catalog, usable, skipped)
    if not args.summary:
        print_table(comparisons)
    print_summary(comparisons, usable, catalog, skipped, total)


if __name__ == "__main__":
    main()
