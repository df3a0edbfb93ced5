"""catalogs/engine_profiles.yaml as typed records: every engine constant with the source it comes from."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.load import catalog_dir, read_yaml, validate_record
from planner.model.families.core import Recurrence
from planner.units import MiB

PROFILES_FILE = "engine_profiles.yaml"

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
        """What CUDA reports as the card's total (nvidia-smi's total less the driver's reserve)."""
        return card_bytes - self.driver_reserved_mib.value * MiB

    def startup_bytes(self, gpus: int, distributed_init: Sourced[int]) -> int:
        """Memory a GPU has lost before the engine allocates anything: CUDA context (+ NCCL when gpus > 1)."""
        return (self.context_mib.value + (distributed_init.value if gpus > 1 else 0)) * MiB


class StatePartDtypes(_Strict):
    """The dtype an engine holds each part of a recurrent state in: `auto` the model dtype, `config` the dtype the
    checkpoint's config asks for (Attention.config_ssm_dtype) or else `unset`, or a dtype by name."""

    conv: Literal["auto", "config", "float32", "bfloat16", "float16"]
    recurrent: Literal["auto", "config", "float32", "bfloat16", "float16"]
    unset: Literal["auto", "float32", "bfloat16", "float16"] = "auto"


class VllmProfile(_Strict):
    release: str
    distributed_init_mib: Sourced[int]
    gpu_memory_utilization: Sourced[float]
    block_size: Sourced[int]
    mla_block_size: Sourced[int]
    large_gpu_min_gib: Sourced[int]
    large_gpu_max_num_batched_tokens: Sourced[int]
    large_gpu_max_num_seqs: Sourced[int]
    other_gpu_max_num_batched_tokens: Sourced[int]
    other_gpu_max_num_seqs: Sourced[int]
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


class SglangProfile(_Strict):
    release: str
    distributed_init_mib: Sourced[int]
    reserved_base_mib: Sourced[int]
    reserved_per_prefill_token_mib: Sourced[float]
    reserved_per_graph_batch_mib: Sourced[int]
    reserved_per_gpu_mib: Sourced[int]
    reserved_floor_large_gpu_mib: Sourced[int]
    large_gpu_min_mib: Sourced[int]
    gpu_buckets: Sourced[tuple[SglangGpuBucket, ...]]
    aiter_long_context_factor: Sourced[float]
    aiter_min_context_exclusive: Sourced[int]
    swa_full_tokens_ratio: Sourced[float]
    mamba_full_memory_ratio: Sourced[float]
    state_dtypes: Sourced[dict[Recurrence, StatePartDtypes]]
    mamba_slots_per_running_request: Sourced[int]
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


class EngineProfiles(_Strict):
    schema_version: int
    cuda: CudaProfile
    vllm: VllmProfile
    sglang: SglangProfile
    llamacpp: LlamacppProfile


@cache
def load_profiles(directory: str | None = None) -> EngineProfiles:
    """Read and validate engine_profiles.yaml (cached: it does not change during a run)."""
    path = Path(directory or catalog_dir()) / PROFILES_FILE
    return validate_record(EngineProfiles, read_yaml(path), f"catalog {PROFILES_FILE}")
