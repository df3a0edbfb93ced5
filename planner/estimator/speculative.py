"""Speculative decoding with the checkpoint's own multi-token-prediction (MTP) module, timed as the engines run one
cycle (bench/SPEED_PROTOCOL.md, the speculative-decoding amendment).

SGLang speculative/eagle_worker_v2.py @ v0.5.23, with a chain draft (--speculative-eagle-topk 1): `draft_forward`
runs speculative_num_steps - 1 forwards of the draft over one token per request, the target verifies
num_draft_tokens = steps + 1 tokens per request, and `draft_extend` runs the draft over the same steps + 1 tokens per
request; vLLM's MTP proposer has the same three parts. The draft is the MTP layer the checkpoint ships, on the
target's tensor-parallel ranks, sharing its embedding and lm_head. A request gains the acceptance length L tokens a
cycle on average (the bonus token included: SGLang's "accept len", vLLM's "Mean acceptance length"), so
  TPOT = cycle / L        output tokens/s = batch x L / cycle
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from math import isfinite
from typing import ClassVar

from planner.errors import PlannerInputError
from planner.estimator.engines.base import EngineSettings
from planner.estimator.engines.sglang import SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS
from planner.estimator.performance import ForwardTime, ReplicaPerformance, ReplicaTimer, Step, Workload, timer_performance
from planner.model.families.core import Architecture, Layer

SPECULATIVE_METHODS = ("mtp",)
# the engines whose MTP drafts planner plans (plan/search.py) and exports (render/export.py)
SPECULATIVE_ENGINES = ("sglang", "vllm")
# the MTP module's tensors by module: DeepSeek / GLM `mtp0.*`, Qwen3-Next / Qwen3.5 `mtp.layers.0.*`
_MODULE_INDEX = re.compile(r"^mtp(?:\.layers\.)?(\d+)\.")
_SHARED_WITH_TARGET = ("embedding", "lm_head")  # the engines point the draft's at the target's (one copy in memory)


@dataclass(frozen=True)
class Speculation:
    method: str  # "mtp": the checkpoint's multi-token-prediction module drafts
    draft_tokens: int  # s: tokens the draft proposes a cycle (SGLang --speculative-num-steps, vLLM num_speculative_tokens)
    acceptance_length: float  # L: tokens a request gains a cycle, the bonus token included (1 <= L <= s + 1)

    @property
    def name(self) -> str:
        """As plans print it: `MTP 3 tokens, acceptance length 2.65`."""
        return (f"{self.method.upper()} {self.draft_tokens} token{'s' * (self.draft_tokens > 1)}, acceptance length "
                f"{self.acceptance_length:g}")


def speculation(method: str, draft_tokens: int, acceptance_length: float) -> Speculation:
    """A speculative setting, checked: every refusal names its flag."""
    if method not in SPECULATIVE_METHODS:
        raise PlannerInputError(f"--speculative: {method!r} is not modelled; use one of {', '.join(SPECULATIVE_METHODS)} "
                                "(EAGLE-3 and n-gram drafts are not modelled yet)")
    if not 1 <= draft_tokens <= 16:
        raise PlannerInputError(f"--speculative-tokens: {draft_tokens} must be 1 to 16 draft tokens a cycle")
    if not (isfinite(acceptance_length) and 1 <= acceptance_length <= draft_tokens + 1):
        raise PlannerInputError(f"--acceptance-length: {acceptance_length} must be between 1 and {draft_tokens + 1} "
                                "(--speculative-tokens + the bonus token): the mean tokens a request gains a cycle, as "
                                "the engine logs it (SGLang 'accept len', vLLM 'Mean acceptance length')")
    return Speculation(method, draft_tokens, acceptance_length)


def speculative_running_cap(settings: EngineSettings, cap: int | None) -> int | None:
    """The requests an MTP replica under `settings` runs at once, given the cap its plan sets (workload.concurrency,
    exported as the engine's flag) or None: SGLang's own default with speculative decoding when neither the plan nor
    the server's --max-running-requests sets one (its share a DP worker is the budget's running requests)."""
    if cap is None and settings.name == "sglang" and settings.max_running_requests is None:
        return SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS
    return cap


def draft_architecture(arch: Architecture) -> Architecture:
    """The checkpoint's MTP module as a one-layer model: its decoder layer (with the model's attention kind and MLP)
    and its projection and norms, the target's embedding and lm_head."""
    tensors = tuple(t for t in arch.unloaded if t.role not in _SHARED_WITH_TARGET)
    modules = {int(m.group(1)) for t in tensors if (m := _MODULE_INDEX.match(t.name))}
    if not tensors or not modules:
        raise PlannerInputError(f"--speculative mtp: {arch.name}'s checkpoint ships no MTP module (planner knows MTP "
                                "modules of DeepSeek-V3-style, GLM-4.5+ and Qwen3-Next / Qwen3.5 checkpoints)")
    if len(modules) > 1:
        raise PlannerInputError(f"--speculative mtp: {arch.name} ships {len(modules)} MTP modules; a chain of several "
                                "is not modelled yet")
    attention = next(layer.attention for layer in reversed(arch.layers) if layer.attention.kind not in ("linear", "mamba"))
    layer = Layer(attention, tensors, is_moe=any(t.role == "expert" for t in tensors))
    return replace(arch, name=f"{arch.name} MTP", layers=(layer,), unloaded=(), multimodal=())


def scenario_speculation(arch: Architecture, draft_tokens: int | None, acceptance_length: float | None
                         ) -> tuple[Speculation, str]:
    """A scenario's search.draft_tokens and search.acceptance_length for `arch`'s MTP module, and where L comes from
    ("given", or the model family's published figure in catalogs/speculative.yaml with its source)."""
    from planner.catalog.load import load_acceptance

    try:
        draft_architecture(arch)
    except PlannerInputError as exc:
        raise PlannerInputError(f"search.speculative: {str(exc).removeprefix('--speculative mtp: ')}; remove mtp "
                                "from search.speculative") from None
    if acceptance_length is not None:
        tokens = draft_tokens or 1
        if acceptance_length > tokens + 1:
            raise PlannerInputError(f"search.acceptance_length: {acceptance_length:g} must be at most draft_tokens + 1 "
                                    f"= {tokens + 1} (the bonus token included); give search.draft_tokens")
        return Speculation("mtp", tokens, acceptance_length), "given"
    figure = next((f for f in load_acceptance() if f.name == arch.model_type), None)
    if figure is None:
        raise PlannerInputError(f"search.acceptance_length: planner knows no published MTP acceptance length for "
                                f"{arch.name} ({arch.model_type}); give search.acceptance_length (the mean tokens a "
                                "request gains a cycle, as the engine logs it) and search.draft_tokens")
    if draft_tokens not in (None, figure.draft_tokens):
        raise PlannerInputError(f"search.draft_tokens: the published acceptance length of {arch.model_type} "
                                f"({figure.acceptance_length:g}) was measured at {figure.draft_tokens} draft tokens, not "
                                f"{draft_tokens}; give search.acceptance_length for {draft_tokens}, or remove "
                                "search.draft_tokens")
    return (Speculation("mtp", figure.draft_tokens, figure.acceptance_length),
            f"published for {arch.model_type} ({figure.as_of}): {figure.source.split()[0]}")


def with_draft(arch: Architecture, draft_tokens: int) -> Architecture:
    """The target with its MTP module's layer after its own, proposing `draft_tokens` a cycle: what the engines hold
    with the draft on (Architecture.draft_tokens sizes their speculative scratch). The draft's
    weights load before the KV pool is sized, and one pool holds both models' cache a token: SGLang
    model_executor/pool_configurator.py @ v0.5.23 adds the draft's layers to the target's cell size
    (draft_num_layers x the target's per-layer bytes); vLLM v1/worker/gpu/attn_utils.py @ v0.34.0 get_kv_cache_spec
    gives every attention layer, the draft's (is_draft) too, its spec in the one KV cache config. The draft shares the
    target's embedding and lm_head."""
    return replace(arch, layers=arch.layers + draft_architecture(arch).layers, draft_tokens=draft_tokens)


@dataclass(frozen=True)
class SpeculativeCycle:
    """One cycle at a batch, in seconds: the target's verify and the draft's forwards (the cycle is their sum)."""

    verify_s: float
    draft_s: float
    verify: ForwardTime  # the verify's slowest stage, term by term

    @property
    def cycle_s(self) -> float:
        return self.verify_s + self.draft_s


@dataclass(frozen=True)
class SpeculativeTimer:
    """A replica's steps with every decode step a speculative cycle: the timer the capacity model
    (planner.estimator.capacity.StepTimes) runs an MTP replica with, as it runs a ReplicaTimer. A decoding request
    gains `tokens_per_step` (L) tokens a cycle and takes `budget_per_decode` (s + 1) tokens of the step's token
    budget: vLLM's scheduler schedules a running request's num_tokens_with_spec, its draft tokens with it
    (vllm/v1/core/sched/scheduler.py @ v0.34.0, Scheduler.schedule)."""

    target: ReplicaTimer
    draft: ReplicaTimer  # without the engine's per-step cost: its forwards run inside the target's step
    speculation: Speculation

    @property
    def pp(self) -> int:
        return self.target.pp  # 1: speculative decoding is planned on one pipeline stage (plan/search.py)

    @property
    def tokens_per_step(self) -> float:
        return self.speculation.acceptance_length

    @property
    def mixes_prefill(self) -> bool:
        return self.target.mixes_prefill

    @property
    def runs_prompts_apart(self) -> bool:
        return self.target.runs_prompts_apart

    @property
    def dp(self) -> int:
        return self.target.dp

    @property
    def budget_per_decode(self) -> int:
        return self.speculation.draft_tokens + 1

    @cached_property
    def _verifier(self) -> ReplicaTimer:
        """The target as it verifies: under a graph even where its prefill runs eagerly."""
        return self.target.graphed()

    def cycle(self, batch: float, context: float) -> SpeculativeCycle:
        """`batch` requests at a mean `context`: each verifies s + 1 tokens (its cache read once, every token's
        logits computed), the draft runs s - 1 one-token forwards and one over the s + 1 tokens."""
        return self.step(Step(batch, context))

    def step(self, shape: Step | tuple[float, float, int, float, int]) -> SpeculativeCycle:
        """One engine step: a cycle of its decoding requests (as `cycle`), with the step's prompt tokens computed in
        the target's verify pass beside the drafted ones (a pass then run eagerly where the engine runs prefill
        eagerly), or, where the engine runs prompts apart (ReplicaTimer.prompts_apart), in a pass of their own before
        the cycle. Prefill is timed as without speculation, by the target alone: the draft's pass over new prompt
        tokens is not counted (as speculative_performance times prefill)."""
        batch, context, prompt_tokens, positions, prompt_seqs = shape
        if not batch:  # no request decodes: the target prefills alone, no draft runs
            verify_s, verify, _ = self.target.forward(Step(0, context, prompt_tokens, positions, prompt_seqs))
            return SpeculativeCycle(verify_s, 0.0, verify)
        if self.target.prompts_apart(shape):
            prompts_s = self.target.forward_s(Step(0, context, prompt_tokens, positions, prompt_seqs))
            cycle = self.step(Step(batch, context))
            return SpeculativeCycle(prompts_s + cycle.verify_s, cycle.draft_s, cycle.verify)
        drafted = batch * self.speculation.draft_tokens
        wide = Step(batch, context, drafted, drafted * context, drafted)
        verifier = self.target if prompt_tokens else self._verifier
        verify_s, verify, _ = verifier.forward(Step(batch, context, drafted + prompt_tokens,
                                                    drafted * context + positions, drafted + prompt_seqs))
        draft_s = ((self.speculation.draft_tokens - 1) * self.draft.forward_s(Step(batch, context))
                   + self.draft.forward_s(wide))
        return SpeculativeCycle(verify_s, draft_s, verify)

    def step_s(self, shape: Step | tuple[float, float, int, float, int]) -> float:
        """The step's seconds (ReplicaTimer.step_s's contract)."""
        return self.step(shape).cycle_s


def speculative_timer(target: ReplicaTimer, draft: ReplicaTimer, spec: Speculation) -> SpeculativeTimer:
    """`draft`: the draft architecture's timer on the target's layout, engine and GPU."""
    draft = draft.graphed()
    return SpeculativeTimer(target, replace(draft, hw=replace(draft.hw, step_overhead_s=0.0)), spec)


def served_timer(timer_of: Callable[[Architecture], ReplicaTimer], arch: Architecture,
                 spec: Speculation | None) -> ReplicaTimer | SpeculativeTimer:
    """The timer of a replica serving `arch` (`timer_of`: a model's timer on the replica's GPUs, layout, engine and
    constants): its steps, and with speculative decoding its cycles of the target and the checkpoint's MTP module
    on the same layout. The one rule of a replica's timer with or without MTP, for the search, the fleet, `planner
    perf` and `planner simulate`."""
    target = timer_of(arch)
    return target if spec is None else speculative_timer(target, timer_of(draft_architecture(arch)), spec)


@dataclass(frozen=True)
class TokenSteps:
    """An MTP replica as the simulator (planner.estimator.simulate) runs it: in token steps, each decoding request
    gaining one token a step of cycle / L seconds (the cycle's mean gain of L tokens spread evenly over it), a step
    carrying prompt tokens taking their cost in the verify pass besides, and every decoding request taking s + 1
    tokens of the step's budget. A request's TPOT and the KV it holds over time are the cycles'; its TTFT is short
    of the engine's by up to (1 - 1 / L) of a cycle for each of its prompt's chunks (the chunk rides a whole cycle
    in the engine, 1 / L of one here)."""

    timer: SpeculativeTimer
    tokens_per_step: ClassVar[float] = 1.0

    @property
    def pp(self) -> int:
        return self.timer.pp

    @property
    def budget_per_decode(self) -> int:
        return self.timer.budget_per_decode

    @property
    def mixes_prefill(self) -> bool:
        return self.timer.mixes_prefill

    @property
    def runs_prompts_apart(self) -> bool:
        return self.timer.runs_prompts_apart

    def step_s(self, shape: Step | tuple[float, float, int, float, int]) -> float:
        batch, context, prompt_tokens, _, _ = shape
        decode_s = self.timer.step_s((batch, context, 0, 0.0, 0)) if batch else 0.0
        prompt_s = self.timer.step_s(shape) - decode_s if prompt_tokens else 0.0
        return decode_s / self.timer.tokens_per_step + prompt_s


def token_steps(timer: ReplicaTimer | SpeculativeTimer) -> ReplicaTimer | TokenSteps:
    """`timer` as the simulator steps it: a replica's own steps, or an MTP replica's token steps."""
    return TokenSteps(timer) if isinstance(timer, SpeculativeTimer) else timer


def speculative_performance(timer: SpeculativeTimer, batch: int, workload: Workload
                            ) -> tuple[ReplicaPerformance, SpeculativeCycle]:
    """timer_performance with every decode step a speculative cycle gaining L tokens a request."""
    plain = timer_performance(timer.target, batch, workload)
    output = workload.output_tokens
    cycle = timer.cycle(batch, workload.prompt_tokens + output // 2)
    per_token_s = cycle.cycle_s / timer.speculation.acceptance_length
    total_s = plain.batch_prefill_s + (output - 1) * per_token_s
    others_prefill_s = plain.tpot_s - plain.decode_step_s  # other requests' prefills, spread over the output
    return replace(plain, decode_step_s=cycle.cycle_s, tpot_s=per_token_s + others_prefill_s,
                   output_tokens_per_s=batch * output / total_s, requests_per_s=batch / total_s,
                   decode_bound=cycle.verify.bound, decode=cycle.verify), cycle


__all__ = ["SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS", "SPECULATIVE_ENGINES", "SPECULATIVE_METHODS", "Speculation", "SpeculativeCycle", "SpeculativeTimer",
           "TokenSteps", "draft_architecture", "scenario_speculation", "served_timer", "speculation",
           "speculative_performance", "speculative_running_cap", "speculative_timer", "token_steps", "with_draft"]
