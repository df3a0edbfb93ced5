"""The vLLM side of the engine oracle (engine_oracle.py --engine vllm): vLLM v0.34.0's own KV-cache planning.

For each case planner's vLLM budget gives the KV memory of each worker, its block size, page, groups, blocks, "GPU KV
cache size" and maximum concurrency. The same memory is handed to vLLM v0.34.0's own planning functions, fed with the
KVCacheSpec objects vLLM's layers build:

  vllm/v1/core/kv_cache_planning.py@v0.34.0   get_global_kv_cache_groups (grouping, page-size unification, the
                                               packed / padded hybrid layouts), get_kv_cache_configs (num_blocks,
                                               the null-block reserve, check_enough_kv_cache_memory)
  vllm/v1/core/kv_cache_utils.py@v0.34.0      generate_scheduler_kv_cache_config, get_kv_cache_capacity (the logged
                                               "GPU KV cache size: N tokens" and "Maximum concurrency")
  vllm/platforms/interface.py@v0.34.0          Platform._align_hybrid_block_size (attention block raised until its page
                                               holds a Mamba / Gated DeltaNet state; the state page padded to it)
  vllm/model_executor/models/config.py@v0.34.0 MambaModelConfig.verify_and_update_config (mamba_cache_mode, block size)

`--version 0.19.0` compares planner's v0.19.0 profile (default: planner's default vLLM profile) with the same v0.34.0
functions.

Stubs (vLLM needs a GPU and a loaded model to reach these functions; only what they read is given):
  - VllmConfig: a namespace with the fields the planning functions read (model_config, cache_config (vLLM's own
    CacheConfig), parallel_config, scheduler_config, attention_config, device_config); max_concurrent_batches and
    max_in_flight_tokens are vLLM's own VllmConfig properties (config/vllm.py@v0.34.0).
  - The attention backend: vLLM's FlashAttentionBackend class (v1/attention/backends/flash_attn.py@v0.34.0), the
    default on Hopper for GQA layers, FlashMLABackend (mla/flashmla.py) for MLA; the platform's block-size choice is
    Platform.update_block_size_for_backend (platforms/interface.py@v0.34.0) with that backend.
  - ModelRegistry.resolve_model_cls: answers with a class whose two classmethods call MambaStateShapeCalculator /
    MambaStateDtypeCalculator (model_executor/layers/mamba/mamba_utils.py@v0.34.0) with the arguments the model
    file passes (qwen3_next.py / nemotron_h.py get_mamba_state_shape_from_config / _dtype_from_config @v0.34.0), so
    no model (and none of its kernels) is imported.
  - _find_non_ssm_backends: that backend (the model's attention layers are not built).
  - get_mamba_prefill_checkpoint_alignment (mamba/abstract.py@v0.34.0, which asks the built layers): Qwen3-Next's
    GatedDeltaNet layers answer FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64 in align mode on Hopper (FlashInfer prefill,
    qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend / __init__ @v0.34.0), MambaMixer2 answers None.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import AutoConfig

from vllm.config import VllmConfig
from vllm.config.cache import CacheConfig
from vllm.model_executor.layers.attention.attention import _largest_kernel_block_within
from vllm.model_executor.layers.mamba import abstract as mamba_abstract
from vllm.model_executor.layers.mamba.mamba_utils import (MambaStateDtypeCalculator, MambaStateShapeCalculator,
                                                         mamba_state_alignment)
from vllm.model_executor.models import ModelRegistry
from vllm.model_executor.models.config import MambaModelConfig, NemotronHForCausalLMConfig
from vllm.platforms.interface import Platform
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend
from vllm.v1.attention.backends.gdn_attn import FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config, get_kv_cache_capacity
from vllm.v1.kv_cache_interface import (FullAttentionSpec, MambaSpec, MLAAttentionSpec, SlidingWindowSpec,
                                        iter_layer_specs)

NAME, RELEASE = "vLLM", "0.34.0"
# model, GPU, TP, context: the catalog's plain GQA, sliding-window, MLA and hybrid (Gated DeltaNet, Mamba-2) models
CASES = (("llama-3.1-8b", "h100-sxm", 1, 32768), ("llama-3.1-70b", "h100-sxm", 4, 32768),
         ("gpt-oss-120b", "h100-sxm", 1, 32768), ("deepseek-v3", "h200-sxm", 8, 32768),
         ("qwen3-next-80b-a3b", "h100-sxm", 4, 32768), ("nemotron-3-nano-30b-a3b", "h100-sxm", 1, 32768))

# Differences whose cause is known, by planner's vLLM profile and (model, figure): the explanation column. Planner's
# v0.34.0 profile matches v0.34.0's functions on every row; its v0.19.0 profile keeps v0.19.0's rules where v0.34.0
# changed them (each a cause, not a tolerance).
_BLOCK = ("v0.34.0 CacheConfig.DEFAULT_BLOCK_SIZE = 64 (config/cache.py), kept by update_block_size_for_backend for "
          "FlashAttention (MultipleOf(16)); planner: 16 (v0.19.0)")
_PAGE = "follows the block size (page = block x bytes per token)"
_TOKENS = ("v0.34.0 logs int(max_concurrency x max_model_len) (kv_cache_utils.py get_kv_cache_capacity); planner: "
           "num_blocks // groups x block size (v0.19.0)")
_ALIGN = ("_align_hybrid_block_size (platforms/interface.py) aligns to max(smallest kernel block 16, block size 64) "
          "= 64, lcm'd in align mode (prefix caching on by default: MambaModelConfig sets mamba_cache_mode 'align', "
          "models/config.py) with the layers' checkpoint alignment")
_STATE_BLOCKS = ("align mode: MambaSpec.max_memory_usage_bytes = page x (2 + 1 prefill checkpoint block) "
                 "(kv_cache_interface.py, mamba_mixer2.py / qwen_gdn_linear_attn.py get_kv_cache_spec); planner: 1")
EXPLAINED: dict[str, dict[tuple[str, str], str]] = {"0.34.0": {}, "0.19.0": {
    **{(model, figure): text for model in ("llama-3.1-8b", "llama-3.1-70b", "gpt-oss-120b")
       for figure, text in (("block_size", _BLOCK), ("page_bytes", _PAGE), ("num_blocks", _PAGE + ", x 1/4"),
                            ("kv_cache_tokens", _TOKENS))},
    ("gpt-oss-120b", "max_concurrency"): (
        "SlidingWindowSpec.max_admission_blocks_per_request counts VllmConfig.max_in_flight_tokens = (pp + 1 with "
        "async scheduling) x max_num_batched_tokens = 16,384 in-flight tokens; planner: 8,192 (v0.19.0); and 64-token blocks"),
    **{("qwen3-next-80b-a3b", figure): text for figure, text in (
        ("block_size", _ALIGN + " (64, FLASHINFER_GDN_CHECKPOINT_ALIGNMENT, gdn_attn.py): 64 x ceil(274,432 / "
                       "(64 x 1,024)) = 320; planner: 16 x ceil(...) = 272"),
        ("page_bytes", _PAGE), ("num_blocks", _PAGE), ("kv_cache_tokens", _TOKENS),
        ("max_concurrency", _STATE_BLOCKS))},
    **{("nemotron-3-nano-30b-a3b", figure): text for figure, text in (
        ("state_bytes", "v0.34.0 NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE = float32 (models/config.py) "
                        "when the checkpoint names none; planner's state_dtypes: float16 (v0.19.0)"),
        ("block_size", _ALIGN + " (none for Mamba-2): 64 x ceil(2,134,016 / (64 x 1,024)) = 2,112; planner: "
                       "16 x ceil(1,085,440 / (16 x 1,024)) = 1,072"),
        ("page_bytes", _PAGE), ("num_blocks", _PAGE), ("kv_cache_tokens", _TOKENS),
        ("max_concurrency", _STATE_BLOCKS + "; and the larger float32 state page"))},
}}


def _hf_config(model_config: dict):
    """The checkpoint's config as transformers builds it (what vLLM's model_config.hf_config holds)."""
    fields = {k: v for k, v in model_config.items() if k not in ("architectures", "model_type", "quantization_config")}
    return AutoConfig.for_model(model_config["model_type"], architectures=model_config["architectures"], **fields)


class _Hybrid:
    """ModelRegistry.resolve_model_cls's answer for a hybrid model: the state shape and dtypes its vLLM model file
    (qwen3_next.py / nemotron_h.py @v0.34.0) computes, by the same calculator calls."""

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        hf, tp = vllm_config.model_config.hf_config, vllm_config.parallel_config.tensor_parallel_size
        if hf.model_type == "nemotron_h":
            return MambaStateShapeCalculator.mamba2_state_shape(
                tp_world_size=tp, intermediate_size=hf.mamba_num_heads * hf.mamba_head_dim, n_groups=hf.n_groups,
                num_heads=hf.mamba_num_heads, head_dim=hf.mamba_head_dim, state_size=hf.ssm_state_size,
                conv_kernel=hf.conv_kernel)
        return MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp, hf.linear_num_key_heads, hf.linear_num_value_heads, hf.linear_key_head_dim, hf.linear_value_head_dim,
            hf.linear_conv_kernel_dim, 0)

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config):
        cache, hf = vllm_config.cache_config, vllm_config.model_config.hf_config
        calculator = (MambaStateDtypeCalculator.mamba2_state_dtype if hf.model_type == "nemotron_h"
                      else MambaStateDtypeCalculator.gated_delta_net_state_dtype)
        return calculator(vllm_config.model_config.dtype, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype)


class _Hopper(Platform):
    """The platform's block-size alignment with the model's attention backend (its layers are not built)."""

    @classmethod
    def _find_non_ssm_backends(cls, vllm_config):
        return [_backend(vllm_config)]


def _backend(vllm_config):
    """The attention backend of the model's attention layers on Hopper: FlashMLA for MLA, else FlashAttention."""
    return FlashMLABackend if vllm_config.model_config.use_mla else FlashAttentionBackend


class _Config(SimpleNamespace):
    max_concurrent_batches = VllmConfig.max_concurrent_batches
    max_in_flight_tokens = VllmConfig.max_in_flight_tokens


def _vllm_config(hf, budget, tp: int, context: int) -> _Config:
    settings, use_mla = budget.settings, hasattr(hf, "kv_lora_rank")
    model = SimpleNamespace(
        hf_config=hf, hf_text_config=hf, dtype=torch.bfloat16, max_model_len=context, original_max_model_len=context,
        use_mla=use_mla, architecture=hf.architectures[0], supports_kv_cache_grouping=False,
        is_hybrid=hf.model_type in ("qwen3_next", "nemotron_h"),
        get_num_kv_heads=lambda parallel: max(1, hf.num_key_value_heads // parallel.tensor_parallel_size),
        get_head_size=lambda: getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads)
    # CacheConfig defaults @v0.34.0: prefix caching on, cache_dtype auto, no --block-size (DEFAULT_BLOCK_SIZE until
    # Platform.update_block_size_for_backend picks the backends' size and aligns a hybrid's)
    cache = CacheConfig()
    return _Config(
        model_config=model, cache_config=cache,
        parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1,
                                        decode_context_parallel_size=1),
        # async scheduling: on by default for these CUDA models (config/vllm.py@v0.34.0 VllmConfig.__post_init__)
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False, enable_chunked_prefill=True,
                                         max_num_batched_tokens=settings.max_num_batched_tokens,
                                         async_scheduling=True),
        attention_config=SimpleNamespace(hisparse_config=None), device_config=SimpleNamespace(device_type="cuda"),
        speculative_config=None, num_speculative_tokens=0, num_prefill_lookahead_tokens=0,
        use_flashinfer_replayssm=False, additional_config={}, kv_transfer_config=None)


def _checkpoint_alignment(vllm_config) -> int | None:
    """What the model's recurrent layers answer to get_prefill_checkpoint_alignment (see the stubs above)."""
    gdn = vllm_config.model_config.hf_config.model_type == "qwen3_next"
    return FLASHINFER_GDN_CHECKPOINT_ALIGNMENT if gdn and vllm_config.cache_config.mamba_cache_mode == "align" else None


def _layer_specs(hf, vllm_config) -> dict[str, object]:
    """Each layer's KVCacheSpec as its vLLM layer builds it (one worker, TP ranks alike)."""
    cache, model = vllm_config.cache_config, vllm_config.model_config
    block, dtype = cache.block_size, torch.bfloat16
    heads, head = model.get_num_kv_heads(vllm_config.parallel_config), model.get_head_size()
    if model.use_mla:
        # mla_attention.py@v0.34.0 MLAAttention.get_kv_cache_spec: one latent (kv_lora_rank + qk_rope_head_dim) per
        # token, num_kv_heads=1, max_tp_shards=1, head_size_v 0
        latent = MLAAttentionSpec(block_size=block, num_kv_heads=1, max_tp_shards=1,
                                  head_size=hf.kv_lora_rank + hf.qk_rope_head_dim, dtype=dtype, cache_dtype_str="auto")
        return {f"model.layers.{i}.self_attn.attn": latent for i in range(hf.num_hidden_layers)}
    # attention.py@v0.34.0 Attention.get_kv_cache_spec: full attention layers
    full = FullAttentionSpec(block_size=block, num_kv_heads=heads, head_size=head, dtype=dtype)
    specs = {}
    if hf.model_type == "gpt_oss":
        # sliding layers: a SlidingWindowSpec whose block size _largest_kernel_block_within picks (attention.py)
        per_token = SlidingWindowSpec(block_size=1, num_kv_heads=heads, head_size=head, dtype=dtype,
                                      sliding_window=hf.sliding_window)
        sw_block = _largest_kernel_block_within(FlashAttentionBackend, per_token.real_page_size_bytes,
                                                per_token.real_page_size_bytes * block, block, per_token,
                                                divisor_of=block)
        sliding = SlidingWindowSpec(block_size=sw_block, num_kv_heads=heads, head_size=head, dtype=dtype,
                                    sliding_window=hf.sliding_window)
        for i, kind in enumerate(hf.layer_types):
            specs[f"model.layers.{i}.attn"] = sliding if kind == "sliding_attention" else full
        return specs
    if model.is_hybrid:
        # mamba/abstract.py@v0.34.0 MambaBase.get_kv_cache_spec; GDN (Hopper: FlashInfer prefill) and Mamba-2 mixers
        # add one prefill checkpoint block in align mode (qwen_gdn_linear_attn.py / mamba_mixer2.py get_kv_cache_spec)
        align = cache.mamba_cache_mode == "align"
        state = MambaSpec(shapes=tuple(_Hybrid.get_mamba_state_shape_from_config(vllm_config)),
                          dtypes=_Hybrid.get_mamba_state_dtype_from_config(vllm_config),
                          state_alignment=mamba_state_alignment(vllm_config),
                          block_stride_alignment=mamba_state_alignment(vllm_config), block_size=cache.mamba_block_size,
                          page_size_padded=cache.mamba_page_size_padded, mamba_cache_mode=cache.mamba_cache_mode,
                          num_prefill_checkpoint_blocks=1 if align else 0,
                          prefill_checkpoint_alignment=(cache.mamba_block_size if _checkpoint_alignment(vllm_config)
                                                        else 1) if align else None)
        kinds = (hf.layer_types if hf.model_type == "qwen3_next" else
                 ["attention" if c == "*" else "mamba" if c == "M" else None for c in hf.hybrid_override_pattern])
        for i, kind in enumerate(kinds):
            if kind in ("linear_attention", "mamba"):
                specs[f"model.layers.{i}.mixer"] = state
            elif kind in ("full_attention", "attention"):
                specs[f"model.layers.{i}.attn"] = full
        return specs
    return {f"model.layers.{i}.self_attn.attn": full for i in range(hf.num_hidden_layers)}


def engine_side(case, config: dict, budget, gpu) -> dict[str, float]:
    """vLLM's figures for planner's KV memory per worker."""
    hf, tp, context = _hf_config(config), case.tp, case.context
    vllm_config = _vllm_config(hf, budget, tp, context)
    if vllm_config.model_config.is_hybrid:
        if hf.model_type == "nemotron_h":
            NemotronHForCausalLMConfig.verify_and_update_config(vllm_config)
        MambaModelConfig.verify_and_update_config(vllm_config)
    original = ModelRegistry.resolve_model_cls, mamba_abstract.get_mamba_prefill_checkpoint_alignment
    ModelRegistry.resolve_model_cls = lambda *args, **kwargs: (_Hybrid, hf.architectures[0])
    mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda config: _checkpoint_alignment(config)
    try:
        _Hopper.update_block_size_for_backend(vllm_config)
    finally:
        ModelRegistry.resolve_model_cls, mamba_abstract.get_mamba_prefill_checkpoint_alignment = original
    specs = _layer_specs(hf, vllm_config)
    # the engine core's layout choice (v1/engine/core.py@v0.34.0 _initialize_kv_caches), from the worker's backends
    layouts = [layout.name for layout in get_supported_kv_cache_layouts([_backend(vllm_config)])]
    resolve_kv_cache_layout(vllm_config, [layouts], specs.values())
    available = min(rank.kv_pool_bytes for rank in budget.per_rank)
    groups = get_global_kv_cache_groups(vllm_config, [specs])
    configs = get_kv_cache_configs(vllm_config, [specs], [available], groups)
    scheduler = generate_scheduler_kv_cache_config(configs)
    tokens, concurrency = get_kv_cache_capacity(vllm_config, scheduler)
    layers = [spec for g in scheduler.kv_cache_groups for spec in iter_layer_specs(g.kv_cache_spec)]
    states = [spec.real_page_size_bytes for spec in layers if isinstance(spec, MambaSpec)]
    return {"block_size": vllm_config.cache_config.block_size, "groups": len(scheduler.kv_cache_groups),
            "state_bytes": max(states, default=0), "page_bytes": max(spec.page_size_bytes for spec in layers),
            "num_blocks": scheduler.num_blocks, "kv_cache_tokens": tokens,
            "max_concurrency": round(concurrency, 2)}


def describe(case, budget) -> str:
    return (f"vLLM {case.model} on {case.gpu} TP{case.tp}, max_model_len {case.context}: {budget.kv_pool_bytes:,} B of KV "
            f"memory per worker ({budget.release})")


def planner_side(budget) -> dict[str, float]:
    layout = budget.layout
    return {"block_size": layout.block_size, "groups": sum(g.groups for g in layout.groups),
            "state_bytes": layout.state_bytes, "page_bytes": layout.page_bytes,
            "num_blocks": budget.kv_pool_bytes // (layout.page_bytes * layout.layers_per_group),
            "kv_cache_tokens": budget.kv_cache_capacity_tokens, "max_concurrency": round(budget.max_concurrency, 2)}
