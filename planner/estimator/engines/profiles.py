"""catalogs/engine_profiles.yaml as typed records: every engine constant with the source it comes from."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from planner.catalog.load import catalog_dir, read_yaml, validate_record
from planner.errors import PlannerInputError
from planner.estimator.engines.registry import PROFILES_FILE, engine, label, profiled_engines, release_key
from planner.model.families.core import Recurrence
from planner.units import MiB

T = TypeVar("T")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sourced(_Strict, Generic[T]):
    """One constant and where it comes from (engine source file @ release, or a measurement)."""

    value: T
    source: str = Field(min_length=10)


class CudaProfile(_Strict):
    driver_reserved_mib: Sourced[int]
    context_mib: Sourced[int]

    def visible_bytes(self, card_bytes: int) -> int:
        """What CUDA reports as the card's total (nvidia-smi's total less the driver's reserve): none of a card no
        larger than the reserve (a custom --gpu-memory can be)."""
        return max(0, card_bytes - self.driver_reserved_mib.value * MiB)

    def startup_bytes(self, gpus: int, distributed_init: Sourced[int]) -> int:
        """Memory a GPU has lost before the engine allocates anything: CUDA context (+ NCCL when gpus > 1)."""
        return (self.context_mib.value + (distributed_init.value if gpus > 1 else 0)) * MiB


class StatePartDtypes(_Strict):
    """The dtype an engine holds each part of a recurrent state in: `auto` the model dtype, `config` the dtype the
    checkpoint's config asks for (Attention.config_ssm_dtype) or else `unset`, or a dtype by name."""

    conv: Literal["auto", "config", "float32", "bfloat16", "float16"]
    recurrent: Literal["auto", "config", "float32", "bfloat16", "float16"]
    unset: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # `config` for a model_type whose engine hook picks its own dtype when the checkpoint's config names none
    unset_by_model_type: dict[str, Literal["float32", "bfloat16", "float16"]] = {}


class VllmBatchTier(_Strict):
    """EngineArgs.get_batch_defaults, OPENAI_API_SERVER: the defaults of a card of at least min_gib as CUDA reports it
    (an A100 excluded when not_a100)."""

    min_gib: int
    not_a100: bool
    max_num_batched_tokens: int
    max_num_seqs: int


class ExtensibleKvCache(_Strict):
    """vLLM's extensible KV cache (vllm/v1/worker/extensible_kv_cache.py measure_kv_cache_bytes): the pool is what is
    free after warmup and CUDA graph capture, less the transient peak and a margin of max(floor, fraction x peak)."""

    margin_floor_mib: int
    rocm_margin_floor_mib: int
    margin_fraction: float


class VllmProfile(_Strict):
    release: str
    distributed_init_mib: Sourced[int]
    gpu_memory_utilization: Sourced[float]
    # None: the KV pool is gpu_memory_utilization's budget less what profiling measured (vLLM up to v0.19 at least)
    extensible_kv_cache: Sourced[ExtensibleKvCache] | None = None
    block_size: Sourced[int]
    mla_block_size: Sourced[int]
    batch_defaults: Sourced[tuple[VllmBatchTier, ...]]
    # "GPU KV cache size: N tokens": blocks per group x the smallest block size, or concurrency x max_model_len
    kv_cache_size_from_concurrency: Sourced[bool]
    # a sliding window holds max_num_batched_tokens new tokens for each concurrent batch (pp + 1 with async
    # scheduling), not for one
    window_holds_concurrent_batches: Sourced[bool]
    hidden_buffers_in_forward: Sourced[int]
    sampler_fp32_copies: Sourced[int]
    sampler_workspace_rows: Sourced[int]
    sampler_extra_mib: Sourced[int]
    fused_moe_chunk_tokens: Sourced[int]
    non_torch_single_gpu_mib: Sourced[int]
    non_torch_pipeline_only_mib: Sourced[int]
    non_torch_tensor_parallel_mib: Sourced[dict[int, int]]
    non_torch_tensor_parallel_pcie_mib: Sourced[int]
    cuda_graph_mib: Sourced[int]
    subtract_cuda_graph: Sourced[bool]
    redundancy_buffer_mib: Sourced[int]
    hybrid_group_ratio: Sourced[float]
    hybrid_block_alignment: Sourced[int]
    hybrid_mla_block_alignment: Sourced[int]
    hybrid_head256_block_alignment: Sourced[int]
    hybrid_head256_gpus: Sourced[tuple[str, ...]]
    state_dtypes: Sourced[dict[Recurrence, StatePartDtypes]]
    # blocks one request holds in a recurrent layer's group (mamba_cache_mode "none": 1; "align": 2 + checkpoints)
    state_blocks_per_request: Sourced[dict[Recurrence, int]]
    # cards whose Gated DeltaNet prefill runs FlashInfer, which exports one more prefill checkpoint block in "align"
    gdn_checkpoint_gpus: Sourced[tuple[str, ...]]
    # DeepSeek-V4's window, compressed, indexer and compressor-state caches (a later release than the rest)
    deepseek_v4_release: Sourced[str]
    deepseek_v4_block_size: Sourced[int]
    deepseek_v4_window_block_size: Sourced[int]
    deepseek_v4_entry_bytes: Sourced[int]
    deepseek_v4_page_alignment_bytes: Sourced[int]
    deepseek_v4_state_block_tokens: Sourced[dict[int, int]]
    deepseek_v4_overlapping_ratio: Sourced[int]
    deepseek_v4_state_value_bytes: Sourced[int]


class SglangGpuBucket(_Strict):
    below_mib: int
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    cuda_graph_max_bs_tp4: int


class PrefillCudaGraphs(_Strict):
    """SGLang's prefill CUDA graphs (arg_groups/memory_hook.py reserve_for_graph_mb): mib_per_size for each captured
    token count up to chunked_prefill_size (generate_prefill_cuda_graph_batch_sizes: range(start, stop + 1, step) per
    row), or mla_mib with an MLA backend."""

    sizes: tuple[tuple[int, int, int], ...]
    mib_per_size: int
    mla_mib: int
    # the replicas the release captures none for by default (the rules run before the reserve is summed): these model
    # types (config.json's, as planner's Architecture names them), MLA models, pipeline-parallel and data-parallel-
    # attention replicas, and multimodal models (None: not a rule) but those of the model types listed
    off_for_model_types: tuple[str, ...] = ()
    off_for_mla: bool = False
    off_with_pipeline: bool = False
    off_with_dp_attention: bool = False
    off_with_all_to_all: bool = False  # an expert all-to-all backend (--moe-a2a-backend deepep)
    off_with_speculative: bool = False  # an MTP / EAGLE draft
    multimodal_on_for: tuple[str, ...] | None = None

    def reserved_mib(self, max_tokens: int, mla: bool) -> int:
        if mla:
            return self.mla_mib
        return self.mib_per_size * sum(len(range(start, min(stop, max_tokens) + 1, step)) for start, stop, step in self.sizes)


class MambaExtraBuffer(_Strict):
    """The extra_buffer strategy SGLang's `auto` Mamba radix cache resolves to for the architectures it lists, with the
    overlap scheduler on: each running request keeps `tracking_slots` more state slots (ping-pong tracking)."""

    tracking_slots: int
    model_types: tuple[str, ...]  # as config.json names them (planner's Architecture.model_type)


class DpAttentionReserve(_Strict):
    """What SGLang's default mem_fraction_static reserves for data-parallel attention and the DeepEP all-to-all
    (arg_groups/memory_hook.py reserve_for_graph_mb, reserve_for_deepep_a2a_mb): per decode CUDA-graph batch and
    attention-DP group, more past a large graph batch; a fixed reserve for DeepEP's buffers in the decode graphs and
    for its bridge pool in the breakable prefill graphs."""

    mib_per_graph_batch_per_group: float
    large_graph_batch_above: int
    extra_mib_per_graph_batch_per_group: float
    deepep_decode_mib: int
    deepep_prefill_graphs_mib: int

    def graph_mib(self, graph_batch: int, dp: int, deepep: bool, prefill_graphs: bool) -> float:
        """reserve_for_graph_mb's share for DP attention and DeepEP (inside the large-card floor)."""
        reserved = graph_batch * dp * self.mib_per_graph_batch_per_group if dp > 1 else 0.0
        if dp > 1 and graph_batch > self.large_graph_batch_above:
            reserved += graph_batch * dp * self.extra_mib_per_graph_batch_per_group
        return reserved + (self.deepep_prefill_graphs_mib if deepep and prefill_graphs else 0)

    def all_to_all_mib(self, graph_batch: int, deepep: bool) -> int:
        """reserve_for_deepep_a2a_mb (on top of the floor): DeepEP's buffers captured in the decode graphs."""
        return self.deepep_decode_mib if deepep and graph_batch else 0


class SglangMultimodal(_Strict):
    """What SGLang does differently by default for a model it serves with its vision tower."""

    cache_mib: int  # SGLANG_VLM_CACHE_SIZE_MB, reserved out of the KV budget
    disabled_model_types: tuple[str, ...]  # multimodal off by default: none of this applies
    # adjust_mem_fraction_for_vlm: the default fraction x base_factor x clamp(1 - sensitivity x (vision layers x
    # hidden^2 / (baseline layers x hidden^2) - 1), factor_bounds); the vision config's missing numbers default to
    # the baseline's
    base_factor: float
    sensitivity: float
    factor_bounds: tuple[float, float]
    baseline_layers: int
    baseline_hidden: int

    def fraction_factor(self, layers: int | None, hidden: int | None) -> float:
        """What the default fraction is multiplied by, in SGLang's float arithmetic."""
        layers, hidden = layers or self.baseline_layers, hidden or self.baseline_hidden
        complexity = layers * hidden ** 2 / (self.baseline_layers * self.baseline_hidden ** 2)
        low, high = self.factor_bounds
        return self.base_factor * max(low, min(high, 1.0 - self.sensitivity * (complexity - 1.0)))


class SglangAdmission(_Strict):
    """How SGLang admits a waiting request against its KV pool and gives the pool back when a decode step finds no room
    (the radix cache on, its default). PrefillAdder.add_one_req admits a request only while the pool's free tokens,
    less what the running requests may still write, hold its prompt and its whole output (each clipped at
    `clip_max_new_tokens`); a running request's remaining output counts at the new-token ratio, which starts at
    `init_new_token_ratio`, falls by (init - init x `min_new_token_ratio_factor`) / `new_token_ratio_decay_steps` a decode
    step, and is reset when the server idles. When a decode step's new pages do not fit, retract_decode releases the
    running requests with the fewest outputs (the longest prompt first among equals) until they do, re-queues them at
    the back and sets the ratio to (decoded + `retract_decode_steps` x kept) / (their max_new_tokens + 1)."""

    init_new_token_ratio: float = Field(gt=0, le=1)
    min_new_token_ratio_factor: float = Field(gt=0, le=1)
    new_token_ratio_decay_steps: int = Field(ge=1)
    retract_decode_steps: int = Field(ge=0)
    clip_max_new_tokens: int = Field(ge=1)
    page_reserve: bool  # a page per request beside its prompt and output, in the check and the budget
    # a fixed-length request's (ignore_eos) remaining output counts whole, not at the ratio
    fixed_length_counts_whole: bool


class RocmAttention(_Strict):
    """The attention backend SGLang resolves on ROCm when none is passed (its model-specific adjustments, then
    _get_default_attn_backend's is_hip() arms): the model types an adjustment gives a backend of their own, and the KV
    heads per rank (num_key_value_heads // tp) at which an MLA model gets aiter (triton otherwise); every other model
    gets aiter. A backend the server is told wins, but for the model types whose adjustment forces its own."""

    model_type_backends: dict[str, str]
    forced_model_types: tuple[str, ...] = ()
    mla_aiter_heads_per_rank: tuple[int, ...]


class SglangProfile(_Strict):
    release: str
    # None: the release's reserves for data-parallel attention and DeepEP are not modelled (no DP/EP layouts)
    dp_attention_reserve: Sourced[DpAttentionReserve] | None = None
    # None: no prefill CUDA graphs by default (before the breakable prefill graphs became the CUDA default)
    prefill_cuda_graphs: Sourced[PrefillCudaGraphs] | None = None
    distributed_init_mib: Sourced[int]
    reserved_base_mib: Sourced[int]
    reserved_per_prefill_token_mib: Sourced[float]
    reserved_per_graph_batch_mib: Sourced[int]
    reserved_per_gpu_mib: Sourced[int]
    reserved_floor_large_gpu_mib: Sourced[int]
    large_gpu_min_mib: Sourced[int]
    gpu_buckets: Sourced[tuple[SglangGpuBucket, ...]]
    rocm_attention: Sourced[RocmAttention]
    aiter_long_context_factor: Sourced[float]
    aiter_min_context_exclusive: Sourced[int]
    swa_full_tokens_ratio: Sourced[float]
    # model types whose sliding-window layers get their own pool (is_hybrid_swa); the others' sliding layers take a slot
    # per token in the one pool, like full layers. None: every model mixing sliding and full layers (not checked there)
    hybrid_swa_model_types: Sourced[tuple[str, ...]] | None = None
    mamba_full_memory_ratio: Sourced[float]
    state_dtypes: Sourced[dict[Recurrence, StatePartDtypes]]
    mamba_slots_per_running_request: Sourced[int]  # the no_buffer strategy's
    mamba_extra_buffer: Sourced[MambaExtraBuffer] | None = None  # None: `auto` resolves to no_buffer for every model
    # slots the state pool allocates beside max_mamba_cache_size (None: none, as modelled before the engine oracle)
    state_pool_padding_slots: Sourced[int] | None = None
    # with speculative decoding (an EAGLE / NEXTN draft): MiB the default reserve adds, and how the state pool makes
    # room for the intermediate states a verify step writes: "radix_off", the radix cache off, a slot and the scratch
    # for each request the engine runs; "joint", the slots and the scratch for the requests they admit sized together
    # inside the ratio's budget; "refused", the release will not start a hybrid model with a draft by default
    speculative_reserve_mib: Sourced[int]
    speculative_state_scratch: Sourced[Literal["radix_off", "joint", "refused"]]
    speculative_state_scratch_amd: Sourced[Literal["radix_off", "joint", "refused"]] | None = None  # None: as on CUDA
    # the page size SGLang forces for DeepSeek Sparse Attention (None: page size 1, not checked there)
    dsa_page_size: Sourced[int] | None = None
    # a multimodal model's embedding cache and default fraction (None: as a text model, not checked there)
    multimodal: Sourced[SglangMultimodal] | None = None
    admission: Sourced[SglangAdmission]
    # DeepSeek-V4's window, compressed and compressor-state pools (later code than the rest)
    deepseek_v4_release: Sourced[str]
    deepseek_v4_page_size: Sourced[int]
    deepseek_v4_swa_full_tokens_ratio: Sourced[float]
    deepseek_v4_max_running_requests: Sourced[int]
    deepseek_v4_entry_bytes: Sourced[int]
    deepseek_v4_state_ring_tokens: Sourced[dict[int, int]]
    deepseek_v4_overlapping_ratio: Sourced[int]
    deepseek_v4_state_value_bytes: Sourced[int]
    deepseek_v4_state_row_alignment: Sourced[int]


class LlamacppProfile(_Strict):
    release: str
    fit_target_mib: Sourced[int]
    ctx_pad: Sourced[int]
    n_batch: Sourced[int]
    n_ubatch: Sourced[int]
    hidden_buffers_in_attention: Sourced[int]
    ffn_buffers: Sourced[int]
    # DeepSeek-V4's compressed K caches and compressor states (later code than the rest)
    deepseek_v4_release: Sourced[str]
    deepseek_v4_compressed_pad: Sourced[int]
    deepseek_v4_state_tokens: Sourced[dict[int, int]]
    deepseek_v4_overlapping_ratio: Sourced[int]


P = TypeVar("P", bound=BaseModel)


class EngineVersions(_Strict, Generic[P]):
    """One engine's profiles by release: `default` is what planner models when no version is asked for. In the YAML
    a version may give `based_on: VERSION` and only the constants that changed since that release; `label` is how the
    engine names itself, `aliases` other names --engine takes for it (registry.canonical)."""

    label: str
    aliases: tuple[str, ...] = ()
    default: str
    versions: dict[str, P]

    @model_validator(mode="before")
    @classmethod
    def _based_on(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("versions"), dict):
            return data
        raw = data["versions"]

        def merged(name: str, seen: tuple[str, ...] = ()) -> Any:
            entry = raw[name]
            if not isinstance(entry, dict):
                return entry
            base = entry.get("based_on")
            if base is not None and (base not in raw or base in seen):
                raise ValueError(f"versions.{name}.based_on: {base!r} is not another version")
            own = {k: v for k, v in entry.items() if k != "based_on"}
            return {**merged(base, (*seen, name)), **own} if base is not None else own

        return {**data, "versions": {name: merged(name) for name in raw}}

    @model_validator(mode="after")
    def _default_known(self) -> EngineVersions:
        if self.default not in self.versions:
            raise ValueError(f"default {self.default!r} is not one of the versions")
        return self

    def resolve(self, version: str | None, engine: str) -> str:
        """The release planner models for `version` (None: the default; a leading v is dropped); an unknown release is
        refused in one line naming the known ones."""
        if version is None:
            return self.default
        release = version.removeprefix("v")
        if not self.knows(release):
            raise PlannerInputError(
                f"--engine-version / engine.version: {label(engine)} {version} has no profile in planner; use one "
                f"of {', '.join(sorted(self.versions, key=release_key))} (default {self.default})")
        return release

    def knows(self, release: str) -> bool:
        """Whether planner keeps a profile of `release`."""
        return release.removeprefix("v") in self.versions

    def get(self, version: str | None, engine: str) -> P:
        """The profile of `version` (None: the default)."""
        return self.versions[self.resolve(version, engine)]


class EngineProfiles(_Strict):
    """The shared CUDA constants; each engine's releases are a field of its name (create_model below)."""

    schema_version: int
    cuda: CudaProfile

    def versions(self, engine: str) -> EngineVersions:
        return getattr(self, engine)


@cache
def _profiles_schema() -> type[EngineProfiles]:
    """EngineProfiles with one EngineVersions field per engine of the registry, typed by the engine's own profile."""
    fields: dict[str, Any] = {name: (EngineVersions[engine(name).profile], ...) for name in profiled_engines()}
    return create_model("EngineProfiles", __base__=EngineProfiles, **fields)


@cache
def load_profiles(directory: str | None = None) -> EngineProfiles:
    """Read and validate engine_profiles.yaml (cached: it does not change during a run)."""
    path = Path(directory or catalog_dir()) / PROFILES_FILE
    return validate_record(_profiles_schema(), read_yaml(path), f"catalog {PROFILES_FILE}")
