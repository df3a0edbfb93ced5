"""A closed loop in steady state: C clients, each sending its next request as soon as its last one is answered
(`vllm bench serve --max-concurrency C` at an unlimited request rate), against one replica under continuous batching
with chunked prefill (the scheduler of planner.estimator.capacity and planner.estimator.simulate).

The engine runs R = min(C, max_num_seqs, the requests of P + N tokens its KV pool holds) of them; the other C - R wait
in its queue (a closed loop has no other queue). That is SGLang's admission from 0.5.22 (a fixed-length request
reserves its whole output) and TensorRT-LLM's (its blocks to completion); vLLM's admission by prompt blocks with preemption, and SGLang's before 0.5.22 (running
outputs counted at a decaying ratio, then retractions), are replayed by the simulator only (planner.estimator.simulate):
where the pool caps the clients their TPOT is above this loop's (admits_past_pool says when; `planner perf` then adds
the simulated run). A request lives its prefill step and N - 1 decode steps, and its
client's next request is scheduled in the step after its last: each client repeats itself every N steps, in step
count, whatever the steps last. The clients start together, so their prompts stay packed into consecutive steps,
filled in turn (FCFS) to the token budget B beside the requests decoding: each prefilling request takes its prompt
in place of its decode token, so a full step carries F = (B - R) P / (P - 1) prompt tokens (at most B), and
k = ceil(R P / F) steps of the N carry prompts, the last the rest; the other N - k steps decode all R. When k exceeds
N the prompts bound the loop and it repeats every k steps instead.
  cycle        T = the k prompt-carrying steps + (cycle steps - k) s_decode
  throughput   X = R / T requests/s, X N output tokens/s
  E2E          C / X (Little's law on the loop: every client always has one request out)
  TTFT         its prefill step (steps, for a prompt cut into chunks), after (C - R) / X in the queue (Little's
               law on the queue)
  TPOT         (E2E - TTFT) / (N - 1): the cycle's other steps, prompt-carrying ones of the other clients included;
               the mean ITL is the same (every gap is one step).

When the requests' lengths vary (random lengths, a dataset's, real traffic) they finish at scattered steps, and on an
engine that runs a prefill batch alone before any decode (SGLang: the timer's mixes_prefill False) the cycle is the
N - 1 decode steps of the R running requests plus a prefill batch after each decode step that saw an arrival: with
arrivals Poisson at a = R / (N - 1) a step, (N - 1)(1 - e^-a) batches of R over that many requests, each its prompts'
tokens alone, cut at the token budget (bench/SPEED_PROTOCOL.md, the SGLang-prefill amendment). Under DP attention
the k prompts of a batch are dealt round robin over the groups, each group cuts its own at B / dp tokens a pass, so
the batch takes ceil(ceil(k / dp) P / (B / dp)) passes, each shared with the R (1 - g / dp) requests of the groups
not prefilling (g = min(dp, ceil(k))), none under the decode graph: of the N - 1 tokens a request gains, M (1 - g / dp)
come out of the M shared passes and the rest out of graphed decode steps (the DP-attention step amendment and the DP
prefill amendment). SGLang's prefill delayer holds each batch some passes after its first arrival (_held_passes),
so batches are fewer and larger, and the hold is waited in the TTFT. With fixed lengths such an engine without DP
attention (runs_prompts_apart) runs every prompt it can admit before it decodes again, so its clients stay in
lockstep: a cycle is the k prefill passes of the R prompts alone, then N - 1 decode passes of all R; request i's
first token comes at the end of the pass holding its prompt's last token, ceil((i + 1) P / B), the passes up to it in
its TTFT, the later ones in its TPOT (the prefill-first amendment). Under DP attention fixed lengths keep the packed
cycle, each prompt-carrying step one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from math import ceil, exp, floor

from planner.errors import PlannerInputError
from planner.estimator.capacity import Scheduler, StepTimes, step_times
from planner.estimator.engines.base import (
    BlocksToCompletion,
    OutputReservation,
    PrefillDelayer,
)
from planner.estimator.performance import ReplicaTimer, Workload


@dataclass(frozen=True)
class ClosedLoop:
    concurrency: int  # clients (C)
    running: int  # requests the engine runs at once (R)
    # what holds the running requests below C: "max_num_seqs" (SGLang's "max_running_requests" or "state slots"),
    # "kv pool", or empty
    limit: str
    prefill_steps: int  # of each cycle, the steps that carry prompt tokens (k)
    cycle_steps: int  # steps in which every client has one request answered
    prefill_step_s: float
    decode_step_s: float
    ttft_s: float
    tpot_s: float
    itl_s: float  # mean
    e2e_s: float
    queue_s: float  # of the TTFT, waiting for the engine to run it
    requests_per_s: float
    output_tokens_per_s: float
    kv_tokens_peak: int  # the running requests at their last token, in whole blocks
    pool_tokens: int
    # SGLang's prefill delayer: the passes a prefill batch waits after its first arrival, and the prompts it then
    # carries (0 and 0 without the delayer)
    prefill_hold_steps: float = 0.0
    prefill_batch_prompts: float = 0.0


def closed_loop(timer: ReplicaTimer | StepTimes, scheduler: Scheduler, shape: Workload, concurrency: int,
                lengths_vary: bool = False, recv_interval: int = 1,
                delayer: PrefillDelayer | None = None) -> ClosedLoop:
    """The steady state of `concurrency` clients sending requests of `shape` back to back (the module docstring);
    `lengths_vary`: the requests' lengths scatter around `shape`'s means, so they finish at scattered steps;
    `recv_interval`: SGLang's `--scheduler-recv-interval`, the decode steps between its polls for new requests;
    `delayer`: SGLang's prefill delayer, which holds those polls' prefills back under DP attention."""
    if concurrency < 1:
        raise PlannerInputError(f"--concurrency: {concurrency} must be at least 1 client")
    if recv_interval < 1:
        raise PlannerInputError(f"--scheduler-recv-interval: {recv_interval} must be at least 1 decode step")
    prompt, output = shape.prompt_tokens, shape.output_tokens
    if prompt + output > scheduler.max_model_len:
        raise PlannerInputError(f"--concurrency: a request of {prompt:,} + {output:,} tokens is longer than "
                                f"max-model-len {scheduler.max_model_len:,}")
    held = scheduler.held_tokens(prompt + output)
    pool_holds = scheduler.pool_tokens // held
    if pool_holds < 1:
        raise PlannerInputError(f"--concurrency: the KV pool ({scheduler.pool_tokens:,} tokens) cannot hold one "
                                f"request of {prompt + output:,} tokens")
    budget = scheduler.max_num_batched_tokens
    # vLLM requires max_num_batched_tokens >= max_num_seqs, so every running request decodes each step
    seqs = min(scheduler.max_num_seqs or budget, budget)
    running = min(concurrency, seqs, pool_holds)
    limit = "" if running == concurrency else ("kv pool" if pool_holds < seqs else scheduler.seqs_limit)
    times = step_times(timer)
    if delayer is not None and not (lengths_vary and times.dp > 1 and not times.mixes_prefill):
        raise PlannerInputError("--prefill-delayer: SGLang's delayer holds prefills back across DP-attention groups; "
                                "time it with --engine sglang --dp D (D > 1) --concurrency C --varying-lengths, or "
                                "drop it")
    # a step full of prompt tokens: the budget less the requests decoding beside them, each prefilling request
    # taking its prompt tokens in place of its decode token (F = (B - R) P / (P - 1)), never more than the budget
    # (an engine that runs prompts apart gives them the whole budget: prompt_room)
    full = min(budget, times.decode_room(budget, running) * prompt / (prompt - 1)) if prompt > 1 else budget
    full = max(full, 1.0)
    full_steps = floor(running * prompt / full)
    rest = running * prompt - full_steps * full  # FCFS fills the steps in turn: the last one takes the rest
    prefill_steps = full_steps + (1 if rest > 0 else 0)
    own_steps = ceil(prompt / full)  # a prompt longer than a full step's tokens is cut into chunks
    cycle_steps = max(own_steps + output - 1, prefill_steps)
    context = prompt + output / 2  # the decoding requests' mean context over their N - 1 steps

    def carrying(tokens: float) -> float:
        """A step with `tokens` prompt tokens beside the running requests not prefilling (at least one is)."""
        prefilling = min(running, max(1.0, tokens / prompt))
        return times.mean_step(running - prefilling, context, tokens, prompt)

    decode_s = times.mean_step(running, context, 0, prompt)
    waited_s = hold = prompts = 0.0
    if lengths_vary and not times.mixes_prefill and output > 1:
        # scattered arrivals, each poll for new requests that found one followed by a prefill batch of its arrivals:
        # alone, or under DP attention one shared pass in which the other groups decode (their requests gain a token
        # in it); SGLang polls every recv_interval decode steps (sglang/srt/managers/scheduler_recv_skipper.py), and a
        # request waits half a poll's steps on average, in its TTFT (the batch stays R: the wait is short of a cycle)
        decode_steps = output - 1
        polls = decode_steps / recv_interval
        arrivals = running / polls
        seen = 1 - exp(-arrivals)  # of the polls, those that find an arrival
        rate = running / decode_steps  # arrivals a pass
        if delayer is not None:  # each batch waits `hold` passes after its first arrival, gathering later ones
            hold = _held_passes(delayer, rate, times.dp, running, scheduler.max_num_seqs,
                                _group_budget(budget, times.dp), prompt)
        # a batch holds at most the running requests' prompts: at least one batch a cycle
        batches = max(1.0, polls / (1 / seen + hold / recv_interval))
        waited_s = ((recv_interval - 1) / 2 + (hold + rate * hold ** 2 / 2) / (1 + rate * hold)) * decode_s
        prompts = running / batches
        if times.dp > 1:
            # every group chunks its own prompts (dealt round robin) at its share of the budget; batches whose passes
            # outlast the gap between them share passes, as one batch of their prompts
            chunks = _group_chunks(prompts, times.dp, prompt, budget)
            while batches > 1 and batches * chunks > decode_steps:
                batches = max(1.0, decode_steps / chunks)
                prompts = running / batches
                merged = _group_chunks(prompts, times.dp, prompt, budget)
                if merged == chunks:  # their passes now fill the decode steps
                    break
                chunks = merged
            groups = min(times.dp, ceil(prompts))  # those with a prompt prefill, the others decode
            # the running requests spread over the groups, R / dp each, but never the batch's own prompts
            shared = min(running * (1 - groups / times.dp), running - prompts)
        else:
            chunks, groups, shared = ceil(prompts * prompt / budget), None, 0.0
        tokens = prompts * prompt
        passes = batches * chunks
        prefill_s = times.mean_step(shared, context, tokens / chunks, prompt, prompts=groups)
        prefill_steps, own_steps = ceil(passes), chunks
        graphed = decode_steps - passes * shared / running
        cycle_steps = ceil(graphed) + prefill_steps
        cycle_s = graphed * decode_s + passes * prefill_s
        first_s = own_steps * prefill_s
    elif times.runs_prompts_apart:
        # lockstep: the prompts' passes alone, in FCFS order at `full` tokens a pass, then every request's N - 1
        # decode passes; each request's first token at the end of the pass holding its prompt's last token
        pass_s = [times.mean_step(0, context, full, prompt)] * full_steps
        if rest > 0:
            pass_s.append(times.mean_step(0, context, rest, prompt))
        ends = list(accumulate(pass_s))
        prompts_s = ends[-1]
        prefill_s = prompts_s / prefill_steps
        cycle_steps = prefill_steps + output - 1
        cycle_s = prompts_s + (output - 1) * decode_s
        first_s = sum(ends[ceil((i + 1) * prompt / full) - 1] for i in range(running)) / running
    else:
        prompts_s = full_steps * carrying(full) + (carrying(rest) if rest > 0 else 0.0)
        prefill_s = prompts_s / prefill_steps
        cycle_s = prompts_s + (cycle_steps - prefill_steps) * decode_s
        first_s = own_steps * prefill_s
    # a client's cycle: its request's wait for its prefill (a poll, the delayer's hold), then the engine's cycle
    throughput = running / (cycle_s + waited_s)
    e2e = concurrency / throughput
    queue = (concurrency - running) / throughput
    ttft = queue + waited_s + first_s
    # E2E - TTFT is the cycle less the time to its first token: computed so, the queue's seconds do not round into it
    tpot = (cycle_s - first_s) / (output - 1) if output > 1 else 0.0
    return ClosedLoop(
        concurrency=concurrency, running=running, limit=limit, prefill_steps=prefill_steps, cycle_steps=cycle_steps,
        prefill_step_s=prefill_s, decode_step_s=decode_s, ttft_s=ttft, tpot_s=tpot, itl_s=tpot, e2e_s=e2e,
        queue_s=queue, requests_per_s=throughput, output_tokens_per_s=throughput * output,
        kv_tokens_peak=running * held, pool_tokens=scheduler.pool_tokens, prefill_hold_steps=hold,
        prefill_batch_prompts=prompts if delayer is not None else 0.0)


def _group_chunks(prompts: float, dp: int, prompt: int, budget: int) -> int:
    """The passes a batch of `prompts` prompts takes under DP attention: its busiest group's, at its share of the
    budget (SGLang's chunked_prefill_size // dp_size)."""
    return ceil(ceil(prompts / dp) * prompt / _group_budget(budget, dp))


def _group_budget(budget: int, dp: int) -> int:
    """A DP group's step budget: SGLang's chunked_prefill_size // dp_size, at least a token."""
    return max(1, budget // dp)


def _held_passes(delayer: PrefillDelayer, rate: float, dp: int, running: int, slots: int | None, group_budget: int,
                 prompt: int) -> float:
    """The passes SGLang's prefill delayer holds a batch after its first arrival, arrivals coming at `rate` a pass and
    dealt round robin over the `dp` groups: until every group holds one, at most max_passes - 1; then at once, or until
    each group holds enough for the fullest to have room for the largest prefill batch a group has run (the prompts
    its chunk touches, at most its share of the clients that arrived together at the start), less the slots a group
    keeps free when the running requests are capped below them, or until all `running` are held (bench/
    SPEED_PROTOCOL.md, the DP prefill amendment and the correction on a batch holding at most the loop's clients)."""
    most = delayer.max_passes - 1
    if running < dp:  # fewer clients than groups: some group never holds one
        return float(most)
    every_group = (dp - 1) / rate
    if every_group >= most or not delayer.waits_for_room:
        return min(every_group, most)
    largest_batch = min(ceil(running / dp), 1 + ceil((group_budget - 1) / prompt))
    free = (slots - running) / dp if slots is not None else largest_batch
    # the room comes with the arrivals that fill the groups, or at the latest with every running request held
    roomy = (min(dp * max(1, ceil(largest_batch - floor(free))), running) - 1) / rate
    return min(roomy, most) if delayer.bounds_room_wait else roomy


def admits_past_pool(scheduler: Scheduler, loop: ClosedLoop, lengths_undrawable: bool) -> bool:
    """Whether the engine admits more of the loop's requests than its pool holds to their end, then preempts or
    retracts some, where the pool caps the clients: vLLM (a prompt's blocks admit it) and SGLang before 0.5.22 (the
    running outputs counted at its new-token ratio). There this loop, which reserves whole outputs as SGLang from 0.5.22
    and TensorRT-LLM do, is not the run, and the simulator replays it (benchmark.closed_loop_run), unless
    `lengths_undrawable`: the lengths vary by a distribution the replay cannot draw (a dataset's, real traffic's; it
    draws fixed lengths or vLLM's random dataset)."""
    rule = scheduler.reservation
    whole = isinstance(rule, BlocksToCompletion) or (isinstance(rule, OutputReservation) and rule.fixed_length_whole)
    return not whole and loop.limit == "kv pool" and not lengths_undrawable


__all__ = ["ClosedLoop", "admits_past_pool", "closed_loop"]
