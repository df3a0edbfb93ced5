"""Hybrid models in the engine profiles: recurrent-state layers (Gated DeltaNet, Mamba-2) beside attention.

vLLM v0.19 keeps states and attention blocks in one pool with one page size; SGLang keeps a separate state pool.
"""

import json
from dataclasses import replace
from fractions import Fraction
from math import ceil, floor

import pytest

from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.engines.base import serve
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.engines.vllm import STATE, StateShape, kv_layout, state_blocks, state_shape
from planner.errors import PlannerInputError
from planner.estimator.memory import GpuTarget, Request
from planner.model.architecture import (Architecture, Attention, Layer, architecture_from_config,
                                         size_only_architecture_from_config)

from conftest import CONFIGS
from engine_fixtures import arch, h100  # noqa: F401  (fixtures)

# Qwen3-Next-80B-A3B (tests/data/configs): 36 Gated DeltaNet layers of 16 key / 32 value heads of 128, kernel 4,
# and 12 attention layers of 2 KV heads of 256
GDN_CONV = (2 * 16 * 128 + 32 * 128) * (4 - 1)  # convolution window, elements
GDN_STATE = GDN_CONV + 32 * 128 * 128  # conv window + recurrent state, elements


@pytest.fixture(scope="module")
def qwen3_next():
    config = json.loads((CONFIGS / "qwen3-next-80b-a3b" / "config.json").read_text())
    return size_only_architecture_from_config(config, "qwen3-next", 80 * 10**9)


def nemotron_h_like(attention_every: int = 8, layers: int = 48) -> Architecture:
    """A Mamba-2 hybrid shaped like Nemotron-H (64 heads of 64, state 128, 8 groups, kernel 4; GQA 2 x 128)."""
    config = {"model_type": "nemotron_h", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2,
              "head_dim": 128, "num_hidden_layers": layers, "vocab_size": 131072, "torch_dtype": "bfloat16",
              "mamba_n_heads": 64, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 8, "mamba_d_conv": 4,
              "layer_types": ["attention" if (i + 1) % attention_every == 0 else "mamba" for i in range(layers)]}
    return size_only_architecture_from_config(config, "nemotron-h-like", 8 * 10**9)


MAMBA2_STATE = (64 * 64 + 2 * 8 * 128) * (4 - 1) + 64 * 64 * 128


def test_recurrent_state_elements_are_the_engines_shapes(qwen3_next):
    states = {layer.attention.state_elements for layer in qwen3_next.layers if layer.attention.kind == "linear"}
    assert states == {GDN_STATE}
    assert {layer.attention.state_elements for layer in nemotron_h_like().layers
            if layer.attention.kind == "mamba"} == {MAMBA2_STATE}


@pytest.mark.parametrize("tp, groups_on_rank", [(1, 8), (2, 4), (8, 1), (16, 1)])
def test_mamba2_state_on_a_rank_replicates_the_groups_tp_does_not_divide(tp, groups_on_rank):
    """vLLM MambaStateShapeCalculator.mamba2_state_shape: heads split over the ranks; the 8 B / C groups split too
    while tp divides them, else they are replicated to tp groups, one per rank (extra_groups_for_head_shards)."""
    mamba = next(layer.attention for layer in nemotron_h_like().layers if layer.attention.kind == "mamba")
    conv = (64 * 64 // tp + 2 * groups_on_rank * 128) * (4 - 1)
    ssm = 64 // tp * 64 * 128
    assert mamba.state_elements_on_rank(tp) == conv + ssm
    from planner.estimator.memory import state_bytes_per_sequence
    assert state_bytes_per_sequence(mamba, tp, 16) == 2 * (conv + ssm)  # the bytes the engines size pages from


def test_vllm_aligns_the_attention_block_to_hold_a_state(qwen3_next, h100, catalog):
    budget = engine_budget(qwen3_next, Request(context=32768, tp=4), EngineSettings(name="vllm", version="0.19.0"), h100, catalog)
    state = GDN_STATE // 4 * 2  # bf16 state, heads split over 4 ranks
    token = 1 * 256 * 2 * 2  # 2 KV heads over 4 ranks: 1 per rank
    block = 16 * ceil(state / (16 * token))
    assert block == 272 and budget.settings.block_size == block
    layout = budget.layout
    assert layout.page_bytes == block * token  # the state page padded up to the attention page
    assert layout.state_bytes == state
    assert layout.layers_per_group == 12
    groups = {g.kind: g for g in layout.groups}
    assert (groups[STATE].layers, groups[STATE].groups, groups[STATE].blocks_per_request) == (36, 3, 1)
    assert (groups["full"].layers, groups["full"].groups, groups["full"].blocks_per_request) == (12, 1, ceil(32768 / block))
    blocks = budget.kv_pool_bytes // (layout.page_bytes * 12)
    assert budget.kv_cache_capacity_tokens == blocks // 4 * block
    assert budget.max_concurrency == blocks / (ceil(32768 / block) + 3)
    assert layout.state_slots == min(blocks // 3, budget.settings.max_num_seqs)
    assert "holds one" in layout.block_size_reason


def test_vllm_keeps_a_larger_block_size_the_user_asked_for(qwen3_next, h100, catalog):
    request = Request(context=8192, tp=4)
    assert engine_budget(qwen3_next, request, EngineSettings(name="vllm", version="0.19.0", block_size=16), h100, catalog).settings.block_size == 272
    larger = engine_budget(qwen3_next, request, EngineSettings(name="vllm", version="0.19.0", block_size=1024), h100, catalog)
    assert larger.settings.block_size == 1024 and larger.layout.page_bytes == 1024 * 1024  # the state padded further
    assert larger.layout.block_size_reason is None  # the user's block size, not vLLM's choice


def test_vllm_replays_the_qwen35_27b_v019_layout(catalog):
    """vllm-project/vllm #40691 (v0.19.0): 48 GDN + 16 attention layers, "GPU KV cache size: 290,864 tokens",
    "Maximum concurrency for 32,768 tokens per request: 33.04x". The state there is 3,207,168 B (48 x 128 x 128
    fp32 SSM + 10,240 x 3 bf16 conv); the layer here carries it in bf16 elements to replay the layout alone."""
    profile = load_profiles().vllm.get("0.19.0", "vllm")
    layers = tuple(Layer(Attention("full", 4, 256, 256)) if (i + 1) % 4 == 0 else
                   Layer(Attention("linear", state_elements=3_207_168 // 2)) for i in range(64))
    qwen35 = Architecture("qwen3.5-27b-layout", "qwen3_5", 5120, 24, 248320, layers, torch_dtype="bfloat16",
                          exact=False, declared_params=27 * 10**9)
    model = serve(qwen35, Request(context=32768), catalog, "vllm")
    shape = state_shape(model, GpuTarget.from_catalog(catalog.gpus.get("h20")), profile)
    assert shape == StateShape(3_207_168, 4096, 16) and shape.block_size() == 784
    layout = kv_layout(model, model.stages[0], 784, 16384, shape, state_blocks(GpuTarget.from_catalog(catalog.gpus.get("h20")),
                                                                              profile), profile)
    assert layout.group_size == 16 and len(layout.groups) == 4
    num_blocks = 1487  # the only count the logged 290,864 tokens and 33.04x allow together
    assert layout.capacity_tokens(num_blocks, 784, 32768) == 290_864
    assert round(num_blocks / layout.blocks_per_request(32768, 16384, 784), 2) == 33.04


def test_vllm_sizes_mamba2_hybrids(h100, catalog):
    model = nemotron_h_like()
    budget = engine_budget(model, Request(context=65536), EngineSettings(name="vllm", version="0.19.0"), h100, catalog)
    state, token = MAMBA2_STATE * 2, 2 * 128 * 2 * 2
    assert budget.settings.block_size == 16 * ceil(state / (16 * token))
    groups = {g.kind: g for g in budget.layout.groups}
    assert (groups[STATE].layers, groups[STATE].groups) == (42, 7)  # groups of the 6 attention layers
    assert budget.kv_cache_capacity_tokens > 0 and budget.max_concurrency > 1


def test_state_pages_do_not_grow_with_the_context(qwen3_next, h100, catalog):
    short, long = (engine_budget(qwen3_next, Request(context=c, tp=4), EngineSettings(name="vllm", version="0.19.0"), h100, catalog)
                   for c in (4096, 131072))
    assert {g.kind: g.blocks_per_request for g in short.layout.groups}[STATE] == 1
    assert {g.kind: g.blocks_per_request for g in long.layout.groups}[STATE] == 1
    assert long.max_concurrency < short.max_concurrency


def test_sglang_splits_a_state_pool_off_by_its_ratio(qwen3_next, h100, catalog):
    budget = engine_budget(qwen3_next, Request(context=32768, tp=4), EngineSettings(name="sglang", version="0.5.9"), h100, catalog)
    rank = budget.per_rank[0]
    rest = rank.budget_bytes - rank.weights_bytes
    # mamba2_state_dtype: bf16 windows, fp32 recurrent state (Qwen3-Next's config names no mamba_ssm_dtype)
    per_request = 36 * (GDN_CONV // 4 * 2 + (GDN_STATE - GDN_CONV) // 4 * 4)
    slots = floor(rest * 0.9 / 1.9) // per_request
    layout = budget.layout
    assert (layout.state_slots, layout.state_pool_bytes) == (slots, slots * per_request)
    assert budget.kv_pool_bytes == rest - slots * per_request
    cell = 12 * 1 * 256 * 2 * 2  # only the attention layers hold tokens
    assert layout.page_bytes == cell
    assert budget.kv_cache_capacity_tokens == budget.kv_pool_bytes // cell
    assert layout.running_requests == slots // 3
    assert budget.max_concurrency == min(budget.kv_cache_capacity_tokens / 32768, slots // 3)


def test_sglang_state_slots_cap_the_concurrency(qwen3_next, h100, catalog):
    budget = engine_budget(qwen3_next, Request(context=256, tp=4), EngineSettings(name="sglang", version="0.5.9"), h100, catalog)
    assert budget.max_concurrency == budget.layout.state_slots // 3 == budget.layout.running_requests


def test_sglang_makes_room_for_the_intermediate_states_of_speculative_decoding(qwen3_next, h100, catalog):
    """With an MTP draft of 3 tokens SGLang verifies D = 4 tokens a step and keeps each running request's intermediate
    states for them. v0.5.23 sizes the slots K and that scratch jointly in the ratio's budget, each with a padding
    slot (kv_cache_configurator.py:3352-3377): K = (B - S (1 + D)) // (S (1 + D / 5)), scratch S (min(48, K // 5) + 1) D;
    v0.5.9 turned the radix cache off (server_args.py:1760-1764), kept a slot and the scratch S x D for each of the 48
    requests it runs (model_runner_kv_cache_mixin.py:155-185) and reserved 2 GiB more."""
    drafted = replace(qwen3_next, draft_tokens=3)
    request = Request(context=32768, tp=4)
    per_request = 36 * (GDN_CONV // 4 * 2 + (GDN_STATE - GDN_CONV) // 4 * 4)
    budget = engine_budget(drafted, request, EngineSettings(name="sglang"), h100, catalog)
    rank = budget.per_rank[0]
    rest = rank.budget_bytes - rank.weights_bytes
    slots = floor((Fraction(rest) * Fraction(9, 19) - per_request * 5) / (per_request * Fraction(9, 5)))
    scratch = per_request * (min(48, slots // 5) + 1) * 4
    layout = budget.layout
    assert (layout.state_slots, layout.state_scratch_bytes, layout.running_requests) == (slots, scratch, slots // 5)
    assert budget.kv_pool_bytes == rest - (slots + 1) * per_request - scratch
    plain = engine_budget(qwen3_next, request, EngineSettings(name="sglang"), h100, catalog)
    assert plain.layout.state_slots > slots and plain.layout.state_scratch_bytes == 0

    old = engine_budget(drafted, request, EngineSettings(name="sglang", version="0.5.9"), h100, catalog)
    rank = old.per_rank[0]
    rest = rank.budget_bytes - rank.weights_bytes
    assert (old.layout.state_slots, old.layout.state_scratch_bytes, old.layout.running_requests) == \
        (48, per_request * 48 * 4, 48)
    assert old.kv_pool_bytes == rest - 48 * per_request * (1 + 4)
    plain = engine_budget(qwen3_next, request, EngineSettings(name="sglang", version="0.5.9"), h100, catalog)
    gpu_mib = h100.memory_bytes // 2**20
    reserved = (1 - Fraction(str(plain.settings.mem_fraction_static))) * gpu_mib  # within the rounding of 3 decimals
    assert old.settings.mem_fraction_static == round(float((gpu_mib - reserved - 2048) / gpu_mib), 3)


def test_sglang_told_its_running_requests_sizes_the_speculative_scratch_and_scheduler_for_them(qwen3_next, h100,
                                                                                                  catalog):
    """--max-running-requests replaces the 48 SGLang runs under speculative decoding (speculative_hook.py
    _handle_eagle_family resets it only when unset): v0.5.23's scratch is for min(N // dp, K // 5) requests, v0.5.9
    keeps N // dp slots and their scratch; the scheduler is then capped by the budget's limit, not by the 48."""
    from planner.estimator.speculative import SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS, speculative_running_cap

    drafted = replace(qwen3_next, draft_tokens=3)
    request = Request(context=32768, tp=4)
    per_request = 36 * (GDN_CONV // 4 * 2 + (GDN_STATE - GDN_CONV) // 4 * 4)
    told = engine_budget(drafted, request, EngineSettings(name="sglang", max_running_requests=16), h100, catalog)
    default = engine_budget(drafted, request, EngineSettings(name="sglang"), h100, catalog)
    slots = told.layout.state_slots
    assert slots == default.layout.state_slots and slots // 5 > 16
    assert told.layout.state_scratch_bytes == per_request * (16 + 1) * 4 < default.layout.state_scratch_bytes
    assert told.layout.running_requests == 16 and told.kv_pool_bytes > default.kv_pool_bytes
    old = engine_budget(drafted, request, EngineSettings(name="sglang", version="0.5.9", max_running_requests=16), h100,
                        catalog)
    assert (old.layout.state_slots, old.layout.state_scratch_bytes, old.layout.running_requests) == \
        (16, per_request * 16 * 4, 16)
    assert speculative_running_cap(EngineSettings("sglang"), None) == SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS
    assert speculative_running_cap(EngineSettings("sglang", max_running_requests=96), None) is None
    assert speculative_running_cap(EngineSettings("vllm"), None) is None
    assert speculative_running_cap(EngineSettings("sglang"), 8) == 8


def test_sglang_runs_half_the_requests_of_qwen35_27b_with_mtp():
    """Qwen3.5-27B on one H200 at 8K on SGLang 0.5.23: 215 state slots and 43 running requests without speculative
    decoding; with MTP's 3 draft tokens (NEXTN's default) the verify step's intermediate states take 14.8 GB of the
    state budget: 115 slots, 23 requests. The figures are SGLang's formula worked by hand from planner's sizes
    (one request's states 48 x 3,207,168 B, the rest after weights 70.2 GB, less the MTP layer's 0.85 GB)."""
    from planner import api
    from planner.estimator.speculative import speculation

    def budget(spec):
        return api.engine_estimate("qwen3.5-27b", EngineSettings("sglang"), gpu="h200-sxm", context=8192,
                                   speculation=spec).engine

    plain, mtp = budget(None), budget(speculation("mtp", 3, 2.0))
    assert (plain.layout.state_slots, plain.layout.running_requests, plain.kv_cache_capacity_tokens) == (215, 43, 563_853)
    assert (mtp.layout.state_slots, mtp.layout.running_requests, mtp.kv_cache_capacity_tokens) == (115, 23, 527_330)
    assert mtp.layout.state_scratch_bytes == 48 * 3_207_168 * 24 * 4


def test_sglang_keeps_tracking_slots_only_for_the_architectures_it_gives_the_extra_buffer(qwen3_next, catalog):
    """SGLang 0.5.23 resolves the `auto` Mamba radix cache to extra_buffer (3 + 2 tracking slots a running request) for
    the architectures it lists, Qwen3-Next among them, and to no_buffer (3) for LFM2 (arg_groups/overrides.py:370-487);
    0.5.9 gives every model no_buffer."""
    from planner.api import resolve_model
    from planner.estimator.engines.sglang import slots_per_running_request

    sglang = load_profiles().sglang
    for arch, default in ((qwen3_next, 5), (resolve_model(catalog, "lfm2-8b-a1b"), 3)):
        model = serve(arch, Request(context=8192), catalog, "sglang")
        assert slots_per_running_request(model, sglang.get(None, "sglang")) == default
        assert slots_per_running_request(model, sglang.get("0.5.9", "sglang")) == 3


def test_sglang_gives_granite_4_h_and_falcon_h1_the_extra_buffer_from_0_5_15_and_granite_4_of_attention_only_no_state_pool(
        h100, catalog):
    """GraniteMoeHybrid takes SGLang's Mamba radix-cache branch only with a "mamba" layer_type: no_buffer through
    0.5.13 (0.5.13 server_args.py:1228, 2581-2591), extra_buffer from 0.5.14 (0.5.15 arg_groups/overrides.py:991,
    0.5.23 :421), and FalconH1 likewise (0.5.13 :2571-2579; 0.5.15 :990, 0.5.23 :420); an attention-only Granite 4.0
    holds no state pool at all."""
    from planner.estimator.engines.sglang import slots_per_running_request

    sglang = load_profiles().sglang
    hybrid = size_only_architecture_from_config(
        json.loads((CONFIGS / "granitemoehybrid-defaults" / "config.json").read_text()), "granite-4.0-h", None)
    model = serve(hybrid, Request(context=8192), catalog, "sglang")
    assert [slots_per_running_request(model, sglang.get(release, "sglang"))
            for release in ("0.5.9", "0.5.13", "0.5.15", "0.5.16", "0.5.19", "0.5.23")] == [3, 3, 5, 5, 5, 5]
    falcon = serve(architecture_from_config(json.loads((CONFIGS / "falcon-h1-defaults" / "config.json").read_text()),
                                            "falcon-h1"), Request(context=8192), catalog, "sglang")
    assert [slots_per_running_request(falcon, sglang.get(release, "sglang"))
            for release in ("0.5.9", "0.5.13", "0.5.15", "0.5.16", "0.5.19", "0.5.23")] == [3, 3, 5, 5, 5, 5]
    dense = size_only_architecture_from_config(
        json.loads((CONFIGS / "granitemoehybrid-dense-defaults" / "config.json").read_text()), "granite-4.0", None)
    layout = engine_budget(dense, Request(context=8192), EngineSettings(name="sglang"), h100, catalog).layout
    assert layout.state_bytes == 0 and layout.state_slots == 0


def test_the_pool_layout_of_attention_only_models_has_no_state(arch, h100, catalog):
    for name in ("vllm", "sglang"):
        layout = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings(name=name), h100, catalog).layout
        assert layout.state_bytes == 0 and layout.state_slots == 0 and layout.block_size_reason is None
        assert [g.kind for g in layout.groups] == ["full"]


def test_attention_free_models(h100, catalog):
    """A pure Mamba-2 model: vLLM pools one state block per sequence; SGLang's token pool has nothing to size."""
    model = nemotron_h_like(attention_every=10**6, layers=24)
    budget = engine_budget(model, Request(context=8192), EngineSettings(name="vllm", version="0.19.0"), h100, catalog)
    assert budget.settings.block_size == 16 and budget.layout.page_bytes == MAMBA2_STATE * 2
    blocks = budget.kv_pool_bytes // (MAMBA2_STATE * 2 * 24)
    assert budget.max_concurrency == blocks and budget.kv_cache_capacity_tokens == blocks * 8192
    with pytest.raises(PlannerInputError, match="no attention layers"):
        engine_budget(model, Request(context=8192), EngineSettings(name="sglang", version="0.5.9"), h100, catalog)


def test_the_table_explains_the_hybrid_layout(qwen3_next, h100, catalog):
    from rich.console import Console

    from planner.render.terminal import engine_table

    for name, expected in (("vllm", ("blocks of 272 tokens", "3 state group(s) x 1 block(s)", "block size 272")),
                           ("sglang", ("separate state pool", "running requests"))):
        console = Console(record=True, width=400)
        engine_table(engine_budget(qwen3_next, Request(context=32768, tp=4),
                                   EngineSettings(name=name, version={"vllm": "0.19.0", "sglang": "0.5.9"}[name]), h100, catalog),
                     console)
        text = console.export_text()
        assert all(phrase in text for phrase in expected), text


def test_a_sliding_window_model_on_sglang_shows_no_state_pool(h100, catalog):
    """Sliding and full attention layers, no recurrent state: the table names the layers and the token pool only."""
    from rich.console import Console

    from planner.model.sources import resolve_model
    from planner.render.terminal import engine_table

    console = Console(record=True, width=400)
    engine_table(engine_budget(resolve_model(catalog, "gemma-4-31b"), Request(context=2000),
                               EngineSettings(name="sglang"), h100, catalog), console)
    text = console.export_text()
    assert "sliding" in text and "token pool" in text and "state pool" not in text, text


def test_layers_without_a_cache_take_no_pages(h100, catalog):
    """Nemotron-H interleaves MLP-only blocks (no attention, no state): vLLM gives them no KV cache spec."""
    mamba = Layer(Attention("mamba", state_elements=MAMBA2_STATE))
    attention = Layer(Attention("full", 2, 128, 128))
    mlp_only = Layer(Attention("full"))  # keeps nothing per token
    pattern = (mamba, mlp_only, mamba, mlp_only, mamba, attention, mlp_only, mamba) * 6
    hybrid = Architecture("nemotron-h-pattern", "nemotron_h", 4096, 32, 131072, pattern, torch_dtype="bfloat16",
                          exact=False, declared_params=8 * 10**9)
    for name in ("vllm", "sglang"):
        budget = engine_budget(hybrid, Request(context=16384), EngineSettings(name=name), h100, catalog)
        layers = {g.kind: g.layers for g in budget.layout.groups}
        assert layers == {STATE: 24, "full": 6}, (name, layers)
    vllm_layout = engine_budget(hybrid, Request(context=16384), EngineSettings(name="vllm", version="0.19.0"), h100, catalog).layout
    assert vllm_layout.layers_per_group == 6


def test_head_256_on_compute_capability_10_0_aligns_to_32_tokens(catalog):
    """FlashInfer on B200 / GB200 takes no 16-token blocks at head size 256, so the hybrid block is a multiple of 32."""
    state = 48 * 16 * 2048 + 8 * 2048  # 776 attention tokens' worth: 16 x 49 = 784, but 32 x 25 = 800
    layers = tuple(Layer(Attention("full", 2, 256, 256)) if (i + 1) % 4 == 0 else
                   Layer(Attention("linear", state_elements=state // 2)) for i in range(8))
    model = Architecture("head-256", "qwen3_next", 2048, 16, 151936, layers, torch_dtype="bfloat16", exact=False,
                         declared_params=10**9)
    token = 2 * 256 * 2 * 2
    assert (16 * ceil(state / (16 * token)), 32 * ceil(state / (32 * token))) == (784, 800)
    blocks = {name: engine_budget(model, Request(context=8192), EngineSettings(name="vllm", version="0.19.0"),
                                  GpuTarget.from_catalog(catalog.gpus.get(name)), catalog).settings.block_size
              for name in ("b200", "gb200", "b300", "h100-sxm")}
    assert blocks == {"b200": 800, "gb200": 800, "b300": 784, "h100-sxm": 784}


def test_profile_gpu_names_are_catalog_gpus(catalog):
    names = {gpu.name for gpu in catalog.gpus}
    assert set(load_profiles().vllm.get("0.19.0", "vllm").hybrid_head256_gpus.value) <= names


# --- DeepSeek-V4: window, compressed, indexer and compressor-state caches in vLLM's packed pool ---------------------


def _deepseek_v4(ratios: list[int]) -> Architecture:
    """The DeepSeek-V4-Flash config (head 512, window 128, indexer keys of 128) cut to len(ratios) layers."""
    from planner.model.architecture import architecture_from_config, load_config_file

    config = load_config_file(CONFIGS / "deepseek-v4-flash")
    return architecture_from_config({**config, "num_hidden_layers": len(ratios), "compress_ratios": ratios,
                                     "num_nextn_predict_layers": 0}, "deepseek-v4-small")


def test_vllm_lays_out_a_small_deepseek_v4_by_hand(catalog):
    """Layers c1, c1, c4, c128, c4 (ratios 0, 0, 4, 128, 4), fp8_ds_mla, block size 256, pages padded to 576 B
    (vllm/v1/kv_cache_interface.py _apply_alignment_padding):
      window  DeepseekV4SWACache (sparse_swa.py, block_size = 64): 64 x 584 = 37,376 -> 37,440 B, every layer
      c4 / c128 compressed (attention.py MLAAttentionSpec, storage_block_size = 256 // r): 64 x 584 -> 37,440 B,
        2 x 584 = 1,168 -> 1,728 B
      indexer keys (DeepseekV4IndexerCache, 128 fp8 + 4 B scale = 132): 64 x 132 = 8,448 -> 8,640 B
      compressor states (compressor.py CompressorStateCache, fp32, state_dim = 2 x coff x head, coff 2 at r = 4):
        c4 4 x 2 x 2 x 512 x 4 = 32,768 -> 32,832 B; indexer 4 x 2 x 2 x 128 x 4 = 8,192 -> 8,640 B;
        c128 8 x 2 x 1 x 512 x 4 = 32,768 -> 32,832 B
    Groups (kv_cache_utils.py _get_kv_cache_groups_uniform_groups): compressed {2 x 37,440, 2 x 8,640, 1,728} has
    2 layer tuples; buckets window (64, 128) 5, states (4, 8) 2, (8, 128) 1; _approximate_gcd([2, 5, 2, 1], 2) = 2
    (padding 2; d = 3 pads 5), so the windows split into cdiv(5, 2) = 3 groups (layers 0+3, 1+4, 2): 6 groups.
    Packed stride (_get_packed_kv_cache_layout): the compressed group's 2 x 37,440 + 2 x 8,640 + 1,728 = 93,888 B."""
    from planner.estimator.engines.vllm_deepseek_v4 import COMPRESSED, STATE, WINDOW, layer_specs, spec_groups

    profile = load_profiles().vllm.get("0.19.0", "vllm")
    model = _deepseek_v4([0, 0, 4, 128, 4])
    pages = [sorted((s.kind, s.block_tokens, s.window, s.page_bytes) for s in layer_specs(i, layer, 256, profile))
             for i, layer in enumerate(model.layers)]
    assert pages[0] == [(WINDOW, 64, 128, 37_440)]
    assert pages[2] == sorted([(WINDOW, 64, 128, 37_440), (COMPRESSED, 256, None, 37_440), (COMPRESSED, 256, None, 8_640),
                               (STATE, 4, 8, 32_832), (STATE, 4, 8, 8_640)])
    assert pages[3] == sorted([(WINDOW, 64, 128, 37_440), (COMPRESSED, 256, None, 1_728), (STATE, 8, 128, 32_832)])
    groups = spec_groups(model, 256, profile)
    assert [(g.kind, sorted({s.layer for s in g.specs}), len(g.specs)) for g in groups] == [
        (COMPRESSED, [2, 3, 4], 5), (WINDOW, [0, 3], 2), (WINDOW, [1, 4], 2), (WINDOW, [2], 1), (STATE, [2, 4], 4),
        (STATE, [3], 1)]

    gpu = GpuTarget.from_catalog(catalog.gpus.get("b200"))
    budget = engine_budget(model, Request(context=32768, kv_dtype="fp8"), EngineSettings(name="vllm", version="0.19.0"), gpu, catalog)
    batched = budget.settings.max_num_batched_tokens
    assert budget.settings.block_size == 256 and budget.layout.page_bytes == 93_888
    window_blocks = ceil(min(127 + batched, 32768) / 64) + 1  # SlidingWindowSpec: window - 1 + batched, +1 block
    per_request = 32768 // 256 + 3 * window_blocks + (ceil(min(7 + batched, 32768) / 4) + 1) \
        + (ceil(min(127 + batched, 32768) / 8) + 1)
    num_blocks = budget.kv_pool_bytes // 93_888
    assert budget.max_concurrency == num_blocks / per_request
    assert budget.kv_cache_capacity_tokens == int(num_blocks / per_request * 32768)
    assert [(g.kind, g.groups, g.blocks_per_request) for g in budget.layout.groups] == [
        (COMPRESSED, 1, 128), (WINDOW, 3, 3 * window_blocks), (STATE, 2, per_request - 128 - 3 * window_blocks)]


def test_vllm_deepseek_v4_start_up_check_uses_the_layer_tuple_bytes(catalog):
    """_max_memory_usage_bytes_from_groups: blocks a request x the most layer tuples (2) x the compressed group's
    distinct pages (37,440 + 8,640 + 1,728 = 47,808 B); vLLM refuses to start below it and estimates the longest."""
    from planner.estimator.engines.vllm_deepseek_v4 import packed_layout

    profile = load_profiles().vllm.get("0.19.0", "vllm")
    model = serve(_deepseek_v4([0, 0, 4, 128, 4]), Request(context=65536, kv_dtype="fp8"), catalog, "vllm")
    layout = packed_layout(model, model.stages[0], 256, 2048, profile)
    blocks = layout.blocks_per_request(65536, 2048, 256)
    assert layout.needed_bytes(65536, 2048, 256) == 2 * 47_808 * blocks
    assert blocks == 65536 // 256 + 3 * (ceil(2175 / 64) + 1) + (ceil(2055 / 4) + 1) + (ceil(2175 / 8) + 1)


def test_vllm_groups_the_published_deepseek_v4_configs(catalog):
    """Flash: 21 c4 + 20 c128 + 2 window-only layers -> tuples [21, 43, 21, 20], d = 22, five groups; its stride is
    the compressed group's 21 x 37,440 + 21 x 8,640 + 20 x 1,728 B. Pro: 30 c4 + 31 c128 (+ 0 window-only):
    30 x 37,440 + 30 x 8,640 + 31 x 1,728 B."""
    from planner.estimator.engines.vllm_deepseek_v4 import approximate_gcd, packed_layout
    from planner.model.architecture import architecture_from_config, load_config_file

    assert approximate_gcd([21, 43, 21, 20], 21) == 22
    profile = load_profiles().vllm.get("0.19.0", "vllm")
    for name, stride in (("deepseek-v4-flash", 21 * 37_440 + 21 * 8_640 + 20 * 1_728),
                         ("deepseek-v4-pro", 30 * 37_440 + 30 * 8_640 + 31 * 1_728)):
        model = serve(architecture_from_config(load_config_file(CONFIGS / name), name), Request(context=8192, tp=8),
                      catalog, "vllm")
        layout = packed_layout(model, model.stages[0], 256, 8192, profile)
        assert len(layout.groups) == 5 and layout.block_stride == stride, name


def test_deepseek_v4_refusals_name_the_engine_and_the_fix(catalog):
    gpu = GpuTarget.from_catalog(catalog.gpus.get("b200"))
    model = _deepseek_v4([0, 0, 4, 128, 4])
    for engine in ("vllm", "sglang"):
        with pytest.raises(PlannerInputError, match="--kv-dtype fp8"):
            engine_budget(model, Request(context=8192, kv_dtype="bf16"), EngineSettings(name=engine), gpu, catalog)
    with pytest.raises(PlannerInputError, match="multiple of 128"):
        engine_budget(model, Request(context=8192), EngineSettings(name="vllm", version="0.19.0", block_size=64), gpu, catalog)
    auto = engine_budget(model, Request(context=8192), EngineSettings(name="vllm", version="0.19.0"), gpu, catalog)
    assert any("--kv-cache-dtype fp8" in w for w in auto.warnings)


def test_the_cli_prints_deepseek_v4_flashs_vllm_pool_and_its_groups():
    from typer.testing import CliRunner

    from planner.cli import app

    result = CliRunner().invoke(app, ["estimate", "deepseek-v4-flash", "--engine", "vllm", "--gpu", "b200", "--tp", "8",
                                      "--context", "32768"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "KV cache capacity" in text and "x 1,002,240 B" in text and "5 groups" in text, text
    assert "compressed (256-token blocks): 21 x 37,440 B + 21 x 8,640 B + 20 x 1,728 B, 128 block(s)" in text, text
    assert "compressor state (4-token blocks, window 8)" in text, text


# --- DeepSeek-V4 in SGLang: DSV4PoolConfigurator's window, c4, c128 and compressor-state pools ---------------------


def test_sglang_sizes_a_small_deepseek_v4_by_hand(catalog):
    """Layers c1, c1, c4, c128, c4 (ratios 0, 0, 4, 128, 4), SGLang's DeepSeek-V4 defaults (page 256,
    swa_full_tokens_ratio 0.1, max_running_requests 256). pool_configurator.py _get_bytes_per_full_token:
      window    0.1 x 584 x 5 layers                       = 292
      c4 / c128 584 / 4 x 2 + 584 / 128 x 1               = 292 + 4.5625
      indexer   (128 + 128 // 128 x 4 = 132) / 4 x 2       = 66
      c4 states 0.1 x (8 / 128) x (2 x 2 x 512 x 4 + 2 x 2 x 128 x 4) x 2 = 102.4 + 25.6
      total 782.5625 B per full token;
    _get_c128_state_fixed_bytes: ceil128(257 x 128 + 128 + 1) = 33,152 rows x 2 x 512 x 4 B x 1 layer = 135,790,592 B.
    _compute_dsv4_sizes: full = int((available - fixed) / 782.5625) to pages of 256; window int(full x 0.1) to pages;
    c4 full // 4, c128 full // 128, c4 states window // 128 x 8, c128 states 257 x 128."""
    from fractions import Fraction

    from planner.estimator.engines import sglang_deepseek_v4 as v4

    profile = load_profiles().sglang.get("0.5.9", "sglang")
    model = serve(_deepseek_v4([0, 0, 4, 128, 4]), Request(context=32768), catalog, "sglang")
    stage = model.stages[0]
    assert v4.bytes_per_full_token(stage, profile) == pytest.approx(782.5625, abs=1e-9)
    assert v4.c128_state_bytes(stage, profile, 256) == 135_790_592
    available = 10 * 2**30
    full = floor((available - 135_790_592) / Fraction(7_825_625, 10_000)) // 256 * 256
    assert v4.full_tokens(stage, available, profile, 256) == full
    sized = v4.pools(stage, full, profile, 256)
    swa = floor(full * Fraction(1, 10)) // 256 * 256
    assert (sized.swa_tokens, sized.c4_entries, sized.c128_entries) == (swa, full // 4, full // 128)
    assert (sized.c4_state_rows, sized.c128_state_rows) == (swa // 128 * 8, 257 * 128)

    gpu = GpuTarget.from_catalog(catalog.gpus.get("b200"))
    budget = engine_budget(model.arch, Request(context=32768), EngineSettings(name="sglang", version="0.5.9"), gpu, catalog)
    expected = v4.full_tokens(stage, budget.kv_pool_bytes, profile, 256)
    assert budget.kv_cache_capacity_tokens == expected and expected % 256 == 0
    assert budget.max_concurrency == min(expected / 32768, 256)
    assert budget.layout.block_size == 256 and budget.layout.running_requests == 256
    assert [(g.kind, g.layers) for g in budget.layout.groups] == [
        ("window", 5), ("c4 compressed + indexer", 2), ("c128 compressed", 1)]


def test_sglang_deepseek_v4_without_memory_for_the_c128_states(catalog):
    """The c128 states come off the budget first: a fraction that leaves less than them has no tokens at all, and
    SGLang's MemoryPoolConfig refuses ("Not enough memory. Please try to increase --mem-fraction-static.")."""
    gpu = GpuTarget.from_catalog(catalog.gpus.get("b200"))
    model = _deepseek_v4([0, 0, 4, 128, 4])
    half = engine_budget(model, Request(context=8192), EngineSettings(name="sglang", version="0.5.9", mem_fraction_static=0.5), gpu,
                         catalog)
    fraction = (half.weights_bytes + 2**26) / (2 * half.budget_bytes)  # 64 MiB over the weights
    budget = engine_budget(model, Request(context=8192), EngineSettings(name="sglang", version="0.5.9", mem_fraction_static=fraction),
                           gpu, catalog)
    assert 0 < budget.kv_pool_bytes < 135_790_592 and budget.kv_cache_capacity_tokens == 0
    assert not budget.fits and "Not enough memory" in budget.message


def test_sglang_deepseek_v4_pipeline_stages_take_the_smallest(catalog):
    """_apply_token_constraints: the PP ranks agree on the smallest max_total_num_tokens; each stage sizes its own
    compress ratios (DSV4PoolConfigurator slices compress_ratios[start_layer:end_layer])."""
    from planner.estimator.engines import sglang_deepseek_v4 as v4
    from planner.model.architecture import architecture_from_config, load_config_file

    profile = load_profiles().sglang.get("0.5.9", "sglang")
    arch = architecture_from_config(load_config_file(CONFIGS / "deepseek-v4-pro"), "deepseek-v4-pro")
    gpu = GpuTarget.from_catalog(catalog.gpus.get("b200"))
    budget = engine_budget(arch, Request(context=65536, tp=8, pp=2), EngineSettings(name="sglang", version="0.5.9"), gpu, catalog)
    model = serve(arch, Request(context=65536, tp=8, pp=2), catalog, "sglang")
    per_stage = [v4.full_tokens(stage, budget.budget_bytes - stage.weights_bytes, profile, 256) for stage in model.stages]
    assert budget.kv_cache_capacity_tokens == min(per_stage)


def test_the_cli_prints_deepseek_v4_flashs_sglang_pools():
    """Flash on 8 x B200: 43 layers, 21 c4 and 20 c128. Per full token 0.1 x 584 x 43 + 584 / 4 x 21 + 584 / 128 x 20
    + 132 / 4 x 21 + 0.1 / 16 x (8,192 + 2,048) x 21 = 2,511.2 + 3,066 + 91.25 + 693 + 1,344 = 7,705.45 B; c128 states
    33,152 x 4,096 B x 20 = 2,715,811,840 B."""
    from typer.testing import CliRunner

    from planner.cli import app

    result = CliRunner().invoke(app, ["estimate", "deepseek-v4-flash", "--engine", "sglang", "--gpu", "b200", "--tp",
                                      "8", "--context", "32768"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "7,705.45 B per full token" in text and "2,715,811,840 B set aside" in text, text
    capacity = text.split("KV cache capacity ")[1].split(" tokens")[0]
    assert f"max_total_num_tokens {capacity} " in text, text
    assert "x 43 layers x 584 B" in text and "x 21 layers; c128" in text and "256 running requests" in text, text


# --- DeepSeek-V4 in llama.cpp: llama_kv_cache_dsv4's raw window, compressed K caches and compressor states ---------


def test_llamacpp_sizes_a_small_deepseek_v4_by_hand(catalog):
    """Layers c1, c1, c4, c128, c4, --parallel 2 (two streams of pad(8,192, 256) = 8,192 cells), n_ubatch 512
    (src/llama-kv-cache-dsv4.cpp @ 8eb9c860, llama_kv_cache_dsv4::llama_kv_cache_dsv4):
      raw window (llama_kv_cache_iswa, every layer sliding, K only: dsv4_make_k_only): 2 x min(8,192, pad(128 + 512,
        256) = 768) cells x 512 f16 = 1,024 B -> 1,572,864 B a layer, 7,864,320 B for 5
      c4 layer: CSA K pad(ceil(8,192 / 4), 256) = 2,048 cells x 1,024 B + lightning-indexer K 2,048 x 128 x 2 = 256 B
        + CSA state 2 (kv, score) x 8 rows x 2 x 512 x 4 B = 65,536 + indexer state 2 x 8 x 2 x 128 x 4 = 16,384,
        per stream: 2 x 2,703,360 = 5,406,720 B a layer
      c128 layer: HCA K pad(64, 256) = 256 cells x 1,024 B + state 2 x 128 x 512 x 4 = 524,288 B: 2 x 786,432
    The state sizes give DeepSeek-V4-Flash-0731's logged ones (ggml-org/llama.cpp issue #27680, one stream): csa 21 x
    65,536 B = 1.31 MiB, hca 20 x 524,288 B = 10.00 MiB, lid 21 x 16,384 B = 0.33 MiB."""
    from planner.estimator.engines.llamacpp import compressed_cache_bytes

    profile = load_profiles().llamacpp.get(None, "llamacpp")
    model = _deepseek_v4([0, 0, 4, 128, 4])
    c4, c128 = model.layers[2], model.layers[3]
    assert compressed_cache_bytes(c4, 8192, 2, "f16", profile) == 5_406_720
    assert compressed_cache_bytes(c128, 8192, 2, "f16", profile) == 1_572_864
    assert compressed_cache_bytes(model.layers[0], 8192, 2, "f16", profile) == 0
    flash_states = 21 * (compressed_cache_bytes(c4, 1, 1, "f16", profile) - 256 * 1024 - 256 * 256)
    assert flash_states == 21 * (65_536 + 16_384) and round(21 * 65_536 / 2**20, 2) == 1.31

    gpu = GpuTarget.from_catalog(catalog.gpus.get("b200"))
    budget = engine_budget(model, Request(context=8192, batch=2), EngineSettings(name="llamacpp", cache_type="f16"),
                           gpu, catalog)
    assert budget.kv_pool_bytes == 7_864_320 + 2 * 5_406_720 + 1_572_864
    assert budget.kv_cache_capacity_tokens == 2 * 8192 and budget.fits
    q8 = engine_budget(model, Request(context=8192, batch=2), EngineSettings(name="llamacpp", cache_type="q8_0"),
                       gpu, catalog)
    # q8_0: 34 B per 32 values, so a 512-wide row is 544 B and the indexer's 128-wide one 136 B; the states stay f32
    assert q8.kv_pool_bytes == 5 * 2 * 768 * 544 + 2 * 2 * (2_048 * 544 + 2_048 * 136 + 81_920) + 2 * (256 * 544 + 524_288)
    assert "DeepSeek-V4" in budget.warnings[0]


def test_the_cli_prints_deepseek_v4_flashs_llamacpp_cache():
    """Flash on 8 x B200 at 32,768 tokens: raw window 43 x 768 cells x 1,024 B = 33,816,576 B; ratio 4: 21 x (8,192 x
    (1,024 + 256) + 81,920) = 221,921,280 B; ratio 128: 20 x (256 x 1,024 + 524,288) = 15,728,640 B."""
    from typer.testing import CliRunner

    from planner.cli import app

    result = CliRunner().invoke(app, ["estimate", "deepseek-v4-flash", "--engine", "llamacpp", "--gpu", "b200", "--tp",
                                      "8", "--context", "32768", "--kv-dtype", "fp16"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "raw window (K only) 33,816,576 B" in text, text
    assert "ratio 4: 21 layers, 8,192 cells a stream, 221,921,280 B" in text, text
    assert "ratio 128: 20 layers, 256 cells a stream, 15,728,640 B" in text, text
    assert "1 request(s) of 32,768 tokens: fits" in text, text


def test_sglang_deepseek_v4_pools_replay_a_logged_start_up(catalog):
    """An SGLang start-up log of DeepSeek-V4-Flash-0731 (same 43 layers and compress ratios as Flash) on Ascend NPUs
    (page 128, max_running_requests 4, max_total_tokens capped at 32,768), a public log found with the search tool:
      DSV4 memory calculation: bytes_per_full_token=7705.45, ..., c128_state_fixed=0.07 GB
      DSV4 pool sizes: full=32768, swa=3200, c4=8192, c128=256, c4_state=200, c128_state=0
    c128 state: ceil128(5 x 128 + 129) = 896 rows x 4,096 B x 20 layers = 73,400,320 B = 0.07 GiB (the log's GB is
    1 << 30 bytes); the c128_state_pool_size it then finalizes (5 x 128 = 640) is not in the log."""
    from planner.estimator.engines import sglang_deepseek_v4 as v4
    from planner.estimator.engines.profiles import Sourced
    from planner.model.architecture import architecture_from_config, load_config_file

    profile = load_profiles().sglang.get("0.5.9", "sglang")
    logged = profile.model_copy(update={
        "deepseek_v4_page_size": Sourced[int](value=128, source="the log's NPU page size")})
    running = 4  # the log's max_num_reqs=4
    arch = architecture_from_config(load_config_file(CONFIGS / "deepseek-v4-flash"), "deepseek-v4-flash")
    stage = serve(arch, Request(context=32768, tp=4), catalog, "sglang").stages[0]
    assert f"{v4.bytes_per_full_token(stage, logged):.2f}" == "7705.45"
    assert v4.c128_state_bytes(stage, logged, running) == 73_400_320 and f"{73_400_320 / 2**30:.2f}" == "0.07"
    sized = v4.pools(stage, 32768, logged, running)
    assert (sized.full_tokens, sized.swa_tokens, sized.c4_entries, sized.c128_entries, sized.c4_state_rows) == (
        32768, 3200, 8192, 256, 200)


def test_sglang_0512_refuses_mtp_on_a_hybrid_model_on_cuda_and_runs_it_without_the_radix_cache_on_rocm(catalog):
    """SGLang 0.5.10-0.5.13 raise a ValueError at start-up for speculative decoding with the no_buffer strategy and the
    radix cache on (server_args.py:2557-2571 @ v0.5.12): the budget does not fit, with SGLang's reason, so a search
    drops those candidates rather than stopping. On ROCm 0.5.12 turns the radix cache off instead (:2558-2565): a slot
    for each of the 48 requests it runs under speculative decoding; 0.5.10 raises there too."""
    from planner.api import resolve_model
    from planner.estimator.engines.need import engine_need

    drafted = replace(resolve_model(catalog, "qwen3.5-27b"), draft_tokens=3)
    request = Request(context=8192)
    h200, mi300x = (GpuTarget.from_catalog(catalog.gpus.get(name)) for name in ("h200-sxm", "mi300x"))
    cuda = engine_budget(drafted, request, EngineSettings("sglang", version="0.5.12"), h200, catalog)
    assert not cuda.fits and "refuses speculative decoding" in cuda.message
    assert not engine_need(drafted, request, EngineSettings("sglang", version="0.5.12"), h200, catalog).fits
    rocm = engine_budget(drafted, request, EngineSettings("sglang", version="0.5.12"), mi300x, catalog)
    assert rocm.fits and (rocm.layout.state_slots, rocm.layout.running_requests) == (48, 48)
    assert not engine_budget(drafted, request, EngineSettings("sglang", version="0.5.10"), mi300x, catalog).fits


def test_vllm_holds_a_state_block_more_a_request_for_each_mtp_draft_token(qwen3_next, h100, catalog):
    """vLLM gives each request num_speculative_tokens more state blocks in every recurrent group (MambaSpec
    .num_speculative_blocks, layers/mamba/abstract.py:94-98 @ v0.34.0, :53-57 @ v0.19.0): fewer requests' states fit."""
    request = Request(context=32768, tp=4)
    for version in ("0.19.0", "0.34.0"):
        plain, drafted = (engine_budget(a, request, EngineSettings("vllm", version=version), h100, catalog)
                          for a in (qwen3_next, replace(qwen3_next, draft_tokens=3)))
        blocks = [{g.kind: g.blocks_per_request for g in b.layout.groups}[STATE] for b in (plain, drafted)]
        assert blocks[1] == blocks[0] + 3
        assert drafted.layout.state_slots < plain.layout.state_slots


def test_sglang_deepseek_v4_sizes_its_c128_states_for_the_requests_a_dp_worker_runs(catalog):
    """DSV4PoolConfigurator sizes the request-scoped c128 compressor states for max_running_requests // attn_dp_size
    requests a worker (requested_max_running_requests_per_worker, pool_configurator.py @ 003fca80 and v0.5.23): at DP
    8 the default 256 is 32 a worker, so each rank sets aside the rows of 33 slots, not 257, and its pool holds the
    difference; told --max-running-requests 512, 64 a worker run and 65 slots are set aside."""
    from planner.estimator.engines import sglang_deepseek_v4 as v4
    from planner.model.architecture import architecture_from_config, load_config_file

    arch = architecture_from_config(load_config_file(CONFIGS / "deepseek-v4-pro"), "deepseek-v4-pro")
    gpu = GpuTarget.from_catalog(catalog.gpus.get("mi355x"))
    request = Request(context=8294, tp=8, dp=8)
    profile = load_profiles().sglang.get(None, "sglang")
    stage = serve(arch, request, catalog, "sglang").stages[0]

    def budget(told: int | None):
        return engine_budget(arch, request, EngineSettings("sglang", max_running_requests=told), gpu, catalog)

    default, told = budget(None), budget(512)
    assert (default.layout.running_requests, told.layout.running_requests) == (32, 64)
    assert "(32 running requests + 1)" in default.layout.notes[1] and "(64 running requests + 1)" in told.layout.notes[1]
    for sized, running in ((default, 32), (told, 64)):
        assert sized.kv_cache_capacity_tokens == v4.full_tokens(stage, sized.kv_pool_bytes, profile, running)
    # the same rank's bytes buy more tokens with the states of 33 slots off them than with 257
    assert v4.full_tokens(stage, default.kv_pool_bytes, profile, 32) > v4.full_tokens(stage, default.kv_pool_bytes,
                                                                                        profile, 256)
    assert told.kv_cache_capacity_tokens < default.kv_cache_capacity_tokens
    with pytest.raises(PlannerInputError, match="--max-running-requests: 4 is fewer than the 8 data-parallel"):
        budget(4)


def test_sglang_runs_the_requests_it_is_told_each_dp_worker_its_share(catalog):
    """--max-running-requests N replaces SGLang's default limit (clamp(tokens / context x 512, 2048, 4096) a worker):
    each DP worker runs N // dp (resolve_max_num_reqs @ v0.5.23), and the scheduler runs their sum; other engines are
    not told it."""
    from planner.estimator.capacity import Scheduler

    from planner.model.architecture import architecture_from_config

    arch = architecture_from_config(catalog.models.get("qwen3-30b-a3b").config, "qwen3-30b-a3b")
    gpu = GpuTarget.from_catalog(catalog.gpus.get("h100-sxm"))
    request = Request(context=8192, tp=4, dp=4)
    default = engine_budget(arch, request, EngineSettings("sglang"), gpu, catalog)
    told = engine_budget(arch, request, EngineSettings("sglang", max_running_requests=30), gpu, catalog)
    assert default.layout.running_requests >= 2048 and told.layout.running_requests == 7  # 30 // 4
    scheduler = Scheduler.of(told, dp=4)
    assert (scheduler.max_num_seqs, scheduler.seqs_limit) == (28, "max_running_requests")
    assert told.kv_cache_capacity_tokens == default.kv_cache_capacity_tokens  # the limit, not the pool
    with pytest.raises(PlannerInputError, match="SGLang's flag, not vllm's"):
        EngineSettings("vllm", max_running_requests=30).validate()
