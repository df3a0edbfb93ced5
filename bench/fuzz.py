#!/usr/bin/env python3
"""Fuzz every input planner reads: size strings, config.json, scenario YAML, CLI flags, weights files
(safetensors headers, GGUF metadata), paths (FIFOs, folders, links, loops, long names, sparse files, as
inputs and as -o targets), model ids (Hub ids the Hub rejects, URLs, missing paths), plan files given to
`export` (a real plan mutated, hostile text in its strings: an export must never let a command out of its word,
nor launch a model or --checkpoint other than the one checked), price files (`prices update` from a damaged
vms.csv: what it writes must load as the catalog), text outputs (names with markup, escape codes, math, HTML,
code fences and formulas in terminal tables, Markdown, CSV and charts), the HTTP API of `planner serve` (a real
server on 127.0.0.1: every answer a 2xx or a JSON 4xx within 10 s, with its security headers), arrival traces, and
benchmark results and calibration files (the four result formats `planner calibrate` reads, damaged; a calibration
file it wrote, damaged: every run read holds finite figures, every factor loaded is within its bounds).

The contract under test: whatever a user types or a file holds, planner answers with a result or
with a one-line error (PlannerInputError in the library; `error: ...` and exit code 2 from the
CLI), never with a traceback and never by hanging. Each case is generated from the seed, run
in-process under a deadline and classified; anything else is a finding, printed with the case
that produced it so it can be replayed.

tests/test_fuzz.py runs these generators with a small budget on every test run; this script is
the heavy run:

    python bench/fuzz.py                           # every surface, 5,000 cases each, seed 0
    python bench/fuzz.py --cases 20000 --seed 3    # cases per surface
    python bench/fuzz.py --surface scenario --solve-every 5   # also solve 1 in 5 valid scenarios
    python bench/fuzz.py --surface weights --surface paths --surface model-ids --cases 5000
    python bench/fuzz.py --surface plans --surface prices --surface text --cases 2000
    python bench/fuzz.py --surface http --cases 500   # hostile requests to a `planner serve` it starts on 127.0.0.1
    python bench/fuzz.py --surface results --cases 20000   # result files and calibration files
    python bench/fuzz.py --large                   # the large-input and long-search reproducers: time and peak memory each
    python bench/fuzz.py --large --repeat 3        # each three times: best and worst

Exit code 0 when nothing was found, 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import csv
import html
import io
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml
from typer.testing import CliRunner

import planner
from planner import api
from planner.model.architecture import (
    UnsupportedArchitecture,
    architecture_from_config,
    size_only_architecture_from_config,
)
from planner.plan.deadline import FINISHING_S
from planner.render.html import CHARTS_S
from planner.plan.search import build_search_space
from planner.catalog.load import catalog_dir, load_catalog
from planner.cli import main as cli_main
from planner.errors import PlannerInputError
from planner.estimator.engines.registry import PLANNING_MARGIN, export_targets, profiled_engines
from planner.estimator.memory import GpuTarget, MemoryEstimate, Request, estimate_memory
from planner.render.records import estimate_json
from planner.plan.scenario import load_scenario, parse_scenario
from planner.units import parse_count, parse_size

REPO = Path(__file__).resolve().parent.parent
PACKAGE_DIR = Path(planner.__file__).resolve().parent
SCENARIO_FILES = sorted((REPO / "scenarios").glob("*.yaml"))
TEST_CONFIGS = sorted((REPO / "tests" / "data" / "configs").glob("*/config.json"))
CATALOG = load_catalog()

# A case that runs longer than this is a hang: the slowest legitimate case (a config.json with the
# most layers planner accepts, estimated under pipeline parallelism) takes well under a second, and
# a solve of a shipped scenario about two.
CASE_SECONDS = 10.0
SOLVE_SECONDS = 20.0
SURFACES = ("sizes", "config", "scenario", "cli", "weights", "paths", "model-ids", "plans", "prices", "text", "http",
            "traces", "results")


# ---------------------------------------------------------------------------------------------
# Running one case


class CaseTimeout(BaseException):
    """Raised into a case that runs past its deadline (a BaseException, so planner cannot swallow it)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Finding:
    surface: str
    problem: str  # crash | hang | multi-line error | bad result | executed input
    where: str  # the exception and the planner frames it came through, or what is wrong with the result
    case: str  # the input, shortened, to replay it
    detail: str = ""  # the exception's message for the first case

    def __str__(self) -> str:
        detail = f"\n      message: {self.detail}" if self.detail else ""
        return f"[{self.surface}] {self.problem}: {self.where}{detail}\n      case: {self.case}"


@dataclass
class Tally:
    """What one surface tried and how each case ended."""

    surface: str
    cases: int = 0
    results: int = 0
    errors: int = 0
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)  # the first case of each distinct problem
    finding_cases: int = 0

    def found(self, problem: str, where: str, case: Any, detail: str = "") -> None:
        self.finding_cases += 1
        self.findings.setdefault((problem, where), Finding(self.surface, problem, where, shorten(case), detail))

    def summary(self) -> str:
        return (f"{self.surface:9} {self.cases:7,} cases: {self.results:7,} results, {self.errors:7,} one-line errors, "
                f"{self.finding_cases:,} findings ({len(self.findings)} distinct)")


def shorten(case: Any, limit: int = 400) -> str:
    text = case if isinstance(case, str) else repr(case)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _planner_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    frames = traceback.extract_tb(exc.__traceback__)
    return [f for f in frames if Path(f.filename).resolve().is_relative_to(PACKAGE_DIR)] or frames


def crash_site(exc: BaseException) -> str:
    """The exception type and the innermost frame inside the planner package: one line per distinct bug."""
    frames = _planner_frames(exc)
    site = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return f"{type(exc).__name__}{site}"


def hang_site(exc: BaseException) -> str:
    """The planner calls a case was inside when its deadline struck: a loop that does not end is among them."""
    return " > ".join(f"{Path(f.filename).name}:{f.name}" for f in _planner_frames(exc))


def one_line_problem(message: str) -> str | None:
    if not message.strip():
        return "an empty error message"
    if "\n" in message or "\r" in message:
        return "an error message over several lines"
    return None


def run_case(tally: Tally, case: Any, action: Callable[[], Any], check: Callable[[Any], str | None] | None = None,
             seconds: float = CASE_SECONDS, is_error: Callable[[Any], bool] | None = None) -> None:
    """Run one case: a result that passes `check`, or a one-line PlannerInputError; anything else is a finding.

    `is_error` tells a returned value that is itself an error (the CLI's exit code 2) from a result."""
    tally.cases += 1
    try:
        with deadline(seconds):
            value = action()
    except PlannerInputError as exc:
        problem = one_line_problem(str(exc))
        if problem:
            tally.found("multi-line error", f"{problem}: {shorten(str(exc), 120)}", case)
        else:
            tally.errors += 1
        return
    except CaseTimeout as exc:
        tally.found("hang", f"still running after {seconds:g} s in {hang_site(exc)}", case)
        return
    except Exception as exc:  # noqa: BLE001 - any other exception is what the fuzzer looks for
        tally.found("crash", crash_site(exc), case, shorten(str(exc), 160))
        return
    try:
        problem = check(value) if check else None
    except Exception as exc:  # noqa: BLE001 - e.g. the JSON output of a result cannot be written
        problem = f"checking the result raised {crash_site(exc)}: {shorten(str(exc), 120)}"
    if problem:
        tally.found("bad result", problem, case)
    elif is_error and is_error(value):
        tally.errors += 1
    else:
        tally.results += 1


# ---------------------------------------------------------------------------------------------
# Odd values, shared by every surface

ODD_SCALARS: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2, 3, 7, 255, 2**31, 2**63, 10**30, 0.5, 1.5, -2.5, 1e308,
    math.inf, -math.inf, math.nan, "", " ", "x", "8K", "1e9", "70B", "true", "null", "ünïcødé ☃", "日本語",
    "😀", "\x00", "a\nb", "\t", "\u202e", "\ud800", "x" * 5000,
)


def nested(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def odd_value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.75:
        return rng.choice(ODD_SCALARS)
    if roll < 0.85:
        return [rng.choice(ODD_SCALARS) for _ in range(rng.randint(0, 4))]
    if roll < 0.95:
        return {str(rng.choice(ODD_SCALARS)): rng.choice(ODD_SCALARS) for _ in range(rng.randint(0, 3))}
    # real JSON/YAML decoders refuse nesting much deeper than this (see the text-level mutations)
    return nested(rng.choice([5, 50, 300]))


def key_paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key of every mapping inside `data`, as a path of keys."""
    paths: list[tuple] = []
    if isinstance(data, dict):
        for key, value in data.items():
            paths.append((*prefix, key))
            paths.extend(key_paths(value, (*prefix, key)))
    return paths


def mapping_paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """The path of every mapping inside `data` (the empty path is `data` itself)."""
    if not isinstance(data, dict):
        return []
    return [prefix] + [p for key, value in data.items() for p in mapping_paths(value, (*prefix, key))]


def at(data: dict, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


def nudged_number(rng: random.Random, value: int | float) -> Any:
    """A number near the original, an extreme, or the same number in another type."""
    return rng.choice([0, -value, value + 1, value - 1, value * 2, value * 1000, value // 3, 2**63, 10**30,
                       float(value) + 0.5, float(value), str(value), [value]])


def mutate_tree(rng: random.Random, data: dict, vocabulary: list[str], value_for_key: Callable[[str], Any]) -> dict:
    """One to three mutations: drop a key, retype or nudge a value, add a key, bend a list."""
    data = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        paths = key_paths(data)
        op = rng.choice(("drop", "odd", "nudge", "add", "add", "list", "known"))
        if op == "drop" and paths:
            path = rng.choice(paths)
            del at(data, path[:-1])[path[-1]]
        elif op == "odd" and paths:
            path = rng.choice(paths)
            at(data, path[:-1])[path[-1]] = odd_value(rng)
        elif op == "nudge":
            numeric = [p for p in paths if isinstance(at(data, p), (int, float)) and not isinstance(at(data, p), bool)]
            if numeric:
                path = rng.choice(numeric)
                at(data, path[:-1])[path[-1]] = nudged_number(rng, at(data, path))
        elif op == "add":
            key = rng.choice(vocabulary)
            target = at(data, rng.choice(mapping_paths(data)))
            target[key] = value_for_key(key) if rng.random() < 0.6 else odd_value(rng)
        elif op == "list":
            lists = [p for p in paths if isinstance(at(data, p), list)]
            if lists:
                path = rng.choice(lists)
                items = at(data, path)
                choice = rng.random()
                if choice < 0.3:
                    del items[rng.randint(0, len(items)):]
                elif choice < 0.6:
                    items.extend(items[: rng.randint(1, 3)] or [odd_value(rng)])
                elif items:
                    items[rng.randrange(len(items))] = odd_value(rng)
        elif op == "known" and paths:
            path = rng.choice(paths)
            at(data, path[:-1])[path[-1]] = value_for_key(str(path[-1]))
    return data


# ---------------------------------------------------------------------------------------------
# Surface 1: size and count strings (--gpu-memory, --params, token counts in scenarios)

_UNIT_FACTORS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
                 "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def random_size_text(rng: random.Random) -> str:
    if rng.random() < 0.4:  # well-formed, in the forms the README shows: checked against an independent reading
        number = rng.choice([str(rng.randint(1, 10**rng.randint(1, 8))),
                             f"{rng.uniform(0.1, 999):.{rng.randint(1, 3)}f}"])
        return number + rng.choice(["", " "]) + rng.choice(list(_UNIT_FACTORS)[1:] + ["gb", "GIB", "mib"])
    number = rng.choice([
        str(rng.randint(0, 10**rng.randint(1, 15))), f"{rng.random() * 10**rng.randint(0, 6):.{rng.randint(0, 4)}f}",
        f"{rng.randint(1, 99)}e{rng.randint(-30, 30)}", f"1e{rng.choice([400, 999999, 10**9, -10**9])}",
        f"{rng.randint(1, 9)}E+{rng.randint(0, 20)}", ".5", "5.", "1.2.3", "", "0", "00", "1_000", "٣", "1e", "e9",
        "nan", "inf", "-inf", "0x10", "-5", "+5", "9" * 5000, "1" + "0" * 30,
    ])
    unit = rng.choice(list(_UNIT_FACTORS) + ["gb", "gib", "MIB", "K", "M", "T", "b", "Gb", "k", "parsecs", "ＧＢ",
                                             "G B", "GBGB", "%", "GB\x00", "\u00b5B"])
    space = rng.choice(["", "", " ", "\t", "\u00a0", "\u2003", "\n"])
    return rng.choice(["", " ", "\n"]) + number + space + unit + rng.choice(["", " ", "\n"])


def expected_size(text: str) -> int | None:
    """An independent reading of the plain cases: a short decimal and a unit the README lists."""
    match = re.fullmatch(r"\s*([0-9]{1,12}(?:\.[0-9]{1,6})?)\s*([A-Za-z]*)\s*", text)
    if not match:
        return None
    units = {k.lower(): v for k, v in _UNIT_FACTORS.items()}
    factor = units.get(match.group(2).lower())
    if factor is None:
        return None
    return int(Fraction(match.group(1)) * factor)


def fuzz_sizes(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """parse_size, parse_count and scenario token counts (no files: `folder` goes unused)."""
    for _ in range(cases):
        text = random_size_text(rng)
        kind = rng.choice(("size", "count", "tokens"))
        if kind == "size":
            expected = expected_size(text)

            def check_size(value: Any, expected: int | None = expected) -> str | None:
                if not isinstance(value, int) or value <= 0:
                    return f"parse_size gave {value!r}, not a positive whole number of bytes"
                if expected is not None and value != expected:
                    return f"parse_size gave {value:,} bytes, expected {expected:,}"
                return None

            run_case(tally, ("parse_size", text), lambda: parse_size(text, "--gpu-memory"), check_size)
        elif kind == "count":
            run_case(tally, ("parse_count", text), lambda: parse_count(text, "--params"),
                     lambda v: None if isinstance(v, int) and v > 0 else f"parse_count gave {v!r}")
        else:
            where = rng.choice(("context", "concurrency"))
            value: Any = text if rng.random() < 0.8 else {"min": text, "max": random_size_text(rng)}
            data = {"model": "llama-3.1-8b", "workload": {"context": 8192, where: value}}
            run_case(tally, ("scenario tokens", data), lambda: parse_scenario(data), scenario_problem)


# ---------------------------------------------------------------------------------------------
# Surface 2: config.json (mutated real configs, random configs, damaged files)

_ARCHITECTURE_SOURCE = "\n".join(p.read_text(encoding="utf-8") for p in [PACKAGE_DIR / "model" / "architecture.py",
                                                                         *sorted((PACKAGE_DIR / "model" / "families").glob("*.py"))])
# Every key the counter reads, taken from its source so a newly read key is fuzzed without an edit here.
CONFIG_KEYS = sorted(set(re.findall(r'\.(?:int|opt_int|bool|list|str)\("(\w+)"', _ARCHITECTURE_SOURCE))
                     | {"text_config", "vision_config", "quantization_config", "tie_word_embeddings"})
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma3_text", "phi3", "phi", "cohere",
               "glm4", "granite", "mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "llama4_text", "deepseek_v2",
               "deepseek_v3", "kimi_k2", "qwen3_next", "rwkv7", "", "LLAMA", "qwen3_5_text", "qwen3_5_moe_text",
               "qwen3_vl_text", "deepseek_v32", "glm_moe_dsa", "glm4_moe", "minimax_m2", "nemotron_h", "nemotron-nas",
               "gemma4_text", "mimo_v2_flash", "seed_oss", "olmo2", "olmo3", "exaone4", "smollm3", "ernie4_5",
               "apertus", "arcee", "olmoe", "ernie4_5_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_5_vl_text", "cohere2",
               "starcoder2", "phimoe", "granitemoe", "granitemoeshared", "glm4v", "glm4v_moe_text", "hy_v3",
               "exaone_moe", "solar_open", "granitemoehybrid", "falcon_h1")
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention", "mamba", "attention",
               "cross_attention")


def base_configs() -> list[dict]:
    configs = [dict(m.config) for m in CATALOG.models]
    configs += [json.loads(p.read_text(encoding="utf-8")) for p in TEST_CONFIGS]
    return configs


def plausible_config_value(rng: random.Random, key: str) -> Any:
    """A value of the right kind for a config key, so mutations also reach deep code paths."""
    if key == "model_type":
        return rng.choice(MODEL_TYPES)
    if key == "layer_types":
        return [rng.choice(LAYER_TYPES) for _ in range(rng.choice([0, 2, 4, 32]))]
    if key in ("mlp_only_layers", "moe_layers", "no_rope_layers"):
        return [rng.choice([0, 1, 2, 3, 31, -1, 1000]) for _ in range(rng.choice([0, 1, 4, 48]))]
    if key in ("torch_dtype", "dtype"):
        return rng.choice(["bfloat16", "float16", "float32", "int8", "float8"])
    if key == "quantization_config":
        return rng.choice([
            {"quant_method": "fp8", "weight_block_size": [128, 128]}, {"quant_method": "awq", "bits": 4},
            {"quant_method": "gptq", "bits": 8}, {"quant_method": "mxfp4"}, {"quant_method": "bitsandbytes"},
            {"quant_method": "modelopt", "quant_algo": "NVFP4"}, {"quant_method": "compressed-tensors",
             "config_groups": {"g": {"weights": {"type": "int", "num_bits": 4}}}},
            {"quant_method": "compressed-tensors", "config_groups": ["g"]}, {"quant_method": "exl2"}, "fp8", [],
        ])
    if key in ("text_config", "vision_config"):
        return {"model_type": rng.choice(MODEL_TYPES + ("siglip_vision_model", "pixtral", "llama4_vision_model"))}
    if key in ("topk_method",):
        return rng.choice(["noaux_tc", "greedy", ""])
    if key.startswith(("use_", "tie_", "attention_bias", "mlp_bias", "multimodal")):
        return rng.choice([True, False])
    return rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 4096, 2**31, 10**9])


def random_request(rng: random.Random) -> tuple[Request, GpuTarget | None]:
    precisions = [p.name for p in CATALOG.precisions]
    request = Request(
        context=rng.choice([1, 7, 4096, 8192, 131072, 10**6, 10**8, 0, -5, 10**8 + 1]),
        batch=rng.choice([1, 1, 2, 16, 256, 10**6, 0, 10**6 + 1]),
        tp=rng.choice([1, 1, 1, 2, 4, 8, 3, 6, 16, 64]),
        pp=rng.choice([1, 1, 1, 2, 3, 5, 200]),
        precision=rng.choice(["auto", None, "fp9", "FP8", *precisions]),
        kv_dtype=rng.choice(["auto", None, "fp8", "fp16", "bf16", "fp32", "fp4", "FP8"]),
        overhead_fraction=rng.choice([None, None, 0.0, 0.1, 1.0, 1.5, -0.1, math.nan]),
    )
    gpu = rng.choice([None, GpuTarget("80GB card", 80 * 10**9),
                      GpuTarget.from_catalog(rng.choice(CATALOG.gpus.records))])
    return request, gpu


def estimate_problem(est: MemoryEstimate) -> str | None:
    """What must hold of every estimate, whatever the input."""
    numbers = [est.params, est.weights_bytes, est.kv_bytes_per_token, est.kv_cache_bytes, est.overhead_bytes,
               est.total_bytes]
    for r in est.per_gpu:
        numbers += [r.weights_bytes, r.kv_bytes_per_token, r.kv_cache_bytes, r.overhead_bytes, r.total_bytes]
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in numbers):
        return "a byte count is not a non-negative whole number"
    if len(est.per_gpu) != est.tp * est.pp:
        return f"per_gpu lists {len(est.per_gpu)} GPUs for tp {est.tp} x pp {est.pp}"
    if any(r.total_bytes != r.weights_bytes + r.kv_cache_bytes + r.overhead_bytes for r in est.per_gpu):
        return "a GPU's total is not weights + KV + overhead"
    if est.total_bytes != sum(r.total_bytes for r in est.per_gpu):
        return "the total is not the sum of the GPUs"
    if est.gpu is not None and est.gpu.fits != all(r.total_bytes <= est.gpu.memory_bytes for r in est.per_gpu):
        return "fits disagrees with the per-GPU totals"
    if json.loads(estimate_json(est))["total_bytes"] != est.total_bytes:
        return "the JSON output does not carry the total"
    return None


def estimate_config(config: Any, request: Request, gpu: GpuTarget | None, params: int) -> MemoryEstimate:
    """What `planner estimate ./config.json [--params N]` does with a config, in-process."""
    try:
        arch = architecture_from_config(config, "fuzz")
    except UnsupportedArchitecture:
        arch = size_only_architecture_from_config(config, "fuzz", params)
    return estimate_memory(arch, request, CATALOG, gpu)


def damaged_json(rng: random.Random, config: dict) -> bytes:
    """The text of a config.json, damaged the ways files get damaged (or written by hand)."""
    text = json.dumps(config, indent=rng.choice([None, 2]))
    choice = rng.randrange(12)
    if choice == 0:
        text = text[: rng.randrange(len(text) + 1)]
    elif choice == 1:
        spot = rng.randrange(len(text) + 1)
        text = text[:spot] + rng.choice(["}", "]", ",", '"', ":", "\x00", "\\", "//"]) + text[spot:]
    elif choice == 2:
        depth = rng.choice([100, 900, 5000, 100_000])
        text = '{"model_type": "llama", "hidden_size": ' + "[" * depth + "]" * depth + "}"
    elif choice == 3:
        text = text.replace("4096", rng.choice(["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000]), 1)
    elif choice == 4:
        text = rng.choice(["", "null", "[]", '"config"', "42", "[{}]", "{", "\ufeff{}"])
    elif choice == 5:
        return "\ufeff".encode() + text.encode()
    elif choice == 6:
        raw = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    elif choice == 7:
        text = text.replace('"model_type"', '"model_type": "llama", "model_type"', 1)
    return text.encode("utf-8", "surrogatepass")


def fuzz_configs(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """Configs counted and estimated in-process; a fifth written to files and read as the CLI reads them."""
    bases = base_configs()
    for index in range(cases):
        request, gpu = random_request(rng)
        params = rng.choice([7 * 10**9, 1, 10**15])
        roll = rng.random()
        if roll < 0.65:
            config = mutate_tree(rng, rng.choice(bases), CONFIG_KEYS, lambda key: plausible_config_value(rng, key))
        elif roll < 0.8:
            config = {key: plausible_config_value(rng, key) for key in rng.sample(CONFIG_KEYS, rng.randint(3, 30))}
            config["model_type"] = rng.choice(MODEL_TYPES)
        else:
            # through a file, the way `planner estimate ./config.json` reads it
            path = folder / f"config-{index % 7}" / "config.json"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(damaged_json(rng, rng.choice(bases)))
            target = str(path if rng.random() < 0.7 else path.parent)
            flags = dict(context=request.context, batch=request.batch, tp=request.tp, pp=request.pp,
                         precision=request.precision or "auto", kv_dtype=request.kv_dtype or "auto",
                         overhead=request.overhead_fraction, params=params if rng.random() < 0.3 else None,
                         gpu=rng.choice([None, "h100-sxm", "rtx-4090"]))
            run_case(tally, ("config file", path.read_bytes()[:300], flags),
                     lambda: api.estimate(target, **flags, catalog=CATALOG), estimate_problem)
            continue
        run_case(tally, ("config", config, request), lambda: estimate_config(config, request, gpu, params),
                 estimate_problem)


# ---------------------------------------------------------------------------------------------
# Surface 3: scenario YAML (mutations of the shipped scenarios, hostile YAML)

SCENARIO_KEYS = ("name", "description", "model", "params", "workload", "context", "concurrency", "replicas", "search",
                 "precisions", "quality_floor", "kv_dtypes", "gpus", "exclude_gpus", "max_gpus_per_replica",
                 "max_gpus_per_node", "allow_emulated", "engine", "overhead", "pricing", "providers", "market",
                 "regions", "objective", "solver", "time_limit_s", "top", "min", "max", "contxt", "base_dir")
PLACEHOLDER = "PLACEHOLDER_ZQX"  # plain YAML scalar, swapped for a literal the dumper cannot write
FAST_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: generation is most of the cost


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The YAML 'billion laughs': `levels` nested aliases, width**levels leaves if anything expands it."""
    node = "&a0 [" + ", ".join(["lol"] * width) + "]"
    for level in range(1, levels):
        node = f"&a{level} [{node}, " + ", ".join([f"*a{level - 1}"] * (width - 1)) + "]"
    return node


def hostile_literal(rng: random.Random, sentinel: Path) -> str:
    """A YAML node the safe dumper never writes: tags that execute code, bombs, deep nesting."""
    depth = rng.choice([50, 400, 3000, 50_000])
    return rng.choice([
        f'!!python/object/apply:os.system ["touch {sentinel}"]',
        f'!!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path ["{sentinel}"]]',
        "!!python/name:os.system", "!!python/object/new:type [x, [], {}]", "!custom 3", "!!binary 'not base64!'",
        "!!timestamp not-a-date", "!!int nope", "!!float nope", "!!bool maybe", "!!set {a, b}", "!!omap [a, b]",
        "!!str", "!!null 3", "[" * depth + "]" * depth, "{a: " * min(depth, 3000) + "1" + "}" * min(depth, 3000),
        alias_bomb(), "&r [*r]", "&m {a: *m}", "9" * 5000, '"\\ud800"', '"\\x00"', '"\\e[2J"', "0x" + "f" * 40,
        "1.0e+999", ".nan", "-.inf", "2024-01-01", "~", "<<: {a: 1}",
    ])


def plausible_scenario_value(rng: random.Random, key: str) -> Any:
    """A value of the right kind for a scenario key (often valid, often just out of range)."""
    gpus = [g.name for g in CATALOG.gpus]
    precisions = [p.name for p in CATALOG.precisions]

    def tokens() -> Any:
        return rng.choice([1, 512, 8192, "8K", "128k", "1M", "2m", 10**8, 10**8 + 1, 10**12, "0", -1, "8.5K"])

    if key == "model":
        return rng.choice([m.name for m in CATALOG.models] + [
            "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8bb", "model/config.json", "model", "./model",
            "missing/config.json", "", "a" * 5000, "a\x00b", "~zzqq/config.json", "/", "..", "модель",
            "/dev/null"])
    if key in ("context", "concurrency"):
        roll = rng.random()
        if roll < 0.4:
            return tokens()
        if roll < 0.7:
            return [tokens() for _ in range(rng.choice([0, 1, 3, 65, 200]))]
        return {"min": tokens(), "max": tokens()}
    if key in ("gpus", "exclude_gpus"):
        return rng.sample(gpus, rng.randint(0, 4)) + rng.choice([[], ["h10"], ["H100-SXM"], [""]])
    if key == "precisions":
        return rng.sample(precisions, rng.randint(0, 3)) + rng.choice([[], ["fp9"], ["AUTO"]])
    if key == "kv_dtypes":
        return rng.sample(["auto", "fp8", "fp16", "bf16", "fp32", "fp4", "FP8"], rng.randint(0, 3))
    if key in ("providers", "regions"):
        return rng.choice([["aws"], ["AWS", "gcp"], ["nowhere"], [], ["us-east-1"], "aws"])
    if key == "market":
        return rng.choice(["on-demand", "spot", "any", "cheap", "SPOT"])
    if key == "quality_floor":
        return rng.choice(["lossless", "near-lossless", "small loss", "noticeable loss", "great"])
    if key in ("replicas", "max_gpus_per_replica", "max_gpus_per_node", "top"):
        return rng.choice([0, 1, 2, 8, 64, 1024, 1025, 10**9, -1, True, "8", 8.0, 8.5])
    if key in ("time_limit_s", "overhead"):
        return rng.choice([0, 0.001, 0.1, 1, 10, 3601, -1, "10", math.nan, math.inf])
    if key == "allow_emulated":
        return rng.choice([True, False, "yes", 1, None])
    if key == "params":
        return rng.choice([70 * 10**9, "70B", "8e9", 7e9, "lots", 0, True, -1])
    return rng.choice(ODD_SCALARS)


@cache
def scenario_bases() -> list[dict]:
    """Mutation starts from these (callers deep-copy before changing anything)."""
    bases = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in SCENARIO_FILES]
    bases.append({"model": "llama-3.1-8b", "workload": {"context": 8192}})
    return bases


def damaged_yaml(rng: random.Random, text: str) -> bytes:
    """Text-level damage: truncation, duplicated or dropped lines, tabs, bad bytes, BOM, CRLF."""
    lines = text.splitlines(keepends=True)
    choice = rng.randrange(10)
    if choice == 0:
        text = text[: rng.randrange(len(text) + 1)]
    elif choice == 1 and lines:
        spot = rng.randrange(len(lines))
        lines.insert(spot, lines[spot])  # a duplicate key, or a repeated list item
        text = "".join(lines)
    elif choice == 2 and lines:
        del lines[rng.randrange(len(lines))]
        text = "".join(lines)
    elif choice == 3:
        text = text.replace("  ", "\t", 1)
    elif choice == 4:
        raw = bytearray(text.encode("utf-8", "surrogatepass"))
        spot = rng.randrange(len(raw) + 1)
        raw[spot:spot] = rng.choice([b"\xff\xfe", b"\xc3", b"\x00", b"\xed\xa0\x80"])
        return bytes(raw)
    elif choice == 5:
        text = "\ufeff" + text
    elif choice == 6:
        text = text.replace("\n", "\r\n")
    return text.encode("utf-8", "surrogatepass")


def random_scenario_bytes(rng: random.Random, sentinel: Path) -> bytes:
    """A shipped scenario, mutated; a quarter of them carry a hostile YAML node, some are damaged as text."""
    data = mutate_tree(rng, rng.choice(scenario_bases()), list(SCENARIO_KEYS),
                       lambda key: plausible_scenario_value(rng, key))
    hostile = rng.random() < 0.25
    if hostile:
        path = rng.choice(key_paths(data) or [("name",)])
        try:
            at(data, path[:-1])[path[-1]] = PLACEHOLDER
        except (KeyError, TypeError):
            data["name"] = PLACEHOLDER
    style = dict(sort_keys=False, allow_unicode=rng.random() < 0.5, width=rng.choice([80, 10**6]))
    try:
        text = yaml.dump(data, Dumper=FAST_DUMPER, **style)
    except UnicodeEncodeError:  # libyaml cannot write a lone surrogate; the pure-Python dumper escapes it
        text = yaml.dump(data, Dumper=yaml.SafeDumper, **style)
    except (yaml.YAMLError, RecursionError):
        text = yaml.safe_dump({"model": "llama-3.1-8b", "workload": {"context": PLACEHOLDER}})
    if hostile:
        text = text.replace(f"'{PLACEHOLDER}'", PLACEHOLDER).replace(PLACEHOLDER, hostile_literal(rng, sentinel), 1)
    return damaged_yaml(rng, text) if rng.random() < 0.3 else text.encode("utf-8", "surrogatepass")


def scenario_problem(scenario: Any) -> str | None:
    for _, part in scenario.fleet_parts():  # one service, or each workload of a fleet
        workload = part.workload
        values = (*workload.context, *workload.concurrency, workload.replicas)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            return "a token count or replica count is not a positive whole number"
    return None


def prepare_scenario_folder(folder: Path) -> None:
    """A model config beside the scenarios, so relative model paths resolve to something."""
    (folder / "model").mkdir(parents=True, exist_ok=True)
    shutil.copy(TEST_CONFIGS[0], folder / "model" / "config.json")


def plan_scenario(scenario: Any, solve: bool) -> Any:
    """What `planner solve` does with a loaded scenario: a fleet when it has traffic, else one plan.
    Without `solve`, only the search spaces (every name resolved, the model counted)."""
    from planner.plan.fleet import fleet_problem, plan_fleet
    from planner.plan.solver import solve_scenario

    time_limit = min(scenario.solver.time_limit_s, 5.0)
    if scenario.is_fleet:
        problem = fleet_problem(scenario, CATALOG, time_limit)
        return plan_fleet(problem, CATALOG) if solve else problem
    return solve_scenario(scenario, CATALOG, time_limit, 1) if solve else build_search_space(scenario, CATALOG)


def fuzz_scenarios(rng: random.Random, cases: int, tally: Tally, folder: Path, solve_every: int = 0) -> None:
    """Scenario files loaded and turned into search spaces; with solve_every, some solved too."""
    prepare_scenario_folder(folder)
    sentinel = folder / "executed"
    valid = 0
    for index in range(cases):
        path = folder / f"scenario-{index % 5}.yaml"
        path.write_bytes(random_scenario_bytes(rng, sentinel))
        text = path.read_bytes()

        def plan(path: Path = path) -> Any:
            nonlocal valid
            scenario = load_scenario(path)
            answer = plan_scenario(scenario, solve=False)
            valid += 1
            if solve_every and valid % solve_every == 0:
                answer = plan_scenario(scenario, solve=True)
            return scenario, answer

        run_case(tally, text, plan, plan_problem, SOLVE_SECONDS if solve_every else CASE_SECONDS)
        if sentinel.exists():
            tally.found("executed input", "a YAML tag ran code while loading a scenario", text)
            sentinel.unlink()


def plan_problem(outcome: tuple[Any, Any]) -> str | None:
    scenario, answer = outcome
    problem = scenario_problem(scenario)
    if problem or not hasattr(answer, "best"):
        return problem
    for plan in (answer.best, *answer.alternatives) if answer.best else ():
        if plan.memory.gpu is None or not plan.memory.gpu.fits:
            return f"a printed plan does not fit its GPU ({plan.gpu})"
    return None


# ---------------------------------------------------------------------------------------------
# Surface 4: the command line, run in-process as the console script runs it

INT_TEXTS = ("1", "2", "8", "4096", "8192", "131072", "0", "-1", "3", "1e3", "8K", "99999999999999999999", "abc", "",
             " 7", "٣", "0x10", "2.0")
RUNNER = CliRunner()


@dataclass(frozen=True)
class CliOutcome:
    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str


def invoke_cli(argv: list[str]) -> CliOutcome:
    """`planner ARGV` through planner.cli.main, with stdout and stderr captured and the exit code kept."""
    with RUNNER.isolation() as (stdout, stderr, _):
        saved = sys.argv
        sys.argv = ["planner", *argv]
        try:
            cli_main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = saved
            sys.stdout.flush()
            sys.stderr.flush()
        return CliOutcome(tuple(argv), code, stdout.getvalue().decode("utf-8", "replace"),
                          stderr.getvalue().decode("utf-8", "replace"))


def random_argv(rng: random.Random, folder: Path) -> list[str]:
    gpus = [g.name for g in CATALOG.gpus]
    models = [m.name for m in CATALOG.models] + [m.hf_id.upper() for m in CATALOG.models.records[:5]]
    precisions = [p.name for p in CATALOG.precisions] + ["auto", "fp9", "FP8", "float16", ""]
    # weights: estimate has the most flags; solve and catalog tables cost a hundred times more per case
    command = rng.choices(["estimate", "solve", "perf", "catalog", "", "estimat", "--help"],
                          weights=[66, 12, 10, 4, 3, 3, 2])[0]
    argv = [command] if command else []
    if command == "estimate":
        if rng.random() < 0.85:
            argv.append(rng.choice(models + [str(p) for p in TEST_CONFIGS] + [str(TEST_CONFIGS[0].parent), str(folder),
                        "nowhere/config.json", "", "a" * 5000, "~zzqq/config.json", "модель", "-", "/dev/null",
                        str(SCENARIO_FILES[0])]))
        options = {
            "--precision": lambda: rng.choice(precisions), "--kv-dtype": lambda: rng.choice(
                ["auto", "fp8", "fp16", "bf16", "fp32", "fp4", "FP8", ""]),
            "--context": lambda: rng.choice(INT_TEXTS), "--batch": lambda: rng.choice(INT_TEXTS),
            "--tp": lambda: rng.choice(INT_TEXTS), "--pp": lambda: rng.choice(INT_TEXTS),
            "--gpu": lambda: rng.choice(gpus + ["h10", ""]), "--gpu-memory": lambda: random_size_text(rng),
            "--overhead": lambda: rng.choice(["0", "0.1", "1", "1.5", "-0.1", "nan", "inf", "abc", "1e-300"]),
            "--params": lambda: rng.choice(["8e9", "70B", "0.5", "1e999999999", "8 GB", "-8B", random_size_text(rng)]),
            "--layers": lambda: rng.choice(INT_TEXTS), "--kv-heads": lambda: rng.choice(INT_TEXTS),
            "--head-dim": lambda: rng.choice(INT_TEXTS), "--heads": lambda: rng.choice(INT_TEXTS),
            "--format": lambda: rng.choice(["table", "json", "json", "csv", "xml"]),
            # an engine's own budget and its flags (SGLang's running-request limit: refused elsewhere, and below 1)
            "--engine": lambda: rng.choice(["simple", "vllm", "sglang", "sglang", "llamacpp", "trtllm", "tgi", ""]),
            "--max-running-requests": lambda: rng.choice(INT_TEXTS),
        }
    elif command == "solve":
        argv.append(rng.choice([str(SCENARIO_FILES[i]) for i in (0, 2, 3)] + [
            "nope.yaml", str(folder), str(TEST_CONFIGS[0]), "/dev/null", str(folder / "cli-scenario.yaml")]))
        options = {
            "--format": lambda: rng.choice(["table", "json", "csv", "markdown", "xml"]),
            "-o": lambda: rng.choice([str(folder / "out" / "plan.txt"), str(folder / "out" / "existing.json"),
                                      str(folder / "missing" / "plan.json"), str(folder / "out" / "folder")]),
            "--top": lambda: rng.choice(["0", "1", "5", "-1", "abc", "99999999999999999999"]),
            "--time-limit": lambda: rng.choice(["0.5", "2", "0.01", "0", "-1", "nan", "inf", "abc", "1e-9"]),
        }
    elif command == "perf":
        # a replica's speed: its layout, engine, lengths and a batch, a rate or a closed loop of clients; mostly values
        # a user would type, so that most cases reach the timing, one value in fifteen hostile
        def pick(usual: tuple[str, ...], hostile: tuple[str, ...]) -> Callable[[], str]:
            return lambda: rng.choice(usual if rng.random() < 14 / 15 else hostile)

        counts = pick(("1", "2", "3", "8", "64", "512"), ("5000", "0", "-1", "abc", "1e3", "99999999999999999999"))
        lengths = pick(("1", "2", "3", "128", "1024", "8000"), ("100000", "0", "-5", "abc", "1e4", "131072"))
        argv += [rng.choice(["qwen3-30b-a3b", "qwen3-30b-a3b", "deepseek-v3", "llama-3.1-8b", "nope", ""]),
                 "--gpu", pick(("h100-sxm", "h200-sxm", "b200", "mi300x"), ("rtx-4090", "h10", ""))()]
        if rng.random() < 0.5:  # SGLang's closed loop under DP attention, the most flags that act together
            argv += ["--engine", "sglang", "--tp", "8", "--dp", pick(("2", "4", "8"), ("0", "3", "16"))(),
                     "--concurrency", counts(), "--varying-lengths"]
            options = {"--ep": pick(("1", "8"), ("0", "5")), "--prompt-tokens": lengths, "--output-tokens": lengths,
                       "--scheduler-recv-interval": pick(("1", "10", "30"), ("0", "-2", "abc")),
                       "--max-running-requests": counts, "--format": pick(("json", "json", "table"), ("csv",))}
            argv += ["--prefill-delayer"] if rng.random() < 0.6 else []
        else:  # one of a batch, a rate and clients, on any engine and layout
            mode = rng.choice(("--batch", "--rate", "--concurrency"))
            argv += [mode, pick(("0.5", "4", "200"), ("0", "-1", "nan", "inf", "abc", "1e9"))() if mode == "--rate"
                     else counts()]
            options = {
                "--tp": pick(("1", "2", "4", "8"), ("0", "3", "abc")), "--dp": pick(("1", "2", "4"), ("0", "3")),
                "--ep": pick(("1", "2", "4", "8"), ("0", "5")),
                "--engine": pick(("vllm", "sglang", "trtllm"), ("llamacpp", "simple", "tgi", "")),
                "--prompt-tokens": lengths, "--output-tokens": lengths, "--max-running-requests": counts,
                "--format": pick(("table", "json"), ("csv",)),
            }
            argv += [flag for flag in ("--varying-lengths", "--prefill-delayer") if rng.random() < 0.15]
    elif command == "catalog":
        argv.append(rng.choice(["gpus", "models", "precisions", "prices", "GPUS", ""]))
        options = {"--format": lambda: rng.choice(["table", "json", "csv", "markdown"])}
    else:
        options = {}
    for option in rng.sample(sorted(options), rng.randint(0, len(options))):
        argv += [option, options[option]()]
    extra = rng.random()
    if extra < 0.05 and len(argv) > 1:
        argv.pop()  # an option left without its value
    elif extra < 0.1:
        argv.append(rng.choice(["--contxt", "--tp=2", "--help", "--", "-x", "--format"]))
    elif extra < 0.13 and len(argv) > 2:
        argv += argv[-2:]  # the same option twice
    return argv


def cli_problem(outcome: CliOutcome, out_folder: Path, previous_plan: str) -> str | None:
    """Exit 0 with usable output, or exit 2 with one `error:` line (or click's usage message); nothing else."""
    argv = outcome.argv
    if "Traceback" in outcome.stderr:
        return "a traceback on stderr"
    leftovers = sorted(p.name for p in out_folder.iterdir() if p.name.startswith("."))
    if leftovers:
        return f"temporary files left behind: {leftovers}"
    existing = out_folder / "existing.json"
    if outcome.code != 0 and existing.read_text(encoding="utf-8") != previous_plan:
        return "a failed run changed the file given to -o"
    if outcome.code == 0:
        writes_file = "-o" in argv and "--help" not in argv
        if "--format" in argv and argv[argv.index("--format") + 1:][:1] == ["json"] and not writes_file \
                and "--help" not in argv and argv[0] in ("estimate", "solve", "catalog"):
            try:
                json.loads(outcome.stdout)
            except ValueError:
                return "--format json printed something that is not JSON"
        if argv[0] == "perf" and "--format" in argv and argv[argv.index("--format") + 1:][:1] == ["json"]:
            return perf_problem(outcome.stdout)
        return None
    if outcome.code == 2:
        lines = outcome.stderr.strip().splitlines()
        if len(lines) == 1 and lines[0].startswith("error: "):
            return None
        # click's own messages for a malformed command line: "Error: ..." (after a usage line), or the
        # help text when no command is given
        if any(line.startswith("Error: ") for line in lines) or (not outcome.argv and lines[0].startswith("Usage:")):
            return None
        return f"exit 2 without a one-line error: {shorten(outcome.stderr, 200)!r}"
    return f"exit code {outcome.code}"


def perf_problem(text: str) -> str | None:
    """`planner perf --format json`: JSON whose closed loop has no negative figure and no E2E below its TTFT."""
    try:
        loop = json.loads(text).get("closed_loop")
    except ValueError:
        return "--format json printed something that is not JSON"
    if not loop:
        return None
    negative = [key for key, value in loop.items() if isinstance(value, (int, float)) and value < 0]
    if negative:
        return f"the closed loop has negative figures: {', '.join(negative)}"
    if loop["e2e_s"] < loop["ttft_s"] * (1 - 1e-9):
        return "the closed loop's E2E is below its TTFT"
    return None


def fuzz_cli(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """Command lines run through planner.cli.main; exit 0 counts as a result, exit 2 as an error."""
    out_folder = folder / "out"
    (out_folder / "folder").mkdir(parents=True, exist_ok=True)
    sentinel = folder / "executed"
    previous_plan = "a plan from an earlier run\n"
    for _ in range(cases):
        (out_folder / "existing.json").write_text(previous_plan, encoding="utf-8")
        argv = random_argv(rng, folder)
        if "solve" in argv[:1]:
            (folder / "cli-scenario.yaml").write_bytes(random_scenario_bytes(rng, sentinel))
        run_case(tally, argv, lambda: invoke_cli(argv), lambda outcome: cli_problem(outcome, out_folder, previous_plan),
                 SOLVE_SECONDS, is_error=lambda outcome: outcome.code != 0)
        for leftover in out_folder.iterdir():
            if leftover.name.startswith("."):
                leftover.unlink()


# ---------------------------------------------------------------------------------------------
# Weights files written byte by byte (hostile ones cannot come from a library's writer)

SAFETENSORS_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1, "U8": 1}


def safetensors_bytes(header: Any, data: bytes | None = None, raw: bytes | None = None) -> bytes:
    """A safetensors file: the 8-byte length, the header (JSON of `header`, or `raw`), then the data.
    Without `data`, as many zero bytes as the header's largest end offset asks for (when it can be read)."""
    text = raw if raw is not None else json.dumps(header).encode()
    if data is None:
        ends = [info["data_offsets"][1] for info in header.values() if isinstance(info, dict)
                and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
                and isinstance(info["data_offsets"][1], int)] if isinstance(header, dict) else []
        data = bytes(min(max(ends, default=0), 2**24))  # a header claiming more is meant to be truncated
    return struct.pack("<Q", len(text)) + text + data


def safetensors_header(tensors: dict[str, tuple[str, list[int]]]) -> dict:
    """A consistent header: tensors laid out one after the other."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * SAFETENSORS_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return header


GGUF_TYPES = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8, "arr": 9,
              "u64": 10, "i64": 11, "f64": 12}
_GGUF_CODES = {"u8": "B", "i8": "b", "u16": "H", "i16": "h", "u32": "I", "i32": "i", "f32": "f", "bool": "?",
               "u64": "Q", "i64": "q", "f64": "d"}


def gguf_value(kind: str, value: Any) -> bytes:
    """One GGUF value. An array is (item kind, items), or (item kind, n) for a bare count with no items after it."""
    if kind == "str":
        raw = value if isinstance(value, bytes) else value.encode()
        return struct.pack("<Q", len(raw)) + raw
    if kind == "arr":
        item, items = value
        if isinstance(items, int):
            return struct.pack("<IQ", GGUF_TYPES[item], items)
        if item in _GGUF_CODES:  # packed at once: a 4M-item array is built in milliseconds
            return struct.pack(f"<IQ{len(items)}{_GGUF_CODES[item]}", GGUF_TYPES[item], len(items), *items)
        return struct.pack("<IQ", GGUF_TYPES[item], len(items)) + b"".join(gguf_value(item, v) for v in items)
    return struct.pack("<" + _GGUF_CODES[kind], value)


GGUF_TINY_LLAMA = {
    "general.architecture": ("str", "llama"), "general.file_type": ("u32", 1), "llama.block_count": ("u32", 2),
    "llama.context_length": ("u32", 4096), "llama.embedding_length": ("u32", 64),
    "llama.attention.head_count": ("u32", 4), "llama.attention.head_count_kv": ("u32", 2),
}
# (name, ggml dims (fastest first), ggml type: 0 F32, 1 F16) -> 100 x 64 + 64 x 64 F16 and 64 F32 = 21,248 bytes
GGUF_TINY_TENSORS = (("token_embd.weight", (64, 100), 1), ("blk.0.attn_q.weight", (64, 64), 1),
                     ("output_norm.weight", (64,), 0))


def gguf_bytes(metadata: dict[str, tuple[str, Any]], tensors=GGUF_TINY_TENSORS, version: int = 3,
               tensor_data: bool = True) -> bytes:
    """A GGUF v3 file: header, metadata (key -> (kind, value)), tensor infos, then zeroed aligned tensor data."""
    out = [struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(metadata))]
    for key, (kind, value) in metadata.items():
        out.append(gguf_value("str", key) + struct.pack("<I", GGUF_TYPES[kind]) + gguf_value(kind, value))
    offset = 0
    for name, dims, ggml_type in tensors:
        out.append(gguf_value("str", name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset % 2**64))
        offset += -(-math.prod(dims) * (4 if ggml_type == 0 else 2) // 32) * 32
    head = b"".join(out)
    # a table claiming more data than 16 MiB is written short: it is meant to be damaged
    return head + bytes(-len(head) % 32) + (bytes(min(offset, 2**24)) if tensor_data else b"")


# ---------------------------------------------------------------------------------------------
# Surface 5: weights files (safetensors headers and GGUF metadata, mutated byte by byte)

UNKNOWN_ARCH_CONFIG = REPO / "tests" / "data" / "configs" / "broken" / "unknown-arch.json"
HOSTILE_JSON_TEXT = (
    lambda: b"[" + b"{}," * 50_000 + b"{}]", lambda: b'{"w": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    lambda: b'{"w": {"dtype": "F16", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 2]}}',
    lambda: b'{"w": {"dtype": "F16", "shape": [NaN], "data_offsets": [0, 2]}}', lambda: b"", lambda: b"{",
    lambda: b'{"w": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}, "w": 1}', lambda: b"\xff\xfe{}",
)


def random_tensor_table(rng: random.Random) -> dict:
    dtypes = list(SAFETENSORS_BYTES)
    return safetensors_header({f"layers.{i}.w": (rng.choice(dtypes), [rng.randint(1, 64) for _ in range(rng.randint(0, 3))])
                               for i in range(rng.randint(1, 6))})


def plausible_tensor_value(rng: random.Random, key: str) -> Any:
    if key == "dtype":
        return rng.choice(["F16", "BF16", "F32", "F4", "F6_E2M3", "I64", "f16", "Q4_K", ["F16"], {"a": 1}])
    if key == "shape":
        return rng.choice([[], [0], [4, 4], [-4, 4], [2**31, 2**31], [10**30], "4,4", 16, None, [[4]], [math.nan]])
    if key == "data_offsets":
        return rng.choice([[0, 32], [32, 0], [0, 10**19], ["0", "32"], [0], [0, 32, 64], [-1, 31], [0, 2**63]])
    return {"format": "pt"} if key == "__metadata__" else odd_value(rng)


def random_safetensors(rng: random.Random) -> bytes:
    header = random_tensor_table(rng)
    roll = rng.random()
    if roll < 0.15:
        return safetensors_bytes(header)  # a valid file: must give the exact answer
    if roll < 0.6:
        header = mutate_tree(rng, header, ["dtype", "shape", "data_offsets", "__metadata__", "w"],
                             lambda key: plausible_tensor_value(rng, key))
        try:
            return safetensors_bytes(header)
        except (TypeError, ValueError, OverflowError):
            return safetensors_bytes(None, raw=b'{"w": null}')
    if roll < 0.75:
        return safetensors_bytes(None, raw=rng.choice(HOSTILE_JSON_TEXT)())
    whole = bytearray(safetensors_bytes(header))
    damage = rng.randrange(4)
    if damage == 0:
        return bytes(whole[: rng.randrange(len(whole) + 1)])  # truncated
    if damage == 1:
        whole[0:8] = struct.pack("<Q", rng.choice([0, 1, 7, 2**20, 16 * 2**20 + 1, 10**8, 2**63]))  # a lying length
        return bytes(whole)
    if damage == 2:
        spot = rng.randrange(8, len(whole))
        whole[spot] = rng.randrange(256)  # one byte flipped in the header or the data
        return bytes(whole)
    return bytes(whole) + bytes(rng.choice([1, 31, 4096]))  # trailing bytes the header does not describe


GGUF_KINDS = tuple(GGUF_TYPES)


def random_gguf_value(rng: random.Random) -> tuple[str, Any]:
    kind = rng.choice(GGUF_KINDS)
    if kind == "str":
        return kind, rng.choice(["llama", "", "32", "x" * 300, b"\xff\xfe", "日本"])
    if kind == "arr":
        item = rng.choice(["u8", "i32", "u32", "f32", "str", "u64"])
        if rng.random() < 0.4:
            return kind, (item, rng.choice([2**40, 2**62, 10**6, 3]))  # a count with no items behind it
        length = rng.choice([0, 1, 2, 3, 1000, 200_000])
        if item == "str":
            return kind, (item, [b"t"] * length)
        values = [rng.choice([0, 1, 2, 4, 127]) for _ in range(min(length, 5))] * (length // 5 + 1)
        return kind, (item, values[:length])
    if kind in ("f32", "f64"):
        return kind, rng.choice([0.0, 4.0, math.nan, math.inf, -math.inf, -4.0, 1e300 if kind == "f64" else 3e38])
    if kind == "bool":
        return kind, rng.choice([True, False])
    bits = {"u8": 8, "u16": 16, "u32": 32, "u64": 64}.get(kind)
    if bits:
        return kind, rng.choice([0, 1, 2, 4, 32, 1024, 1025, 2**bits - 1]) % 2**bits
    bits = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}[kind]
    return kind, rng.choice([0, 1, -1, 4, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1])


def random_gguf(rng: random.Random) -> bytes:
    metadata = dict(GGUF_TINY_LLAMA)
    tensors = list(GGUF_TINY_TENSORS)
    roll = rng.random()
    if roll < 0.1:
        return gguf_bytes(metadata)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        if op < 0.5:
            metadata[rng.choice(list(GGUF_TINY_LLAMA) + ["llama.attention.key_length", "general.alignment",
                                                         "llama.attention.value_length"])] = random_gguf_value(rng)
        elif op < 0.6:
            metadata.pop(rng.choice(list(metadata)), None)
        elif op < 0.75:
            metadata[rng.choice(["tokenizer.ggml.tokens", "tokenizer.ggml.scores", "x.y"])] = random_gguf_value(rng)
        elif op < 0.85:
            layers = rng.choice([1, 2, 3])
            metadata["llama.attention.head_count_kv"] = ("arr", ("i32", [rng.choice([0, 1, 2, 4]) for _ in range(layers)]))
        else:
            name, dims, _ = rng.choice(tensors)
            tensors.append((name, rng.choice([(), (0,), (33,), (2**32, 2**32), (1, 1, 1, 1, 1)]) or dims,
                            rng.choice([0, 1, 2, 12, 99, 2**31])))
    whole = bytearray(gguf_bytes(metadata, tensors=tuple(tensors)))
    damage = rng.random()
    if damage < 0.15:
        whole = whole[: rng.randrange(len(whole) + 1)]
    elif damage < 0.3:
        whole[rng.randrange(len(whole))] = rng.randrange(256)
    elif damage < 0.35:
        whole[4:8] = struct.pack("<I", rng.choice([1, 4, 2**24, 0]))
    return bytes(whole)


def weights_problem(est: MemoryEstimate, file_bytes: int) -> str | None:
    problem = estimate_problem(est)
    if problem:
        return problem
    if est.weights_bytes > file_bytes:
        return f"weights of {est.weights_bytes:,} bytes from a file of {file_bytes:,}"
    return None


def fuzz_weights(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """safetensors shards beside a config planner cannot count (so the header gives the size) and .gguf files,
    estimated in-process; a valid file must give its exact bytes."""
    (folder / "config.json").write_bytes(UNKNOWN_ARCH_CONFIG.read_bytes())
    shard, gguf_path = folder / "model.safetensors", folder / "model.gguf"
    for _ in range(cases):
        if rng.random() < 0.5:
            data = random_safetensors(rng)
            shard.write_bytes(data)
            run_case(tally, ("safetensors", data[:400]), lambda: api.estimate(str(folder), catalog=CATALOG),
                     lambda est, size=len(data): weights_problem(est, size))
        else:
            data = random_gguf(rng)
            gguf_path.write_bytes(data)
            exact = data == gguf_bytes(GGUF_TINY_LLAMA)

            def check(est: MemoryEstimate, size: int = len(data), exact: bool = exact) -> str | None:
                if exact and (est.weights_bytes, est.kv_bytes_per_token) != (21_248, 256):
                    return f"the tiny GGUF gave {est.weights_bytes:,} weight bytes, {est.kv_bytes_per_token} KV per token"
                return weights_problem(est, size)

            run_case(tally, ("gguf", data[:400]), lambda: api.estimate(str(gguf_path), context=2048, catalog=CATALOG),
                     check)


# ---------------------------------------------------------------------------------------------
# Surface 6: paths given to planner (what a path is, where it leads, what it is called)

PATH_KINDS = ("regular", "fifo", "fifo link", "folder", "link", "broken link", "loop", "missing", "long", "sparse",
              "unreadable")


def make_path(rng: random.Random, folder: Path, content: bytes, index: int) -> tuple[Path, str]:
    """A path in `folder` of a random kind, holding `content` when it is a file (or leads to one)."""
    kind = rng.choice(PATH_KINDS)
    stem = rng.choice(["f", "plan", "名前", "a b", "x\ny", "-dash"]) + f"{index % 3}"
    path = folder / (("p" * rng.choice([240, 250, 255, 256, 300])) if kind == "long" else stem)
    remove(path)
    try:
        if kind in ("regular", "long", "unreadable"):
            path.write_bytes(content)
            if kind == "unreadable":
                path.chmod(0)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "fifo link":  # what -o /dev/stdout is when stdout is a pipe
            target = folder / f"fifo-{index % 3}"
            remove(target)
            os.mkfifo(target)
            path.symlink_to(target)
        elif kind == "folder":
            path.mkdir()
        elif kind == "link":
            target = folder / f"target-{index % 3}"
            target.write_bytes(content)
            path.symlink_to(target)
        elif kind == "broken link":
            path.symlink_to(folder / "nowhere")
        elif kind == "loop":
            path.symlink_to(path)
        elif kind == "sparse":
            with path.open("wb") as handle:
                handle.write(content)
                handle.truncate(rng.choice([5 * 2**20, 2 * 10**9]))
    except OSError:  # a name the filesystem refuses (over 255 bytes): the path stays missing
        kind = "missing"
    return path, kind


def remove(path: Path) -> None:
    """Whatever is at `path` (a folder, a link, a FIFO, a file), gone; nothing there is fine."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    shutil.rmtree(path) if stat.S_ISDIR(mode) else path.unlink()


def stat_is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(os.lstat(path).st_mode)
    except OSError:
        return False


def path_problem(outcome: CliOutcome, path: Path, kind: str, folder: Path) -> str | None:
    problem = cli_problem_common(outcome)
    if problem:
        return problem
    if kind == "fifo" and not stat_is_fifo(path):
        return "-o replaced a FIFO with a regular file"
    if kind == "fifo link" and not (path.is_symlink() and stat.S_ISFIFO(os.stat(path).st_mode)):
        return "-o replaced a link to a FIFO"
    if kind in ("link", "fifo link") and not path.is_symlink():
        return "-o replaced a symbolic link instead of writing through it"
    leftovers = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    if leftovers:
        return f"temporary files left behind: {leftovers[:3]}"
    return None


def cli_problem_common(outcome: CliOutcome) -> str | None:
    if "Traceback" in outcome.stderr:
        return "a traceback on stderr"
    if outcome.code == 0:
        return None
    lines = outcome.stderr.strip().splitlines()
    if outcome.code == 2 and len(lines) == 1 and lines[0].startswith("error: "):
        return None
    if outcome.code == 2 and any(line.startswith("Error: ") for line in lines):
        return None  # click's usage message
    return f"exit {outcome.code} without a one-line error: {shorten(outcome.stderr, 200)!r}"


@cache
def sample_plan_json() -> bytes:
    """A real `planner solve --format json` plan (for export's input and its -o)."""
    from planner.plan.solver import solve_scenario
    from planner.render.records import solve_json

    scenario = load_scenario(REPO / "scenarios" / "8b-budget.yaml")
    return solve_json(solve_scenario(scenario, CATALOG, 5.0, 1)).encode()


def fuzz_paths(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """Commands given a path of every kind to read (scenario, config, plan, model file) or to write (-o)."""
    plan = sample_plan_json()
    model_folder = folder / "model"
    model_folder.mkdir(exist_ok=True)
    (model_folder / "config.json").write_bytes(UNKNOWN_ARCH_CONFIG.read_bytes())
    out = folder / "out"
    out.mkdir(exist_ok=True)
    for index in range(cases):
        role = rng.choice(("scenario", "config", "plan", "shard", "output"))
        if role == "output":
            path, kind = make_path(rng, out, b"an earlier plan\n", index)
            if kind == "unreadable":
                path.chmod(0o644)
            (folder / "plan.json").write_bytes(plan)
            reader = (os.open(path, os.O_RDONLY | os.O_NONBLOCK) if kind in ("fifo", "fifo link") and rng.random() < 0.5
                      else None)
            argv = ["export", str(folder / "plan.json"), "--to", rng.choice(["vllm", "kubernetes"]), "-o", str(path)]
            try:
                run_case(tally, (role, kind, argv), lambda: invoke_cli(argv),
                         lambda outcome, path=path, kind=kind: path_problem(outcome, path, kind, out),
                         is_error=lambda outcome: outcome.code != 0)
            finally:
                if reader is not None:
                    os.close(reader)
            continue
        content = {"scenario": b"model: llama-3.1-8b\nworkload: {context: 8192}\nsearch: {gpus: [h10]}\n",
                   "config": UNKNOWN_ARCH_CONFIG.read_bytes(), "plan": plan,
                   "shard": safetensors_bytes(random_tensor_table(rng))}[role]
        target_folder = model_folder if role == "shard" else folder / "in"
        target_folder.mkdir(exist_ok=True)
        path, kind = make_path(rng, target_folder, content, index)
        if role == "shard":
            shard = model_folder / "model.safetensors"
            remove(shard)
            if kind != "missing":
                os.replace(path, shard)
            argv = ["estimate", str(model_folder)]
        elif role == "scenario":
            argv = ["solve", str(path)]
        elif role == "config":
            argv = ["estimate", str(path)]
        else:
            argv = ["export", str(path), "--to", "vllm"]
        run_case(tally, (role, kind, argv), lambda: invoke_cli(argv),
                 lambda outcome: cli_problem_common(outcome), is_error=lambda outcome: outcome.code != 0)


# ---------------------------------------------------------------------------------------------
# Surface 8: plan files given to `export` (a real plan, mutated: retyped, nudged, dropped keys and hostile text)

# Text that would run a command if a shell or YAML took it unquoted: the marker word must never stand alone.
INJECTION_MARKER = "PWNED"
HOSTILE_TEXT = (f"x\ntouch {INJECTION_MARKER}", f"$(touch {INJECTION_MARKER})", f"`touch {INJECTION_MARKER}`",
                f"x'; touch {INJECTION_MARKER}; '", f'x"; touch {INJECTION_MARKER}; "', f"x; touch {INJECTION_MARKER}",
                f"x\r\ntouch {INJECTION_MARKER} #", f"{{touch: {INJECTION_MARKER}}}", f"- touch {INJECTION_MARKER}")
EXPORT_TARGETS = export_targets()
SHELL_TARGETS = profiled_engines()  # each engine's command line; the other targets are YAML


# What a model id or --checkpoint could be to launch something that was not checked: an option, a path, another model
LAUNCH_TEXT = ("--trust-remote-code", "-h", ".", "../x", "org/", "/abs/path", "meta-llama/Llama-3.1-405B-Instruct",
               "meta-llama/Llama-3.1-8B-Instruct", "my-org/Llama-3.1-8B-Instruct-w8a8", "llama-3.1-8b")


def plan_value(rng: random.Random, key: str) -> Any:
    if key == "model_id" and rng.random() < 0.5:
        return rng.choice(LAUNCH_TEXT)
    return rng.choice(HOSTILE_TEXT) if rng.random() < 0.5 else odd_value(rng)


def launched_repository(outcome: CliOutcome, target: str, allowed: set[str]) -> str | None:
    """A successful vLLM or SGLang export loads a repository in `allowed` (the checked model's, or the
    --checkpoint given), never an option or a path."""
    if outcome.code != 0 or target not in ("vllm", "sglang"):
        return None
    for line in outcome.stdout.splitlines():
        words = shlex.split(line, comments=True) if not line.startswith("#") else []
        if words[:2] == ["vllm", "serve"]:
            repo = words[2]
        elif "sglang.launch_server" in words:
            repo = words[words.index("--model-path") + 1]
        else:
            continue
        if repo not in allowed:
            return f"--to {target} launches {shorten(repo, 80)!r}, not the checked model"
    return None


def injected_word(outcome: CliOutcome, target: str) -> str | None:
    """A successful export whose output lets the marker out of the word it came in: it would run as a command."""
    if outcome.code != 0 or INJECTION_MARKER not in outcome.stdout:
        return None
    if target not in SHELL_TARGETS:
        try:
            documents = list(yaml.safe_load_all(outcome.stdout))
        except yaml.YAMLError as exc:
            return f"--to {target} wrote YAML that does not parse: {shorten(str(exc), 120)}"
        text = json.dumps(documents)
        return (f"--to {target}: the marker left its string" if f'"{INJECTION_MARKER}"' in text
                or f"touch: {INJECTION_MARKER}" in text else None)
    for line in outcome.stdout.splitlines():
        if INJECTION_MARKER not in line:
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            return f"--to {target} wrote a line a shell cannot parse: {shorten(line, 120)!r}"
        if any(INJECTION_MARKER in word and "touch" not in word for word in words):
            return f"--to {target}: the marker runs as its own word: {shorten(line, 120)!r}"
    return None


def fuzz_plans(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """`planner export` on a real plan mutated one to three times, to every target, best plan or an alternative."""
    plan = json.loads(sample_plan_json())
    vocabulary = sorted({str(path[-1]) for path in key_paths(plan)})
    for index in range(cases):
        if rng.random() < 0.3:  # the plan as written, its model_id changed or not: what is launched is checked
            mutated = copy.deepcopy(plan)
            mutated["best"]["model_id"] = rng.choice((plan["best"]["model_id"],) + LAUNCH_TEXT)
        else:
            mutated = mutate_tree(rng, plan, vocabulary, lambda key: plan_value(rng, key))
        path = folder / f"plan{index % 4}.json"
        path.write_text(json.dumps(mutated, default=str))
        target = rng.choice(EXPORT_TARGETS)
        argv = ["export", str(path), "--to", target, "--plan", str(rng.choice([0, 0, 0, 1, 2]))]
        checkpoint = rng.choice(LAUNCH_TEXT) if rng.random() < 0.2 else None
        if checkpoint is not None:
            argv.append(f"--checkpoint={checkpoint}")
        allowed = {checkpoint} if checkpoint else {plan["best"]["model_id"]} | set(CHECKPOINT_REPOSITORIES)
        run_case(tally, (target, argv[5:], mutated), lambda: invoke_cli(argv),
                 lambda outcome, target=target, allowed=allowed: (cli_problem_common(outcome) or injected_word(outcome, target)
                                                                  or launched_repository(outcome, target, allowed)),
                 is_error=lambda outcome: outcome.code != 0)


def _checkpoint_repositories() -> tuple[str, ...]:
    from planner.catalog.checkpoints import load_checkpoints

    return tuple(c.repo for c in load_checkpoints())


CHECKPOINT_REPOSITORIES = _checkpoint_repositories()  # what an export loads for a precision that needs one


# ---------------------------------------------------------------------------------------------
# Surface 7: model ids (catalog names, Hub ids, URLs, paths that are not there)

HUB_PARTS = ("meta-llama", "Llama-3.1-8B", "org", "x", "", "naïve", "a--b", "a..b", "name.git", "-x", "x-", ".x",
             "_", "a" * 97, "日本", "a b", "\x00", "~", ".", "..", "hf:", "https:", "huggingface.co", "models",
             "llama-3.1-8b", "config.json", "m.gguf")


def random_model_id(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.1:
        return rng.choice([m.name for m in CATALOG.models] + [m.hf_id for m in CATALOG.models])
    parts = [rng.choice(HUB_PARTS) for _ in range(rng.choice([1, 2, 2, 2, 3, 4]))]
    text = "/".join(parts)
    prefix = rng.choice(["", "", "", "./", "../", "/", "hf://", "https://huggingface.co/", "http://", "~/"])
    return prefix + text + rng.choice(["", "", "/", "//", "?x=1", "#y"])


def fuzz_model_ids(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """`planner estimate MODEL` with ids the Hub rejects, URLs and missing paths (offline, an empty Hub cache)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    for _ in range(cases):
        model = random_model_id(rng)
        argv = ["estimate", model, "--format", "json"]
        run_case(tally, argv, lambda: invoke_cli(argv), cli_problem_common, is_error=lambda outcome: outcome.code != 0)


# ---------------------------------------------------------------------------------------------
# Surface 9: price files (`planner prices update` from a SkyPilot vms.csv with damaged rows)

SKYPILOT_FIXTURE = REPO / "tests" / "data" / "skypilot-catalog"
PRICE_CELLS = ("inf", "-inf", "nan", "1e308", "1e999", "1e18", "0", "-1", "", "x", "0.5", "8", "65", "2.65",
               "[/x]", "$x^$", "=HYPERLINK(1)", "[bold]x[/bold]", "a\x1bb", "x" * 200_000, "2026-13-45", "'", '"')
GPU_INFO_DAMAGE = ("1e999", "inf", "-5", "x", "1" * 5000, "0")


def damaged_vms_csv(rng: random.Random, text: str) -> str:
    """vast's vms.csv fixture, one to four cells replaced (prices, counts, names, GpuInfo numbers), a line cut short."""
    rows = list(csv.reader(io.StringIO(text)))
    for _ in range(rng.randint(1, 4)):
        row = rows[rng.randrange(1, len(rows))]
        column = rng.randrange(len(row))
        if column == 5 and rng.random() < 0.5:  # GpuInfo: a number inside it
            row[5] = re.sub(r"'SizeInMiB': \d+", f"'SizeInMiB': {rng.choice(GPU_INFO_DAMAGE)}", row[5])
        else:
            row[column] = rng.choice(PRICE_CELLS)
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    lines = buffer.getvalue().splitlines(keepends=True)
    if rng.random() < 0.1:
        i = rng.randrange(1, len(lines))
        lines[i] = lines[i][: rng.randrange(len(lines[i]))] + "\n"
    return "".join(lines)


def prices_problem(outcome: Any, prices: Path, before: bytes) -> str | None:
    """An update wrote a prices.yaml the catalog loader reads back; a refusal wrote nothing."""
    from planner.catalog.prices import load_offers

    if isinstance(outcome, PlannerInputError):
        return None if prices.read_bytes() == before else "a refused update changed prices.yaml"
    try:
        load_offers(prices, CATALOG.gpus)
    except PlannerInputError as exc:
        return f"the updated prices.yaml does not load: {shorten(str(exc), 160)}"
    return None


def fuzz_prices(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """`prices update` in-process, from vast's vms.csv fixture damaged; the result must load as the catalog."""
    from planner.catalog.price_update import update_prices
    from planner.catalog.skypilot import load_skypilot

    original = (SKYPILOT_FIXTURE / "vast" / "vms.csv").read_text()
    shipped = (Path(catalog_dir()) / "prices.yaml").read_bytes()  # in the package when installed, not beside it
    (folder / "v8" / "vast").mkdir(parents=True, exist_ok=True)
    prices = folder / "prices.yaml"
    for _ in range(cases):
        (folder / "v8" / "vast" / "vms.csv").write_text(damaged_vms_csv(rng, original), encoding="utf-8",
                                                        errors="surrogatepass")
        prices.write_bytes(shipped)
        as_of = rng.choice(["2026-11-30", "2026-11-30", "2026-02-30", "2026-13-45", "x"])

        def update() -> Any:
            try:
                return update_prices(str(folder / "v8"), ("vast",), CATALOG, load_skypilot(), prices, as_of)
            except PlannerInputError as exc:
                return exc

        run_case(tally, as_of, update, lambda outcome: prices_problem(outcome, prices, shipped),
                 is_error=lambda outcome: isinstance(outcome, PlannerInputError))


# ---------------------------------------------------------------------------------------------
# Surface 10: text outputs (names from files in terminal tables, Markdown, CSV and charts)

NAME_TEXT = ("[/x]", "[bold]x[/bold]", "x\\", "a\x1b[31mb", "\x1b]8;;http://x\x07l", ":smile:", "$\\frac{$", "$x^2$",
             "<script>alert(1)</script>", "a | b", "**x**", "# h", "- x", "```", "  ```", "=SUM(A1)", "+1", "-1", "@x",
             "\tx", "\r\nx", "x\ny", "\u202e", "[l](javascript:x)", "&amp;", "\\[b]")


def random_name(rng: random.Random) -> str:
    return "".join(rng.choice(NAME_TEXT + ("ok", " ", "é")) for _ in range(rng.randint(1, 4)))


@cache
def sample_results() -> tuple[Any, Any]:
    """A solved plan and a solved fleet, whose names each case replaces."""
    from planner.plan.solver import solve_scenario

    fleet = load_scenario(REPO / "scenarios" / "multi-model-fleet.yaml")
    return (solve_scenario(load_scenario(REPO / "scenarios" / "8b-budget.yaml"), CATALOG, 5.0, 2),
            api.plan_fleet(fleet, catalog=CATALOG, time_limit_s=10.0))


def text_problem(outputs: dict[str, str], name: str) -> str | None:
    """The name shows as written in each output, and nothing in it acts as markup, a formula or an escape code."""
    from markdown_it import MarkdownIt

    from planner.render.plain import controls_escaped

    for kind, text in outputs.items():
        if "\x1b" in text or "\x07" in text:
            return f"{kind}: an escape code reached the output"
    shown = controls_escaped(name)
    if shown not in outputs["terminal"]:
        return "terminal: the name does not print as written"
    rendered = MarkdownIt("commonmark").enable("table").render(outputs["markdown"])
    if re.search(r"<(?!/?(h2|h3|p|table|thead|tbody|tr|th|td|ul|li|strong|code|pre)\b)", rendered):
        return f"markdown: markup from the name: {shorten(rendered, 200)!r}"
    if html.escape(shown, quote=False).strip() not in rendered:
        return "markdown: the name does not render as written"
    cells = [cell for row in csv.reader(io.StringIO(outputs["csv"])) for cell in row]
    if any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in cells):
        return "csv: a cell starts a formula"
    if outputs["chart"] and html.escape(shown.strip(), quote=False) not in outputs["chart"]:
        return "chart: the label is not drawn as written"
    return None


def fuzz_text(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """Names with markup, escape codes, math, HTML, fences and formulas through every text renderer."""
    from dataclasses import replace

    from rich.console import Console

    from planner.render.charts import MemoryBar, memory_chart
    from planner.render.markdown import fleet_markdown, solve_markdown
    from planner.render.records import fleet_rows, rows_csv
    from planner.render.terminal import fleet_table, solve_table

    result, fleet = sample_results()
    for index in range(cases):
        name = random_name(rng)

        def render(name: str = name, as_fleet: bool = index % 2 == 1) -> dict[str, str]:
            console = Console(file=io.StringIO(), width=100_000, color_system=None, emoji=False, highlight=False)
            if as_fleet:
                renamed = replace(fleet, assignments=tuple(replace(a, workload=name) for a in fleet.assignments))
                fleet_table(name, renamed, console)
                markdown, rows = fleet_markdown(name, renamed), fleet_rows(renamed)
            else:
                renamed = replace(result, scenario=name, model=name)
                solve_table(renamed, console)
                markdown, rows = solve_markdown(renamed), renamed.rows()
                rows = [{**row, "scenario": name} for row in rows]
            return {"terminal": console.file.getvalue(), "markdown": markdown, "csv": rows_csv(rows),
                    "chart": memory_chart([MemoryBar(name, 1, 1, 1, 1)]) if index % 10 == 0 else ""}

        run_case(tally, name, render, lambda outputs, name=name: text_problem(outputs, name))


# ---------------------------------------------------------------------------------------------
# Surface 11: the HTTP API of `planner serve`, a real server on 127.0.0.1 given hostile requests

ESTIMATE_BODY = {"model": "llama-3.1-8b", "gpu": "l40s", "context": 8192, "sequences": 1, "tp": 1, "pp": 1,
                 "precision": "auto", "kv_dtype": "auto", "engine": "vllm"}
PERF_BODY = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tp": 1, "pp": 1, "engine": "vllm", "batch": 8,
             "prompt_tokens": 1000, "output_tokens": 200, "rate": 2.0}
HTTP_KEYS = (*ESTIMATE_BODY, *PERF_BODY, "config", "scenario", "target", "plan", "checkpoint")
SCENARIO_PATHS = ("/api/solve", "/api/solve", "/api/export", "/api/report")  # a report draws charts: the rarest
ODD_PATHS = ("/", "/planner", "/static/app.css", "/static/x.js", "/static/../app.py", "/api/catalog/gpus",
             "/api/catalog/prices", "/api/catalog/%00", "/api/docs", "/api/openapi.json", "/api/estimate/",
             "/api/nothing", "//api/estimate", "/api/estimate?model=x", "/" + "a" * 5000)
HOSTILE_HOSTS = ("evil.example:{port}", "evil.example", "127.0.0.1", "127.0.0.1:1", "localhost:{port}.evil.example",
                 "[::1]x:{port}", "", "a" * 2000, "127.0.0.1:{port}:{port}")
CONTENT_TYPES = ("application/json", "application/json", "application/json", "text/plain", "application/x-yaml",
                 "multipart/form-data; boundary=x", "application/json; charset=latin-1", "")
# Answers that are not JSON when they succeed: the pages, their assets, the report and the exports
NOT_JSON_OK = {"/": "text/html", "/planner": "text/html", "/static/app.css": "text/css", "/api/report": "text/html",
               "/api/export": "text/plain"}


@dataclass(frozen=True)
class HttpAnswer:
    method: str
    path: str
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def plausible_http_value(rng: random.Random, key: str) -> Any:
    """A value of the right kind for a request field (often valid, often just out of range)."""
    choices: dict[str, list[Any]] = {
        "model": [m.name for m in CATALOG.models][:20] + ["meta-llama/Llama-3.1-8B-Instruct", "/etc/passwd", "..",
                                                           "llama-3.1-8b/config.json", "~root", "hf://x/y"],
        "gpu": [g.name for g in CATALOG.gpus][:10] + ["h900", "../l40s"],
        "engine": [*profiled_engines(), PLANNING_MARGIN, "tgi"], "target": [*EXPORT_TARGETS, "bash"],
        "precision": ["auto", "fp8", "int4", "q4_k_m", "int3"], "kv_dtype": ["auto", "fp8", "bf16", "int2"],
        "checkpoint": [None, "org/name", "--trust-remote-code", "-h", ".", "a/b/c"],
    }
    if key in choices:
        return rng.choice(choices[key])
    if key in ("context", "prompt_tokens", "output_tokens"):
        return rng.choice([1, 512, 8192, 131072, 10**6, 10**9])
    if key in ("sequences", "batch", "tp", "pp", "plan"):
        return rng.choice([0, 1, 2, 3, 4, 8, 256, 10**6])
    if key == "rate":
        return rng.choice([0, 0.5, 2.0, 1e6, 1e7])
    return odd_value(rng)


# the calculator's result drop (POST /api/compare-results): files named and written by the client
RESULT_EXAMPLES = sorted((REPO / "examples" / "calibration").glob("*.json"))
RESULT_NAMES = ("run.json", "../../etc/passwd", ".env", "a" * 300, "x.json\x00.sh", "CON", "", "sub/dir/r.jsonl",
                "~root", "-h")


def compare_results_body(rng: random.Random) -> bytes:
    """A dropped-results request: the calculator's fields and 1-3 files, each a mutated example result, an odd
    value or odd text, under a hostile name."""
    files = []
    for _ in range(rng.randint(1, 3)):
        example = json.loads(rng.choice(RESULT_EXAMPLES).read_text())
        text = rng.choice([json.dumps(mutate_tree(rng, example, list(example), lambda key: odd_value(rng))),
                           json.dumps(odd_value(rng), default=str), "{" * 5000, "\ufeff# planner-scrape 1\nx 1",
                           "not a result", json.dumps(example)])
        files.append({"name": rng.choice(RESULT_NAMES), "text": text})
    body = {**PERF_BODY, "results": files}
    return json_bytes(mutate_tree(rng, body, list(HTTP_KEYS), lambda key: plausible_http_value(rng, key))
                      if rng.random() < 0.3 else body)


def random_http_body(rng: random.Random, sentinel: Path) -> tuple[str, bytes]:
    """The path and the body of one hostile request to the API."""
    roll = rng.random()
    if roll < 0.05:
        return "/api/compare-results", compare_results_body(rng)
    if roll < 0.35:
        return "/api/estimate", json_bytes(mutate_tree(rng, ESTIMATE_BODY, list(HTTP_KEYS),
                                                       lambda key: plausible_http_value(rng, key)))
    if roll < 0.45:
        config = mutate_tree(rng, rng.choice(base_configs()), list(CONFIG_KEYS),
                             lambda key: plausible_config_value(rng, key)) if rng.random() < 0.7 else odd_value(rng)
        return "/api/estimate", json_bytes({"config": config, "gpu": plausible_http_value(rng, "gpu"),
                                            "engine": plausible_http_value(rng, "engine")})
    if roll < 0.6:
        return "/api/perf", json_bytes(mutate_tree(rng, PERF_BODY, list(HTTP_KEYS),
                                                   lambda key: plausible_http_value(rng, key)))
    if roll < 0.75:
        path = rng.choice(SCENARIO_PATHS)
        body: dict[str, Any] = {"scenario": random_scenario_bytes(rng, sentinel).decode("utf-8", "replace")}
        if path == "/api/export":
            body.update(target=plausible_http_value(rng, "target"), checkpoint=plausible_http_value(rng, "checkpoint"))
        return path, json_bytes(mutate_tree(rng, body, list(HTTP_KEYS), lambda key: plausible_http_value(rng, key))
                                if rng.random() < 0.2 else body)
    path = rng.choice(("/api/estimate", "/api/perf", "/api/solve", "/api/export", "/api/compare-results"))
    depth = rng.choice([100, 5000, 200_000])
    return path, rng.choice([
        b"", b"{", b"null", b"[]", b'"x"', b"{}", b"\xff\xfe{}", b"[" * depth, b'{"a":' * depth,
        b'{"context": ' + b"9" * 5000 + b"}", b'{"context": 1e999}', b'{"scenario": "' + b"[" * depth + b'"}',
        b'{"scenario": "' + b"{a: " * min(depth, 50_000) + b'"}', b"x" * ((1 << 20) + 1),
        json_bytes({"scenario": hostile_literal(rng, sentinel)}),
    ])


def json_bytes(value: Any) -> bytes:
    """JSON as Python writes it (NaN and Infinity too: the server must refuse them); too deep to write: {}."""
    try:
        return json.dumps(value).encode()
    except RecursionError:
        return b"{}"


def random_http_request(rng: random.Random, port: int, sentinel: Path) -> tuple[str, str, dict[str, str], bytes]:
    """(method, path, headers, body): mostly a mutated API body, sometimes an odd method, path, type or Host."""
    path, body = random_http_body(rng, sentinel)
    method = "POST"
    headers = {"Host": f"127.0.0.1:{port}", "Content-Type": rng.choice(CONTENT_TYPES),
               "Content-Length": str(len(body))}
    roll = rng.random()
    if roll < 0.1:
        method, path, body = rng.choice(("GET", "GET", "HEAD", "PUT", "DELETE", "OPTIONS")), rng.choice(ODD_PATHS), b""
        headers["Content-Length"] = "0"
    elif roll < 0.18:
        headers["Host"] = rng.choice(HOSTILE_HOSTS).format(port=port)
    elif roll < 0.2:
        headers["Content-Length"] = rng.choice(["-1", "1e3", "99999999999999999999", str(len(body) + 10)])
    elif roll < 0.23:
        headers[rng.choice(["X-Forwarded-Host", "Origin", "Referer", "Transfer-Encoding"])] = \
            rng.choice([f"http://evil.example:{port}", "null", "chunked", "gzip", "x" * 4000])
    return method, path, headers, body


def http_request(port: int, method: str, path: str, headers: dict[str, str], body: bytes) -> HttpAnswer:
    """One request on its own connection, answered within CASE_SECONDS or not at all."""
    import http.client

    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CASE_SECONDS + 2)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders(body if method != "HEAD" or body else None)
        response = connection.getresponse()
        data = response.read()
        return HttpAnswer(method, path.partition("?")[0], response.status,
                          {k.lower(): v for k, v in response.getheaders()}, data, time.perf_counter() - started)
    finally:
        connection.close()


def http_problem(answer: HttpAnswer) -> str | None:
    """A 2xx or 4xx within CASE_SECONDS with the security headers; a 4xx (and every API 2xx but the report and the
    exports) is JSON, a 4xx's a one-line {"error": ...}."""
    if answer.seconds > CASE_SECONDS:
        return f"answered after {answer.seconds:.1f} s"
    if not (200 <= answer.status < 300 or 400 <= answer.status < 500):
        return f"status {answer.status}: {shorten(answer.body.decode('utf-8', 'replace'), 160)}"
    if answer.headers.get("x-content-type-options") != "nosniff" or \
            "frame-ancestors 'none'" not in answer.headers.get("content-security-policy", ""):
        return f"status {answer.status} without the security headers"
    if answer.method == "HEAD":
        return None
    kind = answer.headers.get("content-type", "")
    if answer.status < 300 and answer.path in NOT_JSON_OK:
        return None if kind.startswith(NOT_JSON_OK[answer.path]) else f"{answer.path} answered {kind!r}"
    try:
        data = json.loads(answer.body)
    except ValueError:
        return f"status {answer.status} is not JSON ({kind!r}): {shorten(answer.body.decode('utf-8', 'replace'), 120)}"
    if answer.status >= 400:
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, str):
            return f"status {answer.status} without an error: {shorten(answer.body.decode(), 120)}"
        return one_line_problem(error)
    return None


@contextmanager
def http_server(folder: Path) -> Iterator[int]:
    """`planner serve` on a free port of 127.0.0.1, run from `folder`; its port."""
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "planner.cli", "serve", "--port", str(port)], cwd=folder,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/catalog/precisions", timeout=1)
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError(f"planner serve exited with {process.returncode}") from None
                time.sleep(0.1)
        yield port
        if process.poll() is not None:
            raise RuntimeError(f"planner serve died during the run (exit code {process.returncode})")
    finally:
        process.terminate()
        process.wait(timeout=30)


def fuzz_http(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """Hostile requests to a real `planner serve` (bodies, YAML, numbers, methods, paths, Hosts, lengths), one
    connection each: every answer a 2xx or a JSON 4xx within CASE_SECONDS."""
    sentinel = folder / "executed"
    with http_server(folder) as port:
        for _ in range(cases):
            method, path, headers, body = random_http_request(rng, port, sentinel)
            case = {"method": method, "path": path, "headers": headers, "body": body}
            run_case(tally, case, lambda: http_request(port, method, path, headers, body), http_problem,
                     is_error=lambda answer: answer.status >= 400)
            if sentinel.exists():
                tally.found("executed input", "a YAML tag ran code in the server", case)
                sentinel.unlink()


# ---------------------------------------------------------------------------------------------
# Large inputs: the issue's memory and time reproducers, each in a forked child measured for time and peak memory


def _large_files(folder: Path) -> list[tuple[str, list[str]]]:
    """(what, planner argv) for inputs small on disk (or sparse) that once cost gigabytes or minutes."""
    cases: list[tuple[str, list[str]]] = []

    def model_folder(name: str, shard: bytes) -> str:
        path = folder / name
        path.mkdir(exist_ok=True)
        (path / "config.json").write_bytes(UNKNOWN_ARCH_CONFIG.read_bytes())
        (path / "model.safetensors").write_bytes(shard)
        return str(path)

    cases.append(("baseline: estimate llama-3.1-8b", ["estimate", "llama-3.1-8b"]))
    cases.append(("safetensors: 100 MB header of [{},{},...]",
                  ["estimate", model_folder("list-100mb", safetensors_bytes(None, raw=b"[" + b"{}," * 33_333_332 + b"{}]"))]))
    worst = b'{"w": [' + b"{}," * (16 * 2**20 // 3 - 4) + b"{}]}"  # the most objects a parsed header can hold
    cases.append((f"safetensors: {len(worst) / 2**20:.1f} MiB header of empty objects (parsed)",
                  ["estimate", model_folder("objects-16mib", safetensors_bytes(None, raw=worst))]))
    many = safetensors_header({f"model.layers.{i}.mlp.experts.{j}.w": ("F8_E4M3", [1]) for i in range(61)
                               for j in range(1536)})  # DeepSeek-V3's tensor count in one file
    cases.append((f"safetensors: {len(many):,} tensors in one header", ["estimate", model_folder("many", safetensors_bytes(many))]))
    small = folder / "claims-2^40.gguf"
    small.write_bytes(gguf_bytes({**GGUF_TINY_LLAMA, "tokenizer.ggml.scores": ("arr", ("u8", 2**40))}, tensors=(),
                                 tensor_data=False))
    cases.append((f"gguf: {small.stat().st_size:,} B file, u8 array claiming 2^40 items", ["estimate", str(small)]))
    array = folder / "array-4m.gguf"
    array.write_bytes(gguf_bytes({**GGUF_TINY_LLAMA, "tokenizer.ggml.token_type": ("arr", ("u8", [1] * 4_000_000))}))
    cases.append((f"gguf: {array.stat().st_size / 1e6:.1f} MB file, 4M-item u8 array", ["estimate", str(array)]))
    strings = folder / "strings-4m.gguf"
    strings.write_bytes(gguf_bytes({**GGUF_TINY_LLAMA, "tokenizer.ggml.tokens": ("arr", ("str", [b"tok"] * 4_000_000))}))
    cases.append((f"gguf: {strings.stat().st_size / 1e6:.1f} MB file, 4M-item string array", ["estimate", str(strings)]))
    deep = folder / "layers-1e8.gguf"
    deep.write_bytes(gguf_bytes({**GGUF_TINY_LLAMA, "llama.block_count": ("u32", 10**8)}))
    cases.append(("gguf: block_count 1e8", ["estimate", str(deep)]))
    for name, argv in (("s.yaml", ["solve"]), ("config.json", ["estimate"]), ("plan.json", ["export", "--to", "vllm"])):
        path = folder / f"sparse-{name}"
        with path.open("wb") as handle:
            handle.truncate(2 * 10**9)
        cases.append((f"2 GB sparse {name}", [argv[0], str(path), *argv[1:]]))
    return cases + _large_searches(folder)


def _large_searches(folder: Path) -> list[tuple[str, list[str]]]:
    """Searches within the schema's limits that once took minutes (issue 13, finding 14), at the default time limit;
    then a report and a what-if, whose variants share that limit."""
    wide = folder / "wide-context.yaml"
    wide.write_text(json.dumps({"model": "llama-3.1-8b", "workload": {"context": {"min": 1, "max": 100_000_000}},
                                "search": {"max_gpus_per_replica": 1024}}))
    fleet = folder / "fleet-200.yaml"
    fleet.write_text(json.dumps({"workloads": [{
        "name": f"w{i}", "model": ("llama-3.1-8b", "llama-3.3-70b", "qwen3-30b-a3b")[i % 3], "workload": {
            "context": "8K", "traffic": {"requests_per_s": 1 + i % 7, "prompt_tokens": 1000, "output_tokens": 200},
            "slo": {"ttft_s": 2.0, "tpot_s": 0.06}}} for i in range(200)]}))
    return [("solve: context {min: 1, max: 100M}, every GPU, 1,024 GPUs per replica", ["solve", str(wide)]),
            ("solve: a fleet of 200 workloads (the schema's most)", ["solve", str(fleet)]),
            ("compare deepseek-v3 --max-gpus 1024 --context 100000000",
             ["compare", "deepseek-v3", "--max-gpus", "1024", "--context", "100000000"]),
            ("report -o page.html: the wide-context scenario and its 37 cost-curve points",
             ["report", str(wide), "-o", str(folder / "page.html"), "-q"]),
            ("solve --what-if: the wide-context scenario and its 4 variants", ["solve", str(wide), "--what-if"])]


@dataclass(frozen=True)
class _Run:
    code: int
    seconds: float  # wall, from before the process starts to after it ends
    cpu_s: float  # user + system
    peak_mb: float
    said: str  # the first line it printed


def run_large(folder: Path, repeat: int = 1) -> int:
    """Each case as its own `python -m planner.cli` process, `repeat` times: exit code, wall time (Python's start-up,
    imports, catalogs and exit included: what a user waits for, and what --time-limit bounds), CPU time and the
    process's peak memory (ru_maxrss). Each search then once more, to measure the time it spends outside its
    searches (what planner.plan.deadline.FINISHING_S keeps back from the time limit)."""
    searches = _large_searches(folder)
    failures = 0
    for what, argv in _large_files(folder):
        runs = [_one_process(["-m", "planner.cli", *argv], folder) for _ in range(repeat)]
        for run in runs:
            print(f"    {run.said}", flush=True)
            verdict = "ok" if run.code in (0, 2) and run.seconds < CASE_SECONDS and run.peak_mb < 1024 else "FINDING"
            failures += verdict != "ok"
            print(f"{verdict:8} exit {run.code:>3}  {run.seconds:5.2f} s  {run.cpu_s:5.2f} s CPU  "
                  f"{run.peak_mb:5.0f} MB peak  {what}", flush=True)
        if repeat > 1:
            times, peaks = sorted(r.seconds for r in runs), sorted(r.peak_mb for r in runs)
            print(f"{'':8} best/worst of {repeat}: {times[0]:.2f}/{times[-1]:.2f} s, "
                  f"{peaks[0]:.0f}/{peaks[-1]:.0f} MB peak", flush=True)
        if (what, argv) in searches:
            print(f"{'':8} {_outside_searches(argv, folder)}", flush=True)
    return failures


# Run by a small Python of its own: a process started from this one (hundreds of MB with the fuzzers' imports)
# would report this process's peak as its own, as Linux carries the larger peak over a fork and an exec.
_MEASURE = """import resource, subprocess, sys, time
report, seconds, argv = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
started = time.perf_counter()
try:
    code = subprocess.run(argv, timeout=seconds).returncode
except subprocess.TimeoutExpired:
    code = -9
used = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(report, "w") as out:
    out.write(f"{code} {time.perf_counter() - started} {used.ru_utime + used.ru_stime} {used.ru_maxrss}")
"""

# `planner ARGV` as planner's own entry runs it, noting the wall and CPU time when main() starts and when a search
# first finds its deadline passed.
_PHASES = """import atexit, json, sys, time
import planner.plan.deadline as deadline
from planner.cli import main
notes, stopped, expired = sys.argv[1], [], deadline.Deadline.expired
def watched(self):
    if expired(self) and not stopped:
        stopped.append((time.perf_counter(), time.process_time()))
    return expired(self)
deadline.Deadline.expired = watched
atexit.register(lambda: open(notes, "w").write(json.dumps([started, stopped[:1]])))
sys.argv = ["planner", *sys.argv[2:]]
started = (time.perf_counter(), time.process_time())
main()
"""


def _one_process(python_argv: list[str], folder: Path) -> _Run:
    """`python PYTHON_ARGV` as a new process, killed after three times CASE_SECONDS."""
    path = os.pathsep.join([str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH", "")])
    report = folder / "measured"
    with (folder / "stdout").open("w+") as stdout, (folder / "stderr").open("w+") as stderr:
        subprocess.run([sys.executable, "-c", _MEASURE, str(report), str(3 * CASE_SECONDS), sys.executable,
                        *python_argv], stdout=stdout, stderr=stderr, env={**os.environ, "PYTHONPATH": path})
        stdout.seek(0)
        stderr.seek(0)
        said = (stderr.read().strip() or stdout.read().strip()).splitlines()
    code, seconds, cpu_s, peak_kib = report.read_text().split()
    return _Run(int(code), float(seconds), float(cpu_s), int(peak_kib) / 1024,  # ru_maxrss: KiB on Linux
                said[0][:150] if said else "")


def _outside_searches(argv: list[str], folder: Path) -> str:
    """How long the command runs outside its searches (what planner.plan.deadline.FINISHING_S keeps back): its
    whole wall time less the time from main() to the search's stop, and the CPU share the search had."""
    notes = folder / "phases.json"
    run = _one_process(["-c", _PHASES, str(notes), *argv], folder)
    (main_wall, main_cpu), stopped = json.loads(notes.read_text())
    if not stopped:
        return f"(no search stopped at the deadline: {run.seconds:.2f} s in all)"
    stop_wall, stop_cpu = stopped[0]
    share = (stop_cpu - main_cpu) / (stop_wall - main_wall)
    outside = run.seconds - (stop_wall - main_wall)
    return (f"outside the searches {outside:.2f} s of {run.seconds:.2f} s, CPU share {share:.2f} "
            f"(kept back at a whole CPU: deadline.FINISHING_S {FINISHING_S:g} s, html.CHARTS_S {CHARTS_S:g} s more "
            "for a page)")


# ---------------------------------------------------------------------------------------------
# Surface 12: arrival traces (`planner simulate --arrivals trace.jsonl`), read and replayed on one replica

TRACE_VALUES = (0, 1, -1, 0.5, 1e9, 1e308, 10**30, "1", None, True, [], {}, "nan", 2**63, 100_000_000, 100_000_001)


def hostile_trace(rng: random.Random) -> str:
    """A few lines of a valid trace, some damaged: a value replaced, a key dropped or added, deep or huge JSON,
    a line cut, all arrivals at 0, or many requests."""
    lines = []
    for i in range(rng.randint(0, 12)):
        row: dict[str, Any] = {"arrival_s": i * rng.choice([0, 0.1, 1.0]), "prompt_tokens": rng.choice([1, 128, 2000]),
                               "output_tokens": rng.choice([1, 16, 400])}
        roll = rng.random()
        if roll < 0.3:
            row[rng.choice(list(row))] = rng.choice(TRACE_VALUES)
        elif roll < 0.4:
            row.pop(rng.choice(list(row)))
        elif roll < 0.45:
            row["extra"] = 1
        line = json.dumps(row)
        if rng.random() < 0.05:
            line = "[" * rng.choice([10, 10_000]) + "]" * rng.choice([0, 10])
        elif rng.random() < 0.05:
            line = line[: rng.randrange(len(line))]
        lines.append(line)
    if rng.random() < 0.03:
        lines += [json.dumps({"arrival_s": 0, "prompt_tokens": 8, "output_tokens": 4})] * 30_000
    return "\n".join(lines) + rng.choice(["", "\n", "\n\n"])


def trace_problem(result: Any) -> str | None:
    """A replayed trace reports finite figures: no NaN percentile, no rate from a zero-length run."""
    figures = [result.requests_per_s, result.output_tokens_per_s]
    figures += [getattr(stat, q) for stat in (result.ttft_s, result.tpot_s, result.e2e_s) for q in ("p50", "p99")]
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in figures):
        return f"a non-finite figure: {figures}"
    return None


def fuzz_traces(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """Hostile JSONL traces through the trace reader and the simulator of one Llama 3.1 8B replica on an H100, under
    vLLM's scheduler (admitting on prompt blocks, preempting), SGLang's (a step of prompts alone; 0.5.23 reserving
    whole outputs, 0.5.13 counting them at its ratio and retracting) or TensorRT-LLM's (blocks to completion), one drawn
    a case."""
    from planner.api import _replica
    from planner.estimator.simulate import read_trace, simulate

    replicas = [_replica("llama-3.1-8b", "h100-sxm", None, 1, 1, "auto", "auto", engine, 4096, CATALOG, sized=True,
                         engine_version=version)
                for engine, version in (("vllm", None), ("sglang", None), ("sglang", "0.5.13"), ("trtllm", None))]
    path = folder / "trace.jsonl"
    for _ in range(cases):
        text = hostile_trace(rng)
        replica = rng.choice(replicas)
        path.write_text(text, encoding="utf-8")
        run_case(tally, f"{replica.engine}: {shorten(text, 200)}",
                 lambda: simulate(replica.timer, replica.scheduler, read_trace(path), warmup_s=0.0), trace_problem)


# ---------------------------------------------------------------------------------------------
# Surface 13: benchmark results and calibration files (`planner calibrate RESULT...`, `planner check`, `--calibration`)

SCRAPE_EXAMPLES = sorted((REPO / "tests" / "data" / "metrics").glob("*.prom"))
SGLANG_KEYS = {"backend": "sglang", "server_info": {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "version": "0.5.23"},
               "mean_e2e_latency_ms": 2900.0, "median_e2e_latency_ms": 2880.0, "p99_e2e_latency_ms": 3400.0}


def guidellm_report(rng: random.Random) -> dict:
    """A GuideLLM benchmarks.json of one to three benchmarks, each strategy GuideLLM writes."""
    def summary(mean: float) -> dict:
        return {"successful": {"mean": mean, "median": mean, "percentiles": {"p99": mean * 2}}}

    strategies = ({"type_": "synchronous"}, {"type_": "concurrent", "streams": 8}, {"type_": "throughput"},
                  {"type_": "constant", "rate": 2.5}, {"type_": "poisson", "rate": 4.0, "max_concurrency": 16})
    return {"metadata": {"version": 2, "guidellm_version": "0.8.1"}, "benchmarks": [
        {"type_": "generative_benchmark", "config": {"strategy": rng.choice(strategies),
                                                     "backend": {"model": "meta-llama/Llama-3.1-8B-Instruct"}},
         "metrics": {"request_totals": {"successful": 40, "errored": 0, "incomplete": 0, "total": 40},
                     "prompt_token_count": summary(512.0), "output_token_count": summary(128.0),
                     "time_to_first_token_ms": summary(40.0), "inter_token_latency_ms": summary(9.0),
                     "request_latency": summary(1.2), "requests_per_second": summary(0.8),
                     "output_tokens_per_second": summary(102.4)}} for _ in range(rng.randint(1, 3))]}


def hostile_scrape(rng: random.Random) -> str:
    """A /metrics window of the tests' examples with lines dropped, repeated, renumbered or relabelled."""
    lines = rng.choice(SCRAPE_EXAMPLES).read_text().splitlines()
    for _ in range(rng.randint(1, 4)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        roll = rng.random()
        if roll < 0.3:
            del lines[i]
        elif roll < 0.5:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif roll < 0.8:
            lines[i] = lines[i].rsplit(" ", 1)[0] + " " + str(rng.choice(ODD_SCALARS))
        else:
            lines[i] = lines[i].replace("le=", rng.choice(['le="-1",le=', "lx=", 'le="NaN",x=']), 1)
    return "\n".join(lines) + "\n"


def hostile_result(rng: random.Random) -> str:
    """A result file as one of the four formats writes it, damaged: a key dropped, retyped or added, lines joined,
    cut or nested deep."""
    roll = rng.random()
    if roll < 0.25:
        return hostile_scrape(rng)
    if roll < 0.45:
        report = guidellm_report(rng)
        return json.dumps(mutate_tree(rng, report, list(report), lambda key: odd_value(rng)), default=str)
    example = json.loads(rng.choice(RESULT_EXAMPLES).read_text())
    if roll < 0.65:
        example = {**example, **SGLANG_KEYS}
    lines = [json.dumps(mutate_tree(rng, example, list(example), lambda key: odd_value(rng)), default=str)
             if rng.random() < 0.85 else json.dumps(example) for _ in range(rng.randint(1, 3))]
    text = "\n".join(lines)
    if rng.random() < 0.05:
        text = text[: rng.randrange(len(text) + 1)]
    elif rng.random() < 0.03:
        text = "[" * rng.choice([10, 100_000])
    return text


def result_problem(runs: Any) -> str | None:
    """Every run read holds finite figures: a positive count and lengths, rates and latencies finite or absent."""
    for run in runs:
        figures = [run.completed, run.mean_input_tokens, run.mean_output_tokens]
        if not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in figures):
            return f"a count or length not finite and positive: {figures}"
        stated = [run.request_throughput, run.output_throughput, *(getattr(latency, q) for latency in
                  (run.ttft, run.tpot, run.itl, run.e2el) for q in ("mean_ms", "median_ms", "p99_ms"))]
        if not all(math.isfinite(x) and x >= 0 for x in stated if x is not None):
            return f"a rate or latency not finite: {stated}"
    return None


def hostile_calibration(rng: random.Random, seed: dict) -> str:
    """A calibration file `planner calibrate` wrote, damaged: a key dropped, retyped or added, or the text cut."""
    if rng.random() < 0.1:
        text = yaml.safe_dump(seed, sort_keys=False)
        return text[: rng.randrange(len(text) + 1)]
    return yaml.safe_dump(mutate_tree(rng, seed, list(key_vocabulary(seed)), lambda key: odd_value(rng)),
                          sort_keys=False)


def key_vocabulary(data: Any) -> set[str]:
    return {str(path[-1]) for path in key_paths(data)}


def fuzz_results(rng: random.Random, cases: int, tally: Tally, folder: Path) -> None:
    """Hostile benchmark results through the readers, and hostile calibration files through their loader."""
    from planner import api
    from planner.calibration.calibrate import load_calibration
    from planner.calibration.factors import HIGHEST, LOWEST
    from planner.calibration.readers import read_results

    seed = yaml.safe_load(api.calibrate(RESULT_EXAMPLES, model="llama-3.1-8b", gpu="h100-sxm", tp=1).to_yaml())

    def factors_problem(calibration: Any) -> str | None:
        values = calibration.factors.as_dict().values()
        return None if all(LOWEST <= v <= HIGHEST for v in values) else f"factors out of bounds: {list(values)}"

    for _ in range(cases):
        if rng.random() < 0.2:
            text, path = hostile_calibration(rng, seed), folder / "calibration-case.yaml"
            path.write_bytes(text.encode("utf-8", "surrogatepass"))  # a lone surrogate: bytes that are not UTF-8
            run_case(tally, shorten(text, 200), lambda: load_calibration(path), factors_problem)
            continue
        text = hostile_result(rng)
        path = folder / rng.choice(["result.json", "result.jsonl", "metrics.prom"])
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        run_case(tally, shorten(text, 200), lambda: read_results(path), result_problem)


# ---------------------------------------------------------------------------------------------
# Driver

FUZZERS: dict[str, Callable[..., None]] = {"sizes": fuzz_sizes, "config": fuzz_configs, "scenario": fuzz_scenarios,
                                           "cli": fuzz_cli, "weights": fuzz_weights, "paths": fuzz_paths,
                                           "model-ids": fuzz_model_ids, "plans": fuzz_plans, "prices": fuzz_prices,
                                           "text": fuzz_text, "http": fuzz_http, "traces": fuzz_traces,
                                           "results": fuzz_results}


def run_surface(surface: str, cases: int, seed: int, folder: Path, **options: Any) -> Tally:
    tally = Tally(surface)
    rng = random.Random(f"{surface}-{seed}")
    surface_folder = folder / surface
    surface_folder.mkdir(parents=True, exist_ok=True)
    FUZZERS[surface](rng, cases, tally, surface_folder, **options)
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000, help="cases per surface (default 5,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--surface", choices=SURFACES, action="append", help="only these surfaces (repeatable)")
    parser.add_argument("--solve-every", type=int, default=0, metavar="N",
                        help="scenario surface: also solve every N-th scenario that reaches a search space")
    parser.add_argument("--large", action="store_true",
                        help="instead: the large-input reproducers (100 MB headers, 2 GB sparse files, huge GGUF arrays, "
                             "searches that once took minutes), "
                             "each timed and measured for peak memory")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="--large: run each case N times")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a model id with a slash may be looked up on the Hub: stay offline
    if args.large:
        with tempfile.TemporaryDirectory(prefix="planner-large-") as folder:
            return 1 if run_large(Path(folder), args.repeat) else 0
    findings: list[Finding] = []
    with tempfile.TemporaryDirectory(prefix="planner-fuzz-") as folder:
        for surface in args.surface or SURFACES:
            started = time.perf_counter()
            options = {"solve_every": args.solve_every} if surface == "scenario" else {}
            tally = run_surface(surface, args.cases, args.seed, Path(folder), **options)
            print(f"{tally.summary()} in {time.perf_counter() - started:.1f} s", flush=True)
            findings.extend(tally.findings.values())
    for finding in findings:
        print(finding)
    print(f"{len(findings)} distinct findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
