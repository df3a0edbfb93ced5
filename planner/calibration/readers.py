"""Benchmark results as the serving benchmarks save them, each read into one MeasuredRun.

Three formats, their keys read from the tools' own code:
- `vllm bench serve --save-result` (vLLM v0.34.0, vllm/benchmarks/serve.py main and benchmark): one JSON object
  (or, with --append-result, one per line) holding date, backend, model_id, num_prompts, request_rate ("inf" or a
  number), max_concurrency, then duration, completed, total_input_tokens, total_output_tokens,
  request_throughput, output_throughput and mean_/median_/std_/p99_ + ttft|tpot|itl|e2el + _ms (e2el only when
  --percentile-metrics asks for it). input_lens/output_lens are kept only with --save-detailed, so the mean
  lengths are the totals over the completed requests.
- SGLang `python -m sglang.bench_serving --output-file X.jsonl` (sglang 0.5.23, sglang/benchmark/serving.py, which
  sglang/bench_serving.py re-exports): one JSON object per line, appended per run, with backend, request_rate
  (a number, json's Infinity for inf), max_concurrency, server_info, duration, completed, total_input_tokens,
  total_output_tokens, request_throughput, output_throughput, mean_/median_/p99_ + ttft|tpot|itl _ms and
  mean_/median_/p99_e2e_latency_ms.
- GuideLLM `benchmarks.json` (guidellm 0.8.1, guidellm/benchmark/schemas/report.py GenerativeBenchmarksReport,
  model_dump(mode="json"): field names as written, `type_` included): metadata.guidellm_version, benchmarks[], each
  with config.strategy (type_ synchronous | concurrent with streams | throughput | constant / poisson with rate,
  max_concurrency), metrics.<name>.successful.{mean, median, percentiles.p99} for prompt_token_count,
  output_token_count, time_to_first_token_ms, inter_token_latency_ms (vLLM's TPOT: (last - first token) /
  (tokens - 1)), request_latency (seconds), requests_per_second, output_tokens_per_second, and
  metrics.request_totals.successful. (GuideLLM's time_per_output_token_ms includes the first token; not read.)
A fourth, a vLLM or SGLang server's /metrics scraped at a window's start and end into one text file, is
planner.calibration.scrape's (a file that starts with a `#` line or has a MARK line: JSON cannot).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from math import inf, isfinite
from pathlib import Path
from typing import Any

from planner.errors import PlannerInputError
from planner.files import FileKind, read_bytes
from planner.units import MiB

# A vllm bench serve result is a few KB; with --save-detailed it holds every generated text (1,000 requests of
# 1,024 tokens: ~5 MB). GuideLLM's report samples its requests' statistics into the file as well.
RESULT = FileKind("result", 64 * MiB, "give a `vllm bench serve --save-result` JSON, an SGLang bench_serving "
                  "JSONL, a GuideLLM benchmarks.json or two /metrics scrapes (README: calibration)")
MARK = "# planner-scrape"  # the line before each /metrics scrape of a window (planner.calibration.scrape)


@dataclass(frozen=True)
class Latency:
    """One latency metric over a run, in milliseconds (None: the result does not say)."""

    mean_ms: float | None
    median_ms: float | None
    p99_ms: float | None


@dataclass(frozen=True)
class MeasuredRun:
    """One benchmark run as measured: what it asked for, the lengths it sent and what it saw."""

    file: str  # the file's name
    sha256: str  # of the whole file
    index: int  # the run's place in the file (a JSONL line, a GuideLLM benchmark), from 0
    tool: str  # vllm | sglang | guidellm | vllm-metrics | sglang-metrics
    model_id: str | None
    date: str | None
    engine_version: str | None  # as the result records it (SGLang's server_info; vLLM's result has none)
    request_rate: float  # requests/s, inf: all sent at once
    max_concurrency: int | None
    completed: int
    mean_input_tokens: float
    mean_output_tokens: float
    ttft: Latency
    tpot: Latency
    itl: Latency
    e2el: Latency
    request_throughput: float | None  # requests/s
    output_throughput: float | None  # output tokens/s

    @property
    def label(self) -> str:
        return self.file if self.index == 0 else f"{self.file}#{self.index}"


def read_results(path: str | Path) -> tuple[MeasuredRun, ...]:
    """Every run in one result file, whichever of the four formats it is."""
    p = Path(path)
    raw = read_bytes(p, RESULT)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerInputError(f"result: {p.name} is not UTF-8 text; {RESULT.fix}") from None
    if text.lstrip().startswith("#") or f"\n{MARK}" in text:  # Prometheus text: JSON has neither
        from planner.calibration.scrape import read_scrape  # it reads into this module's records

        return (read_scrape(text, p.name, digest),)
    documents = _documents(text, p.name)
    runs: list[MeasuredRun] = []
    for line, document in enumerate(documents):
        where = p.name if len(documents) == 1 else f"{p.name} line {line + 1}"
        if not isinstance(document, dict):
            raise PlannerInputError(f"result: {where} is not a JSON object; {RESULT.fix}")
        if "benchmarks" in document:
            runs += _guidellm(document, where, p.name, digest, len(runs))
        elif "server_info" in document:
            runs.append(_sglang(document, where, p.name, digest, len(runs)))
        elif "model_id" in document:
            runs.append(_vllm(document, where, p.name, digest, len(runs)))
        else:
            raise PlannerInputError(f"result: {where} has none of model_id (vLLM), server_info (SGLang) or "
                                    f"benchmarks (GuideLLM); {RESULT.fix}")
    if not runs:
        raise PlannerInputError(f"result: {p.name} holds no run; {RESULT.fix}")
    return tuple(runs)


def _constant(name: str) -> float:
    """json's Infinity (SGLang writes request_rate inf so); NaN and -Infinity are no measurement."""
    if name == "Infinity":
        return inf
    raise ValueError(f"{name} is not a measurement")


def _documents(text: str, name: str) -> list[Any]:
    """One JSON document, else one per non-empty line (JSONL)."""
    try:
        try:
            return [json.loads(text, parse_constant=_constant)]
        except json.JSONDecodeError:
            lines = [line for line in text.splitlines() if line.strip()]
            if len(lines) < 2:
                raise
            return [json.loads(line, parse_constant=_constant) for line in lines]
    except json.JSONDecodeError as exc:
        raise PlannerInputError(f"result: {name} is not JSON or JSONL (line {exc.lineno}: {exc.msg}); "
                                f"{RESULT.fix}") from None
    except RecursionError:
        raise PlannerInputError(f"result: {name} is nested too deeply to be a benchmark result; {RESULT.fix}") from None
    except ValueError as exc:  # NaN, or an integer past Python's digit limit
        raise PlannerInputError(f"result: {name}: {exc}; a result holds finite numbers") from None


class _Fields:
    """The keys of one run, each checked as it is taken: the error names the file and the key."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data, self.where = data, where

    def fail(self, key: str, problem: str) -> PlannerInputError:
        return PlannerInputError(f"result: {self.where}: {key} {problem}; {RESULT.fix}")

    def number(self, key: str, required: bool = False, data: dict[str, Any] | None = None) -> float | None:
        value = (self.data if data is None else data).get(key)
        if value is None:
            if required:
                raise self.fail(key, "is missing")
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not isfinite(value) or value < 0:
            raise self.fail(key, f"is {_shown(value)}, not a number of 0 or more")
        return float(value)

    def count(self, key: str, data: dict[str, Any] | None = None) -> int:
        value = self.number(key, True, data)
        if value is None or value != int(value) or value < 1:
            raise self.fail(key, f"is {_shown(value)}, not a whole number of 1 or more")
        return int(value)

    def text(self, key: str, data: dict[str, Any] | None = None) -> str | None:
        value = (self.data if data is None else data).get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"is {_shown(value)}, not text")
        return value

    def rate(self, key: str) -> float:
        value = self.data.get(key)
        if value in ("inf", inf, None):  # vLLM writes "inf"; None: the benchmark's default, all at once
            return inf
        number = self.number(key)
        if not number:
            raise self.fail(key, "is 0: give a rate above 0 requests/s or inf")
        return number

    def concurrency(self, key: str, data: dict[str, Any] | None = None) -> int | None:
        return None if (self.data if data is None else data).get(key) is None else self.count(key, data)

    def latency(self, metric: str, name: str | None = None) -> Latency:
        name = name or metric
        return Latency(self.number(f"mean_{name}_ms"), self.number(f"median_{name}_ms"), self.number(f"p99_{name}_ms"))

    def lengths(self, completed: int) -> tuple[float, float]:
        inputs, outputs = self.number("total_input_tokens", True), self.number("total_output_tokens", True)
        assert inputs is not None and outputs is not None
        if inputs < completed or outputs < completed:
            raise self.fail("total_input_tokens", "and total_output_tokens must hold at least a token per "
                            f"completed request ({_shown(completed)})")
        return inputs / completed, outputs / completed


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _vllm(data: dict[str, Any], where: str, file: str, digest: str, index: int) -> MeasuredRun:
    f = _Fields(data, where)
    completed = f.count("completed")
    mean_in, mean_out = f.lengths(completed)
    return MeasuredRun(
        file=file, sha256=digest, index=index, tool="vllm", model_id=f.text("model_id"), date=f.text("date"),
        engine_version=None, request_rate=f.rate("request_rate"), max_concurrency=f.concurrency("max_concurrency"),
        completed=completed, mean_input_tokens=mean_in, mean_output_tokens=mean_out, ttft=f.latency("ttft"),
        tpot=f.latency("tpot"), itl=f.latency("itl"), e2el=f.latency("e2el"),
        request_throughput=f.number("request_throughput"), output_throughput=f.number("output_throughput"))


def _sglang(data: dict[str, Any], where: str, file: str, digest: str, index: int) -> MeasuredRun:
    f = _Fields(data, where)
    info = data.get("server_info")
    info = info if isinstance(info, dict) else {}
    completed = f.count("completed")
    mean_in, mean_out = f.lengths(completed)
    return MeasuredRun(
        file=file, sha256=digest, index=index, tool="sglang", model_id=f.text("model_path", info),
        date=None, engine_version=f.text("version", info), request_rate=f.rate("request_rate"),
        max_concurrency=f.concurrency("max_concurrency"), completed=completed, mean_input_tokens=mean_in,
        mean_output_tokens=mean_out, ttft=f.latency("ttft"), tpot=f.latency("tpot"), itl=f.latency("itl"),
        e2el=f.latency("e2el", "e2e_latency"), request_throughput=f.number("request_throughput"),
        output_throughput=f.number("output_throughput"))


def _guidellm(report: dict[str, Any], where: str, file: str, digest: str, first: int) -> list[MeasuredRun]:
    benchmarks = report["benchmarks"]
    if not isinstance(benchmarks, list) or not benchmarks:
        raise PlannerInputError(f"result: {where}: benchmarks is not a list of benchmarks; {RESULT.fix}")
    runs = []
    for i, benchmark in enumerate(benchmarks):
        at = f"{where} benchmarks[{i}]"
        f = _Fields(benchmark if isinstance(benchmark, dict) else {}, at)
        metrics = _mapping(f, benchmark, "metrics")
        strategy = _mapping(f, _mapping(f, benchmark, "config"), "strategy")
        kind = strategy.get("type_")
        rate, concurrency = inf, f.concurrency("max_concurrency", strategy)
        if kind == "synchronous":
            concurrency = 1
        elif kind == "concurrent":
            concurrency = f.count("streams", strategy)
        elif kind in ("constant", "poisson"):
            rate = f.number("rate", True, strategy) or inf
        elif kind != "throughput":
            raise f.fail("config.strategy.type_", f"is {_shown(kind)}: planner replays synchronous, concurrent, "
                         "throughput, constant and poisson runs")

        def successful(name: str) -> dict[str, Any]:
            return _mapping(f, _mapping(f, metrics, name), "successful")

        def latency(name: str, scale: float = 1.0) -> Latency:
            stats = successful(name)
            percentiles = stats.get("percentiles") if isinstance(stats.get("percentiles"), dict) else {}
            values = (f.number("mean", True, stats), f.number("median", False, stats), f.number("p99", False, percentiles))
            return Latency(*(None if v is None else v * scale for v in values))

        totals = _mapping(f, metrics, "request_totals")
        completed = f.count("successful", totals)
        mean_in = f.number("mean", True, successful("prompt_token_count"))
        mean_out = f.number("mean", True, successful("output_token_count"))
        if not mean_in or not mean_out:
            raise f.fail("metrics.prompt_token_count", "and output_token_count must average at least one token")
        backend = _mapping(f, benchmark.get("config") or {}, "backend", required=False)
        runs.append(MeasuredRun(
            file=file, sha256=digest, index=first + i, tool="guidellm", model_id=f.text("model", backend),
            date=None, engine_version=None, request_rate=rate, max_concurrency=concurrency, completed=completed,
            mean_input_tokens=mean_in, mean_output_tokens=mean_out, ttft=latency("time_to_first_token_ms"),
            tpot=latency("inter_token_latency_ms"), itl=latency("inter_token_latency_ms"),
            e2el=latency("request_latency", 1000.0),
            request_throughput=f.number("mean", False, successful("requests_per_second")),
            output_throughput=f.number("mean", False, successful("output_tokens_per_second"))))
    return runs


def _mapping(f: _Fields, parent: Any, key: str, required: bool = True) -> dict[str, Any]:
    value = parent.get(key) if isinstance(parent, dict) else None
    if isinstance(value, dict):
        return value
    if value is None and not required:
        return {}
    raise f.fail(key, "is missing" if value is None else f"is {_shown(value)}, not a mapping")


__all__ = ["Latency", "MARK", "MeasuredRun", "RESULT", "read_results"]
