"""vLLM's KV cache for DeepSeek-V4 (deepseek_v4): the caches every layer registers, their groups and the packed pool.

As vLLM lays it out (profile vllm.deepseek_v4_release names the release; files below are at that release):
  1. Specs (vllm/models/deepseek_v4/attention.py, compressor.py; vllm/v1/attention/backends/mla/sparse_swa.py). Every
     layer keeps its sliding window in a DeepseekV4SWACache (SlidingWindowMLASpec, 64-token blocks). A layer with a
     compress ratio r > 1 adds its compressed cache (MLAAttentionSpec, block_size tokens stored as block_size / r
     entries) and a CompressorStateCache (SlidingWindowMLASpec over coff x r tokens, fp32, 4- or 8-token blocks);
     a layer with a Lightning Indexer adds the indexer's key cache (MLAAttentionSpec, fp8 key + fp32 scale per 128
     values) and the indexer compressor's state. Under fp8_ds_mla an entry of the window or compressed cache is 584
     B, and every page is padded to a multiple of 576 B (kv_cache_interface.py _apply_alignment_padding).
  2. Groups (vllm/v1/core/kv_cache_utils.py group_and_unify_kv_cache_specs, _get_kv_cache_groups_uniform_groups):
     the compressed and indexer caches form one group; the SlidingWindowMLASpec caches are bucketed by (block size,
     window). A bucket's "layer tuples" count its most common page size; _approximate_gcd picks the tuple count d
     (at least the compressed group's) that pads the buckets least, and a bucket of n tuples splits into cdiv(n, d)
     groups, taking tuples i::k.
  3. Pool (_get_kv_cache_config_packed): a block id is owned by one group at a time, so every group lays its pages
     side by side in one slab whose stride is the widest group's page sum; num_blocks = memory // stride, the
     minimum over workers. A request of max_model_len takes, in each group, the blocks of its largest need (the
     window and states: cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1), and
     get_max_concurrency_for_kv_cache_config = num_blocks / their sum; "GPU KV cache size" = int(concurrency x
     max_model_len) (get_kv_cache_capacity).
  4. Start-up check (_max_memory_usage_bytes_from_groups): one request needs, per group, its blocks x the largest
     tuple count x the compressed group's distinct page sizes summed, which _check_enough_kv_cache_memory compares
     with the worker's memory.
The caches are whole on every TP rank (one key=value head); pipeline stages hold their own layers' caches.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import ceil

from planner.errors import PlannerInputError
from planner.estimator.engines.base import CacheGroup, Memo, PoolLayout, ServedModel, Stage
from planner.estimator.engines.profiles import VllmProfile
from planner.model.architecture import Architecture, Layer
from planner.model.families.core import indexer_key_bytes

# the kind of each group, as the pool table names it
COMPRESSED, WINDOW, STATE = "compressed", "window", "compressor state"


@dataclass(frozen=True)
class CacheSpec:
    """One cache a layer registers (vLLM's KVCacheSpec): its page and how many tokens a block covers."""

    kind: str  # compressed (a compressed or indexer cache) | window | compressor state
    layer: int  # the decoder layer, counted over the whole model
    block_tokens: int
    window: int | None  # SlidingWindowMLASpec's window; None: MLAAttentionSpec, the whole context
    page_bytes: int

    def blocks(self, max_model_len: int, batched_tokens: int) -> int:
        """max_memory_usage_bytes / page_size_bytes (kv_cache_interface.py FullAttentionSpec, SlidingWindowSpec)."""
        if self.window is None:
            return ceil(max_model_len / self.block_tokens)
        tokens = min(self.window - 1 + batched_tokens, max_model_len)
        return ceil(tokens / self.block_tokens) + 1  # the window need not start at a block boundary


@dataclass(frozen=True)
class SpecGroup:
    """A KV cache group: its caches share one block table (UniformTypeKVCacheSpecs)."""

    kind: str
    specs: tuple[CacheSpec, ...]

    def blocks(self, max_model_len: int, batched_tokens: int) -> int:
        return max(spec.blocks(max_model_len, batched_tokens) for spec in self.specs)

    def layer_tuples(self) -> int:
        """get_num_layer_tuples: how many caches share the most common page size."""
        return Counter(spec.page_bytes for spec in self.specs).most_common(1)[0][1]


@dataclass(frozen=True)
class PackedLayout:
    """One worker's view of the packed pool: the model's groups and the decoder layers this worker holds."""

    groups: tuple[SpecGroup, ...]
    stage_layers: frozenset[int]
    batched_tokens: int  # max_num_batched_tokens: the window and state caches hold that many new tokens

    def on_stage(self, group: SpecGroup) -> tuple[CacheSpec, ...]:
        return tuple(spec for spec in group.specs if spec.layer in self.stage_layers)

    @property
    def block_stride(self) -> int:
        """_get_packed_kv_cache_layout: the widest group's pages side by side."""
        return max(sum(spec.page_bytes for spec in self.on_stage(group)) for group in self.groups)

    def num_blocks(self, available: int) -> int:
        return max(0, available // self.block_stride)

    def blocks_per_request(self, max_model_len: int, batched_tokens: int, block_size: int) -> int:
        return sum(group.blocks(max_model_len, batched_tokens) for group in self.groups)

    def capacity_tokens(self, num_blocks: int, block_size: int, max_model_len: int) -> int:
        """'GPU KV cache size: N tokens' = int(max concurrency x max_model_len) (get_kv_cache_capacity)."""
        return int(num_blocks / self.blocks_per_request(max_model_len, self.batched_tokens, block_size) * max_model_len)

    def needed_bytes(self, max_model_len: int, batched_tokens: int, block_size: int) -> int:
        """_max_memory_usage_bytes_from_groups on this worker (a group without layers here keeps the model's)."""
        projected = [SpecGroup(g.kind, self.on_stage(g) or g.specs) for g in self.groups]
        tuple_bytes = sum({spec.page_bytes for spec in projected[0].specs})
        tuples = max(group.layer_tuples() for group in projected)
        return sum(tuples * group.blocks(max_model_len, batched_tokens) * tuple_bytes for group in projected)


def _page(entries: int, entry_bytes: int, profile: VllmProfile) -> int:
    alignment = profile.deepseek_v4_page_alignment_bytes.value
    return ceil(entries * entry_bytes / alignment) * alignment


def _state_spec(index: int, ratio: int, width: int, profile: VllmProfile) -> CacheSpec:
    """A CompressorStateCache: coff x width kv values and as many scores per token, in fp32."""
    coff = 2 if ratio == profile.deepseek_v4_overlapping_ratio.value else 1
    tokens = profile.deepseek_v4_state_block_tokens.value.get(ratio)
    if tokens is None:
        raise PlannerInputError(f"compress_ratios: vLLM's DeepSeek-V4 compressor takes ratios "
                                f"{sorted(profile.deepseek_v4_state_block_tokens.value)}, not {ratio}")
    entry = 2 * coff * width * profile.deepseek_v4_state_value_bytes.value
    return CacheSpec(STATE, index, tokens, coff * ratio, _page(tokens, entry, profile))


def layer_specs(index: int, layer: Layer, block_size: int, profile: VllmProfile) -> tuple[CacheSpec, ...]:
    """The caches one decoder layer registers, in vLLM's order (attention, window, compressor, indexer)."""
    a = layer.attention
    entry = profile.deepseek_v4_entry_bytes.value
    window = CacheSpec(WINDOW, index, profile.deepseek_v4_window_block_size.value, a.window,
                       _page(profile.deepseek_v4_window_block_size.value, entry, profile))
    ratio = a.compress_ratio
    if not ratio:
        return (window,)
    if block_size % ratio:
        raise PlannerInputError(f"--block-size: vLLM stores block_size / {ratio} compressed entries per block of a "
                                f"DeepSeek-V4 layer; use a multiple of {ratio} (vLLM's default is {profile.deepseek_v4_block_size.value})")
    stored = block_size // ratio
    specs = [CacheSpec(COMPRESSED, index, block_size, None, _page(stored, entry, profile)), window,
             _state_spec(index, ratio, a.k_head_dim, profile)]
    index_dim = a.compressed_index_dim  # the Lightning Indexer's pooled key (CSA layers only)
    if index_dim:
        # fp8 key + an fp32 scale per 128 values, the DSA layout V3.2's indexer keeps too ("FP8 indexer cache uses
        # the same layout as V3.2: head_dim bytes = 128 fp8 + 4 fp32 scale = 132", attention.py DeepseekV4Indexer)
        key_bytes = indexer_key_bytes(index_dim)
        specs += [CacheSpec(COMPRESSED, index, block_size, None, _page(stored, key_bytes, profile)),
                  _state_spec(index, ratio, index_dim, profile)]
    return tuple(specs)


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """kv_cache_utils._approximate_gcd: the d in [lower_bound, max] padding the values least, ties to the larger."""
    best = lower_bound
    best_pad = None
    for d in range(lower_bound, max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def spec_groups(arch: Architecture, block_size: int, profile: VllmProfile) -> tuple[SpecGroup, ...]:
    """get_kv_cache_groups for DeepSeek-V4: the compressed group, then each (block, window) bucket split by tuples."""
    specs = [spec for i, layer in enumerate(arch.layers) for spec in layer_specs(i, layer, block_size, profile)]
    compressed = SpecGroup(COMPRESSED, tuple(s for s in specs if s.kind == COMPRESSED))
    buckets: dict[tuple[int, int], list[CacheSpec]] = {}
    for spec in specs:
        if spec.kind != COMPRESSED:
            buckets.setdefault((spec.block_tokens, spec.window), []).append(spec)
    tuples = approximate_gcd([compressed.layer_tuples()] + [SpecGroup("", tuple(b)).layer_tuples()
                                                            for b in buckets.values()], compressed.layer_tuples())
    groups = [compressed]
    for bucket in buckets.values():
        by_page: dict[int, list[CacheSpec]] = {}
        for spec in bucket:
            by_page.setdefault(spec.page_bytes, []).append(spec)
        if len({len(same) for same in by_page.values()}) != 1:  # vLLM asserts it
            raise PlannerInputError(f"{arch.name}: vLLM groups DeepSeek-V4 caches in equal numbers per page size; "
                                    "this config's compress_ratios give unequal ones")
        layer_tuples = list(zip(*by_page.values()))
        splits = ceil(len(layer_tuples) / tuples)
        groups += [SpecGroup(bucket[0].kind, tuple(s for t in layer_tuples[i::splits] for s in t)) for i in range(splits)]
    return tuple(groups)


# Memoised: the groups depend on the model and the block size, not on the card or the context
_GROUPS = Memo()


def packed_layout(model: ServedModel, stage: Stage, block_size: int, batched_tokens: int,
                  profile: VllmProfile) -> PackedLayout:
    """One worker's packed pool: the model's groups (vLLM groups the whole model, then projects them on each
    worker) and the decoder layers of `stage`."""
    groups = _GROUPS.get((model.arch, block_size), (profile,), lambda: spec_groups(model.arch, block_size, profile))
    first = sum(len(s.layers) for s in model.stages if s.index < stage.index)
    return PackedLayout(groups, frozenset(range(first, first + len(stage.layers))), batched_tokens)


def check_kv_dtype(model: ServedModel) -> str | None:
    """vLLM's FlashMLA path stores these caches as fp8_ds_mla and asserts an fp8 --kv-cache-dtype
    (attention.py _resolve_dsv4_kv_cache_dtype); a warning when the request left the dtype to the engine."""
    requested = (model.request.kv_dtype or "auto").lower()
    if requested == "auto":
        return ("DeepSeek-V4's caches sized as vLLM's FlashMLA path stores them, fp8_ds_mla (584 B entries): pass "
                "--kv-cache-dtype fp8 as DeepSeek's recipe does (that path asserts an fp8 cache dtype)")
    if not model.kv_dtype.startswith("fp8"):
        raise PlannerInputError(f"--kv-dtype: vLLM stores DeepSeek-V4's caches as fp8_ds_mla and asserts an fp8 "
                                f"--kv-cache-dtype, not {model.kv_dtype}; use --kv-dtype fp8")
    return None


def pool_layout(layout: PackedLayout, block_size: int, context: int, num_blocks: int) -> PoolLayout:
    """The table's account: the groups, their pages and the blocks one request takes in each."""
    batched = layout.batched_tokens
    kinds: dict[str, list[SpecGroup]] = {}
    for group in layout.groups:
        kinds.setdefault(group.kind, []).append(group)
    rows = tuple(CacheGroup(kind, sum(len(layout.on_stage(g)) for g in groups), len(groups),
                            sum(g.blocks(context, batched) for g in groups)) for kind, groups in kinds.items())
    per_group = "; ".join(_describe(g, layout, context) for g in layout.groups)
    notes = (f"one packed pool of {num_blocks:,} block ids x {layout.block_stride:,} B (the widest group's pages "
             f"side by side; a block id serves one group at a time); {len(layout.groups)} groups: {per_group}",
             f"one request of {context:,} tokens takes "
             + ", ".join(f"{r.blocks_per_request:,} {r.kind} block(s)" for r in rows)
             + f" = {layout.blocks_per_request(context, batched, block_size):,} block ids")
    return PoolLayout(block_size=block_size, page_bytes=layout.block_stride,
                      layers_per_group=max(len(layout.on_stage(g)) for g in layout.groups), groups=rows, notes=notes)


def _describe(group: SpecGroup, layout: PackedLayout, context: int) -> str:
    pages = Counter(spec.page_bytes for spec in layout.on_stage(group))
    spec = group.specs[0]
    span = f"{spec.block_tokens}-token blocks" + (f", window {spec.window}" if spec.window else "")
    return (f"{group.kind} ({span}): " + " + ".join(f"{n} x {page:,} B" for page, n in pages.items())
            + f", {group.blocks(context, layout.batched_tokens):,} block(s) a request")
