"""Continuous batching in steady state: what one replica serves of one request shape, and how fast.

The scheduler (vLLM V1, vllm/v1/core/sched/scheduler.py; SGLang's chunked prefill works alike) builds
every step from the requests it holds: each running request decodes one token, and prompt tokens of
new or partly prefilled requests fill what is left of the step's token budget
(max_num_batched_tokens), up to max_num_seqs requests, as long as the KV pool has blocks for them.

At an arrival rate lambda of requests with P prompt and N output tokens, with s the mean step time:
  decoding requests     B_d = lambda (N - 1) s          (Little's law: each decodes for N - 1 steps; the
                                                          first token comes out of the prefill step)
  prefill per step      c = lambda P s tokens           (what arrives during a step is prefilled next)
  step                  s = step_time(B_d sequences at the mean context P + N/2, c prompt tokens)
solved as a fixed point (s grows with lambda; the iteration from s(0) rises monotonically to it). The
prompt tokens are a server of rate (budget - B_d) / s_full tokens/s, s_full a step whose budget is full
(utilisation rho = lambda P s_full / (budget - B_d)); a request's time to first token is
  TTFT = the rest of the step under way (s/2) + queueing for the prefill budget (M/D/1:
         rho S / (2 (1 - rho)), S = P s_full / (budget - B_d)) + its own prefill steps
and its time per output token is the mean step. A percentile SLO takes the p-th percentile of the
wait (M/G/1 waits, exponential beyond the probability rho of waiting at all: Kingman's heavy-traffic
approximation) and of a request's mean step over its N - 1 steps (normal, as a mean of many steps).
The KV a replica holds is what its requests hold: decoding ones P + t tokens (t = 1..N-1, in whole
blocks), prefilling ones their prompt; the pool must hold the mean, and the peak (every request at
P + N) is reported for the preemption check.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil, exp, log
from statistics import NormalDist

from planner.errors import PlannerInputError
from planner.estimator.engines import EngineBudget
from planner.estimator.performance import ReplicaTimer, Step, Workload

# The fixed point and the search for the largest rate stop at this relative precision (capacity is
# counted in milli-requests/s: 1e-3 of a rate is below what the fleet model can tell apart above 1 req/s).
TOLERANCE = 1e-3
# Bisection steps on the rate: 2^-40 of the bracket, far below TOLERANCE.
BISECTIONS = 40
FIXED_POINT_ITERATIONS = 200
# The pool holds the running requests' KV at this quantile of their number: z of the normal 99th percentile.
KV_QUANTILE_Z = NormalDist().inv_cdf(0.99)
# Rounds of the inner fixed point between prompts per prefill step and the share of steps carrying
# prompts, per outer round: the outer iteration carries it on, so a few suffice.
MIX_ROUNDS = 3


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

    @classmethod
    def of(cls, budget: EngineBudget, batching: EngineBudget | None = None, max_seqs_cap: int | None = None) -> Scheduler:
        """The pool of `budget` (its max-model-len is budget.context) and the batching limits of `batching`
        (default: the same budget; the `simple` planning margin has no scheduler and borrows vLLM's).
        vLLM allocates blocks of block_size tokens; SGLang's token pool pages one token; llama-server splits
        its n_ctx cells evenly over its slots, so each request holds a whole context."""
        settings = (batching or budget).settings
        context = budget.context
        block = {"vllm": settings.block_size or 1, "llamacpp": context}.get(settings.name, 1)
        budget_tokens = settings.n_batch if settings.name == "llamacpp" else settings.max_num_batched_tokens
        seqs = settings.max_num_seqs if settings.name == "vllm" else None
        if max_seqs_cap is not None:
            seqs = min(seqs, max_seqs_cap) if seqs is not None else max_seqs_cap
        return cls(pool_tokens=budget.kv_cache_capacity_tokens, block_tokens=block,
                   max_num_batched_tokens=budget_tokens or context, max_num_seqs=seqs, max_model_len=context)

    def held_tokens(self, tokens: int) -> int:
        """What a request of `tokens` tokens holds of the pool: whole blocks."""
        return ceil(tokens / self.block_tokens) * self.block_tokens


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
    limit: str  # what stops a higher rate: "ttft", "tpot", "kv pool", "max_num_seqs", "token budget"

    @property
    def preemption_free(self) -> bool:
        """The pool holds every running request at its longest: no preemption even in the worst case."""
        return self.kv_tokens_peak <= self.pool_tokens


def _decode_step(timer: ReplicaTimer, decode: float, context: float, prefill: float, prompt: int) -> float:
    """The step time at a fractional decode batch: linear between the two integer batches around it."""
    prefill_tokens = round(prefill)
    prefill_seqs = ceil(prefill / prompt) if prefill_tokens else 0
    positions = prefill_tokens * (prompt + 1) / 2  # chunks attend to their prompt's prefix, on average half of it

    def at(b: int) -> float:
        return timer.step_s(Step(b, context, prefill_tokens, positions, prefill_seqs))

    low = int(decode)
    if decode == low:
        return at(low)
    return at(low) + (decode - low) * (at(low + 1) - at(low))


def _mean_held(scheduler: Scheduler, prompt: int, output: int) -> float:
    """Mean tokens (in whole blocks) a decoding request holds over its steps: P + t for t = 1..N-1."""
    steps = max(output - 1, 1)
    if output - 1 > 4096:  # long replies: the block rounding averages to half a block
        return prompt + output / 2 + scheduler.block_tokens / 2
    return sum(scheduler.held_tokens(prompt + t) for t in range(1, steps + 1)) / steps


def steady_state(timer: ReplicaTimer, scheduler: Scheduler, shape: Workload, rate: float,
                 slo: Slo = Slo()) -> SteadyState:
    """The replica at `rate` requests/s of `shape`; `limit` names what it breaks, empty when it keeps up."""
    if rate < 0:
        raise PlannerInputError(f"--rate: {rate} must be 0 or more requests/s")
    prompt, output = shape.prompt_tokens, shape.output_tokens
    budget = scheduler.max_num_batched_tokens
    context = prompt + output / 2
    mean_s = _decode_step(timer, 1, context, 0, prompt)
    for _ in range(FIXED_POINT_ITERATIONS):
        mix = _step_mix(timer, rate, prompt, output, context, budget, mean_s)
        if mix is None:
            return _saturated(rate, output, scheduler, "token budget")
        converged = abs(mix.mean_s - mean_s) <= TOLERANCE * mean_s
        mean_s = mix.mean_s
        if converged:
            break
    else:
        return _saturated(rate, output, scheduler, "throughput")
    room = budget - mix.decode
    # the prompt tokens as a queue: served at room / prefill-step tokens per second when the budget is full
    rho = rate * prompt * mix.full_s / room
    if rho >= 1:
        return _saturated(rate, output, scheduler, "token budget")
    chunks = ceil(prompt / room)
    own_s = chunks * mix.prefill_s
    service_s = prompt * mix.full_s / room
    wait_s = rho * service_s / (2 * (1 - rho))
    prefilling = rate * own_s
    batch = mix.decode + prefilling
    kv_mean = mix.decode * _mean_held(scheduler, prompt, output) + prefilling * scheduler.held_tokens(prompt)
    # the requests running at once are Poisson (M/G/infinity): the pool must hold their 99th percentile, or
    # preemptions (recomputing whole requests) push the replica into a queue that no longer drains
    kv_high = kv_mean * (1 + KV_QUANTILE_Z / batch ** 0.5) if batch else 0.0
    kv_peak = ceil(batch) * scheduler.held_tokens(prompt + output)
    # a request arrives within a step (length-biased: E[s^2] / E[s]) unless the engine is idle, which it is
    # with probability e^-batch (nothing running)
    busy = 1 - exp(-batch)
    biased_s = mix.square_s / mix.mean_s
    ttft_mean = busy * biased_s / 2 + wait_s + own_s
    tpot_mean = mix.mean_s
    if slo.percentile is None:
        ttft, tpot = ttft_mean, tpot_mean
    else:
        q = slo.percentile / 100
        waited = wait_s / rho * log(rho / (1 - q)) if rho > 1 - q else 0.0
        ttft = busy * q * biased_s + waited + own_s
        # a request's N - 1 steps each carry prompt tokens with probability f: its TPOT is their mean
        f = mix.prefill_fraction
        spread = (mix.prefill_s - mix.decode_s) * (f * (1 - f) / max(output - 1, 1)) ** 0.5
        tpot = tpot_mean + NormalDist().inv_cdf(q) * max(spread, 0.0)
    limit = ""
    if scheduler.max_num_seqs is not None and batch > scheduler.max_num_seqs:
        limit = "max_num_seqs"
    elif kv_high > scheduler.pool_tokens:
        limit = "kv pool"
    elif slo.ttft_s is not None and ttft > slo.ttft_s:
        limit = "ttft"
    elif slo.tpot_s is not None and tpot > slo.tpot_s:
        limit = "tpot"
    return SteadyState(
        requests_per_s=rate, output_tokens_per_s=rate * output, batch=batch, decode_batch=mix.decode,
        step_s=mix.mean_s, ttft_s=ttft, tpot_s=tpot, ttft_mean_s=ttft_mean, tpot_mean_s=tpot_mean,
        prefill_utilisation=rho, kv_tokens_mean=kv_mean, kv_tokens_peak=kv_peak, pool_tokens=scheduler.pool_tokens,
        limit=limit)


@dataclass(frozen=True)
class _StepMix:
    """Steps alternate between decode-only ones and ones that also carry prompt tokens."""

    decode: float  # decoding requests (Little's law)
    decode_s: float
    prefill_s: float  # a step carrying the prompts that arrived during the step before
    full_s: float  # a step whose token budget is full
    prefill_fraction: float  # of steps
    mean_s: float
    square_s: float  # E[step^2]


def _step_mix(timer: ReplicaTimer, rate: float, prompt: int, output: int, context: float, budget: int,
              mean_s: float) -> _StepMix | None:
    """One round of the fixed point from the mean step `mean_s`. A step takes the prompts that arrived
    during the previous one: after a step of s seconds, the next carries prompt tokens with probability
    1 - e^(-rate s) (Poisson arrivals), so prefill steps follow each other more often than decode-only
    ones (a two-state Markov chain: f = a / (1 - b + a)); they must also serve rate x P tokens/s.
    A request sees the others beside it as Poisson with mean B_d (M/G/infinity): 1 + B_d in its steps."""
    decode = rate * (output - 1) * mean_s
    room = budget - decode - 1
    if room < 1:
        return None
    decode_s = _decode_step(timer, 1 + decode, context, 0, prompt)
    full_s = _decode_step(timer, 1 + decode, context, room, prompt)
    a = 1 - exp(-rate * decode_s)
    prompts, f, prefill_s = 1.0, a, full_s
    for _ in range(MIX_ROUNDS):
        # a prefill step carries at least one prompt; on average the rate x mean step prompts of a step,
        # all in the fraction f of steps that carry any
        prefill_s = _decode_step(timer, 1 + decode, context, min(room, prompt * prompts), prompt)
        b = 1 - exp(-rate * prefill_s)
        chained = a / (1 - b + a) if rate else 0.0
        f = min(1.0, max(chained, rate * prompt * mean_s / room))
        prompts = max(1.0, rate * mean_s / f) if f else 1.0
    mean = f * prefill_s + (1 - f) * decode_s
    return _StepMix(decode, decode_s, prefill_s, full_s, f, mean, f * prefill_s ** 2 + (1 - f) * decode_s ** 2)


def _saturated(rate: float, output: int, scheduler: Scheduler, limit: str) -> SteadyState:
    """A rate the replica cannot keep up with: the queue grows without bound."""
    inf = float("inf")
    return SteadyState(rate, rate * output, inf, inf, inf, inf, inf, inf, inf, 1.0, inf, 0, scheduler.pool_tokens, limit)


def max_rate(timer: ReplicaTimer, scheduler: Scheduler, shape: Workload, slo: Slo) -> SteadyState | None:
    """The largest arrival rate whose steady state keeps every limit and meets the SLO (bisection: latency,
    batch and KV only grow with the rate); `limit` names what stops a higher one. None when even a lone
    request misses the SLO or does not fit max_model_len."""
    if shape.prompt_tokens + shape.output_tokens > scheduler.max_model_len:
        return None
    alone = steady_state(timer, scheduler, shape, 0.0, slo)
    if alone.limit:
        return None
    low, low_state = 0.0, alone
    high = 1.0 / alone.ttft_mean_s
    high_state = steady_state(timer, scheduler, shape, high, slo)
    while not high_state.limit:
        low, low_state, high = high, high_state, high * 2
        high_state = steady_state(timer, scheduler, shape, high, slo)
    for _ in range(BISECTIONS):
        if high - low <= TOLERANCE * high:
            break
        mid = (low + high) / 2
        state = steady_state(timer, scheduler, shape, mid, slo)
        if state.limit:
            high, high_state = mid, state
        else:
            low, low_state = mid, state
    return replace(low_state, limit=high_state.limit)


__all__ = ["Scheduler", "Slo", "SteadyState", "max_rate", "steady_state"]
