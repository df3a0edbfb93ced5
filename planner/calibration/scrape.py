"""Two Prometheus scrapes of an engine's /metrics, at a window's start and end, read into one MeasuredRun.

The file is the two scrapes concatenated, each after a line `# planner-scrape <unix seconds>` (README: two `curl`
calls); the window is the time between them. The text exposition format's samples (`name{labels} value`) are read;
comments and every other metric are skipped. Histograms read, from vLLM v0.34.0 (vllm/v1/metrics/loggers.py
PrometheusStatLogger) and SGLang 0.5.23 (sglang/srt/observability/metrics_collector.py TokenizerMetricsCollector):

  TTFT        vllm:time_to_first_token_seconds             sglang:time_to_first_token_seconds
  TPOT        vllm:request_time_per_output_token_seconds   sglang:request_time_per_output_token_seconds
  ITL         vllm:inter_token_latency_seconds             sglang:inter_token_latency_seconds
  E2E         vllm:e2e_request_latency_seconds             sglang:e2e_request_latency_seconds
  prompt      vllm:request_prompt_tokens                   sglang:prompt_tokens_histogram
  generation  vllm:request_generation_tokens               sglang:generation_tokens_histogram

Each is the increase of its _count, _sum and _bucket series over the window, summed over the series' labels (engines,
DP ranks, SGLang's is_streaming); a series first exported during the window starts from 0 (prometheus_client
exports a labelled series from its first use). Completed: the requests E2E latency counted; means are _sum / _count;
the median and p99 are interpolated linearly within the bucket the rank falls in (lower edge 0 for the first), as
Prometheus's histogram_quantile does, so they are as coarse as the buckets (vLLM's TPOT buckets: 10, 25, 50 ms ...);
past the last finite bucket there is none. TPOT is the per-request TPOT (decode time / (tokens - 1)) vllm bench serve
reports; vLLM observes 0 for a one-token request where the benchmark leaves it out. TPOT and ITL are None where the
engine does not export them (SGLang before request_time_per_output_token_seconds). The latencies are the server's:
from the request's arrival at the engine, without the client's network and HTTP time.

The request rate is completed / window, and a run replays at it (Poisson arrivals: the scrape says nothing of the
process) without a concurrency cap; the replay's requests in flight follow from rate x mean E2E latency (Little's
law), the window's mean running + waiting, which the num_requests_running / _waiting gauges, two instants, do not
give. The engine's version is not in /metrics; the date is the window's start (UTC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from math import inf, isclose, isfinite
from typing import Callable

from planner.calibration.readers import MARK, Latency, MeasuredRun
from planner.errors import PlannerInputError

FIX = ("write the window's two scrapes into one file, each after a `# planner-scrape $(date +%s)` line (README: "
       "calibration)")
HISTOGRAMS = {  # what a run reads -> the histogram's name after the engine's prefix, per engine
    "vllm": {"ttft": "time_to_first_token_seconds", "tpot": "request_time_per_output_token_seconds",
             "itl": "inter_token_latency_seconds", "e2el": "e2e_request_latency_seconds",
             "prompt": "request_prompt_tokens", "generation": "request_generation_tokens"},
    "sglang": {"ttft": "time_to_first_token_seconds", "tpot": "request_time_per_output_token_seconds",
               "itl": "inter_token_latency_seconds", "e2el": "e2e_request_latency_seconds",
               "prompt": "prompt_tokens_histogram", "generation": "generation_tokens_histogram"},
}
VERSIONS = {"vllm": "vLLM v0.34.0", "sglang": "SGLang 0.5.23 (with --enable-metrics)"}
_SAMPLE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*")
_LABEL = re.compile(r'[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')

Labels = tuple[tuple[str, str], ...]
Scrape = dict[str, dict[Labels, float]]  # a sample's name -> its value per label set
Fail = Callable[[str], PlannerInputError]


@dataclass(frozen=True)
class _Histogram:
    count: float
    sum: float
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), the last +Inf

    def quantile(self, q: float) -> float | None:
        """In seconds, linear within the first bucket whose cumulative count reaches q x count (which is above the
        one before it); None in the +Inf bucket."""
        rank, lower, below = q * self.count, 0.0, 0.0
        for upper, cumulative in self.buckets:
            if cumulative >= rank:
                break
            lower, below = upper, cumulative
        return None if upper == inf else lower + (upper - lower) * (rank - below) / (cumulative - below)


def _latency(histogram: _Histogram | None) -> Latency:
    """Mean, median and p99 in milliseconds (None: no histogram, no observation, or past the last finite bucket)."""
    if histogram is None or not histogram.count:
        return Latency(None, None, None)
    median, p99 = histogram.quantile(0.5), histogram.quantile(0.99)
    return Latency(histogram.sum / histogram.count * 1000, None if median is None else median * 1000,
                   None if p99 is None else p99 * 1000)


def read_scrape(text: str, file: str, digest: str) -> MeasuredRun:
    """The run between the file's two scrapes."""
    def fail(problem: str) -> PlannerInputError:
        return PlannerInputError(f"result: {file}: {problem}")

    (start_s, start), (end_s, end) = _scrapes(text, fail)
    window_s = end_s - start_s
    if window_s <= 0:
        raise fail(f"the second scrape's time ({end_s:g}) is not after the first's ({start_s:g}); {FIX}")
    engines = [e for e in HISTOGRAMS if f"{e}:e2e_request_latency_seconds_count" in end]
    if len(engines) != 1:
        raise fail(("holds both vllm: and sglang: metrics; scrape one engine's /metrics" if engines else
                    "has neither vllm:e2e_request_latency_seconds nor sglang:e2e_request_latency_seconds; scrape a "
                    "vLLM or SGLang server's /metrics (SGLang: --enable-metrics)"))
    engine = engines[0]

    def histogram(role: str, required: bool = True) -> _Histogram | None:
        name = f"{engine}:{HISTOGRAMS[engine][role]}"
        found = _histogram(start, end, name, fail)
        if found is None and required:
            raise fail(f"{name} is missing; scrape {VERSIONS[engine]} or later, which exports it")
        return found

    e2el, prompt, generation = histogram("e2el"), histogram("prompt"), histogram("generation")
    assert e2el is not None and prompt is not None and generation is not None
    if not e2el.count:
        raise fail(f"no request finished between the scrapes ({engine}:e2e_request_latency_seconds_count did not "
                   "grow); scrape a window with traffic")
    if not prompt.count or not generation.count or prompt.sum < prompt.count or generation.sum < generation.count:
        raise fail(f"{engine}:{HISTOGRAMS[engine]['prompt']} and {HISTOGRAMS[engine]['generation']} must hold at least "
                   "a token per request of the window; scrape the engine's /metrics as it serves it")
    names = {value for labels in end[f"{engine}:e2e_request_latency_seconds_count"] for key, value in labels
             if key == "model_name"}
    return MeasuredRun(
        file=file, sha256=digest, index=0, tool=f"{engine}-metrics", model_id=names.pop() if len(names) == 1 else None,
        date=datetime.fromtimestamp(start_s, timezone.utc).strftime("%Y%m%d-%H%M%S"), engine_version=None,
        request_rate=e2el.count / window_s, max_concurrency=None, completed=int(e2el.count),
        mean_input_tokens=prompt.sum / prompt.count, mean_output_tokens=generation.sum / generation.count,
        ttft=_latency(histogram("ttft")), tpot=_latency(histogram("tpot", False)),
        itl=_latency(histogram("itl", False)), e2el=_latency(e2el),
        request_throughput=e2el.count / window_s, output_throughput=generation.sum / window_s)


def _scrapes(text: str, fail: Fail) -> list[tuple[float, Scrape]]:
    """Each `# planner-scrape` line's time and the samples after it: two of them."""
    scrapes: list[tuple[float, Scrape]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(MARK):
            try:
                at = float(line[len(MARK):])
                datetime.fromtimestamp(at, timezone.utc)
            except (ValueError, OverflowError, OSError):
                raise fail(f"line {number}: {line[len(MARK):].strip()[:40]!r} is not a time in unix seconds; "
                           f"{FIX}") from None
            scrapes.append((at, {}))
        elif line.strip() and not line.lstrip().startswith("#"):
            if not scrapes:
                raise fail(f"line {number} comes before the first `{MARK}` line; {FIX}")
            name, labels, value = _sample(line, number, fail)
            series = scrapes[-1][1].setdefault(name, {})
            if labels in series:
                raise fail(f"line {number}: {name} repeats a series of the same scrape (a scrape without its "
                           f"`{MARK}` line?); {FIX}")
            series[labels] = value
    if len(scrapes) != 2:
        raise fail(f"holds {len(scrapes)} `{MARK}` lines, not 2; {FIX}")
    return scrapes


def _sample(line: str, number: int, fail: Fail) -> tuple[str, Labels, float]:
    match = _SAMPLE.fullmatch(line)
    labels = _labels(match.group(2) or "") if match else None
    try:
        value = float(match.group(3)) if match else None
    except ValueError:
        value = None
    if match is None or labels is None or value is None:
        raise fail(f"line {number} is not a Prometheus sample (name{{labels}} value): {line.strip()[:40]!r}; {FIX}")
    return match.group(1), labels, value


def _labels(text: str) -> Labels | None:
    """`a="x",b="y"` sorted by name (None: not a label set)."""
    labels, at, end = [], 0, len(text.rstrip())
    while at < end:
        label = _LABEL.match(text, at)
        if label is None:
            return None
        labels.append((label.group(1), label.group(2)))
        at = label.end()
    return tuple(sorted(labels))


def _delta(start: Scrape, end: Scrape, name: str, fail: Fail) -> dict[Labels, float]:
    """Each series of `name`: its increase over the window."""
    before, after = start.get(name, {}), end.get(name, {})
    gone = next((labels for labels in before if labels not in after), None)
    if gone is not None:
        raise fail(f"{name}{_shown(gone)} is in the first scrape and not the second: the engine restarted in the "
                   "window; scrape a window without a restart")
    out = {}
    for labels, value in after.items():
        first = before.get(labels, 0.0)
        if not isfinite(first) or not isfinite(value):
            raise fail(f"{name}{_shown(labels)} is {first if not isfinite(first) else value}, not a count; {FIX}")
        if value < first:
            raise fail(f"{name}{_shown(labels)} fell from {first:g} to {value:g} between the scrapes: the engine "
                       "restarted in the window; scrape a window without a restart")
        out[labels] = value - first
    return out


def _histogram(start: Scrape, end: Scrape, name: str, fail: Fail) -> _Histogram | None:
    """The histogram's increase over the window, its series summed; None where the second scrape lacks it."""
    if f"{name}_count" not in end:
        return None
    layouts: dict[Labels, dict[float, float]] = {}
    for labels, increase in _delta(start, end, f"{name}_bucket", fail).items():
        le = dict(labels).get("le", "")
        try:
            upper = float(le)
        except ValueError:
            raise fail(f"{name}_bucket{_shown(labels)} has no number for le; {FIX}") from None
        layouts.setdefault(tuple(kv for kv in labels if kv[0] != "le"), {})[upper] = increase
    if len({tuple(sorted(b)) for b in layouts.values()}) > 1:
        raise fail(f"{name}'s series have different buckets; scrape one engine configuration's /metrics")
    bounds = sorted(next(iter(layouts.values()), {}))
    buckets = tuple((upper, sum(b[upper] for b in layouts.values())) for upper in bounds)
    count = sum(_delta(start, end, f"{name}_count", fail).values())
    if (not buckets or buckets[-1][0] != inf or not isclose(buckets[-1][1], count, abs_tol=1e-9)
            or any(a[1] > b[1] for a, b in zip(buckets, buckets[1:])) or count != int(count)):
        raise fail(f"{name}'s buckets do not add up to its _count (cumulative, ending at le=\"+Inf\"); {FIX}")
    total = sum(_delta(start, end, f"{name}_sum", fail).values())
    if count and not isfinite(total / count * 1000):  # the mean in milliseconds must be a number
        raise fail(f"{name}_sum grew by {total:g} over {count:g} observations, past any measurement; {FIX}")
    return _Histogram(count, total, buckets)


def _shown(labels: Labels) -> str:
    text = "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""
    return text if len(text) <= 100 else text[:97] + "...}"


__all__ = ["FIX", "read_scrape"]
