"""A `vllm bench serve` run replayed on the simulated replica (planner.estimator.simulate): its requests, its
arrivals, its client's concurrency limit and the metrics it prints and saves.

The rules are read from vLLM v0.34.0 (the wheel vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl):
- lengths, the random dataset: vllm/benchmarks/datasets/utils.py get_sampling_params. With range ratio r, input
  lengths are integers drawn uniformly from [floor(L_in (1 - r)), ceil(L_in (1 + r))] and output lengths from
  [max(floor(L_out (1 - r)), 1), max(ceil(L_out (1 + r)), 1)], both ends included, by
  numpy.random.default_rng(seed).integers, inputs first; r must lie in [0, 1). vLLM first takes the tokenizer's
  special tokens (num_special_tokens_to_add) off L_in; planner has no tokenizer and takes none off.
- arrivals: vllm/benchmarks/serve.py get_request. At rate inf every request is sent at t = 0; otherwise the gaps are
  numpy.random.gamma(shape=burstiness, scale=1 / (rate x burstiness)) after numpy.random.seed(seed) (burstiness 1,
  the default: exponential gaps, a Poisson process), summed, then scaled so that the last request goes out at
  num_prompts / rate.
- the client: an asyncio.Semaphore(max_concurrency) around each request; TTFT and latency count from when the
  request is sent (after the semaphore), the duration from the start of the run to the last reply.
- metrics: serve.py calculate_metrics. TPOT per request (latency - TTFT) / (output tokens - 1), over requests with
  more than one output token; ITL every gap between two tokens of a request; mean, median, std and percentiles by
  numpy (np.percentile's linear interpolation); an empty list counts as [0]. The saved result's keys
  (`--save-result`): completed, failed, duration, total_input_tokens, total_output_tokens, request_throughput,
  output_throughput, total_token_throughput, then mean_/median_/std_/p99_ + ttft|tpot|itl|e2el + _ms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil, floor, inf, isfinite, isnan
from typing import TYPE_CHECKING, Any

from planner.errors import PlannerInputError
from planner.estimator.capacity import Scheduler
from planner.estimator.performance import ReplicaTimer, Workload
from planner.estimator.simulate import MAX_OUTPUT_TOKENS, MAX_REQUESTS, Arrival, EngineRun, run_engine

if TYPE_CHECKING:
    import numpy

# vllm bench serve's defaults (vllm/benchmarks/datasets/datasets.py add_dataset_parser and the random dataset's
# options, serve.py --request-rate): 1,000 prompts of 1,024 + 128 tokens, all sent at once, seed 0.
DEFAULT_PROMPTS = 1000
DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 128
# The work one run may ask for (planner.estimator.simulate's caps: the simulator bounds every run's events)
MAX_PROMPTS = MAX_REQUESTS
# A closed loop replayed on the simulator: prompts a client, past the first wave's start (the loop's steady state
# is reached within a few cycles; the run's warm-up and drain are what a benchmark of this length sees)
CLOSED_LOOP_PROMPTS_PER_CLIENT = 10
# serve.py --metric-percentiles: "99" by default
PERCENTILE = 99


@dataclass(frozen=True)
class BenchmarkRun:
    """What `vllm bench serve` is asked to run (its random dataset)."""

    num_prompts: int = DEFAULT_PROMPTS
    request_rate: float = inf  # requests/s; inf: all at t = 0
    max_concurrency: int | None = None
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    range_ratio: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.num_prompts <= MAX_PROMPTS:
            raise PlannerInputError(f"--num-prompts: {self.num_prompts} must be from 1 to {MAX_PROMPTS:,} "
                                    "(the simulated run's cap)")
        if isnan(self.request_rate) or self.request_rate <= 0:
            raise PlannerInputError(f"--request-rate: {self.request_rate} must be above 0 requests/s, or inf")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise PlannerInputError(f"--max-concurrency: {self.max_concurrency} must be at least 1")
        for flag, value in (("--input-len", self.input_len), ("--output-len", self.output_len)):
            if value < 1:
                raise PlannerInputError(f"{flag}: {value} must be at least 1 token")
        if not (isfinite(self.range_ratio) and 0 <= self.range_ratio < 1):
            raise PlannerInputError(f"--random-range-ratio: {self.range_ratio} must be from 0 up to (not including) 1, "
                                    "as vLLM's random dataset takes it")
        if floor(self.input_len * (1 - self.range_ratio)) < 1:
            raise PlannerInputError(f"--random-range-ratio: {self.range_ratio} lets a prompt of --input-len "
                                    f"{self.input_len} have 0 tokens; lower the ratio or raise --input-len")
        if self.num_prompts * self.output_high > MAX_OUTPUT_TOKENS:
            raise PlannerInputError(f"--num-prompts x --output-len: up to {self.num_prompts * self.output_high:,} output "
                                    f"tokens, above the simulated run's cap of {MAX_OUTPUT_TOKENS:,}; ask for fewer")

    @property
    def input_bounds(self) -> tuple[int, int]:
        return floor(self.input_len * (1 - self.range_ratio)), ceil(self.input_len * (1 + self.range_ratio))

    @property
    def output_high(self) -> int:
        return max(ceil(self.output_len * (1 + self.range_ratio)), 1)

    @property
    def output_bounds(self) -> tuple[int, int]:
        return max(floor(self.output_len * (1 - self.range_ratio)), 1), self.output_high

    def arrivals(self) -> list[Arrival]:
        """The requests with their send times, as vllm bench serve draws them (the module docstring)."""
        import numpy as np

        rng = np.random.default_rng(self.seed)
        low, high = self.input_bounds
        inputs = rng.integers(low, high + 1, size=self.num_prompts)
        low, high = self.output_bounds
        outputs = rng.integers(low, high + 1, size=self.num_prompts)
        if self.request_rate == inf:
            times = [0.0] * self.num_prompts
        else:
            delays = np.random.RandomState(self.seed).gamma(1.0, 1.0 / self.request_rate, size=self.num_prompts)
            cumulative = np.cumsum(delays)
            times = (cumulative * (self.num_prompts / self.request_rate / cumulative[-1])).tolist()
        return [Arrival(t, int(p), int(o)) for t, p, o in zip(times, inputs, outputs)]


@dataclass(frozen=True)
class LatencyStats:
    """One metric over a run, in milliseconds, as serve.py reports it."""

    mean_ms: float
    median_ms: float
    std_ms: float
    p99_ms: float

    @classmethod
    def of(cls, seconds: numpy.ndarray | list[float]) -> LatencyStats:
        import numpy as np

        values = np.asarray(seconds if len(seconds) else [0.0], dtype=float) * 1000
        return cls(float(np.mean(values)), float(np.median(values)), float(np.std(values)),
                   float(np.percentile(values, PERCENTILE)))


@dataclass(frozen=True)
class BenchmarkResult:
    """A simulated `vllm bench serve` run: the figures it prints, plus what the simulation saw inside the engine."""

    run: BenchmarkRun
    completed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float  # req/s
    output_throughput: float  # tok/s
    total_token_throughput: float
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    preemptions: int
    peak_in_flight: int  # requests sent and not yet answered, at the most (the semaphore's bound)
    mean_batch: float  # requests the engine scheduled per step

    def to_dict(self) -> dict[str, Any]:
        """vLLM's saved-result keys (the module docstring), then the run's settings and the simulation's own."""
        data: dict[str, Any] = {
            "completed": self.completed, "failed": 0, "duration": self.duration_s,
            "total_input_tokens": self.total_input_tokens, "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput, "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput}
        for name in ("ttft", "tpot", "itl", "e2el"):
            stats: LatencyStats = getattr(self, name)
            data.update({f"mean_{name}_ms": stats.mean_ms, f"median_{name}_ms": stats.median_ms,
                         f"std_{name}_ms": stats.std_ms, f"p{PERCENTILE}_{name}_ms": stats.p99_ms})
        run = self.run
        data.update({
            "num_prompts": run.num_prompts, "request_rate": "inf" if run.request_rate == inf else run.request_rate,
            "burstiness": 1.0, "max_concurrency": run.max_concurrency, "random_input_len": run.input_len,
            "random_output_len": run.output_len, "random_range_ratio": run.range_ratio, "seed": run.seed,
            "simulated_preemptions": self.preemptions, "simulated_peak_in_flight": self.peak_in_flight,
            "simulated_mean_batch": self.mean_batch})
        return data


def run_benchmark(timer: ReplicaTimer, scheduler: Scheduler, run: BenchmarkRun) -> BenchmarkResult:
    """Replay `run` on one replica and measure it as vllm bench serve does."""
    return measure(run, run_engine(timer, scheduler, run.arrivals(), run.max_concurrency))


def closed_loop_run(timer: ReplicaTimer, scheduler: Scheduler, shape: Workload, concurrency: int,
                    range_ratio: float = 0.0) -> BenchmarkResult:
    """`concurrency` clients sending requests of `shape` back to back (`vllm bench serve --max-concurrency C` at rate
    inf; fixed lengths, or with `range_ratio` its random dataset's lengths around them), CLOSED_LOOP_PROMPTS_PER_CLIENT
    prompts a client, as many as a simulated run holds: where an engine's admission strays from the analytic loop's
    (closed_loop.admits_past_pool)."""
    run = BenchmarkRun(num_prompts=1, max_concurrency=concurrency, input_len=shape.prompt_tokens,
                       output_len=shape.output_tokens, range_ratio=range_ratio)
    prompts = min(CLOSED_LOOP_PROMPTS_PER_CLIENT * concurrency, MAX_PROMPTS, MAX_OUTPUT_TOKENS // run.output_high)
    return run_benchmark(timer, scheduler, replace(run, num_prompts=max(prompts, 1)))


def measure(run: BenchmarkRun, engine: EngineRun) -> BenchmarkResult:
    """serve.py's calculate_metrics over the simulated requests."""
    served = engine.served
    ttft = [r.first_token_s - r.sent_s for r in served]
    e2el = [r.finished_s - r.sent_s for r in served]
    tpot = [(e - t) / (r.arrival.output_tokens - 1) for r, t, e in zip(served, ttft, e2el) if r.arrival.output_tokens > 1]
    total_input = sum(r.arrival.prompt_tokens for r in served)
    total_output = sum(r.arrival.output_tokens for r in served)
    duration = engine.end_s
    steps = len(engine.step_ends_s)
    return BenchmarkResult(
        run=run, completed=len(served), duration_s=duration, total_input_tokens=total_input,
        total_output_tokens=total_output, request_throughput=len(served) / duration,
        output_throughput=total_output / duration, total_token_throughput=(total_input + total_output) / duration,
        ttft=LatencyStats.of(ttft), tpot=LatencyStats.of(tpot), itl=LatencyStats.of(inter_token_latencies(engine)),
        e2el=LatencyStats.of(e2el), preemptions=engine.preemptions, peak_in_flight=engine.peak_in_flight,
        mean_batch=engine.scheduled / steps if steps else 0.0)


def inter_token_latencies(engine: EngineRun) -> numpy.ndarray:
    """Every gap between two consecutive tokens of a request. Within a run of consecutive steps that emitted its
    tokens the gaps are those steps' durations, so each step's duration is repeated once per request that emitted
    a token in it and in the step before; a preemption leaves one gap spanning the steps between two runs."""
    import numpy as np

    ends = np.asarray(engine.step_ends_s, dtype=float)
    durations = np.diff(ends, prepend=0.0)
    starts = np.zeros(len(ends) + 1, dtype=np.int64)  # +1 at a run's second step, -1 past its last
    spanning: list[float] = []
    for request in engine.served:
        previous = None
        for first, last in request.token_steps:
            if previous is not None:
                spanning.append(float(ends[first] - ends[previous]))
            starts[first + 1] += 1
            starts[last + 1] -= 1
            previous = last
    repeats = np.cumsum(starts)[:-1]
    return np.concatenate([np.repeat(durations, repeats), np.asarray(spanning, dtype=float)])


__all__ = ["BenchmarkResult", "BenchmarkRun", "LatencyStats", "MAX_OUTPUT_TOKENS", "MAX_PROMPTS", "closed_loop_run",
           "measure", "run_benchmark"]
