"""The named factors a calibration fits, and the speed model's catalog with them applied.

Each factor multiplies the time of a group of the speed model's terms (planner.estimator.performance, the
constants of catalogs/performance.yaml) for one GPU generation x engine; 1.0 leaves the kernel tables' figure:
  memory         every read: GEMM and fused-MoE weight reads, decode attention's KV and MLA latent reads, the DSA
                 prefill's latent gather (read efficiencies and the generation's read ceiling divided by it;
                 llama.cpp's own efficiency too)
  compute        every FLOP: GEMM and MoE compute efficiencies, prefill attention's (the engines' MLA prefill
                 included), the engines' own prefill kernels' (DSA, its indexer, Gated DeltaNet) (divided by it; their
                 SM time per token or chunk multiplied)
  fixed          every fixed time: kernel launches, the small kernels' floor, the engine's per-step work and its host
                 time per kernel of an eager prefill, llama.cpp's cycles per layer (multiplied by it)
  communication  the all-reduce: its latencies multiplied, its bandwidths divided
A calibrated catalog is for timing configurations of that generation x engine only: it scales the generation's
entry, the default entry whose MoE tables the generation borrows, and the engine's, which other pairs share.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from planner.catalog.load import bounded
from planner.estimator.performance import (AllReduceFit, AttentionRates, DeltaPrefillKernel, EngineAttention,
                                           EngineKernels, GenerationEfficiency, IndexerRates, KernelRates, MoeRates,
                                           PerformanceCatalog, SparsePrefillKernel)

FACTORS = ("memory", "compute", "fixed", "communication")
# The bounds of a fitted factor (the calibration issue: 0.25-4x): beyond 4x the kernel tables would be wrong by
# more than any engine version or driver changes them, which is a wrong model, GPU or run, not a calibration.
LOWEST, HIGHEST = 0.25, 4.0


@dataclass(frozen=True)
class Factors:
    memory: float = bounded(1.0, ge=LOWEST, le=HIGHEST)
    compute: float = bounded(1.0, ge=LOWEST, le=HIGHEST)
    fixed: float = bounded(1.0, ge=LOWEST, le=HIGHEST)
    communication: float = bounded(1.0, ge=LOWEST, le=HIGHEST)

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in FACTORS}

    @property
    def identity(self) -> bool:
        return all(getattr(self, f.name) == 1.0 for f in fields(self))


def _kernel(rates: KernelRates, f: Factors) -> KernelRates:
    scaled = replace(rates, launch_us=rates.launch_us * f.fixed, read_efficiency=rates.read_efficiency / f.memory,
                     compute_efficiency=rates.compute_efficiency / f.compute)
    if isinstance(scaled, MoeRates):  # the tiles' fixed time is SM time: the speed model counts it as compute
        return replace(scaled, column_ps=scaled.column_ps * f.compute)
    return scaled


def _attention(rates: AttentionRates | EngineAttention, f: Factors) -> AttentionRates | EngineAttention:
    latent, computed = rates.latent_read_efficiency, rates.latent_compute_efficiency
    return replace(rates, launch_us=rates.launch_us * f.fixed, kv_read_efficiency=rates.kv_read_efficiency / f.memory,
                   latent_read_efficiency=None if latent is None else latent / f.memory,
                   latent_compute_efficiency=None if computed is None else computed / f.compute)


def _sparse(kernel: SparsePrefillKernel, f: Factors) -> SparsePrefillKernel:
    computed, read = kernel.compute_efficiency, kernel.read_efficiency
    return replace(kernel, compute_efficiency=None if computed is None else computed / f.compute,
                   read_efficiency=None if read is None else read / f.memory)


def _indexer(rates: IndexerRates | None, f: Factors) -> IndexerRates | None:
    if rates is None:
        return None
    return replace(rates, logits_compute_efficiency=rates.logits_compute_efficiency / f.compute,
                   topk_us=rates.topk_us * f.compute)


def _delta(kernel: DeltaPrefillKernel, f: Factors) -> DeltaPrefillKernel:
    return replace(kernel, chunk_us=kernel.chunk_us * f.compute,
                   compute_efficiency=kernel.compute_efficiency / f.compute)


def _kernels(own: EngineKernels, f: Factors) -> EngineKernels:
    """Every table of the engine's own scaled, its other fields kept (the release's fused-MoE kernel among them:
    rebuilt from three tables alone, a calibrated catalog timed another kernel than the plain one). Its prefill
    kernels count as compute in the speed model (bench/CALIBRATION_PROTOCOL.md, the correction on them), the DSA
    gather's read as memory."""
    return replace(own, gemm={k: _kernel(r, f) for k, r in own.gemm.items()},
                   moe={k: _kernel(r, f) for k, r in own.moe.items()},  # type: ignore[misc]
                   moe_kernels={kernel: {k: _kernel(r, f) for k, r in rates.items()}  # type: ignore[misc]
                                for kernel, rates in own.moe_kernels.items()},
                   attention={k: _attention(r, f) for k, r in own.attention.items()},  # type: ignore[misc]
                   sparse_prefill=tuple(_sparse(k, f) for k in own.sparse_prefill), indexer=_indexer(own.indexer, f),
                   gated_delta_prefill=tuple(_delta(k, f) for k in own.gated_delta_prefill),
                   mla_prefill_compute_efficiency=None if own.mla_prefill_compute_efficiency is None
                   else own.mla_prefill_compute_efficiency / f.compute,
                   prefill_attention_compute_efficiency=None if own.prefill_attention_compute_efficiency is None
                   else own.prefill_attention_compute_efficiency / f.compute)


def _generation(g: GenerationEfficiency, engine: str, f: Factors) -> GenerationEfficiency:
    return replace(
        g, gemm={k: _kernel(r, f) for k, r in g.gemm.items()}, moe={k: _kernel(r, f) for k, r in g.moe.items()},
        attention={k: _attention(r, f) for k, r in g.attention.items()},  # type: ignore[misc]
        attention_compute_efficiency=g.attention_compute_efficiency / f.compute,
        prefill_attention_compute_efficiency=g.prefill_attention_compute_efficiency / f.compute,
        kernel_floor_us=g.kernel_floor_us * f.fixed, moe_sorting_us=g.moe_sorting_us * f.fixed,
        graph_gap_us=g.graph_gap_us * f.fixed,
        read_ceiling=g.read_ceiling / f.memory,
        engines={name: _kernels(own, f) if name == engine else own for name, own in g.engines.items()})


def _all_reduce(fit: AllReduceFit, factor: float) -> AllReduceFit:
    return replace(fit, latency_us=fit.latency_us * factor, bandwidth_gbps=fit.bandwidth_gbps / factor,
                   large_latency_us=fit.large_latency_us * factor, bus_bandwidth_gbps=fit.bus_bandwidth_gbps / factor)


def borrowed_moe(performance: PerformanceCatalog, entry: GenerationEfficiency, engine: str) -> list[MoeRates]:
    """The `default` generation's fused-MoE tables `entry` times a format with for `engine` where it has none of its
    own (SPEED_PROTOCOL's borrowed weight-only amendment); none when `entry` is the default."""
    default = performance.generation("default")
    if entry is default:
        return []
    formats = {*default.moe, *default.engines.get(engine, EngineKernels()).moe}
    return [default.moe_rates(f, engine) for f in sorted(formats) if not entry.measures_moe(f, engine)]


def floors(performance: PerformanceCatalog, generation: str, engine: str) -> dict[str, float]:
    """Each factor's lowest credible value on `generation` x `engine` (bench/CALIBRATION_PROTOCOL.md): a factor
    below 1 speeds its terms up, and none may make a kernel beat the datasheet: `memory` no lower than the highest
    read efficiency it scales (the generation's read ceiling, its kernels', the engine's own), `compute` no lower
    than the highest compute efficiency it scales; `fixed` and `communication` LOWEST (the catalog states no
    floor for them)."""
    entry = performance.generation(generation)
    cost = performance.engine(engine)
    own = entry.engines.get(cost.name, EngineKernels())
    reads = [entry.read_ceiling, *entry.read_efficiencies.values(),
             *(r.read_efficiency for kernels in own.moe_kernels.values() for r in kernels.values()),
             *(k.read_efficiency for k in own.sparse_prefill if k.read_efficiency is not None)]
    if cost.memory_efficiency is not None:
        reads.append(cost.memory_efficiency)
    borrowed = borrowed_moe(performance, entry, cost.name)
    reads += [r.read_efficiency for r in borrowed]
    kernels = [*entry.gemm.values(), *entry.moe.values(), *own.gemm.values(), *own.moe.values(),
               *(r for rates in own.moe_kernels.values() for r in rates.values()), *borrowed]
    computes = [entry.attention_compute_efficiency, entry.prefill_attention_compute_efficiency,
                *(a.latent_compute_efficiency for a in (*entry.attention.values(), *own.attention.values())
                  if a.latent_compute_efficiency is not None),
                *(r.compute_efficiency for r in kernels),
                *(k.compute_efficiency for k in own.sparse_prefill if k.compute_efficiency is not None),
                *((own.indexer.logits_compute_efficiency,) if own.indexer else ()),
                *(k.compute_efficiency for k in own.gated_delta_prefill),
                *((own.mla_prefill_compute_efficiency,) if own.mla_prefill_compute_efficiency else ()),
                *((own.prefill_attention_compute_efficiency,) if own.prefill_attention_compute_efficiency else ())]
    return {"memory": max(LOWEST, *reads), "compute": max(LOWEST, *computes), "fixed": LOWEST,
            "communication": LOWEST}


def calibrated_catalog(performance: PerformanceCatalog, generation: str, engine: str,
                       factors: Factors) -> PerformanceCatalog:
    """`performance` with `factors` applied to `generation` (the entry its GPUs take) and `engine`."""
    if factors.identity:
        return performance
    entry = performance.generation(generation)
    # the default entry's tables this generation borrows are among the terms the factors scale; the timer reads the
    # default entry for nothing else when timing another generation
    scaled = (entry, performance.generation("default"))
    name = performance.engine(engine).name
    costs = tuple(replace(e, per_step_us=e.per_step_us * factors.fixed,
                          overlapped_step_us=e.overlapped_step_us * factors.fixed,
                          per_layer_kilocycles=e.per_layer_kilocycles * factors.fixed,
                          eager_launch_us=e.eager_launch_us * factors.fixed,
                          memory_efficiency=None if e.memory_efficiency is None else e.memory_efficiency / factors.memory)
                  if e.name == name else e for e in performance.engines)
    links = tuple(replace(link, allreduce=tuple(_all_reduce(fit, factors.communication) for fit in link.allreduce))
                  for link in performance.interconnects)
    return replace(performance, engines=costs, interconnects=links,
                   generations=tuple(_generation(g, name, factors) if any(g is e for e in scaled) else g
                                     for g in performance.generations))


__all__ = ["FACTORS", "Factors", "HIGHEST", "LOWEST", "borrowed_moe", "calibrated_catalog", "floors"]
