"""Engine profiles: vLLM v0.19 against its measured start-ups, and each engine's mechanisms by hand."""

import importlib.util
import json
import sys
from dataclasses import replace
from math import ceil
from pathlib import Path

import pytest

from planner.model.architecture import architecture_from_config
from planner.catalog.load import catalog_dir
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.engines.profiles import PROFILES_FILE, load_profiles
from planner.errors import PlannerInputError
from planner.estimator.memory import GpuTarget, Request, estimate_memory
from planner.units import GiB, MiB

from conftest import CONFIGS
from engine_fixtures import arch, h100  # noqa: F401  (fixtures)

BENCH = Path(__file__).resolve().parents[1] / "bench" / "accuracy.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_accuracy", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


accuracy = _bench()
V019_POINTS = [p for p in accuracy.all_points() if p.current]


def vllm(**settings):
    return EngineSettings(name="vllm", version="0.19.0", **settings)


# --- vLLM v0.19 on H100: the tolerances ---------------------------------------------------

def test_the_bench_replays_all_28_v019_points():
    assert len(V019_POINTS) == 28


@pytest.mark.parametrize("point", V019_POINTS, ids=lambda p: f"v019-{p.index}-{p.label}")
def test_v019_point_within_tolerance(point, catalog):
    comparisons = {c.metric: c for c in accuracy.compare([point], catalog)}
    for metric, tolerance in accuracy.TOLERANCES.items():
        assert abs(comparisons[metric].error) <= tolerance, (metric, comparisons[metric])
    # the token count vLLM logs follows from the pool in whole 16-token blocks
    assert abs(comparisons["kv_tokens"].error) <= accuracy.TOLERANCES["kv_pool"]


@pytest.mark.parametrize("index, metric, tolerance", [
    (34, "kv_tokens", 0.005),  # SGLang 0.4.1, Llama-3.1-8B, mem_fraction_static 0.88: 444,500 tokens
    (33, "kv_tokens", 0.05),  # SGLang 0.4.3, QwQ-32B tp 4 on L4 (weights logged 1.8% above planner's count)
    (38, "kv_buffer_mib", 0), (38, "compute_mib", 0.001), (39, "compute_mib", 0),  # llama.cpp Llama-2-7B
    (40, "kv_buffer_mib", 0), (40, "compute_mib", 0),  # llama.cpp Llama-3.1-8B, 4 sequences
    (43, "kv_buffer_mib", 0), (44, "kv_buffer_mib", 0),  # GLM-4-32B; gpt-oss-120b sliding + full caches
    # vLLM v0.19.0 Qwen3.5-27B hybrid: the layout's tokens per request; -3.6% while the SSM state is counted in the
    # model dtype (the config asks float32; +0.2% once the Architecture holds the state dtype, see test_hybrid_engines)
    (51, "tokens_per_request", 0.04),
])
def test_other_engines_points(index, metric, tolerance, catalog):
    point = next(p for p in accuracy.VARIOUS_POINTS if p.index == index)
    comparison = next(c for c in accuracy.compare([point], catalog) if c.metric == metric)
    assert abs(comparison.error) <= tolerance, comparison


def test_measured_values_take_the_smallest_worker_pool():
    record = accuracy._records(accuracy.V019_FILE)[10]  # pp 2: the stages report 65.63 and 66.54 GiB
    assert accuracy.measured_values(record)["kv_pool"] == 65.63


# --- vLLM mechanisms -----------------------------------------------------------------------------

def test_budget_is_utilization_times_the_total_cuda_reports(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), vllm(gpu_memory_utilization=0.95), h100, catalog)
    visible = h100.memory_bytes - 468 * MiB  # nvidia-smi 81,559 MiB, CUDA 79.19 GiB
    assert round(visible / GiB, 2) == 79.19
    assert budget.budget_bytes == int(visible * 0.95)
    assert budget.gpu_memory_utilization == 0.95
    assert budget.kv_pool_bytes == (budget.budget_bytes - budget.weights_bytes - budget.activation_bytes
                                    - budget.non_torch_bytes)


def test_pool_is_whole_blocks_and_concurrency_is_blocks_per_request(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), vllm(), h100, catalog)
    page = 16 * 8 * 128 * 2 * 2  # 16 tokens x 8 KV heads x 128 x K,V x bf16
    blocks = budget.kv_pool_bytes // (page * 32)
    assert budget.kv_cache_capacity_tokens == blocks * 16
    assert budget.max_concurrency == blocks / (8192 // 16)
    assert budget.settings.gpu_memory_utilization == 0.9  # vLLM's default


def test_batch_defaults_follow_the_gpu(arch, catalog):
    llama = arch("llama-3.1-8b")
    for gpu, expected in (("h100-sxm", (8192, 1024)), ("a100-sxm-80gb", (2048, 256)), ("l40s", (2048, 256))):
        target = GpuTarget.from_catalog(catalog.gpus.get(gpu))
        settings = engine_budget(llama, Request(context=4096), vllm(), target, catalog).settings
        assert (settings.max_num_batched_tokens, settings.max_num_seqs) == expected, gpu


def test_sampler_peak_scales_with_max_num_seqs_times_vocab(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    many = engine_budget(llama, Request(context=8192), vllm(max_num_seqs=1024), h100, catalog)
    few = engine_budget(llama, Request(context=8192), vllm(max_num_seqs=512), h100, catalog)
    # bf16 logits + fp32 logits, probs and noise: 14 B per logit for 512 fewer sequences
    assert many.activation_bytes - few.activation_bytes == 512 * 128_256 * 14
    assert few.kv_pool_bytes - many.kv_pool_bytes == 512 * 128_256 * 14


def test_forward_pass_sets_the_peak_for_a_small_vocabulary(h100, catalog):
    codellama = architecture_from_config(accuracy.CODELLAMA_7B, "codellama-7b")
    budget = engine_budget(codellama, Request(context=8192), vllm(), h100, catalog)
    tokens, hidden, inter = 8192, 4096, 11008
    assert budget.activation_bytes == 2 * tokens * (4 * hidden + 3 * inter)


def test_tensor_parallel_non_torch_memory_depends_on_the_interconnect(arch, catalog):
    llama = arch("llama-3.1-8b")
    nvlink = GpuTarget.from_catalog(catalog.gpus.get("h100-sxm"))
    pcie = GpuTarget.from_catalog(catalog.gpus.get("l40s"))
    assert engine_budget(llama, Request(context=4096, tp=2), vllm(), nvlink, catalog).non_torch_bytes == 2115 * MiB
    assert engine_budget(llama, Request(context=4096, tp=8), vllm(), nvlink, catalog).non_torch_bytes == 2181 * MiB
    assert engine_budget(llama, Request(context=4096, tp=4), vllm(), pcie, catalog).non_torch_bytes == 205 * MiB
    assert engine_budget(llama, Request(context=4096), vllm(), pcie, catalog).non_torch_bytes == 256 * MiB


def test_pipeline_stages_share_the_smallest_block_count(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192, pp=2), vllm(), h100, catalog)
    first, last = budget.per_rank
    assert last.activation_bytes > first.activation_bytes  # the sampler runs on the last stage
    assert budget.kv_cache_capacity_tokens == min(first.kv_capacity_tokens, last.kv_capacity_tokens)


def test_fp8_cache_doubles_the_tokens(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    auto = engine_budget(llama, Request(context=8192), vllm(), h100, catalog)
    fp8 = engine_budget(llama, Request(context=8192, kv_dtype="fp8"), vllm(), h100, catalog)
    assert fp8.kv_pool_bytes == auto.kv_pool_bytes
    assert fp8.kv_cache_capacity_tokens // 16 == fp8.kv_pool_bytes // (16 * 8 * 128 * 2 * 32)


def test_sliding_layers_reserve_window_plus_batched_tokens(arch, h100, catalog):
    oss = arch("gpt-oss-20b")  # 12 sliding (window 128) + 12 full layers: two groups of 12
    budget = engine_budget(oss, Request(context=131072), vllm(), h100, catalog)
    page = 16 * 8 * 64 * 2 * 2
    blocks = budget.kv_pool_bytes // (page * 12)
    full = ceil(131072 / 16)
    sliding = ceil(min(128 - 1 + 8192, 131072) / 16) + 1
    assert budget.kv_cache_capacity_tokens == blocks // 2 * 16
    assert budget.max_concurrency == blocks / (full + sliding)


def test_hybrid_groups_pad_to_the_fewest_layers(catalog, h100):
    gemma = architecture_from_config(json.loads((CONFIGS / "gemma-3-27b-it" / "config.json").read_text()), "g3")
    kinds = [layer.attention.kind for layer in gemma.layers]
    assert (kinds.count("sliding"), kinds.count("full")) == (52, 10)
    budget = engine_budget(gemma, Request(context=32768), vllm(), h100, catalog)
    page = 16 * 16 * 128 * 2 * 2
    blocks = budget.kv_pool_bytes // (page * 10)  # groups of 10 layers: 1 full + 6 sliding (the last padded)
    assert budget.kv_cache_capacity_tokens == blocks // 7 * 16


def test_mla_pages_hold_the_latent_in_64_token_blocks(arch, h100, catalog):
    lite = arch("deepseek-v2-lite")
    budget = engine_budget(lite, Request(context=8192), vllm(), h100, catalog)
    assert budget.settings.block_size == 64
    blocks = budget.kv_pool_bytes // (64 * 576 * 2 * 27)
    assert budget.kv_cache_capacity_tokens == blocks * 64


def test_one_request_too_long_is_refused_as_vllm_says_it(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    budget = engine_budget(llama, Request(context=1_000_000), vllm(), h100, catalog)
    assert not budget.fits
    assert budget.message.startswith("To serve at least one request with the models's max seq len (1000000)")
    longest = budget.max_context_that_fits
    assert f"estimated maximum model length is {longest}." in budget.message
    assert engine_budget(llama, Request(context=longest), vllm(), h100, catalog).fits
    assert not engine_budget(llama, Request(context=longest + 1), vllm(), h100, catalog).fits


def test_more_sequences_than_the_pool_holds_do_not_fit(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=131072, batch=8), vllm(), h100, catalog)
    assert budget.max_concurrency < 8 and not budget.fits
    assert "Maximum concurrency for 131,072 tokens per request" in budget.message
    assert budget.max_context_that_fits is None


def test_utilization_above_the_free_memory_stops_start_up(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    single = engine_budget(llama, Request(context=8192), vllm(gpu_memory_utilization=0.99), h100, catalog)
    assert single.fits and "CUDA graphs" in single.warnings[0]
    split = engine_budget(llama, Request(context=8192, tp=2), vllm(gpu_memory_utilization=0.99), h100, catalog)
    assert not split.fits and split.message.startswith("Free memory on device (77.70/79.19 GiB) on startup")
    eager = engine_budget(llama, Request(context=8192), vllm(gpu_memory_utilization=0.99, enforce_eager=True), h100, catalog)
    assert eager.cuda_graph_bytes == 0 and eager.warnings == ()


def test_no_memory_left_for_the_cache(arch, catalog):
    card = GpuTarget.from_catalog(catalog.gpus.get("rtx-4080"))  # 16 GB: 0.9 of it is below 16.06 GB of weights
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=4096, precision="bf16"), vllm(), card, catalog)
    assert not budget.fits and budget.kv_pool_bytes == 0 and budget.max_concurrency == 0
    assert budget.message.startswith("No available memory for the cache blocks")


def test_vllm_refuses_fewer_batched_tokens_than_sequences(arch, h100, catalog):
    with pytest.raises(PlannerInputError, match="max_num_batched_tokens"):
        engine_budget(arch("llama-3.1-8b"), Request(context=4096), vllm(max_num_batched_tokens=512), h100, catalog)


# --- SGLang --------------------------------------------------------------------------------------

def test_sglang_default_fraction_from_its_reserve_heuristic(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    budget = engine_budget(llama, Request(context=8192), EngineSettings(name="sglang", version="0.5.9"), h100, catalog)
    # 512 + 8192 x 1.5 + 256 x 2 + 128 MiB = 13,440 MiB reserved of 81,559
    assert budget.settings.mem_fraction_static == round((81559 - 13440) / 81559, 3) == 0.835
    card = GpuTarget.from_catalog(catalog.gpus.get("rtx-4090"))
    small = engine_budget(llama, Request(context=8192, precision="fp8"), EngineSettings(name="sglang", version="0.5.9"), card, catalog)
    assert (small.settings.max_num_batched_tokens, small.settings.max_num_seqs) == (2048, 24)
    assert small.settings.mem_fraction_static == round((24564 - (512 + 3072 + 48 + 128)) / 24564, 3)


def test_sglang_pool_is_fraction_of_free_memory_minus_weights(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=131072), EngineSettings(name="sglang", version="0.5.9", mem_fraction_static=0.88),
                           h100, catalog)
    total = h100.memory_bytes - 468 * MiB - 522 * MiB
    assert budget.budget_bytes == int(total * 0.88)
    assert budget.kv_pool_bytes == budget.budget_bytes - budget.weights_bytes
    assert budget.kv_cache_capacity_tokens == budget.kv_pool_bytes // 131_072  # page size 1: whole tokens
    assert "above SGLang's own default" in budget.warnings[0]


def test_sglang_context_longer_than_the_pool(arch, catalog):
    card = GpuTarget.from_catalog(catalog.gpus.get("l4"))
    budget = engine_budget(arch("qwen2.5-32b"), Request(context=131072, tp=4), EngineSettings(name="sglang", version="0.5.9", mem_fraction_static=0.85),
                           card, catalog)
    assert not budget.fits and budget.max_context_that_fits == budget.kv_cache_capacity_tokens < 131072


# --- llama.cpp -----------------------------------------------------------------------------------

def llamacpp(**settings):
    return EngineSettings(name="llamacpp", **settings)


def test_llamacpp_cache_compute_and_weights_match_its_logs(arch, catalog):
    big = GpuTarget("80 GB", 80 * GiB)
    llama2 = engine_budget(arch("llama-2-7b"), Request(context=2048, precision="fp16"), llamacpp(flash_attn=False), big, catalog)
    assert llama2.kv_pool_bytes == 1024 * MiB  # "KV self size = 1024.00 MiB"
    assert llama2.activation_bytes == 164 * MiB  # "CUDA0 compute buffer size = 164.00 MiB"
    assert round(llama2.weights_bytes / MiB, 1) == 12602.5  # "CUDA0 buffer size = 12603.02 MiB" (embeddings on the host)
    assert llama2.host_bytes >= 32000 * 4096 * 2  # the token embeddings stay in RAM
    llama3 = engine_budget(arch("llama-3.1-8b"), Request(context=2048, batch=4, precision="q4_k_m"), llamacpp(flash_attn=False),
                           big, catalog)
    assert llama3.kv_pool_bytes == 1024 * MiB and llama3.activation_bytes == 560 * MiB


def test_llamacpp_pads_cells_and_sizes_sliding_layers_by_window(arch, catalog):
    big = GpuTarget("200 GB", 200 * GiB)
    padded = engine_budget(arch("llama-3.1-8b"), Request(context=1000), llamacpp(), big, catalog)
    assert padded.kv_cache_capacity_tokens == 1024
    oss = engine_budget(arch("gpt-oss-120b"), Request(context=131072, batch=2, precision="mxfp4"), llamacpp(n_batch=1024, n_ubatch=1024),
                        big, catalog)
    assert oss.kv_pool_bytes == (9216 + 90) * MiB  # 18 full layers x 2 x 131072 cells + 18 SWA layers x 2 x 1280


def test_llamacpp_keeps_a_full_cache_for_phi3_despite_its_window(arch, catalog):
    """llama.cpp turns Phi-3's sliding window off at load ("Phi SWA is currently disabled"): every one of its 32
    layers keeps 4,096 cells of K and V (3,072 f16 values each), the 1,536 MiB of the log replayed in bench/accuracy.py
    (engine-logs-various.jsonl row 41); planner's other engines still read the window."""
    phi3 = arch("phi-3-mini")
    assert any(layer.attention.kind == "sliding" for layer in phi3.layers)
    big = GpuTarget("80 GB", 80 * GiB)
    budget = engine_budget(phi3, Request(context=4096, precision="q4_k_m"), llamacpp(), big, catalog)
    assert budget.kv_pool_bytes == 32 * 4096 * 2 * 3072 * 2 == 1536 * MiB


def test_llamacpp_quantized_cache(arch, catalog):
    big = GpuTarget("80 GB", 80 * GiB)
    llama = arch("llama-3.1-8b")
    f16 = engine_budget(llama, Request(context=8192), llamacpp(cache_type="f16"), big, catalog).kv_pool_bytes
    q8 = engine_budget(llama, Request(context=8192), llamacpp(cache_type="q8_0"), big, catalog).kv_pool_bytes
    q4 = engine_budget(llama, Request(context=8192), llamacpp(cache_type="q4_0"), big, catalog).kv_pool_bytes
    assert (q8 * 64, q4 * 64) == (f16 * 34, f16 * 18)


def test_llamacpp_fit_leaves_layers_in_system_ram(arch, catalog):
    card = GpuTarget.from_catalog(catalog.gpus.get("rtx-4090"))
    seventy = arch("llama-3.1-70b")
    budget = engine_budget(seventy, Request(context=8192, precision="q4_k_m"), llamacpp(), card, catalog)
    assert 0 < budget.gpu_layers < budget.total_layers == 81 and not budget.fits
    assert budget.host_bytes > 20 * GiB and "--fit would keep" in budget.message
    used = budget.weights_bytes + budget.kv_pool_bytes + budget.activation_bytes
    assert used <= budget.budget_bytes == card.memory_bytes - (468 + 522 + 1024) * MiB
    one_more = engine_budget(seventy, Request(context=8192, precision="q4_k_m"), llamacpp(n_gpu_layers=budget.gpu_layers + 1),
                             card, catalog)
    assert not one_more.fits
    split = engine_budget(seventy, Request(context=8192, precision="q4_k_m", pp=2), llamacpp(), card, catalog)
    assert split.fits and split.gpu_layers == 81 and [r.layers for r in split.per_rank] == [41, 40]


def test_llamacpp_all_layers_on_the_host(arch, catalog):
    card = GpuTarget.from_catalog(catalog.gpus.get("rtx-4090"))
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=4096), llamacpp(n_gpu_layers=0), card, catalog)
    assert budget.gpu_layers == 0 and budget.fits and budget.weights_bytes == 0 and budget.kv_pool_bytes == 0
    assert budget.host_bytes > 16_060_522_496  # every weight and the whole cache


# --- simple, settings, profiles --------------------------------------------------------------------

def test_simple_engine_is_the_seed_margin(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    request = Request(context=8192, batch=4)
    budget = engine_budget(llama, request, EngineSettings(name="simple"), h100, catalog)
    estimate = estimate_memory(llama, request, catalog, h100)
    assert budget.fits == estimate.gpu.fits and budget.weights_bytes == estimate.per_gpu[0].weights_bytes
    assert budget.kv_pool_bytes == h100.memory_bytes * 10 // 11 - budget.weights_bytes
    full = replace(request, batch=int(budget.max_concurrency))
    assert estimate_memory(llama, full, catalog, h100).gpu.fits
    assert not estimate_memory(llama, replace(full, batch=full.batch + 1), catalog, h100).gpu.fits


@pytest.mark.parametrize("settings, message", [
    (EngineSettings(name="trt"), "unknown engine"),
    (EngineSettings(gpu_memory_utilization=1.5), "--gpu-memory-utilization"),
    (EngineSettings(name="sglang", version="0.5.9", mem_fraction_static=0), "--mem-fraction-static"),
    (EngineSettings(max_num_seqs=0), "--max-num-seqs"),
    (EngineSettings(name="llamacpp", cache_type="q3"), "--cache-type"),
    (EngineSettings(name="llamacpp", n_gpu_layers=-1), "--n-gpu-layers"),
])
def test_bad_settings_are_refused(settings, message, arch, h100, catalog):
    with pytest.raises(PlannerInputError, match=message):
        engine_budget(arch("llama-3.1-8b"), Request(context=4096), settings, h100, catalog)


def test_every_profile_constant_names_its_source():
    profiles = load_profiles()
    sections = [profiles.cuda] + [profile for engine in (profiles.vllm, profiles.sglang, profiles.llamacpp)
                                  for profile in engine.versions.values()]
    for section in sections:
        for name, value in section:
            if value is None:  # a mechanism the release does not have (vLLM 0.19's extensible KV cache)
                continue
            if name != "release":
                assert len(value.source) > 20, name


def test_profiles_reject_unknown_keys(tmp_path):
    text = (catalog_dir() / PROFILES_FILE).read_text()
    (tmp_path / PROFILES_FILE).write_text(text.replace('    "0.34.0":\n', '    "0.34.0":\n      gpu_memory_utilisation: 0.9\n', 1))
    with pytest.raises(PlannerInputError, match="gpu_memory_utilisation"):
        load_profiles(str(tmp_path))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_headroom_is_the_pool_the_batch_leaves_free(engine, arch, h100, catalog):
    """Both engines size one KV pool inside what they take of the card; what is left over for a batch is that pool
    minus the batch's KV. SGLang's activations and non-torch memory sit outside mem_fraction_static (in the rest of
    the card), so counting them on top of that rest, as the headroom once did, made fitting plans look 4 GB over."""
    from planner.estimator.engines.need import engine_need

    model = arch("llama-3.1-8b")
    request = Request(context=8192, batch=4, precision="bf16", kv_dtype="auto")
    need = engine_need(model, request, EngineSettings(engine), h100, catalog)
    per_sequence = max(r.kv_cache_bytes for r in estimate_memory(model, replace(request, batch=1), catalog).per_gpu)
    assert need.fits
    assert need.headroom_bytes(h100.memory_bytes) == need.budget.kv_pool_bytes - 4 * per_sequence


def test_memoised_estimate_tells_apart_a_quantization_config(arch, catalog):
    """estimate_once memoises by the Architecture, whose equality leaves out quantization_config: an `auto`
    precision read from it must still come from each model's own config."""
    from planner.estimator.engines.base import estimate_once
    plain = arch("llama-3.1-8b")
    quantized = replace(plain, quantization_config={"quant_method": "fp8"})
    request = Request(context=4096)
    assert estimate_once(plain, request, catalog).precision == estimate_memory(plain, request, catalog).precision
    assert estimate_once(quantized, request, catalog).precision == estimate_memory(quantized, request, catalog).precision
    assert estimate_once(plain, request, catalog).precision != estimate_once(quantized, request, catalog).precision
