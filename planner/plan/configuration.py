"""One replica configuration: what is planned, re-checked, printed, written to a plan file and exported.

A configuration names the model (as the user gave it and as an engine loads it), the card, the
TP x PP layout (with data-parallel attention, expert parallelism and the experts' all-to-all where planned), the weight precision, the KV cache dtype, the context (the engine's max-model-len),
the sequences one replica holds at once, and the engine with the settings its profile resolved
(gpu_memory_utilization, max_num_seqs, max_num_batched_tokens, mem_fraction_static, block size ...).
Candidates, rejections, plans, fleet assignments and exports all carry this one record, so a
decision made while planning reaches the launch command unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.catalog.load import Catalog
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings
from planner.estimator.engines.need import engine_need
from planner.estimator.engines.registry import engine
from planner.estimator.layout import ParallelLayout
from planner.estimator.memory import GpuFit, GpuTarget, MemoryEstimate, Request, estimate_memory
from planner.model.architecture import Architecture

if TYPE_CHECKING:
    from planner.estimator.speculative import Speculation

SIMPLE_ENGINE = "simple"  # the seed's planning margin: no engine's own budget decided the fit


@dataclass(frozen=True)
class Configuration:
    model: str  # as given: a catalog name, an HF id or a config path
    model_id: str  # what an engine loads: the catalog's HF id, or the config path given
    gpu: str  # catalog GPU name
    tp: int
    pp: int
    precision: str
    kv_dtype: str
    context: int  # tokens per sequence: the engine's max-model-len
    concurrency: int  # sequences one replica holds at once (the batch)
    engine: EngineSettings  # name and the settings the engine profile resolved for this GPU and layout
    overhead_fraction: float | None = None  # engine "simple" only: the planning margin (None: the catalog's)
    params: int | None = None  # a model known only by its size: the parameter count it was planned with
    dp: int = 1  # data-parallel attention groups among the tp GPUs (SGLang --attn-dp-size; vLLM --data-parallel-size)
    ep: int = 1  # expert-parallel size (SGLang --ep-size; vLLM --enable-expert-parallel: tp)
    all_to_all: str | None = None  # the experts' all-to-all backend (SGLang --moe-a2a-backend), None: all-reduce
    # speculative decoding with the checkpoint's MTP module (SGLang --speculative-algorithm EAGLE, vLLM
    # --speculative-config): its layer held beside the target's (served_architecture), every decode step a cycle
    speculation: Speculation | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def parallel(self) -> ParallelLayout:
        return ParallelLayout(self.tp, self.pp, self.dp, self.ep, self.all_to_all)

    @property
    def max_model_len(self) -> int:
        return self.context

    @property
    def memory_fraction(self) -> float | None:
        """The share of each card the engine was allowed when the plan was checked (vLLM's
        gpu_memory_utilization, SGLang's mem_fraction_static); None for the planning margin and llama.cpp."""
        return getattr(self.engine, engine(self.engine.name).fraction_field)

    def request(self) -> Request:
        """The estimator's request for this configuration (the whole batch, on its layout)."""
        return Request(context=self.context, batch=self.concurrency, tp=self.tp, pp=self.pp,
                       precision=self.precision, kv_dtype=self.kv_dtype, overhead_fraction=self.overhead_fraction,
                       dp=self.dp, ep=self.ep, all_to_all=self.all_to_all)


def loaded_model_id(catalog: Catalog, reference: str) -> str:
    """What an engine loads for a model as given: a catalog model's HF id, else the reference itself (a Hub id, or
    a config path)."""
    try:
        return catalog.models.get(reference).hf_id
    except PlannerInputError:
        return reference


class ConfiguredBy:
    """Read access to the configuration a planning record carries (a candidate, a rejection, a plan)."""

    configuration: Configuration

    @property
    def tp(self) -> int:
        return self.configuration.tp

    @property
    def pp(self) -> int:
        return self.configuration.pp

    @property
    def gpus_per_replica(self) -> int:
        return self.configuration.gpus

    @property
    def node_group(self) -> int:
        """The GPUs that must share one node (planner.estimator.layout.ParallelLayout.node_group)."""
        return self.configuration.parallel.node_group

    @property
    def layout(self) -> str:
        """The parallel layout as the engines' flags set it: `tp 16 x dp 16 x ep 16 x pp 1, deepep`."""
        return self.configuration.parallel.name

    @property
    def precision(self) -> str:
        return self.configuration.precision

    @property
    def kv_dtype(self) -> str:
        return self.configuration.kv_dtype

    @property
    def context(self) -> int:
        return self.configuration.context

    @property
    def concurrency(self) -> int:
        return self.configuration.concurrency


def served_architecture(arch: Architecture, speculation: Speculation | None) -> Architecture:
    """What the GPUs hold: the model, and with speculative decoding its MTP module's layer too (with_draft)."""
    if speculation is None:
        return arch
    from planner.estimator.speculative import with_draft

    return with_draft(arch, speculation.draft_tokens)


def check_configuration(arch: Architecture, configuration: Configuration, card: GpuTarget,
                        catalog: Catalog) -> MemoryEstimate:
    """The estimator's verdict on a configuration, from scratch: every printed or exported plan passes it.
    With an engine, its own rules (engine_need, with the settings the plan resolved) decide `gpu.fits` and
    the headroom; the breakdown stays the estimator's. With speculative decoding the draft's layer counts too."""
    arch = served_architecture(arch, configuration.speculation)
    estimate = estimate_memory(arch, configuration.request(), catalog, card)
    if configuration.engine.name == SIMPLE_ENGINE:
        return estimate
    need = engine_need(arch, configuration.request(), configuration.engine, card, catalog)
    kept = tuple(w for w in estimate.warnings if not w.startswith(("does not fit", "little headroom")))
    engine_warnings = need.budget.warnings if need.budget else (need.reason or "",)
    return replace(estimate, gpu=GpuFit(card.name, card.memory_bytes, need.fits, need.headroom_bytes(card.memory_bytes)),
                   warnings=kept + tuple(engine_warnings))
