"""Serving speed of one replica at a batch: prefill, decode step, TTFT, TPOT, tokens/s and requests/s.

A step is the sum of the operations the engine launches, each costed as it runs (bench/SPEED_PROTOCOL.md).
No constant is fitted to end-to-end runs: catalogs/performance.yaml takes each from measured kernel tables
(aiconfigurator-core's, per GPU generation) or published kernel benchmarks, and names the file.

One forward pass of one pipeline stage, on one tensor-parallel rank, with T tokens in the step (d decoding
sequences plus p prompt tokens):
  dense GEMMs   per compute format (low-bit tensor-core rate, or the 16-bit rate): max(W / (B x read_eff),
                2 W_params T / (R x compute_eff(T))) with compute_eff(M) = compute_eff_max x M / (M + m_half)
                (small-M GEMMs do not reach peak), so the compute side is 2 W_params (T + m_half) / (R x
                compute_eff_max); the weights of every GEMM of the stage's layers as that rank holds them
                (the embedding is a row lookup, the vision tower idle while decoding text); the lm_head on
                the last stage as its own GEMM over the positions whose logits are computed
  fused MoE     per MoE layer: the weights of the distinct experts the step's tokens route to, E (1 - (1 -
                k/E)^T) on average when routing is uniform (what the routers' load-balancing losses aim
                for), and every routed row's input and GEMM outputs activation_passes times (16-bit), at
                moe_read_eff; its compute 2 W_expert_params x (T k + D m_half) / (R x
                compute_eff_max) (compute_eff at T k / D rows per expert) plus column_ps per output column of
                each touched expert's GEMMs on the rank (their tiles' fixed cost, SM time that runs while the
                weights stream in), the larger of that and the read; nothing per expert merely held
  attention     decode: the KV the d sequences hold (planner.estimator.memory), read once, paged caches at
                kv_read_eff, MLA latent caches at latent_read_eff, or its FLOPs if more (an absorbed MLA
                layer's 2 x heads x (latent + kv_lora_rank) a position at the MLA decode kernel's own
                latent_compute_eff where its table measures it); prefill: causal
                FLOPs 2 x heads x (d_k + d_v) per attended position (PaLM, Chowdhery et al. 2022, app. B) at
                attention_compute_eff of the 16-bit rate; an MLA layer's with its latent up-projected to per-head
                keys and values where the engine's prefill runs it so, at its own MLA prefill rate if measured
  fixed         each GEMM kernel's launch (the GEMM tables' intercept), each attention kernel's (the decode
                attention tables' intercept), each latency-bound small kernel of a layer (norms, rotary,
                KV-cache write, activation, routing; counted per engine from its model code) at the kernel
                floor, each fused MoE kernel's launch, and once per step on the last stage the engine's own
                work (scheduler, input preparation, sampling, graph launch);
                llama.cpp instead pays its measured cycles per layer (ggml-org/llama.cpp PR 6766)
  TP            2 all-reduces of the activations per layer (Megatron-LM, Shoeybi et al. 2019, section 3),
                each latency(tp) + bytes / (link bandwidth x efficiency): the engines' custom all-reduce at
                decode sizes, measured per interconnect and GPU generation; a group of more GPUs than a host
                holds (an NVL72 tray) takes the engines' multi-host all-reduce, measured across trays
  stage         dense GEMMs + fused MoE + attention + fixed + TP
  eager prefill where the engine launches a prefill pass without a CUDA graph (its eager_prefill_rules, by
                release, GPU, model, MoE kernel and layout), the pass takes max(stage, host launches): the
                kernels counted above, all-reduces included, at the engine's eager_launch_us each
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

from dataclasses import dataclass, field, fields, replace
from functools import cache, cached_property, lru_cache
from math import ceil, floor, prod
from pathlib import Path
from typing import Callable, ClassVar, Literal, NamedTuple


from planner.model.architecture import Architecture, Attention, Layer, Tensor
from planner.model.families.core import indexer_key_bytes
from planner.catalog.load import Catalog, Gpu, Precision, bounded, catalog_dir, catalog_record, read_yaml
from planner.errors import PlannerInputError
from planner.estimator.engines.moe_kernels import switch_refusal
from planner.estimator.engines.registry import (canonical, engine as registered_engine, engine_names, release_key,
                                                resolve_engine_kv_dtype)
from planner.estimator.layout import (layer_kv_heads, model_kv_heads, on_attention_group, pipeline_stages, rank_share, shard_shape,
                                      tied_lm_head)
from planner.estimator.memory import Request, attention_bytes_per_token, estimate_memory
from planner.model.precision import UNQUANTIZED_BITS, resolve_precision, tensor_bytes
from planner.units import GB, MAX_CONTEXT

US = 1e-6
TFLOPS = 1e12
# Activations and all-reduce payloads travel in the model's 16-bit dtype.
ACTIVATION_BYTES = UNQUANTIZED_BITS // 8
# Megatron tensor parallelism: one all-reduce after attention's o_proj, one after the MLP's down_proj.
ALLREDUCES_PER_LAYER = 2
# Roles of the dense 2-D tensors a token is multiplied through (embeddings are row lookups, norms elementwise;
# routed experts run in the fused MoE kernel).
DENSE_MATMUL_ROLES = ("linear", "router", "lm_head")

# The measurements' key of 16-bit GEMMs, which weight-only and non-native low-bit kernels also stand for (they
# dequantize to 16 bits and compute there).
WIDE_FORMAT = "bf16"

DecodeBound = Literal["memory", "compute", "overhead", "communication"]


# ---------------------------------------------------------------------------------------------
# The catalog of efficiency factors


@dataclass(frozen=True, kw_only=True)
class KernelRates:
    """A GEMM or fused-MoE kernel in one compute format, as its measured times fit `launch + max(bytes / (B x
    read_efficiency), FLOPs / (R x compute_efficiency x M / (M + half_m)))` (bench/kernel_constants.py)."""

    launch_us: float = bounded(ge=0)  # the fixed time of one call: the intercept of its measured times
    read_efficiency: float = bounded(gt=0, le=1)  # of memory_bandwidth_gbps, reading weights at small M
    compute_efficiency: float = bounded(gt=0, le=1)  # of the format's dense_tflops, the most large M reaches
    half_m: float = bounded(ge=0)  # rows (tokens; for MoE, tokens per touched expert) at half of that


@dataclass(frozen=True, kw_only=True)
class MoeRates(KernelRates):
    """The fused MoE kernel: a GEMM's rates, plus `column_ps` for every output column of each touched expert's
    GEMMs as the rank holds them (a grouped GEMM cuts each expert's output into tiles that each pay a fixed
    prologue and epilogue, on the compute side of the kernel's read-or-compute bound; bench/SPEED_PROTOCOL.md, the
    amendments on expert slices and on the tiles' overlap), plus `activation_passes`: how many times each routed row's
    input and GEMM outputs cross memory beside the weights, at the read rate (the amendment on the routed rows'
    activation traffic)."""

    column_ps: float = bounded(ge=0)
    activation_passes: float = bounded(ge=0, le=100)


@dataclass(frozen=True, kw_only=True)
class AttentionRates:
    """Decode attention over a KV cache of one width, as its measured times fit `launch + bytes / (B x eff)`."""

    launch_us: float = bounded(ge=0)
    kv_read_efficiency: float = bounded(gt=0, le=1)  # of memory_bandwidth_gbps, paged GQA / MHA caches
    latent_read_efficiency: float = bounded(gt=0, le=1)  # of memory_bandwidth_gbps, MLA's latent cache
    # of the 16-bit dense_tflops, the MLA decode kernel's FLOPs, where its table's fit binds on compute (None: the
    # generation's attention_compute_efficiency; bench/SPEED_PROTOCOL.md, the amendment on MLA decode's compute side)
    latent_compute_efficiency: float | None = bounded(None, gt=0, le=1)


def _released_between(release: tuple[int, ...], since: str | None, until: str | None) -> bool:
    """`release` from `since` to `until`, both inclusive (None: open)."""
    return (since is None or release >= release_key(since)) and (until is None or release <= release_key(until))


@dataclass(frozen=True, kw_only=True)
class SparsePrefillKernel:
    """The kernel an engine's prefill runs for a DeepSeek Sparse Attention layer whose prompt's KV exceeds index_topk,
    on one KV width, from `since` to `until` (inclusive; none: open), as its release picks it (bench/dsa_constants.py):
    each prompt token attends to index_topk slots, whatever its context. A FlashMLA kernel runs the rank's heads
    padded to `head_block` at `compute_efficiency` of the 16-bit peak; the trtllm-gen decode kernel (no head block)
    reads each token's index_topk latents at `read_efficiency` of the bandwidth."""

    kv_bits: int = bounded(ge=1)
    kernel: str
    head_block: int = bounded(0, ge=0)
    compute_efficiency: float | None = bounded(None, gt=0, le=1)
    read_efficiency: float | None = bounded(None, gt=0, le=1)
    since: str | None = None
    until: str | None = None
    source: str

    @property
    def well_formed(self) -> bool:
        """head_block with compute_efficiency (a FlashMLA kernel), or read_efficiency alone (a gathering kernel)."""
        flashmla = self.head_block > 0
        return flashmla == (self.compute_efficiency is not None) and flashmla != (self.read_efficiency is not None)

    def matches(self, kv_bits: int, release: tuple[int, ...]) -> bool:
        return self.kv_bits == kv_bits and _released_between(release, self.since, self.until)


@dataclass(frozen=True, kw_only=True)
class IndexerRates:
    """A DeepSeek Sparse Attention indexer's prefill kernels (bench/dsa_constants.py): the FP8 logits of every query
    against every earlier key at `logits_compute_efficiency` of the FP8 peak, and the top-k over them, `topk_us` per
    query whose context exceeds index_topk."""

    logits_compute_efficiency: float = bounded(gt=0, le=1)
    topk_us: float = bounded(ge=0)
    source: str


@dataclass(frozen=True, kw_only=True)
class _ReleaseSpan:
    """What holds for an engine's releases from `since` to `until` (inclusive; none: open)."""

    since: str | None = None
    until: str | None = None
    source: str

    def matches(self, release: tuple[int, ...]) -> bool:
        return _released_between(release, self.since, self.until)


@dataclass(frozen=True, kw_only=True)
class DeltaPrefillKernel(_ReleaseSpan):
    """The chunked Gated DeltaNet kernels an engine's prefill runs over its release span, as its release picks them on
    the generation (bench/gdn_constants.py): per layer, `chunk_us` for each 64-token chunk of a prompt (the state pass
    steps through them in order) and the chunks' FLOPs per token and value head at `compute_efficiency` of the 16-bit
    peak."""

    kernel: str
    chunk_us: float = bounded(ge=0)
    compute_efficiency: float = bounded(gt=0, le=1)


@dataclass(frozen=True, kw_only=True)
class PrefillGraphCap(_ReleaseSpan):
    """The largest prefill pass an engine captures in a CUDA graph for an MLA model over its release span; inside the
    graph its MLA layers run absorbed (bench/SPEED_PROTOCOL.md, the amendment on SGLang's captured prefill passes)."""

    tokens: int = bounded(ge=1)


@dataclass(frozen=True, kw_only=True)
class EngineKernels:
    """One engine's own kernel measurements on a generation, where its tables hold them: they take precedence over
    the generation's medians (a format or width not listed here takes the generation's)."""

    gemm: dict[str, KernelRates] = field(default_factory=dict)
    moe: dict[str, MoeRates] = field(default_factory=dict)
    moe_kernel: str | None = None  # the fused-MoE kernel `moe` measures, when the engine's rules can pick another
    moe_kernels: dict[str, dict[str, MoeRates]] = field(default_factory=dict)  # the others, by kernel and format
    attention: dict[int, EngineAttention] = field(default_factory=dict)
    sparse_prefill: tuple[SparsePrefillKernel, ...] = ()  # the first matching entry is the kernel the release runs
    indexer: IndexerRates | None = None
    gated_delta_prefill: tuple[DeltaPrefillKernel, ...] = ()  # the first matching entry is the one the release runs
    # its MLA prefill kernels' FLOPs in the multi-head form, and its MHA/GQA prefill kernel's, of the 16-bit peak
    # with the generation's prefill_attention_row_positions (None: the generation's prefill_attention_compute_efficiency)
    mla_prefill_compute_efficiency: float | None = bounded(None, gt=0, le=1)
    prefill_attention_compute_efficiency: float | None = bounded(None, gt=0, le=1)

    def delta_prefill_kernel(self, release: tuple[int, ...]) -> DeltaPrefillKernel | None:
        return next((k for k in self.gated_delta_prefill if k.matches(release)), None)

    def sparse_prefill_kernel(self, kv_bits: int, release: tuple[int, ...]) -> SparsePrefillKernel | None:
        return next((k for k in self.sparse_prefill if k.matches(kv_bits, release)), None)


@dataclass(frozen=True, kw_only=True)
class EngineAttention:
    """An engine's decode attention on one KV width; its MLA latent rate where its tables hold one."""

    launch_us: float = bounded(ge=0)
    kv_read_efficiency: float = bounded(gt=0, le=1)
    latent_read_efficiency: float | None = bounded(None, gt=0, le=1)
    latent_compute_efficiency: float | None = bounded(None, gt=0, le=1)


@dataclass(frozen=True, kw_only=True)
class GenerationEfficiency:
    """Achieved fractions of a GPU generation's datasheet peaks and its kernels' fixed costs, each measured at
    kernel level (catalogs/performance.yaml names the tables)."""

    name: str
    aliases: tuple[str, ...] = ()  # generations that borrow these measurements (their GPUs have none of their own)
    # by compute format: bf16 (16-bit, and weight-only kernels that compute in 16 bits), fp8 (per-tensor W8A8),
    # fp8-block (block-scaled W8A8), fp4 (W4A4); a format without measurements takes bf16's
    gemm: dict[str, KernelRates]
    moe: dict[str, MoeRates]
    attention: dict[int, AttentionRates]  # by the KV cache's bits per value; a width not listed takes 16's
    # of the 16-bit dense_tflops: decode attention's compute side (and an absorbed MLA prefill's, the DSA gather's)
    attention_compute_efficiency: float = bounded(gt=0, le=1)
    # a prefill attention pass: (attended positions + query rows x row_positions) FLOPs at this fraction of the 16-bit
    # dense_tflops (bench/SPEED_PROTOCOL.md, the amendment on prefill attention's per-row cost)
    prefill_attention_compute_efficiency: float = bounded(gt=0, le=1)
    prefill_attention_row_positions: float = bounded(ge=0)
    kernel_floor_us: float = bounded(ge=0)  # a latency-bound small kernel's time inside a CUDA graph
    # what a MoE layer runs that this generation's MoE tables do not time (AMD: AITER's tuned times hold neither the
    # top-k nor the sort): top-k kernels at the kernel floor, and the sort kernel at its own measured time
    moe_untimed_kernels: int = bounded(0, ge=0)
    moe_sorting_us: float = bounded(0.0, ge=0)
    # the gap a replayed graph leaves between two kernels, where the tables time kernels by their device time alone
    # (AMD: AITER's); 0 where they time kernels inside a replayed graph (aiconfigurator's), whose times hold it
    graph_gap_us: float = bounded(0.0, ge=0)
    # of memory_bandwidth_gbps, the most streaming benchmarks read on this generation's measured GPUs: no read
    # efficiency above may exceed it, nor an engine's own
    read_ceiling: float = bounded(gt=0, le=1)
    read_ceiling_source: str
    as_of: str
    measured_on: str  # the GPUs and tables the values are the medians of
    source: str
    engines: dict[str, EngineKernels] = field(default_factory=dict)  # each engine's own tables, where it has them

    def gemm_rates(self, kernel_format: str, engine: str | None = None) -> KernelRates:
        own = self.engines.get(engine or "", EngineKernels()).gemm
        return own.get(kernel_format) or self.gemm.get(kernel_format) or own.get(WIDE_FORMAT) or self.gemm[WIDE_FORMAT]

    def moe_rates(self, kernel_format: str, engine: str | None = None, kernel: str | None = None) -> MoeRates:
        """`kernel`: the fused-MoE kernel the engine runs (EngineCost.moe_kernel), where its own table measured it in
        this format; else the engine's primary kernel, else the generation's."""
        kernels = self.engines.get(engine or "", EngineKernels())
        chosen = kernels.moe_kernels.get(kernel or "", {}).get(kernel_format)
        if chosen is not None:
            return chosen
        own = kernels.moe
        return own.get(kernel_format) or self.moe.get(kernel_format) or own.get(WIDE_FORMAT) or self.moe[WIDE_FORMAT]

    def measures_moe(self, kernel_format: str, engine: str | None = None) -> bool:
        """Whether the engine's tables or the generation's medians hold this fused-MoE format."""
        return kernel_format in self.engines.get(engine or "", EngineKernels()).moe or kernel_format in self.moe

    def moe_kernel_timed(self, kernel_format: str, engine: str | None = None, kernel: str | None = None) -> str | None:
        """The name of the kernel moe_rates times with these arguments, where the catalog names it."""
        kernels = self.engines.get(engine or "", EngineKernels())
        if kernel_format in kernels.moe_kernels.get(kernel or "", {}):
            return kernel
        return kernels.moe_kernel if kernel_format in kernels.moe else None

    def times_kernel(self, kernel_format: str, engine: str, kernel: str) -> bool:
        """Whether the engine's tables time `kernel` itself for this format: an entry under its name, or the primary
        entry its `moe_kernel` names (which does not name RUNNER_FIXED_FORMATS' entries)."""
        kernels = self.engines.get(engine, EngineKernels())
        if kernel_format in kernels.moe_kernels.get(kernel, {}):
            return True
        return kernel == kernels.moe_kernel and kernel_format in kernels.moe and kernel_format not in RUNNER_FIXED_FORMATS

    def attention_rates(self, kv_bits: int, engine: str | None = None) -> AttentionRates:
        median = self.attention.get(kv_bits) or self.attention[UNQUANTIZED_BITS]
        own = self.engines.get(engine or "", EngineKernels()).attention.get(kv_bits)
        if own is None:
            return median
        return AttentionRates(launch_us=own.launch_us, kv_read_efficiency=own.kv_read_efficiency,
                              latent_read_efficiency=own.latent_read_efficiency or median.latent_read_efficiency,
                              latent_compute_efficiency=own.latent_compute_efficiency
                              or median.latent_compute_efficiency)

    @property
    def read_efficiencies(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for prefix, kernels in (("", self), *((f"engines.{name}.", own) for name, own in self.engines.items())):
            out.update({f"{prefix}gemm.{k}.read_efficiency": r.read_efficiency for k, r in kernels.gemm.items()})
            out.update({f"{prefix}moe.{k}.read_efficiency": r.read_efficiency for k, r in kernels.moe.items()})
            sparse = kernels.sparse_prefill if isinstance(kernels, EngineKernels) else ()
            out.update({f"{prefix}sparse_prefill.{k.kernel}.{k.kv_bits}.read_efficiency": k.read_efficiency
                        for k in sparse if k.read_efficiency is not None})
            for bits, a in kernels.attention.items():
                out[f"{prefix}attention.{bits}.kv_read_efficiency"] = a.kv_read_efficiency
                if a.latent_read_efficiency is not None:
                    out[f"{prefix}attention.{bits}.latent_read_efficiency"] = a.latent_read_efficiency
        return out


@dataclass(frozen=True, kw_only=True)
class MoeKernelRule:
    """Which fused-MoE kernel an engine runs, as its source decides at the releases named: on these GPUs, for these
    model types (config.json model_type) and checkpoint precisions (empty: any), from `since` to `until` (inclusive;
    none: open)."""

    kernel: str
    gpus: tuple[str, ...]
    model_types: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    source: str

    def matches(self, gpu: str, model_type: str, precision: str, release: tuple[int, ...]) -> bool:
        return (gpu in self.gpus and (not self.model_types or model_type in self.model_types)
                and (not self.precisions or precision in self.precisions)
                and (self.since is None or release >= release_key(self.since))
                and (self.until is None or release <= release_key(self.until)))


@dataclass(frozen=True, kw_only=True)
class EagerPrefillRule:
    """Where an engine runs its prefill (extend) passes without a CUDA graph, as its source decides at the releases
    named: on these GPU vendors or GPUs (both empty: any), for these model types, except those, with the fused-MoE
    kernel it picks among these, or under these layouts ("pipeline": PP > 1, "dp_attention"); every field given
    must hold, from `since` to `until` (inclusive; none: open). `text_only`: the source names an architecture, which of
    the model types listed a checkpoint with a vision tower is not (Kimi-K2.5's text model is a kimi_k2)."""

    vendors: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()
    text_only: bool = False
    except_model_types: tuple[str, ...] = ()
    moe_kernels: tuple[str, ...] = ()
    layouts: tuple[Literal["pipeline", "dp_attention"], ...] = ()
    since: str | None = None
    until: str | None = None
    source: str

    def matches(self, gpu: Gpu, model_type: str, multimodal: bool, moe_kernel: str | None, layouts: frozenset[str],
                release: tuple[int, ...]) -> bool:
        return ((not self.vendors or gpu.vendor in self.vendors) and (not self.gpus or gpu.name in self.gpus)
                and (not self.model_types or model_type in self.model_types) and not (self.text_only and multimodal)
                and model_type not in self.except_model_types
                and (not self.moe_kernels or moe_kernel in self.moe_kernels)
                and (not self.layouts or any(layout in layouts for layout in self.layouts))
                and (self.since is None or release >= release_key(self.since))
                and (self.until is None or release <= release_key(self.until)))


@dataclass(frozen=True, kw_only=True)
class SharedExpertFusion:
    """Where an engine runs a model's shared expert as one more expert of every token inside its fused MoE kernel, in
    every pass (bench/SPEED_PROTOCOL.md, the fused-shared-expert amendment): these model types, with this many routed
    experts (None: any), on these GPU vendors (empty: any), unless the fused-MoE kernel picked is one of
    `except_moe_kernels`, from release `since` (None: every release); at expert-parallel size 1."""

    model_types: tuple[str, ...]
    routed_experts: int | None = None
    vendors: tuple[str, ...] = ()
    except_moe_kernels: tuple[str, ...] = ()
    since: str | None = None
    source: str

    def matches(self, model_type: str, experts: int, vendor: str, moe_kernel: str | None,
                release: tuple[int, ...]) -> bool:
        return (model_type in self.model_types and self.routed_experts in (None, experts)
                and (not self.vendors or vendor in self.vendors) and moe_kernel not in self.except_moe_kernels
                and (self.since is None or release >= release_key(self.since)))


@dataclass(frozen=True, kw_only=True, eq=False)  # compared and hashed by identity: its dicts have no hash
class EagerKernels:
    """The kernels an engine's eager pass launches per part of a decoder layer, as its model code runs them (bench/
    SPEED_PROTOCOL.md, the eager-kernels amendment); GEMMs and all-reduces are counted as section 1 counts them."""

    norm: int = bounded(ge=0)  # per norm weight the layer holds
    qk_norm_copy: int = bounded(ge=0)  # per q / k norm: the copy of its slice of the fused QKV output
    # per attention kind (full, sliding, mla) or recurrent mixer (gated_delta_net): its rotary, cache writes,
    # attention kernel and glue; a kind not listed launches one kernel
    attention: dict[str, int]
    block_fp8_quant: int = bounded(ge=0)  # per block-scaled FP8 GEMM: its activations' quantization
    activation: int = bounded(ge=0)  # per dense MLP or shared expert the engine runs on its own
    shared_expert_gate: int = bounded(ge=0)  # a sigmoid-gated shared expert's sigmoid, product and sum
    # the same gate where the shared expert is fused: its sigmoid and the kernel appending it to the top-k
    fused_shared_expert_gate: int = bounded(ge=0)
    # per routing kind: softmax, sigmoid, and grouped routing through the fused gate (every group at most
    # fused_gate_max_group experts) or else the compiled grouped path
    routing: dict[Literal["softmax", "sigmoid", "fused_gate", "compiled_grouped"], int]
    fused_gate_max_group: int = bounded(ge=1)
    # per fused-MoE kernel the engine picks, the kernels its Python launches, and under block FP8 that many more;
    # any other kernel (one that launches from C++) is one call
    fused_moe: dict[str, int]
    fused_moe_block_fp8: int = bounded(ge=0)
    expert_remap: int = bounded(ge=0)  # expert parallelism: the routed ids mapped to the rank's local experts
    source: str

    def routing_kernels(self, routing: str, experts: int, groups: int) -> int:
        return self.routing[self._routing_path(routing, experts, groups)]

    def graphed_routing_kernels(self, routing: str, experts: int, groups: int, moe_kernel: str | None) -> int:
        """Routing kernels a graphed step launches that the MoE tables do not time (they time the fused gate and the
        top-k kernels inside the MoE forward): the compiled grouped path's, where its fused MoE kernel is one whose
        Python launches it (a kernel launching from C++ routes inside itself)."""
        compiled = self._routing_path(routing, experts, groups) == "compiled_grouped"
        return self.routing["compiled_grouped"] if compiled and moe_kernel in self.fused_moe else 0

    def _routing_path(self, routing: str, experts: int, groups: int) -> str:
        if routing == "grouped":
            return "fused_gate" if experts // groups <= self.fused_gate_max_group else "compiled_grouped"
        return routing


@dataclass(frozen=True, kw_only=True)
class ActivationQuantRule:
    """GPU generations whose GEMM tables time a W8A8 / W4A4 GEMM without the activation quantization the engine
    launches before it in a kernel of its own, for every model type but those whose model code fuses it elsewhere
    (bench/SPEED_PROTOCOL.md, the amendments on the activation quantization AITER's GEMM tables leave out)."""

    generations: tuple[str, ...]
    except_model_types: tuple[str, ...] = ()
    source: str

    def matches(self, generation: str, model_type: str) -> bool:
        return generation in self.generations and model_type not in self.except_model_types


@dataclass(frozen=True, kw_only=True)
class LayerAllReduceRule:
    """All-reduces a layer of these model types adds over its attention-TP ranks at the releases named (a
    normalisation over a TP-sharded width: its per-token sums), besides section 1's two of the activations."""

    model_types: tuple[str, ...]
    allreduces: int = bounded(ge=1)
    since: str | None = None
    until: str | None = None
    source: str

    def matches(self, model_type: str, release: tuple[int, ...]) -> bool:
        return (model_type in self.model_types and (self.since is None or release >= release_key(self.since))
                and (self.until is None or release <= release_key(self.until)))


@dataclass(frozen=True, kw_only=True)
class StepOverlapRule:
    """Releases (from `since` to `until`, inclusive; none: open) in which the engine schedules and prepares the next
    step while the GPU runs this one (vLLM's async scheduler, SGLang's overlap scheduler), unless the replica runs
    pipeline parallelism and `not_with_pipeline` says that release turns it off then, or the model is of a type the
    release runs without it while its prefix cache is on (`except_model_types`: SGLang's hybrid models on the no-buffer
    Mamba radix cache; with the radix cache disabled there is none, and the overlap stays on), or of a type it runs so
    only when the model has Mamba layers (`except_model_types_with_mamba`: SGLang's GraniteMoeHybrid branch, which a
    Granite 4.0 of attention layers only does not take)."""

    since: str | None = None
    until: str | None = None
    not_with_pipeline: bool = False
    except_model_types: tuple[str, ...] = ()
    except_model_types_with_mamba: tuple[str, ...] = ()
    source: str

    def matches(self, release: tuple[int, ...], pipeline: bool, model_type: str, prefix_cache: bool,
                mamba: bool) -> bool:
        excepted = model_type in self.except_model_types or (mamba and model_type in self.except_model_types_with_mamba)
        return ((self.since is None or release >= release_key(self.since))
                and (self.until is None or release <= release_key(self.until))
                and not (pipeline and self.not_with_pipeline)
                and not (prefix_cache and excepted))


@dataclass(frozen=True, kw_only=True)
class EngineCost:
    name: str
    aliases: tuple[str, ...] = ()
    # the engine's own work once per step that the GPU waits for: scheduling, input preparation, sampling and the
    # step's graph launch, where not overlapped with the previous step's GPU work
    per_step_us: float = bounded(ge=0)
    # where a release overlaps that work with the previous step's GPU work (any rule matching), what the GPU
    # still waits each step instead: the hand-off between the two
    step_overlap_rules: tuple[StepOverlapRule, ...] = ()
    overlapped_step_us: float = bounded(0.0, ge=0)
    # latency-bound small kernels a decoder layer launches besides its GEMMs and its attention kernel (norms, rotary,
    # KV-cache write, the activation), as the engine's model code runs them; a MoE layer's routing kernels and an
    # MLA layer's extra norms on top
    layer_kernels: int = bounded(ge=0)
    moe_layer_kernels: int = bounded(ge=0)
    mla_layer_kernels: int = bounded(ge=0)
    # where it quantizes a W8A8 / W4A4 GEMM's activations in a kernel of its own that the generation's GEMM tables do
    # not time: one more kernel at the kernel floor per such GEMM (the first rule that matches; none: 0)
    untimed_activation_quant: tuple[ActivationQuantRule, ...] = ()
    # an engine whose fixed costs were measured per layer in clock cycles instead (llama.cpp: its launches run
    # ahead of the GPU and its kernels are its own), replacing the kernel launches and floors above; 0: none
    per_layer_kilocycles: float = bounded(0.0, ge=0)
    # of memory_bandwidth_gbps streaming weights, when the engine's own kernels set it rather than the GPU
    # generation's GEMM tables (llama.cpp's mat-vec kernels dequantizing GGUF blocks); None: the generation's
    memory_efficiency: float | None = bounded(None, gt=0, le=1)
    # the fused-MoE kernel the engine picks by GPU, model type, precision and release: the first rule that matches;
    # none: the kernel its tables measure most (EngineKernels.moe)
    moe_kernel_rules: tuple[MoeKernelRule, ...] = ()
    # where the engine runs prefill passes eagerly (no CUDA graph), and the host seconds it spends per kernel it
    # launches there (its Python dispatch and glue included): such a pass takes the larger of its GPU time and that
    eager_prefill_rules: tuple[EagerPrefillRule, ...] = ()
    eager_launch_us: float = bounded(0.0, ge=0)
    # the all-reduces a layer adds by model type and release (the first rule that matches; none: 0)
    layer_allreduce_rules: tuple[LayerAllReduceRule, ...] = ()
    # the kernels an eager pass launches counted from each layer's parts (None: section 1's flat counts)
    eager_kernels: EagerKernels | None = None
    # where the engine runs a model's shared expert inside its fused MoE kernel, in every pass
    fused_shared_experts: tuple[SharedExpertFusion, ...] = ()
    # how its prefill runs an MLA layer: the latent up-projected to every head's key and value, then dense attention
    # (multi-head), or over the latent as decode does (absorbed); mla_prefill_source says where that was read
    mla_prefill: Literal["absorbed", "multi-head"] = "absorbed"
    mla_prefill_source: str | None = None
    # where its multi-head MLA prefill gives way to the absorbed path inside a captured prefill graph, by release
    mla_prefill_graph: tuple[PrefillGraphCap, ...] = ()
    source: str

    def moe_kernel(self, gpu: str, model_type: str, precision: str, release: str | None) -> str | None:
        """The kernel of the first rule matching, at `release` (None: the engine's default release)."""
        if not self.moe_kernel_rules:
            return None
        key = release_key(release or default_release(self.name))
        return next((r.kernel for r in self.moe_kernel_rules if r.matches(gpu, model_type, precision, key)), None)

    def fuses_shared_expert(self, arch: Architecture, vendor: str, moe_kernel: str | None, release: str | None,
                            ep: int) -> bool:
        """Whether this layout's shared expert runs inside the fused MoE kernel at `release` (None: the default)."""
        moe = arch.moe
        if moe is None or not moe.shared_intermediate_size or ep != 1 or not self.fused_shared_experts:
            return False
        key = release_key(release or default_release(self.name))
        return any(rule.matches(arch.model_type, moe.num_experts, vendor, moe_kernel, key)
                   for rule in self.fused_shared_experts)

    def step_host_us(self, release: str | None, pipeline: bool, model_type: str, prefix_cache: bool = True,
                     mamba: bool = False) -> float:
        """The host work a decode step of `model_type` (with Mamba layers or not) waits for at `release` (None: the
        default), with the engine's prefix cache on or off: the overlapped hand-off where a rule says the release
        schedules ahead, else `per_step_us`."""
        if not self.step_overlap_rules:
            return self.per_step_us
        key = release_key(release or default_release(self.name))
        overlapped = any(r.matches(key, pipeline, model_type, prefix_cache, mamba) for r in self.step_overlap_rules)
        return self.overlapped_step_us if overlapped else self.per_step_us

    def layer_allreduces(self, model_type: str, release: str | None) -> int:
        """All-reduces a layer of `model_type` adds at `release` (None: the default)."""
        if not self.layer_allreduce_rules:
            return 0
        key = release_key(release or default_release(self.name))
        return next((r.allreduces for r in self.layer_allreduce_rules if r.matches(model_type, key)), 0)

    def absorbed_mla_prefill_tokens(self, eager: bool, release: str | None) -> int:
        """The largest prefill pass whose MLA layers run absorbed although the engine's prefill runs them multi-head:
        a captured one (0 where this layout's prefill runs eagerly, or the release captures none)."""
        if eager or not self.mla_prefill_graph:
            return 0
        key = release_key(release or default_release(self.name))
        return next((cap.tokens for cap in self.mla_prefill_graph if cap.matches(key)), 0)

    def eager_prefill(self, gpu: Gpu, model_type: str, multimodal: bool, moe_kernel: str | None,
                      layouts: frozenset[str], release: str | None) -> bool:
        """Whether this layout's prefill passes run without a CUDA graph at `release` (None: the default);
        `multimodal`: the checkpoint has a vision tower."""
        if not self.eager_prefill_rules:
            return False
        key = release_key(release or default_release(self.name))
        return any(r.matches(gpu, model_type, multimodal, moe_kernel, layouts, key) for r in self.eager_prefill_rules)


def default_release(engine: str) -> str:
    """The release planner models when none is asked for (catalogs/engine_profiles.yaml `default`)."""
    from planner.estimator.engines.profiles import load_profiles

    return load_profiles().versions(engine).default


@dataclass(frozen=True, kw_only=True)
class AllReduceFit:
    """One all-reduce call at a TP size as its measured times fit, in two regimes (messages up to 1 MiB; 64 MiB
    and up): `latency + bytes / bandwidth` and `large_latency + 2 (tp-1)/tp x bytes / bus_bandwidth`."""

    tp: int = bounded(gt=1)
    latency_us: float = bounded(ge=0)
    bandwidth_gbps: float = bounded(gt=0)  # algorithm bandwidth of decode-sized messages, GB/s
    large_latency_us: float = bounded(ge=0)
    bus_bandwidth_gbps: float = bounded(gt=0)  # NCCL's bus bandwidth of large messages, GB/s


@dataclass(frozen=True, kw_only=True)
class InterconnectCost:
    kind: str  # the Gpu interconnect kind: nvlink, pcie, infinity-fabric, ...
    generation: str | None = None  # the GPU generation these measurements are of; None: the kind's other GPUs
    engine: str | None = None  # the engine whose all-reduce was measured; None: the engines' median
    # the fits of a group whose GPUs span hosts of one NVLink domain (NVL72 trays): the engines' multi-host path
    across_hosts: bool = False
    allreduce: tuple[AllReduceFit, ...]  # a TP size not listed takes the next larger listed one, or the largest
    source: str

    def fit(self, tp: int) -> AllReduceFit:
        ordered = sorted(self.allreduce, key=lambda f: f.tp)
        return next((f for f in ordered if f.tp >= tp), ordered[-1])


@dataclass(frozen=True, kw_only=True)
class ExpertCompute:
    """The formats a mixed precision's routed experts compute in on these generations, where the engine runs the
    precision natively (precision_support.yaml); elsewhere they take the precision's weight-only MoE kernel."""

    generations: tuple[str, ...]
    tensor_core_format: str  # a key of Gpu.dense_tflops: the rate of the experts' MMA
    kernel_format: str  # the key of their fused-MoE kernel's measurements (GenerationEfficiency.moe)
    source: str


@dataclass(frozen=True, kw_only=True)
class PrecisionCompute:
    """The tensor-core format in which a low-bit precision computes, where the GPU has it natively (None: a
    weight-only precision, which no GPU computes in)."""

    name: str
    tensor_core_format: str | None = None  # a key of Gpu.dense_tflops
    kernel_format: str | None = None  # the key of its kernels' measurements (GenerationEfficiency.gemm / moe)
    # a mixed precision's dense layers: the precision they run as (its entry, and its engine support, time them)
    dense_as: str | None = None
    # a mixed precision's routed experts, by generation (bench/SPEED_PROTOCOL.md, the amendment on DeepSeek-V4's
    # mixed precision)
    experts: tuple[ExpertCompute, ...] = ()
    # the MoE kernel format of its weight-only path (4-bit weights read, 16-bit compute), where measured
    weight_only_format: str | None = None
    # where no table measures weight_only_format: the nearest measured kernel of the same kind
    weight_only_nearest: str | None = None
    source: str

    @property
    def weight_only_formats(self) -> tuple[str, ...]:
        """The weight-only MoE formats to time its experts on, the kernel that runs them first."""
        return tuple(f for f in (self.weight_only_format, self.weight_only_nearest) if f)

    def experts_on(self, generation: str) -> ExpertCompute | None:
        return next((rule for rule in self.experts if generation in rule.generations), None)


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
        by_name = {alias: g for g in self.generations for alias in (g.name, *g.aliases)}
        return by_name.get(name) or by_name["default"]

    def engine(self, name: str) -> EngineCost:
        key = name.strip().lower()
        for engine in self.engines:
            if key == engine.name or key in engine.aliases:
                return engine
        known = ", ".join(e.name for e in self.engines)
        raise PlannerInputError(f"engine: no performance factors for {name!r}; use one of {known}")

    def interconnect(self, kind: str, generation: str, engine: str | None = None,
                     across_hosts: bool = False) -> InterconnectCost:
        """The kind's entry measured on this generation with this engine, else on this generation, else the kind's
        own, else `default`; for a group across hosts, the kind's entries across hosts first (by generation and
        engine, then any generation), then those."""
        chain = [(kind, generation, engine, False), (kind, generation, None, False), (kind, None, None, False),
                 ("default", None, None, False)]
        if across_hosts:
            chain[:0] = [(kind, generation, engine, True), (kind, generation, None, True), (kind, None, engine, True),
                         (kind, None, None, True)]
        for wanted in chain:
            for entry in self.interconnects:
                if (entry.kind, entry.generation, entry.engine, entry.across_hosts) == wanted:
                    return entry
        raise PlannerInputError("catalog performance.yaml: interconnects needs a 'default' entry")

    def precision(self, name: str) -> PrecisionCompute | None:
        return next((p for p in self.precisions if p.name == name), None)


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
        for engine_name, own in generation.engines.items():
            for kernel in own.sparse_prefill:
                if not kernel.well_formed:
                    raise PlannerInputError(
                        f"catalog {path.name}: generations[{generation.name}].engines.{engine_name}.sparse_prefill "
                        f"{kernel.kernel}: give head_block with compute_efficiency (a FlashMLA kernel) or "
                        f"read_efficiency alone (a kernel that gathers the latents)")
        for field, value in generation.read_efficiencies.items():
            if value > generation.read_ceiling:
                raise PlannerInputError(f"catalog {path.name}: generations[{generation.name}].{field} {value:g} is above "
                                        f"its measured read_ceiling {generation.read_ceiling:g}; lower it to at most that")
    for precision in catalog.precisions:
        if precision.dense_as is not None and (precision.dense_as == precision.name
                                               or catalog.precision(precision.dense_as) is None):
            raise PlannerInputError(f"catalog {path.name}: precisions[{precision.name}].dense_as "
                                    f"{precision.dense_as!r} is no other entry of precisions; name one")
        unknown = sorted({name for rule in precision.experts for name in rule.generations}
                         - {g.name for g in catalog.generations})
        if unknown:
            raise PlannerInputError(f"catalog {path.name}: precisions[{precision.name}].experts names "
                                    f"{', '.join(unknown)}, no generation of this catalog; name its generations")
    for engine in catalog.engines:
        unknown = sorted({name for rule in engine.untimed_activation_quant for name in rule.generations}
                         - {g.name for g in catalog.generations})
        if unknown:
            raise PlannerInputError(f"catalog {path.name}: engines[{engine.name}].untimed_activation_quant names "
                                    f"{', '.join(unknown)}, no generation of this catalog; name its generations")
        measured = {name for g in catalog.generations for own in (g.engines.get(engine.name),) if own
                    for name in (own.moe_kernel, *own.moe_kernels) if name}
        for i, rule in enumerate(engine.moe_kernel_rules):
            if rule.kernel not in measured:
                raise PlannerInputError(f"catalog {path.name}: engines[{engine.name}].moe_kernel_rules[{i}].kernel "
                                        f"{rule.kernel!r} is measured on no generation; add its table's rates under a "
                                        f"generation's engines.{engine.name}.moe_kernels or name a measured kernel")
    for interconnect in catalog.interconnects:
        if not interconnect.allreduce:
            raise PlannerInputError(f"catalog {path.name}: interconnects[{interconnect.kind}].allreduce needs at "
                                    "least one TP size")
    for generation in catalog.generations:
        for table in ("gemm", "moe"):
            if WIDE_FORMAT not in getattr(generation, table):
                raise PlannerInputError(f"catalog {path.name}: generations[{generation.name}].{table} needs a "
                                        f"'{WIDE_FORMAT}' entry (the formats without measurements take it)")
        if UNQUANTIZED_BITS not in generation.attention:
            raise PlannerInputError(f"catalog {path.name}: generations[{generation.name}].attention needs a "
                                    f"{UNQUANTIZED_BITS}-bit entry")
    return catalog


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int
    output_tokens: int
    # tokens at the start of every prompt that all requests share (a system prompt): what a prefix cache holds once
    # (planner.estimator.capacity.Scheduler.cached_tokens); the speed model times the steps it is given
    shared_prefix_tokens: int = 0
    # the prompt's KV arrives computed by another replica (a disaggregated decode pool, planner.plan.disaggregated):
    # the request computes only its last prompt token and holds its whole prompt's KV of its own
    # (planner.estimator.capacity.Scheduler.own_prompt)
    prefilled: bool = False


@dataclass(frozen=True)
class ForwardTime:
    """One forward pass of one pipeline stage on one rank, term by term (seconds); the terms add up to total_s."""

    dense_gemm_s: float  # the dense GEMMs, lm_head included: each the larger of its weight read and its compute
    moe_s: float  # the fused MoE kernels: the touched experts' read or their compute
    attention_s: float  # decode attention's cache read (or FLOPs) and prefill attention's FLOPs
    kernel_launch_s: float  # fixed: GEMM and MoE launches, the small kernels' floors (llama.cpp: its cycles)
    engine_step_s: float  # fixed: the engine's own work once per step (last stage)
    allreduce_s: float
    # an eager prefill pass's host launches past the GPU's time above (the host sets the pace; 0: graphed or GPU-bound)
    eager_host_s: float
    memory_s: float  # of the three above, the time their byte reads would take
    compute_s: float  # and the time their FLOPs would take
    weight_bytes: int  # read by one rank
    kv_bytes: int
    total_s: float

    @property
    def bound(self) -> DecodeBound:
        terms: dict[DecodeBound, float] = {"memory": self.memory_s, "compute": self.compute_s,
                                           "overhead": self.kernel_launch_s + self.engine_step_s + self.eager_host_s,
                                           "communication": self.allreduce_s}
        return max(terms, key=lambda k: terms[k])

    def plus(self, other: ForwardTime) -> ForwardTime:
        """Two passes one after the other, term by term."""
        return ForwardTime(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(ForwardTime)))

    def terms_s(self) -> dict[str, float]:
        """Every term of the stage's time by name; they add up to total_s."""
        return {"dense_gemm": self.dense_gemm_s, "moe": self.moe_s, "attention": self.attention_s,
                "kernel_launch": self.kernel_launch_s, "engine_step": self.engine_step_s, "allreduce": self.allreduce_s,
                "eager_host": self.eager_host_s}


_TOTAL = 11  # total_s's index in a _Terms tuple (ForwardTime's field order)
NORM_SUM_BYTES = 8  # a layer's q and k sums of squares, one fp32 each a token (LayerAllReduceRule)


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
    decode: ForwardTime  # the decode step of the slowest pipeline stage, term by term
    pp_bubble_s: float  # time the slowest stage waits per decode step (pp > batch)
    engine: str
    borrowed: bool  # the GPU's generation has no kernel measurements: the `default` generation's constants
    moe_kernel: str | None = None  # the fused-MoE kernel the step is timed with, where the catalog names it
    eager_prefill: bool = False  # the engine launches its prefill passes without a CUDA graph (its eager_prefill_rules)
    # then: the kernels the slowest stage's prefill pass launches, and the host's seconds for each (0 when graphed)
    eager_launches: int = 0
    eager_launch_s: float = 0.0


# ---------------------------------------------------------------------------------------------
# What one rank of one pipeline stage holds and computes


@dataclass(frozen=True)
class _Gemms:
    """Dense GEMMs on one rank, split by the rate they compute at: bytes read per pass, FLOPs per row (token)."""

    low_bit_bytes: int = 0  # stored below 16 bits: the precision's tensor-core rate where native
    low_bit_flops: float = 0.0
    wide_bytes: int = 0  # 16-bit (or wider) weights
    wide_flops: float = 0.0
    low_bit_kernels: int = 0  # GEMM kernels launched per pass (fused projections count once)
    wide_kernels: int = 0

    def __add__(self, other: _Gemms) -> _Gemms:
        return _Gemms(self.low_bit_bytes + other.low_bit_bytes, self.low_bit_flops + other.low_bit_flops,
                      self.wide_bytes + other.wide_bytes, self.wide_flops + other.wide_flops,
                      self.low_bit_kernels + other.low_bit_kernels, self.wide_kernels + other.wide_kernels)

    @property
    def bytes(self) -> int:
        return self.low_bit_bytes + self.wide_bytes


@dataclass(frozen=True)
class _Experts:
    """The routed experts of a stage's MoE layers on one rank: one expert's bytes and FLOPs per routed token, summed
    over the layers (every MoE layer of a model has the same E and k)."""

    count: int = 0  # E per layer (0: dense)
    per_token: int = 0  # k
    layers: int = 0
    ranks: int = 1  # the expert-parallel ranks the E experts are dealt over (E / ranks on each)
    bytes: int = 0
    flops: float = 0.0
    columns: int = 0  # output columns of one expert's GEMMs (the sum of their output dimensions on the rank)
    low_bit: bool = False  # stored below 16 bits
    shared: int = 0  # shared experts run inside the fused MoE kernel: every token routes to them, in every MoE layer


@dataclass(frozen=True)
class _Stage:
    layers: int
    mla_layers: int
    body: _Gemms
    head: _Gemms  # the lm_head on the last stage (its rows are the positions whose logits are computed)
    experts: _Experts
    # (FLOPs per attended position, in an MLA layer's multi-head prefill form (0: not MLA, or a DSA layer), window,
    # whether its prefill runs the engine's dense prefill kernel: a full or sliding-window layer, whether its absorbed
    # form runs the MLA decode kernel: a dense MLA layer) per layer
    attention: tuple[tuple[float, float, int | None, bool, bool], ...]
    # with data-parallel attention, the GEMMs of the attention-TP group (each DP group's own tokens)
    attention_body: _Gemms = _Gemms()
    sparse: _SparseLayers | None = None  # its DeepSeek Sparse Attention layers
    delta_layers: int = 0  # its Gated DeltaNet layers
    delta_token_flops: float = 0.0  # and their chunked prefill kernels' FLOPs per prompt token on one rank

    def decode_attention(self, latent_scale: float) -> tuple[tuple[float, int | None], ...]:
        """FLOPs per attended position summed over the layers sharing a window (one term per window), scaled to the
        attention rate: the dense MLA layers by `latent_scale` (the attention rate over the MLA decode kernel's)."""
        summed: dict[int | None, float] = {}
        for per_position, _, window, _, latent in self.attention:
            summed[window] = summed.get(window, 0.0) + (per_position * latent_scale if latent else per_position)
        return tuple((flops, window) for window, flops in summed.items())

    def prefill_attention(self, dense_scale: float, mla_scale: float | None, row_positions: float,
                          latent_scale: float) -> tuple[tuple[tuple[float, int | None], ...], float]:
        """As decode_attention for a prefill pass, each layer's FLOPs scaled to the attention rate: the dense layers
        by `dense_scale` (the attention rate over the prefill kernel's), the MLA layers in their multi-head form by
        `mla_scale` (over the engine's MLA prefill rate; None: the engine runs them absorbed, as decode, by
        `latent_scale`); and the FLOPs each query row costs beside them, row_positions attended positions of every
        layer run by a prefill kernel (bench/SPEED_PROTOCOL.md, the amendment on prefill attention's per-row cost)."""
        summed: dict[int | None, float] = {}
        row_flops = 0.0
        for per_position, multi_head, window, dense, latent in self.attention:
            if multi_head and mla_scale is not None:
                flops = multi_head * mla_scale
                row_flops += flops * row_positions
            elif dense:
                flops = per_position * dense_scale
                row_flops += flops * row_positions
            else:
                flops = per_position * latent_scale if latent else per_position
            summed[window] = summed.get(window, 0.0) + flops
        return tuple((flops, window) for window, flops in summed.items()), row_flops


class _SparseLayers(NamedTuple):
    """A stage's DeepSeek Sparse Attention layers on one rank, as a sparse prefill kernel times them."""

    layers: int
    topk: int  # index_topk: the slots each query attends to
    heads: int  # query heads on the rank
    position_flops: float  # one layer's FLOPs per attended position at those heads (_attention_flops_per_position)
    latent_dim: int  # values of one latent slot
    indexed: int  # the layers that run their own indexer (GLM-5's shared layers reuse the previous one's top-k)
    logits_flops: float  # the indexer's FLOPs per (query, earlier key) pair, summed over those layers


# FLA's chunk (CHUNK_SIZE in SGLang kernels/ops/attention/fla/chunk.py @ v0.5.23 and vLLM's layers/fla/ops)
DELTA_CHUNK = 64


def _delta_flops_per_token(attention: Attention, attention_tp: int) -> float:
    """A Gated DeltaNet layer's chunked prefill FLOPs per prompt token on one rank, 2 C d_k + 4 C (d_k + d_v) +
    6 d_k d_v per value head (C = DELTA_CHUNK): K K^T in a chunk, the W and U recomputation, the state pass's two
    products, and the output's inter-chunk product and intra-chunk scores and sum (bench/SPEED_PROTOCOL.md, the Gated
    DeltaNet prefill amendment)."""
    k, v = attention.delta_key_dim, attention.delta_value_dim
    per_head = 2 * DELTA_CHUNK * k + 4 * DELTA_CHUNK * (k + v) + 6 * k * v
    return ceil(attention.delta_heads / attention_tp) * per_head


def _attention_flops_per_position(attention: Attention, heads_per_rank: int) -> float:
    """2 FLOPs per multiply-add for QK^T and for AV, per attended position, one layer, one rank."""
    if attention.kind in ("full", "sliding"):
        values = attention.k_head_dim if attention.values_are_keys else attention.v_head_dim
        return 2 * heads_per_rank * (attention.k_head_dim + values)
    if attention.kind == "mla":
        # absorbed MLA (the engines' decode): every head scores the shared latent and sums its kv_lora_rank values, as
        # the MLA decode kernels compute (bench/SPEED_PROTOCOL.md, the amendment on MLA decode's compute side); a DSA
        # layer sums the whole latent, the count its sparse kernels' efficiencies were fitted on (bench/dsa_constants.py)
        summed = attention.latent_dim if attention.index_topk or not attention.latent_value_dim \
            else attention.latent_value_dim
        return 2 * heads_per_rank * (attention.latent_dim + summed)
    return 0.0  # linear-attention / Mamba: constant state, no per-position attention


def _multi_head_prefill_flops_per_position(attention: Attention, heads_per_rank: int) -> float:
    """An MLA layer's prefill as the engines' prefill kernels run it: the latent up-projected to every head's key and
    value, then dense attention over them (bench/SPEED_PROTOCOL.md, the MLA prefill amendment); 0 for other layers
    and for DSA layers (their sparse prefill is timed on its own)."""
    if attention.kind != "mla" or attention.index_topk or not attention.k_head_dim:
        return 0.0
    return 2 * heads_per_rank * (attention.k_head_dim + attention.v_head_dim)


def _compressed_attention(attention: Attention, heads_per_rank: int) -> tuple[float, float, int | None, bool, bool]:
    """A DeepSeek-V4 layer's compressed entries as a _Stage.attention term in token units: an entry's FLOPs spread over
    the compress_ratio tokens it pools, attended up to the indexer's top-k entries (every entry without one); at the
    attention rate, no prefill row cost of its own (bench/SPEED_PROTOCOL.md, the compressed-attention amendment)."""
    ratio = attention.compress_ratio
    cap = attention.compressed_topk * ratio if attention.compressed_topk else None
    return _attention_flops_per_position(attention, heads_per_rank) / ratio, 0.0, cap, False, False


# Projections that read the same input, which the engines run as one GEMM (vLLM QKVParallelLinear,
# MergedColumnParallelLinear; DeepSeek's fused_qkv_a_proj): the module name of the fused partner they join.
_FUSED_WITH = {"k_proj": "q_proj", "v_proj": "q_proj", "up_proj": "gate_proj", "kv_a_proj_with_mqa": "q_a_proj"}


def _gemm_kernels(tensors: list[Tensor]) -> int:
    """GEMM kernels a pass launches for these 2-D tensors, fused projections counted once."""
    modules = set()
    for t in tensors:
        module, _, _ = t.name.rpartition(".")
        parent, _, last = module.rpartition(".")
        modules.add(f"{parent}.{_FUSED_WITH.get(last, last)}")
    return len(modules)


def _is_low_bit(t: Tensor, shard: tuple[int, ...], precision: Precision) -> bool:
    return tensor_bytes(shard, 1, t, precision) < prod(shard) * ACTIVATION_BYTES


@lru_cache(maxsize=4096)
def _gemms(tensors: tuple[Tensor, ...], precision: Precision, tp: int, kv_heads: int, ep: int = 1, dp: int = 1,
           attention_group: bool = False) -> _Gemms:
    """The dense matmuls among `tensors` on one rank (embeddings are row lookups, norms elementwise), placed as
    the memory estimate places them (rank_share: a shared expert is whole on every rank with an all-to-all backend); with `dp`
    attention-DP groups, those on the attention-TP group (`attention_group`) or those on every token (not).
    Cached: the layers of a model repeat the same tensors, and the solver asks many times."""
    out = _Gemms()
    low_bit, wide = [], []
    for t in tensors:
        if t.role not in DENSE_MATMUL_ROLES or len(t.shape) != 2 \
                or (dp > 1 and on_attention_group(t)) != attention_group:
            continue
        shard = shard_shape(t, rank_share(t, tp, dp, ep)[0], kv_heads)
        size = tensor_bytes(shard, t.count, t, precision)
        flops = 2 * prod(shard) * t.count
        if _is_low_bit(t, shard, precision):
            out += _Gemms(low_bit_bytes=size, low_bit_flops=flops)
            low_bit.append(t)
        else:
            out += _Gemms(wide_bytes=size, wide_flops=flops)
            wide.append(t)
    return replace(out, low_bit_kernels=_gemm_kernels(low_bit), wide_kernels=_gemm_kernels(wide))


@lru_cache(maxsize=4096)
def _experts(tensors: tuple[Tensor, ...], precision: Precision, tp: int, kv_heads: int, per_token: int,
             ep: int = 1) -> _Experts:
    """One expert's part on one rank: with `ep`-way expert parallelism each rank holds E / ep experts, each split
    tp / ep ways (rank_share)."""
    experts = [t for t in tensors if t.role == "expert"]
    if not experts:
        return _Experts()
    shards = [(t, shard_shape(t, rank_share(t, tp, 1, ep)[0], kv_heads)) for t in experts]
    return _Experts(count=experts[0].count, per_token=per_token, layers=1, ranks=ep,
                    bytes=sum(tensor_bytes(shard, 1, t, precision) for t, shard in shards),
                    flops=sum(2 * prod(shard) for t, shard in shards if len(shard) == 2),
                    columns=sum(shard[0] for t, shard in shards if len(shard) == 2),
                    low_bit=_is_low_bit(*shards[0], precision))


def _block_fp8(bits: float, scales) -> bool:
    return bits == 8 and scales is not None and scales.granularity == "block"


def _fused_shared_tensors(layer: Layer) -> tuple[Tensor, ...]:
    """The shared expert's MLP GEMMs of a MoE layer, which a fused shared expert runs inside the fused MoE kernel (its
    sigmoid gate, a router GEMM, stays: SGLang qwen2_moe.py _get_shared_expert_weights @ v0.5.12)."""
    if not layer.is_moe:
        return ()
    return tuple(t for t in layer.tensors if t.role == "linear" and (".shared_expert." in t.name
                                                                     or ".shared_experts." in t.name))


@lru_cache(maxsize=1024)
def _eager_launches(arch: Architecture, precision: Precision, tp: int, pp: int, ep: int, counts: EagerKernels,
                    moe_kernel: str | None, fused_shared: bool) -> tuple[int, ...]:
    """Per pipeline stage, the kernels an eager pass launches on one rank, each layer counted from its parts by the
    engine's `counts` (EagerKernels), the lm_head on the last stage; the all-reduces are added where the stage is
    costed. `fused_shared`: the shared expert runs inside the fused MoE kernel (EngineCost.fuses_shared_expert)."""
    kv_heads = model_kv_heads(arch)
    quantizes = _block_fp8(precision.bits, precision.scales)
    experts_format = precision.experts or precision
    moe = arch.moe
    gate_kernels = counts.fused_shared_expert_gate if fused_shared else counts.shared_expert_gate
    if moe is None:
        moe_launches = 0
    elif moe_kernel in counts.fused_moe:
        moe_launches = (counts.fused_moe[moe_kernel]
                        + counts.fused_moe_block_fp8 * _block_fp8(experts_format.bits, experts_format.scales))
    else:
        moe_launches = 1
    if moe is not None:
        moe_launches += (counts.routing_kernels(moe.routing, moe.num_experts, moe.expert_groups)
                         + counts.expert_remap * (ep > 1))

    def layer_launches(layer: Layer) -> int:
        shared = _fused_shared_tensors(layer) if fused_shared else ()
        gemms = _gemms(layer.tensors, precision, tp, layer_kv_heads(layer, kv_heads), ep)
        gemm_kernels = gemms.low_bit_kernels + gemms.wide_kernels
        quantized = gemms.low_bit_kernels
        if shared:
            own = _gemms(shared, precision, tp, layer_kv_heads(layer, kv_heads), ep)
            gemm_kernels -= own.low_bit_kernels + own.wide_kernels
            quantized -= own.low_bit_kernels
        names = [t.name for t in layer.tensors]
        norms = [t.name for t in layer.tensors if t.role == "norm" and t.name.endswith(".weight")
                 and "norm" in t.name.rsplit(".", 2)[-2]]
        # LFM2 names its per-head norms q_layernorm / k_layernorm and its MLP's down projection w2 (SGLang 0.5.9
        # models/lfm2.py:187-192 copies each of q and k before its norm; :97-101 activates the MLP)
        qk_norms = [n for n in norms if n.endswith(("q_norm.weight", "k_norm.weight", "q_layernorm.weight",
                                                    "k_layernorm.weight"))]
        mlps = sum(1 for t in layer.tensors if t.role == "linear" and t.name.endswith(("down_proj.weight",
                                                                                       "feed_forward.w2.weight"))
                   and t not in shared)
        attention = layer.attention
        kind = attention.recurrence if attention.kind in ("linear", "mamba") else attention.kind
        return (counts.norm * len(norms) + counts.qk_norm_copy * len(qk_norms) + counts.attention.get(kind or "", 1)
                + gemm_kernels + counts.block_fp8_quant * quantized * quantizes + counts.activation * mlps
                + gate_kernels * any(n.endswith("shared_expert_gate.weight") for n in names)
                + moe_launches * layer.is_moe)

    head = _gemms(arch.head + tied_lm_head(arch), precision, tp, kv_heads)
    stages = [sum(layer_launches(layer) for layer in arch.layers[first:last])
              for first, last in pipeline_stages(arch.num_layers, pp)]
    stages[-1] += head.low_bit_kernels + head.wide_kernels
    return tuple(stages)


def _summed_experts(parts: list[_Experts]) -> _Experts:
    moe = [p for p in parts if p.count]
    if not moe:
        return _Experts()
    return replace(moe[0], layers=len(moe), bytes=sum(p.bytes for p in moe), flops=sum(p.flops for p in moe),
                   columns=sum(p.columns for p in moe))


@lru_cache(maxsize=1024)
def _stages(arch: Architecture, precision: Precision, tp: int, pp: int, as_stored: bool, ep: int = 1, dp: int = 1,
            fused_shared: bool = False) -> tuple[_Stage, ...]:
    """`fused_shared`: the shared expert runs inside the fused MoE kernel as one more expert of every token (as wide as
    a routed one: the fusion rules' models), not as dense GEMMs of its own."""
    heads_per_rank = ceil(arch.num_attention_heads / (tp // dp))
    kv_heads = model_kv_heads(arch)
    k = arch.moe.experts_per_token if arch.moe else 0
    stages = []
    for index, (first, last) in enumerate(pipeline_stages(arch.num_layers, pp)):
        layers = arch.layers[first:last]
        attention = tuple((_attention_flops_per_position(layer.attention, heads_per_rank),
                           _multi_head_prefill_flops_per_position(layer.attention, heads_per_rank),
                           layer.attention.window or layer.attention.index_topk or None,
                           layer.attention.kind in ("full", "sliding"),
                           layer.attention.kind == "mla" and not layer.attention.index_topk) for layer in layers)
        attention += tuple(_compressed_attention(layer.attention, heads_per_rank) for layer in layers
                           if layer.attention.compress_ratio)
        mla = sum(1 for layer in layers if layer.attention.kind == "mla")
        dsa = [layer.attention for layer in layers if layer.attention.kind == "mla" and layer.attention.index_topk]
        sparse = _SparseLayers(len(dsa), dsa[0].index_topk, heads_per_rank,
                               _attention_flops_per_position(dsa[0], heads_per_rank), dsa[0].latent_dim,
                               sum(1 for a in dsa if a.indexer_heads),
                               sum(2 * a.indexer_heads * a.indexer_head_dim for a in dsa)) if dsa else None
        delta = [layer.attention for layer in layers if layer.attention.delta_heads]
        if not arch.exact:
            stages.append(_size_only_stage(arch, precision, tp, len(layers), mla, attention, as_stored))
            continue
        head: tuple[Tensor, ...] = ()
        if index == pp - 1:
            head = arch.head + tied_lm_head(arch)
        dense = [tuple(t for t in layer.tensors if t not in fused) if fused else layer.tensors
                 for layer in layers for fused in (_fused_shared_tensors(layer) if fused_shared else (),)]
        experts = _summed_experts([_experts(layer.tensors, precision, tp, kv_heads, k, ep) for layer in layers])
        if fused_shared and experts.count:
            experts = replace(experts, shared=arch.moe.shared_intermediate_size // arch.moe.expert_intermediate_size)
        heads = [layer_kv_heads(layer, kv_heads) for layer in layers]  # each layer's K/V split by its own heads
        stages.append(_Stage(
            layers=len(layers), mla_layers=mla,
            body=sum((_gemms(tensors, precision, tp, h, ep, dp) for tensors, h in zip(dense, heads)), _Gemms()),
            head=_gemms(head, precision, tp, kv_heads),
            experts=experts,
            attention=attention,
            attention_body=sum((_gemms(tensors, precision, tp, h, ep, dp, True) for tensors, h in zip(dense, heads)),
                               _Gemms()) if dp > 1 else _Gemms(),
            sparse=sparse,
            delta_layers=len(delta), delta_token_flops=sum(_delta_flops_per_token(a, tp // dp) for a in delta),
        ))
    return tuple(stages)


def _size_only_stage(arch: Architecture, precision: Precision, tp: int, layers: int, mla_layers: int,
                     attention: tuple[tuple[float, float, int | None], ...], as_stored: bool) -> _Stage:
    """A model known by its weight count: weights and matmuls spread evenly over layers and ranks, four GEMMs a
    layer (a transformer layer's fused QKV, output, gate-up and down projections); the bytes of its weights files
    when they were read and no other precision is asked (as planner.estimator.memory)."""
    fraction = layers / arch.num_layers / tp
    share = (arch.declared_params or 0) * fraction
    weight_bytes = ceil(arch.stored_bytes * fraction if as_stored and arch.stored_bytes else share * precision.seed_bits / 8)
    body = _Gemms(low_bit_bytes=weight_bytes, low_bit_flops=2 * share, low_bit_kernels=4 * layers) \
        if precision.seed_bits < UNQUANTIZED_BITS else _Gemms(wide_bytes=weight_bytes, wide_flops=2 * share,
                                                               wide_kernels=4 * layers)
    return _Stage(layers=layers, mla_layers=mla_layers, body=body, head=_Gemms(), experts=_Experts(),
                  attention=attention)


# ---------------------------------------------------------------------------------------------
# Timing one forward pass


class _Rates(NamedTuple):
    """One kernel format's measured rates on this GPU: bytes/s reading weights, FLOP/s at most, the rows at half
    of that, and one call's fixed seconds."""

    bytes_per_s: float
    flops_per_s: float
    half_m: float
    launch_s: float


class _SparseRates(NamedTuple):
    """An engine's DeepSeek Sparse Attention prefill kernels on this GPU (SparsePrefillKernel, IndexerRates)."""

    head_block: int  # a FlashMLA kernel's: the heads it runs at least (0: the gathering kernel)
    flops_per_s: float  # a FlashMLA kernel's
    read_bytes_per_s: float  # the gathering kernel's
    value_bytes: float  # of one cached latent value (the KV width)
    logits_flops_per_s: float
    topk_s: float  # the indexer's top-k, per query past index_topk


class _AllReduce(NamedTuple):
    """One all-reduce call at a TP size, in its two measured regimes: decode-sized messages (latency plus bytes
    over the small messages' bandwidth) and large ones (latency plus 2 (tp-1)/tp of the bytes over the bus
    bandwidth); a call takes the faster fit, which is the regime it is in."""

    latency_s: float
    bytes_per_s: float
    large_latency_s: float
    bus_bytes_per_s: float


@dataclass(frozen=True)
class _Hardware:
    low_bit: _Rates  # the dense GEMMs stored below 16 bits
    wide: _Rates  # the 16-bit dense GEMMs
    moe: _Rates  # the fused MoE kernel in the experts' format
    moe_column_s: float  # and its fixed seconds per output column of a touched expert's GEMMs
    moe_activation_passes: float  # and the times a routed row's activations cross memory (0: none timed)
    moe_kernel: str | None  # its name where the catalog names it (the engine's choice by release)
    kv_bytes_per_s: float  # decode attention reading the paged KV cache
    latent_bytes_per_s: float  # MLA decode reading the latent cache
    attention_flops_per_s: float
    latent_flops_per_s: float  # the MLA decode kernel's FLOPs (a dense MLA layer's absorbed form)
    prefill_attention_flops_per_s: float  # a prefill attention kernel, at its long-prompt asymptote
    prefill_row_positions: float  # and each query row's fixed cost, in attended positions
    layer_fixed_s: float  # a decoder layer's small kernels and its attention kernel's launch (or llama.cpp's cycles)
    moe_layer_fixed_s: float  # a MoE layer's kernels its fused MoE kernel's measured time leaves out (routing, sort)
    mla_layer_fixed_s: float  # an MLA layer's extra kernels
    # a low-bit GEMM's activation quantization where it is a kernel the GEMM tables do not time (0: none, or timed)
    activation_quant_s: float
    # host seconds per kernel launched in an eager prefill pass (0: the engine graphs this layout's prefill), and the
    # kernels a decoder layer, a MoE layer's routing and an MLA layer launch besides its GEMMs
    eager_launch_s: float
    layer_launches: int
    moe_layer_launches: int
    graph_gap_s: float  # added once per kernel a pass launches
    mla_layer_launches: int
    step_overhead_s: float
    allreduce: _AllReduce
    handoff: _AllReduce  # a point-to-point send between two GPUs: a two-GPU all-reduce's fit, an upper bound
    tp: int
    hidden: int
    attention_allreduce: _AllReduce | None = None  # over the attention-TP group, with DP attention and tp / dp > 1
    attention_tp: int = 1
    norm_allreduces: int = 0  # all-reduces of per-token sums a layer adds over the attention-TP ranks (0 at TP 1)
    sparse_prefill: _SparseRates | None = None  # the engine's DSA prefill kernels where its tables time them
    # the engine's Gated DeltaNet prefill kernels where its tables time them: seconds a layer per chunk, FLOP/s
    delta_chunk_s: float = 0.0
    delta_flops_per_s: float = 0.0
    # FLOP/s of an MLA layer's prefill in the multi-head form, where the engine runs it so (0: absorbed, as decode),
    # and the largest pass that still runs absorbed (captured in a prefill graph)
    mla_prefill_flops_per_s: float = 0.0
    mla_absorbed_prefill_tokens: int = 0
    # FLOP/s of an indexer's FP8 logits on FP8 keys (DeepSeek-V4's, DSA's off the tables; 0: the attention rate)
    fp8_logits_flops_per_s: float = 0.0

    def attention_allreduce_s(self, tokens: int) -> float:
        """One all-reduce of `tokens` activations over the attention-TP group (0 when it is one GPU)."""
        if self.attention_allreduce is None:
            return 0.0
        return _collective_s(self.attention_allreduce, tokens * self.hidden * ACTIVATION_BYTES, self.attention_tp)

    def norm_allreduce_s(self, tokens: int) -> float:
        """One all-reduce of a layer's per-token sums (two fp32 values a token) over the attention-TP ranks."""
        fit = self.attention_allreduce or self.allreduce
        return _collective_s(fit, tokens * NORM_SUM_BYTES, self.attention_tp) if self.norm_allreduces else 0.0

    def allreduce_s(self, tokens: int) -> float:
        """One all-reduce of `tokens` activations."""
        return _collective_s(self.allreduce, tokens * self.hidden * ACTIVATION_BYTES, self.tp)

    def handoff_s(self, tokens: int) -> float:
        """Pipeline stage to stage: the activations of `tokens`, point to point."""
        return _collective_s(self.handoff, tokens * self.hidden * ACTIVATION_BYTES, 2)


def _collective_s(fit: _AllReduce, payload: float, ranks: int) -> float:
    small = fit.latency_s + payload / fit.bytes_per_s
    large = fit.large_latency_s + 2 * (ranks - 1) / ranks * payload / fit.bus_bytes_per_s
    return small if small <= large else large


# A stage's forward as plain numbers, in ForwardTime's field order. The step time needs only the total and is on
# the solver's hot path, so the ForwardTime is built only for the stage reported.
_Terms = tuple[float, float, float, float, float, float, float, float, float, int, int, float]


# A stage's indexers, one per (compress ratio, top-k): (key bytes per token of context, logits FLOPs per token of
# context in a decode step, and per (prompt token, earlier token) pair in a prefill chunk, compress ratio, top-k, FP8
# logits), read and scored for a sequence holding more than top-k entries: DeepSeek-V4's Lightning Indexers, MiniMax
# Sparse Attention's, and a DSA layer's where no kernel table times its prefill (bench/SPEED_PROTOCOL.md, the
# compressed-attention, DSA-indexer, MiniMax Sparse Attention and FP8-logits amendments). A stage cost's FLOPs are at
# the attention rate (an FP8 indexer's scaled to it).
Indexers = tuple[tuple[int, float, float, int, int, bool], ...]


class _StageCost(NamedTuple):
    """One stage on one rank with the hardware's rates folded in, resolved once per timer: the per-step arithmetic
    (the solver's hot path) reads plain fields."""

    attention_by_window: tuple[tuple[float, int | None], ...]
    kv_growing: int  # cache bytes per token of the layers whose KV grows with the context, on one rank
    kv_sliding: tuple[tuple[int, int], ...]  # (bytes per token, window) of the sliding-window layers
    kv_state: int  # the constant state of recurrent layers, read and written back by every decode step
    kv_latent: tuple[tuple[int, int], ...]  # (bytes per token, tokens read at most) of the MLA latents
    # dense GEMMs by format, and the lm_head: (read seconds per pass, compute seconds per row, rows at half rate)
    low_read_s: float
    low_row_s: float
    low_half_m: float
    wide_read_s: float
    wide_row_s: float
    wide_half_m: float
    head_read_s: float
    head_row_s: float
    head_half_m: float
    weight_bytes: int  # dense, read every pass
    experts: int
    expert_missed: float  # 1 - k/E: the chance one token's picks miss a given expert (0 when dense)
    per_token: int
    expert_ranks: int  # expert-parallel ranks (1: every rank holds a part of every expert)
    expert_bytes: int
    expert_read_s: float  # one expert of every MoE layer, read
    expert_row_s: float  # one routed token through one expert of every MoE layer, computed
    expert_half_m: float
    expert_tiles_s: float  # one touched expert's tiles' fixed cost, every MoE layer
    expert_row_read_s: float  # one routed row's activations moved through memory, every MoE layer
    kv_bytes_per_s: float
    latent_bytes_per_s: float
    attention_flops_per_s: float
    launch_s: float  # the fixed GPU time of the pass
    eager_host_s: float  # the host's time launching the pass's kernels, where the engine runs a prefill eagerly
    step_s: float  # the engine's per-step cost (last stage)
    allreduces: int  # all-reduces of the activations per pass
    norm_allreduces: int  # all-reduces of per-token sums per pass (LayerAllReduceRule)
    # data-parallel attention: the attention-TP group's GEMMs on the group's own tokens (0 without DP attention)
    attention_low_read_s: float = 0.0
    attention_low_row_s: float = 0.0
    attention_wide_read_s: float = 0.0
    attention_wide_row_s: float = 0.0
    launches: int = 0  # the kernels the pass launches (what eager_host_s counts, at the engine's host cost each)
    # a sparse DSA prefill (0 topk: the engine's tables time none): index_topk, the kernel's seconds per prompt token
    # over the stage's DSA layers, the indexer's per (query, earlier key) pair and per query past index_topk, and the
    # dense FLOPs per attended position those layers were timed at otherwise
    sparse_topk: int = 0
    sparse_token_s: float = 0.0
    sparse_pair_s: float = 0.0
    sparse_past_topk_s: float = 0.0
    sparse_position_flops: float = 0.0
    # the Gated DeltaNet layers' chunked prefill kernels (0: untimed): seconds per chunk of a prompt, summed over the
    # stage's layers (the state pass steps through them in order), and per prompt token
    delta_chunk_s: float = 0.0
    delta_token_s: float = 0.0
    shared_experts: int = 0  # run inside the fused MoE kernel: touched by every step, a row for every token
    # as attention_by_window for prompt tokens: each layer in the form the engine's prefill runs, at its kernel's rate;
    # and the FLOPs (at the attention rate) each prompt token's query row costs beside its attended positions
    prefill_attention_by_window: tuple[tuple[float, int | None], ...] = ()
    prefill_row_flops: float = 0.0
    # the same for a captured prefill pass, whose MLA layers run absorbed, as decode (the dense layers as above)
    captured_prefill_by_window: tuple[tuple[float, int | None], ...] = ()
    captured_prefill_row_flops: float = 0.0
    indexers: Indexers = ()


def _stage_cost(stage: _Stage, hw: _Hardware, last: bool, kv_growing: int, kv_sliding: tuple[tuple[int, int], ...],
                kv_state: int, kv_latent: tuple[tuple[int, int], ...], eager_launches: int | None = None,
                indexers: Indexers = ()) -> _StageCost:
    """`eager_launches`: the stage's kernels of an eager pass besides its all-reduces, counted from its layers' parts
    (None: section 1's flat counts)."""
    body, head, experts, attention = stage.body, stage.head, stage.experts, stage.attention_body
    low, wide = hw.low_bit, hw.wide
    head_rates = low if head.low_bit_bytes else wide  # the lm_head is one tensor: in one format
    low_bit_kernels = body.low_bit_kernels + attention.low_bit_kernels + head.low_bit_kernels
    quantized = low_bit_kernels if hw.activation_quant_s else 0  # their activations' own quantization kernels
    launch_s = (stage.layers * hw.layer_fixed_s + experts.layers * (hw.moe_layer_fixed_s + hw.moe.launch_s)
                + stage.mla_layers * hw.mla_layer_fixed_s + (body.low_bit_kernels + attention.low_bit_kernels) * low.launch_s
                + (body.wide_kernels + attention.wide_kernels) * wide.launch_s
                + (head.low_bit_kernels + head.wide_kernels) * head_rates.launch_s + quantized * hw.activation_quant_s)
    counted = (stage.layers * hw.layer_launches + experts.layers * hw.moe_layer_launches
               + stage.mla_layers * hw.mla_layer_launches + low_bit_kernels + quantized
               + body.wide_kernels + attention.wide_kernels + head.wide_kernels)
    allreduces = ALLREDUCES_PER_LAYER * stage.layers * (hw.tp > 1) + stage.layers * hw.norm_allreduces
    # the graph's gap after every kernel of section 1's count, in every pass (the stage's fixed time serves them all;
    # an eager pass's host time, over its own count at eager_launch_s each, is far above it)
    launch_s += (counted + allreduces) * hw.graph_gap_s
    launches = (counted if eager_launches is None else eager_launches) + allreduces
    dense_scale = hw.attention_flops_per_s / hw.prefill_attention_flops_per_s
    latent_scale = hw.attention_flops_per_s / hw.latent_flops_per_s
    if stage.sparse is not None and hw.sparse_prefill is None:
        # no kernel table times this layout's DSA prefill: its indexers' prefill logits, FP8 (their keys are read with
        # the cache, their decode logits untimed as where the tables time the prefill)
        indexers += ((0, 0.0, stage.sparse.logits_flops, 1, stage.sparse.topk, True),)
    if indexers and hw.fp8_logits_flops_per_s:
        fp8_scale = hw.attention_flops_per_s / hw.fp8_logits_flops_per_s
        indexers = tuple((key, decode * fp8_scale, prefill * fp8_scale, ratio, topk, fp8) if fp8
                         else (key, decode, prefill, ratio, topk, fp8)
                         for key, decode, prefill, ratio, topk, fp8 in indexers)
    return _StageCost(
        stage.decode_attention(latent_scale), kv_growing, kv_sliding, kv_state, kv_latent,
        body.low_bit_bytes / low.bytes_per_s, body.low_bit_flops / low.flops_per_s, low.half_m,
        body.wide_bytes / wide.bytes_per_s, body.wide_flops / wide.flops_per_s, wide.half_m,
        head.bytes / head_rates.bytes_per_s, (head.low_bit_flops + head.wide_flops) / head_rates.flops_per_s,
        head_rates.half_m, body.bytes + head.bytes + attention.bytes,
        experts.count, 1 - experts.per_token / experts.count if experts.count else 0.0, experts.per_token,
        experts.ranks, experts.bytes, experts.bytes / hw.moe.bytes_per_s, experts.flops / hw.moe.flops_per_s, hw.moe.half_m,
        experts.columns * hw.moe_column_s,
        ACTIVATION_BYTES * (experts.columns + experts.layers * hw.hidden) * hw.moe_activation_passes
        / hw.moe.bytes_per_s,
        hw.kv_bytes_per_s, hw.latent_bytes_per_s, hw.attention_flops_per_s,
        launch_s, launches * hw.eager_launch_s, hw.step_overhead_s if last else 0.0, ALLREDUCES_PER_LAYER * stage.layers,
        stage.layers * hw.norm_allreduces,
        attention.low_bit_bytes / low.bytes_per_s, attention.low_bit_flops / low.flops_per_s,
        attention.wide_bytes / wide.bytes_per_s, attention.wide_flops / wide.flops_per_s, launches,
        *_sparse_cost(stage.sparse, hw),
        *((stage.delta_layers * hw.delta_chunk_s, stage.delta_token_flops / hw.delta_flops_per_s)
          if hw.delta_flops_per_s and stage.delta_layers else (0.0, 0.0)),
        experts.shared,
        *stage.prefill_attention(dense_scale, hw.attention_flops_per_s / hw.mla_prefill_flops_per_s
                                 if hw.mla_prefill_flops_per_s else None, hw.prefill_row_positions, latent_scale),
        *stage.prefill_attention(dense_scale, None, hw.prefill_row_positions, latent_scale), indexers)


def _sparse_cost(layers: _SparseLayers | None, hw: _Hardware) -> tuple[int, float, float, float, float]:
    """_StageCost's sparse fields: a FlashMLA kernel computes its padded heads over index_topk slots a prompt token;
    the gathering kernel reads the token's index_topk latents, or computes its own heads if that is slower."""
    rates = hw.sparse_prefill
    if layers is None or rates is None:
        return 0, 0.0, 0.0, 0.0, 0.0
    slots_flops = layers.position_flops * layers.topk
    if rates.head_block:
        padded = ceil(layers.heads / rates.head_block) * rates.head_block
        token_s = slots_flops * padded / layers.heads / rates.flops_per_s
    else:
        slots_bytes = layers.topk * layers.latent_dim * rates.value_bytes
        token_s = max(slots_bytes / rates.read_bytes_per_s, slots_flops / hw.attention_flops_per_s)
    return (layers.topk, layers.layers * token_s, layers.logits_flops / rates.logits_flops_per_s,
            layers.indexed * rates.topk_s, layers.layers * layers.position_flops)


def _forward(cost: _StageCost, tokens: float, logits: float, decode_flops: float, prefill_flops: float,
             kv_bytes: int, latent_bytes: int, allreduce_s: float, group_tokens: float = 0.0,
             group_allreduce_s: float = 0.0, prefill: bool = False, norm_allreduce_s: float = 0.0,
             prefill_kernels_s: float = 0.0, state_written: int = 0) -> _Terms:
    """`decode_flops` / `prefill_flops`: the stage's attention FLOPs over the positions the decoding sequences and
    the prompt tokens attend to; `kv_bytes`: the cache the pass reads, of which `latent_bytes` MLA latents;
    `state_written`: the recurrent states the decoding sequences write back, at the cache's read rate;
    `allreduce_s`: one all-reduce of the pass's activations (the same on every stage); with data-parallel attention,
    `group_tokens` the busiest DP group's tokens through its attention GEMMs and `group_allreduce_s` one all-reduce
    of them over its attention-TP ranks (once a layer); `prefill`: the pass computes prompt tokens (an extend pass,
    which the engine may launch eagerly: then it takes at least the host's launch time); `norm_allreduce_s`: one
    all-reduce of a layer's per-token sums (LayerAllReduceRule); `prefill_kernels_s`: the DSA layers' sparse prefill
    kernels (_sparse_prefill, in place of their share of `prefill_flops`) and the Gated DeltaNet layers' chunked ones
    (_delta_prefill)."""
    # each GEMM group: the larger of its weight read and its compute at compute_eff(M) (rows + half_m, see header)
    low_c = cost.low_row_s * (tokens + cost.low_half_m) if cost.low_row_s else 0.0
    wide_c = cost.wide_row_s * (tokens + cost.wide_half_m)
    head_c = cost.head_row_s * (logits + cost.head_half_m) if cost.head_row_s else 0.0
    memory_s = cost.low_read_s + cost.wide_read_s + cost.head_read_s
    compute_s = low_c + wide_c + head_c
    dense_s = ((cost.low_read_s if cost.low_read_s >= low_c else low_c)
               + (cost.wide_read_s if cost.wide_read_s >= wide_c else wide_c)
               + (cost.head_read_s if cost.head_read_s >= head_c else head_c))
    if cost.attention_low_read_s or cost.attention_wide_read_s:  # data-parallel attention's own GEMMs
        group_low_c = cost.attention_low_row_s * (group_tokens + cost.low_half_m) if cost.attention_low_row_s else 0.0
        group_wide_c = cost.attention_wide_row_s * (group_tokens + cost.wide_half_m) if cost.attention_wide_row_s else 0.0
        memory_s += cost.attention_low_read_s + cost.attention_wide_read_s
        compute_s += group_low_c + group_wide_c
        dense_s += max(cost.attention_low_read_s, group_low_c) + max(cost.attention_wide_read_s, group_wide_c)
    weight_bytes = cost.weight_bytes
    moe_s = 0.0
    if cost.experts:  # the distinct experts the step's tokens route to per MoE layer: E (1 - (1 - k/E)^T)
        if cost.expert_ranks == 1:
            touched = cost.experts * (1 - cost.expert_missed ** tokens) + cost.shared_experts
            rows = tokens * (cost.per_token + cost.shared_experts)
        else:  # the busiest of the EP ranks, which the step waits for
            touched, rows = busiest_expert_rank(cost.experts, cost.per_token, cost.expert_ranks, tokens)
        read_s = touched * cost.expert_read_s + rows * cost.expert_row_read_s
        # compute_eff at rows / touched rows per expert: the routed rows plus touched x half_m
        expert_c = cost.expert_row_s * (rows + touched * cost.expert_half_m)
        # the SMs' fixed time on each touched expert's output tiles, run while the weights stream in
        # (bench/SPEED_PROTOCOL.md, the amendment on the tiles' overlap)
        sm_s = expert_c + touched * cost.expert_tiles_s
        moe_s = read_s if read_s >= sm_s else sm_s
        memory_s += read_s
        compute_s += sm_s
        weight_bytes += round(touched * cost.expert_bytes)
    kv_s = (kv_bytes - latent_bytes) / cost.kv_bytes_per_s + latent_bytes / cost.latent_bytes_per_s if latent_bytes \
        else kv_bytes / cost.kv_bytes_per_s
    if state_written:
        kv_s += state_written / cost.kv_bytes_per_s
    decode_c = decode_flops / cost.attention_flops_per_s
    prefill_c = prefill_flops / cost.attention_flops_per_s
    attention_s = (kv_s if kv_s >= decode_c else decode_c) + prefill_c + prefill_kernels_s
    memory_s += kv_s
    compute_s += decode_c + prefill_c + prefill_kernels_s
    allreduces_s = (cost.allreduces * allreduce_s + (cost.allreduces // ALLREDUCES_PER_LAYER) * group_allreduce_s
                    + cost.norm_allreduces * norm_allreduce_s)
    total_s = dense_s + moe_s + attention_s + cost.launch_s + cost.step_s + allreduces_s
    # the host launches ahead of the GPU, so over the pass's layers the slower of the two sets the pace
    eager_s = cost.eager_host_s - total_s if prefill and cost.eager_host_s > total_s else 0.0
    return (dense_s, moe_s, attention_s, cost.launch_s, cost.step_s, allreduces_s, eager_s, memory_s, compute_s,
            weight_bytes, kv_bytes, total_s + eager_s)


@lru_cache(maxsize=65536)
def _expected_max_binomial(trials: int, chance: float, copies: int) -> float:
    """E[max of `copies` independent Binomial(trials, chance)] = sum over j >= 1 of 1 - F(j - 1)^copies."""
    if trials == 0 or chance <= 0.0:
        return 0.0
    if chance >= 1.0:
        return float(trials)
    import numpy as np  # only expert-parallel layouts come here: the solver's start-up does without it

    j = np.arange(trials, dtype=float)
    # log pmf by the ratio pmf(j + 1) / pmf(j) = (n - j) / (j + 1) x q / (1 - q), from pmf(0) = (1 - q)^n
    log_pmf = trials * np.log1p(-chance) + np.concatenate(
        ([0.0], np.cumsum(np.log((trials - j) / (j + 1)) + np.log(chance) - np.log1p(-chance))))
    below = np.minimum(np.cumsum(np.exp(log_pmf))[:-1], 1.0)  # F(0) .. F(n - 1)
    return float(np.sum(1.0 - below ** copies))


def _expected_max_smooth(trials: float, chance: float, copies: int) -> float:
    """_expected_max_binomial at a fractional number of trials (a steady state's mean batch), linear between the
    whole numbers around it, so that it never falls as the trials grow."""
    low = floor(trials)
    at_low = _expected_max_binomial(low, chance, copies)
    if trials == low:
        return at_low
    return at_low + (trials - low) * (_expected_max_binomial(low + 1, chance, copies) - at_low)


def busiest_expert_rank(experts: int, per_token: int, ranks: int, tokens: float) -> tuple[float, float]:
    """(experts touched, rows routed) on the busiest of `ranks` expert-parallel ranks holding experts / ranks
    experts each, for `tokens` tokens each routed to `per_token` experts uniformly: each expert is touched with
    p = 1 - (1 - k/E)^T, so one rank's touched experts are Binomial(E / ranks, p) and its routed rows
    Binomial(T k, 1 / ranks), taken independent (bench/SPEED_PROTOCOL.md, the EP amendment); the expected maximum
    over the ranks of each. With one rank: E p and T k."""
    touched_chance = 1 - (1 - per_token / experts) ** tokens
    return (_expected_max_binomial(experts // ranks, round(touched_chance, 12), ranks),
            _expected_max_smooth(tokens * per_token, 1 / ranks, ranks))


def _prefill_attention_flops(cost: _StageCost, attended: Callable[[int | None], float], rows: float,
                             absorbed: bool) -> float:
    """`attended(window)`: attended positions summed over the prompt tokens, for a layer with that window; `rows`: the
    prompt tokens (query rows); `absorbed`: the pass runs its MLA layers as decode does (a captured prefill)."""
    if absorbed:
        return cost.captured_prefill_row_flops * rows + sum(per_position * attended(window)
                                                            for per_position, window in cost.captured_prefill_by_window)
    return cost.prefill_row_flops * rows + sum(per_position * attended(window)
                                               for per_position, window in cost.prefill_attention_by_window)


def _delta_prefill(cost: _StageCost, tokens: float, prompts: float) -> float:
    """Seconds of the stage's Gated DeltaNet layers' chunked kernels over a step's prompt tokens, `prompts` sequences'
    chunks of `tokens` in all: the state pass steps through a prompt's 64-token chunks in order (the sequences and
    heads side by side), and every token's FLOPs run in parallel (bench/SPEED_PROTOCOL.md, the Gated DeltaNet prefill
    amendment)."""
    per_prompt = tokens / prompts if prompts else tokens
    return ceil(per_prompt / DELTA_CHUNK) * cost.delta_chunk_s + tokens * cost.delta_token_s


def _sparse_prefill(cost: _StageCost, tokens: float, positions: float, prompts: float) -> float:
    """Seconds of the stage's DSA layers over a step's prompt tokens where the engine runs them sparse (0: dense, and
    their window term stands; else the caller takes it out): `prompts` sequences' chunks of `tokens` in all,
    attending to `positions`, whose mean sequence holds more KV than index_topk after the step (below it SGLang runs
    dense MHA, as the window term times it). Then every token costs the kernel's index_topk slots, the indexer's
    logits against every earlier key, and the top-k every token past index_topk (bench/SPEED_PROTOCOL.md, the DSA
    sparse-prefill amendment)."""
    topk = cost.sparse_topk
    chunk = tokens / prompts
    held = positions / tokens + (chunk - 1) / 2  # a chunk of c after a prefix p attends c p + c (c + 1) / 2
    if held <= topk:
        return 0.0
    past = prompts * min(chunk, held - topk)
    return tokens * cost.sparse_token_s + positions * cost.sparse_pair_s + past * cost.sparse_past_topk_s


def _indexed_prefill_flops(indexers: Indexers, after: float, positions: float) -> float:
    """The indexers' logits over a prompt chunk's `positions` (query, earlier token) pairs, for those whose top-k the
    chunk's sequence, `after` tokens once the chunk is in, is past (Indexers)."""
    return sum(logits * positions for _, _, logits, ratio, topk, _ in indexers if after // ratio > topk)


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


def _low_bit_format(gpu: Gpu, precision: Precision, wide: float, performance: PerformanceCatalog, native: bool
                    ) -> tuple[float, str]:
    """(peak FLOP/s, kernel format) of the GEMMs a low-bit precision stores: its tensor-core format where the engine
    runs it natively on this GPU (`native`, Catalog.support), else the 16-bit rate and kernels (weight-only kernels
    dequantize and compute in 16 bits)."""
    compute = performance.precision(precision.name)
    if compute is not None and compute.dense_as is not None:
        compute = performance.precision(compute.dense_as)
    rate = _rate(gpu, compute.tensor_core_format) if compute and compute.tensor_core_format and native else None
    return (rate, compute.kernel_format or WIDE_FORMAT) if rate and compute else (wide, WIDE_FORMAT)


def _expert_format(gpu: Gpu, compute: PrecisionCompute | None, native: bool, low_bit: tuple[float, str],
                   wide: float) -> tuple[float, str]:
    """(peak FLOP/s, MoE kernel format) of low-bit routed experts: a mixed precision's own experts rule where the
    engine runs the precision natively on this GPU, the 16-bit rate and kernels where it does not (its weight-only
    kernel then takes them); any other precision's experts compute as its dense layers do (`low_bit`)."""
    if compute is None or not compute.experts:
        return low_bit
    rule = compute.experts_on(gpu.generation) if native else None
    rate = _rate(gpu, rule.tensor_core_format) if rule else None
    return (rate, rule.kernel_format) if rule and rate else (wide, WIDE_FORMAT)


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
    # per stage: (bytes per token, tokens read at most) of its MLA latents (part of the two above), on one rank
    kv_latent: tuple[tuple[tuple[int, int], ...], ...]
    pp: int
    engine: str
    borrowed: bool  # the GPU's generation has no kernel measurements (the `default` generation's constants)
    tp: int
    dp: int = 1  # data-parallel attention groups: each attends to its own requests
    # per stage, the kernels an eager pass launches counted from its layers' parts (the engine's EagerKernels;
    # empty: section 1's flat counts)
    eager_launches: tuple[int, ...] = ()
    # a step carries prompt tokens in the decoding requests' pass (vLLM, TensorRT-LLM, llama-server); False: the engine
    # runs them as a pass of their own before the decode (the engine registry's Engine.mixes_prefill: SGLang)
    mixes_prefill: bool = True
    indexers: tuple[Indexers, ...] = ()  # per stage (_indexers)
    # a decode step: every running request gains one token and takes one token of the step's budget (a speculative
    # cycle gains more and takes more: planner.estimator.speculative.SpeculativeTimer)
    tokens_per_step: ClassVar[float] = 1.0
    budget_per_decode: ClassVar[int] = 1

    @cached_property
    def _costs(self) -> tuple[_StageCost, ...]:
        """Per stage; a stage alike to the one before it (an even pipeline split's) is the same object, so that a
        step times it once (_step)."""
        last = len(self.stages) - 1
        costs: list[_StageCost] = []
        for s, stage in enumerate(self.stages):
            cost = _stage_cost(stage, self.hw, s == last, self.kv_growing[s], self.kv_sliding[s], self.kv_state[s],
                               self.kv_latent[s], self.eager_launches[s] if self.eager_launches else None,
                               self.indexers[s] if self.indexers else ())
            costs.append(costs[-1] if costs and costs[-1] == cost else cost)
        return tuple(costs)

    def graphed(self) -> ReplicaTimer:
        """This layout with every pass under a CUDA graph: a speculative cycle's verify and draft-extend passes, which
        carry several tokens a request but replay graphs of their own (SGLang forward_batch_info.py is_cuda_graph:
        TARGET_VERIFY; speculative/eagle_draft_extend_cuda_graph_runner.py, 0.5.6), and whose DSA layers run the
        engine's decode kernels, not its sparse prefill ones (dsa_backend.py forward_extend @ v0.5.15: target_verify
        and draft_extend_v2 take dsa_decode_impl), and whose Gated DeltaNet layers run the recurrent kernel over the
        drafted tokens, not the chunked prefill (SGLang layers/attention/linear/gdn_backend.py forward_extend @
        v0.5.10: a target_verify pass takes the dispatcher's target_verify, not its chunked extend)."""
        if not (self.hw.eager_launch_s or self.hw.sparse_prefill or self.hw.delta_flops_per_s):
            return self
        return replace(self, hw=replace(self.hw, eager_launch_s=0.0, sparse_prefill=None, delta_chunk_s=0.0,
                                        delta_flops_per_s=0.0))

    def step(self, shape: Step, microbatches: int | None = None) -> tuple[float, ForwardTime, float]:
        """(seconds, the slowest stage's forward term by term, pipeline bubble) for one engine step: one forward
        pass, or where the engine runs prompts apart (prompts_apart) their pass and then the decode's, summed term by
        term. The step's sequences are split into min(sequences, pp) microbatches unless `microbatches` is given."""
        if self.prompts_apart(shape):
            prompts, decode = _passes(shape)
            first_s, first, first_bubble = self.forward(prompts, microbatches)
            then_s, then, then_bubble = self.forward(decode, microbatches)
            return first_s + then_s, first.plus(then), first_bubble + then_bubble
        return self.forward(shape, microbatches)

    def forward(self, shape: Step, microbatches: int | None = None) -> tuple[float, ForwardTime, float]:
        """As `step`, for one forward pass over all of the shape's tokens whatever the engine (a speculative verify
        pass over drafted tokens, a draft's pass)."""
        total, times, slowest, bubble = self._step(shape, microbatches)
        return total, ForwardTime(*times[slowest]), bubble

    def step_s(self, shape: Step | tuple[float, float, int, float, int]) -> float:
        """The step's seconds; `shape` a Step or a plain tuple of its fields in order (StepTimes passes its memo's
        keys as they are: no Step built per call on the solver's hot path)."""
        if self.prompts_apart(shape):
            prompts, decode = _passes(shape)
            return self._step(prompts, None)[0] + self._step(decode, None)[0]
        return self._step(shape, None)[0]

    def forward_s(self, shape: Step | tuple[float, float, int, float, int]) -> float:
        """`forward`'s seconds."""
        return self._step(shape, None)[0]

    @property
    def runs_prompts_apart(self) -> bool:
        """A step carrying prompts beside decoding requests is two passes: on an engine that runs a prefill batch alone,
        before any decode (bench/SPEED_PROTOCOL.md, the prompts-apart amendment), unless DP attention makes it one
        forward of every group, none under the decode graph (the DP-attention step amendment)."""
        return not self.mixes_prefill and self.dp == 1

    def prompts_apart(self, shape: Step | tuple[float, float, int, float, int]) -> bool:
        """Whether a step of this shape is two passes (runs_prompts_apart): it carries both."""
        return self.runs_prompts_apart and bool(shape[0]) and bool(shape[2])

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
        prompts = prefill_seqs if parts == 1 else ceil(prefill_seqs / parts)
        tokens = decode + prefill_tokens
        allreduce_s = self.hw.allreduce_s(tokens) if self.tp > 1 else 0.0  # one rank: nothing to reduce
        group_tokens, group_allreduce_s = tokens, 0.0
        if self.dp > 1:  # attention runs on the busiest DP group's own requests (bench/SPEED_PROTOCOL.md)
            share = ceil(prefill_seqs / self.dp) / prefill_seqs if prefill_seqs else 0.0
            decode, prefill_tokens, prefill_positions = (ceil(decode / self.dp), ceil(prefill_tokens * share),
                                                         prefill_positions * share)
            prompts = ceil(prompts / self.dp)
            group_tokens = decode + prefill_tokens
            group_allreduce_s = self.hw.attention_allreduce_s(group_tokens)
        norm_s = self.hw.norm_allreduce_s(group_tokens)
        times: list[_Terms] = []
        alike = None
        for cost in self._costs:
            if cost is alike:  # the stage before's cost: the same inputs give the same terms
                times.append(times[-1])
                continue
            alike = cost
            decode_flops = prefill_flops = 0.0  # attended positions by window (inlined: the solver's hot path)
            for per_position, window in cost.attention_by_window:
                decode_flops += per_position * decode * (window if window and window < context else context)
            if prefill_tokens:
                if prefill_tokens > self.hw.mla_absorbed_prefill_tokens:
                    prefill_form = cost.prefill_attention_by_window
                    prefill_flops = cost.prefill_row_flops * prefill_tokens
                else:
                    prefill_form = cost.captured_prefill_by_window
                    prefill_flops = cost.captured_prefill_row_flops * prefill_tokens
                for per_position, window in prefill_form:
                    if window:
                        capped = prefill_tokens * window
                        prefill_flops += per_position * (capped if capped < prefill_positions else prefill_positions)
                    else:
                        prefill_flops += per_position * prefill_positions
            sparse_s = 0.0
            if cost.sparse_topk and prefill_tokens:
                sparse_s = _sparse_prefill(cost, prefill_tokens, prefill_positions, prompts)
                if sparse_s:  # in place of the DSA layers' window term above (they have no row term)
                    capped = prefill_tokens * cost.sparse_topk
                    prefill_flops -= cost.sparse_position_flops * (capped if capped < prefill_positions
                                                                   else prefill_positions)
            # the cache one sequence of `context` tokens holds on one rank (as planner.estimator.memory), read once
            held = cost.kv_growing * context
            if cost.indexers:  # past their top-k: each key read and scored
                # a prompt chunk's sequence after the step: its prefix and the chunk (the DSA sparse prefill's test)
                after = prefill_positions / prefill_tokens + (prefill_tokens / prompts - 1) / 2 if prefill_tokens else 0
                for key_bytes, decode_logits, _, ratio, topk, _ in cost.indexers:
                    if context // ratio > topk:
                        held += key_bytes * context
                        decode_flops += decode_logits * decode * context
                prefill_flops += _indexed_prefill_flops(cost.indexers, after, prefill_positions)
            if cost.kv_sliding:
                windowed = 0
                for per_token, window in cost.kv_sliding:
                    windowed += per_token * (window if window < context else context)
                held += windowed
            latent = 0  # of it, the MLA latents (read by their own kernels)
            for per_token, window in cost.kv_latent:
                latent += per_token * (window if window < context else context)
            times.append(_forward(cost, tokens, logits, decode_flops, prefill_flops,
                                  round(decode * (held + cost.kv_state)), round(decode * latent), allreduce_s,
                                  group_tokens, group_allreduce_s, prefill_tokens > 0, norm_s,
                                  sparse_s + (_delta_prefill(cost, prefill_tokens, prompts)
                                              if cost.delta_token_s and prefill_tokens else 0.0),
                                  round(decode * cost.kv_state)))
        if parts == 1 and len(times) == 1:  # one stage, one microbatch (the solver's hot path): no wait
            return times[0][_TOTAL], times, 0, 0.0
        total, slowest, bubble = _pipeline([t[_TOTAL] for t in times], self.hw, parts, tokens)
        return total, times, slowest, bubble

    def prefill_s(self, sequences: int, prompt: int) -> float:
        """Whole prompts alone (no decode): sliding-window layers attend to min(position, window) of each."""
        parts = min(sequences, self.pp)
        per_part = ceil(sequences / parts)
        tokens = per_part * prompt
        allreduce_s = self.hw.allreduce_s(tokens) if self.tp > 1 else 0.0
        own = ceil(per_part / self.dp)  # with DP attention, the busiest group's prompts through attention
        group_allreduce_s = self.hw.attention_allreduce_s(own * prompt) if self.dp > 1 else 0.0
        times = []
        for cost in self._costs:
            flops = _prefill_attention_flops(cost, lambda w: own * _causal_positions(prompt, w), own * prompt,
                                             tokens <= self.hw.mla_absorbed_prefill_tokens)
            sparse_s = _sparse_prefill(cost, own * prompt, own * _causal_positions(prompt, None), own) \
                if cost.sparse_topk else 0.0
            if sparse_s:  # in place of the DSA layers' window term
                flops -= cost.sparse_position_flops * own * _causal_positions(prompt, cost.sparse_topk)
            if cost.indexers:  # each prompt held whole after its pass
                flops += _indexed_prefill_flops(cost.indexers, prompt, own * _causal_positions(prompt, None))
            times.append(_forward(cost, tokens, per_part, 0.0, flops,
                                  0, 0, allreduce_s, own * prompt, group_allreduce_s, True,
                                  self.hw.norm_allreduce_s(own * prompt),
                                  sparse_s + (_delta_prefill(cost, own * prompt, own) if cost.delta_token_s else 0.0)))
        return _pipeline([t[_TOTAL] for t in times], self.hw, parts, tokens)[0]


def prompt_room(budget: float, decode: float, budget_per_decode: float, mixes_prefill: bool) -> float:
    """The prompt tokens a step of `budget` tokens may carry beside `decode` decoding requests, each taking
    `budget_per_decode` of it (vLLM's scheduler: running requests first); where the engine runs prompts as a pass of
    their own (mixes_prefill False) the whole budget: SGLang sizes a prefill batch without the running requests unless
    it mixes them in (bench/SPEED_PROTOCOL.md, the prefill-budget amendment)."""
    return budget - decode * budget_per_decode if mixes_prefill else budget


def _passes(shape: Step | tuple[float, float, int, float, int]) -> tuple[Step, Step]:
    """A step's prompts alone, then its decoding requests alone."""
    decode, context, prefill_tokens, positions, prefill_seqs = shape
    return Step(0, context, prefill_tokens, positions, prefill_seqs), Step(decode, context)


def replica_timer(arch: Architecture, precision: str, kv_dtype: str, gpu: Gpu, tp: int, pp: int, catalog: Catalog,
                  engine: str = "vllm", performance: PerformanceCatalog | None = None, ep: int = 1,
                  dp: int = 1, release: str | None = None, prefix_cache: bool = True,
                  moe_kernel: str | None = None) -> ReplicaTimer:
    """The layout of one replica (tp x pp GPUs) resolved for timing its steps; `ep`: its routed experts dealt over
    that many of the tp ranks, the experts' outputs all-reduced as under TP (the engines' path without an
    all-to-all backend); `dp`: data-parallel attention groups among the tp ranks, each attending to its own
    requests at tp / dp-way TP (bench/SPEED_PROTOCOL.md); `release`: the engine's release (None: its default), which
    picks its fused-MoE kernel; `prefix_cache`: the engine's prefix (radix) cache on, its default (SGLang
    runs some hybrid models without its overlap scheduler when it is: EngineCost.step_host_us); `moe_kernel`: the
    fused-MoE kernel the engine was told to run (SGLang --moe-runner-backend; None: the one its release picks)."""
    performance = performance or load_performance_catalog()
    prec = resolve_precision(catalog, arch, precision)
    engine_name = performance.engine(engine).name
    stored_kv = resolve_engine_kv_dtype(engine, arch, prec, kv_dtype)
    kv_bits = catalog.kv_dtypes.get(stored_kv).bits
    native = catalog.support(engine, prec, gpu).native
    compute = performance.precision(prec.name)
    # a mixed precision's dense layers run as the precision they are stored in does on this engine and GPU
    dense_native = catalog.support(engine, catalog.precisions.get(compute.dense_as), gpu).native \
        if compute is not None and compute.dense_as is not None else native
    hw, generation = _hardware(gpu, arch, prec, tp, performance, engine_name, kv_bits, dense_native, tp // dp, release,
                               pp, prefix_cache, moe_kernel, experts_native=native)
    as_stored = arch.stored_bytes is not None and precision.lower() == "auto"
    growing, sliding, latent = _kv_per_token(arch, tp // dp, pp, kv_bits)
    state = _recurrent_state(arch, prec.name, stored_kv, tp, pp, kv_bits, _Same(catalog), dp)
    if arch.has_compressed_caches:  # read beside the window, past what the state above takes out
        more_growing, more_sliding = _compressed_reads(arch, pp, kv_bits)
        growing = tuple(g + more for g, more in zip(growing, more_growing))
        sliding = tuple(s + more for s, more in zip(sliding, more_sliding))
    indexers = _indexers(arch, tp // dp, pp)
    engine_cost = performance.engine(engine)
    counts = engine_cost.eager_kernels
    fused_shared = engine_cost.fuses_shared_expert(arch, gpu.vendor, hw.moe_kernel, release, ep)
    eager = _eager_launches(arch, prec, tp, pp, ep, counts, hw.moe_kernel, fused_shared) \
        if hw.eager_launch_s and counts is not None and arch.exact else ()
    return ReplicaTimer(_stages(arch, prec, tp, pp, as_stored, ep, dp, fused_shared), hw, growing, sliding, state,
                        latent, pp, engine_name, generation.name != gpu.generation, tp, dp, eager,
                        _mixes_prefill(engine), indexers)


def _mixes_prefill(engine: str) -> bool:
    """The engine registry's Engine.mixes_prefill for a performance engine's name (an engine the registry does not
    know, or the planning margin, which borrows vLLM's scheduler: True)."""
    name = canonical(engine)
    return registered_engine(name).mixes_prefill if name in engine_names() else True


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
                     catalog: _Same, dp: int = 1) -> tuple[int, ...]:
    """Per stage, on one rank (of the DP group holding the sequence): the state of recurrent layers, what memory.py
    holds for a sequence of one token less that token's KV. Cached: every GPU type of a layout shares it."""
    one = estimate_memory(arch, Request(context=1, batch=1, tp=tp, pp=pp, precision=precision, kv_dtype=kv_dtype,
                                        dp=dp), catalog.catalog).per_gpu
    growing, sliding, _ = _kv_per_token(arch, tp // dp, pp, kv_bits)
    return tuple(one[s * tp].kv_cache_bytes - grow - sum(b for b, _ in slide)
                 for s, (grow, slide) in enumerate(zip(growing, sliding)))


@lru_cache(maxsize=1024)
def _kv_per_token(arch: Architecture, tp: int, pp: int, kv_bits: int
                  ) -> tuple[tuple[int, ...], tuple[tuple[tuple[int, int], ...], ...], tuple[tuple[tuple[int, int], ...], ...]]:
    """Per stage, on one rank: cache bytes per token read for every token held (layers whose KV grows with the
    context, a DSA indexer's keys), (bytes per token, tokens read at most) of the layers that read a window of it
    (sliding windows; a DSA layer's latent, of which it reads its top-k), and the MLA latents' share of those two as
    (bytes per token, tokens read at most). Cached: every GPU type and precision of a layout shares them."""
    growing, sliding, latent = [], [], []
    for first, last in pipeline_stages(arch.num_layers, pp):
        grow, slide, lat = 0, [], []
        for layer in arch.layers[first:last]:
            attention = layer.attention
            per_token = attention_bytes_per_token(attention, tp, kv_bits)
            if attention.kind == "sliding":
                slide.append((per_token, attention.window or MAX_CONTEXT))
            elif attention.kind == "mla" and attention.index_topk:
                own = attention.latent_dim * kv_bits // 8
                grow += per_token - own  # the indexer scores every token's key
                slide.append((own, attention.index_topk))
                lat.append((own, attention.index_topk))
            elif attention.index_topk:  # MiniMax Sparse Attention: K and V of its top-k blocks, every index key
                key = attention.index_key_dim * kv_bits // 8
                grow += key
                slide.append((per_token - key, attention.index_topk))
            elif attention.kind not in ("linear", "mamba"):
                grow += per_token
                if attention.kind == "mla":
                    lat.append((per_token, MAX_CONTEXT))
        growing.append(grow)
        sliding.append(tuple(slide))
        latent.append(tuple(lat))
    return tuple(growing), tuple(sliding), tuple(latent)


@lru_cache(maxsize=1024)
def _compressed_reads(arch: Architecture, pp: int, kv_bits: int
                      ) -> tuple[tuple[int, ...], tuple[tuple[tuple[int, int], ...], ...]]:
    """Per stage, on one rank (DeepSeek-V4's one head is whole on every rank), what its compressed caches add to a
    decode step's read, in _kv_per_token's units: the entries of layers that attend to every one (bytes per token),
    and those of layers whose indexer picks their top-k ((bytes per token, tokens read at most))
    (bench/SPEED_PROTOCOL.md, the compressed-attention amendment)."""
    growing, sliding = [], []
    for first, last in pipeline_stages(arch.num_layers, pp):
        grow, slide = 0, []
        for layer in arch.layers[first:last]:
            a = layer.attention
            if not a.compress_ratio:
                continue
            per_token = a.k_head_dim * kv_bits // 8 // a.compress_ratio
            if a.compressed_topk:
                slide.append((per_token, a.compressed_topk * a.compress_ratio))
            else:
                grow += per_token
        growing.append(grow)
        sliding.append(tuple(slide))
    return tuple(growing), tuple(sliding)


@lru_cache(maxsize=1024)
def _indexers(arch: Architecture, attention_tp: int, pp: int) -> tuple[Indexers, ...]:
    """Per stage, on one rank, the indexers past their top-k (Indexers), grouped by (ratio, top-k, FP8): DeepSeek-V4's
    Lightning Indexers, their pooled keys read and scored by every one of their heads (replicated on every rank), and
    MiniMax Sparse Attention's, whose keys are read with the cache and whose heads split over the attention-TP ranks,
    at least one a rank (bench/SPEED_PROTOCOL.md, the compressed-attention and MiniMax Sparse Attention amendments)."""
    stages = []
    for first, last in pipeline_stages(arch.num_layers, pp):
        groups: dict[tuple[int, int, bool], tuple[int, float]] = {}
        for layer in arch.layers[first:last]:
            a = layer.attention
            if a.compress_ratio and a.compressed_index_dim and a.compressed_topk:  # FP8 keys, FP8 logits
                ratio, topk, fp8 = a.compress_ratio, a.compressed_topk, True
                key_bytes = indexer_key_bytes(a.compressed_index_dim) // ratio
                logits = 2 * a.compressed_index_heads * a.compressed_index_dim / ratio
            elif a.kind != "mla" and a.index_topk and a.indexer_heads:  # keys in the KV dtype
                ratio, topk, fp8 = 1, a.index_topk, False
                key_bytes, logits = 0, 2 * max(1, a.indexer_heads // attention_tp) * a.index_key_dim
            else:
                continue
            summed = groups.get((ratio, topk, fp8), (0, 0.0))
            groups[(ratio, topk, fp8)] = (summed[0] + key_bytes, summed[1] + logits)
        stages.append(tuple((key_bytes, logits, logits, ratio, topk, fp8)
                            for (ratio, topk, fp8), (key_bytes, logits) in groups.items()))
    return tuple(stages)


# Fused-MoE formats whose primary entry the engine's `moe_kernel` does not name: the engines pick their runner by
# compute capability alone (integer 4-bit experts: Marlin, or FlashInfer's on 10.x), so bench/kernel_constants.py
# names the kernel over the other formats and lists such an entry under its kernel's own name where it is a named
# one (SPEED_PROTOCOL, the amendment on integer experts' own tables)
RUNNER_FIXED_FORMATS = frozenset({"w4a16-int4"})


class UnmeasuredMoeKernel(PlannerInputError):
    """A stated fused-MoE kernel no kernel table times for the model's experts on this GPU generation and engine."""


def _check_stated_kernel(kernel: str, expert: object, cycles: float, measured: bool,
                         generation: GenerationEfficiency, kernel_format: str, engine: str, precision: str) -> None:
    """A stated fused-MoE kernel is timed on its own table or refused: the engine must be able to be told to run it
    for these experts (engines.moe_kernels), and a table must time it (bench/SPEED_PROTOCOL.md, the amendment on the
    kernel a run states)."""
    if expert is None:
        raise UnmeasuredMoeKernel(f"--moe-kernel / engine.moe_kernel: {kernel!r} names a fused-MoE kernel, but the "
                                  "model has no routed experts; drop it")
    if cycles:
        raise UnmeasuredMoeKernel(f"--moe-kernel / engine.moe_kernel: {kernel!r}: {engine} is timed on its own "
                                  "measured cycles per layer, not on fused-MoE kernel tables; drop it")
    if (refusal := switch_refusal(engine, kernel, precision)) is not None:
        raise UnmeasuredMoeKernel(f"--moe-kernel / engine.moe_kernel: {refusal}")
    if not measured:
        kernels = generation.engines.get(engine, EngineKernels())
        named = [name for name in (kernels.moe_kernel, *kernels.moe_kernels)
                 if name and generation.times_kernel(kernel_format, engine, name)]
        others = f", or use {' or '.join(named)}" if named else ""
        raise UnmeasuredMoeKernel(f"--moe-kernel / engine.moe_kernel: no {engine} table on {generation.name} GPUs "
                                  f"times {kernel!r} for {kernel_format} experts; drop it for the kernel the release "
                                  f"picks{others}")


def moe_kernel_refusal(arch: Architecture, precision: str, gpu: Gpu, catalog: Catalog, engine: str, kernel: str,
                       performance: PerformanceCatalog | None = None, release: str | None = None) -> str | None:
    """Why `kernel` cannot time `arch`'s experts in `precision` on `gpu` under `engine` (None: it can)."""
    try:
        replica_timer(arch, precision, "auto", gpu, 1, 1, catalog, engine, performance, release=release,
                      moe_kernel=kernel)
    except UnmeasuredMoeKernel as refusal:
        return str(refusal)
    return None


def _hardware(gpu: Gpu, arch: Architecture, prec: Precision, tp: int, performance: PerformanceCatalog,
              engine: str, kv_bits: int, native: bool, attention_tp: int | None = None, release: str | None = None,
              pp: int = 1, prefix_cache: bool = True, stated_kernel: str | None = None, experts_native: bool = False
              ) -> tuple[_Hardware, GenerationEfficiency]:
    """`native`: the engine runs the dense layers' format natively on this GPU, `experts_native`: a mixed precision's
    experts' (PrecisionCompute.experts); `attention_tp`: the attention-TP group's size under data-parallel attention
    (tp without it); `release`: the engine's release, for the fused-MoE kernel it picks and whether it graphs prefill
    (None: its default release); `stated_kernel`: the fused-MoE kernel the engine was told to run (None: the one its
    release picks)."""
    generation = performance.generation(gpu.generation)
    engine_cost = performance.engine(engine)

    def group_fit(size: int) -> AllReduceFit:
        """A group of more GPUs than one host holds runs the engines' multi-host all-reduce."""
        return performance.interconnect(gpu.interconnect.kind, gpu.generation, engine, size > gpu.host_gpus).fit(size)

    wide = _wide_rate(gpu, arch, prec)
    low_bit_rate, low_bit_format = _low_bit_format(gpu, prec, wide, performance, native)
    bandwidth = gpu.memory_bandwidth_gbps * GB
    ceiling = generation.read_ceiling
    # llama.cpp's fixed costs were measured per layer, in cycles: its launches and small kernels are in them
    cycles = engine_cost.per_layer_kilocycles

    def rates(kernel: KernelRates, peak: float) -> _Rates:
        # an engine's own kernels stream at their own fraction, but no GPU reads faster than its generation's ceiling
        read = min(engine_cost.memory_efficiency or kernel.read_efficiency, ceiling)
        if cycles:  # llama.cpp decodes through its own mat-vec kernels: no tile of rows to pad, no launch of its own
            return _Rates(bandwidth * read, peak * kernel.compute_efficiency, 0.0, 0.0)
        return _Rates(bandwidth * read, peak * kernel.compute_efficiency, kernel.half_m, kernel.launch_us * US)

    attention = generation.attention_rates(kv_bits, engine)
    floor_s = generation.kernel_floor_us * US
    if cycles:
        layer_s, moe_layer_s, mla_layer_s = cycles * 1e3 / performance.clock_hz(gpu.name), 0.0, 0.0
    else:
        layer_s = engine_cost.layer_kernels * floor_s + attention.launch_us * US
        moe_layer_s, mla_layer_s = engine_cost.moe_layer_kernels * floor_s, engine_cost.mla_layer_kernels * floor_s
    expert = next((t for layer in arch.layers for t in layer.tensors if t.role == "expert" and len(t.shape) == 2), None)
    expert_low_bit = expert is not None and _is_low_bit(expert, expert.shape, prec)
    compute = performance.precision(prec.name)
    expert_rate, expert_format = _expert_format(gpu, compute, experts_native, (low_bit_rate, low_bit_format), wide) \
        if expert_low_bit else (wide, WIDE_FORMAT)
    picked = (stated_kernel or engine_cost.moe_kernel(gpu.name, arch.model_type, prec.name, release)) \
        if expert is not None else None
    moe_kernel = generation.moe_kernel_timed(expert_format, engine, picked) if expert is not None else None
    timed_by = generation
    if expert_low_bit and expert_format == WIDE_FORMAT and compute and compute.weight_only_format \
            and not cycles:
        # the engine's weight-only MoE kernel, at the 16-bit peak (llama.cpp's own mat-vec kernels are in its cycles);
        # a measured generation whose tables lack it borrows the default generation's, as a GPU without tables does
        # (bench/SPEED_PROTOCOL.md, the borrowed weight-only amendment)
        default = performance.generation("default")
        timed_by, weight_only_format = next(
            ((g, f) for g in (generation, default) for f in compute.weight_only_formats if g.measures_moe(f, engine)),
            (None, None))
        if timed_by is not None:
            expert_format = weight_only_format
            if timed_by is generation:
                moe_kernel = generation.moe_kernel_timed(expert_format, engine, picked)
        else:
            timed_by = generation
    if stated_kernel is not None:
        _check_stated_kernel(stated_kernel, expert, cycles, timed_by is generation and generation.times_kernel(
            expert_format, engine, stated_kernel), generation, expert_format, engine, prec.name)
    moe = timed_by.moe_rates(expert_format, engine, picked)
    counts = engine_cost.eager_kernels
    if counts is not None and arch.moe is not None and not cycles:
        # routing the tables do not time runs its kernels in the graph, each at the floor
        moe_layer_s += counts.graphed_routing_kernels(arch.moe.routing, arch.moe.num_experts, arch.moe.expert_groups,
                                                      moe_kernel) * floor_s
    if arch.moe is not None and not cycles:
        moe_layer_s += generation.moe_untimed_kernels * floor_s + generation.moe_sorting_us * US
    layouts = frozenset(name for name, on in (("pipeline", pp > 1), ("dp_attention", bool(attention_tp) and attention_tp < tp))
                        if on)
    eager = engine_cost.eager_prefill(gpu, arch.model_type, bool(arch.multimodal), moe_kernel, layouts, release)
    fit, pair = group_fit(tp), group_fit(2)
    kernels = generation.engines.get(engine, EngineKernels())
    picked_by_release = kernels.sparse_prefill or kernels.gated_delta_prefill
    released = release_key(release or default_release(engine)) if picked_by_release else ()
    sparse = kernels.sparse_prefill_kernel(kv_bits, released) if kernels.sparse_prefill and kernels.indexer else None
    delta = kernels.delta_prefill_kernel(released) if kernels.gated_delta_prefill else None
    return _Hardware(
        low_bit=rates(generation.gemm_rates(low_bit_format, engine), low_bit_rate),
        wide=rates(generation.gemm_rates(WIDE_FORMAT, engine), wide),
        moe=rates(moe, expert_rate),
        # llama.cpp's cycles hold its MoE mat-vec kernels' fixed costs, as they hold its launches
        moe_column_s=0.0 if cycles else moe.column_ps * 1e-12,
        moe_activation_passes=0.0 if cycles else moe.activation_passes,
        moe_kernel=moe_kernel,
        kv_bytes_per_s=bandwidth * attention.kv_read_efficiency,
        latent_bytes_per_s=bandwidth * attention.latent_read_efficiency,
        attention_flops_per_s=wide * generation.attention_compute_efficiency,
        latent_flops_per_s=wide * (attention.latent_compute_efficiency or generation.attention_compute_efficiency),
        prefill_attention_flops_per_s=wide * (kernels.prefill_attention_compute_efficiency
                                              or generation.prefill_attention_compute_efficiency),
        prefill_row_positions=generation.prefill_attention_row_positions,
        layer_fixed_s=layer_s, moe_layer_fixed_s=moe_layer_s, mla_layer_fixed_s=mla_layer_s,
        activation_quant_s=floor_s if low_bit_format != WIDE_FORMAT and not cycles and any(
            rule.matches(generation.name, arch.model_type) for rule in engine_cost.untimed_activation_quant) else 0.0,
        eager_launch_s=engine_cost.eager_launch_us * US if eager else 0.0,
        # each layer's attention kernel and its small kernels; a MoE layer's routing kernels and its fused MoE kernel
        layer_launches=engine_cost.layer_kernels + 1,
        moe_layer_launches=engine_cost.moe_layer_kernels + 1 + generation.moe_untimed_kernels
        + (generation.moe_sorting_us > 0),
        graph_gap_s=0.0 if cycles else generation.graph_gap_us * US,  # llama.cpp's cycles hold its every fixed cost
        mla_layer_launches=engine_cost.mla_layer_kernels,
        step_overhead_s=engine_cost.step_host_us(release, pp > 1, arch.model_type, prefix_cache,
                                                 any(layer.attention.kind == "mamba" for layer in arch.layers)) * US,
        allreduce=_all_reduce(fit), handoff=_all_reduce(pair), tp=tp, hidden=arch.hidden_size,
        attention_allreduce=_all_reduce(group_fit(attention_tp)) if attention_tp and 1 < attention_tp < tp else None,
        attention_tp=attention_tp or tp,
        norm_allreduces=engine_cost.layer_allreduces(arch.model_type, release) if (attention_tp or tp) > 1 else 0,
        sparse_prefill=_sparse_rates(sparse, kernels.indexer, gpu, wide, kv_bits) if sparse and kernels.indexer else None,
        delta_chunk_s=delta.chunk_us * US if delta else 0.0,
        delta_flops_per_s=wide * delta.compute_efficiency if delta else 0.0,
        mla_prefill_flops_per_s=wide * (kernels.mla_prefill_compute_efficiency
                                        or generation.prefill_attention_compute_efficiency)
        if engine_cost.mla_prefill == "multi-head" else 0.0,
        mla_absorbed_prefill_tokens=engine_cost.absorbed_mla_prefill_tokens(eager, release),
        # the engine's measured logits kernel where its tables have one, else the attention kernels' share of the peak
        fp8_logits_flops_per_s=(_rate(gpu, "fp8") or wide) * (kernels.indexer.logits_compute_efficiency if kernels.indexer
                                                              else generation.attention_compute_efficiency),
    ), generation


def _sparse_rates(kernel: SparsePrefillKernel, indexer: IndexerRates, gpu: Gpu, wide: float, kv_bits: int
                  ) -> _SparseRates:
    """The kernels' rates on this GPU: a FlashMLA kernel's of the 16-bit peak, the gathering kernel's of the
    bandwidth, the indexer's logits of the FP8 peak (the 16-bit one on a GPU without FP8)."""
    return _SparseRates(kernel.head_block, wide * (kernel.compute_efficiency or 0.0),
                        gpu.memory_bandwidth_gbps * GB * (kernel.read_efficiency or 0.0), kv_bits / 8,
                        (_rate(gpu, "fp8") or wide) * indexer.logits_compute_efficiency, indexer.topk_us * US)


def _all_reduce(fit: AllReduceFit) -> _AllReduce:
    return _AllReduce(fit.latency_us * US, fit.bandwidth_gbps * GB, fit.large_latency_us * US, fit.bus_bandwidth_gbps * GB)


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
        decode_bound=slowest.bound, batch_prefill_s=batch_prefill_s, decode=slowest, pp_bubble_s=bubble_s,
        engine=timer.engine, borrowed=timer.borrowed, moe_kernel=timer.hw.moe_kernel,
        eager_prefill=timer.hw.eager_launch_s > 0,
        eager_launches=max(cost.launches for cost in timer._costs) if timer.hw.eager_launch_s else 0,
        eager_launch_s=timer.hw.eager_launch_s,
    )


__all__ = ["AllReduceFit", "AttentionRates", "EngineCost", "ForwardTime", "GenerationEfficiency", "InterconnectCost", "KernelRates", "EagerKernels", "EagerPrefillRule", "LayerAllReduceRule", "StepOverlapRule", "MoeKernelRule", "MoeRates", "PerformanceCatalog", "PrefillGraphCap",
           "PrecisionCompute", "ReplicaPerformance", "ReplicaTimer", "Step", "Workload", "causal_positions", "timer_performance",
           "UnmeasuredMoeKernel", "busiest_expert_rank", "load_performance_catalog", "moe_kernel_refusal",
           "replica_performance", "replica_timer"]
