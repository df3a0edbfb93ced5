"""SGLang's pools for DeepSeek-V4 (DeepSeekV4TokenToKVPool): window, c4, c128 and compressor-state pools.

As SGLang sizes them (profile sglang.deepseek_v4_release names the code; the files are at the commits it gives):
  1. Defaults (arg_groups/overrides.py _deepseek_v4_overrides, deepseek_v4_hook.py apply_deepseek_v4_defaults):
     page_size 256, swa_full_tokens_ratio 0.1, max_running_requests 256, kv_cache_dtype fp8_e4m3.
  2. DSV4PoolConfigurator (model_executor/pool_configurator.py), over the compress ratios of the rank's layers:
     bytes_per_full_token = ratio x 584 x layers                  (the window pool, every layer)
                          + 584 / 4 x c4 layers + 584 / 128 x c128 layers   (compressed entries)
                          + 132 / 4 x c4 layers                   (the Lightning Indexer's fp8 key + fp32 scale)
                          + ratio x ring4 / window x (c4 state + c4 indexer state) x c4 layers,
     the states being fp32 (kv, score) pairs of 2 series (c4) or 1 (c128); the c128 states are request-scoped: a fixed
     ceil128((running + 1) x ring128 + ring128 + 1) rows of 2 x head_dim fp32 per c128 layer come off the budget first,
     running = max_running_requests // attn_dp_size, the requests one DP worker runs
     (requested_max_running_requests_per_worker). full = int((available - c128 fixed) / bytes_per_full_token), to
     whole pages; the window pool gets int(full x ratio) (whole pages), c4 full // 4 entries, c128 full // 128, the c4
     states swa // window x ring4.
  3. kv_cache_configurator.py: available = the static budget less the weights (as for every model); max_total_num_tokens
     = full (the smallest over pipeline stages); resolve_max_num_reqs keeps max_running_requests // attn_dp_size.
The caches are whole on every TP rank (one latent head). The float arithmetic follows SGLang's own order.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from planner.errors import PlannerInputError
from planner.estimator.engines.base import CacheGroup, PoolLayout, ServedModel, Stage
from planner.estimator.engines.profiles import SglangProfile
from planner.model.families.core import INDEXER_QUANT_BLOCK, INDEXER_SCALE_BYTES


@dataclass(frozen=True)
class V4Pools:
    """DSV4PoolConfigurator's sizes on one rank (tokens and entries), with the per-token coefficient behind them."""

    bytes_per_full_token: float
    c128_state_bytes: int  # the request-scoped c128 states, taken off the budget first
    full_tokens: int  # max_total_num_tokens
    swa_tokens: int
    c4_entries: int
    c128_entries: int
    c4_state_rows: int
    c128_state_rows: int
    layers: tuple[int, int, int]  # (all, c4, c128) layers on the rank


def check_kv_dtype(model: ServedModel) -> None:
    """_deepseek_v4_kv_cache_dtype: auto becomes fp8_e4m3; CUDA's pool stores 584 B entries whatever else is asked."""
    requested = (model.request.kv_dtype or "auto").lower()
    if requested != "auto" and not model.kv_dtype.startswith("fp8"):
        raise PlannerInputError(f"--kv-dtype: SGLang stores DeepSeek-V4's caches as fp8_e4m3 (584 B entries) on CUDA, "
                                f"not {model.kv_dtype}; use --kv-dtype fp8 or leave it to the engine")


def _ratios(stage: Stage, profile: SglangProfile) -> tuple[int, ...]:
    ratios = tuple(layer.attention.compress_ratio for layer in stage.layers)
    known = profile.deepseek_v4_state_ring_tokens.value
    if any(r and r not in known for r in ratios):
        raise PlannerInputError(f"compress_ratios: SGLang's DeepSeek-V4 pools take ratios {sorted(known)} (and 0)")
    return ratios


def bytes_per_full_token(stage: Stage, profile: SglangProfile) -> float:
    """DSV4PoolConfigurator._get_bytes_per_full_token, term by term in SGLang's order (floats, as it computes)."""
    ratios = _ratios(stage, profile)
    head = next(layer.attention.k_head_dim for layer in stage.layers)
    window = next(layer.attention.window for layer in stage.layers)
    # the Lightning Indexer's pooled key: the c4 layers' compressed entry beyond the head (SGLang's c4 = ratio 4)
    index = next((layer.attention.compressed_index_dim for layer in stage.layers
                  if layer.attention.compress_ratio == 4), 0)
    total, c4, c128 = len(ratios), ratios.count(4), ratios.count(128)
    kv = profile.deepseek_v4_entry_bytes.value
    indexer = index + index // INDEXER_QUANT_BLOCK * INDEXER_SCALE_BYTES  # SGLang's own floor
    value = profile.deepseek_v4_state_value_bytes.value
    c4_state, c4_indexer_state = 2 * 2 * head * value, 2 * 2 * index * value
    swa = profile.deepseek_v4_swa_full_tokens_ratio.value
    c4_state_ratio = profile.deepseek_v4_state_ring_tokens.value[4] / window
    return (swa * kv * total + 1 / 4 * kv * c4 + 1 / 128 * kv * c128 + 1 / 4 * indexer * c4
            + swa * c4_state_ratio * c4_state * c4 + swa * c4_state_ratio * c4_indexer_state * c4)


def c128_state_bytes(stage: Stage, profile: SglangProfile, running: int) -> int:
    """_get_c128_state_fixed_bytes for `running` requests a DP worker: rows of (kv, score) fp32 per c128 layer."""
    c128 = _ratios(stage, profile).count(128)
    if not c128:
        return 0
    return _c128_state_rows(profile, running) * 2 * stage.layers[0].attention.k_head_dim \
        * profile.deepseek_v4_state_value_bytes.value * c128


def _req_slots(running: int) -> int:
    return running + 1  # _get_num_req_slots: max_running_requests (a worker's) + 1


def _c128_state_rows(profile: SglangProfile, running: int) -> int:
    ring = profile.deepseek_v4_state_ring_tokens.value[128]
    align = profile.deepseek_v4_state_row_alignment.value
    return ceil((_req_slots(running) * ring + ring + 1) / align) * align


def full_tokens(stage: Stage, available: int, profile: SglangProfile, running: int) -> int:
    """calculate_pool_sizes: the full tokens the rank's budget buys, in whole pages (_compute_dsv4_sizes), with the c128
    states of `running` requests a DP worker off it first."""
    page = profile.deepseek_v4_page_size.value
    return int(max(available - c128_state_bytes(stage, profile, running), 0)
               / bytes_per_full_token(stage, profile)) // page * page


def pools(stage: Stage, full: int, profile: SglangProfile, running: int) -> V4Pools:
    """_compute_dsv4_sizes and finalize_with_max_running_requests for `full` tokens and `running` requests a DP
    worker."""
    page = profile.deepseek_v4_page_size.value
    ratios = _ratios(stage, profile)
    full = full // page * page
    swa = int(full * profile.deepseek_v4_swa_full_tokens_ratio.value) // page * page
    window = stage.layers[0].attention.window
    rings = profile.deepseek_v4_state_ring_tokens.value
    return V4Pools(bytes_per_full_token(stage, profile), c128_state_bytes(stage, profile, running), full, swa, full // 4,
                   full // 128, swa // window * rings[4], _req_slots(running) * rings[128],
                   (len(ratios), ratios.count(4), ratios.count(128)))


def pool_layout(model: ServedModel, stage: Stage, sized: V4Pools, profile: SglangProfile,
                running: int) -> PoolLayout:
    """The table's account of the rank's pools, in DSV4PoolConfigurator's terms; `running`: the requests one
    data-parallel worker admits."""
    total, c4, c128 = sized.layers
    entry = profile.deepseek_v4_entry_bytes.value
    groups = tuple(CacheGroup(kind, layers, 1, 1) for kind, layers in
                   (("window", total), ("c4 compressed + indexer", c4), ("c128 compressed", c128)) if layers)
    notes = (f"SGLang's DeepSeek-V4 pools (page {profile.deepseek_v4_page_size.value} tokens): max_total_num_tokens "
             f"{sized.full_tokens:,} at {sized.bytes_per_full_token:,.2f} B per full token; window pool "
             f"{sized.swa_tokens:,} tokens (swa_full_tokens_ratio {profile.deepseek_v4_swa_full_tokens_ratio.value}) "
             f"x {total} layers x {entry} B; c4 {sized.c4_entries:,} entries x {c4} layers; c128 "
             f"{sized.c128_entries:,} entries x {c128} layers",
             f"compressor states: c4 {sized.c4_state_rows:,} rows x {c4} layers; c128 {sized.c128_state_rows:,} rows "
             f"({running} running requests + 1) x {c128} layers, "
             f"{sized.c128_state_bytes:,} B set aside before the tokens")
    # no one page size: the notes carry SGLang's own (fractional) bytes per full token
    return PoolLayout(block_size=profile.deepseek_v4_page_size.value, page_bytes=0,
                      layers_per_group=len(model.cache_layers(stage)), groups=groups,
                      running_requests=running, running_limit="max_running_requests", notes=notes)
