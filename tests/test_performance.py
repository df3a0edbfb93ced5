"""The performance model: mechanisms (memory-bound decode, MoE expert reads, TP, PP, fixed costs) and a
handful of published measurements within the band bench/throughput_accuracy.py shows the model meets."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from planner.catalog.load import catalog_dir
from planner.model.architecture import architecture_from_config
from planner.errors import PlannerInputError
from planner.estimator.performance import (
    ReplicaPerformance,
    Step,
    Workload,
    _attention_flops_per_position,
    causal_positions,
    load_performance_catalog,
    replica_performance,
    replica_timer,
    timer_performance,
)
from planner.units import GB

from conftest import CONFIGS, DATA, without_delta_prefill

CHAT = Workload(prompt_tokens=512, output_tokens=256)
# every sample row within 50%: nothing is fitted to any row (bench/SPEED_PROTOCOL.md)
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
    # the GEMMs' compute at 256 rows against 1: (256 + half_m) / (1 + half_m), ~8x on Hopper (half_m 36)
    assert results[-1].decode.compute_s > 5 * results[0].decode.compute_s


def hardware(perf, gpu, kernel_format="bf16", engine="vllm"):
    generation = perf.generation(gpu.generation)
    return generation, generation.gemm_rates(kernel_format, engine), gpu.memory_bandwidth_gbps * GB


def test_a_step_is_the_sum_of_its_terms(catalog):
    for name, gpu, tp, batch in (("llama-3.1-8b", "h100-sxm", 1, 1), ("qwen3-30b-a3b", "b200", 2, 64),
                                 ("deepseek-v3", "h200-sxm", 8, 16)):
        r = run(catalog, name, gpu=gpu, precision="fp8", tp=tp, batch=batch)
        assert r.decode_step_s == pytest.approx(sum(r.decode.terms_s().values()))
        assert set(r.decode.terms_s()) == {"dense_gemm", "moe", "attention", "kernel_launch", "engine_step",
                                           "allreduce", "eager_host"}


def test_batch_one_dense_decode_is_the_weight_read_by_hand(catalog, perf):
    """Batch 1 streams every block weight and the lm_head once (the embedding is a lookup) at the bf16 GEMMs'
    measured read efficiency; the fixed costs are the kernels a Llama layer launches, counted by hand."""
    model = arch(catalog, "llama-3.1-8b")
    gpu = catalog.gpus.get("h100-sxm")
    generation, bf16, bandwidth = hardware(perf, gpu)
    r = run(catalog, "llama-3.1-8b")
    matmuls = [t for layer in model.layers for t in layer.tensors if t.role == "linear" and len(t.shape) == 2]
    assert r.decode.weight_bytes == 2 * (sum(t.numel for t in matmuls) + model.vocab_size * model.hidden_size)
    assert r.decode.dense_gemm_s == pytest.approx(r.decode.weight_bytes / (bandwidth * bf16.read_efficiency))
    assert r.decode_bound == "memory"
    # per layer: 4 GEMMs (fused QKV, o_proj, fused gate_up, down_proj), one attention kernel, 5 small kernels;
    # and the lm_head's GEMM
    vllm = perf.engine("vllm")
    layers = model.num_layers
    attention = generation.attention_rates(16, "vllm")
    by_hand = (layers * 4 + 1) * bf16.launch_us + layers * (vllm.layer_kernels * generation.kernel_floor_us
                                                            + attention.launch_us)
    assert r.decode.kernel_launch_s == pytest.approx(by_hand * 1e-6)
    assert r.decode.engine_step_s == pytest.approx(vllm.overlapped_step_us * 1e-6)  # the default release: async
    assert r.decode.attention_s == pytest.approx(r.decode.kv_bytes / (bandwidth * attention.kv_read_efficiency))
    assert r.decode.allreduce_s == 0 and r.decode.moe_s == 0
    assert r.tpot_s == r.decode_step_s  # nobody else's prefill to wait for
    assert r.requests_per_s == pytest.approx(r.output_tokens_per_s / CHAT.output_tokens)


def moe_by_hand(gpu, rates, moe_layers: int, touched: float, rows: float, expert_params: float, weight_bytes: float,
                columns: float, hidden: int, peak: str = "bf16") -> float:
    """A decode step's fused-MoE seconds as the speed model's formula gives them (bench/SPEED_PROTOCOL.md, the
    amendments on expert slices, the tiles' overlap and the routed rows' activation traffic): the larger of the
    touched experts' weight read with the rows' 16-bit input and outputs (hidden + columns) activation_passes times,
    and their compute at compute_eff x rows / (rows + touched x half_m) plus the tiles' fixed cost per output column."""
    moved = (touched * expert_params * weight_bytes + rows * 2 * (hidden + columns) * rates.activation_passes)
    read = moe_layers * moved / (gpu.memory_bandwidth_gbps * GB * rates.read_efficiency)
    compute = moe_layers * 2 * expert_params * (rows + touched * rates.half_m) / (
        gpu.dense_tflops[peak] * 1e12 * rates.compute_efficiency)
    tiles = touched * moe_layers * columns * rates.column_ps * 1e-12
    return max(read, compute + tiles)


def test_compute_grows_with_rows_from_a_padded_tile(catalog, perf):
    """A GEMM's compute at M rows runs at compute_eff x M / (M + half_m): 2 W (M + half_m) / (R x compute_eff);
    the lm_head computes the one position whose logits are taken; the prefill attention kernel, with no earlier
    position to attend, its M query rows' own cost, row_positions positions each at every layer."""
    gpu = catalog.gpus.get("h100-sxm")
    _, bf16, _ = hardware(perf, gpu)
    hopper = perf.generation("hopper")
    model = arch(catalog, "llama-3.1-8b")
    timer = replica_timer(model, "bf16", "auto", gpu, 1, 1, catalog)
    params = sum(t.numel for layer in model.layers for t in layer.tensors if t.role == "linear" and len(t.shape) == 2)
    lm_head = model.vocab_size * model.hidden_size
    rate = gpu.dense_tflops["bf16"] * 1e12 * bf16.compute_efficiency
    row_flops = 32 * 2 * 32 * (128 + 128) * hopper.prefill_attention_row_positions  # 32 layers of 32 heads
    attention_rate = gpu.dense_tflops["bf16"] * 1e12 * hopper.engines["vllm"].prefill_attention_compute_efficiency
    for m in (1, 512, 8192):
        _, terms, _ = timer.step(Step(0, 0.0, m, 0.0, 1))
        expected = (2 * params * (m + bf16.half_m) / rate + 2 * lm_head * (1 + bf16.half_m) / rate
                    + m * row_flops / attention_rate)
        assert terms.compute_s == pytest.approx(expected, rel=1e-6)


def test_moe_reads_the_experts_its_tokens_touch_by_hand(catalog, perf):
    """Of E experts with k picked per token, T tokens touch E (1 - (1 - k/E)^T) on average: batch 1 reads k
    experts of every MoE layer, batch 2 reads E (1 - (1 - k/E)^2)."""
    model = arch(catalog, "qwen3-30b-a3b")
    E, k = model.moe.num_experts, model.moe.experts_per_token
    moe_layers = sum(1 for layer in model.layers if layer.is_moe)
    one_expert = sum(t.numel // t.count for t in model.layers[0].tensors if t.role == "expert") * 2  # bf16
    by_batch = {b: run(catalog, "qwen3-30b-a3b", batch=b) for b in (1, 2, 512)}
    dense = by_batch[1].decode.weight_bytes - k * moe_layers * one_expert
    for batch in (1, 2):
        touched = E * (1 - (1 - k / E) ** batch)
        assert by_batch[batch].decode.weight_bytes == pytest.approx(dense + touched * moe_layers * one_expert, rel=1e-6)
    assert by_batch[512].decode.weight_bytes == pytest.approx(dense + E * moe_layers * one_expert, rel=1e-3)
    gpu = catalog.gpus.get("h100-sxm")
    generation = perf.generation(gpu.generation)
    moe = generation.moe_rates("bf16", "vllm")
    # each touched expert's output columns: gate and up (moe_intermediate_size each) and down (hidden_size)
    columns = 2 * model.moe.expert_intermediate_size + model.hidden_size
    # batch 1: k rows over the k experts it touches; the tiles' SM time runs while the weights stream in, so the
    # step pays the larger of the read and compute + tiles, not read + tiles
    by_hand = moe_by_hand(gpu, moe, moe_layers, k, k, one_expert / 2, 2, columns, model.hidden_size)
    assert by_batch[1].decode.moe_s == pytest.approx(by_hand)
    read = k * moe_layers * one_expert / (gpu.memory_bandwidth_gbps * GB * moe.read_efficiency)
    assert by_hand < read + k * moe_layers * columns * moe.column_ps * 1e-12


def test_routed_rows_move_their_activations_beside_the_weights(catalog, perf):
    """Every routed row's 16-bit input and GEMM outputs (hidden + 2 x moe_intermediate + hidden) cross memory
    activation_passes times at the MoE read rate, every MoE layer (bench/SPEED_PROTOCOL.md, the amendment on the
    routed rows' activation traffic): a 512-token step of Qwen3-30B-A3B reads 512 x k rows' worth more than the same
    step timed without it, and its weights as much."""
    gpu = catalog.gpus.get("h100-sxm")
    moe = perf.generation(gpu.generation).moe_rates("bf16", "vllm")
    model = arch(catalog, "qwen3-30b-a3b")
    k, inter, hidden = model.moe.experts_per_token, model.moe.expert_intermediate_size, model.hidden_size
    moe_layers = sum(1 for layer in model.layers if layer.is_moe)
    timer = replica_timer(model, "bf16", "auto", gpu, 1, 1, catalog)
    still = replace(timer, hw=replace(timer.hw, moe_activation_passes=0.0))
    step = Step(512, 1000.0)
    _, moved, _ = timer.step(step)
    _, unmoved, _ = still.step(step)
    per_row = moe_layers * 2 * (hidden + 2 * inter + hidden) * moe.activation_passes / (
        gpu.memory_bandwidth_gbps * GB * moe.read_efficiency)
    assert moe.activation_passes > 0
    assert moved.memory_s - unmoved.memory_s == pytest.approx(512 * k * per_row)
    assert moved.weight_bytes == unmoved.weight_bytes


def test_a_tensor_parallel_expert_slice_keeps_its_output_columns_cost(catalog, perf):
    """Under TP each rank holds 1/tp of every expert's gate and up rows but all of down's hidden_size output
    rows: the read shrinks tp-fold, the tiles' fixed cost only as 2 inter / tp + hidden does (the kernel tables'
    floor at high moe_tp, bench/SPEED_PROTOCOL.md)."""
    gpu = catalog.gpus.get("h100-sxm")
    moe = perf.generation(gpu.generation).moe_rates("bf16", "vllm")
    model = arch(catalog, "qwen3-30b-a3b")
    E, k, inter, hidden = (model.moe.num_experts, model.moe.experts_per_token, model.moe.expert_intermediate_size,
                           model.hidden_size)
    moe_layers = sum(1 for layer in model.layers if layer.is_moe)
    for tp in (1, 4):
        decode = run(catalog, "qwen3-30b-a3b", tp=tp).decode
        assert decode.moe_s == pytest.approx(moe_by_hand(gpu, moe, moe_layers, k, k, 3 * hidden * inter // tp, 2,
                                                         2 * inter // tp + hidden, hidden))
    assert E > k


def test_nothing_is_charged_per_expert_held(catalog, perf):
    """A MoE layer's fixed cost is its fused kernel's launch and its routing kernel, whatever its expert count
    (Qwen3-30B-A3B holds 128, Mixtral 8) and at batch 1 as at 256: what the layers' small kernels, attention
    launches and MoE launches leave of the fixed time is whole GEMM launches (projections, router, lm_head)."""
    gpu = catalog.gpus.get("h100-sxm")
    generation = perf.generation(gpu.generation)
    vllm = perf.engine("vllm")
    for name in ("qwen3-30b-a3b", "mixtral-8x7b"):
        model = arch(catalog, name)
        one, wide = run(catalog, name), run(catalog, name, batch=256)
        assert wide.decode.kernel_launch_s == pytest.approx(one.decode.kernel_launch_s)
        moe_layers = sum(1 for layer in model.layers if layer.is_moe)
        per_moe_layer = (generation.moe_rates("bf16", "vllm").launch_us
                         + vllm.moe_layer_kernels * generation.kernel_floor_us)
        per_layer = vllm.layer_kernels * generation.kernel_floor_us + generation.attention_rates(16, "vllm").launch_us
        gemm_us = one.decode.kernel_launch_s * 1e6 - moe_layers * per_moe_layer - model.num_layers * per_layer
        launches = gemm_us / generation.gemm_rates("bf16", "vllm").launch_us
        # per layer: fused QKV, o_proj and the router; and the lm_head
        assert launches == pytest.approx(3 * model.num_layers + 1)


def test_tensor_parallel_splits_the_weight_read_and_adds_all_reduces_by_hand(catalog, perf):
    by_tp = {tp: run(catalog, "llama-3.1-70b", precision="fp8", tp=tp) for tp in (1, 2, 4, 8)}
    model = arch(catalog, "llama-3.1-70b")
    assert by_tp[1].decode.allreduce_s == 0
    gpu = catalog.gpus.get("h100-sxm")
    link = perf.interconnect(gpu.interconnect.kind, gpu.generation, "vllm")
    payload = model.hidden_size * 2  # one token's activations, 16-bit
    for tp in (2, 4, 8):
        assert by_tp[tp].decode.weight_bytes == pytest.approx(by_tp[1].decode.weight_bytes / tp, rel=0.02)
        fit = link.fit(tp)
        one_call = min(fit.latency_us * 1e-6 + payload / (fit.bandwidth_gbps * GB),
                       fit.large_latency_us * 1e-6 + 2 * (tp - 1) / tp * payload / (fit.bus_bandwidth_gbps * GB))
        assert by_tp[tp].decode.allreduce_s == pytest.approx(2 * model.num_layers * one_call)
        assert by_tp[tp].decode.allreduce_s > by_tp[tp // 2].decode.allreduce_s
    assert by_tp[8].tpot_s < by_tp[1].tpot_s
    pcie = run(catalog, "llama-3.1-70b", gpu="l40s", precision="fp8", tp=4)
    nvlink = run(catalog, "llama-3.1-70b", gpu="h100-sxm", precision="fp8", tp=4)
    assert pcie.decode.allreduce_s > nvlink.decode.allreduce_s


def test_an_amd_prefill_all_reduce_takes_rccls_measured_time_and_a_decode_one_the_custom_kernels(catalog, perf):
    """Infinity Fabric at TP 8: messages of 64 MiB and up are RCCL's (bench/data/rccl-allreduce-mi300x.csv, as
    measured on 8 x MI300X); a decode-sized message keeps the custom all-reduce's fit."""
    rows = (Path(__file__).parents[1] / "bench" / "data" / "rccl-allreduce-mi300x.csv").read_text().splitlines()[1:]
    gpu = catalog.gpus.get("mi300x")
    fit = perf.interconnect(gpu.interconnect.kind, gpu.generation, "vllm").fit(8)

    def call_us(nbytes: float) -> float:
        return min(fit.latency_us + nbytes / (fit.bandwidth_gbps * GB) * 1e6,
                   fit.large_latency_us + 2 * 7 / 8 * nbytes / (fit.bus_bandwidth_gbps * GB) * 1e6)  # ring over 8

    for row in rows:
        nbytes, measured_us = (float(v) for v in row.split(",")[:2])
        assert call_us(nbytes) == pytest.approx(measured_us, rel=0.02)
    decode = 64 * 8192 * 2  # 64 tokens of Llama-3.3-70B's activations
    assert call_us(decode) == pytest.approx(fit.latency_us + decode / (fit.bandwidth_gbps * GB) * 1e6)
    assert call_us(decode) < 20


def test_a_tensor_parallel_group_across_nvl72_trays_takes_the_multi_host_all_reduce(catalog, perf):
    """A GB200 / GB300 tray holds 4 GPUs: a TP-8 group spans two hosts of the rack's NVLink domain and runs the
    engine's multi-host all-reduce (measured on GB300 across trays); a TP-4 group keeps the tray's own fits, and an
    HGX node of 8 is one host."""
    model = arch(catalog, "llama-3.1-70b")
    payload = model.hidden_size * 2  # one token's activations, 16-bit

    def one_call(fit, tp):
        return min(fit.latency_us * 1e-6 + payload / (fit.bandwidth_gbps * GB),
                   fit.large_latency_us * 1e-6 + 2 * (tp - 1) / tp * payload / (fit.bus_bandwidth_gbps * GB))

    for gpu_name in ("gb300", "gb200"):
        gpu = catalog.gpus.get(gpu_name)
        assert gpu.host_gpus == 4 < gpu.gpus_per_node
        for engine in ("vllm", "sglang", "trtllm"):
            across = perf.interconnect(gpu.interconnect.kind, gpu.generation, engine, across_hosts=True)
            within = perf.interconnect(gpu.interconnect.kind, gpu.generation, engine)
            assert across.across_hosts and across.engine == engine and not within.across_hosts
            for tp, link in ((8, across), (4, within)):
                timed = run(catalog, "llama-3.1-70b", gpu=gpu_name, precision="fp8", tp=tp, engine=engine)
                assert timed.decode.allreduce_s == pytest.approx(2 * model.num_layers * one_call(link.fit(tp), tp))
    # vLLM and SGLang leave the tray at 2-5x an HGX B300's small-message latency; TensorRT-LLM's MNNVL kernels do not
    hgx = perf.interconnect("nvlink", "blackwell-ultra", "sglang").fit(8)
    assert perf.interconnect("nvlink", "blackwell-ultra", "sglang", across_hosts=True).fit(8).latency_us > 4 * hgx.latency_us
    h100 = catalog.gpus.get("h100-sxm")
    assert h100.gpus_per_host is None and h100.host_gpus == h100.gpus_per_node


def test_pipeline_stages_wait_when_the_batch_cannot_fill_them(catalog):
    one = run(catalog, "llama-3.1-70b", precision="fp8", pp=2)
    flat = run(catalog, "llama-3.1-70b", precision="fp8")
    # a lone sequence passes both halves in turn: no faster than one GPU, and each stage idles half the step
    assert one.decode_step_s >= flat.decode_step_s
    assert one.pp_bubble_s == pytest.approx(one.decode_step_s / 2, rel=0.1)
    full = run(catalog, "llama-3.1-70b", precision="fp8", pp=2, batch=2)
    assert full.pp_bubble_s < 0.1 * one.pp_bubble_s
    assert full.output_tokens_per_s > 1.8 * one.output_tokens_per_s


def test_llama_cpp_pays_its_measured_cycles_per_layer(catalog, perf):
    """llama.cpp's fixed cost is its cited cycles per layer at the GPU's boost clock (no launches or floors on top);
    its mat-vec kernels stream at its own fraction of the bandwidth."""
    small = run(catalog, "qwen2.5-0.5b", gpu="rtx-4090", precision="fp16", engine="llama.cpp")
    layers = arch(catalog, "qwen2.5-0.5b").num_layers
    cost = perf.engine("llama.cpp")
    cycles_s = layers * cost.per_layer_kilocycles * 1e3 / perf.clock_hz("rtx-4090")
    assert small.decode.kernel_launch_s == pytest.approx(cycles_s)
    assert small.decode.engine_step_s == 0
    card = catalog.gpus.get("rtx-4090")
    assert small.decode.dense_gemm_s == pytest.approx(
        small.decode.weight_bytes / (card.memory_bandwidth_gbps * GB * cost.memory_efficiency))
    slower_clock = run(catalog, "qwen2.5-0.5b", gpu="a100-sxm-80gb", precision="fp16", engine="llama.cpp")
    assert slower_clock.decode.kernel_launch_s == pytest.approx(cycles_s * 2520 / 1410)  # boost clocks, MHz


def test_mla_latent_cache_is_read_at_its_own_rate(catalog, perf):
    """MLA's latent cache (whole on every rank) is read by MLA's decode kernels at the generation's latent
    efficiency; a GQA model's paged cache at the KV efficiency; each the larger of that read and its FLOPs."""
    gpu = catalog.gpus.get("h200-sxm")
    rates = perf.generation(gpu.generation).attention_rates(8, "vllm")
    assert rates.latent_read_efficiency != rates.kv_read_efficiency
    for name, efficiency in (("deepseek-v3", rates.latent_read_efficiency), ("llama-3.1-70b", rates.kv_read_efficiency)):
        r = run(catalog, name, gpu="h200-sxm", precision="fp8", kv="fp8", tp=8, batch=32, workload=Workload(4000, 200))
        read_s = r.decode.kv_bytes / (gpu.memory_bandwidth_gbps * GB * efficiency)
        assert r.decode.kv_bytes > 0
        assert r.decode.attention_s >= read_s * (1 - 1e-9)


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
    """fp8 prefill runs W8A8 on Hopper, weight-only (16-bit math) on Ampere. Hopper's fp8 GEMMs reach 0.553 of their
    doubled peak against bf16's 0.779 (the kernel tables), so they save about 30% of the GEMM time, not half."""
    long = Workload(8192, 16)
    h100 = {p: run(catalog, "llama-3.1-8b", precision=p, workload=long) for p in ("bf16", "fp8")}
    a100 = {p: run(catalog, "llama-3.1-8b", gpu="a100-sxm-80gb", precision=p, workload=long) for p in ("bf16", "fp8")}
    assert h100["fp8"].prefill_s < 0.85 * h100["bf16"].prefill_s
    assert a100["fp8"].prefill_s == pytest.approx(a100["bf16"].prefill_s, rel=0.05)


def test_rejects_bad_input(catalog):
    with pytest.raises(PlannerInputError, match="workload"):
        run(catalog, "llama-3.1-8b", workload=Workload(0, 10))
    with pytest.raises(PlannerInputError, match="engine"):
        run(catalog, "llama-3.1-8b", engine="nope")
    with pytest.raises(PlannerInputError, match="tp"):
        run(catalog, "llama-3.1-8b", tp=3)


def test_every_factor_names_its_source(perf):
    for entry in perf.generations:
        assert entry.measured_on and entry.source
    for entry in perf.engines:
        assert entry.source
    for entry in (*perf.interconnects, *perf.precisions, *perf.clocks):
        assert entry.source
    assert perf.generation("volta") == perf.generation("default")  # no measurement: the default
    assert perf.clock_hz("t4") == perf.clock_hz("default")  # clock not listed: the default


def test_no_read_is_faster_than_the_measured_ceiling(catalog, perf, tmp_path):
    """Every read efficiency stays within its generation's measured read ceiling: the catalog refuses one above it,
    and an engine's own streaming fraction is held to it on a generation whose ceiling is lower."""
    for generation in perf.generations:
        assert 0 < generation.read_ceiling < 1 and generation.read_ceiling_source and generation.as_of
        assert max(generation.read_efficiencies.values()) <= generation.read_ceiling
    text = (Path(catalog_dir()) / "performance.yaml").read_text()
    (tmp_path / "performance.yaml").write_text(text.replace("      16: {launch_us: 21.0, kv_read_efficiency: 0.507",
                                                            "      16: {launch_us: 21.0, kv_read_efficiency: 0.9", 1))
    with pytest.raises(PlannerInputError, match=r"generations\[ampere\]\.attention\.16\.kv_read_efficiency 0.9 is above"):
        load_performance_catalog(str(tmp_path))
    fast = tmp_path / "fast"
    fast.mkdir()
    (fast / "performance.yaml").write_text(text.replace("    memory_efficiency: 0.71\n", "    memory_efficiency: 0.95\n", 1))
    mi300x = catalog.gpus.get("mi300x")
    ceiling = perf.generation(mi300x.generation).read_ceiling
    r = replica_performance(arch(catalog, "llama-3.1-8b"), "fp16", "auto", mi300x, 1, 1, 1, CHAT, catalog, "llama.cpp",
                            load_performance_catalog(str(fast)))
    assert r.decode.dense_gemm_s == pytest.approx(r.decode.weight_bytes / (mi300x.memory_bandwidth_gbps * GB * ceiling))


def test_size_only_model(catalog):
    model = replace(arch(catalog, "llama-3.1-8b"), exact=False, declared_params=8_000_000_000)
    r = replica_performance(model, "fp8", "auto", catalog.gpus.get("h100-sxm"), 1, 1, 1, CHAT, catalog)
    assert r.decode.weight_bytes == 8 * GB
    assert r.decode_bound == "memory"
    # weights files read (a GGUF): their exact bytes, unless another precision is asked for
    stored = replace(model, stored_bytes=4_900_000_000, stored_precision="q4_k_m")
    h100 = catalog.gpus.get("h100-sxm")
    assert replica_performance(stored, "auto", "auto", h100, 1, 1, 1, CHAT, catalog).decode.weight_bytes == 4_900_000_000
    assert replica_performance(stored, "fp8", "auto", h100, 1, 1, 1, CHAT, catalog).decode.weight_bytes == 8 * GB


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


def test_gpt_oss_120b_on_eight_b200_decodes_as_published(catalog):
    """bench/data row 2026 target of issue 20: SGLang 0.5.8, gpt-oss-120b on 8 x B200, batch 1, 1024 + 1024 tokens,
    2.41 ms TPOT measured; within 25%."""
    r = run(catalog, "gpt-oss-120b", gpu="b200", precision="auto", tp=8, engine="sglang", workload=Workload(1024, 1024))
    assert r.tpot_s == pytest.approx(2.41e-3, rel=0.25)


def test_dsa_reads_every_indexer_key_but_only_its_top_k_latents(catalog):
    """DeepSeek Sparse Attention: the indexer scores every cached token's key, the attention reads at most
    index_topk latents (hand count over DeepSeek-V3.2's 61 layers on one of 8 ranks, bf16 cache)."""
    model = arch(catalog, "deepseek-v3.2")
    attention = model.layers[0].attention
    assert attention.index_topk == 2048 and attention.indexer_head_dim
    timer = replica_timer(model, "auto", "bf16", catalog.gpus.get("b200"), 8, 1, catalog)
    latent = attention.latent_dim * 2
    for context in (1000, 32768):
        _, terms, _ = timer.step(Step(1, float(context)))
        read = sum(layer.attention.indexer_bytes_per_token * context + latent * min(context, 2048)
                   for layer in model.layers)
        assert terms.kv_bytes == read


def without_sparse_prefill(perf):
    """The catalog with no engine's DSA prefill kernels: every DSA layer timed as dense MLA over its window."""
    return replace(perf, generations=tuple(
        replace(g, engines={name: replace(own, sparse_prefill=()) for name, own in g.engines.items()})
        for g in perf.generations))


def sglang_prefill(catalog, perf, gpu, kv, prompt, release=None, engine="sglang"):
    """GLM-5 FP8 on 8 GPUs: one prompt alone, and the timer's terms for it."""
    timer = replica_timer(arch(catalog, "glm-5"), "fp8", kv, catalog.gpus.get(gpu), 8, 1, catalog, engine, perf,
                          release=release)
    total, terms, _ = timer.forward(Step(0, 0.0, prompt, causal_positions(prompt), 1))
    return total, terms, timer


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_an_untabled_dsa_prefill_computes_its_indexers_logits_past_top_k(catalog, perf, engine):
    """Where no kernel table times a DSA prefill (SPEED_PROTOCOL, the DSA-indexer amendment), a prompt past
    index_topk (2,048) adds every indexed layer's logits, 2 x 32 heads x 128 a (query, earlier key) pair, at the FP8
    peak times the generation's attention efficiency (the FP8-logits amendment); one of at most 2,048 tokens adds none
    (the dense threshold)."""
    from dataclasses import replace as swap

    model = arch(catalog, "glm-5")
    b200 = catalog.gpus.get("b200")
    # FP8 logits at the FP8 peak times Blackwell's attention efficiency: no indexer table of this engine's (the
    # FP8-logits amendment)
    assert perf.generation("blackwell").engines.get(engine) is None or \
        perf.generation("blackwell").engines[engine].indexer is None
    logits_rate = b200.dense_tflops["fp8"] * 1e12 * perf.generation("blackwell").attention_compute_efficiency
    per_pair = sum(2 * a.indexer_heads * a.indexer_head_dim for layer in model.layers
                   for a in (layer.attention,) if a.indexer_heads)
    assert per_pair == 78 * 2 * 32 * 128
    for prompt, indexed in ((2048, False), (8192, True)):
        timer = replica_timer(model, "fp8", "fp8", b200, 8, 1, catalog, engine, perf)
        assert timer.hw.sparse_prefill is None
        shape = Step(0, 0.0, prompt, causal_positions(prompt), 1)
        _, terms, _ = timer.forward(shape)
        untimed = swap(timer)  # the same layout, its stage costs without the indexers
        untimed.__dict__["_costs"] = tuple(cost._replace(indexers=()) for cost in timer._costs)
        _, without, _ = untimed.forward(shape)
        expected = per_pair * causal_positions(prompt) / logits_rate if indexed else 0.0
        assert terms.attention_s - without.attention_s == pytest.approx(expected)
        # the prompt alone (TTFT, a static batch's prompt pass) takes the same term (the correction after them)
        assert timer.prefill_s(1, prompt) - untimed.prefill_s(1, prompt) == pytest.approx(expected)


def test_sglang_prefills_dsa_past_its_top_k_with_the_kernel_its_release_picks(catalog, perf):
    """SGLang (SPEED_PROTOCOL, the DSA sparse-prefill amendment): a prompt of at most index_topk tokens runs dense
    MHA, as before; past it, every token costs the kernel's index_topk slots. On B200 with an FP8 cache, from 0.5.10
    the trtllm kernel gathers each token's 2,048 latents of 576 bytes at its read efficiency (by hand, GLM-5's 78
    layers at TP 8), plus the indexer's logits over every earlier key and its top-k past 2,048 tokens."""
    model = arch(catalog, "glm-5")
    dense = without_sparse_prefill(perf)
    short, _, _ = sglang_prefill(catalog, perf, "b200", "fp8", 2048)
    assert short == sglang_prefill(catalog, dense, "b200", "fp8", 2048)[0]
    prompt = 8192
    total, terms, timer = sglang_prefill(catalog, perf, "b200", "fp8", prompt)
    _, dense_terms, _ = sglang_prefill(catalog, dense, "b200", "fp8", prompt)
    blackwell = perf.generation("blackwell").engines["sglang"]
    trtllm = next(k for k in blackwell.sparse_prefill if k.kernel == "trtllm")
    b200 = catalog.gpus.get("b200")
    layers = [layer.attention for layer in model.layers]
    gather_s = len(layers) * prompt * 2048 * 576 / (b200.memory_bandwidth_gbps * 1e9 * trtllm.read_efficiency)
    pairs = causal_positions(prompt)
    logits_s = sum(2 * a.indexer_heads * a.indexer_head_dim for a in layers) * pairs / (
        b200.dense_tflops["fp8"] * 1e12 * blackwell.indexer.logits_compute_efficiency)
    topk_s = sum(1 for a in layers if a.indexer_heads) * (prompt - 2048) * blackwell.indexer.topk_us * 1e-6
    # what the step timed them at before: each prompt token's top-k positions (the step's window term)
    window_flops = sum(4 * 64 // 8 * a.latent_dim for a in layers) * prompt * 2048
    window_s = window_flops / (b200.dense_tflops["bf16"] * 1e12 * perf.generation("blackwell").attention_compute_efficiency)
    # and where no sparse kernel times the prefill, the indexer's logits (the DSA-indexer amendment), at the rate
    # SGLang's own logits table measures (the FP8-logits amendment): what the tabled path times them at
    untabled_logits_s = logits_s
    assert terms.attention_s == pytest.approx(dense_terms.attention_s - window_s - untabled_logits_s
                                              + gather_s + logits_s + topk_s)
    assert terms.attention_s > 4 * (dense_terms.attention_s - untabled_logits_s)  # the window alone, as before
    assert timer.prefill_s(1, prompt) == pytest.approx(total)  # whole prompts alone: the same kernels
    # through 0.5.9 the FP8 cache goes through flashmla_auto, which runs flashmla_sparse: 8 heads padded to 128
    assert sglang_prefill(catalog, perf, "b200", "fp8", prompt, "0.5.9")[0] > total
    # vLLM keeps the window term (its DSA kernels are not timed here)
    assert sglang_prefill(catalog, perf, "b200", "fp8", prompt, engine="vllm")[0] == \
        sglang_prefill(catalog, dense, "b200", "fp8", prompt, engine="vllm")[0]


def test_a_flashmla_kernel_computes_its_padded_heads(catalog, perf):
    """FlashMLA's sparse kernels run a block of heads (64 on Hopper): GLM-5's 8 heads a rank at TP 8 cost what 64
    do, so the kernel's time per token is 64 heads' FLOPs over 2,048 slots at its own efficiency, by hand."""
    prompt = 8192
    _, terms, _ = sglang_prefill(catalog, perf, "h200-sxm", "fp8", prompt)
    _, dense_terms, _ = sglang_prefill(catalog, without_sparse_prefill(perf), "h200-sxm", "fp8", prompt)
    hopper = perf.generation("hopper")
    kv = next(k for k in hopper.engines["sglang"].sparse_prefill if k.kv_bits == 8)
    h200 = catalog.gpus.get("h200-sxm")
    layers = [layer.attention for layer in arch(catalog, "glm-5").layers]
    kernel_s = sum(4 * 64 * a.latent_dim for a in layers) * 2048 * prompt / (
        h200.dense_tflops["bf16"] * 1e12 * kv.compute_efficiency)
    indexer = hopper.engines["sglang"].indexer
    logits_s = sum(2 * a.indexer_heads * a.indexer_head_dim for a in layers) * causal_positions(prompt) / (
        h200.dense_tflops["fp8"] * 1e12 * indexer.logits_compute_efficiency)
    topk_s = len(layers) * (prompt - 2048) * indexer.topk_us * 1e-6
    window_flops = sum(4 * 8 * a.latent_dim for a in layers) * prompt * 2048
    window_s = window_flops / (h200.dense_tflops["bf16"] * 1e12 * hopper.attention_compute_efficiency)
    untabled_logits_s = logits_s  # what the untabled path adds, at SGLang's measured logits rate (FP8-logits)
    assert terms.attention_s == pytest.approx(dense_terms.attention_s - window_s - untabled_logits_s
                                              + kernel_s + logits_s + topk_s)


def test_a_speculative_verify_pass_runs_the_dsa_decode_kernels(catalog, perf):
    """SGLang verifies drafted tokens with its DSA decode backend (target_verify takes dsa_decode_impl): a verify pass
    over 4 tokens a request at 30,000 tokens of context is not timed with the sparse prefill kernels, while the same
    tokens as prompt chunks are."""
    from planner.estimator.speculative import Speculation, draft_architecture, speculative_timer

    model = arch(catalog, "deepseek-v3.2")
    spec = Speculation(method="mtp", draft_tokens=3, acceptance_length=2.65)

    def cycle_s(constants):
        def timer_of(a):
            return replica_timer(a, "fp8-block", "bf16", catalog.gpus.get("h200-sxm"), 8, 1, catalog, "sglang",
                                 constants)
        return speculative_timer(timer_of(model), timer_of(draft_architecture(model)), spec).cycle(8, 30000.0).cycle_s

    assert cycle_s(perf) == cycle_s(without_sparse_prefill(perf))
    prompt_chunks = Step(0, 0.0, 32, 32 * 30000.0, 8)
    timer = replica_timer(model, "fp8-block", "bf16", catalog.gpus.get("h200-sxm"), 8, 1, catalog, "sglang", perf)
    dense = replica_timer(model, "fp8-block", "bf16", catalog.gpus.get("h200-sxm"), 8, 1, catalog, "sglang",
                          without_sparse_prefill(perf))
    # the tables time the prompt chunks' sparse kernels and FP8 logits; without them the window and the logits at
    # the attention rate (the DSA-indexer amendment) stand
    assert timer.forward_s(prompt_chunks) != dense.forward_s(prompt_chunks)


def test_a_sparse_prefill_kernel_is_either_padded_flashmla_or_a_gather(tmp_path):
    """A catalog entry naming both a head block and a read efficiency is refused with the field to fix."""
    text = (Path(catalog_dir()) / "performance.yaml").read_text()
    broken = text.replace("            kernel: trtllm\n            read_efficiency: 0.706\n",
                          "            kernel: trtllm\n            head_block: 64\n            read_efficiency: 0.706\n", 1)
    assert broken != text
    (tmp_path / "performance.yaml").write_text(broken)
    with pytest.raises(PlannerInputError, match=r"engines.sglang.sparse_prefill trtllm: give head_block"):
        load_performance_catalog(str(tmp_path))


def test_each_engine_is_timed_with_its_own_kernel_tables(catalog, perf):
    """Where an engine's tables hold a kernel, its measurement replaces the generation's median: vLLM's per-tensor
    fp8 MoE kernel on Hopper (FlashInfer-CUTLASS) is several times slower at one token than TensorRT-LLM's, and a
    GPU's all-reduce is its interconnect's (the PCIe RTX PRO 6000 is not timed as an NVLink Blackwell)."""
    hopper = perf.generation("hopper")

    def one_token_us(rates, hidden=4096, inter=1536, k=8, bandwidth=4.8e12):  # k fp8 experts read, their tiles
        return (rates.launch_us + k * 3 * hidden * inter / (bandwidth * rates.read_efficiency) * 1e6
                + k * (2 * inter + hidden) * rates.column_ps * 1e-6)

    assert one_token_us(hopper.moe_rates("fp8", "vllm")) > 2 * one_token_us(hopper.moe_rates("fp8", "trtllm"))
    assert hopper.moe_rates("fp8", "llama.cpp") == hopper.moe_rates("fp8")  # no tables: the median
    pcie = perf.interconnect(catalog.gpus.get("rtx-pro-6000").interconnect.kind, "blackwell", "vllm").fit(8)
    nvlink = perf.interconnect(catalog.gpus.get("b200").interconnect.kind, "blackwell", "vllm").fit(8)
    assert pcie.latency_us > 2 * nvlink.latency_us
    by_engine = {e: run(catalog, "llama-3.1-70b", gpu="b200", precision="fp8", tp=8, engine=e).decode.allreduce_s
                 for e in ("vllm", "sglang", "trtllm")}
    assert len(set(by_engine.values())) == 3


def test_sglang_runs_the_moe_kernel_its_release_picks(catalog, perf):
    """SGLang 0.5.6 runs a bf16 Qwen3-MoE on B200 through its Triton fused MoE (no SM100 rule for unquantized
    Qwen3-MoE until 0.5.8): the layer is costed with the Triton table's rates; from 0.5.8 with FlashInfer's
    TensorRT-LLM MoE, the table's primary kernel. Hopper has no rule: its tables' kernel is Triton already."""
    model = arch(catalog, "qwen3-30b-a3b")
    gpu = catalog.gpus.get("b200")
    blackwell = perf.generation("blackwell")
    E, k, inter, hidden = (model.moe.num_experts, model.moe.experts_per_token, model.moe.expert_intermediate_size,
                           model.hidden_size)
    moe_layers = sum(1 for layer in model.layers if layer.is_moe)

    def moe_s(release):
        timer = replica_timer(model, "bf16", "auto", gpu, 1, 1, catalog, "sglang", release=release)
        _, terms, _ = timer.step(Step(1, 1000.0))
        return terms.moe_s

    for release, kernel in (("0.5.6", "triton"), ("0.5.7.post1", "triton"), ("0.5.8", None), (None, None)):
        rates = blackwell.moe_rates("bf16", "sglang", kernel)
        assert moe_s(release) == pytest.approx(moe_by_hand(gpu, rates, moe_layers, k, k, 3 * hidden * inter, 2,
                                                           2 * inter + hidden, hidden))
    assert blackwell.moe_rates("bf16", "sglang", "triton") != blackwell.moe_rates("bf16", "sglang")
    # the step names the kernel it was timed with
    for release, kernel in (("0.5.6", "triton"), ("0.5.9", "flashinfer_trtllm")):
        timer = replica_timer(model, "bf16", "auto", gpu, 1, 1, catalog, "sglang", release=release)
        assert timer_performance(timer, 1, CHAT).moe_kernel == kernel
    assert run(catalog, "llama-3.1-8b", engine="sglang").moe_kernel is None  # dense: no MoE kernel
    assert perf.engine("sglang").moe_kernel("h200-sxm", "qwen3_moe", "bf16", "0.5.6") is None
    assert E > k


def test_a_prefill_attention_pass_costs_its_query_rows_beside_its_attended_positions(catalog, perf):
    """Llama-3.1-8B on one H100, by hand: a prefill attention pass over P prompt tokens with A attended positions takes
    32 layers x 2 x 32 heads x (128 + 128) x (A + P x row_positions) / (bf16 peak x the engine's prefill efficiency),
    the same whether SGLang captures the pass (0.5.23, up to 8,192 tokens: the captured form absorbs only MLA layers)
    or not (0.5.9); the long-prompt asymptote makes a 16K-token prompt's attention run at more of the peak than a
    1K-token one's; each engine at its own kernel's efficiency, llama.cpp (no table) at the generation's
    (bench/SPEED_PROTOCOL.md, the amendments on prefill attention's per-row cost and each engine's own kernel)."""
    gpu, hopper = catalog.gpus.get("h100-sxm"), perf.generation("hopper")
    model = arch(catalog, "llama-3.1-8b")
    per_position = 32 * 2 * 32 * (128 + 128)
    peak = gpu.dense_tflops["bf16"] * 1e12
    sglang = hopper.engines["sglang"].prefill_attention_compute_efficiency

    def attention_s(prompt, release, engine="sglang"):
        timer = replica_timer(model, "bf16", "auto", gpu, 1, 1, catalog, engine, release=release)
        return timer.step(Step(0, 0.0, prompt, causal_positions(prompt), 1))[1].attention_s

    for prompt in (1024, 8192):
        attended = per_position * (causal_positions(prompt) + prompt * hopper.prefill_attention_row_positions)
        assert attention_s(prompt, "0.5.23") == pytest.approx(attended / (peak * sglang))
        assert attention_s(prompt, "0.5.9") == pytest.approx(attended / (peak * sglang))
        for engine in ("vllm", "trtllm"):
            own = hopper.engines[engine].prefill_attention_compute_efficiency
            assert attention_s(prompt, None, engine) == pytest.approx(attended / (peak * own))
        generation = hopper.prefill_attention_compute_efficiency
        assert attention_s(prompt, None, "llama.cpp") == pytest.approx(attended / (peak * generation))
    achieved = [per_position * causal_positions(p) / attention_s(p, "0.5.23") / peak for p in (1024, 16384)]
    assert achieved[0] < hopper.attention_compute_efficiency < achieved[1] < sglang


def test_an_eager_prefill_pass_takes_the_hosts_launch_time_when_that_is_longer(catalog, perf):
    """SGLang 0.5.8 launches prefill without a CUDA graph: a one-token prefill of Llama-3.1-8B on one H100 takes the
    host's time for the kernels the pass launches. Hand count per layer: 2 norms; rotary, the K and V writes and the
    attention kernel; the fused QKV, output, fused gate-up and down GEMMs; the activation: 11; the lm_head once; no
    all-reduce at TP1."""
    model = arch(catalog, "llama-3.1-8b")
    gpu = catalog.gpus.get("h100-sxm")
    sglang = perf.engine("sglang")
    launches = model.num_layers * (2 + 4 + 4 + 1) + 1
    eager = replica_timer(model, "bf16", "auto", gpu, 1, 1, catalog, "sglang", release="0.5.8")
    graphed = replica_timer(model, "bf16", "auto", gpu, 1, 1, catalog, "sglang", release="0.5.23")
    host_s = launches * sglang.eager_launch_us * 1e-6
    assert graphed.prefill_s(1, 1) < host_s
    assert eager.prefill_s(1, 1) == pytest.approx(host_s)
    total, terms, _ = eager.step(Step(0, 0.0, 1, 1.0, 1))
    assert terms.eager_host_s == pytest.approx(host_s - graphed.step(Step(0, 0.0, 1, 1.0, 1))[0])
    assert total == pytest.approx(host_s)
    assert sum(terms.terms_s().values()) == pytest.approx(terms.total_s)
    # decode steps are graphed in every release; a long prompt is GPU-bound either way
    assert eager.step_s(Step(8, 2000.0)) == graphed.step_s(Step(8, 2000.0))
    assert eager.prefill_s(1, 16000) == graphed.prefill_s(1, 16000) > host_s
    assert timer_performance(eager, 1, CHAT).eager_prefill and not timer_performance(graphed, 1, CHAT).eager_prefill
    # the prefill never gets faster as the prompt grows
    times = [eager.prefill_s(1, p) for p in (1, 64, 512, 2048, 8192, 32768)]
    assert times == sorted(times)


def test_the_eager_host_cost_is_pr_12160s_forward_over_the_kernels_counted_by_hand(catalog, perf):
    """DeepSeek-V3 FP8 at TP8 on Hopper, eager (SGLang 0.5.6, Triton MoE), a one-token forward. Every layer: 4 norms
    (input, post-attention, q_a, kv_a); the MLA prefill's rotary, q_pe copy, latent write, K concat and attention
    (5); 4 attention GEMMs (fused q_a/kv_a, q_b, kv_b, o_proj), each after its activations' FP8 quantization (4);
    2 all-reduces. The 3 dense layers: gate-up and down, their 2 quantizations, the activation. The 58 MoE layers:
    the router GEMM; the fused gate and the logits' cast (256 experts in 8 groups: 32 a group); the Triton fused MoE
    (align x2, two GEMMs, activation, sum) and its 2 quantizations; the shared expert runs as a routed one (no
    kernel of its own). The lm_head: 1,813 kernels, whose host time SGLang PR 12160 logs as 82.64 ms."""
    model = arch(catalog, "deepseek-v3")
    layers, moe = model.num_layers, sum(1 for layer in model.layers if layer.is_moe)
    assert (layers, moe) == (61, 58)
    every = 4 + 5 + 4 + 4 + 2
    kernels = layers * every + (layers - moe) * (2 + 2 + 1) + moe * (1 + 2 + 6 + 2) + 1
    assert kernels == 1813
    timer = replica_timer(model, "fp8-block", "auto", catalog.gpus.get("h200-sxm"), 8, 1, catalog, "sglang",
                          release="0.5.6")
    assert timer.prefill_s(1, 1) == pytest.approx(kernels * perf.engine("sglang").eager_launch_us * 1e-6)
    assert timer.prefill_s(1, 1) == pytest.approx(0.08264, rel=1e-3)


def test_an_eager_pass_counts_each_layers_kernels_from_its_parts(catalog, perf):
    """SGLang's eager counts by hand (kernel-sources.md section 10), all-reduces included, at TP8 on B200 at 0.5.6
    (Triton MoE for these bf16 checkpoints). Qwen3-235B, a MoE layer: 4 norms (input, post, q, k) and the 2 copies
    before the q/k norms; rotary, K and V writes, attention; QKV, o_proj and router GEMMs; softmax top-k; the Triton
    fused MoE's 6; 2 all-reduces: 22. GLM-4.6: the same attention (16) with the router GEMM, routing by the compiled
    grouped path (160 experts in one group: past the fused gate's 32) of 8 kernels, the fused MoE's 6, its shared
    expert run as a routed one, 2 all-reduces: 29 a MoE layer; a dense layer 16 + gate-up, down, activation - the
    router GEMM and routing: 17."""
    gpu = catalog.gpus.get("b200")

    def eager(name, precision="auto", tp=8, ep=1, release="0.5.6"):
        timer = replica_timer(arch(catalog, name), precision, "auto", gpu, tp, 1, catalog, "sglang", release=release,
                              ep=ep)
        return timer.eager_launches[0] + timer.stages[0].layers * 2 * (tp > 1)

    qwen = arch(catalog, "qwen3-235b-a22b")
    assert eager("qwen3-235b-a22b") == qwen.num_layers * (4 + 2 + 4 + 3 + 1 + 6 + 2) + 1
    glm = arch(catalog, "glm-4.6")
    moe = sum(1 for layer in glm.layers if layer.is_moe)
    assert (glm.moe.routing, glm.moe.expert_groups, glm.moe.num_experts) == ("grouped", 1, 160)
    assert eager("glm-4.6") == moe * 29 + (glm.num_layers - moe) * 17 + 1
    # under expert parallelism the shared expert runs on its own (gate-up, down, activation) and each MoE layer
    # maps the routed ids to the rank's experts
    assert eager("glm-4.6", ep=8) - eager("glm-4.6") == moe * (2 + 1 + 1)
    # DeepSeek-V3's 8 groups of 32 take the fused gate (2 kernels), Kimi-K2's one group of 384 the compiled path (8)
    sglang = perf.engine("sglang").eager_kernels
    assert sglang.routing_kernels("grouped", 256, 8) == 2 and sglang.routing_kernels("grouped", 384, 1) == 8
    assert arch(catalog, "kimi-k2").moe.expert_groups == 1 and arch(catalog, "deepseek-v3").moe.expert_groups == 8
    # DeepSeek-V3 on B200 takes FlashInfer's TensorRT-LLM MoE (one call), which turns the shared-expert fusion off:
    # its gate-up and down (each after its FP8 quantization) and activation come back; Kimi-K2's 384 experts are
    # never fused (the rule is for 256)
    deepseek = arch(catalog, "deepseek-v3")
    dense = sum(1 for layer in deepseek.layers if not layer.is_moe)
    attention = 4 + 5 + 4 + 4 + 2
    assert eager("deepseek-v3") == dense * (attention + 5) + (deepseek.num_layers - dense) * (
        attention + 1 + 2 + 1 + 5) + 1
    rules = perf.engine("sglang").fused_shared_experts
    assert not any(rule.matches("deepseek_v3", 384, "nvidia", "triton", (0, 5, 6)) for rule in rules)
    assert any(rule.matches("deepseek_v3", 256, "nvidia", "triton", (0, 5, 6)) for rule in rules)
    # a runner launching from C++ (FlashInfer's TensorRT-LLM MoE, picked for Qwen3-MoE bf16 from 0.5.8) is one call
    assert eager("qwen3-235b-a22b", release="0.5.8") == eager("qwen3-235b-a22b") - qwen.num_layers * (6 - 1)
    # block FP8 adds one quantization per quantized GEMM and two in the Triton fused MoE: MiniMax-M2.5 at 0.5.8
    # (q/k norms over the sharded width: one more all-reduce a layer), 4 norms, 2 copies, attention 4, QKV and o_proj
    # with their quantizations, the fp32 router GEMM, sigmoid routing's cast and top-k, the fused MoE's 8; 3
    # all-reduces: 29 (SGLang 0.5.9's code reads 28 at EP1)
    minimax = arch(catalog, "minimax-m2.5")
    assert eager("minimax-m2.5", release="0.5.8") + minimax.num_layers == minimax.num_layers * (
        4 + 2 + 4 + 2 + 2 + 1 + 2 + 8 + 3) + 1


def test_a_fused_shared_expert_runs_inside_the_moe_kernel_in_every_pass(catalog, perf):
    """SGLang's fused shared expert (DeepSeek-V3 on H200, the Triton MoE, EP 1) is one more expert of every token in a
    graphed decode step too: its gate-up and down GEMMs leave the dense terms (two launches and their graph gaps a MoE
    layer), and at one token the step still reads the same bytes (8 routed experts + the shared one, as wide and as
    FP8 as a routed one); under EP 8 (no fusion) the shared expert stays dense."""
    model = arch(catalog, "deepseek-v3")
    gpu, hopper = catalog.gpus.get("h200-sxm"), perf.generation("hopper")
    fused = replica_timer(model, "fp8-block", "auto", gpu, 8, 1, catalog, "sglang", release="0.5.7")
    moe = sum(1 for layer in model.layers if layer.is_moe)
    stage = fused.stages[0]
    assert stage.experts.shared == 1 and stage.experts.layers == moe == 58
    unfused_stage = replace(stage, body=stage.body + _shared_gemms(model, catalog), experts=replace(stage.experts,
                                                                                                   shared=0))
    unfused = replace(fused, stages=(unfused_stage,))
    assert unfused.stages[0].body.low_bit_kernels - stage.body.low_bit_kernels == 2 * moe
    one = Step(1, 1000.0)
    _, with_fusion, _ = fused.step(one)
    _, without, _ = unfused.step(one)
    gemm = hopper.engines["sglang"].gemm["fp8-block"]
    assert without.kernel_launch_s - with_fusion.kernel_launch_s == pytest.approx(
        2 * moe * (gemm.launch_us + hopper.graph_gap_us) * 1e-6)
    assert with_fusion.weight_bytes == without.weight_bytes
    spread = replica_timer(model, "fp8-block", "auto", gpu, 8, 1, catalog, "sglang", release="0.5.7", ep=8)
    assert spread.stages[0].experts.shared == 0


def test_mla_prefill_attention_runs_in_the_engines_multi_head_form(catalog, perf):
    """DeepSeek-V3 at TP 8 on H200, one 16,384-token prompt (past SGLang's prefill graph, so eager): vLLM and SGLang
    run an MLA layer's prefill as dense attention over per-head keys of 128 + 64 and values of 128 (2 x 16 heads x 320
    FLOPs a position, 3.4x fewer than the absorbed form's 2 x 16 x (576 + 512)), vLLM at hopper's prefill-attention
    efficiency (no MLA table of its own), SGLang at its own MLA tables' rate; a decode step keeps the absorbed form,
    as llama.cpp's prefill does."""
    model = arch(catalog, "deepseek-v3")
    gpu, hopper = catalog.gpus.get("h200-sxm"), perf.generation("hopper")
    prompt, layers, heads = 16384, 61, 128 // 8
    positions = prompt * (prompt + 1) / 2
    peak = gpu.dense_tflops["bf16"] * 1e12
    multi_head, absorbed = layers * 2 * heads * (192 + 128), layers * 2 * heads * (576 + 512)

    def timer(engine):
        return replica_timer(model, "fp8-block", "auto", gpu, 8, 1, catalog, engine)

    def prefill_attention_s(engine):
        return timer(engine).step(Step(0, 0.0, prompt, positions, 1))[1].attention_s

    attended = positions + prompt * hopper.prefill_attention_row_positions  # and each query row's own cost
    assert prefill_attention_s("vllm") == pytest.approx(
        multi_head * attended / (peak * hopper.prefill_attention_compute_efficiency))
    assert prefill_attention_s("sglang") == pytest.approx(
        multi_head * attended / (peak * hopper.engines["sglang"].mla_prefill_compute_efficiency))
    for engine in ("vllm", "sglang"):
        assert sum(flops for flops, _ in timer(engine).stages[0].decode_attention(1.0)) == pytest.approx(absorbed)
    assert perf.engine("llama.cpp").mla_prefill == "absorbed"


def test_sglang_runs_a_captured_prefill_passs_mla_layers_absorbed(catalog, perf):
    """SGLang captures an MLA model's prefill passes up to 2048 tokens (0.5.10-0.5.22; 8192 from 0.5.23) and runs
    their MLA layers absorbed in the graph; a larger pass runs eagerly, multi-head. DeepSeek-V3 at TP 8 on H200,
    0.5.12: a 2,048-token prompt's attention is the absorbed form's, a 2,049-token one's the multi-head form's at
    SGLang's own MLA prefill rate; 0.5.9 graphs no prefill, so every pass is multi-head."""
    model = arch(catalog, "deepseek-v3")
    gpu, hopper = catalog.gpus.get("h200-sxm"), perf.generation("hopper")
    layers, heads, peak = 61, 128 // 8, gpu.dense_tflops["bf16"] * 1e12
    # the absorbed form runs SGLang's MLA decode kernel: its FLOPs at that kernel's own rate
    absorbed = layers * 2 * heads * (576 + 512) / (peak * hopper.attention_rates(16, "sglang").latent_compute_efficiency)
    multi_head = layers * 2 * heads * (192 + 128) / (peak * hopper.engines["sglang"].mla_prefill_compute_efficiency)

    def attention_s(release, prompt):
        timer = replica_timer(model, "fp8-block", "auto", gpu, 8, 1, catalog, "sglang", release=release)
        return timer.step(Step(0, 0.0, prompt, causal_positions(prompt), 1))[1].attention_s

    rows = hopper.prefill_attention_row_positions  # a query row's own cost in the prefill kernel, not the absorbed
    assert attention_s("0.5.12", 2048) == pytest.approx(absorbed * causal_positions(2048))
    assert attention_s("0.5.12", 2049) == pytest.approx(multi_head * (causal_positions(2049) + 2049 * rows))
    assert attention_s("0.5.9", 2048) == pytest.approx(multi_head * (causal_positions(2048) + 2048 * rows))
    assert perf.engine("sglang").absorbed_mla_prefill_tokens(False, "0.5.23") == 8192
    assert perf.engine("sglang").absorbed_mla_prefill_tokens(True, "0.5.23") == 0  # an eager layout


def test_mla_decode_computes_at_its_own_kernels_rate(catalog, perf):
    """DeepSeek-V3 on 8 x H200 with DP attention 8 (all 128 heads on a rank), one sequence at 131,072 tokens: the
    absorbed kernel's FLOPs, 2 x 128 x (576 + 512) a position over 61 layers, outrun its latent read, so the step's
    attention is those FLOPs at the engine's own MLA decode compute efficiency (SGLang's bf16 table; vLLM, which has
    none, the generation's median), not at attention_compute_efficiency; without a measured rate (CDNA3) the
    generation's attention_compute_efficiency still times it. DSA layers keep their 4 x 576 count."""
    model = arch(catalog, "deepseek-v3")
    context, layers = 131072, 61
    flops = layers * 2 * 128 * (576 + 512) * context

    def attention_s(gpu, engine):
        timer = replica_timer(model, "fp8-block", "auto", catalog.gpus.get(gpu), 8, 1, catalog, engine, dp=8)
        return timer.step(Step(1, float(context)))[1].attention_s

    hopper, cdna3 = perf.generation("hopper"), perf.generation("cdna3")
    peak = catalog.gpus.get("h200-sxm").dense_tflops["bf16"] * 1e12
    sglang, vllm = hopper.attention_rates(16, "sglang"), hopper.attention_rates(16, "vllm")
    assert sglang.latent_compute_efficiency != hopper.attention_compute_efficiency
    assert vllm.latent_compute_efficiency == hopper.attention[16].latent_compute_efficiency
    for engine, rates in (("sglang", sglang), ("vllm", vllm)):
        latent_read = layers * 576 * 2 * context / (catalog.gpus.get("h200-sxm").memory_bandwidth_gbps * 1e9
                                                     * rates.latent_read_efficiency)
        assert flops / (peak * rates.latent_compute_efficiency) > latent_read
        assert attention_s("h200-sxm", engine) == pytest.approx(flops / (peak * rates.latent_compute_efficiency))
    assert cdna3.attention_rates(16, "sglang").latent_compute_efficiency is None
    mi300x = catalog.gpus.get("mi300x").dense_tflops["bf16"] * 1e12
    assert attention_s("mi300x", "sglang") == pytest.approx(flops / (mi300x * cdna3.attention_compute_efficiency))
    dsa = arch(catalog, "deepseek-v3.2").layers[0].attention
    assert _attention_flops_per_position(dsa, 16) == 4 * 16 * dsa.latent_dim


def _shared_gemms(model, catalog):
    """The dense GEMM terms of DeepSeek-V3's shared experts at TP 8, every MoE layer (as planner places them)."""
    from planner.estimator.layout import model_kv_heads
    from planner.estimator.performance import _fused_shared_tensors, _gemms
    from planner.model.precision import resolve_precision
    precision = resolve_precision(catalog, model, "fp8-block")
    total = None
    for layer in model.layers:
        shared = _fused_shared_tensors(layer)
        if shared:
            gemms = _gemms(shared, precision, 8, model_kv_heads(model))
            total = gemms if total is None else total + gemms
    return total


def test_sglang_fuses_qwen35s_shared_expert_on_rocm_from_0_5_11(catalog, perf):
    """Qwen3.5-397B FP8 on MI355X at TP 4: SGLang 0.5.11+ with AITER fuses the shared expert (qwen2_moe.py
    can_fuse_shared_expert), 0.5.10 does not; CUDA does not (no model asks it to), nor EP 2 (not modelled). An
    eager pass's gate keeps its sigmoid and adds the top-k append (2 kernels, not 3), and drops the shared expert's
    gate-up, down and activation."""
    model = arch(catalog, "qwen3.5-397b-a17b")

    def shared(gpu, release, ep=1):
        return replica_timer(model, "fp8", "auto", catalog.gpus.get(gpu), 4, 1, catalog, "sglang", release=release,
                             ep=ep).stages[0].experts.shared

    assert shared("mi355x", "0.5.11") == shared("mi355x", "0.5.12") == 1
    assert shared("mi355x", "0.5.10") == shared("h200-sxm", "0.5.12") == shared("mi355x", "0.5.12", ep=2) == 0
    from planner.estimator.performance import _eager_launches
    from planner.model.precision import resolve_precision
    counts = perf.engine("sglang").eager_kernels
    precision = resolve_precision(catalog, model, "fp8")
    moe = sum(1 for layer in model.layers if layer.is_moe)
    apart = _eager_launches(model, precision, 4, 1, 1, counts, None, False)[0]
    together = _eager_launches(model, precision, 4, 1, 1, counts, None, True)[0]
    assert (counts.shared_expert_gate, counts.fused_shared_expert_gate) == (3, 2)
    quantized = 2 * counts.block_fp8_quant * (precision.scales is not None and precision.scales.granularity == "block")
    assert apart - together == moe * (2 + quantized + counts.activation + 1)


def test_perf_names_an_eager_passs_launches_and_their_host_cost(catalog, perf):
    """`planner perf` on an eagerly launched prefill: its JSON carries the pass's launches (GLM-4.6's hand count of the
    test above: 89 MoE layers x 29 + 3 dense x 17 + the lm_head) and the host cost of each, whose product is the
    one-request TTFT where the host sets the pace (a 1,000-token prompt); a graphed release carries neither."""
    from planner import api

    def record(release):
        return api.perf("glm-4.6", gpu="b200", tp=8, engine="sglang", engine_version=release, batch=1,
                        prompt_tokens=1000, output_tokens=100, catalog=catalog).to_dict()

    eager = record("0.5.6")
    assert eager["eager_prefill"] and eager["eager_launches"] == 89 * 29 + 3 * 17 + 1
    assert eager["eager_launch_us"] == pytest.approx(perf.engine("sglang").eager_launch_us)
    assert eager["ttft_s"] == pytest.approx(eager["eager_launches"] * eager["eager_launch_us"] * 1e-6)
    graphed = record("0.5.23")
    assert not graphed["eager_prefill"] and graphed["eager_launches"] is None and graphed["eager_launch_us"] is None


def test_a_graphed_step_adds_only_the_routing_kernels_the_moe_tables_do_not_time(catalog, perf):
    """The MoE tables time the top-k routing inside the MoE forward, so a MoE layer adds no routing kernel of its own;
    SGLang's torch.compile'd grouped top-k (GLM-4.6: 160 experts in one group, with the Triton fused MoE) runs its 8
    kernels in the graph at the kernel floor. Where FlashInfer's TensorRT-LLM MoE routes inside its own call (GLM-4.x
    bf16 on SM100 from 0.5.16), in vLLM, and for DeepSeek-V3's fused gate, none."""
    glm = arch(catalog, "glm-4.6")
    floor = perf.generation("hopper").kernel_floor_us * 1e-6

    def moe_fixed(model, gpu="h200-sxm", engine="sglang", release="0.5.6", precision="auto"):
        return replica_timer(model, precision, "auto", catalog.gpus.get(gpu), 8, 1, catalog, engine,
                             release=release).hw.moe_layer_fixed_s

    assert all(e.moe_layer_kernels == 0 for e in perf.engines)
    assert moe_fixed(glm) == pytest.approx(8 * floor)
    assert moe_fixed(glm, engine="vllm") == 0.0
    assert moe_fixed(glm, gpu="b200", release="0.5.23") == 0.0  # the TensorRT-LLM MoE routes inside its call
    assert moe_fixed(arch(catalog, "deepseek-v3")) == 0.0  # 8 groups of 32: the fused gate, in the tables
    assert moe_fixed(arch(catalog, "qwen3-235b-a22b")) == 0.0  # softmax top-k, in the tables


def test_a_graphed_amd_step_adds_the_top_k_and_the_sort_aiters_moe_times_leave_out(catalog, perf):
    """AITER's tuned MoE times hold neither the top-k nor moe_sorting (bench/SPEED_PROTOCOL.md, the AITER amendment):
    on CDNA a MoE layer adds one top-k kernel at the generation's floor and the sort at its measured time, on top of
    any routing the engine adds; NVIDIA generations, whose tables time both, add nothing; a dense model nothing."""
    def moe_fixed(model, gpu, engine="vllm"):
        return replica_timer(arch(catalog, model), "auto", "auto", catalog.gpus.get(gpu), 8, 1, catalog, engine
                             ).hw.moe_layer_fixed_s

    for gpu, generation in (("mi300x", "cdna3"), ("mi355x", "cdna4")):
        entry = perf.generation(generation)
        assert entry.moe_untimed_kernels == 1 and entry.moe_sorting_us == pytest.approx(13.5)
        assert moe_fixed("qwen3-235b-a22b", gpu) == pytest.approx((entry.kernel_floor_us + 13.5) * 1e-6)
    assert perf.generation("cdna4").kernel_floor_us != perf.generation("cdna3").kernel_floor_us  # its own tables
    assert moe_fixed("qwen3-235b-a22b", "h200-sxm") == 0.0
    assert perf.generation("hopper").moe_untimed_kernels == 0 and perf.generation("hopper").moe_sorting_us == 0.0


def test_a_cdna_step_adds_the_graph_gap_after_every_kernel_it_counts(catalog, perf):
    """AITER's tables hold device time alone, so on CDNA every kernel of a pass adds the HIP graph's gap between
    kernels (SPEED_PROTOCOL, the HIP-gap amendment); Llama-3.1-8B at batch 1 on one MI300X launches, per layer, 4 GEMMs,
    its attention kernel and vLLM's 5 small kernels, then the lm_head: 32 x 10 + 1 kernels, by hand. NVIDIA
    generations, whose tables time kernels inside replayed graphs, add none."""
    cdna3 = perf.generation("cdna3")
    assert cdna3.graph_gap_us == pytest.approx(1.38) and perf.generation("cdna4").graph_gap_us == pytest.approx(1.46)
    assert perf.generation("hopper").graph_gap_us == 0.0 and perf.generation("blackwell").graph_gap_us == 0.0
    with_gap = run(catalog, "llama-3.1-8b", gpu="mi300x")
    gapless = replace(perf, generations=tuple(replace(g, graph_gap_us=0.0) for g in perf.generations))
    without = replica_performance(arch(catalog, "llama-3.1-8b"), "bf16", "auto", catalog.gpus.get("mi300x"), 1, 1, 1,
                                  CHAT, catalog, "vllm", gapless)
    layers = arch(catalog, "llama-3.1-8b").num_layers
    kernels = layers * (4 + 1 + perf.engine("vllm").layer_kernels) + 1
    assert with_gap.decode.kernel_launch_s - without.decode.kernel_launch_s == pytest.approx(
        kernels * cdna3.graph_gap_us * 1e-6)
    # llama.cpp's per-layer cycles hold its every fixed cost (measured without graphs): no gap on top
    llama_cpp = [replica_performance(arch(catalog, "llama-3.1-8b"), "bf16", "auto", catalog.gpus.get("mi300x"), 1, 1, 1,
                                     CHAT, catalog, "llama.cpp", p).decode_step_s for p in (perf, gapless)]
    assert llama_cpp[0] == llama_cpp[1]


def test_sglang_on_cdna3_quantizes_each_w8a8_gemms_activations_in_a_kernel_the_tables_leave_out(catalog, perf):
    """AITER's GEMM tables time a W8A8 GEMM on activations quantized before the timed call, and SGLang on ROCm launches
    that quantization as its own kernel before every such GEMM (SPEED_PROTOCOL, the amendment on the activation
    quantization AITER's GEMM tables leave out): Llama-3.1-8B in FP8 at batch 1 on one MI300X launches 4 FP8 GEMMs a
    layer, so 32 x 4 more kernels, each at CDNA3's kernel floor and the graph's gap after it; on CDNA4 too, except for
    the models whose gfx950 code fuses it into the norm (DeepSeek-V3). Not where the tables time it (NVIDIA), not
    where the engine is not listed (vLLM), not for 16-bit GEMMs."""
    cdna3, model = perf.generation("cdna3"), arch(catalog, "llama-3.1-8b")

    def launches(gpu, engine, precision="fp8", untimed=True, model=model, tp=1):
        performance = perf if untimed else replace(perf, engines=tuple(
            replace(e, untimed_activation_quant=()) for e in perf.engines))
        return replica_performance(model, precision, "auto", catalog.gpus.get(gpu), tp, 1, 1, CHAT, catalog, engine,
                                   performance).decode.kernel_launch_s

    for gpu, generation in (("mi300x", cdna3), ("mi355x", perf.generation("cdna4"))):
        quantized = model.num_layers * 4 * (generation.kernel_floor_us + generation.graph_gap_us) * 1e-6
        assert launches(gpu, "sglang") - launches(gpu, "sglang", untimed=False) == pytest.approx(quantized)
    for gpu, engine, precision in (("mi300x", "vllm", "fp8"), ("h100-sxm", "sglang", "fp8"), ("mi300x", "sglang", "bf16")):
        assert launches(gpu, engine, precision) == launches(gpu, engine, precision, untimed=False)
    deepseek = arch(catalog, "deepseek-v3")
    assert (launches("mi355x", "sglang", "fp8-block", model=deepseek, tp=8)
            == launches("mi355x", "sglang", "fp8-block", untimed=False, model=deepseek, tp=8))
    assert (launches("mi300x", "sglang", "fp8-block", model=deepseek, tp=8)
            > launches("mi300x", "sglang", "fp8-block", untimed=False, model=deepseek, tp=8))


def test_the_activation_quantization_names_only_generations_of_its_catalog(tmp_path):
    """A catalog whose engine lists a generation it does not hold gets the one-line error naming the field."""
    text = (Path(catalog_dir()) / "performance.yaml").read_text()
    (tmp_path / "performance.yaml").write_text(text.replace("      - generations: [cdna4]\n",
                                                            "      - generations: [cdna9]\n", 1))
    with pytest.raises(PlannerInputError, match=r"engines\[sglang\]\.untimed_activation_quant names cdna9"):
        load_performance_catalog(str(tmp_path))


def test_vllm_waits_for_its_host_step_only_where_its_release_schedules_synchronously(catalog, perf):
    """vLLM's async scheduler (on by default from 0.14.0; under PP only from 0.15) prepares the next step while the
    GPU runs this one: the decode step then adds the overlapped hand-off, before it the whole per-step host work;
    an engine without rules (llama.cpp) always waits its per-step work."""
    vllm = perf.engine("vllm")

    def engine_step(release, pp=1):
        return replica_timer(arch(catalog, "llama-3.1-8b"), "bf16", "auto", catalog.gpus.get("h100-sxm"), 1, pp,
                             catalog, "vllm", release=release).hw.step_overhead_s

    assert engine_step("0.13.0") == pytest.approx(vllm.per_step_us * 1e-6)
    assert engine_step("0.11.0") == pytest.approx(270e-6)
    assert engine_step("0.14.0") == pytest.approx(vllm.overlapped_step_us * 1e-6)
    assert engine_step("0.14.0", pp=2) == pytest.approx(vllm.per_step_us * 1e-6)
    assert engine_step("0.15.1", pp=2) == engine_step("0.34.0") == pytest.approx(vllm.overlapped_step_us * 1e-6)
    assert engine_step(None) == engine_step("0.34.0")
    assert vllm.overlapped_step_us < vllm.per_step_us
    llama_cpp = perf.engine("llama.cpp")
    assert llama_cpp.step_host_us("b5000", False, "llama") == llama_cpp.per_step_us


def test_sglang_waits_for_its_host_step_where_its_release_turns_the_overlap_off(catalog, perf):
    """SGLang's overlap scheduler is off under PP in every release, and for hybrid models on the no-buffer Mamba radix
    cache by release: Qwen3-Next at 0.5.6-0.5.7 (not 0.5.8), NemotronH at 0.5.7-0.5.13, GLM-4.x MoE at 0.5.8 only,
    Qwen3.5 at 0.5.9-0.5.13, unless the radix cache is disabled; from 0.5.14 the extra buffer keeps it on, but not
    for LFM2 (no extra buffer in any release: off from 0.5.9, its MoE from 0.5.19; bench/SPEED_PROTOCOL.md)."""
    sglang = perf.engine("sglang")
    on, off = sglang.overlapped_step_us, sglang.per_step_us
    assert off == pytest.approx(675) and on == pytest.approx(9.58)
    no_buffer = ("qwen3_next", "nemotron_h", "qwen3_5_moe_text", "qwen3_5_text")
    without_overlap = {"0.5.6": ("qwen3_next",), "0.5.7": ("qwen3_next", "nemotron_h"),
                       "0.5.8": ("nemotron_h", "glm4_moe"), "0.5.10": (*no_buffer, "lfm2"),
                       "0.5.13": (*no_buffer, "lfm2"), "0.5.14": ("lfm2",), "0.5.16": ("lfm2",),
                       "0.5.17": ("lfm2", "lfm2_moe"), "0.5.18": ("lfm2", "lfm2_moe"),
                       "0.5.19": ("lfm2", "lfm2_moe"), "0.5.23": ("lfm2", "lfm2_moe")}
    for release, model_types in without_overlap.items():
        for model_type in (*no_buffer, "glm4_moe", "llama", "lfm2", "lfm2_moe"):
            waits = off if model_type in model_types else on
            assert sglang.step_host_us(release, False, model_type) == waits, (release, model_type)
            # --disable-radix-cache: no Mamba radix cache, so the overlap stays on
            assert sglang.step_host_us(release, False, model_type, prefix_cache=False) == on
        assert sglang.step_host_us(release, True, "llama") == off

    def engine_step(model, release):
        return replica_timer(arch(catalog, model), "bf16", "auto", catalog.gpus.get("h100-sxm"), 4, 1, catalog,
                             "sglang", release=release).hw.step_overhead_s

    assert engine_step("qwen3.5-35b-a3b", "0.5.12") == pytest.approx(off * 1e-6)
    without_radix = replica_timer(arch(catalog, "qwen3.5-35b-a3b"), "bf16", "auto", catalog.gpus.get("h100-sxm"), 4, 1,
                                  catalog, "sglang", release="0.5.12", prefix_cache=False)
    assert without_radix.hw.step_overhead_s == pytest.approx(on * 1e-6)
    assert engine_step("qwen3.5-35b-a3b", "0.5.14") == engine_step("qwen3.5-35b-a3b", None) == pytest.approx(on * 1e-6)


def test_sglang_runs_granite_4_h_without_its_overlap_only_with_mamba_layers_on_the_no_buffer_cache(catalog, perf):
    """GraniteMoeHybrid's branch of 0.5.9-0.5.13 (0.5.9 server_args.py:1641-1651) turns the overlap off through the
    no-buffer Mamba radix cache only when a layer_type is "mamba"; from 0.5.14 the extra buffer keeps it on. FalconH1's
    does so from 0.5.7 (0.5.7 :1436-1449; 0.5.6 turns its radix cache off instead, model_runner.py:448-451)."""
    sglang = perf.engine("sglang")
    for release, waits in (("0.5.6", False), ("0.5.7", True), ("0.5.8", True), ("0.5.12", True), ("0.5.16", False)):
        assert (sglang.step_host_us(release, False, "falcon_h1", mamba=True) == sglang.per_step_us) == waits
    sglang = perf.engine("sglang")
    on, off = sglang.overlapped_step_us, sglang.per_step_us
    for release, hybrid in (("0.5.9", off), ("0.5.13", off), ("0.5.14", on), ("0.5.23", on)):
        assert sglang.step_host_us(release, False, "granitemoehybrid", mamba=True) == hybrid
        assert sglang.step_host_us(release, False, "falcon_h1", mamba=True) == hybrid  # every layer has Mamba
        assert sglang.step_host_us(release, False, "granitemoehybrid", mamba=False) == on
        assert sglang.step_host_us(release, False, "granitemoehybrid", prefix_cache=False, mamba=True) == on

    def timer(name, gpu="h100-sxm"):
        config = json.loads((CONFIGS / name / "config.json").read_text())
        return replica_timer(architecture_from_config(config, name), "bf16", "auto", catalog.gpus.get(gpu), 1, 1,
                             catalog, "sglang", release="0.5.12")

    assert timer("granitemoehybrid-defaults").hw.step_overhead_s == pytest.approx(off * 1e-6)
    assert timer("granitemoehybrid-dense-defaults").hw.step_overhead_s == pytest.approx(on * 1e-6)
    # no release picks another MoE runner for it on SM100: SGLang's `auto` runs its experts on Triton
    for release in ("0.5.9", "0.5.12", "0.5.23"):
        assert sglang.moe_kernel("b200", "granitemoehybrid", "bf16", release) == "triton"
    assert timer_performance(timer("granitemoehybrid-defaults", "b200"), 1, CHAT).moe_kernel == "triton"


def test_sglang_launches_prefill_eagerly_where_its_release_says(catalog, perf):
    """The rules as read from SGLang's source: every prefill through 0.5.9; AMD in every release; from 0.5.10 under
    PP or DP attention, and through 0.5.12 with the FlashInfer TensorRT-LLM MoE runner except gpt-oss; from 0.5.16
    DeepSeek-V3 on SM100 (trtllm_mla). Other engines have no rule."""
    def eager(model, gpu, release, engine="sglang", precision="auto", tp=8, pp=1, dp=1):
        timer = replica_timer(arch(catalog, model), precision, "auto", catalog.gpus.get(gpu), tp, pp, catalog, engine,
                              release=release, dp=dp)
        return timer.hw.eager_launch_s > 0

    assert eager("llama-3.1-70b", "h100-sxm", "0.5.9")
    assert not eager("llama-3.1-70b", "h100-sxm", "0.5.10")
    assert eager("llama-3.1-70b", "mi300x", "0.5.23")
    assert eager("llama-3.1-70b", "h100-sxm", "0.5.12", tp=4, pp=2)
    assert eager("deepseek-v3", "h200-sxm", "0.5.12", dp=8)
    assert eager("deepseek-v3", "b200", "0.5.12") and not eager("deepseek-v3", "h200-sxm", "0.5.12")
    assert not eager("gpt-oss-120b", "b200", "0.5.12")
    assert eager("deepseek-v3", "b200", "0.5.23") and not eager("glm-4.6", "b200", "0.5.23")
    assert not eager("llama-3.1-70b", "h100-sxm", "0.19.0", engine="vllm")
    assert not eager("llama-3.1-70b", "mi300x", None, engine="vllm")


def test_minimax_layers_all_reduce_their_q_k_norm_sums_as_each_release_does(catalog, perf):
    """MiniMax-M2.5's q/k RMSNorms over the TP-sharded width all-reduce their sums: two all-reduces a layer in SGLang
    through 0.5.7, one from 0.5.8, one in vLLM; each 8 bytes a token over the 8 ranks, in the step's all-reduce term
    (and one more kernel of an eager pass). A model without such norms adds none."""
    model = arch(catalog, "minimax-m2.5")
    gpu = catalog.gpus.get("b200")
    layers = model.num_layers
    link = perf.interconnect(gpu.interconnect.kind, gpu.generation, "sglang").fit(8)
    one = min(link.latency_us * 1e-6 + 4 * 8 / (link.bandwidth_gbps * 1e9),
              link.large_latency_us * 1e-6 + 2 * 7 / 8 * 4 * 8 / (link.bus_bandwidth_gbps * 1e9))

    def allreduce_s(release, engine="sglang", tp=8):
        timer = replica_timer(model, "auto", "auto", gpu, tp, 1, catalog, engine, release=release)
        return timer.step(Step(4, 2000.0))[1].allreduce_s, timer

    two, old = allreduce_s("0.5.7")
    fused, new = allreduce_s("0.5.8")
    assert two - fused == pytest.approx(layers * one)
    assert (old.hw.norm_allreduces, new.hw.norm_allreduces) == (2, 1)
    assert old._costs[0].eager_host_s - new._costs[0].eager_host_s == pytest.approx(layers * old.hw.eager_launch_s)
    assert replica_timer(model, "auto", "auto", gpu, 8, 1, catalog, "vllm").hw.norm_allreduces == 1
    assert replica_timer(model, "auto", "auto", gpu, 1, 1, catalog, "sglang", release="0.5.7").hw.norm_allreduces == 0
    assert replica_timer(arch(catalog, "qwen3-235b-a22b"), "auto", "auto", gpu, 8, 1, catalog,
                         "sglang").hw.norm_allreduces == 0


def test_release_key_orders_releases_as_numbers():
    from planner.estimator.performance import release_key

    assert release_key("v0.5.12 (image lmsysorg/sglang:v0.5.12-cu130)") == (0, 5, 12)
    assert release_key("0.5.6.post1") == (0, 5, 6)
    assert release_key("0.5.9") < release_key("0.5.12") < release_key("0.5.23")
    assert release_key("main") == ()


def test_a_moe_kernel_rule_must_name_a_measured_kernel(tmp_path):
    import shutil

    import yaml

    shutil.copytree(catalog_dir(), tmp_path / "catalogs")
    path = tmp_path / "catalogs" / "performance.yaml"
    data = yaml.safe_load(path.read_text())
    sglang = next(e for e in data["engines"] if e["name"] == "sglang")
    sglang["moe_kernel_rules"][0]["kernel"] = "cutlass"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlannerInputError, match=r"moe_kernel_rules\[0\]\.kernel 'cutlass' is measured on no generation"):
        load_performance_catalog(str(tmp_path / "catalogs"))


def assert_w4a16_experts(catalog, generation, gpu, model, precision, tp, kernel_format="w4a16"):
    """Each engine's experts of `model` in `precision` are timed at the generation's `kernel_format` MoE rates (a
    weight-only one: 4-bit weights read, 16-bit compute); returns (engine, hardware) for further checks."""
    out = []
    for engine in ("vllm", "sglang"):
        hw = replica_timer(model, precision, "auto", gpu, tp, 1, catalog, engine).hw
        w4a16 = generation.moe_rates(kernel_format, engine)
        ceiling = load_performance_catalog().generation(gpu.generation).read_ceiling  # no GPU reads past its own
        assert hw.moe.bytes_per_s == pytest.approx(gpu.memory_bandwidth_gbps * GB * min(w4a16.read_efficiency, ceiling))
        assert hw.moe_column_s == pytest.approx(w4a16.column_ps * 1e-12)
        assert hw.moe_activation_passes == w4a16.activation_passes
        assert hw.moe.flops_per_s == pytest.approx(gpu.dense_tflops["bf16"] * 1e12 * w4a16.compute_efficiency)
        assert hw.moe.half_m == w4a16.half_m
        out.append((engine, hw))
    return out


def test_weight_only_mxfp4_experts_take_the_measured_w4a16_kernel(catalog, perf):
    """gpt-oss's MXFP4 experts on Hopper run weight-only (no FP4 tensor cores): the fused MoE kernel takes the w4a16
    tables' rates (4-bit weights read, 16-bit compute), not the 16-bit MoE kernel's; llama.cpp's own kernels stay in
    its cycles; a bf16 checkpoint keeps the 16-bit kernel."""
    gpu = catalog.gpus.get("h100-sxm")
    hopper = perf.generation("hopper")
    bandwidth = gpu.memory_bandwidth_gbps * GB
    gpt_oss = arch(catalog, "gpt-oss-20b")
    assert_w4a16_experts(catalog, hopper, gpu, gpt_oss, "mxfp4", 1)
    assert hopper.moe_rates("w4a16", "vllm") != hopper.moe_rates("bf16", "vllm")
    bf16 = replica_timer(arch(catalog, "qwen3-30b-a3b"), "bf16", "auto", gpu, 1, 1, catalog, "vllm").hw
    assert bf16.moe.bytes_per_s == pytest.approx(bandwidth * hopper.moe_rates("bf16", "vllm").read_efficiency)
    llamacpp = replica_timer(gpt_oss, "mxfp4", "auto", gpu, 1, 1, catalog, "llama.cpp").hw
    assert llamacpp.moe_column_s == 0.0


def test_a_generation_without_a_w4a16_table_borrows_the_default_generations(catalog, perf):
    """Ampere and CDNA3 have no weight-only MoE table: their weight-only experts take the default generation's w4a16
    rates (the measured generations' median, as a GPU without tables does; bench/SPEED_PROTOCOL.md, the borrowed
    weight-only amendment), as fractions of their own bandwidth and 16-bit peak, not their 16-bit MoE kernel's; their
    16-bit experts keep their own tables. CDNA4 has AITER's own a16w4 / int4 table (the CDNA4 weight-only
    amendment)."""
    default = perf.generation("default")
    gpt_oss = arch(catalog, "gpt-oss-20b")
    cdna4 = perf.generation("cdna4")
    assert cdna4.measures_moe("w4a16")
    assert_w4a16_experts(catalog, cdna4, catalog.gpus.get("mi355x"), gpt_oss, "mxfp4", 1)
    for gpu_name, generation in (("a100-sxm-80gb", "ampere"), ("mi300x", "cdna3")):
        gpu = catalog.gpus.get(gpu_name)
        own = perf.generation(generation)
        assert not own.measures_moe("w4a16", "vllm") and not own.measures_moe("w4a16", "sglang")
        for _, hw in assert_w4a16_experts(catalog, default, gpu, gpt_oss, "mxfp4", 1):
            assert hw.moe.half_m != own.moe_rates("bf16", "vllm").half_m
        bf16 = replica_timer(arch(catalog, "qwen3-30b-a3b"), "bf16", "auto", gpu, 1, 1, catalog, "vllm").hw
        assert bf16.moe.half_m == own.moe_rates("bf16", "vllm").half_m


def test_integer_4bit_experts_take_the_weight_only_moe_kernel_and_their_dense_layers_stay_16_bit(catalog, perf):
    """Kimi-K2.5's native int4 experts (compressed-tensors W4A16, group 32) run on Marlin's weight-only MoE kernel in
    both engines: the w4a16-int4 MoE rates (aiconfigurator's int4_wo tables), not the MXFP4 experts' w4a16; its dense
    GEMMs (attention and the shared expert, kept 16-bit by the checkpoint) keep the 16-bit rates; every int4
    precision is weight-only, with w4a16 its nearest measured kernel."""
    gpu = catalog.gpus.get("h200-sxm")
    hopper = perf.generation("hopper")
    for engine in ("vllm", "sglang"):
        assert hopper.moe_rates("w4a16-int4", engine) != hopper.moe_rates("w4a16", engine)
    for engine, hw in assert_w4a16_experts(catalog, hopper, gpu, arch(catalog, "kimi-k2.5"), "int4-g32", 8,
                                           "w4a16-int4"):
        assert hw.moe.half_m != hopper.moe_rates("bf16", engine).half_m
        assert hw.wide.flops_per_s == pytest.approx(gpu.dense_tflops["bf16"] * 1e12 * hopper.gemm_rates("bf16", engine)
                                                    .compute_efficiency)
    for name in ("int4", "int4-g32", "awq", "gptq"):
        compute = perf.precision(name)
        assert compute.weight_only_formats == ("w4a16-int4", "w4a16") and compute.tensor_core_format is None


def test_integer_4bit_experts_fall_back_to_the_nearest_weight_only_kernel(catalog, perf):
    """Where a generation has no int4 table its int4 experts take its own w4a16 (CDNA4's AITER table, fitted from its
    int4 rows among others) before the default generation's w4a16-int4 (CDNA3, which has neither)."""
    kimi = arch(catalog, "kimi-k2.5")
    cdna4, default = perf.generation("cdna4"), perf.generation("default")
    assert not cdna4.measures_moe("w4a16-int4") and cdna4.measures_moe("w4a16")
    assert_w4a16_experts(catalog, cdna4, catalog.gpus.get("mi355x"), kimi, "int4-g32", 8)
    cdna3 = perf.generation("cdna3")
    assert not cdna3.measures_moe("w4a16-int4") and not cdna3.measures_moe("w4a16")
    assert_w4a16_experts(catalog, default, catalog.gpus.get("mi300x"), kimi, "int4-g32", 8, "w4a16-int4")


def test_tensorrt_llm_told_its_trtllm_moe_backend_times_sglangs_flashinfer_tables(catalog, perf):
    """TensorRT-LLM with moe_config {backend: TRTLLM} runs its trtllm-gen MoE, FlashInfer's trtllm_*_block_scale_moe:
    DeepSeek-V3's block-FP8 experts on B200 and B300 take SGLang's flashinfer_trtllm fits, not TensorRT-LLM's own
    DeepGEMM table; a generation without them (Hopper) and a kernel TensorRT-LLM has no backend for are refused
    (bench/SPEED_PROTOCOL.md, the amendment on TensorRT-LLM's TRTLLM MoE backend)."""
    deepseek = arch(catalog, "deepseek-v3")
    for gpu, generation in (("b200", "blackwell"), ("b300", "blackwell-ultra")):
        rates = perf.generation(generation)
        for experts in ("fp8-block", "fp4"):
            assert rates.moe_rates(experts, "trtllm", "flashinfer_trtllm") == rates.moe_rates(experts, "sglang")
        assert rates.moe_rates("fp8-block", "trtllm", "flashinfer_trtllm") != rates.moe_rates("fp8-block", "trtllm")
        card = catalog.gpus.get(gpu)
        stated = replica_timer(deepseek, "fp8-block", "auto", card, 8, 1, catalog, "trtllm",
                               moe_kernel="flashinfer_trtllm")
        picked = replica_timer(deepseek, "fp8-block", "auto", card, 8, 1, catalog, "trtllm")
        assert stated.hw.moe_kernel == "flashinfer_trtllm" and picked.hw.moe_kernel is None
        shared = rates.moe_rates("fp8-block", "sglang")
        assert stated.hw.moe.launch_s == pytest.approx(shared.launch_us * 1e-6)
        assert stated.step_s(Step(4, 2000.0)) < picked.step_s(Step(4, 2000.0))  # 21 us a launch, not DeepGEMM's 54
    with pytest.raises(PlannerInputError, match=r"no trtllm table on hopper GPUs times 'flashinfer_trtllm'"):
        replica_timer(deepseek, "fp8-block", "auto", catalog.gpus.get("h200-sxm"), 8, 1, catalog, "trtllm",
                      moe_kernel="flashinfer_trtllm")
    with pytest.raises(PlannerInputError, match="TensorRT-LLM has no MoE backend planner times as 'triton'"):
        replica_timer(deepseek, "fp8-block", "auto", catalog.gpus.get("b200"), 8, 1, catalog, "trtllm",
                      moe_kernel="triton")


def test_a_stated_moe_kernel_is_timed_on_its_own_table_or_refused(catalog, perf):
    """vLLM told to run FlashInfer's MxInt4 MoE (VLLM_USE_FLASHINFER_MOE_INT4=1) times Kimi-K2.5's int4 experts on
    B200 on that kernel's table (SGLang's of the same FlashInfer function), not Marlin's; a kernel no table of the
    generation measures for the experts' format, or a model without experts, is refused naming --moe-kernel
    (bench/SPEED_PROTOCOL.md, the amendment on the kernel a run states)."""
    kimi, b200 = arch(catalog, "kimi-k2.5"), catalog.gpus.get("b200")
    blackwell = perf.generation("blackwell")
    stated = replica_timer(kimi, "int4-g32", "auto", b200, 8, 1, catalog, "vllm", moe_kernel="flashinfer_trtllm").hw
    picked = replica_timer(kimi, "int4-g32", "auto", b200, 8, 1, catalog, "vllm").hw
    flashinfer = blackwell.moe_rates("w4a16-int4", "vllm", "flashinfer_trtllm")
    assert flashinfer == blackwell.moe_rates("w4a16-int4", "sglang", "flashinfer_trtllm")
    assert flashinfer != blackwell.moe_rates("w4a16-int4", "vllm")
    assert stated.moe_kernel == "flashinfer_trtllm" and picked.moe_kernel is None
    assert stated.moe.flops_per_s == pytest.approx(b200.dense_tflops["bf16"] * 1e12 * flashinfer.compute_efficiency)
    assert stated.moe_column_s == pytest.approx(flashinfer.column_ps * 1e-12) != picked.moe_column_s
    with pytest.raises(PlannerInputError, match=r"--moe-kernel / engine.moe_kernel: no vllm table on hopper GPUs times 'flashinfer_trtllm'"):
        replica_timer(kimi, "int4-g32", "auto", catalog.gpus.get("h200-sxm"), 8, 1, catalog, "vllm",
                      moe_kernel="flashinfer_trtllm")
    with pytest.raises(PlannerInputError, match=r"or use flashinfer_trtllm"):
        replica_timer(kimi, "int4-g32", "auto", b200, 8, 1, catalog, "sglang", moe_kernel="cutlass")
    with pytest.raises(PlannerInputError, match="no routed experts"):
        replica_timer(arch(catalog, "llama-3.1-8b"), "auto", "auto", b200, 1, 1, catalog, "vllm", moe_kernel="triton")
    # vLLM's switch reaches compressed-tensors group-32 int4 experts only (AWQ / GPTQ keep their Marlin methods)
    qwen = arch(catalog, "qwen3-30b-a3b")
    for precision in ("awq", "gptq", "int4"):
        with pytest.raises(PlannerInputError, match=f"reaches int4-g32 experts only, not {precision}"):
            replica_timer(qwen, precision, "auto", b200, 1, 1, catalog, "vllm", moe_kernel="flashinfer_trtllm")
    # SGLang's Hopper tables name Triton as their kernel, but int4 experts run Marlin there (their runner is fixed by
    # compute capability): Triton is not timed for them; on 10.x FlashInfer's is, under its own name
    with pytest.raises(PlannerInputError, match="no sglang table on hopper GPUs times 'triton' for w4a16-int4"):
        replica_timer(kimi, "int4-g32", "auto", catalog.gpus.get("h200-sxm"), 8, 1, catalog, "sglang",
                      moe_kernel="triton")
    assert replica_timer(kimi, "int4-g32", "auto", b200, 8, 1, catalog, "sglang",
                         moe_kernel="flashinfer_trtllm").hw.moe_kernel == "flashinfer_trtllm"


def test_compute_capability_12_blackwell_is_timed_on_its_own_kernel_tables(catalog, perf):
    """The RTX PRO 6000 and RTX 5090 (compute capability 12.0) are generation blackwell-sm120, fitted from the RTX
    PRO 6000's own kernel tables (bench/SPEED_PROTOCOL.md, the compute-capability-12.0 amendment): vLLM's weight-only
    MoE there is Marlin's, not the B200's TensorRT-LLM MXFP4 kernel (and its AWQ experts Marlin's int4 path); the
    B200 keeps blackwell; its PCIe all-reduce is the 12.0 entry's."""
    for name in ("rtx-pro-6000", "rtx-pro-6000-ws", "rtx-5090"):
        assert catalog.gpus.get(name).generation == "blackwell-sm120"
    assert catalog.gpus.get("b200").generation == "blackwell"
    sm120, blackwell = perf.generation("blackwell-sm120"), perf.generation("blackwell")
    assert sm120.name == "blackwell-sm120"
    own, b200 = sm120.moe_rates("w4a16", "vllm"), blackwell.moe_rates("w4a16", "vllm")
    assert own != b200
    assert_w4a16_experts(catalog, sm120, catalog.gpus.get("rtx-pro-6000"), arch(catalog, "qwen3-30b-a3b"), "awq", 1,
                         "w4a16-int4")
    assert perf.interconnect("pcie", "blackwell-sm120", "vllm").generation == "blackwell-sm120"
    # its SGLang MoE table mixes kernels by format (Triton bf16, CUTLASS NVFP4, Marlin W4A16): it names none
    assert sm120.moe_kernel_timed("fp4", "sglang") is None and sm120.moe_kernel_timed("bf16", "sglang") is None
    assert blackwell.moe_kernel_timed("fp4", "sglang") == "flashinfer_trtllm"


def test_amd_quark_mxfp4_is_w4a4_on_cdna4_and_refused_where_not_read(catalog, perf):
    """An AMD Quark MXFP4 checkpoint quantizes the activations too (bench/SPEED_PROTOCOL.md, the Quark MXFP4
    amendment): SGLang runs its experts on AITER's FP4 x FP4 MoE on MI355X (the fp4 MoE rates at the FP4 peak),
    where gpt-oss's mxfp4 runs weight-only; engines and GPUs not read refuse it with the row's reason."""
    quark = catalog.precisions.get("mxfp4-w4a4")
    mi355x = catalog.gpus.get("mi355x")
    assert catalog.support("sglang", quark, mi355x).level == "native"
    refused = catalog.support("vllm", quark, mi355x)
    assert refused.level == "unsupported" and "not read" in refused.source
    assert catalog.support("sglang", quark, catalog.gpus.get("mi300x")).level == "unsupported"
    model = arch(catalog, "qwen3-30b-a3b")
    fp4 = perf.generation("cdna4").moe_rates("fp4", "sglang")
    hw = replica_timer(model, "mxfp4-w4a4", "auto", mi355x, 1, 1, catalog, "sglang").hw
    assert hw.moe.flops_per_s == pytest.approx(mi355x.dense_tflops["fp4"] * 1e12 * fp4.compute_efficiency)
    assert hw.moe.bytes_per_s == pytest.approx(mi355x.memory_bandwidth_gbps * GB * fp4.read_efficiency)
    weight_only = replica_timer(model, "mxfp4", "auto", mi355x, 1, 1, catalog, "sglang").hw
    assert weight_only.moe.flops_per_s < hw.moe.flops_per_s



def test_sglang_graphs_kimi_k25s_prefill_on_blackwell_where_it_runs_kimi_k2s_eagerly(catalog):
    """SGLang >= 0.5.16 disables the prefill graph for the DeepseekV3ForCausalLM architecture on the trtllm_mla backend
    (arg_groups/cuda_graph_hook.py:291-295 @ v0.5.23): Kimi-K2 is that architecture; Kimi-K2.5, whose text model is a
    kimi_k2 too, is KimiK25ForConditionalGeneration and keeps its graph."""
    b200 = catalog.gpus.get("b200")
    k2, k25 = (replica_timer(arch(catalog, name), "auto", "auto", b200, 8, 1, catalog, "sglang")
               for name in ("kimi-k2", "kimi-k2.5"))
    assert k2.hw.eager_launch_s > 0
    assert k25.hw.eager_launch_s == 0


def qwen35_timer(catalog, perf, gpu="h200-sxm", engine="sglang", release=None):
    return replica_timer(arch(catalog, "qwen3.5-397b-a17b"), "fp8", "auto", catalog.gpus.get(gpu), 8, 1, catalog,
                         engine, perf, release=release)


def test_a_gated_deltanet_prefill_runs_its_chunked_kernels(catalog, perf):
    """SPEED_PROTOCOL, the Gated DeltaNet prefill amendment: each GDN layer of a prompt adds its state pass's steps
    through the prompt's 64-token chunks and the chunks' FLOPs per token and value head. By hand for Qwen3.5-397B's
    45 GDN layers at TP 8 on H200 (64 value heads: 8 a rank), SGLang's FLA kernels: 4 prompts of 2,000 tokens (32
    chunks each) in one step."""
    model = arch(catalog, "qwen3.5-397b-a17b")
    delta = [layer.attention for layer in model.layers if layer.attention.delta_heads]
    assert len(delta) == 45 and {(a.delta_heads, a.delta_key_dim, a.delta_value_dim) for a in delta} == {(64, 128, 128)}
    kernel = perf.generation("hopper").engines["sglang"].delta_prefill_kernel((0, 5, 23))
    assert kernel.kernel == "triton"
    h200 = catalog.gpus.get("h200-sxm")
    per_head_token = 2 * 64 * 128 + 4 * 64 * 256 + 6 * 128 * 128  # 180,224
    step = Step(0, 0.0, 8000, 4 * causal_positions(2000), 4)
    expected = 45 * (32 * kernel.chunk_us * 1e-6 + 8000 * 8 * per_head_token / (
        h200.dense_tflops["bf16"] * 1e12 * kernel.compute_efficiency))
    timed, untimed = qwen35_timer(catalog, perf), qwen35_timer(catalog, without_delta_prefill(perf))
    assert timed.forward(step)[1].attention_s == pytest.approx(untimed.forward(step)[1].attention_s + expected)
    # whole prompts alone: the same kernels (one 8,192-token prompt: 128 chunks)
    alone = 45 * (128 * kernel.chunk_us * 1e-6 + 8192 * 8 * per_head_token / (
        h200.dense_tflops["bf16"] * 1e12 * kernel.compute_efficiency))
    assert timed.prefill_s(1, 8192) == pytest.approx(untimed.prefill_s(1, 8192) + alone)
    # a decode step reads the state as before, and a verify pass (graphed) runs the recurrent kernel instead
    decode = Step(32, 4096.0, 0, 0.0, 0)
    assert timed.forward_s(decode) == untimed.forward_s(decode)
    assert timed.graphed().forward_s(step) == untimed.graphed().forward_s(step)


def test_vllm_runs_the_gated_deltanet_prefill_kernel_its_release_picks(catalog, perf):
    """vLLM on Blackwell: 0.19 runs FLA's Triton kernels (FlashInfer's only on SM90), aiconfigurator's 0.24
    FlashInfer's; a release between them, read in neither, keeps the layers untimed; Hopper runs FlashInfer's."""
    step = Step(0, 0.0, 8192, causal_positions(8192), 1)
    untimed = qwen35_timer(catalog, without_delta_prefill(perf), "b200", "vllm", "0.19.0").forward_s(step)
    blackwell = perf.generation("blackwell").engines["vllm"]
    assert blackwell.delta_prefill_kernel((0, 19, 0)).kernel == "triton"
    assert blackwell.delta_prefill_kernel((0, 34, 0)).kernel == "flashinfer"
    assert blackwell.delta_prefill_kernel((0, 21, 0)) is None
    triton = qwen35_timer(catalog, perf, "b200", "vllm", "0.19.0").forward_s(step)
    flashinfer = qwen35_timer(catalog, perf, "b200", "vllm", "0.24.0").forward_s(step)
    assert triton > flashinfer > untimed
    assert qwen35_timer(catalog, perf, "b200", "vllm", "0.21.0").forward_s(step) == pytest.approx(untimed, rel=1e-9)
    assert perf.generation("hopper").engines["vllm"].delta_prefill_kernel((0, 34, 0)).kernel == "flashinfer"


def test_a_decode_step_reads_and_writes_back_each_recurrent_state(catalog, perf):
    """SPEED_PROTOCOL, the correction on recurrent decode: the fused recurrent kernels store the updated state in place,
    so 32 decoding sequences of Qwen3.5-397B at 4,096 tokens move their GDN states twice (read, written back) beside
    their full-attention layers' KV, all at the cache's read rate."""
    timer = qwen35_timer(catalog, perf)
    cost = timer._costs[0]
    assert cost.kv_state > 0
    decode = Step(32, 4096.0, 0, 0.0, 0)
    _, terms, _ = timer.forward(decode)
    read = 32 * (cost.kv_growing * 4096 + cost.kv_state)
    assert terms.kv_bytes == read  # what the step reads, as before
    assert terms.attention_s == pytest.approx((read + 32 * cost.kv_state) / cost.kv_bytes_per_s)


def test_deepseek_v4_times_its_dense_layers_as_fp8_block_and_its_experts_on_their_own_kernel(catalog, perf):
    """DeepSeek-V4's released weights (block-FP8 dense layers, MXFP4 experts): the dense GEMMs at the FP8 peak on the
    fp8-block tables wherever the engine runs fp8-block natively; the experts on the kernel the engine runs them with
    on the generation: FP4 x FP4 on CDNA4 (SGLang's AITER path), MXFP4 x MXFP8 (w4a8, the FP8 peak) on Blackwell,
    and the weight-only MXFP4 kernel at the 16-bit peak on Hopper."""
    model = arch(catalog, "deepseek-v4-pro")

    def rates(gpu, engine="sglang"):
        card = catalog.gpus.get(gpu)
        hw = replica_timer(model, "auto", "auto", card, 8, 1, catalog, engine).hw
        generation = perf.generation(card.generation)
        return hw, generation, card.dense_tflops

    hw, cdna4, peak = rates("mi355x")
    assert hw.low_bit.flops_per_s == pytest.approx(peak["fp8"] * 1e12 * cdna4.gemm_rates("fp8-block", "sglang")
                                                   .compute_efficiency)
    assert hw.moe.flops_per_s == pytest.approx(peak["fp4"] * 1e12 * cdna4.moe_rates("fp4", "sglang").compute_efficiency)
    assert hw.activation_quant_s > 0  # SGLang quantizes each FP8 GEMM's activations in a kernel of its own there

    hw, blackwell, peak = rates("b200")
    w4a8 = blackwell.moe_rates("w4a8", "sglang", hw.moe_kernel)
    assert w4a8 is not blackwell.moe_rates("bf16", "sglang", hw.moe_kernel)
    assert hw.moe.flops_per_s == pytest.approx(peak["fp8"] * 1e12 * w4a8.compute_efficiency)
    assert hw.low_bit.flops_per_s == pytest.approx(peak["fp8"] * 1e12 * blackwell.gemm_rates("fp8-block", "sglang")
                                                   .compute_efficiency)

    hw, hopper, peak = rates("h200-sxm")
    assert hw.low_bit.flops_per_s == pytest.approx(peak["fp8"] * 1e12 * hopper.gemm_rates("fp8-block", "sglang")
                                                   .compute_efficiency)
    assert hw.moe.flops_per_s == pytest.approx(peak["bf16"] * 1e12 * hopper.moe_rates("w4a16", "sglang")
                                               .compute_efficiency)


def test_a_mixed_precisions_experts_have_a_rule_on_every_generation_an_engine_runs_them_natively(catalog, perf):
    """A generation some engine's precision_support row lists native for a precision with experts rules must have
    one: without it the experts would fall back to the weight-only kernel the engine does not run there."""
    for compute in (p for p in perf.precisions if p.experts):
        for engine in catalog.kernels:
            for row in (r for r in engine.precisions if r.name == compute.name):
                missing = [g for g in row.native if compute.experts_on(g) is None]
                assert not missing, f"{engine.name} runs {compute.name} natively on {missing}: add an experts rule"


@pytest.mark.parametrize("old, new, message", [
    ("    dense_as: fp8-block\n", "    dense_as: fp9-block\n", r"precisions\[fp8-block-mxfp4-experts\]\.dense_as 'fp9-block'"),
    ("      - generations: [cdna4]\n        tensor_core_format: fp4\n",
     "      - generations: [cdna9]\n        tensor_core_format: fp4\n",
     r"precisions\[fp8-block-mxfp4-experts\]\.experts names cdna9"),
])
def test_a_mixed_precisions_entry_names_only_what_its_catalog_holds(tmp_path, old, new, message):
    text = (Path(catalog_dir()) / "performance.yaml").read_text()
    assert text.count(old) == 1
    (tmp_path / "performance.yaml").write_text(text.replace(old, new))
    with pytest.raises(PlannerInputError, match=message):
        load_performance_catalog(str(tmp_path))
