"""A discrete-event simulation of one replica under vLLM V1's scheduler, step by step.

The scheduling rules follow vllm/v1/core/sched/scheduler.py (vllm-project/vllm, Scheduler.schedule, the
V1 engine of v0.19): every step has a token budget of max_num_batched_tokens.
  1. RUNNING requests first, in order: each asks for the tokens it lacks (1 when decoding, the rest of its
     prompt when partly prefilled), cut to the budget left. When the KV pool has too few free blocks for
     them, the last running request is preempted (RECOMPUTE: its blocks are freed, it goes back to the
     head of the waiting queue and later recomputes its prompt and the tokens it had generated).
  2. Then, only if nothing was preempted this step, WAITING requests in arrival order, while the budget
     lasts, fewer than max_num_seqs run and the pool has the blocks for their whole sequence so far
     (scheduler_reserve_full_isl, on by default from v0.19.0: KVCacheManager.can_fit_full_sequence), of which
     the step computes a chunk (chunked prefill: a prompt longer than the budget left is cut).
  3. The step runs; its duration is the performance model's time for that mix (planner.estimator.
     performance.ReplicaTimer.step). Every request whose prompt is complete emits a token; a request
     that has its output tokens finishes and frees its blocks. On an engine that runs prompts as a pass of
     their own before the decode (the timer's mixes_prefill False: SGLang) the prompts take the whole budget
     (performance.prompt_room). Without DP attention (ReplicaTimer.runs_prompts_apart) such an engine runs every
     prompt it can admit before it decodes again (SGLang's get_next_batch_to_run, "Run prefill first if possible";
     bench/SPEED_PROTOCOL.md, the prefill-first amendment): a step that can schedule prompts (a partly prefilled
     request's next chunk, then waiting requests the budget, max_num_seqs and the free blocks admit) runs them
     alone, the decoding requests gaining no token in it; a step that can schedule none decodes as above.
A request holds ceil(tokens computed / block_size) blocks of the pool (KVCacheManager.allocate_slots:
it fails when the new blocks exceed the free ones). An engine that admits by reserved output (the scheduler's
engines.base.OutputReservation: SGLang's PrefillAdder and retract_decode) admits a waiting request in step 2 only
while the free tokens, less what the decoding requests may still write (their remaining outputs, whole or at the
new-token ratio) and the whole outputs of the prompts completed in the step, hold its prompt, its remaining output and
a page; and in step 1 retracts instead of preempting: the decoding request with the fewest outputs goes to the back of
the queue (to recompute its prompt and outputs), and the ratio is reset from the kept requests' progress, or else
decays a step. An engine that reserves blocks to completion (engines.base.BlocksToCompletion: TensorRT-LLM's
GUARANTEED_NO_EVICT) admits a waiting request only while the free blocks, less every running request's blocks to
completion, hold its own; it never needs to preempt.
The simulated requests are fixed-length, as a benchmark's with ignore_eos: each asks for the output it gets.
Prefix caching: a request whose prompt starts with its workload's shared prefix (Arrival.shared_prefix_tokens) finds
the prefix's whole blocks cached (Scheduler.cached_tokens, the capacity model's rule) and computes and holds only the
rest; the cache is warm (the prefix computed before the run) and its blocks are held once for the whole run. Distinct
prompts share nothing, but a request vLLM preempted finds its own blocks while they are still free (_FreeQueue): with
the prefix cache on, a freed full block keeps its hash until an allocation takes it, so the request recomputes only
the tail of its prompt and outputs that later allocations took (bench/SPEED_PROTOCOL.md, the amendment on resumed
requests).
A client may cap the requests it has in flight (`max_concurrency`, as `vllm bench serve --max-concurrency`:
an asyncio.Semaphore around each request): a request is then sent when it has arrived and a slot is free,
in arrival order, and its latencies count from when it was sent, as the benchmark's do.
A replica running MTP speculative decoding (a SpeculativeTimer) runs in token steps (speculative.TokenSteps): each
decoding request gains one token a step of cycle / L seconds and takes s + 1 tokens of its budget.
Step times are memoised on (decode sequences, prompt tokens rounded to 64, mean context rounded to a block):
what changes a step's time by well under 1%.
"""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import dataclass, field
from math import ceil, isfinite
from pathlib import Path

from planner.errors import PlannerInputError
from planner.files import TRACE, read_text
from planner.estimator.capacity import Scheduler
from planner.estimator.engines.base import OutputReservation
from planner.estimator.performance import ReplicaTimer, Step, Workload, prompt_room
from planner.estimator.speculative import SpeculativeTimer, TokenSteps, token_steps

# Memoisation grain of the step-time cache (see the module docstring).
PREFILL_GRAIN_TOKENS = 64
# The work one run may ask for, whoever asks (planner simulate, planner bench, perf past capacity): requests (20 x
# vLLM bench serve's default run), and output tokens over all of them: a step emits at least one token, so they bound
# the simulated steps. Measured on this project's 2-core machine (Llama 3.1 8B on an H100): 20,000 requests of
# 1,024 + 128 tokens sent at once simulate in 0.65 s (2.4 s on an engine that runs prompts first: each step of prompts
# alone visits the decoding requests it holds up); one request at a time, the slowest case, costs 6.4 us a step, so
# 2,000,000 output tokens take about 13 s.
MAX_REQUESTS = 20_000
MAX_OUTPUT_TOKENS = 2_000_000
# Samples of the KV pool's use over the run reported in the timeline.
KV_TIMELINE_POINTS = 60
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Arrival:
    time_s: float
    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int = 0  # of prompt_tokens: the workload's shared prefix, found in the prefix cache
    # the prompt's KV computed elsewhere and transferred (a disaggregated decode replica): the request holds it whole
    # and computes its last token only, as Scheduler.own_prompt runs it
    prefilled: bool = False


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
class ServedRequest:
    """One request as the client saw it: when it went out, its first and last token, and the steps that emitted
    its tokens as runs of consecutive steps (first, last): one run unless it was preempted."""

    arrival: Arrival
    sent_s: float  # the later of its arrival and a free slot of the client's max_concurrency
    first_token_s: float
    finished_s: float
    token_steps: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class EngineRun:
    """Everything a run produced, for the summaries (SimulationResult, planner.estimator.benchmark)."""

    served: tuple[ServedRequest, ...]  # in the order they finished
    step_ends_s: tuple[float, ...]  # when each step ended, by step number
    end_s: float  # when the last request finished
    preemptions: int
    scheduled: int  # requests scheduled, summed over the steps
    peak_blocks: int  # of the pool, at the fullest step
    total_blocks: int
    peak_in_flight: int  # requests sent and not finished (waiting or running), at the most
    timeline: tuple[tuple[float, float], ...]  # (time s, fraction of the pool's blocks held)


@dataclass(frozen=True)
class SimulationResult:
    duration_s: float  # simulated time until the last request finished
    arrivals: int
    completed: int  # requests measured (arrived after the warm-up)
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    requests_per_s: float  # completed requests / the run's time after warm-up, the drain included
    output_tokens_per_s: float
    preemptions: int
    steps: int
    kv_peak_fraction: float  # of the pool's blocks, at the fullest step
    kv_timeline: tuple[tuple[float, float], ...]  # (time s, fraction of the pool's blocks held)
    mean_batch: float  # requests scheduled per step


@dataclass(eq=False)
class _Request:
    arrival: Arrival
    computed: int = 0  # tokens whose KV is in the pool (while decoding: as of step `since`)
    cached: int = 0  # of computed: the shared prefix's tokens found in the prefix cache, held once by the engine
    generated: int = 0  # (while decoding: as of step `since`)
    blocks: int = 0
    sent_s: float = 0.0
    first_token_s: float | None = None
    finished_s: float | None = None
    token_steps: list[list[int]] = field(default_factory=list)  # runs [first, last] of the steps that emitted tokens
    decoding: bool = False
    since: int = 0  # the step from which a decoding request advances one token a step
    epoch: int = 0  # bumped when preempted: its scheduled events are stale

    @property
    def tokens(self) -> int:  # prompt + generated: what must be computed before the next token
        return self.arrival.prompt_tokens + self.generated

    def emitted(self, first: int, last: int) -> None:
        """Steps first..last each emitted one of its tokens."""
        if self.token_steps and self.token_steps[-1][1] == first - 1:
            self.token_steps[-1][1] = last
        else:
            self.token_steps.append([first, last])

    def settle(self, step: int) -> None:
        """Bring a decoding request's counters to the start of `step`."""
        if self.decoding:
            self.computed += step - self.since
            self.generated += step - self.since
            self.since = step


def run_too_large(rate: float, duration_s: float, shape: Workload) -> str | None:
    """Why `rate` requests/s of `shape` for `duration_s` is more than one run may ask for (MAX_REQUESTS,
    MAX_OUTPUT_TOKENS), from the run's mean count before drawing it; None when it is not."""
    expected = rate * duration_s
    if expected > MAX_REQUESTS or expected * shape.output_tokens > MAX_OUTPUT_TOKENS:
        return (f"{rate:g} requests/s for {duration_s:g} s of {shape.output_tokens:,}-token replies is more than a "
                f"simulated run holds ({MAX_REQUESTS:,} requests, {MAX_OUTPUT_TOKENS:,} output tokens)")
    return None


def poisson_arrivals(rate: float, duration_s: float, shape: Workload, seed: int = 0) -> list[Arrival]:
    """Arrivals at `rate` requests/s for `duration_s`: exponential gaps, every request of `shape`."""
    if not (isfinite(rate) and rate > 0):
        raise PlannerInputError(f"--rate: {rate} must be a number of requests/s above 0")
    if not (isfinite(duration_s) and duration_s > 0):
        raise PlannerInputError(f"--duration: {duration_s} must be a number of seconds above 0")
    too_large = run_too_large(rate, duration_s, shape)
    if too_large:
        raise PlannerInputError(f"--duration / --rate: {too_large}; shorten --duration or lower --rate")
    rng = random.Random(seed)
    out, t = [], rng.expovariate(rate)
    while t < duration_s:
        out.append(Arrival(t, shape.prompt_tokens, shape.output_tokens, shape.shared_prefix_tokens, shape.prefilled))
        t += rng.expovariate(rate)
    return out


def read_trace(path: str | Path) -> list[Arrival]:
    """A JSONL trace: one request a line, {"arrival_s": t, "prompt_tokens": P, "output_tokens": N}."""
    text = read_text(path, TRACE)
    out: list[Arrival] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"--arrivals: {path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PlannerInputError(f"{where}: not JSON ({exc.msg}); write one object a line") from None
        except RecursionError:
            raise PlannerInputError(f"{where}: nested too deep to be a request; write one flat object a line") from None
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
    if len(out) > MAX_REQUESTS or sum(a.output_tokens for a in out) > MAX_OUTPUT_TOKENS:
        raise PlannerInputError(f"--arrivals: {path}'s {len(out):,} requests of {sum(a.output_tokens for a in out):,} "
                                f"output tokens are more than a simulated run holds ({MAX_REQUESTS:,} requests, "
                                f"{MAX_OUTPUT_TOKENS:,} output tokens); trim the trace")
    return sorted(out, key=lambda a: a.time_s)


class _StepClock:
    """Step times from the performance model, memoised (see the module docstring)."""

    def __init__(self, timer: ReplicaTimer | TokenSteps, block_tokens: int):
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


def simulate(timer: ReplicaTimer | SpeculativeTimer, scheduler: Scheduler, arrivals: list[Arrival],
             warmup_s: float = 0.0) -> SimulationResult:
    """Run `arrivals` through one replica until every request finished; latencies of requests arriving
    after `warmup_s` (the engine starts empty) are reported."""
    if not arrivals:
        raise PlannerInputError("--duration / --rate: no request arrives in the simulated time; lengthen --duration or "
                                "raise --rate")
    return _summary(run_engine(timer, scheduler, arrivals), len(arrivals), warmup_s)


class _FreeQueue:
    """vLLM's free blocks in the order it hands them out (vllm/v1/core/block_pool.py @ v0.34.0: get_new_blocks pops the
    front, free_blocks puts the blocks without a hash at the front and appends the cached ones; a request's blocks are
    freed tail first, core/single_type_kv_cache_manager.py free), as runs of blocks by who freed them: enough to tell
    how many of a preempted request's leading blocks no allocation has taken since (the others' contents are no one's
    prefix). Counts only; the engine's `free` stays the number of free blocks."""

    def __init__(self, blocks: int) -> None:
        self.runs: deque[list] = deque([[None, blocks]])  # [the preempted request whose chain it is, or None, blocks]
        self.chains: dict[_Request, list] = {}  # a preempted request's run, while any of it is free

    def take(self, blocks: int) -> None:
        while blocks:
            run = self.runs[0]
            taken = min(blocks, run[1])
            run[1] -= taken
            blocks -= taken
            if not run[1]:
                self.runs.popleft()
                if run[0] is not None:
                    del self.chains[run[0]]

    def give(self, full: int, partial: int, preempted: _Request | None = None) -> None:
        """`full` blocks that carry a hash to the end (a preempted request's own chain, tail first), `partial` ones
        to the front."""
        if partial:
            self.runs.appendleft([None, partial])
        if full:
            run = [preempted, full]
            self.runs.append(run)
            if preempted is not None:
                self.chains[preempted] = run

    def cached(self, request: _Request) -> int:
        """The leading blocks of `request`'s chain still free (its tail went first)."""
        run = self.chains.get(request)
        return run[1] if run else 0

    def reclaim(self, request: _Request, blocks: int) -> None:
        """`request` takes back the first `blocks` of its chain; the rest stay free, no one's prefix any more."""
        run = self.chains.pop(request)
        run[0] = None
        run[1] -= blocks  # an emptied run stays in place until `take` reaches it


def run_engine(timer: ReplicaTimer | SpeculativeTimer, scheduler: Scheduler, arrivals: list[Arrival],
               max_concurrency: int | None = None) -> EngineRun:
    """Run `arrivals` (in time order) through one replica until every request finished, at most
    `max_concurrency` of them in flight at once (None: no limit)."""
    if max_concurrency is not None and max_concurrency < 1:
        raise PlannerInputError(f"--max-concurrency: {max_concurrency} must be at least 1")
    for a in arrivals:
        if a.prompt_tokens + a.output_tokens > scheduler.max_model_len:
            raise PlannerInputError(f"--arrivals: a request of {a.prompt_tokens} + {a.output_tokens} tokens is longer "
                                    f"than max-model-len {scheduler.max_model_len}")
    block = scheduler.block_tokens
    total_blocks = scheduler.pool_tokens // block
    if total_blocks < ceil(scheduler.max_model_len / block):
        raise PlannerInputError("engine: the KV pool cannot hold one request of max-model-len")
    # an MTP replica runs in token steps (planner.estimator.speculative.TokenSteps): one token a request a step
    return _Engine(token_steps(timer), scheduler, total_blocks).run(arrivals, max_concurrency)


class _Engine:
    """The scheduler's state. Decoding requests advance in lockstep, one token a step, so they are not visited
    every step: each has its next block allocation and its last step scheduled as events (what
    allocate_slots and the stop check would find visiting them), which keeps a step's cost to the requests
    that change. A step of prompts alone (an engine that runs prompts first) visits them all: each stops and starts
    again a step later."""

    def __init__(self, timer: ReplicaTimer | TokenSteps, scheduler: Scheduler, total_blocks: int):
        self.scheduler, self.block, self.total_blocks = scheduler, scheduler.block_tokens, total_blocks
        self.budget = scheduler.max_num_batched_tokens
        # vLLM requires max_num_batched_tokens >= max_num_seqs, so every running request decodes each step
        self.max_seqs = min(scheduler.max_num_seqs or self.budget, self.budget)
        self.clock = _StepClock(timer, scheduler.block_tokens)
        self.per_decode = timer.budget_per_decode  # tokens of a step's budget a decoding request takes
        self.prompts_first = timer.runs_prompts_apart  # a step that can schedule prompts runs them alone
        self.running: dict[_Request, None] = {}  # admission order: decoding requests, then prefilling ones
        self.waiting: deque[_Request] = deque()
        self.free = total_blocks
        # vLLM's free queue, where a preempted request can find its own blocks cached when it resumes (its prefix cache
        # on; SGLang retracts, TensorRT-LLM never preempts)
        self.queue = _FreeQueue(total_blocks) if scheduler.reservation is None and scheduler.prefix_cache else None
        self.decoders = 0
        self.decode_tokens = 0  # sum over decoding requests of the tokens they attend to this step
        self.needs: dict[int, list[tuple[_Request, int]]] = {}  # step -> decoders that need a new block then
        self.ends: dict[int, list[tuple[_Request, int]]] = {}  # step -> decoders whose last token it computes
        self.step = 0
        self.preemptions = 0
        # an engine that admits by reserved output: its rule (SGLang's, TensorRT-LLM's), and SGLang's new-token ratio
        self.reservation = scheduler.reservation
        self.sglang = scheduler.reservation if isinstance(scheduler.reservation, OutputReservation) else None
        self.ratio = self.sglang.init_ratio if self.sglang else 0.0

    def _room(self) -> float:
        """What the decoding requests leave of the step's budget for prompt tokens (prompt_room)."""
        return prompt_room(self.budget, self.decoders, self.per_decode, self.clock.timer.mixes_prefill)

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block)

    def _take(self, blocks: int) -> None:
        self.free -= blocks
        if self.queue:
            self.queue.take(blocks)

    def _give(self, request: _Request, preempted: bool = False) -> None:
        """`request`'s blocks back to the pool: its full ones cached, a preempted request's as its own chain."""
        self.free += request.blocks
        if self.queue:
            full = min(request.blocks, (request.computed - request.cached) // self.block)
            self.queue.give(full, request.blocks - full, request if preempted else None)

    def _cache_hit(self, request: _Request) -> int:
        """The blocks of its own a waiting request finds cached: the leading ones of its chain still free, if vLLM
        preempted it, up to its tokens less one (KVCacheManager.get_computed_blocks: the last is computed again)."""
        if not self.queue:
            return 0
        return min(self.queue.cached(request), (request.tokens - 1 - request.computed) // self.block)

    def _needs(self, request: _Request, new: int) -> int:
        """The blocks `request` lacks to hold `new` more tokens: its own, past the cached prefix held once."""
        return self._blocks(request.computed + new - request.cached) - request.blocks

    def _start_decoding(self, request: _Request) -> None:
        """After its prompt (or recomputation): one token a step from the next step (self.step) on."""
        request.decoding, request.since = True, self.step
        self.decoders += 1
        self.decode_tokens += request.computed + 1
        first_need = request.since + (-request.computed) % self.block
        self.needs.setdefault(first_need, []).append((request, request.epoch))
        last = request.since + request.arrival.output_tokens - request.generated - 1
        self.ends.setdefault(last, []).append((request, request.epoch))

    def _stop_decoding(self, request: _Request, step: int) -> None:
        if step > request.since:
            request.emitted(request.since, step - 1)
        request.settle(step)
        request.decoding = False
        request.epoch += 1
        self.decoders -= 1
        self.decode_tokens -= request.computed + 1

    def _arrived(self, arrival: Arrival) -> _Request:
        if arrival.prefilled:  # its own blocks for the whole prompt; the last token computed here (its first output)
            return _Request(arrival, computed=arrival.prompt_tokens - 1)
        cached = self.scheduler.cached_tokens(arrival.prompt_tokens, arrival.shared_prefix_tokens)
        return _Request(arrival, computed=cached, cached=cached)

    def _preempt_last(self) -> _Request:
        """Room for the step: vLLM's FCFS preemption (the last running request loses its blocks and goes back to the
        head of the queue, to recompute), or on SGLang its retraction (_retract)."""
        if self.sglang:
            return self._retract()
        victim = next(reversed(self.running))
        self._release(victim)
        self.waiting.appendleft(victim)
        return victim

    def _release(self, victim: _Request) -> None:
        """`victim` leaves the running requests and gives back its blocks; it will recompute its tokens."""
        del self.running[victim]
        if victim.decoding:
            self._stop_decoding(victim, self.step)
        self._give(victim, preempted=True)
        victim.blocks, victim.computed = 0, victim.cached
        self.preemptions += 1

    def _retract(self) -> _Request:
        """SGLang's retraction: the decoding request with the fewest outputs (the longest prompt among equals) goes
        back to the end of the queue; the last decoding request is kept (OutputReservation)."""
        decoding = [r for r in self.running if r.decoding]
        if len(decoding) < 2:
            victim = next(reversed(self.running))  # no other request to take room from: as vLLM would
            self._release(victim)
            self.waiting.appendleft(victim)
            return victim
        # among equals the one that joined last (retract_decode pops the end of its stably sorted batch)
        victim = min(reversed(decoding), key=lambda r: (self._generated(r), -r.arrival.prompt_tokens))
        self._release(victim)
        self.waiting.append(victim)
        return victim

    def _generated(self, request: _Request) -> int:
        """Its output tokens so far, as of the start of this step."""
        return request.generated + (self.step - request.since if request.decoding else 0)

    def _retracted(self) -> None:
        """The ratio a retraction leaves, over the decoding requests kept."""
        kept = [r for r in self.running if r.decoding]
        self.ratio = self.sglang.ratio_after_retraction(  # type: ignore[union-attr]
            sum(self._generated(r) for r in kept), sum(r.arrival.output_tokens for r in kept), len(kept))

    def _to_completion(self, request: _Request) -> int:
        """The blocks `request` still lacks to hold its whole prompt and output (TensorRT-LLM's blocks to completion)."""
        return self._blocks(request.arrival.prompt_tokens + request.arrival.output_tokens - request.cached) \
            - request.blocks

    def _held_back(self, scheduled: list[tuple[_Request, int]]) -> float:
        """The tokens of the free blocks an engine that reserves outputs keeps from admissions: SGLang's decoding
        requests' remaining outputs as counted and the whole outputs of the requests whose prompts this step completes;
        TensorRT-LLM's running requests' blocks to completion."""
        rule = self.sglang
        if rule is None:
            return sum(self._to_completion(r) for r in self.running) * self.block
        held = sum(rule.counted(r.arrival.output_tokens - self._generated(r), self.ratio)
                   for r in self.running if r.decoding)
        return held + sum(min(r.arrival.output_tokens, rule.clip_tokens) + rule.page_tokens
                          for r, new in scheduled if r.computed + new == r.tokens)

    def run(self, arrivals: list[Arrival], max_concurrency: int | None) -> EngineRun:
        pending = deque(self._arrived(a) for a in arrivals)
        # a warm prefix cache: the shared prefix's blocks, held once from the start
        self._take(max((r.cached for r in pending), default=0) // self.block)
        finished: list[_Request] = []
        step_ends: list[float] = []
        now, scheduled_total, peak = 0.0, 0, 0
        slots = max_concurrency or len(arrivals) or 1
        in_flight, peak_in_flight, slot_freed_s = 0, 0, 0.0
        window = max((a.time_s for a in arrivals), default=0.0)
        sample_every = max(window, 1e-9) / KV_TIMELINE_POINTS
        next_sample = 0.0
        timeline: list[tuple[float, float]] = []
        while pending or self.waiting or self.running:
            while pending and pending[0].arrival.time_s <= now and in_flight < slots:
                request = pending.popleft()
                # sent when it arrived, or when a slot came free if every slot was taken then
                request.sent_s = max(request.arrival.time_s, slot_freed_s)
                self.waiting.append(request)
                in_flight += 1
            peak_in_flight = max(peak_in_flight, in_flight)
            if not self.waiting and not self.running:
                now = pending[0].arrival.time_s
                if self.sglang:  # the engine idles: its new-token ratio starts again
                    self.ratio = self.sglang.init_ratio
                continue
            scheduled, alone = self._schedule()
            # prompts alone: the decoding requests wait out the step (their next token's gap spans it)
            paused = [r for r in self.running if r.decoding] if alone else []
            for request in paused:
                self._stop_decoding(request, self.step)
            if paused:
                self.needs.pop(self.step, None)
            decode, decode_tokens = self.decoders, self.decode_tokens
            prefill = sum(new for _, new in scheduled)
            positions = sum(new * r.computed + new * (new + 1) / 2 for r, new in scheduled)
            start = now
            now += self.clock(decode, decode_tokens, prefill, positions, len(scheduled))
            # an engine that runs the prompts as a pass of their own, before the decode: their tokens come out of it
            prompted = start + self.clock(0, 0, prefill, positions, len(scheduled)) \
                if prefill and decode and self.clock.timer.runs_prompts_apart else now
            step_ends.append(now)
            scheduled_total += decode + len(scheduled)
            held = self.total_blocks - self.free
            peak = max(peak, held)
            while now >= next_sample and next_sample <= window:
                timeline.append((round(next_sample, 3), held / self.total_blocks))
                next_sample += sample_every
            done = self._advance(scheduled, now, prompted)
            for request in paused:
                self._start_decoding(request)
            if done:
                if in_flight == slots:
                    slot_freed_s = now
                in_flight -= len(done)
                finished.extend(done)
        served = tuple(ServedRequest(r.arrival, r.sent_s, r.first_token_s, r.finished_s,
                                     tuple((first, last) for first, last in r.token_steps)) for r in finished)
        return EngineRun(served, tuple(step_ends), now, self.preemptions, scheduled_total, peak, self.total_blocks,
                         peak_in_flight, tuple(timeline))

    def _schedule(self) -> tuple[list[tuple[_Request, int]], bool]:
        """One step's decisions: (prefill chunks scheduled, whether they run alone, the decoding requests waiting)."""
        if self.prompts_first:
            alone = self._prompts_alone()
            if alone:
                return alone, True
        step, budget = self.step, self._room()
        preempted = False
        # decoding requests: those crossing a block boundary need one block each
        due = [r for r, epoch in self.needs.pop(step, ()) if r.epoch == epoch and r.decoding]
        while len(due) > self.free:
            victim = self._preempt_last()
            preempted = True
            if victim in due:
                due.remove(victim)
            budget = self._room()
        if self.sglang and self.decoders:  # the ratio after this decode step's memory check
            if preempted:
                self._retracted()
            else:
                self.ratio = max(self.ratio - self.sglang.decay, self.sglang.min_ratio)
        for request in due:
            self._take(1)
            request.blocks += 1
            self.needs.setdefault(step + self.block, []).append((request, request.epoch))
        # prefilling requests (partly prefilled; after every decoding one in the running order)
        scheduled: list[tuple[_Request, int]] = []
        for request in [r for r in self.running if not r.decoding]:
            if budget <= 0 or request not in self.running:
                break
            new = min(request.tokens - request.computed, budget)
            need = self._needs(request, new)
            while need > self.free and request in self.running:
                victim = self._preempt_last()
                preempted = True
                budget = self._room() - sum(n for _, n in scheduled)
            if request not in self.running:
                break
            self._take(need)
            request.blocks += need
            scheduled.append((request, new))
            budget -= new
        if not preempted:
            self._admit_waiting(scheduled, budget)
        if not scheduled and not self.decoders:
            raise RuntimeError("internal error: the simulated scheduler is stuck")
        return scheduled, False

    def _prompts_alone(self) -> list[tuple[_Request, int]]:
        """The prompt chunks a step can schedule without preempting: partly prefilled requests' next chunks, then
        waiting requests in order, while the budget lasts, fewer than max_num_seqs run and the free blocks hold
        them (none: the step decodes)."""
        budget = self.budget
        scheduled: list[tuple[_Request, int]] = []
        for request in [r for r in self.running if not r.decoding]:
            new = min(request.tokens - request.computed, budget)
            need = self._needs(request, new)
            if budget <= 0 or need > self.free:
                return scheduled
            self._take(need)
            request.blocks += need
            scheduled.append((request, new))
            budget -= new
        self._admit_waiting(scheduled, budget)
        return scheduled

    def _admit_waiting(self, scheduled: list[tuple[_Request, int]], budget: float) -> None:
        """Waiting requests in arrival order join `scheduled` while `budget` lasts, fewer than max_num_seqs run and the
        pool's free blocks hold their chunk (chunked prefill: a prompt longer than the budget left is cut): on vLLM
        while they hold the whole sequence so far; on an engine that reserves outputs, while the free tokens less what
        is held back hold its prompt and its output."""
        rule = self.sglang
        held = self._held_back(scheduled) if self.reservation and self.waiting else 0.0
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            request = self.waiting[0]
            hit = self._cache_hit(request)  # blocks of its own it finds cached (they count as free until taken back)
            new = min(request.tokens - request.computed - hit * self.block, budget)
            need = self._needs(request, hit * self.block + new)
            if need > self.free:
                break
            if rule:
                prompt = request.tokens - request.computed
                wanted = prompt + min(request.arrival.output_tokens - request.generated, rule.clip_tokens)
                if wanted + rule.page_tokens >= self.free * self.block - held:
                    break
                if new == prompt:  # its chunk leaves the free blocks; a whole prompt's output is held back whole
                    held += min(request.arrival.output_tokens, rule.clip_tokens) + rule.page_tokens
            elif self.reservation:
                completion = self._to_completion(request)
                if completion * self.block > self.free * self.block - held:
                    break
                held += (completion - need) * self.block  # its chunk's blocks leave the free ones now
            elif self._needs(request, request.tokens - request.computed) > self.free:
                break  # vLLM's scheduler_reserve_full_isl: its whole sequence so far must fit, not just the chunk
            self.waiting.popleft()
            if self.queue and self.queue.cached(request):
                self.queue.reclaim(request, hit)
                self.free -= hit
                request.computed += hit * self.block
            self._take(need - hit)
            request.blocks += need
            self.running[request] = None
            scheduled.append((request, new))
            budget -= new

    def _advance(self, scheduled: list[tuple[_Request, int]], now: float, prompted: float) -> list[_Request]:
        """The step ran, ending at `now`: decoding requests gained a token, prompts their chunk (their pass ending at
        `prompted`); who finished."""
        step = self.step
        self.step += 1
        self.decode_tokens += self.decoders
        done = []
        for request, epoch in self.ends.pop(step, ()):
            if request.epoch == epoch and request.decoding:
                self._stop_decoding(request, self.step)
                done.append(request)
        for request, new in scheduled:
            request.computed += new
            if request.computed == request.tokens:
                request.generated += 1
                request.emitted(step, step)
                if request.first_token_s is None:
                    request.first_token_s = prompted
                if request.generated == request.arrival.output_tokens:
                    request.finished_s = prompted
                    done.append(request)
                else:
                    self._start_decoding(request)
        for request in done:
            del self.running[request]
            self._give(request)
            request.blocks = 0
            if request.finished_s is None:
                request.finished_s = now
        return done


def _summary(run: EngineRun, arrivals: int, warmup_s: float) -> SimulationResult:
    measured = [r for r in run.served if r.arrival.time_s >= warmup_s]
    ttft = [r.first_token_s - r.sent_s for r in measured]
    e2e = [r.finished_s - r.sent_s for r in measured]
    tpot = [(e - t) / (r.arrival.output_tokens - 1) for r, t, e in zip(measured, ttft, e2e) if r.arrival.output_tokens > 1]
    # served over the run, its drain included (as vllm bench serve's request_throughput: completed / duration): a
    # burst of requests all sent at t = 0 is served at the rate the engine finishes them, not over a zero window
    span = run.end_s - warmup_s
    steps = len(run.step_ends_s)
    return SimulationResult(
        duration_s=run.end_s, arrivals=arrivals, completed=len(measured), ttft_s=Percentiles.of(ttft),
        # no request generated a second token: TPOT 0, as vllm bench serve reports it (vllm/benchmarks/serve.py
        # @ v0.34.0: np.mean(tpots or 0)), not NaN
        tpot_s=Percentiles.of(tpot) if tpot else Percentiles(0.0, 0.0, 0.0, 0.0), e2e_s=Percentiles.of(e2e),
        requests_per_s=len(measured) / span,
        output_tokens_per_s=sum(r.arrival.output_tokens for r in measured) / span, preemptions=run.preemptions,
        steps=steps, kv_peak_fraction=run.peak_blocks / run.total_blocks, kv_timeline=run.timeline,
        mean_batch=run.scheduled / steps if steps else 0.0)


__all__ = ["Arrival", "EngineRun", "Percentiles", "ServedRequest", "SimulationResult", "poisson_arrivals", "read_trace",
           "run_engine", "simulate"]
