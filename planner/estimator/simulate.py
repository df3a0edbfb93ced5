"""A discrete-event simulation of one replica under vLLM V1's scheduler, step by step.

The scheduling rules follow vllm/v1/core/sched/scheduler.py (vllm-project/vllm, Scheduler.schedule, the
V1 engine of v0.19): every step has a token budget of max_num_batched_tokens.
  1. RUNNING requests first, in order: each asks for the tokens it lacks (1 when decoding, the rest of its
     prompt when partly prefilled), cut to the budget left. When the KV pool has too few free blocks for
     them, the last running request is preempted (RECOMPUTE: its blocks are freed, it goes back to the
     head of the waiting queue and later recomputes its prompt and the tokens it had generated).
  2. Then, only if nothing was preempted this step, WAITING requests in arrival order, while the budget
     lasts, fewer than max_num_seqs run and the pool has the blocks for their chunk (chunked prefill: a
     prompt longer than the budget left is cut).
  3. The step runs; its duration is the performance model's time for that mix (planner.estimator.
     performance.ReplicaTimer.step). Every request whose prompt is complete emits a token; a request
     that has its output tokens finishes and frees its blocks.
A request holds ceil(tokens computed / block_size) blocks of the pool (KVCacheManager.allocate_slots:
it fails when the new blocks exceed the free ones). Prefix caching is off (distinct prompts).
Step times are memoised on (decode sequences, prompt tokens rounded to 64, mean context rounded to a block):
what changes a step's time by well under 1%.
"""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import dataclass
from math import ceil
from pathlib import Path

from planner.errors import PlannerInputError
from planner.estimator.capacity import Scheduler
from planner.estimator.performance import ReplicaTimer, Step, Workload

# Memoisation grain of the step-time cache (see the module docstring).
PREFILL_GRAIN_TOKENS = 64
# Samples of the KV pool's use over the run reported in the timeline.
KV_TIMELINE_POINTS = 60
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Arrival:
    time_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Percentiles:
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: list[float]) -> Percentiles:
        if not values:
            nan = float("nan")
            return cls(nan, nan, nan, nan)
        ordered = sorted(values)

        def at(p: int) -> float:  # nearest rank
            return ordered[min(len(ordered) - 1, max(0, ceil(p / 100 * len(ordered)) - 1))]

        return cls(sum(ordered) / len(ordered), at(50), at(90), at(99))

    def at(self, percentile: float | None) -> float:
        """The mean for None; otherwise the nearest reported percentile at or above the one asked."""
        if percentile is None:
            return self.mean
        for p in PERCENTILES:
            if percentile <= p:
                return getattr(self, f"p{p}")
        return self.p99


@dataclass(frozen=True)
class SimulationResult:
    duration_s: float  # simulated time until the last request finished
    arrivals: int
    completed: int  # requests measured (arrived after the warm-up)
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    requests_per_s: float  # completed requests / the arrival window
    output_tokens_per_s: float
    preemptions: int
    steps: int
    kv_peak_fraction: float  # of the pool's blocks, at the fullest step
    kv_timeline: tuple[tuple[float, float], ...]  # (time s, fraction of the pool's blocks held)
    mean_batch: float  # requests scheduled per step


@dataclass
class _Request:
    arrival: Arrival
    computed: int = 0  # tokens whose KV is in the pool
    generated: int = 0
    blocks: int = 0
    first_token_s: float | None = None
    finished_s: float | None = None

    @property
    def tokens(self) -> int:  # prompt + generated: what must be computed before the next token
        return self.arrival.prompt_tokens + self.generated


def poisson_arrivals(rate: float, duration_s: float, shape: Workload, seed: int = 0) -> list[Arrival]:
    """Arrivals at `rate` requests/s for `duration_s`: exponential gaps, every request of `shape`."""
    if rate <= 0:
        raise PlannerInputError(f"--rate: {rate} must be above 0 requests/s")
    if duration_s <= 0:
        raise PlannerInputError(f"--duration: {duration_s} must be above 0 seconds")
    rng = random.Random(seed)
    out, t = [], rng.expovariate(rate)
    while t < duration_s:
        out.append(Arrival(t, shape.prompt_tokens, shape.output_tokens))
        t += rng.expovariate(rate)
    return out


def read_trace(path: str | Path) -> list[Arrival]:
    """A JSONL trace: one request a line, {"arrival_s": t, "prompt_tokens": P, "output_tokens": N}."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlannerInputError(f"--arrivals: cannot read {path} ({exc})") from None
    out: list[Arrival] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"--arrivals: {path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PlannerInputError(f"{where}: not JSON ({exc.msg}); write one object a line") from None
        if not isinstance(row, dict) or set(row) != {"arrival_s", "prompt_tokens", "output_tokens"}:
            raise PlannerInputError(f'{where}: needs exactly {{"arrival_s", "prompt_tokens", "output_tokens"}}')
        t, prompt, output = row["arrival_s"], row["prompt_tokens"], row["output_tokens"]
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= t < 1e9:
            raise PlannerInputError(f"{where}: arrival_s must be seconds from 0, got {t!r}")
        for key, value in (("prompt_tokens", prompt), ("output_tokens", output)):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 100_000_000:
                raise PlannerInputError(f"{where}: {key} must be a whole number of tokens from 1, got {value!r}")
        out.append(Arrival(float(t), prompt, output))
    if not out:
        raise PlannerInputError(f"--arrivals: {path} holds no requests")
    return sorted(out, key=lambda a: a.time_s)


class _StepClock:
    """Step times from the performance model, memoised (see the module docstring)."""

    def __init__(self, timer: ReplicaTimer, block_tokens: int):
        self.timer, self.grain = timer, max(block_tokens, 16)
        self.cache: dict[tuple, float] = {}

    def __call__(self, decode: int, decode_tokens: int, prefill: int, positions: float, chunks: int) -> float:
        context = decode_tokens / decode if decode else 0.0
        key = (decode, round(prefill / PREFILL_GRAIN_TOKENS), round(context / self.grain),
               round(positions / max(prefill, 1) / self.grain) if prefill else 0, chunks)
        value = self.cache.get(key)
        if value is None:
            value = self.cache[key] = self.timer.step_s(Step(decode, context, prefill, positions, chunks))
        return value


def simulate(timer: ReplicaTimer, scheduler: Scheduler, arrivals: list[Arrival],
             warmup_s: float = 0.0) -> SimulationResult:
    """Run `arrivals` through one replica until every request finished; latencies of requests arriving
    after `warmup_s` (the engine starts empty) are reported."""
    for a in arrivals:
        if a.prompt_tokens + a.output_tokens > scheduler.max_model_len:
            raise PlannerInputError(f"--arrivals: a request of {a.prompt_tokens} + {a.output_tokens} tokens is longer "
                                    f"than max-model-len {scheduler.max_model_len}")
    block = scheduler.block_tokens
    total_blocks = scheduler.pool_tokens // block
    if total_blocks < ceil(scheduler.max_model_len / block):
        raise PlannerInputError("engine: the KV pool cannot hold one request of max-model-len")
    max_seqs = scheduler.max_num_seqs or len(arrivals) + 1
    clock = _StepClock(timer, block)
    pending = deque(_Request(a) for a in arrivals)
    waiting: deque[_Request] = deque()
    running: list[_Request] = []
    finished: list[_Request] = []
    free = total_blocks
    now = 0.0
    preemptions = steps = scheduled_total = 0
    peak = 0
    window = max((a.time_s for a in arrivals), default=0.0)
    sample_every = max(window, 1e-9) / KV_TIMELINE_POINTS
    next_sample = 0.0
    timeline: list[tuple[float, float]] = []

    def blocks_for(tokens: int) -> int:
        return ceil(tokens / block)

    while pending or waiting or running:
        while pending and pending[0].arrival.time_s <= now:
            waiting.append(pending.popleft())
        if not waiting and not running:
            now = pending[0].arrival.time_s
            continue
        budget = scheduler.max_num_batched_tokens
        scheduled: list[tuple[_Request, int]] = []
        preempted = False
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            new = min(request.tokens - request.computed, budget)
            need = blocks_for(request.computed + new) - request.blocks
            # FCFS preemption pops the last running request: never one already scheduled this step, except
            # the request itself when it is the last
            while need > free:
                victim = running.pop()
                free += victim.blocks
                victim.blocks = victim.computed = 0
                waiting.appendleft(victim)
                preemptions += 1
                preempted = True
                if victim is request:
                    break
            if index >= len(running):  # the request itself was the last one left to preempt
                break
            free -= need
            request.blocks += need
            scheduled.append((request, new))
            budget -= new
            index += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < max_seqs:
                request = waiting[0]
                new = min(request.tokens - request.computed, budget)
                need = blocks_for(request.computed + new) - request.blocks
                if need > free:
                    break
                waiting.popleft()
                free -= need
                request.blocks += need
                running.append(request)
                scheduled.append((request, new))
                budget -= new
        if not scheduled:  # nothing fits until a running request frees blocks: cannot happen with one request's room
            raise RuntimeError("internal error: the simulated scheduler is stuck")
        decode = decode_tokens = prefill = chunks = 0
        positions = 0.0
        for request, new in scheduled:
            if new == 1 and request.computed == request.tokens - 1 and request.generated:
                decode += 1
                decode_tokens += request.computed + 1
            else:
                prefill += new
                chunks += 1
                positions += new * request.computed + new * (new + 1) / 2
        now += clock(decode, decode_tokens, prefill, positions, chunks)
        steps += 1
        scheduled_total += len(scheduled)
        held = total_blocks - free
        peak = max(peak, held)
        while now >= next_sample and next_sample <= window:
            timeline.append((round(next_sample, 3), held / total_blocks))
            next_sample += sample_every
        for request, new in scheduled:
            request.computed += new
            if request.computed == request.tokens:
                request.generated += 1
                if request.first_token_s is None:
                    request.first_token_s = now
                if request.generated == request.arrival.output_tokens:
                    running.remove(request)
                    free += request.blocks
                    request.blocks = 0
                    request.finished_s = now
                    finished.append(request)
    return _summary(finished, arrivals, warmup_s, now, window, preemptions, steps, scheduled_total, peak,
                    total_blocks, timeline)


def _summary(finished: list[_Request], arrivals: list[Arrival], warmup_s: float, end: float, window: float,
             preemptions: int, steps: int, scheduled: int, peak: int, total_blocks: int,
             timeline: list[tuple[float, float]]) -> SimulationResult:
    measured = [r for r in finished if r.arrival.time_s >= warmup_s]
    ttft = [r.first_token_s - r.arrival.time_s for r in measured]
    e2e = [r.finished_s - r.arrival.time_s for r in measured]
    tpot = [(e - t) / (r.arrival.output_tokens - 1) for r, t, e in zip(measured, ttft, e2e) if r.arrival.output_tokens > 1]
    span = max(window - warmup_s, 1e-9)
    return SimulationResult(
        duration_s=end, arrivals=len(arrivals), completed=len(measured), ttft_s=Percentiles.of(ttft),
        tpot_s=Percentiles.of(tpot), e2e_s=Percentiles.of(e2e), requests_per_s=len(measured) / span,
        output_tokens_per_s=sum(r.arrival.output_tokens for r in measured) / span, preemptions=preemptions,
        steps=steps, kv_peak_fraction=peak / total_blocks, kv_timeline=tuple(timeline),
        mean_batch=scheduled / steps if steps else 0.0)


__all__ = ["Arrival", "Percentiles", "SimulationResult", "poisson_arrivals", "read_trace", "simulate"]
