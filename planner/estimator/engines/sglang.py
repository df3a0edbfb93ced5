"""SGLang start-up: a static fraction of the memory it found free, weights first, the rest a token pool.

  1. model_runner.init_torch_distributed: total = free GPU memory once CUDA (and NCCL) are up.
  2. server_args._handle_gpu_memory_settings, when --mem-fraction-static is not given: pick
     chunked_prefill_size and cuda_graph_max_bs by GPU memory, reserve 512 MiB + 1.5 MiB per prefill token
     + 2 MiB per CUDA-graph batch + 128 MiB per GPU of the replica (at least 10 GiB on > 60 GiB cards), and
     set mem_fraction_static = (gpu_mem - reserved) / gpu_mem.
  3. model_runner.profile_max_num_token after loading the weights: rest = free - total x (1 - fraction)
     = fraction x total - weights; max_total_num_tokens = rest // cell size, the cell being one token's
     K and V in every layer on the rank (MLA: the latent, once; with DeepSeek Sparse Attention the indexer's fp8
     key and scale join the cell: cell_size += indexer_size_per_token x layers, which the Architecture's per-token
     bytes carry). Sliding-window layers of a hybrid-SWA architecture get their own pool
     of swa_full_tokens_ratio x the full layers' slots (v0.5.23: only the architectures is_hybrid_swa_model lists,
     profile `hybrid_swa_model_types`; Gemma 2 / 3 keep every layer in the one pool). Tokens are pooled one by one
     (page size 1; v0.5.23: 64 with DeepSeek Sparse Attention, profile `dsa_page_size`).
  Recurrent layers (Gated DeltaNet, Mamba-2) keep their states in a separate pool of whole-sequence slots
  (MambaPool / HybridReqToTokenPool): model_runner._handle_max_mamba_cache gives it
  rest x mamba_full_memory_ratio / (1 + ratio), max_mamba_cache_size = that // one sequence's states in
  every recurrent layer of the rank (v0.5.23: less one padding slot the pool also allocates, profile
  `state_pool_padding_slots`), and the attention layers' token pool gets what is left.
  _resolve_max_num_reqs admits at most max_mamba_cache_size // 3 running requests (the radix cache keeps
  the other slots for the states of cached prefixes; from v0.5.15: // 5 for the architectures whose `auto` strategy is
  extra_buffer, its two tracking slots per request, profile `mamba_extra_buffer`), which caps the concurrency too.
  With speculative decoding (an MTP / EAGLE draft of D - 1 tokens, D verified a step) the verify step writes each
  running request's intermediate states for its D tokens: v0.5.23 sizes the slots and that scratch for
  min(48 // dp, slots // ratio) requests jointly inside the ratio's budget; v0.5.9 turned the radix cache off, kept a
  slot and the scratch for each of the 48 // dp requests it runs, and reserved 2 GiB more (profile
  `speculative_state_scratch`, `speculative_reserve_mib`).
  Activations and CUDA graphs live in the (1 - fraction) left over; SGLang does not profile them.
  DeepSeek-V4's window, compressed and compressor-state pools (later code) are sized in sglang_deepseek_v4.
  v0.5.23 (profile "0.5.23", python/sglang/srt/arg_groups/memory_hook.py): A10/4090-class cards default to a 4096-token
  chunk and decode graphs up to 48 (160 at tp >= 4), and on CUDA the breakable prefill CUDA graphs (on by default)
  reserve 8 MiB per captured token count up to the chunk (1.5 GiB with MLA) in the fraction's reserve.
  On AMD the aiter attention backend multiplies the fraction, even an explicit one, by 0.85 when the context is
  above 8K; SGLang resolves aiter for most models there, not for DSA, DeepSeek-V4, Gemma 4 or MLA models at other
  than 16 or 128 heads a rank (profile `rocm_attention`): the pool is sized with what it resolves.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from fractions import Fraction
from math import floor

from planner.model.architecture import Architecture
from planner.catalog.load import Catalog
from planner.estimator.engines.base import (CacheGroup, EngineBudget, EngineSettings, OutputReservation, PoolLayout,
                                            PrefillDelayer,
                                            RankBudget, ServedModel, Stage, catalog_card, limiting_rank, serve)
from planner.estimator.engines import sglang_deepseek_v4 as v4
from planner.estimator.engines.profiles import SglangMultimodal, SglangProfile, load_profiles
from planner.estimator.engines.registry import Engine, sglang_auto_kv_dtype, release_key
from planner.errors import PlannerInputError
from planner.estimator.memory import RECURRENT_KINDS, GpuTarget, Request
from planner.units import MiB, gib

# SGLang --kv-cache-dtype (sglang/srt/server_args.py) names the fp8 flavour; any other dtype runs "auto", but a DSA
# model's bf16 (sglang_kv_cache_flag)
SGLANG_KV_CACHE_DTYPES = {"fp8": "fp8_e4m3"}
# SGLang runs at most this many requests at once with speculative decoding unless --max-running-requests is given
# (v0.5.23 srt/arg_groups/speculative_hook.py:1086-1094 _handle_eagle_family, EAGLE / NEXTN: "Max running requests is
# reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."); with
# data-parallel attention each group runs its share of them
SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS = 48


def resolve_settings(settings: EngineSettings, gpu: GpuTarget, model: ServedModel, profile: SglangProfile,
                     cuda: bool) -> EngineSettings:
    gpu_mib = gpu.memory_bytes // MiB  # get_device_memory_capacity: nvidia-smi memory.total in MiB
    bucket = next(b for b in profile.gpu_buckets.value if gpu_mib < b.below_mib)
    prefill = settings.max_num_batched_tokens or bucket.chunked_prefill_size
    graph_batch = settings.max_num_seqs or (bucket.cuda_graph_max_bs_tp4 if model.request.tp >= 4 else bucket.cuda_graph_max_bs)
    resolved = replace(settings, max_num_batched_tokens=prefill, max_num_seqs=graph_batch)
    return replace(resolved, mem_fraction_static=(settings.mem_fraction_static
                                                  or default_fraction(resolved, gpu_mib, model, profile, cuda)))


def prefill_graph_mib(settings: EngineSettings, model: ServedModel, profile: SglangProfile, cuda: bool) -> int:
    """The prefill CUDA graphs' reserve (reserve_for_graph_mb): none where the release or the platform captures none."""
    if profile.prefill_cuda_graphs is None or settings.enforce_eager or not cuda:
        return 0
    graphs, arch = profile.prefill_cuda_graphs.value, model.arch
    mla = "mla" in arch.attention_kinds
    if (arch.model_type in graphs.off_for_model_types or (mla and graphs.off_for_mla)
            or (model.request.pp > 1 and graphs.off_with_pipeline) or (model.request.dp > 1 and graphs.off_with_dp_attention)
            or (model.request.all_to_all is not None and graphs.off_with_all_to_all)
            or (arch.draft_tokens and graphs.off_with_speculative)
            or (_serves_multimodal(model, profile) and graphs.multimodal_on_for is not None
                and arch.model_type not in graphs.multimodal_on_for)):
        return 0
    return graphs.reserved_mib(settings.max_num_batched_tokens, mla)


def default_fraction(settings: EngineSettings, gpu_mib: int, model: ServedModel, profile: SglangProfile,
                     cuda: bool) -> float:
    """mem_fraction_static as _handle_gpu_memory_settings derives it."""
    graph_batch = 0 if settings.enforce_eager else settings.max_num_seqs
    prefill_graphs = prefill_graph_mib(settings, model, profile, cuda)
    reserved = _reserved_mib(settings.max_num_batched_tokens, graph_batch, model.gpus, profile) + prefill_graphs
    dp_reserve = profile.dp_attention_reserve.value if profile.dp_attention_reserve is not None else None
    deepep = model.request.all_to_all == "deepep"
    if dp_reserve is not None:
        reserved += Fraction(str(dp_reserve.graph_mib(graph_batch, model.request.dp, deepep, bool(prefill_graphs))))
    if gpu_mib > profile.large_gpu_min_mib.value:
        reserved = max(reserved, Fraction(profile.reserved_floor_large_gpu_mib.value))
    if model.arch.draft_tokens:
        reserved += profile.speculative_reserve_mib.value
    if dp_reserve is not None:
        reserved += dp_reserve.all_to_all_mib(graph_batch, deepep)
    if gpu_mib <= reserved:  # the reservations alone fill the card: SGLang keeps nothing for weights or KV
        return 0.0
    fraction = round(float((gpu_mib - reserved) / gpu_mib), 3)
    vlm = _multimodal(model, profile)
    if vlm is not None:  # adjust_mem_fraction_for_vlm (arg_groups/memory_hook.py:417 @ v0.5.23), not rounded again
        fraction *= vlm.fraction_factor(*(model.arch.vision_layers_hidden or (None, None)))
    return fraction


def _reserved_mib(prefill: int, graph_batch: int, gpus: int, profile: SglangProfile) -> Fraction:
    return (profile.reserved_base_mib.value
            + Fraction(str(profile.reserved_per_prefill_token_mib.value)) * max(prefill, 2048)
            + profile.reserved_per_graph_batch_mib.value * graph_batch
            + profile.reserved_per_gpu_mib.value * gpus)


def _cell(model: ServedModel, stage: Stage, profile: SglangProfile) -> Fraction:
    """Bytes one token slot costs across the rank's layers; sliding layers weighted by their pool's share.

    A model SGLang does not pool as hybrid SWA (is_hybrid_swa_model, configs/model_config.py:2651 @ v0.5.23: Gemma 2
    and 3, for one) keeps its sliding layers in the one pool, a slot per token as the full layers. The hybrid SWA cell
    is not rounded: HybridSWAPoolConfigurator._recompute_cell_size (model_executor/pool_configurator.py:786 @ v0.5.23)
    keeps full + swa_full_tokens_ratio x swa as a float, and calculate_pool_sizes takes available // cell."""
    full = sum(model.layer_bytes_per_token(layer) for layer in stage.layers if layer.attention.kind != "sliding")
    sliding = sum(model.layer_bytes_per_token(layer) for layer in stage.layers if layer.attention.kind == "sliding")
    types = profile.hybrid_swa_model_types
    if not full or (types is not None and model.arch.model_type not in types.value):  # one pool
        return Fraction(full + sliding)
    return full + sliding * Fraction(str(profile.swa_full_tokens_ratio.value))


def _cell_bytes(model: ServedModel, stage: Stage, profile: SglangProfile) -> int:
    return floor(_cell(model, stage, profile))


def _page_size(model: ServedModel, profile: SglangProfile) -> int:
    """Tokens per page: 1, or the page DeepSeek Sparse Attention forces (model_overrides/deepseek_v2.py:171)."""
    dsa = any(layer.attention.indexer_head_dim for layer in model.arch.layers)
    return profile.dsa_page_size.value if dsa and profile.dsa_page_size is not None else 1


def sglang_budget(arch: Architecture, request: Request, settings: EngineSettings, gpu: GpuTarget,
                  catalog: Catalog) -> EngineBudget:
    profiles = load_profiles()
    profile, cuda = profiles.sglang.get(settings.version, "sglang"), profiles.cuda
    if (request.dp, request.all_to_all) != (1, None) and profile.dp_attention_reserve is None:
        raise PlannerInputError(f"--engine-version {profile.release}: planner models SGLang's reserves for "
                                "data-parallel attention and DeepEP only from v0.5.23; use the default release")
    model = serve(arch, request, catalog, "sglang")
    card = catalog_card(gpu, catalog)
    amd = card is not None and card.vendor == "amd"
    if amd and profile.speculative_state_scratch_amd is not None:
        profile = profile.model_copy(update={"speculative_state_scratch": profile.speculative_state_scratch_amd})
    refused = (arch.draft_tokens and profile.speculative_state_scratch.value == "refused"
               and arch.attention_kinds & set(RECURRENT_KINDS))
    resolved = resolve_settings(settings, gpu, model, profile, not amd)
    fraction = Fraction(str(resolved.mem_fraction_static))
    if amd and aiter_shrinks_fraction(arch, request.tp, request.context, profile, settings.attention_backend):
        fraction *= Fraction(str(profile.aiter_long_context_factor.value))
    visible = cuda.visible_bytes(gpu.memory_bytes)
    total = visible - cuda.startup_bytes(model.gpus, profile.distributed_init_mib)
    static = floor(max(total, 0) * fraction)  # a card smaller than CUDA's own start-up has nothing to give
    graphs = (0 if resolved.enforce_eager else profile.reserved_per_graph_batch_mib.value * resolved.max_num_seqs * MiB
              + prefill_graph_mib(resolved, model, profile, not amd) * MiB)
    activation = floor(Fraction(str(profile.reserved_per_prefill_token_mib.value)) * max(resolved.max_num_batched_tokens, 2048) * MiB)
    non_torch = (profile.reserved_base_mib.value + profile.reserved_per_gpu_mib.value * model.gpus) * MiB

    requested = running_per_worker(settings, request.dp)
    compressed = arch.has_compressed_caches
    v4_running = None
    if compressed:
        v4.check_kv_dtype(model)
        # DeepSeek-V4's default max_running_requests is the server's; each DP worker runs its share (resolve_max_num_reqs,
        # mem_cache/kv_cache_configurator.py:3128 @ v0.5.23: max(1, max_running_requests // attn_dp_size)), and its
        # c128 compressor states are sized for that share
        v4_running = requested if requested is not None else \
            max(1, profile.deepseek_v4_max_running_requests.value // request.dp)
    ranks = []
    pools: dict[int, StatePool] = {}
    for stage in model.stages:
        available = static - stage.weights_bytes - multimodal_reserve(model, profile)
        pool = pools[stage.index] = state_pool(model, stage, available, profile, requested)
        rest = available - pool.pool_bytes - pool.scratch_bytes
        tokens = _stage_tokens(model, stage, rest, profile, v4_running)
        for tp_rank in range(request.tp):
            ranks.append(RankBudget(rank=stage.index * request.tp + tp_rank, pp_stage=stage.index, layers=len(stage.layers),
                                    memory_bytes=visible, budget_bytes=static, weights_bytes=stage.weights_bytes,
                                    activation_bytes=activation, non_torch_bytes=non_torch, cuda_graph_bytes=graphs,
                                    kv_pool_bytes=max(rest, 0), kv_capacity_tokens=tokens))
    # a stage without attention layers has no token pool: the others set the capacity
    limit = limiting_rank(tuple(r for r in ranks if _cell_bytes(model, model.stages[r.pp_stage], profile)) or ranks)
    slots = min((pool.slots for pool in pools.values() if pool.per_request_bytes), default=None)
    tokens, context = limit.kv_capacity_tokens, request.context
    # the requests one DP worker runs at once, and what sets it: the server's --max-running-requests share or SGLang's
    # default limit, the state slots' cap below it
    running = default_running_requests(tokens, context) if requested is None else requested
    running_limit = "max_running_requests"
    state_cap = None if slots is None else slots // slots_per_running_request(model, profile)
    if state_cap is not None and state_cap <= running:
        running, running_limit = state_cap, "state slots"
    if v4_running is not None:
        running, running_limit = v4_running, "max_running_requests"
    # with data-parallel attention each of the dp groups runs its own scheduler over its own pool of `tokens`
    # (every rank's pool is sized alike), the requests dealt over the groups
    concurrency = request.dp * min(tokens / context, running)
    message, longest = None, None
    if refused:
        message = (f"SGLang {profile.release} refuses speculative decoding for {arch.name}'s recurrent layers with its "
                   "default radix cache (a ValueError at start-up asking for the extra_buffer strategy or "
                   "--disable-radix-cache, which planner does not model); use another release or no MTP draft")
    elif state_cap is not None and state_cap <= 0:
        message = (f"Hybrid (mamba/linear-attention) state cache is too small to serve any requests: "
                   f"max_mamba_cache_size={slots}; increase --mem-fraction-static or use GPUs with more memory.")
    elif limit.kv_pool_bytes <= 0 or tokens <= 0:
        message = "Not enough memory. Please try to increase --mem-fraction-static."
    elif tokens < context:
        longest = tokens
        message = (f"max_total_num_tokens={tokens} is below the context length {context}: SGLang's pool cannot hold one "
                   "request that long; raise --mem-fraction-static or lower --context-length")
    elif concurrency < request.batch and running < tokens / context:
        message = (f"SGLang starts, but runs at most {request.dp * running:,} requests at once ({running_limit} "
                   f"{running:,}{' a DP worker' if request.dp > 1 else ''}), fewer than --batch {request.batch}; the "
                   "others wait in the queue")
    elif concurrency < request.batch:
        message = (f"SGLang starts, but max_total_num_tokens={tokens} holds {concurrency:.2f} requests of {context:,} "
                   f"tokens at once, fewer than --batch {request.batch}; the others wait in the queue")
    warnings = []
    default = default_fraction(resolved, gpu.memory_bytes // MiB, model, profile, not amd)
    if resolved.mem_fraction_static > default:
        warnings.append(f"mem_fraction_static {resolved.mem_fraction_static} is above SGLang's own default {default} for "
                        f"this GPU: it leaves {gib(total - static):.2f} GiB for activations, CUDA graphs and metadata, "
                        f"where SGLang reserves {gib(floor(total * (1 - Fraction(str(default))))):.2f} GiB; prefill or graph "
                        "capture may run out of memory")
    stage = model.stages[limit.pp_stage]
    return EngineBudget(
        name="sglang", release=(f"{profile.release}; DeepSeek-V4 pools as {profile.deepseek_v4_release.value}"
                                if compressed else profile.release), gpu_memory_utilization=None, budget_bytes=static,
        weights_bytes=limit.weights_bytes, activation_bytes=activation, non_torch_bytes=non_torch, cuda_graph_bytes=graphs,
        kv_pool_bytes=limit.kv_pool_bytes, kv_cache_capacity_tokens=tokens, max_concurrency=concurrency,
        fits=message is None, max_context_that_fits=longest, message=message, context=context, batch=request.batch,
        settings=resolved, per_rank=tuple(ranks), warnings=tuple(warnings),
        layout=(v4.pool_layout(model, stage, v4.pools(stage, tokens, profile, running), profile, running) if compressed
                else _pool_layout(model, stage, pools[limit.pp_stage], running, running_limit, profile)),
    )


def rocm_attention_backend(arch: Architecture, tp: int, profile: SglangProfile, stated: str | None = None) -> str:
    """The attention backend SGLang runs on ROCm: `stated`, the one the server is told (--attention-backend), unless
    the model's adjustment forces its own; else the one it resolves (profile `rocm_attention`). An MLA model's head
    count is its num_attention_heads: SGLang reads num_key_value_heads, which every MLA config planner reads sets
    equal to it (DeepSeek-V2 / V3 / V3.2, Kimi-K2 / K2.5 / Linear, GLM-4.7-Flash, GLM-5)."""
    rule = profile.rocm_attention.value
    if stated is not None and arch.model_type not in rule.forced_model_types:
        return stated
    if arch.model_type in rule.model_type_backends:
        return rule.model_type_backends[arch.model_type]
    if "mla" in arch.attention_kinds:
        return "aiter" if max(1, arch.num_attention_heads // tp) in rule.mla_aiter_heads_per_rank else "triton"
    return "aiter"


def aiter_shrinks_fraction(arch: Architecture, tp: int, context: int, profile: SglangProfile,
                           stated: str | None = None) -> bool:
    """On ROCm: whether SGLang multiplies mem_fraction_static by aiter_long_context_factor, which it does when the
    backend it runs is aiter (its decode workspace grows with the context) and --context-length is above 8K."""
    return (rocm_attention_backend(arch, tp, profile, stated) == "aiter"
            and context > profile.aiter_min_context_exclusive.value)


def multimodal_reserve(model: ServedModel, profile: SglangProfile) -> int:
    """What SGLang keeps off the KV budget for a model it serves with its vision tower: mm_runtime_reservation_gb
    (mem_cache/kv_cache_configurator.py:202 @ v0.5.23), SGLANG_VLM_CACHE_SIZE_MB of embedding cache; ModelConfig turns
    multimodal off by default for the model types the profile names (configs/model_config.py:692 mm_disabled_models)."""
    vlm = _multimodal(model, profile)
    return vlm.cache_mib * MiB if vlm is not None else 0


def _serves_multimodal(model: ServedModel, profile: SglangProfile) -> bool:
    """ModelConfig.is_multimodal: a model with a vision tower, unless SGLang serves its architecture text-only by
    default (mm_disabled_models)."""
    vlm = profile.multimodal
    return bool(model.arch.multimodal) and (vlm is None or model.arch.model_type not in vlm.value.disabled_model_types)


def _multimodal(model: ServedModel, profile: SglangProfile) -> SglangMultimodal | None:
    """The profile's multimodal defaults, for a model SGLang serves with its vision tower (else None)."""
    vlm = profile.multimodal
    return vlm.value if vlm is not None and _serves_multimodal(model, profile) else None


def _stage_tokens(model: ServedModel, stage: Stage, rest: int, profile: SglangProfile, v4_running: int | None) -> int:
    """The token slots `rest` bytes buy on a rank of `stage` (DeepSeek-V4: DSV4PoolConfigurator's full tokens, with the
    c128 states of `v4_running` requests a DP worker)."""
    if v4_running is not None:
        return v4.full_tokens(stage, rest, profile, v4_running)
    cell, page = _cell(model, stage, profile), _page_size(model, profile)
    # DefaultPoolConfigurator.calculate_pool_sizes (pool_configurator.py:646 @ v0.5.23): whole pages
    return floor(max(rest, 0) / cell) // page * page if cell else 0


@dataclass(frozen=True)
class StatePool:
    """SGLang's recurrent-state pool on one rank."""

    per_request_bytes: int  # one sequence's states in every recurrent layer of the rank (mamba_cache_per_req)
    slots: int  # max_mamba_cache_size
    padding_slots: int = 0  # allocated beside them (v0.5.23: the pool's padding slot)
    # with speculative decoding: the intermediate states a verify step writes for each draft token of each running
    # request (MambaPool's intermediate_ssm and intermediate_conv_window), taken off the rest beside the slots
    scratch_bytes: int = 0

    @property
    def pool_bytes(self) -> int:
        return (self.slots + self.padding_slots) * self.per_request_bytes


def state_pool(model: ServedModel, stage: Stage, rest: int, profile: SglangProfile, requested: int | None) -> StatePool:
    """_handle_max_mamba_cache without --max-mamba-cache-size: the ratio split of `rest`; with speculative decoding, the
    intermediate states of the tokens a verify step checks, for each request it may run (`requested` a DP worker, as
    the server is told, else SGLang's default under speculative decoding), made room for as the release does (profile
    `speculative_state_scratch`)."""
    per_request = sum(model.layer_state_bytes(layer, *model.state_bits(layer, profile.state_dtypes.value))
                      for layer in stage.layers
                      if layer.attention.kind in RECURRENT_KINDS)
    if not per_request:
        return StatePool(0, 0)
    ratio = Fraction(str(profile.mamba_full_memory_ratio.value))
    padding = profile.state_pool_padding_slots.value if profile.state_pool_padding_slots is not None else 0
    rest = max(rest, 0)
    if not model.arch.draft_tokens:
        # kv_cache_configurator.py @ v0.5.23: max_mamba_cache_size = (mamba_budget_bytes - per_slot) // per_slot (line
        # 3383), the pool (max_mamba_cache_size + 1) slots ("+1 accounts for each pool's padding slot", line 3404)
        budget = floor(rest * ratio / (1 + ratio))
        return StatePool(per_request, max(budget - padding * per_request, 0) // per_request, padding)
    # speculative_num_draft_tokens: the draft's tokens and the one the target decodes (a chain draft, topk 1); the
    # running requests the scratch is sized for: SGLang's default under speculative decoding, per DP worker
    verified = model.arch.draft_tokens + 1
    running = requested if requested is not None else max(1, SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS // model.request.dp)
    if profile.speculative_state_scratch.value == "radix_off":  # a slot for each request it runs, no ratio split
        return StatePool(per_request, running, padding, per_request * running * verified)
    # "joint": the slots K and the scratch for min(running, K // slots a request) requests (each with its padding
    # slot) share the ratio's budget: K = (budget - S (1 + D)) // (S (1 + D / ratio)) with one padding slot
    ratio_slots = slots_per_running_request(model, profile)
    budget = rest * ratio / (1 + ratio)
    slots = max(floor((budget - per_request * padding * (1 + verified))
                      / (per_request * (1 + Fraction(verified, ratio_slots)))), 0)
    return StatePool(per_request, slots, padding, per_request * (min(running, slots // ratio_slots) + padding) * verified)


def slots_per_running_request(model: ServedModel, profile: SglangProfile) -> int:
    """The state slots the radix cache keeps per running request (_calculate_mamba_ratio): the no_buffer strategy's, and
    the extra buffer's tracking slots for the architectures `auto` gives it."""
    if model.arch.draft_tokens and profile.speculative_state_scratch.value == "radix_off":
        return 1  # no cached prefixes to keep states for
    extra = profile.mamba_extra_buffer
    tracking = extra.value.tracking_slots if extra is not None and model.arch.model_type in extra.value.model_types else 0
    return profile.mamba_slots_per_running_request.value + tracking


def running_per_worker(settings: EngineSettings, dp: int) -> int | None:
    """The requests one data-parallel attention worker runs when the server is told --max-running-requests N: N //
    attn_dp_size (managers/tp_worker.py @ v0.5.6; resolve_max_num_reqs, mem_cache/kv_cache_configurator.py:3126-3129 @
    v0.5.23, whose further `token_capacity // 2` never binds below the pool's own limit); None when it is not told."""
    told = settings.max_running_requests
    if told is None:
        return None
    if told < dp:  # v0.5.6 asserts "max_running_request is zero"; v0.5.23 would run one
        raise PlannerInputError(f"--max-running-requests: {told} is fewer than the {dp} data-parallel attention groups, "
                                f"each of which runs max_running_requests // {dp}; set at least {dp}")
    return told // dp


def default_running_requests(tokens: int, context: int) -> int:
    """The requests one DP worker runs at once without --max-running-requests: clamp(int(tokens / context x 512),
    2048, 4096) (model_runner_kv_cache_mixin.py:344-353 @ v0.5.9; resolve_max_num_reqs,
    mem_cache/kv_cache_configurator.py:3123-3132 @ v0.5.23, whose further `tokens // 2` never binds below the pool's
    own limit: every request holds at least two tokens)."""
    return min(max(int(tokens / context * 512), 2048), 4096)


def _pool_layout(model: ServedModel, stage: Stage, pool: StatePool, running: int, running_limit: str,
                 profile: SglangProfile) -> PoolLayout:
    """The limiting rank's token pool (page size 1) and state pool, for the table."""
    layers = model.cache_layers(stage)
    kinds = Counter("state" if layer.attention.kind in RECURRENT_KINDS else layer.attention.kind for layer in layers)
    state_layers = kinds.get("state", 0)
    return PoolLayout(block_size=_page_size(model, profile), page_bytes=_cell_bytes(model, stage, profile),
                      layers_per_group=len(layers),
                      groups=tuple(CacheGroup(kind, count, 1, 1) for kind, count in kinds.items()),
                      state_bytes=pool.per_request_bytes // state_layers if state_layers else 0,
                      state_slots=pool.slots, state_pool_bytes=pool.pool_bytes, state_scratch_bytes=pool.scratch_bytes,
                      running_requests=running,
                      running_limit=running_limit)


def refusal(arch: Architecture) -> str | None:
    """SGLang's token pool is sized per attention-layer token: nothing for an attention-free model."""
    kinds = arch.attention_kinds
    if kinds & set(RECURRENT_KINDS) and not kinds - set(RECURRENT_KINDS):
        return (f"--engine sglang: {arch.name} has no attention layers; SGLang's token pool (sized per attention-layer "
                "token) does not apply to an attention-free model; use --engine vllm")
    return None


def admission(settings: EngineSettings, page_tokens: int) -> OutputReservation:
    """The release's admission by reserved output and its retraction (SglangAdmission), at its page size."""
    rule = load_profiles().sglang.get(settings.version, "sglang").admission.value
    least = rule.init_new_token_ratio * rule.min_new_token_ratio_factor
    return OutputReservation(init_ratio=rule.init_new_token_ratio, min_ratio=least,
                             decay=(rule.init_new_token_ratio - least) / rule.new_token_ratio_decay_steps,
                             retract_steps=rule.retract_decode_steps, clip_tokens=rule.clip_max_new_tokens,
                             page_tokens=page_tokens if rule.page_reserve else 0,
                             fixed_length_whole=rule.fixed_length_counts_whole)


# --prefill-delayer-max-delay-passes' default (server_args.py prefill_delayer_max_delay_passes = 30 @ v0.5.10 and
# v0.5.12; arg_groups/fields/schedule.py:235 @ v0.5.23)
PREFILL_DELAYER_PASSES = 30
# managers/prefill_delayer.py: with every DP group holding a prompt the prefill runs at once @ v0.5.9; from v0.5.10 it
# waits while the fullest group has fewer free slots than the largest prefill batch run ("max_decode_bs - running_bs <
# max_prefill_bs"), without a bound @ v0.5.10-v0.5.16 and at most max_delay_passes from v0.5.19 ("Bound the wait like
# the mixed branch")
PREFILL_DELAYER_ROOM_SINCE = "0.5.10"
PREFILL_DELAYER_BOUNDED_SINCE = "0.5.19"


def prefill_delayer(version: str | None, max_passes: int = PREFILL_DELAYER_PASSES) -> PrefillDelayer:
    """The prefill delayer of the release planner models for `version` (None: the default)."""
    if max_passes < 1:
        raise PlannerInputError(f"--prefill-delayer-max-delay-passes: {max_passes} must be at least 1 pass")
    release = release_key(load_profiles().sglang.resolve(version, "sglang"))
    return PrefillDelayer(max_passes, waits_for_room=release >= release_key(PREFILL_DELAYER_ROOM_SINCE),
                          bounds_room_wait=release >= release_key(PREFILL_DELAYER_BOUNDED_SINCE))


# SGLang's mem_fraction_static holds the weights and the KV pool only: activations, CUDA graphs and non-torch memory
# live in the rest of the card; its max_num_seqs is its CUDA-graph batch, not a cap on the running requests; it runs a
# prefill batch before any decode and alone (enable_mixed_chunk False: 0.5.8 server_args.py:572, 0.5.23
# arg_groups/fields/schedule.py:208; scheduler.py get_next_batch_to_run, "Run prefill first if possible")
ENGINE = Engine("sglang", sglang_budget, SglangProfile, refusal=refusal, workspace="outside", mixes_prefill=False,
                admission=admission,
                fraction_field="mem_fraction_static", kv_cache_dtypes=SGLANG_KV_CACHE_DTYPES,
                command="planner.render.export:sglang_command", expert_parallel="any", sizes_expert_parallel=True,
                all_to_all_backends=("deepep",), auto_kv_dtype=sglang_auto_kv_dtype)


def sglang_kv_cache_flag(arch: Architecture, kv_dtype: str) -> str:
    """SGLang's --kv-cache-dtype for the KV dtype a plan was sized and timed with. Its `auto` is the model's dtype
    except for DeepSeek Sparse Attention models, which it stores as fp8_e4m3 on compute capability 10 and above
    (server_args.py:979-983 @ v0.5.6, :1741-1747 @ v0.5.13; arg_groups/overrides.py:537 @ v0.5.23): a DSA plan with
    bf16 KV is stated as bfloat16, which every release's flag takes."""
    flag = SGLANG_KV_CACHE_DTYPES.get(kv_dtype, "auto")
    sparse = any(layer.attention.kind == "mla" and layer.attention.index_topk for layer in arch.layers)
    return "bfloat16" if flag == "auto" and kv_dtype == "bf16" and sparse else flag
