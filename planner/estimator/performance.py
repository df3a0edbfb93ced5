"""Serving speed of one replica at a batch: prefill, decode step, TTFT, TPOT, tokens/s and requests/s.

The model follows the mechanisms, so it carries over to models and GPUs it was never fitted to; the
only fitted numbers are the efficiency factors in catalogs/performance.yaml, each entry naming the
measurements it was fitted to (bench/throughput_accuracy.py prints predicted against measured).

One forward pass of one pipeline stage, on one tensor-parallel rank:
  memory   = weight bytes read / (HBM bandwidth x memory efficiency)
             + KV bytes read / (HBM bandwidth x the attention kernel's read efficiency)
             every read efficiency at most the generation's read ceiling (the fraction of the datasheet
             bandwidth streaming benchmarks reach on its GPUs, catalogs/performance.yaml)
             weights: the stage's block tensors as that rank holds them, plus the lm_head on the last
             stage (the embedding is a row lookup, the vision tower idle while decoding text); a MoE
             layer reads only the experts its tokens touch: of E experts with k picked per token,
             t tokens touch E (1 - (1 - k/E)^t) on average when routing is uniform (what the
             routers' load-balancing losses aim for);
             KV: what each sequence holds at its context (planner.estimator.memory), read once per step,
             paged attention (full, sliding) at the generation's kv read efficiency and MLA's latent cache at
             its own (MLA decode kernels score every head against one shared latent: other kernels)
  compute  = FLOPs / (dense tensor TFLOPS x compute efficiency): 2 per weight of every matmul a token
             passes through (k of E experts), and attention 2 x heads x (d_k + d_v) per attended
             position per layer (PaLM, Chowdhery et al. 2022, appendix B: 2N + 4 L H Q T per token);
             tensors stored in fewer than 16 bits run at the precision's tensor-core rate where the
             GPU has one (W8A8 / W4A4), everything else at the 16-bit rate (weight-only kernels
             dequantize to 16 bits)
  fixed    = GPU time per layer per forward, counted in cycles of the GPU's boost clock (the small
             kernels and the gaps between kernels are latency-bound), per expert a MoE layer holds (the
             fused MoE kernels are sized for all E experts: align/pad each expert's tokens to the tile,
             a grouped-GEMM grid over tokens x k + E x (tile - 1) rows), and once per step on the last
             stage the engine's own work (the step's graph launch, sampling, scheduling), per engine
  TP       = 2 all-reduces of the activations per layer (Megatron-LM, Shoeybi et al. 2019, section 3),
             each a ring: 2 (tp-1) steps of (link latency + bytes/tp / (one-way link bandwidth x
             efficiency)) (Thakur et al. 2005, "Optimization of collective communication operations
             in MPICH"; NCCL's bus bandwidth, nccl-tests doc/PERFORMANCE.md)
  stage    = max(memory, compute) + fixed + TP   (the fixed cost is GPU time, so it adds to the work:
             graph-replaying engines launch nothing per kernel, and llama.cpp's launches run ahead of
             the GPU, ggml-org/llama.cpp PR 6766)
Pipeline parallelism splits the batch into min(batch, pp) microbatches; all of them advance one step in
max(sum of stage times + activation hand-offs, microbatches x slowest stage): with fewer microbatches
than stages, stages wait (the bubble).

A replica serving B concurrent requests of P prompt and N output tokens goes, per request generation,
through B prefills (P tokens each, attention over P(P+1)/2 positions, logits for the last one) and N-1
decode steps at the mean context P + N/2:
  output tokens/s = B N / cycle,   requests/s = B / cycle,   cycle = prefills + (N-1) decode steps
  TPOT = decode step + the other B-1 requests' prefills, spread over a request's N-1 steps
         (continuous batching interleaves them into its decode)
  TTFT = the request's own prefill (no queueing)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache, cached_property, lru_cache
from math import ceil, prod
from pathlib import Path
from typing import Callable, Literal, NamedTuple


from planner.model.architecture import Architecture, Attention, Tensor
from planner.catalog.load import Catalog, Gpu, Precision, bounded, catalog_dir, catalog_record, read_yaml
from planner.errors import PlannerInputError
from planner.estimator.layout import model_kv_heads, pipeline_stages, shard_shape, tied_lm_head
from planner.estimator.memory import Request, attention_bytes_per_token, estimate_memory
from planner.model.precision import UNQUANTIZED_BITS, resolve_kv_dtype, resolve_precision, tensor_bytes
from planner.units import GB, MAX_CONTEXT

US = 1e-6
TFLOPS = 1e12
# Activations and all-reduce payloads travel in the model's 16-bit dtype.
ACTIVATION_BYTES = UNQUANTIZED_BITS // 8
# Megatron tensor parallelism: one all-reduce after attention's o_proj, one after the MLP's down_proj.
ALLREDUCES_PER_LAYER = 2
# Roles of the 2-D tensors a token is multiplied through (embeddings are row lookups, norms elementwise).
MATMUL_ROLES = ("linear", "expert", "router", "lm_head")

DecodeBound = Literal["memory", "compute", "overhead", "communication"]


# ---------------------------------------------------------------------------------------------
# The catalog of efficiency factors


@dataclass(frozen=True, kw_only=True)
class GenerationEfficiency:
    """Achievable fractions of a GPU generation's datasheet peaks."""

    name: str
    memory_efficiency: float = bounded(gt=0, le=1)  # of memory_bandwidth_gbps, streaming the weights
    kv_read_efficiency: float = bounded(gt=0, le=1)  # of memory_bandwidth_gbps, attention reading the paged KV cache
    # of memory_bandwidth_gbps, MLA decode attention reading the compressed latent cache (its own kernels: every
    # head scores the one shared latent, so a step reads less and computes more per byte than paged attention)
    latent_read_efficiency: float = bounded(gt=0, le=1)
    compute_efficiency: float = bounded(gt=0, le=1)  # of dense_tflops, on large GEMMs
    # of memory_bandwidth_gbps, the most streaming benchmarks read on this generation's measured GPUs (the
    # lowest GPU's best): no read efficiency above may exceed it, nor an engine's own (catalogs/performance.yaml)
    read_ceiling: float = bounded(gt=0, le=1)
    read_ceiling_source: str
    as_of: str  # when read_ceiling was measured
    fitted_to: str
    source: str

    @property
    def read_efficiencies(self) -> dict[str, float]:
        return {"memory_efficiency": self.memory_efficiency, "kv_read_efficiency": self.kv_read_efficiency,
                "latent_read_efficiency": self.latent_read_efficiency}


@dataclass(frozen=True, kw_only=True)
class EngineCost:
    name: str
    aliases: tuple[str, ...] = ()
    # fixed GPU time per layer per forward pass, in thousands of the GPU's clock cycles: the small kernels
    # (norms, rotary, activations, cache writes) and the gaps between kernels are latency-bound, so they
    # take a number of cycles, not of microseconds (catalogs/performance.yaml `clocks`)
    per_layer_kilocycles: float = bounded(ge=0)
    # a MoE layer's extra fixed cost per expert it holds, touched or not: the fused MoE kernels are sized for
    # every expert (moe_align_block_size pads each expert's token list to the tile and the grouped GEMM's grid
    # spans tokens x k + E x (tile - 1) rows, whose blocks past the padded tokens start and exit), so a MoE
    # layer of 256 experts pays for 256 at any batch (catalogs/performance.yaml, the entry's source)
    per_expert_overhead_us: float = bounded(ge=0)
    # of memory_bandwidth_gbps streaming weights, when the engine's own kernels set it rather than the GPU
    # generation (llama.cpp's mat-vec kernels dequantizing GGUF blocks); None: the generation's
    memory_efficiency: float | None = bounded(None, gt=0, le=1)
    # the engine's own work once per step, outside the layers, that the GPU waits for: launching the step's
    # CUDA graph (one launch per step, not per layer), sampling, and the scheduler's bookkeeping between steps
    per_step_us: float = bounded(ge=0)
    fitted_to: str
    source: str


@dataclass(frozen=True, kw_only=True)
class InterconnectCost:
    kind: str  # the Gpu interconnect kind: nvlink, pcie, infinity-fabric, ...
    step_latency_us: float = bounded(ge=0)  # one step of a ring collective (a ring all-reduce takes 2 (tp-1))
    bandwidth_efficiency: float = bounded(gt=0, le=1)  # of the one-way link bandwidth, on large transfers
    source: str


@dataclass(frozen=True, kw_only=True)
class PrecisionCompute:
    """The tensor-core format in which a low-bit precision computes, where the GPU has it natively."""

    name: str
    tensor_core_format: str  # a key of Gpu.dense_tflops
    source: str


@dataclass(frozen=True, kw_only=True)
class GpuClock:
    gpu: str  # a catalog GPU name, or `default`
    boost_clock_mhz: float = bounded(gt=0)
    source: str


@dataclass(frozen=True, kw_only=True)
class PerformanceCatalog:
    schema_version: int
    generations: tuple[GenerationEfficiency, ...]
    engines: tuple[EngineCost, ...]
    interconnects: tuple[InterconnectCost, ...]
    clocks: tuple[GpuClock, ...]
    precisions: tuple[PrecisionCompute, ...]

    def clock_hz(self, gpu: str) -> float:
        """The GPU's boost clock; `default` for a GPU not listed."""
        by_gpu = {c.gpu: c for c in self.clocks}
        return (by_gpu.get(gpu) or by_gpu["default"]).boost_clock_mhz * 1e6

    def generation(self, name: str) -> GenerationEfficiency:
        """The generation's factors; `default` for a generation no measurement covers."""
        by_name = {g.name: g for g in self.generations}
        return by_name.get(name) or by_name["default"]

    def engine(self, name: str) -> EngineCost:
        key = name.strip().lower()
        for engine in self.engines:
            if key == engine.name or key in engine.aliases:
                return engine
        known = ", ".join(e.name for e in self.engines)
        raise PlannerInputError(f"engine: no performance factors for {name!r}; use one of {known}")

    def interconnect(self, kind: str) -> InterconnectCost:
        by_kind = {i.kind: i for i in self.interconnects}
        return by_kind.get(kind) or by_kind["default"]

    def tensor_core_format(self, precision: str) -> str | None:
        return next((p.tensor_core_format for p in self.precisions if p.name == precision), None)


@cache
def load_performance_catalog(directory: str | None = None) -> PerformanceCatalog:
    """catalogs/performance.yaml, validated (cached: catalogs don't change during a run)."""
    path = Path(directory or catalog_dir()) / "performance.yaml"
    catalog = catalog_record(PerformanceCatalog, read_yaml(path), f"catalog {path.name}")
    for section, names in (("generations", [g.name for g in catalog.generations]),
                           ("interconnects", [i.kind for i in catalog.interconnects]),
                           ("clocks", [c.gpu for c in catalog.clocks])):
        if "default" not in names:
            raise PlannerInputError(f"catalog {path.name}: {section} needs a 'default' entry")
    for generation in catalog.generations:
        for field, value in generation.read_efficiencies.items():
            if value > generation.read_ceiling:
                raise PlannerInputError(f"catalog {path.name}: generations[{generation.name}].{field} {value:g} is above "
                                        f"its measured read_ceiling {generation.read_ceiling:g}; lower it to at most that")
    return catalog


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class ForwardTime:
    """One forward pass of one pipeline stage on one rank, term by term (seconds)."""

    weight_read_s: float
    kv_read_s: float
    compute_s: float
    per_layer_overhead_s: float
    allreduce_s: float
    weight_bytes: int  # read by one rank
    kv_bytes: int
    total_s: float  # the header's `stage` line (_forward)

    @property
    def memory_s(self) -> float:
        return self.weight_read_s + self.kv_read_s

    @property
    def bound(self) -> DecodeBound:
        terms: dict[DecodeBound, float] = {"memory": self.memory_s, "compute": self.compute_s,
                                           "overhead": self.per_layer_overhead_s, "communication": self.allreduce_s}
        return max(terms, key=lambda k: terms[k])


@dataclass(frozen=True)
class ReplicaPerformance:
    batch: int
    prefill_s: float  # one request's prompt alone
    ttft_s: float
    decode_step_s: float  # every sequence of the batch advances one token
    tpot_s: float  # as a request sees it, other requests' prefills included
    output_tokens_per_s: float  # the whole replica at this batch
    requests_per_s: float
    decode_bound: DecodeBound
    batch_prefill_s: float  # all `batch` prompts
    # the decode step of the slowest pipeline stage, term by term
    weight_read_s: float
    kv_read_s: float
    decode_compute_s: float
    per_layer_overhead_s: float
    allreduce_s: float
    pp_bubble_s: float  # time the slowest stage waits per decode step (pp > batch)
    weight_bytes_read: int  # per rank per decode step
    kv_bytes_read: int
    engine: str
    memory_efficiency: float
    compute_efficiency: float


# ---------------------------------------------------------------------------------------------
# What one rank of one pipeline stage holds and computes


@dataclass(frozen=True)
class _Matmuls:
    """FLOPs per token split by the rate they run at."""

    low_bit: float = 0.0  # stored below 16 bits: the precision's tensor-core rate where native
    wide: float = 0.0  # 16-bit (or wider) weights, and everything on GPUs without the low-bit format

    def __add__(self, other: _Matmuls) -> _Matmuls:
        return _Matmuls(self.low_bit + other.low_bit, self.wide + other.wide)


@dataclass(frozen=True)
class _Stage:
    layers: int
    dense_bytes: int  # read by every forward pass
    expert_bytes: int  # one expert of every MoE layer of the stage
    experts: int  # per MoE layer (0: dense)
    experts_per_token: int
    moe_layers: int
    body_flops: _Matmuls  # per token, logits excluded
    logits_flops: _Matmuls  # per position whose logits are computed (last stage)
    attention: tuple[tuple[float, int | None], ...]  # (FLOPs per attended position, window) per layer

    @cached_property
    def attention_by_window(self) -> tuple[tuple[float, int | None], ...]:
        """FLOPs per attended position summed over the layers sharing a window (one term per window)."""
        summed: dict[int | None, float] = {}
        for per_position, window in self.attention:
            summed[window] = summed.get(window, 0.0) + per_position
        return tuple((flops, window) for window, flops in summed.items())


def _attention_flops_per_position(attention: Attention, heads_per_rank: int) -> float:
    """2 FLOPs per multiply-add for QK^T and for AV, per attended position, one layer, one rank."""
    if attention.kind in ("full", "sliding"):
        return 2 * heads_per_rank * (attention.k_head_dim + attention.v_head_dim)
    if attention.kind == "mla":
        # absorbed MLA (vLLM/SGLang decode): every head scores and sums over the shared latent
        return 2 * heads_per_rank * 2 * attention.latent_dim
    return 0.0  # linear-attention / Mamba: constant state, no per-position attention


def _matmul_flops(tensors: tuple[Tensor, ...], precision: Precision, tp: int, kv_heads: int,
                  active_experts: int) -> _Matmuls:
    out = _Matmuls()
    for t in tensors:
        if t.role not in MATMUL_ROLES or len(t.shape) != 2:
            continue
        shard = shard_shape(t, tp, kv_heads)
        copies = active_experts if t.role == "expert" else t.count
        flops = 2 * prod(shard) * copies
        if tensor_bytes(shard, 1, t, precision) < prod(shard) * ACTIVATION_BYTES:
            out += _Matmuls(low_bit=flops)
        else:
            out += _Matmuls(wide=flops)
    return out


@dataclass(frozen=True)
class _Block:
    """A group of tensors (one layer, or the head) on one rank: bytes and per-token FLOPs."""

    dense_bytes: int
    expert_bytes: int  # one expert
    experts: int
    flops: _Matmuls


@lru_cache(maxsize=4096)
def _block(tensors: tuple[Tensor, ...], precision: Precision, tp: int, kv_heads: int, active_experts: int) -> _Block:
    """Cached: the layers of a model repeat the same tensors, and the solver asks many times."""
    experts = [t for t in tensors if t.role == "expert"]
    return _Block(
        dense_bytes=sum(tensor_bytes(shard_shape(t, tp, kv_heads), t.count, t, precision)
                        for t in tensors if t.role != "expert"),
        expert_bytes=sum(tensor_bytes(shard_shape(t, tp, kv_heads), 1, t, precision) for t in experts),
        experts=experts[0].count if experts else 0,
        flops=_matmul_flops(tensors, precision, tp, kv_heads, active_experts),
    )


@lru_cache(maxsize=1024)
def _stages(arch: Architecture, precision: Precision, tp: int, pp: int, as_stored: bool) -> tuple[_Stage, ...]:
    heads_per_rank = ceil(arch.num_attention_heads / tp)
    kv_heads = model_kv_heads(arch)
    k = arch.moe.experts_per_token if arch.moe else 0
    stages = []
    for index, (first, last) in enumerate(pipeline_stages(arch.num_layers, pp)):
        layers = arch.layers[first:last]
        attention = tuple((_attention_flops_per_position(layer.attention, heads_per_rank), layer.attention.window)
                          for layer in layers)
        if not arch.exact:
            stages.append(_size_only_stage(arch, precision, tp, len(layers), attention, as_stored))
            continue
        head: tuple[Tensor, ...] = ()
        if index == pp - 1:
            head = arch.head + tied_lm_head(arch)
        blocks = [_block(layer.tensors, precision, tp, kv_heads, k) for layer in layers]
        logits = _block(head, precision, tp, kv_heads, k)
        stages.append(_Stage(
            layers=len(layers),
            dense_bytes=sum(b.dense_bytes for b in blocks) + logits.dense_bytes,
            expert_bytes=sum(b.expert_bytes for b in blocks),
            experts=max((b.experts for b in blocks), default=0),
            experts_per_token=k,
            moe_layers=sum(1 for b in blocks if b.experts),
            body_flops=sum((b.flops for b in blocks), _Matmuls()),
            logits_flops=logits.flops,
            attention=attention,
        ))
    return tuple(stages)


def _size_only_stage(arch: Architecture, precision: Precision, tp: int, layers: int,
                     attention: tuple[tuple[float, int | None], ...], as_stored: bool) -> _Stage:
    """A model known by its weight count: weights and matmuls spread evenly over layers and ranks;
    the bytes of its weights files when they were read and no other precision is asked (as planner.estimator.memory)."""
    fraction = layers / arch.num_layers / tp
    share = (arch.declared_params or 0) * fraction
    weight_bytes = arch.stored_bytes * fraction if as_stored and arch.stored_bytes else share * precision.seed_bits / 8
    flops = _Matmuls(low_bit=2 * share) if precision.seed_bits < UNQUANTIZED_BITS else _Matmuls(wide=2 * share)
    return _Stage(layers=layers, dense_bytes=ceil(weight_bytes), expert_bytes=0, experts=0,
                  experts_per_token=0, moe_layers=0, body_flops=flops, logits_flops=_Matmuls(), attention=attention)


# ---------------------------------------------------------------------------------------------
# Timing one forward pass


@dataclass(frozen=True)
class _Hardware:
    bytes_per_s: float  # achievable HBM bandwidth streaming weights
    kv_bytes_per_s: float  # achievable HBM bandwidth reading the KV cache
    latent_bytes_per_s: float  # achievable HBM bandwidth reading an MLA latent cache
    low_bit_flops_per_s: float
    wide_flops_per_s: float
    layer_overhead_s: float
    expert_overhead_s: float
    step_overhead_s: float
    link_bytes_per_s: float  # one-way, achievable
    link_latency_s: float
    tp: int
    hidden: int

    def allreduce_s(self, tokens: int) -> float:
        """Ring all-reduce: 2 (tp-1) steps, each a link latency plus 1/tp of the payload."""
        steps = 2 * (self.tp - 1)
        payload = tokens * self.hidden * ACTIVATION_BYTES
        return steps * (self.link_latency_s + payload / self.tp / self.link_bytes_per_s)

    def handoff_s(self, tokens: int) -> float:
        """Pipeline stage to stage: the activations of `tokens`, point to point."""
        return self.link_latency_s + tokens * self.hidden * ACTIVATION_BYTES / self.link_bytes_per_s


# A stage's forward as plain numbers, in ForwardTime's field order: (weight_read_s, kv_read_s, compute_s,
# per_layer_overhead_s, allreduce_s, weight_bytes, kv_bytes, total_s). The step time needs only the total and is on
# the solver's hot path, so the ForwardTime is built only for the stage reported.
_Terms = tuple[float, float, float, float, float, int, int, float]


class _StageCost(NamedTuple):
    """One stage on one rank with the hardware's rates folded in, resolved once per timer: the per-step arithmetic
    (the solver's hot path) reads plain fields. Every value is the expression _forward evaluated at each pass
    before, in the same order, so the times are the same to the bit."""

    attention_by_window: tuple[tuple[float, int | None], ...]
    kv_growing: int  # cache bytes per token of the layers whose KV grows with the context, on one rank
    kv_sliding: tuple[tuple[int, int], ...]  # (bytes per token, window) of the sliding-window layers
    kv_state: int  # the constant state of recurrent layers
    kv_latent: int  # bytes per token of the MLA layers (part of kv_growing)
    experts: int
    expert_missed: float  # 1 - k/E: the chance one token's picks miss a given expert (0 when dense)
    dense_bytes: int
    expert_bytes: int
    body_low_bit: float
    logits_low_bit: float
    body_wide: float
    logits_wide: float
    bytes_per_s: float
    kv_bytes_per_s: float
    latent_bytes_per_s: float
    low_bit_flops_per_s: float
    wide_flops_per_s: float
    overhead_s: float  # the fixed GPU time of the pass: per layer, per expert held, per step on the last stage
    allreduces: int  # all-reduces of the activations per pass


def _stage_cost(stage: _Stage, hw: _Hardware, last: bool, kv_growing: int, kv_sliding: tuple[tuple[int, int], ...],
                kv_state: int, kv_latent: int) -> _StageCost:
    step_s = hw.step_overhead_s if last else 0.0  # the engine's per-step cost, on the stage that ends the step
    return _StageCost(
        stage.attention_by_window, kv_growing, kv_sliding, kv_state, kv_latent, stage.experts,
        1 - stage.experts_per_token / stage.experts if stage.experts else 0.0, stage.dense_bytes, stage.expert_bytes,
        stage.body_flops.low_bit, stage.logits_flops.low_bit, stage.body_flops.wide, stage.logits_flops.wide,
        hw.bytes_per_s, hw.kv_bytes_per_s, hw.latent_bytes_per_s, hw.low_bit_flops_per_s, hw.wide_flops_per_s,
        stage.layers * hw.layer_overhead_s + stage.moe_layers * stage.experts * hw.expert_overhead_s + step_s,
        ALLREDUCES_PER_LAYER * stage.layers)


def _forward(cost: _StageCost, tokens: int, logits: int, attention_flops: float, kv_bytes: int,
             allreduce_s: float, latent_bytes: int) -> _Terms:
    """`attention_flops`: the stage's attention FLOPs over the positions the pass's tokens attend to (see
    _attention_flops); `kv_bytes`: the cache the pass reads, of which `latent_bytes` MLA latents (read by their own
    kernels, at their own rate); `allreduce_s`: one all-reduce of the pass's activations (hw.allreduce_s(tokens),
    the same on every stage)."""
    weight_bytes = cost.dense_bytes
    if cost.experts:  # the distinct experts `tokens` tokens route to per MoE layer: E (1 - (1 - k/E)^t), see the header
        weight_bytes += round(cost.experts * (1 - cost.expert_missed ** tokens) * cost.expert_bytes)
    compute_s = ((cost.body_low_bit * tokens + cost.logits_low_bit * logits) / cost.low_bit_flops_per_s
                 + (cost.body_wide * tokens + cost.logits_wide * logits + attention_flops) / cost.wide_flops_per_s)
    kv_s = (kv_bytes - latent_bytes) / cost.kv_bytes_per_s + latent_bytes / cost.latent_bytes_per_s if latent_bytes \
        else kv_bytes / cost.kv_bytes_per_s
    weight_s = weight_bytes / cost.bytes_per_s
    allreduces_s = cost.allreduces * allreduce_s
    # the header's `stage` line: max(memory, compute) + fixed + TP (max() spelled out: the same value, no call)
    memory_s = weight_s + kv_s
    total_s = (memory_s if memory_s >= compute_s else compute_s) + cost.overhead_s + allreduces_s
    return weight_s, kv_s, compute_s, cost.overhead_s, allreduces_s, weight_bytes, kv_bytes, total_s


def _attention_flops(cost: _StageCost, attended: Callable[[int | None], float]) -> float:
    """`attended(window)`: attended positions summed over the pass's tokens, for a layer with that window."""
    flops = 0.0
    for per_position, window in cost.attention_by_window:
        flops += per_position * attended(window)
    return flops


def _pipeline(totals: list[float], hw: _Hardware, microbatches: int, tokens: int) -> tuple[float, int, float]:
    """(time for every microbatch of `tokens` to pass every stage in steady state, the slowest stage's index,
    its idle time), from each stage's forward time."""
    slowest_s = max(totals)
    through = sum(totals)
    if len(totals) > 1:
        through += (len(totals) - 1) * hw.handoff_s(tokens)
    total = max(through, microbatches * slowest_s)
    return total, totals.index(slowest_s), total - microbatches * slowest_s


def _causal_positions(prompt: int, window: int | None) -> float:
    """Positions attended over a causal prompt: sum over i = 1..P of min(i, window)."""
    if window is None or window >= prompt:
        return prompt * (prompt + 1) / 2
    return window * (window + 1) / 2 + (prompt - window) * window


# ---------------------------------------------------------------------------------------------
# The replica


def _rate(gpu: Gpu, key: str) -> float | None:
    value = gpu.dense_tflops.get(key)
    return value * TFLOPS if value else None


def _wide_rate(gpu: Gpu, arch: Architecture, precision: Precision) -> float:
    if precision.name == "fp32":
        keys = ("fp32", "tf32")
    elif (arch.torch_dtype or "").lower() == "float16":
        keys = ("fp16", "bf16")
    else:
        keys = ("bf16", "fp16")
    for key in keys:
        rate = _rate(gpu, key)
        if rate:
            return rate
    raise PlannerInputError(f"gpu {gpu.name}: the catalog has no {'/'.join(keys)} TFLOPS to time compute with")


def _low_bit_rate(gpu: Gpu, precision: Precision, wide: float, performance: PerformanceCatalog) -> float:
    fmt = performance.tensor_core_format(precision.name)
    native = fmt is not None and gpu.generation in precision.native
    return (_rate(gpu, fmt) if native and fmt else None) or wide


class Step(NamedTuple):
    """What one engine step carries (continuous batching with chunked prefill). A named tuple: the solver's
    searches build hundreds of thousands of them (a frozen dataclass costs several times more to build)."""

    decode_seqs: float  # running requests that each advance one token (a mean may be fractional)
    decode_context: float  # mean tokens each of them holds (its KV read this step)
    prefill_tokens: int = 0  # prompt tokens computed this step (whole prompts or chunks)
    prefill_positions: float = 0.0  # positions those tokens attend to, summed (causal, per full-attention layer)
    prefill_seqs: int = 0  # requests whose prompt chunks are in the step


@dataclass(frozen=True)
class ReplicaTimer:
    """One replica's layout resolved once (weights per stage, hardware rates, KV per token), so that many
    steps can be timed cheaply: by the steady-state capacity model and by the simulator."""

    stages: tuple[_Stage, ...]
    hw: _Hardware
    # per stage: bytes per token of layers whose KV grows with the context, (bytes per token, window) of
    # sliding-window layers, and the constant state of recurrent layers, on one rank
    kv_growing: tuple[int, ...]
    kv_sliding: tuple[tuple[tuple[int, int], ...], ...]
    kv_state: tuple[int, ...]
    kv_latent: tuple[int, ...]  # per stage: bytes per token of its MLA layers (part of kv_growing), on one rank
    pp: int
    engine: str
    memory_efficiency: float
    compute_efficiency: float
    gpu: Gpu
    arch: Architecture
    precision: Precision
    tp: int

    def with_factors(self, performance: PerformanceCatalog) -> ReplicaTimer:
        """The same layout timed with another catalog's efficiency factors (for fitting them)."""
        hw, generation = _hardware(self.gpu, self.arch, self.precision, self.tp, performance, self.engine)
        return replace(self, hw=hw, memory_efficiency=hw.bytes_per_s / (self.gpu.memory_bandwidth_gbps * GB),
                       compute_efficiency=generation.compute_efficiency)

    @cached_property
    def _costs(self) -> tuple[_StageCost, ...]:
        """Per stage; a stage alike to the one before it (an even pipeline split's) is the same object, so that a
        step times it once (_step)."""
        last = len(self.stages) - 1
        costs: list[_StageCost] = []
        for s, stage in enumerate(self.stages):
            cost = _stage_cost(stage, self.hw, s == last, self.kv_growing[s], self.kv_sliding[s], self.kv_state[s],
                               self.kv_latent[s])
            costs.append(costs[-1] if costs and costs[-1] == cost else cost)
        return tuple(costs)

    def step(self, shape: Step, microbatches: int | None = None) -> tuple[float, ForwardTime, float]:
        """(seconds, the slowest stage's forward term by term, pipeline bubble) for one step. The step's
        sequences are split into min(sequences, pp) microbatches unless `microbatches` is given."""
        total, times, slowest, bubble = self._step(shape, microbatches)
        return total, ForwardTime(*times[slowest]), bubble

    def step_s(self, shape: Step | tuple[float, float, int, float, int]) -> float:
        """The step's seconds; `shape` a Step or a plain tuple of its fields in order (StepTimes passes its memo's
        keys as they are: no Step built per call on the solver's hot path)."""
        return self._step(shape, None)[0]

    def _step(self, shape: Step, microbatches: int | None) -> tuple[float, list[_Terms], int, float]:
        decode_seqs, context, prefill_tokens, prefill_positions, prefill_seqs = shape
        pp = self.pp
        parts = microbatches or (1 if pp == 1 else max(1, min(decode_seqs + prefill_seqs, pp)))
        if parts == 1:  # the step as it stands (a fractional batch is a mean over steps, the steady state's)
            decode = decode_seqs
            logits = decode + prefill_seqs
        else:  # per microbatch, whole sequences and tokens
            decode = ceil(decode_seqs / parts)
            prefill_tokens = ceil(prefill_tokens / parts)
            prefill_positions = prefill_positions / parts
            logits = decode + ceil(prefill_seqs / parts)
        tokens = decode + prefill_tokens
        allreduce_s = self.hw.allreduce_s(tokens) if self.tp > 1 else 0.0  # one rank: 2 (tp-1) = 0 ring steps
        times: list[_Terms] = []
        alike = None
        for cost in self._costs:
            if cost is alike:  # the stage before's cost: the same inputs give the same terms
                times.append(times[-1])
                continue
            alike = cost
            attention_flops = 0.0  # _attention_flops inlined (the solver's hot path): attended positions by window
            for per_position, window in cost.attention_by_window:
                own = decode * (window if window and window < context else context)  # min(), without the call
                if prefill_tokens and window:
                    capped = prefill_tokens * window  # min(prefill_positions, capped), without the call
                    attention_flops += per_position * (own + (capped if capped < prefill_positions
                                                              else prefill_positions))
                else:
                    attention_flops += per_position * (own + prefill_positions)
            # the cache one sequence of `context` tokens holds on one rank (as planner.estimator.memory), read once
            held = cost.kv_growing * context
            if cost.kv_sliding:
                windowed = 0  # summed first, then added: as sum() over the layers always did
                for per_token, window in cost.kv_sliding:
                    windowed += per_token * (window if window < context else context)  # min(), without the call
                held += windowed
            latent = cost.kv_latent
            terms = _forward(cost, tokens, logits, attention_flops, round(decode * (held + cost.kv_state)), allreduce_s,
                             round(decode * latent * context) if latent else 0)
            times.append(terms)
        if parts == 1 and len(times) == 1:  # one stage, one microbatch (the solver's hot path): no wait
            return times[0][7], times, 0, 0.0
        total, slowest, bubble = _pipeline([t[7] for t in times], self.hw, parts, tokens)
        return total, times, slowest, bubble

    def prefill_s(self, sequences: int, prompt: int) -> float:
        """Whole prompts alone (no decode): sliding-window layers attend to min(position, window) of each."""
        parts = min(sequences, self.pp)
        per_part = ceil(sequences / parts)
        tokens = per_part * prompt
        allreduce_s = self.hw.allreduce_s(tokens)
        times = [_forward(cost, tokens, per_part,
                          _attention_flops(cost, lambda w: per_part * _causal_positions(prompt, w)), 0, allreduce_s, 0)
                 for cost in self._costs]
        return _pipeline([t[7] for t in times], self.hw, parts, tokens)[0]


def replica_timer(arch: Architecture, precision: str, kv_dtype: str, gpu: Gpu, tp: int, pp: int, catalog: Catalog,
                  engine: str = "vllm", performance: PerformanceCatalog | None = None) -> ReplicaTimer:
    """The layout of one replica (tp x pp GPUs) resolved for timing its steps."""
    performance = performance or load_performance_catalog()
    prec = resolve_precision(catalog, arch, precision)
    engine_name = performance.engine(engine).name
    hw, generation = _hardware(gpu, arch, prec, tp, performance, engine_name)
    as_stored = arch.stored_bytes is not None and precision.lower() == "auto"
    kv_bits = catalog.kv_dtypes.get(resolve_kv_dtype(arch, prec, kv_dtype)).bits
    growing, sliding, latent = _kv_per_token(arch, tp, pp, kv_bits)
    state = _recurrent_state(arch, prec.name, kv_dtype, tp, pp, kv_bits, _Same(catalog))
    return ReplicaTimer(_stages(arch, prec, tp, pp, as_stored), hw, growing, sliding, state, latent, pp,
                        engine_name, hw.bytes_per_s / (gpu.memory_bandwidth_gbps * GB), generation.compute_efficiency,
                        gpu, arch, prec, tp)


class _Same:
    """A catalog as a cache key: by identity (a catalog holds dicts, so it has no hash of its own); the cache holds
    it, so its id is not reused while the entry lives."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def __hash__(self) -> int:
        return id(self.catalog)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.catalog is self.catalog


@lru_cache(maxsize=1024)
def _recurrent_state(arch: Architecture, precision: str, kv_dtype: str, tp: int, pp: int, kv_bits: int,
                     catalog: _Same) -> tuple[int, ...]:
    """Per stage, on one rank: the state of recurrent layers, what memory.py holds for a sequence of one token less
    that token's KV. Cached: every GPU type of a layout shares it."""
    one = estimate_memory(arch, Request(context=1, batch=1, tp=tp, pp=pp, precision=precision, kv_dtype=kv_dtype),
                          catalog.catalog).per_gpu
    growing, sliding, _ = _kv_per_token(arch, tp, pp, kv_bits)
    return tuple(one[s * tp].kv_cache_bytes - grow - sum(b for b, _ in slide)
                 for s, (grow, slide) in enumerate(zip(growing, sliding)))


@lru_cache(maxsize=1024)
def _kv_per_token(arch: Architecture, tp: int, pp: int, kv_bits: int
                  ) -> tuple[tuple[int, ...], tuple[tuple[tuple[int, int], ...], ...], tuple[int, ...]]:
    """Per stage, on one rank: cache bytes per token of the layers whose KV grows with the context, (bytes per
    token, window) of the sliding-window layers, and the MLA layers' share of the first. Cached: every GPU type and
    precision of a layout shares them."""
    growing, sliding, latent = [], [], []
    for first, last in pipeline_stages(arch.num_layers, pp):
        layers = arch.layers[first:last]
        growing.append(sum(attention_bytes_per_token(l.attention, tp, kv_bits) for l in layers
                           if l.attention.kind not in ("sliding", "linear", "mamba")))
        sliding.append(tuple((attention_bytes_per_token(l.attention, tp, kv_bits), l.attention.window or MAX_CONTEXT)
                             for l in layers if l.attention.kind == "sliding"))
        latent.append(sum(attention_bytes_per_token(l.attention, tp, kv_bits) for l in layers if l.attention.kind == "mla"))
    return tuple(growing), tuple(sliding), tuple(latent)


def _hardware(gpu: Gpu, arch: Architecture, prec: Precision, tp: int, performance: PerformanceCatalog,
              engine: str) -> tuple[_Hardware, GenerationEfficiency]:
    generation = performance.generation(gpu.generation)
    engine_cost = performance.engine(engine)
    link = performance.interconnect(gpu.interconnect.kind)
    wide = _wide_rate(gpu, arch, prec)
    # an engine's own kernels stream at their own fraction, but no GPU reads faster than its generation's ceiling
    memory_efficiency = min(engine_cost.memory_efficiency or generation.memory_efficiency, generation.read_ceiling)
    return _Hardware(
        bytes_per_s=gpu.memory_bandwidth_gbps * GB * memory_efficiency,
        kv_bytes_per_s=gpu.memory_bandwidth_gbps * GB * generation.kv_read_efficiency,
        latent_bytes_per_s=gpu.memory_bandwidth_gbps * GB * generation.latent_read_efficiency,
        low_bit_flops_per_s=_low_bit_rate(gpu, prec, wide, performance) * generation.compute_efficiency,
        wide_flops_per_s=wide * generation.compute_efficiency,
        layer_overhead_s=engine_cost.per_layer_kilocycles * 1e3 / performance.clock_hz(gpu.name),
        expert_overhead_s=engine_cost.per_expert_overhead_us * US,
        step_overhead_s=engine_cost.per_step_us * US,
        # catalog interconnect bandwidth is bidirectional per GPU; a ring sends one way
        link_bytes_per_s=gpu.interconnect.bandwidth_gbps / 2 * GB * link.bandwidth_efficiency,
        link_latency_s=link.step_latency_us * US,
        tp=tp, hidden=arch.hidden_size,
    ), generation


def causal_positions(prompt: int, window: int | None = None) -> float:
    """Positions attended over a causal prompt: sum over i = 1..P of min(i, window)."""
    return _causal_positions(prompt, window)


def replica_performance(arch: Architecture, precision: str, kv_dtype: str, gpu: Gpu, tp: int, pp: int,
                        batch: int, workload: Workload, catalog: Catalog, engine: str = "vllm",
                        performance: PerformanceCatalog | None = None) -> ReplicaPerformance:
    """Speed of one replica (tp x pp GPUs) serving `batch` concurrent requests shaped like `workload`."""
    if workload.prompt_tokens < 1 or workload.output_tokens < 1:
        raise PlannerInputError("workload: prompt_tokens and output_tokens must be at least 1")
    return timer_performance(replica_timer(arch, precision, kv_dtype, gpu, tp, pp, catalog, engine, performance),
                             batch, workload)


def timer_performance(timer: ReplicaTimer, batch: int, workload: Workload) -> ReplicaPerformance:
    """replica_performance on a resolved layout."""
    prompt, output = workload.prompt_tokens, workload.output_tokens

    # Decode at the mean context over the output; the KV each sequence holds there is read every step.
    context = prompt + output // 2
    decode_step_s, slowest, bubble_s = timer.step(Step(batch, context))

    prefill_s = timer.prefill_s(1, prompt)
    batch_prefill_s = timer.prefill_s(batch, prompt) if batch > 1 else prefill_s
    cycle_s = batch_prefill_s + (output - 1) * decode_step_s
    others_prefill_s = batch_prefill_s * (batch - 1) / batch
    tpot_s = decode_step_s + (others_prefill_s / (output - 1) if output > 1 else 0.0)
    return ReplicaPerformance(
        batch=batch, prefill_s=prefill_s, ttft_s=prefill_s, decode_step_s=decode_step_s, tpot_s=tpot_s,
        output_tokens_per_s=batch * output / cycle_s, requests_per_s=batch / cycle_s,
        decode_bound=slowest.bound, batch_prefill_s=batch_prefill_s,
        weight_read_s=slowest.weight_read_s, kv_read_s=slowest.kv_read_s, decode_compute_s=slowest.compute_s,
        per_layer_overhead_s=slowest.per_layer_overhead_s, allreduce_s=slowest.allreduce_s, pp_bubble_s=bubble_s,
        weight_bytes_read=slowest.weight_bytes, kv_bytes_read=slowest.kv_bytes, engine=timer.engine,
        memory_efficiency=timer.memory_efficiency, compute_efficiency=timer.compute_efficiency,
    )


__all__ = ["EngineCost", "ForwardTime", "GenerationEfficiency", "InterconnectCost", "PerformanceCatalog",
           "PrecisionCompute", "ReplicaPerformance", "ReplicaTimer", "Step", "Workload", "causal_positions", "timer_performance",
           "load_performance_catalog", "replica_performance", "replica_timer"]
