"""Engine profiles by version (issue 21, item 1): picking a release, refusing an unknown one, and the numbers that
change between releases, computed by hand from the engines' code at each tag (catalogs/engine_profiles.yaml)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.engines.sglang import rocm_attention_backend
from planner.errors import PlannerInputError
from planner.estimator.memory import GpuTarget, Request
from planner.plan.scenario import Scenario
from planner.plan.search import engine_settings
from planner.units import GiB, MiB

from engine_fixtures import arch, h100  # noqa: F401  (fixtures)

H100_MIB, DRIVER_MIB, CONTEXT_MIB = 81_559, 468, 522  # catalogs: nvidia-smi total, driver reserve, CUDA context


def _card(catalog, name: str) -> GpuTarget:
    return GpuTarget.from_catalog(catalog.gpus.get(name))


def test_the_default_is_each_engines_current_release(arch, h100, catalog):
    vllm = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("vllm"), h100, catalog)
    sglang = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("sglang"), h100, catalog)
    assert (vllm.release, vllm.settings.version) == ("v0.34.0", "0.34.0")
    assert (sglang.release, sglang.settings.version) == ("v0.5.23", "0.5.23")


def test_an_older_release_is_selectable_with_or_without_its_v(arch, h100, catalog):
    for asked in ("0.19.0", "v0.19.0"):
        budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("vllm", version=asked), h100,
                               catalog)
        assert (budget.release, budget.settings.version, budget.settings.block_size) == ("v0.19.0", "0.19.0", 16)


def test_an_unknown_version_is_refused_naming_the_known_ones(arch, h100, catalog):
    with pytest.raises(PlannerInputError, match=r"vLLM 0\.20\.0 has no profile.*0\.19\.0, 0\.34\.0 \(default 0\.34\.0\)"):
        engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("vllm", version="0.20.0"), h100, catalog)
    with pytest.raises(PlannerInputError, match=r"SGLang 0\.4\.3 has no profile.*0\.5\.9, 0\.5\.10, 0\.5\.12, 0\.5\.13, 0\.5\.15, 0\.5\.16, 0\.5\.19, 0\.5\.23 \(default"):
        engine_settings(Scenario(model="llama-3.1-8b", workload={"context": 8192, "concurrency": 1},
                                 engine={"name": "sglang", "version": "0.4.3"}))
    with pytest.raises(PlannerInputError, match="simple planning margin has none"):
        engine_settings(Scenario(model="llama-3.1-8b", workload={"context": 8192, "concurrency": 1},
                                 engine={"name": "simple", "version": "0.34.0"}))


def test_the_cli_refuses_an_unknown_version_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "estimate", "llama-3.1-8b", "--engine", "vllm",
                           "--gpu", "h100-sxm", "--engine-version", "9.9"], cwd=tmp_path, capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("error: --engine-version / engine.version: vLLM 9.9 has no profile")


def test_a_scenario_resolves_its_engine_version_for_the_plan():
    spec = {"model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 1}}
    assert engine_settings(Scenario(**spec)).version == "0.34.0"
    assert engine_settings(Scenario(**spec, engine={"name": "vllm", "version": "v0.19.0"})).version == "0.19.0"


def test_vllm_034_pool_is_the_memory_free_after_warmup_less_the_peak_and_its_margin(arch, h100, catalog):
    """extensible_kv_cache.py measure_kv_cache_bytes @ v0.34.0 with utilization 1.0: free at start - (weights +
    non-torch + CUDA graphs) - margin - peak, margin = max(1 GiB, 0.75 x peak)."""
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("vllm"), h100, catalog)
    peak = budget.activation_bytes
    assert peak == 2_028_032_000 and int(0.75 * peak) == 1_521_024_000 > GiB  # the fraction sets the margin
    free_at_start = (H100_MIB - DRIVER_MIB - CONTEXT_MIB) * MiB  # 80,569 MiB
    resident = 16_060_522_496 + 256 * MiB + 870 * MiB  # bf16 weights, non-torch, CUDA graphs
    assert budget.kv_pool_bytes == free_at_start - resident - 1_521_024_000 - peak == 63_692_444_672
    assert budget.gpu_memory_utilization == 1.0
    # 64-token blocks of 131,072 B/token: 7,592 blocks, 128 a request of 8K; "GPU KV cache size" = 59.3125 x 8,192
    assert budget.settings.block_size == 64 and budget.max_concurrency == 7_592 / 128
    assert budget.kv_cache_capacity_tokens == 485_888


def test_vllm_019_pool_is_the_utilizations_budget_less_what_profiling_measured(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("vllm", version="0.19.0"), h100,
                           catalog)
    requested = int((H100_MIB - DRIVER_MIB) * MiB * 0.9)
    assert budget.kv_pool_bytes == requested - 16_060_522_496 - 2_028_032_000 - 256 * MiB  # graphs stay outside
    blocks = budget.kv_pool_bytes // (16 * 131_072)
    assert budget.kv_cache_capacity_tokens == blocks * 16  # "GPU KV cache size" = blocks x block size


@pytest.mark.parametrize("version, gpu, expected", [
    ("0.19.0", "b200", (8192, 1024)),  # one tier for every card of >= 70 GiB but the A100
    ("0.34.0", "b200", (16384, 1024)),  # get_batch_defaults @ v0.34.0: >= 160 GiB
    ("0.34.0", "h100-sxm", (8192, 1024)),
    ("0.34.0", "a100-sxm-80gb", (2048, 256)),
])
def test_vllm_batch_defaults_by_release_and_card(version, gpu, expected, arch, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("vllm", version=version),
                           _card(catalog, gpu), catalog)
    assert (budget.settings.max_num_batched_tokens, budget.settings.max_num_seqs) == expected


@pytest.mark.parametrize("version, gpu, expected", [
    # 512 + 8192 x 1.5 + 256 x 2 + 128 = 13,440 MiB of 81,559: 0.8352
    ("0.5.9", "h100-sxm", (8192, 256, 0.835)),
    # + 58 prefill graph sizes up to 8192 x 8 MiB = 13,904 MiB: 0.8295
    ("0.5.23", "h100-sxm", (8192, 256, 0.83)),
    # 512 + 2048 x 1.5 + 24 x 2 + 128 = 3,760 MiB of 24,564: 0.8469
    ("0.5.9", "rtx-4090", (2048, 24, 0.847)),
    # 512 + 4096 x 1.5 + 48 x 2 + 128 + 50 prefill graph sizes up to 4096 x 8 MiB = 7,280 MiB: 0.7036
    ("0.5.23", "rtx-4090", (4096, 48, 0.704)),
])
def test_sglang_default_fraction_by_release(version, gpu, expected, arch, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("sglang", version=version),
                           _card(catalog, gpu), catalog)
    settings = budget.settings
    assert (settings.max_num_batched_tokens, settings.max_num_seqs, settings.mem_fraction_static) == expected


def test_sglang_prefill_graphs_are_not_reserved_on_amd(arch, catalog):
    """default_prefill_backend @ v0.5.23: breakable prefill graphs on CUDA only; MI300X (196,592 MiB here) keeps
    512 + 16384 x 1.5 + 512 x 2 + 128 = 26,240 MiB."""
    card = _card(catalog, "mi300x")
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), EngineSettings("sglang"), card, catalog)
    gpu_mib = card.memory_bytes // MiB
    assert budget.settings.mem_fraction_static == round((gpu_mib - 26_240) / gpu_mib, 3)


@pytest.mark.parametrize("model, tp, version, backend", [
    ("llama-3.1-8b", 1, "0.5.23", "aiter"),  # MHA: the is_hip() default
    ("qwen3.5-35b-a3b", 2, "0.5.23", "aiter"),  # a hybrid model: the wrapper is built around the setting's backend
    ("deepseek-v3", 8, "0.5.23", "aiter"),  # MLA at 128 / 8 = 16 heads a rank
    ("deepseek-v3", 4, "0.5.23", "triton"),  # 32 heads a rank
    ("kimi-k2.5", 4, "0.5.23", "aiter"),  # 64 / 4 = 16
    ("kimi-k2.5", 8, "0.5.23", "triton"),  # 8
    ("glm-4.7-flash", 1, "0.5.23", "triton"),  # 20 heads: never 16 or 128
    ("glm-5", 4, "0.5.12", "nsa"),  # DeepSeek Sparse Attention, named "dsa" from v0.5.13
    ("glm-5", 4, "0.5.23", "dsa"),
    ("gpt-oss-120b", 1, "0.5.9", "triton"),  # aiter from v0.5.10
    ("gpt-oss-120b", 1, "0.5.10", "aiter"),
])
def test_sglang_resolves_its_rocm_attention_backend_by_model_and_release(model, tp, version, backend, arch):
    profile = load_profiles().sglang.get(version, "sglang")
    assert rocm_attention_backend(arch(model), tp, profile) == backend


@pytest.mark.parametrize("model, stated, backend", [
    ("llama-3.1-8b", "triton", "triton"),  # a backend the server is told is kept
    ("glm-5", "aiter", "aiter"),  # the DSA adjustment runs only when none is told
    ("deepseek-v4-flash", "aiter", "dsv4"),  # DeepSeek-V4's is forced over any
])
def test_sglang_keeps_the_rocm_attention_backend_it_is_told_unless_the_model_forces_its_own(model, stated, backend,
                                                                                           arch):
    assert rocm_attention_backend(arch(model), 8, load_profiles().sglang.get("0.5.23", "sglang"), stated) == backend


def test_sglang_on_rocm_takes_085_of_the_fraction_only_where_it_resolves_aiter(arch, catalog):
    """GLM-5 FP8 on 4 x MI355X at 8,294 tokens (InferenceX's 8K / 1K rows): SGLang runs it on its DSA backend, so
    the pool keeps the whole fraction, as it does at 8,192 tokens; Qwen3.5-397B at the same layout resolves aiter
    and gets 0.85 of its fraction above 8K."""
    card = _card(catalog, "mi355x")

    def budget(model, context):
        return engine_budget(arch(model), Request(context=context, tp=4, precision="fp8", kv_dtype="fp8"),
                             EngineSettings("sglang"), card, catalog).budget_bytes

    assert budget("glm-5", 8294) == budget("glm-5", 8192)
    assert budget("qwen3.5-397b-a17b", 8294) / budget("qwen3.5-397b-a17b", 8192) == pytest.approx(0.85, abs=1e-6)


def test_vllm_034_hybrids_hold_align_mode_state_blocks(arch, catalog):
    """Qwen3.5-27B: 16 attention + 48 Gated DeltaNet layers, a 3,207,168 B state, 4,096 B per attention token.
    v0.19.0: 16-token alignment, block 784, one state block a request; v0.34.0: 64-token alignment, block 64 x
    cdiv(3,207,168, 64 x 4,096) = 832, and in "align" mode 2 state blocks + the FlashInfer prefill checkpoint on
    Hopper (3), 2 on an A100 (Triton prefill)."""
    model = arch("qwen3.5-27b")
    request = Request(context=32768)

    def layout(version, gpu):
        budget = engine_budget(model, request, EngineSettings("vllm", version=version), _card(catalog, gpu), catalog)
        state = next(g for g in budget.layout.groups if g.kind == "state")
        return budget, budget.layout.block_size, state.blocks_per_request

    old, block, blocks = layout("0.19.0", "h100-sxm")
    assert (block, blocks) == (784, 1)
    new, block, blocks = layout("0.34.0", "h100-sxm")
    assert (block, blocks) == (832, 3)
    assert layout("0.34.0", "a100-sxm-80gb")[1:] == (832, 2)
    # "GPU KV cache size" is concurrency x max_model_len in v0.34.0 (not blocks x block size)
    assert new.kv_cache_capacity_tokens == int(new.max_concurrency * 32768)


@pytest.mark.parametrize("pp, window_blocks", [
    (1, 259),  # cdiv(min(128 - 1 + 2 x 8,192, 32,768), 64) + 1 = cdiv(16,511, 64) + 1
    (2, 387),  # 3 batches in flight: cdiv(128 - 1 + 24,576, 64) + 1 = cdiv(24,703, 64) + 1
])
def test_vllm_034_windows_hold_every_batch_in_flight(pp, window_blocks, arch, h100, catalog):
    """gpt-oss-120b (18 full + 18 sliding layers of window 128, 8 KV heads of 64, bf16; 8,192 batched tokens on an
    H100): SlidingWindowSpec.max_admission_blocks_per_request @ v0.34.0 counts VllmConfig.max_in_flight_tokens = (pp +
    1 with async scheduling) x 8,192; a full group takes 32,768 / 64 = 512 blocks. v0.19.0 counted one batch: cdiv(128
    - 1 + 8,192, 16) + 1 = 521 of its 16-token blocks."""
    def budget(version):
        return engine_budget(arch("gpt-oss-120b"), Request(context=32768, pp=pp), EngineSettings("vllm", version=version),
                             h100, catalog)

    new = budget("0.34.0")
    blocks = {g.kind: g.blocks_per_request for g in new.layout.groups}
    assert blocks == {"sliding": window_blocks, "full": 512}
    assert new.layout.page_bytes == 64 * 8 * 64 * 2 * 2 == 131_072
    num_blocks = min(rank.kv_pool_bytes for rank in new.per_rank) // (131_072 * new.layout.layers_per_group)
    assert new.max_concurrency == num_blocks / (512 + window_blocks)
    assert {g.kind: g.blocks_per_request for g in budget("0.19.0").layout.groups}["sliding"] == 521


def test_vllm_034_holds_a_nemotron_h_ssm_state_in_float32_when_its_config_names_none(arch, h100, catalog):
    """The catalog's Nemotron-3-Nano config names no mamba_ssm_cache_dtype. NemotronHForCausalLMConfig then picks
    "float16" at v0.19.0 and DEFAULT_MAMBA_SSM_CACHE_DTYPE = "float32" at v0.34.0 (models/config.py). One Mamba-2 state
    at TP 1: conv (64 x 64 + 2 x 8 x 128) x 3 = 18,432 bf16 values + SSM 64 x 64 x 128 = 524,288 values; one attention
    token 2 x 2 x 128 x 2 = 1,024 B. Blocks: 16 x cdiv(1,085,440, 16 x 1,024) = 1,072 (v0.19.0), 64 x cdiv(2,134,016,
    64 x 1,024) = 2,112 (v0.34.0)."""
    def layout(version):
        return engine_budget(arch("nemotron-3-nano-30b-a3b"), Request(context=32768),
                             EngineSettings("vllm", version=version), h100, catalog).layout

    old, new = layout("0.19.0"), layout("0.34.0")
    assert (old.state_bytes, old.block_size) == (18_432 * 2 + 524_288 * 2, 1_072) == (1_085_440, 1_072)
    assert (new.state_bytes, new.block_size) == (18_432 * 2 + 524_288 * 4, 2_112) == (2_134_016, 2_112)


def _sglang_rest(budget) -> int:
    rank = budget.per_rank[0]
    return rank.budget_bytes - rank.weights_bytes


def test_sglang_0523_state_pool_keeps_a_padding_slot_and_five_slots_per_request(arch, h100, catalog):
    """kv_cache_configurator.py @ v0.5.23 _handle_max_mamba_cache: max_mamba_cache_size = (budget - per) // per, the
    pool (max_mamba_cache_size + 1) x per; _calculate_mamba_ratio: 3 + 2 extra_buffer tracking slots = 5. Qwen3-Next at
    TP4: 36 GDN layers of (2 x 16 x 128 + 32 x 128) x 3 / 4 bf16 window + 32 x 128 x 128 / 4 fp32 state = 536,576 B
    each, 19,316,736 B a request; 12 attention layers of 1 x 256 x 2 x 2 B a token (the engine oracle: SGLang's own
    functions give 713 slots, 142 requests and 1,250,147 tokens for the same rest)."""
    request = Request(context=32768, tp=4)
    budget = engine_budget(arch("qwen3-next-80b-a3b"), request, EngineSettings("sglang", version="0.5.23"), h100, catalog)
    per_request = 36 * ((2 * 16 * 128 + 32 * 128) * 3 // 4 * 2 + 32 * 128 * 128 // 4 * 4)
    rest, cell = _sglang_rest(budget), 12 * 1024
    assert per_request == 19_316_736
    slots = (rest * 9 // 19 - per_request) // per_request
    layout = budget.layout
    assert (layout.state_slots, layout.state_pool_bytes) == (slots, (slots + 1) * per_request)
    assert layout.running_requests == slots // 5
    assert budget.kv_cache_capacity_tokens == (rest - (slots + 1) * per_request) // cell
    older = engine_budget(arch("qwen3-next-80b-a3b"), request, EngineSettings("sglang", version="0.5.9"), h100, catalog)
    assert older.layout.running_requests == older.layout.state_slots // 3


def test_sglang_0523_pages_deepseek_sparse_attention_by_64(arch, catalog):
    """model_overrides/deepseek_v2.py:171 @ v0.5.23 sets page_size 64 x index_kpool (1) for DSA; pool_configurator.py
    DefaultPoolConfigurator rounds max_total_num_tokens down to whole pages. DeepSeek-V3.2 at TP8: 61 layers of the
    576-value bf16 latent (1,152 B) + the indexer's 128 fp8 values and one 4 B scale = 1,284 B, 78,324 B a token."""
    card = _card(catalog, "h200-sxm")
    request = Request(context=32768, tp=8)
    budget = engine_budget(arch("deepseek-v3.2"), request, EngineSettings("sglang", version="0.5.23"), card, catalog)
    cell = 61 * (576 * 2 + 128 + 4)
    assert (budget.layout.block_size, budget.layout.page_bytes) == (64, cell)
    assert budget.kv_cache_capacity_tokens == _sglang_rest(budget) // cell // 64 * 64
    older = engine_budget(arch("deepseek-v3.2"), request, EngineSettings("sglang", version="0.5.9"), card, catalog)
    assert older.layout.block_size == 1 and older.kv_cache_capacity_tokens == _sglang_rest(older) // cell


def test_sglang_0523_pools_windows_apart_only_for_its_hybrid_swa_architectures(arch, h100, catalog):
    """is_hybrid_swa_model (configs/model_config.py:2651 @ v0.5.23) lists GptOssForCausalLM, not Gemma 3: gpt-oss-120b's
    18 sliding layers count 0.8 of their 2,048 B a token (8 heads x 64 x K,V x 2 B), the float cell 36,864 + 0.8 x
    36,864 = 66,355.2 B kept unrounded; Gemma 3 27B's 62 layers all take a slot: 62 x 16 x 128 x 2 x 2 = 507,904 B."""
    settings, request = EngineSettings("sglang", version="0.5.23"), Request(context=32768)
    gpt = engine_budget(arch("gpt-oss-120b"), request, settings, h100, catalog)
    assert gpt.layout.page_bytes == 66_355
    assert gpt.kv_cache_capacity_tokens == _sglang_rest(gpt) * 5 // (5 * 36_864 + 4 * 36_864)
    gemma = engine_budget(arch("gemma-3-27b"), request, settings, h100, catalog)
    assert gemma.layout.page_bytes == 507_904
    assert gemma.kv_cache_capacity_tokens == _sglang_rest(gemma) // 507_904
    older = engine_budget(arch("gemma-3-27b"), request, EngineSettings("sglang", version="0.5.9"), h100, catalog)
    assert older.layout.page_bytes < 507_904  # v0.5.9 as modelled before: the sliding layers weighted by 0.8


def test_sglang_0523_serves_a_vision_model_with_a_smaller_fraction_and_an_embedding_cache(arch, h100, catalog):
    """Qwen3.5-27B (a vision tower whose config writes depth 27, not num_hidden_layers, and hidden_size 1152):
    adjust_mem_fraction_for_vlm (arg_groups/memory_hook.py:417 @ v0.5.23) reads 24 layers, complexity 24 x 1152^2 /
    (24 x 1024^2) = 1.265625, factor 0.95 x (1 - 0.1 x 0.265625) = 0.924765625, on the text default 0.83 (13,904 MiB
    reserved of 81,559): 0.76755546875, SGLang's own answer; mm_runtime_reservation_gb keeps 100 MiB off the KV
    budget. Gemma 3 is served text-only by default (mm_disabled_models): neither applies."""
    settings, request = EngineSettings("sglang", version="0.5.23"), Request(context=32768)
    qwen = engine_budget(arch("qwen3.5-27b"), request, settings, h100, catalog)
    assert qwen.settings.mem_fraction_static == 0.83 * (0.95 * (1.0 - 0.1 * (24 * 1152 ** 2 / (24 * 1024 ** 2) - 1.0)))
    layout = qwen.layout
    assert qwen.kv_pool_bytes == _sglang_rest(qwen) - 100 * MiB - layout.state_pool_bytes
    gemma = engine_budget(arch("gemma-3-27b"), request, settings, h100, catalog)
    assert gemma.settings.mem_fraction_static == 0.83 and gemma.kv_pool_bytes == _sglang_rest(gemma)


def test_sglang_0512_pools_gemma_3s_sliding_layers_with_its_full_ones(arch, h100, catalog):
    """SGLang 0.5.10-0.5.13 list their hybrid-SWA architectures (configs/model_config.py:1660-1674 @ v0.5.12) without
    Gemma 3: its sliding layers take a slot per token in the one pool, as at 0.5.23, not a pool of their own."""
    gemma, request = arch("gemma-3-27b"), Request(context=8192)
    budgets = [engine_budget(gemma, request, EngineSettings("sglang", version=v), h100, catalog) for v in ("0.5.12", "0.5.23")]
    assert budgets[0].layout.page_bytes == budgets[1].layout.page_bytes
    assert budgets[0].kv_cache_capacity_tokens == budgets[0].kv_pool_bytes // budgets[0].layout.page_bytes
