"""The performance model: mechanisms (memory-bound decode, MoE expert reads, TP, PP, fixed costs) and a
handful of published measurements within the band bench/throughput_accuracy.py shows the model meets."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from planner.catalog.load import catalog_dir
from planner.model.architecture import architecture_from_config
from planner.errors import PlannerInputError
from planner.estimator.memory import Request, estimate_memory
from planner.estimator.performance import (
    ReplicaPerformance,
    Step,
    Workload,
    causal_positions,
    load_performance_catalog,
    replica_performance,
    replica_timer,
)
from planner.units import GB

from conftest import DATA

CHAT = Workload(prompt_tokens=512, output_tokens=256)
# every sample row is within a band above the 90th percentile of the out-of-sample |TPOT error| that
# bench/throughput_accuracy.py prints (30.9%, each row predicted with its source held out of the fit)
MEASURED_BAND = 0.50


@pytest.fixture(scope="module")
def perf():
    return load_performance_catalog()


def arch(catalog, name):
    return architecture_from_config(catalog.models.get(name).config, name)


def run(catalog, name, gpu="h100-sxm", precision="bf16", kv="auto", tp=1, pp=1, batch=1, workload=CHAT,
        engine="vllm") -> ReplicaPerformance:
    return replica_performance(arch(catalog, name), precision, kv, catalog.gpus.get(gpu), tp, pp, batch, workload,
                               catalog, engine)


def test_bigger_batch_more_tokens_per_second_and_longer_tpot(catalog):
    results = [run(catalog, "llama-3.1-8b", batch=b) for b in (1, 2, 4, 16, 64, 256)]
    for small, large in zip(results, results[1:]):
        assert large.output_tokens_per_s > small.output_tokens_per_s
        assert large.tpot_s > small.tpot_s
        assert large.decode_step_s >= small.decode_step_s
    assert results[0].decode_bound == "memory"
    assert results[-1].decode_compute_s > 10 * results[0].decode_compute_s


def test_batch_one_dense_decode_is_the_weight_read(catalog, perf):
    """Decode at batch 1 streams every block weight and the lm_head once; the embedding is a lookup."""
    model = arch(catalog, "llama-3.1-8b")
    gpu = catalog.gpus.get("h100-sxm")
    r = run(catalog, "llama-3.1-8b")
    weights = estimate_memory(model, Request(context=1, precision="bf16"), catalog).weights_bytes
    embedding = model.vocab_size * model.hidden_size * 2
    assert r.weight_bytes_read == weights - embedding
    bandwidth = gpu.memory_bandwidth_gbps * GB * perf.generation(gpu.generation).memory_efficiency
    assert r.weight_read_s == pytest.approx(r.weight_bytes_read / bandwidth)
    assert r.decode_bound == "memory"
    fixed = r.per_layer_overhead_s + r.allreduce_s
    assert r.decode_step_s == pytest.approx(r.weight_read_s + r.kv_read_s + fixed)
    assert r.kv_read_s < 0.02 * r.weight_read_s  # 640 tokens of GQA cache next to 15 GB of weights
    assert r.tpot_s == r.decode_step_s  # nobody else's prefill to wait for
    assert r.requests_per_s == pytest.approx(r.output_tokens_per_s / CHAT.output_tokens)


def test_moe_reads_only_the_experts_its_tokens_touch(catalog):
    model = arch(catalog, "mixtral-8x7b")
    loaded = estimate_memory(model, Request(context=1, precision="fp8"), catalog).weights_bytes
    one = run(catalog, "mixtral-8x7b", precision="fp8")
    many = run(catalog, "mixtral-8x7b", precision="fp8", batch=512)
    # 2 of 8 experts: a quarter of the expert bytes plus attention, norms and lm_head
    assert one.weight_bytes_read < 0.35 * loaded
    assert many.weight_bytes_read > 0.95 * (loaded - model.vocab_size * model.hidden_size * 2)
    dense_70b = run(catalog, "llama-3.1-70b", precision="fp8", tp=2)
    assert one.decode_step_s < dense_70b.decode_step_s  # 47B stored, 13B active per token


def test_tensor_parallel_splits_the_weight_read_and_adds_all_reduces(catalog):
    by_tp = {tp: run(catalog, "llama-3.1-70b", precision="fp8", tp=tp) for tp in (1, 2, 4, 8)}
    assert by_tp[1].allreduce_s == 0
    for tp in (2, 4, 8):
        assert by_tp[tp].weight_read_s == pytest.approx(by_tp[1].weight_read_s / tp, rel=0.02)
        assert by_tp[tp].allreduce_s > by_tp[tp // 2].allreduce_s
    assert by_tp[8].tpot_s < by_tp[1].tpot_s
    pcie = run(catalog, "llama-3.1-70b", gpu="l40s", precision="fp8", tp=4)
    nvlink = run(catalog, "llama-3.1-70b", gpu="h100-sxm", precision="fp8", tp=4)
    assert pcie.allreduce_s > nvlink.allreduce_s


def test_pipeline_stages_wait_when_the_batch_cannot_fill_them(catalog):
    one = run(catalog, "llama-3.1-70b", precision="fp8", pp=2)
    flat = run(catalog, "llama-3.1-70b", precision="fp8")
    # a lone sequence passes both halves in turn: no faster than one GPU, and each stage idles half the step
    assert one.decode_step_s >= flat.decode_step_s
    assert one.pp_bubble_s == pytest.approx(one.decode_step_s / 2, rel=0.1)
    full = run(catalog, "llama-3.1-70b", precision="fp8", pp=2, batch=2)
    assert full.pp_bubble_s < 0.1 * one.pp_bubble_s
    assert full.output_tokens_per_s > 1.8 * one.output_tokens_per_s


def layer_s(perf, engine, gpu, layers):
    """`layers` layers' fixed GPU time: the engine's kilocycles at the GPU's boost clock."""
    return layers * perf.engine(engine).per_layer_kilocycles * 1e3 / perf.clock_hz(gpu)


def step_s(perf, engine):
    """The engine's own cost once per step (graph launch, sampling, scheduling), in seconds."""
    return perf.engine(engine).per_step_us * 1e-6


def test_fixed_cost_is_gpu_cycles_added_to_the_work(catalog, perf):
    """Every engine's per-layer cost is GPU time (llama.cpp's launches run ahead of the GPU), counted in
    cycles: the same kernels take longer on a lower-clocked GPU; the per-step cost is paid once, whatever the
    layers and the clock."""
    small = run(catalog, "qwen2.5-0.5b", gpu="rtx-4090", precision="fp16", engine="llama.cpp")
    layers = arch(catalog, "qwen2.5-0.5b").num_layers
    layers_s = layer_s(perf, "llama.cpp", "rtx-4090", layers)
    assert small.per_layer_overhead_s == pytest.approx(layers_s + step_s(perf, "llama.cpp"))
    memory = small.weight_read_s + small.kv_read_s
    assert small.decode_step_s == pytest.approx(max(memory, small.decode_compute_s) + small.per_layer_overhead_s)
    # batch-1 decode streams the weights at llama.cpp's own fraction of the bandwidth
    card = catalog.gpus.get("rtx-4090")
    assert small.weight_read_s == pytest.approx(
        small.weight_bytes_read / (card.memory_bandwidth_gbps * 1e9 * perf.engine("llama.cpp").memory_efficiency))
    slower_clock = run(catalog, "qwen2.5-0.5b", gpu="a100-sxm-80gb", precision="fp16", engine="llama.cpp")
    # boost clocks, MHz
    assert slower_clock.per_layer_overhead_s == pytest.approx(layers_s * 2520 / 1410 + step_s(perf, "llama.cpp"))
    graphed = run(catalog, "qwen2.5-0.5b", gpu="rtx-4090", precision="fp16", engine="vllm")
    assert step_s(perf, "vllm") > 0
    assert graphed.per_layer_overhead_s == pytest.approx(layer_s(perf, "vllm", "rtx-4090", layers) + step_s(perf, "vllm"))
    assert graphed.decode_step_s == pytest.approx(
        max(graphed.weight_read_s + graphed.kv_read_s, graphed.decode_compute_s) + graphed.per_layer_overhead_s)


def test_moe_fixed_cost_counts_every_expert_the_weights_only_the_touched(catalog, perf):
    """The fused MoE kernels are sized for all E experts: a MoE layer's fixed cost is the same at batch 1 and
    256, while the weights read are the k experts batch 1 touches, and nearly all E at batch 256."""
    model = arch(catalog, "qwen3-30b-a3b")
    one = run(catalog, "qwen3-30b-a3b", precision="bf16")
    cost = perf.engine("vllm")
    moe_layers = sum(1 for layer in model.layers if layer.is_moe)
    layers = layer_s(perf, "vllm", "h100-sxm", model.num_layers)
    assert one.per_layer_overhead_s == pytest.approx(
        layers + moe_layers * model.moe.num_experts * cost.per_expert_overhead_us * 1e-6 + step_s(perf, "vllm"))
    wide = run(catalog, "qwen3-30b-a3b", precision="bf16", batch=256)
    assert wide.per_layer_overhead_s == pytest.approx(one.per_layer_overhead_s)
    assert wide.weight_bytes_read > 3 * one.weight_bytes_read


def test_mla_latent_cache_is_read_at_its_own_rate(catalog, perf):
    """MLA's latent cache (whole on every rank) is read by MLA's decode kernels, at the generation's
    latent_read_efficiency; a GQA model's paged cache at kv_read_efficiency."""
    gpu = catalog.gpus.get("h200-sxm")
    hopper = perf.generation(gpu.generation)
    assert hopper.latent_read_efficiency != hopper.kv_read_efficiency
    for name, efficiency in (("deepseek-v3", hopper.latent_read_efficiency), ("llama-3.1-70b", hopper.kv_read_efficiency)):
        r = run(catalog, name, gpu="h200-sxm", precision="fp8", tp=8, batch=32, workload=Workload(4000, 200))
        assert r.kv_bytes_read > 0
        assert r.kv_read_s == pytest.approx(r.kv_bytes_read / (gpu.memory_bandwidth_gbps * GB * efficiency), rel=1e-6)


@pytest.mark.parametrize("name,gpu,tp,engine", [
    ("llama-3.1-8b", "rtx-4090", 1, "llama.cpp"), ("llama-3.1-70b", "h100-sxm", 2, "trtllm"),
    ("qwen3-30b-a3b", "a100-sxm-80gb", 1, "vllm"), ("deepseek-v3", "h200-sxm", 8, "sglang"),
    ("llama-3.1-405b", "mi300x", 8, "vllm")])
def test_step_time_never_falls_as_a_step_carries_more(catalog, name, gpu, tp, engine):
    """Physical step times: more running sequences, a longer context or more prompt tokens never take less time."""
    timer = replica_timer(arch(catalog, name), "fp8", "auto", catalog.gpus.get(gpu), tp, 1, catalog, engine)
    batches = [1, 2, 3, 4, 8, 16, 31, 64, 128, 256, 512]
    prompts = [0, 1, 16, 100, 512, 1000, 2048, 4096, 8192, 16384]
    for context in (1.0, 2000.0, 30000.0):
        by_batch = [timer.step_s(Step(b, context)) for b in batches]
        assert by_batch == sorted(by_batch), (context, by_batch)
    by_context = [timer.step_s(Step(8, c)) for c in (1.0, 100.0, 1000.0, 10000.0, 100000.0)]
    assert by_context == sorted(by_context)
    for decode in (0, 1, 32):
        by_prompt = [timer.step_s(Step(decode, 2000.0, p, causal_positions(p), 1 if p else 0)) for p in prompts]
        assert by_prompt == sorted(by_prompt), (decode, by_prompt)


def test_prefill_grows_faster_than_the_prompt(catalog):
    """Attention's quadratic term: doubling a long prompt more than doubles its prefill."""
    short = run(catalog, "llama-3.1-8b", workload=Workload(16_384, 16))
    long = run(catalog, "llama-3.1-8b", workload=Workload(32_768, 16))
    assert long.prefill_s > 2.1 * short.prefill_s
    assert long.ttft_s == long.prefill_s


def test_low_bit_tensor_cores_only_where_the_gpu_has_them(catalog):
    """fp8 prefill runs W8A8 on Hopper, weight-only (16-bit math) on Ampere."""
    long = Workload(8192, 16)
    h100 = {p: run(catalog, "llama-3.1-8b", precision=p, workload=long) for p in ("bf16", "fp8")}
    a100 = {p: run(catalog, "llama-3.1-8b", gpu="a100-sxm-80gb", precision=p, workload=long) for p in ("bf16", "fp8")}
    assert h100["fp8"].prefill_s < 0.7 * h100["bf16"].prefill_s
    assert a100["fp8"].prefill_s == pytest.approx(a100["bf16"].prefill_s, rel=0.05)


def test_rejects_bad_input(catalog):
    with pytest.raises(PlannerInputError, match="workload"):
        run(catalog, "llama-3.1-8b", workload=Workload(0, 10))
    with pytest.raises(PlannerInputError, match="engine"):
        run(catalog, "llama-3.1-8b", engine="nope")
    with pytest.raises(PlannerInputError, match="tp"):
        run(catalog, "llama-3.1-8b", tp=3)


def test_every_factor_names_its_source(perf):
    for entry in (*perf.generations, *perf.engines):
        assert entry.fitted_to and entry.source
    for entry in (*perf.interconnects, *perf.precisions, *perf.clocks):
        assert entry.source
    assert perf.generation("volta") == perf.generation("default")  # no measurement: the default
    assert perf.clock_hz("t4") == perf.clock_hz("default")  # clock not listed: the default


def test_no_read_is_faster_than_the_measured_ceiling(catalog, perf, tmp_path):
    """Every read efficiency stays within its generation's measured read ceiling: the catalog refuses a factor
    above it, and an engine's own streaming fraction (llama.cpp's) is held to it on a generation whose ceiling
    is lower."""
    for generation in perf.generations:
        assert 0 < generation.read_ceiling < 1 and generation.read_ceiling_source and generation.as_of
        assert max(generation.read_efficiencies.values()) <= generation.read_ceiling
    mi300x = catalog.gpus.get("mi300x")
    ceiling = perf.generation(mi300x.generation).read_ceiling
    assert perf.engine("llama.cpp").memory_efficiency > ceiling  # so that the ceiling is what binds below
    r = run(catalog, "llama-3.1-8b", gpu="mi300x", precision="fp16", engine="llama.cpp")
    assert r.memory_efficiency == pytest.approx(ceiling)
    assert r.weight_read_s == pytest.approx(r.weight_bytes_read / (mi300x.memory_bandwidth_gbps * GB * ceiling))
    text = (Path(catalog_dir()) / "performance.yaml").read_text()
    (tmp_path / "performance.yaml").write_text(text.replace("    kv_read_efficiency: 0.84\n", "    kv_read_efficiency: 0.9\n", 1))
    with pytest.raises(PlannerInputError, match=r"generations\[ampere\]\.kv_read_efficiency 0.9 is above"):
        load_performance_catalog(str(tmp_path))


def test_size_only_model(catalog):
    model = replace(arch(catalog, "llama-3.1-8b"), exact=False, declared_params=8_000_000_000)
    r = replica_performance(model, "fp8", "auto", catalog.gpus.get("h100-sxm"), 1, 1, 1, CHAT, catalog)
    assert r.weight_bytes_read == 8 * GB
    assert r.decode_bound == "memory"
    # weights files read (a GGUF): their exact bytes, unless another precision is asked for
    stored = replace(model, stored_bytes=4_900_000_000, stored_precision="q4_k_m")
    h100 = catalog.gpus.get("h100-sxm")
    assert replica_performance(stored, "auto", "auto", h100, 1, 1, 1, CHAT, catalog).weight_bytes_read == 4_900_000_000
    assert replica_performance(stored, "fp8", "auto", h100, 1, 1, 1, CHAT, catalog).weight_bytes_read == 8 * GB


SAMPLE = [json.loads(line) for line in (DATA / "throughput-sample.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("point", SAMPLE, ids=[f"row{p['row']}-{p['engine']}-{p['model']}" for p in SAMPLE])
def test_published_measurements(catalog, point):
    r = run(catalog, point["model"], gpu=point["gpu"], precision=point["precision"], kv=point["kv_dtype"],
            tp=point["tp"], pp=point["pp"], batch=point["batch"], engine=point["engine"],
            workload=Workload(point["prompt_tokens"], point["output_tokens"]))
    if point["output_tokens_per_s"]:
        assert r.output_tokens_per_s == pytest.approx(point["output_tokens_per_s"], rel=MEASURED_BAND)
    if point["tpot_s"]:
        assert r.tpot_s == pytest.approx(point["tpot_s"], rel=MEASURED_BAND)
