"""Continuous batching in steady state: what one replica serves of one request shape, and how fast.

The scheduler (vLLM V1, vllm/v1/core/sched/scheduler.py; SGLang's chunked prefill works alike) builds
every step from the requests it holds: each running request decodes one token, and prompt tokens of
new or partly prefilled requests fill what is left of the step's token budget
(max_num_batched_tokens), up to max_num_seqs requests, as long as the KV pool has blocks for them.

At an arrival rate lambda of requests with P prompt and N output tokens, with s the mean step time:
  decoding requests     B_d = lambda (N - 1) s          (Little's law: each decodes for N - 1 steps; the
                                                          first token comes out of the prefill step)
  steps                 decode-only ones (B_d sequences at the mean context P + N/2) and ones that also
                        carry the prompts that arrived during the step before: after a step of t seconds
                        the next carries prompts with probability 1 - e^(-lambda t), so prompt steps
                        follow each other more often (a two-state Markov chain), and together they must
                        take lambda P prompt tokens/s; s is their mean
solved as a fixed point (s grows with lambda; the iteration from s(0) rises to it). A request sees the
others running beside it as Poisson with mean B_d (M/G/infinity): 1 + B_d sequences in its steps. The
prompt tokens are a server of rate (budget - B_d) / s_full tokens/s, s_full a step whose budget is full
(utilisation rho = lambda P s_full / (budget - B_d)); a request's time to first token is
  TTFT = the rest of the step under way (length-biased, E[s^2] / 2E[s], unless the engine is idle)
         + queueing for the prefill budget (M/D/1: rho S / (2 (1 - rho)), S = P s_full / (budget - B_d))
         + its own prefill steps
and its time per output token the mean step of its own window of N - 1 steps, averaged over how busy
such windows are (Poisson arrivals: one deviation either side of the mean rate; TPOT grows convexly with
the rate, so requests see more than the mean step). A percentile SLO takes the p-th percentile of the
wait (M/G/1 waits, exponential beyond the probability rho of waiting at all: Kingman's heavy-traffic
approximation) and of a request's mean step over its N - 1 steps (normal, as a mean of many steps).
The KV a replica holds is what its requests hold: decoding ones P + t tokens (t = 1..N-1, in whole
blocks), prefilling ones their prompt; the pool must hold their 99th percentile (the number running is
Poisson), and the peak (every request at P + N) is reported for the preemption check.
With a shared prefix (Workload.shared_prefix_tokens, e.g. a system prompt) cached, as vLLM's automatic prefix
caching and SGLang's radix cache keep it, a request computes and holds only the P - C tokens after the C it
finds cached (Scheduler.cached_tokens), its chunks attending to those C as well; the replica holds the C
tokens' blocks once. Decode steps still read every request's whole context.
A request whose prompt was prefilled elsewhere (Workload.prefilled: a disaggregated decode replica,
planner.plan.disaggregated) computes only its prompt's last token and holds its whole prompt of its own, P + t per
request (Scheduler.own_prompt): a transferred KV is held per request, a prefix-cache hit once per replica.
With speculative decoding by the checkpoint's MTP module (a SpeculativeTimer: planner.estimator.speculative) every
decode step is a cycle in which a request gains the acceptance length L tokens and takes s + 1 tokens of the step's
budget: a request decodes for (N - 1) / L cycles, so B_d = lambda (N - 1) s / L, TPOT = cycle / L and the decoding
requests make B_d x L / cycle tokens/s; prompt tokens join the cycle's verify pass, timed as without speculation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from math import ceil, exp, inf, log
from statistics import NormalDist
from typing import TYPE_CHECKING, NamedTuple

from planner.errors import PlannerInputError
from planner.estimator.engines import EngineBudget
from planner.estimator.engines.base import BlocksToCompletion, OutputReservation
from planner.estimator.engines.registry import engine
from planner.estimator.performance import ReplicaTimer, Workload, prompt_room

if TYPE_CHECKING:
    from planner.estimator.speculative import SpeculativeTimer

# The fixed point and the search for the largest rate stop at this relative precision (capacity is
# counted in milli-requests/s: 1e-3 of a rate is below what the fleet model can tell apart above 1 req/s).
TOLERANCE = 1e-3
# Tries within the rate's bracket at the most: aimed ones close it in a few, and as the move past the line's
# estimate doubles with every try that lands on the same side, within about log2(1 / TOLERANCE) where the line
# is a poor guide.
RATE_TRIES = 40
FIXED_POINT_ITERATIONS = 200
# The pool holds the running requests' KV at this quantile of their number: z of the normal 99th percentile.
KV_QUANTILE_Z = NormalDist().inv_cdf(0.99)
# Rounds of the inner fixed point between prompts per prefill step and the share of steps carrying
# prompts, per outer round: the outer iteration carries it on, so a few suffice.
MIX_ROUNDS = 3
# Rounds of the step mix's fixed point in which F(s) - s may fail to halve before its bracket is halved outright
# (Dekker's and Brent's safeguard: secant steps that converge slowly cost more rounds than halving).
BRACKET_ROUNDS = 3
# Rounds of unguarded secant steps before the bracket guards them: where the secant converges it takes fewer
# (measured on bench/solver_scale.py 50 x 40: 90% of the fixed points within 10 rounds). Until then the steps are
# the ones this module always took, so those fixed points are the same to the bit.
SECANT_ROUNDS = 10


@dataclass(frozen=True)
class Slo:
    """Latency targets; `percentile` None means the mean."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: float | None = None

    def __post_init__(self) -> None:
        if self.percentile is not None and not 0 < self.percentile < 100:
            raise PlannerInputError(f"slo.percentile: {self.percentile} must be above 0 and below 100 (90 = p90)")


@dataclass(frozen=True)
class Scheduler:
    """The engine's batching limits and its KV pool, as the engine budget resolved them."""

    pool_tokens: int  # kv_cache_capacity_tokens: whole blocks
    block_tokens: int  # tokens per KV block (vLLM block_size; a token pool: 1)
    max_num_batched_tokens: int  # the token budget of one step
    max_num_seqs: int | None  # requests running at once (None: only the pool limits them)
    max_model_len: int
    # the engine's prefix cache serves a shared prompt prefix (Scheduler.cached_tokens); off for models with recurrent
    # layers, whose states the cache keeps at checkpoints only (vLLM 0.19 runs them without prefix caching)
    prefix_cache: bool = True
    # what sets max_num_seqs, as a limit names it: the engine's setting, or SGLang's budgeted running requests
    seqs_limit: str = "max_num_seqs"
    # how a waiting request is admitted against the pool: SGLang's reserved outputs, TensorRT-LLM's blocks to
    # completion, or None (its prompt's blocks, preempting when a decode step finds none, as vLLM)
    reservation: OutputReservation | BlocksToCompletion | None = None

    @classmethod
    def of(cls, budget: EngineBudget, batching: EngineBudget | None = None, max_seqs_cap: int | None = None,
           dp: int = 1) -> Scheduler:
        """The pool of `budget` (its max-model-len is budget.context) and the batching limits of `batching`
        (default: the same budget; the `simple` planning margin has no scheduler and borrows vLLM's).
        vLLM allocates blocks of block_size tokens; SGLang's token pool pages one token; llama-server splits
        its n_ctx cells evenly over its slots, so each request holds a whole context. `dp`: data-parallel attention
        groups, each with its own pool of the budget's tokens and the requests dealt evenly over them; the replica's
        running requests and step token budget stay the engine's totals (SGLang @ v0.5.23 divides them over the
        groups: model_executor/pool_configurator.py:956 max_running_requests // attn_dp_size,
        arg_groups/parallel_hook.py:331 chunked_prefill_size // attn_dp_size)."""
        settings = (batching or budget).settings
        context = budget.context
        block, budget_tokens, seqs = engine(settings.name).batching(settings, context)
        # SGLang admits at most a budgeted number of requests per data-parallel worker (resolve_max_num_reqs,
        # mem_cache/kv_cache_configurator.py @ v0.5.23: max_mamba_cache_size // ratio for its state slots; DeepSeek-V4's
        # max_running_requests // attn_dp_size)
        layout = budget.layout
        running = layout.running_requests * dp if layout and layout.running_requests else None
        if max_seqs_cap is not None:
            seqs = min(seqs, max_seqs_cap) if seqs is not None else max_seqs_cap
        limit = "max_num_seqs"
        if running is not None and (seqs is None or running <= seqs):
            seqs, limit = running, layout.running_limit  # type: ignore[union-attr]
        return cls(pool_tokens=dp * budget.kv_cache_capacity_tokens, block_tokens=block,
                   max_num_batched_tokens=budget_tokens or context, max_num_seqs=seqs, max_model_len=context,
                   prefix_cache=not (budget.layout and budget.layout.state_bytes), seqs_limit=limit,
                   reservation=engine(settings.name).admission(settings, block))

    def held_tokens(self, tokens: int) -> int:
        """What a request of `tokens` tokens holds of the pool: whole blocks."""
        return _whole_blocks(tokens, self.block_tokens)

    def cached_tokens(self, prompt_tokens: int, shared_prefix_tokens: int) -> int:
        """The prompt tokens a request finds in the prefix cache once the shared prefix of its workload is cached:
        the one rule of the capacity model and the simulator. The cache hits whole blocks only, and never the
        prompt's last token, which is computed again for its logits (vllm/v1/core/kv_cache_manager.py
        get_computed_blocks @ v0.34.0: full blocks of the longest hit, "set max_cache_hit_length to prompt_length -
        1"; prefix caching on by default, config/cache.py enable_prefix_caching = True; TensorRT-LLM's block reuse
        alike; SGLang's
        RadixCache matches pages of one token). The shared blocks are held once by the replica, not by each request;
        llama-server's slots, a whole context each (a block of max-model-len), share none; nor, as planned, does a
        model with recurrent layers (prefix_cache)."""
        if not self.prefix_cache:
            return 0
        shared = min(shared_prefix_tokens, prompt_tokens - 1)
        return shared // self.block_tokens * self.block_tokens

    def own_prompt(self, shape: Workload) -> tuple[int, int, int, int]:
        """A request's prompt as the replica runs it: (tokens it computes, tokens before them its chunks attend to,
        tokens it holds of its own, tokens of the shared prefix the replica holds once). A prefix-cache hit is held
        once by the replica (cached_tokens); a prompt prefilled elsewhere (shape.prefilled: its KV transferred to a
        disaggregated decode replica) is held whole by each request, which computes only its last token, the step
        that makes its first token here (vLLM @ v0.34.0, v1/core/sched/scheduler.py: once a NixlConnector load ends
        "a full prompt hit re-computes that token so the next one can be sampled", num_computed_tokens = num_tokens
        - 1)."""
        if shape.prefilled:
            return 1, shape.prompt_tokens - 1, shape.prompt_tokens, 0
        cached = self.cached_tokens(shape.prompt_tokens, shape.shared_prefix_tokens)
        return shape.prompt_tokens - cached, cached, shape.prompt_tokens - cached, cached


def _whole_blocks(tokens: int, block_tokens: int) -> int:
    return ceil(tokens / block_tokens) * block_tokens


class StepTimes:
    """A replica's step times, memoised: the timer is deterministic, and the searches of this module (the
    rate, the fixed point, the step mix) and the fleet's re-solves ask for the same steps again and again.
    With speculative decoding (a SpeculativeTimer) a decode step is a cycle in which each decoding request gains
    `tokens_per_step` tokens (the acceptance length L) and takes `budget_per_decode` tokens of the step's budget."""

    def __init__(self, timer: ReplicaTimer | SpeculativeTimer) -> None:
        self.timer = timer
        self.pp = timer.pp
        self.tokens_per_step = timer.tokens_per_step
        self.budget_per_decode = timer.budget_per_decode
        self.mixes_prefill = timer.mixes_prefill
        self.runs_prompts_apart = timer.runs_prompts_apart
        self.dp = timer.dp
        self._seconds: dict[tuple[float, float, int, float, int], float] = {}
        self._time = timer.step_s  # bound once: most of the memo's lookups miss (fractional batches)

    def step_s(self, decode: float, context: float, prefill_tokens: int, positions: float, prefill_seqs: int) -> float:
        key = (decode, context, prefill_tokens, positions, prefill_seqs)
        seconds = self._seconds.get(key)
        if seconds is None:
            seconds = self._seconds[key] = self._time(key)  # a Step's fields in order: no Step built per call
        return seconds

    def decode_steps(self, output: int) -> float:
        """The steps a request of `output` tokens decodes for: its first token comes out of its prefill step, each
        step after it gains tokens_per_step of the rest (a mean: (N - 1) / L cycles with speculative decoding)."""
        return (output - 1) / self.tokens_per_step

    def decode_room(self, budget: int, decode: float) -> float:
        """What `decode` decoding requests leave of a step's token budget for prompt tokens (prompt_room)."""
        return prompt_room(budget, decode, self.budget_per_decode, self.mixes_prefill)

    def mean_step(self, decode: float, context: float, prefill: float, prompt: int, cached: int = 0,
                  prompts: float | None = None) -> float:
        """The step time at a fractional decode batch, `prefill` prompt tokens beside it (chunks of prompts of
        `prompt` tokens to compute, after `cached` tokens found in the prefix cache; chunks of `prompts` prompts,
        default as many as the tokens fill); with pipeline parts (whole sequences each), linear between the two
        integer batches around it."""
        prefill_tokens = round(prefill)
        prefill_seqs = (ceil(prompts) if prompts else ceil(prefill / prompt)) if prefill_tokens else 0
        # chunks attend to their prompt's prefix: the cached tokens and on average half of the computed ones
        positions = prefill_tokens * (prompt + 2 * cached + 1) / 2
        if self.pp == 1:  # one pipeline part times a fractional batch directly (the hot path: step_s inlined)
            key = (decode, context, prefill_tokens, positions, prefill_seqs)
            seconds = self._seconds.get(key)
            if seconds is None:
                seconds = self._seconds[key] = self._time(key)
            return seconds
        low = int(decode)
        at_low = self.step_s(low, context, prefill_tokens, positions, prefill_seqs)
        if decode == low:
            return at_low
        return at_low + (decode - low) * (self.step_s(low + 1, context, prefill_tokens, positions, prefill_seqs)
                                          - at_low)


def step_times(timer: ReplicaTimer | SpeculativeTimer | StepTimes) -> StepTimes:
    return timer if isinstance(timer, StepTimes) else StepTimes(timer)


@dataclass(frozen=True)
class SteadyState:
    requests_per_s: float  # arrivals served (lambda)
    output_tokens_per_s: float
    batch: float  # requests running (decoding + prefilling), mean
    decode_batch: float
    step_s: float  # mean step
    ttft_s: float  # at the SLO's percentile (mean when it names none)
    tpot_s: float
    ttft_mean_s: float
    tpot_mean_s: float
    prefill_utilisation: float  # of the token budget left to prompts
    kv_tokens_mean: float  # held by the running requests
    kv_tokens_peak: int  # every running request at its last token
    pool_tokens: int
    # what stops a higher rate (max_rate) or what this rate breaks (steady_state): "ttft", "tpot", "kv pool",
    # "max_num_seqs" (SGLang: "max_running_requests" or "state slots"), "token budget", "throughput"; empty
    # when it keeps up
    limit: str
    kv_tokens_shared: int = 0  # of kv_tokens_mean and kv_tokens_peak: the shared prefix's blocks, held once

    @property
    def preemption_free(self) -> bool:
        """The pool holds every running request at its longest: no preemption even in the worst case."""
        return self.kv_tokens_peak <= self.pool_tokens


def _mean_held(scheduler: Scheduler, prompt: int, output: int) -> float:
    """Mean tokens (in whole blocks) a decoding request holds over its steps: P + t for t = 1..N-1; on an engine that
    reserves each request's blocks to completion (TensorRT-LLM), P + N from its start, which the next admission sees."""
    if isinstance(scheduler.reservation, BlocksToCompletion):
        return scheduler.held_tokens(prompt + output)
    return _mean_held_blocks(scheduler.block_tokens, prompt, output)


@lru_cache(maxsize=4096)  # one sum per (block, shape), asked at every rate a search tries
def _mean_held_blocks(block_tokens: int, prompt: int, output: int) -> float:
    steps = max(output - 1, 1)
    if output - 1 > 4096:  # long replies: the block rounding averages to half a block
        return prompt + output / 2 + block_tokens / 2
    return sum(_whole_blocks(prompt + t, block_tokens) for t in range(1, steps + 1)) / steps


def _kv_high(kv_mean: float, batch: float, shared: int) -> float:
    """The KV the running requests hold at the 99th percentile of their number (Poisson: M/G/infinity), beside the
    `shared` prefix tokens (of kv_mean) held once whatever their number."""
    return shared + (kv_mean - shared) * (1 + KV_QUANTILE_Z / batch ** 0.5) if batch else 0.0


def steady_state(timer: ReplicaTimer | StepTimes, scheduler: Scheduler, shape: Workload, rate: float,
                 slo: Slo = Slo(), window_spread: bool = True) -> SteadyState:
    """The replica at `rate` requests/s of `shape`; `limit` names what it breaks, empty when it keeps up.
    `window_spread` False: TPOT at the mean rate only (an optimistic bound, a third of the work)."""
    if rate < 0:
        raise PlannerInputError(f"--rate: {rate} must be 0 or more requests/s")
    timer = step_times(timer)
    output = shape.output_tokens
    prompt, cached, own, shared_prefix = scheduler.own_prompt(shape)
    budget = scheduler.max_num_batched_tokens
    context = shape.prompt_tokens + output / 2
    decoding_held = _mean_held(scheduler, own, output)
    # the most requests the engine runs at once: its cap, or the requests whose mean KV the pool holds
    most = min((scheduler.max_num_seqs or inf, scheduler.seqs_limit),
               (scheduler.pool_tokens / decoding_held, "kv pool"))
    found = _mean_field(timer, rate, prompt, cached, output, context, budget, most=most)
    if isinstance(found, str):
        return _saturated(rate, output, scheduler, found)
    mix = _settled(timer, found, context, budget, prompt, cached)
    room = timer.decode_room(budget, mix.decode)
    # the prompt tokens as a queue: served at room / prefill-step tokens per second when the budget is full
    rho = rate * prompt * mix.full_s / room
    if rho >= 1:
        return _saturated(rate, output, scheduler, "token budget")
    chunks = ceil(prompt / room)
    own_s = chunks * mix.first_token_s  # its chunks' steps (prompts apart: their passes, back to back)
    service_s = prompt * mix.full_s / room
    wait_s = rho * service_s / (2 * (1 - rho))
    prefilling = rate * own_s
    # a request's time per token: the mean step of its decode window over the tokens a step gains it
    tpot_mean = (_request_tpot(timer, rate, prompt, cached, output, context, budget, mix) if window_spread
                 else mix.mean_s) / timer.tokens_per_step
    decoding = rate * (output - 1) * tpot_mean  # Little's law on the time requests spend decoding
    batch = decoding + prefilling
    # the shared prefix's blocks are held once (the cached ones are whole blocks: the requests' own start a block)
    shared = shared_prefix if batch else 0
    # a prefilling request holds its prompt, or where the engine reserves blocks to completion its whole request
    prefilling_held = decoding_held if isinstance(scheduler.reservation, BlocksToCompletion) \
        else scheduler.held_tokens(own)
    kv_mean = decoding * decoding_held + prefilling * prefilling_held + shared
    # the requests running at once are Poisson (M/G/infinity): the pool must hold their 99th percentile, or
    # preemptions (recomputing whole requests) push the replica into a queue that no longer drains
    kv_high = _kv_high(kv_mean, batch, shared)
    kv_peak = ceil(batch) * scheduler.held_tokens(own + output) + shared
    # a request arrives within a step (length-biased: E[s^2] / E[s]) unless the engine is idle, which it is
    # with probability e^-batch (nothing running)
    busy = 1 - exp(-batch)
    biased_s = mix.square_s / mix.mean_s
    ttft_mean = busy * biased_s / 2 + wait_s + own_s
    if slo.percentile is None:
        ttft, tpot = ttft_mean, tpot_mean
    else:
        q = slo.percentile / 100
        waited = wait_s / rho * log(rho / (1 - q)) if rho > 1 - q else 0.0
        ttft = busy * q * biased_s + waited + own_s
        # a request's N - 1 steps each carry prompt tokens with probability f: its TPOT is their mean
        f = mix.prefill_fraction
        spread = ((mix.prefill_s - mix.decode_s) * (f * (1 - f) / max(timer.decode_steps(output), 1)) ** 0.5
                  / timer.tokens_per_step)
        tpot = tpot_mean + NormalDist().inv_cdf(q) * max(spread, 0.0)
    limit = ""
    if scheduler.max_num_seqs is not None and batch > scheduler.max_num_seqs:
        limit = scheduler.seqs_limit
    elif kv_high > scheduler.pool_tokens:
        limit = "kv pool"
    elif slo.ttft_s is not None and ttft > slo.ttft_s:
        limit = "ttft"
    elif slo.tpot_s is not None and tpot > slo.tpot_s:
        limit = "tpot"
    return SteadyState(
        requests_per_s=rate, output_tokens_per_s=rate * output, batch=batch, decode_batch=decoding,
        step_s=mix.mean_s, ttft_s=ttft, tpot_s=tpot, ttft_mean_s=ttft_mean, tpot_mean_s=tpot_mean,
        prefill_utilisation=rho, kv_tokens_mean=kv_mean, kv_tokens_peak=kv_peak, pool_tokens=scheduler.pool_tokens,
        limit=limit, kv_tokens_shared=shared)


@dataclass(frozen=True)
class _StepMix:
    """Steps alternate between decode-only ones and ones that also carry prompt tokens."""

    decode: float  # decoding requests (Little's law)
    decode_s: float
    prefill_s: float  # a step carrying the prompts that arrived during the step before
    # of it, the part after which those prompts' first tokens come out: the whole step, or, where the engine runs
    # prompts as a pass of their own before the decode (StepTimes.runs_prompts_apart), that pass
    first_token_s: float
    full_s: float  # a step whose token budget is full
    prefill_fraction: float  # of steps
    mean_s: float
    square_s: float  # E[step^2]


class _Round(NamedTuple):
    """One round of the step mix's fixed point: _StepMix without the full step (a tuple: rounds are many)."""

    decode: float
    decode_s: float
    prefill_s: float
    prefill_fraction: float
    mean_s: float
    square_s: float
    prefill_tokens: float  # prompt tokens a prompt-carrying step carries


def _step_mix(timer: StepTimes, rate: float, prompt: int, cached: int, output: int, context: float, budget: int,
              mean_s: float, most: tuple[float, str] = (inf, "")) -> _Round | str:
    """One round of the fixed point from the mean step `mean_s`. A step takes the prompts that arrived
    during the previous one: after a step of s seconds, the next carries prompt tokens with probability
    1 - e^(-rate s) (Poisson arrivals), so prefill steps follow each other more often than decode-only
    ones (a two-state Markov chain: f = a / (1 - b + a)); they must also serve rate x P tokens/s.
    A request sees the others beside it as Poisson with mean B_d (M/G/infinity): 1 + B_d in its steps. What stops
    the round instead: "token budget" where the decoding requests leave no room in a step's budget, or `most`'s
    limit where they are more than the engine runs at once (an engine whose prompts take the whole budget, SGLang,
    is bounded by that alone)."""
    decode = rate * timer.decode_steps(output) * mean_s
    room = timer.decode_room(budget, decode + 1)  # the request's own decode beside them
    if room < 1:
        return "token budget"
    if decode > most[0]:
        return most[1]
    batch, mean_step = 1 + decode, timer.mean_step
    decode_s = mean_step(batch, context, 0, prompt, cached)
    a = 1 - exp(-rate * decode_s)
    served = rate * prompt * mean_s / room  # the least f that serves rate x P prompt tokens/s
    prompts, f, carried = 1.0, a, -1.0
    # min() and max() of two spelled out (the same values, ties included): this loop is the hottest in planner
    for _ in range(MIX_ROUNDS):
        # a prefill step carries at least one prompt; on average the rate x mean step prompts of a step,
        # all in the fraction f of steps that carry any
        tokens = prompt * prompts
        tokens = tokens if tokens < room else room
        if tokens == carried:
            break  # the round before carried as many: every round from here would repeat its values
        carried = tokens
        prefill_s = mean_step(batch, context, tokens, prompt, cached)
        b = 1 - exp(-rate * prefill_s)
        chained = a / (1 - b + a) if rate else 0.0
        f = served if served > chained else chained
        f = f if f < 1.0 else 1.0
        if f:
            prompts = rate * mean_s / f
            prompts = prompts if prompts > 1.0 else 1.0
        else:
            prompts = 1.0
    mean = f * prefill_s + (1 - f) * decode_s
    return _Round(decode, decode_s, prefill_s, f, mean, f * prefill_s ** 2 + (1 - f) * decode_s ** 2, tokens)


def _settled(timer: StepTimes, found: _Round, context: float, budget: int, prompt: int, cached: int) -> _StepMix:
    """The fixed point's round with the step whose budget is full beside the decoding requests (timed for the
    steady state's own fixed point only: no round, and no fixed point of _request_tpot, reads it)."""
    room = timer.decode_room(budget, found.decode + 1)  # the request's own decode beside them
    full_s = timer.mean_step(1 + found.decode, context, room, prompt, cached)
    first_token_s = timer.mean_step(0, context, found.prefill_tokens, prompt, cached) if timer.runs_prompts_apart \
        else found.prefill_s
    return _StepMix(found.decode, found.decode_s, found.prefill_s, first_token_s, full_s, found.prefill_fraction,
                    found.mean_s, found.square_s)


def _mean_field(timer: StepTimes, rate: float, prompt: int, cached: int, output: int, context: float,
                budget: int, start_s: float | None = None, most: tuple[float, str] = (inf, "")) -> _Round | str:
    """The fixed point s = F(s) of the step mix at `rate` (F: _step_mix's mean step from a mean step s), or what
    stops it: "token budget" (the iteration reaches mean steps at which the decoding requests fill the budget), the
    limit of `most` (the requests the engine runs at once, and what sets it) where they outnumber it, or
    "throughput" (F jumps across s = F(s) without meeting it). `start_s`: a mean step to iterate from (a nearby
    rate's), else a lone request's step.
    Secant steps on F(s) - s = 0: far fewer rounds than iterating s = F(s) when F's slope is near 1. Where F(s) - s
    dips towards 0 or runs level, a secant through two points points back behind them or far past them, and
    unchecked it swings there and back for good (it did in 40% of the rounds of bench/solver_scale.py, ending as
    "throughput" where a fixed point existed). So after SECANT_ROUNDS rounds the steps keep within the bracket
    of the points tried (F(s) > s below the fixed point, F(s) < s or F undefined above it): a secant step that
    leaves it gives way to the plain step s = F(s), its move doubled for each such round in a row until a point
    above the fixed point closes the bracket; a closed bracket is halved whenever F(s) - s has not halved in
    BRACKET_ROUNDS rounds, so it closes within a few times log2(1 / TOLERANCE) rounds."""
    mean_s = start_s or timer.mean_step(1, context, 0, prompt, cached)
    below, above, undefined = 0.0, inf, inf  # F(s) > s at `below`, F(s) < s at `above`, F undefined from `undefined`
    undefined_by = "token budget"  # what leaves F undefined there
    previous: tuple[float, float] | None = None  # (s, F(s) - s) of the iteration before
    fallback: float | None = None  # the plain iterate, when another step was taken instead
    stalled, halved_at, since = 0, inf, 0  # plain steps in a row; |F(s) - s| when it last halved, rounds since
    for round_ in range(FIXED_POINT_ITERATIONS):
        mix = _step_mix(timer, rate, prompt, cached, output, context, budget, mean_s, most)
        if isinstance(mix, str):
            if fallback is None:
                return mix
            # the step overshot to where the budget runs out: go back to the plain iteration
            mean_s, fallback, previous, undefined, undefined_by = fallback, None, None, min(undefined, mean_s), mix
            continue
        gap = mix.mean_s - mean_s
        if abs(gap) <= TOLERANCE * mean_s:
            return mix
        if gap > 0:
            below = max(below, mean_s)
        else:
            above = min(above, mean_s)
        top = min(above, undefined)
        if round_ >= SECANT_ROUNDS and top - below <= TOLERANCE * below:
            return undefined_by if undefined < above else "throughput"
        if abs(gap) <= halved_at / 2:
            halved_at, since = abs(gap), 0
        since += 1
        step = mix.mean_s
        if previous is not None and gap != previous[1]:
            step = mean_s - gap * (mean_s - previous[0]) / (gap - previous[1])
        if round_ < SECANT_ROUNDS:
            step = step if step > 0 else mix.mean_s
        elif top < inf and since > BRACKET_ROUNDS:
            step, since = (below + top) / 2, 0
        elif not below < step < top:
            stalled += 1
            step = mean_s + gap * 2 ** (stalled - 1)
            if not below < step < top:
                step = mix.mean_s if below < mix.mean_s < top or top == inf else (below + top) / 2
        else:
            stalled = 0
        fallback = None if step == mix.mean_s else mix.mean_s
        previous = (mean_s, gap)
        mean_s = step
    return "throughput"


def _request_tpot(timer: StepTimes, rate: float, prompt: int, cached: int, output: int, context: float, budget: int,
                  mix: _StepMix) -> float:
    """The mean step requests see over their decode window (their TPOT times the tokens a step gains them). A
    request's TPOT averages the steps of its own window of N - 1 steps (cycles: StepTimes.decode_steps), whose
    arrivals are Poisson: their count over the window deviates by sqrt(count), and a window with more of them
    has more prompt steps and more requests decoding beside it. TPOT grows convexly with the rate, so the
    mean over windows exceeds the TPOT at the mean rate: averaged over the rate one deviation either side
    (the two-point rule for a symmetric spread), a window never slower than steps whose budget is full."""
    arrivals = rate * timer.decode_steps(output) * mix.mean_s
    if arrivals <= 1:
        return mix.mean_s
    spread = rate / arrivals ** 0.5
    busier = _mean_field(timer, rate + spread, prompt, cached, output, context, budget, mix.mean_s)
    quieter = _mean_field(timer, max(rate - spread, 0.0), prompt, cached, output, context, budget, mix.mean_s)
    high = mix.full_s if isinstance(busier, str) else min(busier.mean_s, mix.full_s)
    low = mix.mean_s if isinstance(quieter, str) else quieter.mean_s
    return max(mix.mean_s, (high + low) / 2)


def _saturated(rate: float, output: int, scheduler: Scheduler, limit: str) -> SteadyState:
    """A rate the replica cannot keep up with: the queue grows without bound."""
    return SteadyState(rate, rate * output, inf, inf, inf, inf, inf, inf, inf, 1.0, inf, 0, scheduler.pool_tokens, limit)


def max_rate(timer: ReplicaTimer | StepTimes, scheduler: Scheduler, shape: Workload, slo: Slo, window_spread: bool = True,
             tolerance: float = TOLERANCE, guess: float | None = None) -> SteadyState | None:
    """The largest arrival rate whose steady state keeps every limit and meets the SLO, to `tolerance` (a bracket
    search: latency, batch and KV only grow with the rate); `limit` names what stops a higher one. None when
    even a lone request misses the SLO or does not fit max_model_len. `window_spread` False: an upper bound
    (see steady_state). `guess`: a rate near the answer to search from (e.g. a bound's or a similar replica's)."""
    if shape.prompt_tokens + shape.output_tokens > scheduler.max_model_len:
        return None
    times = step_times(timer)

    def at(rate: float) -> SteadyState:
        # every rate's fixed point rises from a lone request's step, as steady_state's own: where the step mix
        # has two fixed points, starting from a nearby rate's step could land on the upper one
        return steady_state(times, scheduler, shape, rate, slo, window_spread)

    alone = steady_state(times, scheduler, shape, 0.0, slo, window_spread)
    if alone.limit:
        return None
    # from the rate at which one request at a time keeps the replica busy, up along the line through the last
    # two rates that passed (at most doubling): a rate far past the capacity has no fixed point to find, and
    # finding that out costs the most
    low, low_slack = alone, _slack(alone, scheduler, slo)
    high = at(guess or 1.0 / (alone.ttft_mean_s + (shape.output_tokens - 1) * alone.tpot_mean_s))
    while not high.limit:
        previous, previous_slack = low, low_slack
        low, low_slack = high, _slack(high, scheduler, slo)
        rate = min(2 * low.requests_per_s,
                   _beyond(previous.requests_per_s, previous_slack, low.requests_per_s, low_slack, tolerance))
        high = at(rate)
    high_slack = _slack(high, scheduler, slo)
    passed, streak = False, 0  # whether the last try kept every limit; tries in a row that moved the same end
    for _ in range(RATE_TRIES):
        if high.requests_per_s - low.requests_per_s <= tolerance * high.requests_per_s:
            break
        rate = _aim(low.requests_per_s, low_slack, high.requests_per_s, high_slack, passed, streak, tolerance)
        state = at(rate)
        streak = streak + 1 if passed == (not state.limit) else 0
        passed = not state.limit
        if passed:
            low, low_slack = state, _slack(state, scheduler, slo)
        else:
            high, high_slack = state, _slack(state, scheduler, slo)
    return replace(low, limit=high.limit)


def _slack(state: SteadyState, scheduler: Scheduler, slo: Slo) -> float:
    """The largest ratio of a quantity to its limit (the checks of steady_state): above 1 the state breaks one,
    and the lower it is, the more rate the replica has to spare."""
    if state.step_s == inf:
        return inf
    kv = _kv_high(state.kv_tokens_mean, state.batch, state.kv_tokens_shared)
    ratios = [kv / scheduler.pool_tokens if scheduler.pool_tokens else (inf if kv else 0.0)]
    for value, limit in ((state.batch, scheduler.max_num_seqs), (state.ttft_s, slo.ttft_s), (state.tpot_s, slo.tpot_s)):
        if limit is not None:
            ratios.append(value / limit if limit else (inf if value > 0 else 0.0))
    return max(ratios)


def _beyond(lower: float, lower_slack: float, low: float, low_slack: float, tolerance: float) -> float:
    """Past the rate where the line through two passing rates reaches a slack of 1 (for a convex slack, past
    where the slack itself does) by a quarter of the tolerance; infinite when the slack did not grow."""
    if not low_slack > lower_slack:
        return inf
    crossing = low + (1 - low_slack) * (low - lower) / (low_slack - lower_slack)
    return crossing * (1 + tolerance / 4)


def _aim(low: float, low_slack: float, high: float, high_slack: float, upward: bool, streak: int,
         tolerance: float) -> float:
    """The next rate to try between a passing `low` and a failing `high`: where the slack reaches 1 on the line
    between them (regula falsi), moved up after a try that passed and down after one that failed, by a quarter
    of the tolerance, doubled for each try in a row that moved the same end. The slack is convex in the rate
    (latency grows as 1 / (1 - load)), so the line falls short of where it reaches 1 and alone would only ever
    move the low end: the move takes the next try past it, and the bracket closes from both sides. The middle
    when the high end is saturated (an infinite slack) or the line says nothing."""
    middle = (low + high) / 2
    if high_slack == inf or not high_slack > low_slack:
        return middle
    crossing = low + (1 - low_slack) * (high - low) / (high_slack - low_slack)
    least = tolerance * high / 4
    rate = crossing + least * 2 ** streak if upward else crossing - least * 2 ** streak
    if not low < rate < high:
        return middle
    return min(max(rate, low + least), high - least)


__all__ = ["Scheduler", "Slo", "SteadyState", "StepTimes", "max_rate", "steady_state", "step_times"]
