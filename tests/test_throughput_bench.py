"""bench/throughput_accuracy.py reads what a published row states: the running-request cap of its server command
(bench/SPEED_PROTOCOL.md, the running-cap amendment), its release, its prefix cache, its run lengths."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import throughput_accuracy as bench  # noqa: E402 - bench/ is not a package

from planner import api  # noqa: E402


@pytest.mark.parametrize("notes, cap", [
    ("sglang serve ... --max-running-requests 128 --stream-interval 30", 128),
    ("vllm serve ... --max-num-seqs=16 --trust-remote-code", 16),
    ("--cuda-graph-max-bs 256 --max-running-requests 256; later --max-running-requests 64", 64),
    ("max-num-seqs in {256, 512} (prose, not the flag)", None),
    ("--max-running-requests and --cuda-graph-max-bs sized to the concurrency", None),
    (None, None),
])
def test_the_running_cap_is_read_from_the_stated_flag(notes, cap):
    assert bench.stated_running_cap(notes) == cap


@pytest.mark.parametrize("engine, dp, notes, passes", [
    ("sglang", 8, "--tp 8 --dp 8 --enable-dp-attention --enable-prefill-delayer --page-size 256", 30),
    ("sglang", 8, "--enable-prefill-delayer --prefill-delayer-max-delay-passes 12", 12),
    ("sglang", 1, "--enable-prefill-delayer on the DP-attention configurations", 0),  # a TP row's notes naming the DP arm
    ("vllm", 8, "--enable-prefill-delayer", 0),
    ("sglang", 8, "--enable-dp-attention --disable-radix-cache", 0),
])
def test_the_prefill_delayer_is_read_from_a_dp_rows_server_command(engine, dp, notes, passes):
    assert bench.stated_prefill_delay(engine, dp, notes) == passes


@pytest.mark.parametrize("version, release", [
    ("v0.5.12 (image lmsysorg/sglang:v0.5.12)", "0.5.12"),
    ("0.10.1", "0.10.1"),
    ("0.0.0.dev1+g631db6c75 (dev build)", None),  # setuptools-scm's fallback: no release tag in reach
    ("commit 631db6c75", None),
    ("not stated", None),
    (None, None),
])
def test_the_release_is_what_the_version_states(version, release):
    assert bench.stated_release(version) == release


@pytest.mark.parametrize("notes, on", [
    ("sglang serve ... --disable-radix-cache --max-running-requests 256", False),
    ("vllm serve ... --no-enable-prefix-caching", False),
    ("vllm serve ... --enable-prefix-caching", True),
    ("radix cache left at its default", True),
])
def test_a_stated_prefix_cache_switch_is_read(catalog, notes, on):
    raw = {"source": "test", "engine": "SGLang", "engine_version": "0.5.12", "model": "Qwen/Qwen3.5-35B-A3B",
           "precision": "bf16", "kv_cache_dtype": "auto", "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1,
           "isl": 1024, "osl": 256, "concurrency": 4, "measured": {"Mean TPOT (ms)": "10"}, "notes": notes}
    assert bench.normalise("t:0", raw, catalog).prefix_cache is on


def test_a_capped_closed_loop_runs_at_most_the_cap(catalog):
    row = bench.Measurement(row="t:0", engine="vllm", model="llama-3.1-8b", precision="bf16", kv_dtype="auto",
                            gpu="h100-sxm", tp=1, pp=1, ep=1, dp=1, batch=256, prompt_tokens=1024, output_tokens=256,
                            output_tokens_per_s=None, tpot_s=0.02, ttft_s=None, source="test", form="closed loop")
    arch = bench.architecture(catalog, row)
    free, capped = (bench.predict(catalog, r, arch) for r in (row, replace(row, max_running=32)))
    # 32 running: each step decodes fewer requests (a shorter step) and the other 224 clients queue
    assert capped.tpot_s < free.tpot_s
    assert capped.ttft_s > free.ttft_s
    assert capped.output_tokens_per_s < free.output_tokens_per_s


def test_a_closed_loop_the_pool_cannot_hold_at_once_is_scheduled_not_skipped(catalog):
    """The protocol's amendment on closed loops whose concurrency the engine could not run at once: a vLLM closed
    loop of 2,048 clients at 32K tokens each (more than one H100's pool holds) runs what the pool admits and queues
    the rest; a static batch of them is still skipped, as is a DP-attention row. (Its lengths vary: with fixed ones
    the simulator would replay it, the amendment on vLLM's pool-capped loops.)"""
    row = bench.Measurement(row="t:0", engine="vllm", model="llama-3.1-8b", precision="bf16", kv_dtype="auto",
                            gpu="h100-sxm", tp=1, pp=1, ep=1, dp=1, batch=2048, prompt_tokens=30000,
                            output_tokens=2000, output_tokens_per_s=None, tpot_s=0.05, ttft_s=None, source="test",
                            form="closed loop", lengths_vary=True)
    arch = bench.architecture(catalog, row)
    predicted = bench.predict(catalog, row, arch)
    loop = api.perf("llama-3.1-8b", gpu="h100-sxm", tp=1, concurrency=2048, prompt_tokens=30000,
                    output_tokens=2000, varying_lengths=True, catalog=catalog).closed_loop
    assert loop.limit == "kv pool" and loop.running < 2048  # fewer run at once: the other clients wait in the queue
    assert predicted.tpot_s == pytest.approx(loop.tpot_s) and predicted.ttft_s == pytest.approx(loop.ttft_s)
    for skipped in (replace(row, form="static"), replace(row, dp=2, tp=2)):
        with pytest.raises(bench.Skip, match="does not fit"):
            bench.architecture(catalog, skipped)


def test_a_run_is_timed_at_the_lengths_it_drew(catalog):
    """bench_serving's random lengths fall below the requested ones without --random-range-ratio: the printed totals
    give the means the run had (the protocol's run-lengths amendment); without them the requested lengths stand."""
    raw = {"source": "test", "engine": "SGLang", "engine_version": "0.5.7", "model": "Qwen/Qwen3-8B", "precision": "bf16",
           "kv_cache_dtype": "auto", "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1, "isl": 1000, "osl": 1000,
           "concurrency": 16, "measured": {"Mean TPOT (ms)": "10", "Total input tokens": "6101",
                                           "Total generated tokens": "4220", "Successful requests": "10"}}
    row = bench.normalise("t:0", raw, catalog)
    assert (row.prompt_tokens, row.output_tokens) == (610, 422) and row.lengths_vary
    fixed = {**raw, "measured": {**raw["measured"], "Total input tokens": "10000", "Total generated tokens": "9990"}}
    assert not bench.normalise("t:0", fixed, catalog).lengths_vary  # within 2% of the requested: a fixed-length run
    del raw["measured"]["Successful requests"]
    row = bench.normalise("t:0", raw, catalog)
    assert (row.prompt_tokens, row.output_tokens) == (1000, 1000) and not row.lengths_vary


def test_a_closed_loops_throughput_is_compared_at_the_concurrency_the_run_held(catalog):
    """The protocol's amendment on a finite run's throughput: a closed loop whose run states its mean concurrency L
    (bench_serving's 'Concurrency', else requests/s x mean E2E latency) of C clients shows the loop's output tokens/s
    x L / C, its TPOT and TTFT untouched; a run sent at a request rate, or one that states no L, is compared as the
    loop runs."""
    raw = {"source": "test", "engine": "SGLang", "engine_version": "0.5.7", "model": "Qwen/Qwen3-8B", "precision": "bf16",
           "kv_cache_dtype": "auto", "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1, "isl": 1000, "osl": 1000,
           "concurrency": 16, "request_rate": "inf",
           "measured": {"Mean TPOT (ms)": "10", "Output token throughput (tok/s)": "1200", "Concurrency": "13.6"}}
    row = bench.normalise("t:0", raw, catalog)
    assert row.mean_concurrency == 13.6
    arch = bench.architecture(catalog, row)
    held, loop = bench.predict(catalog, row, arch), bench.steady_state(catalog, row, arch)
    assert held.output_tokens_per_s == pytest.approx(loop.output_tokens_per_s * 13.6 / 16)
    assert (held.tpot_s, held.ttft_s) == (loop.tpot_s, loop.ttft_s)
    by_little = {**raw, "measured": {"Mean TPOT (ms)": "10", "Request throughput (req/s)": "1.2",
                                     "Mean E2E Latency (ms)": "11000"}}
    assert bench.normalise("t:1", by_little, catalog).mean_concurrency == pytest.approx(13.2)
    assert bench.normalise("t:2", {**raw, "request_rate": "64.0"}, catalog).mean_concurrency is None
    unstated = bench.normalise("t:3", {**raw, "measured": {"Mean TPOT (ms)": "10"}}, catalog)
    assert unstated.mean_concurrency is None
    assert bench.predict(catalog, unstated, arch) == bench.steady_state(catalog, unstated, arch)


def test_a_time_boxed_decode_sweep_is_a_decode_window(catalog):
    """llm_decode_bench.py measures the server's generation rate once every request is past its prefill (the
    protocol's decode-window amendment): its TPOT is the batch's decode step, with no prompt inside it."""
    raw = {"source": "test", "engine": "vLLM", "engine_version": "0.17.0", "model": "Qwen/Qwen3-8B", "precision": "bf16",
           "kv_cache_dtype": "auto", "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1, "isl": 16384, "osl": None,
           "concurrency": 8, "measured": {"per_request_avg_tps (tok/s)": "50", "total_tokens": "12000",
                                          "num_completed": "8", "ttft_avg (s)": "1.4"}}
    row = bench.normalise("t:0", raw, catalog)
    assert (row.form, row.batch, row.prompt_tokens, row.output_tokens) == (bench.DECODE_WINDOW, 8, 16384, 1500)
    assert row.tpot_s == pytest.approx(0.02)
    arch = bench.architecture(catalog, row)
    window = bench.predict(catalog, row, arch)
    assert window.tpot_s == window.decode_step_s
    # the same requests as a closed loop re-prefill a 16K prompt whenever one finishes: slower per token
    assert bench.predict(catalog, replace(row, form="closed loop"), arch).tpot_s > window.tpot_s
    single = bench.normalise("t:1", {**raw, "concurrency": 1}, catalog)
    assert single.form == "single stream"


def test_a_server_that_fills_the_kv_cache_instead_of_prefilling_is_a_decode_window(catalog):
    """A row stating `prefill_skipped` (vLLM's DecodeBenchConnector fills each request's KV cache; the protocol's
    prefill-skipped amendment) measured its clients only decoding: a decode window, not a closed loop; without it the
    same row is the closed loop."""
    raw = {"source": "test", "engine": "vLLM", "engine_version": "0.17.0", "model": "Qwen/Qwen3-8B", "precision": "bf16",
           "kv_cache_dtype": "auto", "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1, "isl": 8192, "osl": 100,
           "concurrency": 10, "prefill_skipped": "DecodeBenchConnector", "measured": {"TPOT (ms)": "16"}}
    row = bench.normalise("t:0", raw, catalog)
    assert (row.form, row.batch, row.prompt_tokens, row.output_tokens) == (bench.DECODE_WINDOW, 10, 8192, 100)
    window = bench.predict(catalog, row, bench.architecture(catalog, row))
    assert window.tpot_s == window.decode_step_s
    plain = {k: v for k, v in raw.items() if k != "prefill_skipped"}
    assert bench.normalise("t:1", plain, catalog).form == "closed loop"


@pytest.mark.parametrize("text, precision", [
    ("fp8 (Qwen block-FP8 checkpoint)", "fp8-block"),
    ("FP8 (the Qwen ...-FP8 checkpoint; block-wise FP8 weights)", "fp8-block"),
    ("fp8 (checkpoint block-FP8, --quantization fp8)", "fp8-block"),
    ("fp8 (online quantization of the BF16 weights)", "fp8"),
    ("BF16 (no block scaling)", "bf16"),
])
def test_a_stated_block_scaled_fp8_checkpoint_is_read_as_block_fp8(text, precision):
    """The protocol's correction on stated block-FP8 checkpoints: "fp8" of a checkpoint the row says is stored
    block-scaled ran its block-FP8 kernels; other texts read as before."""
    assert bench.stated_precision(text) == precision


def test_an_inferencex_row_runs_at_its_harness_lengths(catalog):
    """InferenceX's benchmark_serving.py draws each length uniformly over [int(0.8 L), L] (the protocol's InferenceX-
    lengths amendment): a row it ran is timed at those means, its lengths varying; a stated ratio wins, and printed
    totals and other harnesses keep what they say."""
    raw = {"source": "github.com/SemiAnalysisAI/InferenceX-app @ abc: blog, row Conc 16", "engine": "vLLM",
           "engine_version": "0.21.0", "model": "Qwen/Qwen3-8B", "precision": "bf16", "kv_cache_dtype": "auto",
           "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1, "isl": 8192, "osl": 1024, "concurrency": 16,
           "dataset": "random 8192/1024 (InferenceX harness)", "measured": {"TPOT (ms)": "20"}}
    row = bench.normalise("t:0", raw, catalog)
    assert (row.prompt_tokens, row.output_tokens, row.lengths_vary) == (7372, 922, True)  # (6553 + 8192) / 2
    assert row.drawn_lengths == ((6553, 8192), (819, 1024))
    stated = bench.normalise("t:1", {**raw, "dataset": "random, --random-range-ratio 0.5"}, catalog)
    assert (stated.prompt_tokens, stated.output_tokens) == (6144, 768)
    assert stated.drawn_lengths == ((4096, 8192), (512, 1024))
    other = bench.normalise("t:2", {**raw, "source": "a vendor blog", "dataset": "random 8192/1024"}, catalog)
    assert (other.prompt_tokens, other.output_tokens, other.lengths_vary) == (8192, 1024, False)
    assert other.drawn_lengths is None
    totals = {"Total input tokens": "80000", "Total generated tokens": "10000", "Successful requests": "10"}
    printed = bench.normalise("t:3", {**raw, "measured": {**raw["measured"], **totals}}, catalog)
    assert (printed.prompt_tokens, printed.output_tokens) == (8000, 1000)
    # rates over the run's duration are its totals too (the protocol's run-rates correction): a fixed-length run
    rates = {"Input token throughput (tok/s)": "31663.74", "Output token throughput (tok/s)": "989.49",
             "Benchmark duration (s)": "82.79", "Successful requests": "640"}
    timed = bench.normalise("t:4", {**raw, "isl": 4096, "osl": 128, "measured": {**raw["measured"], **rates}}, catalog)
    assert (timed.prompt_tokens, timed.output_tokens, timed.lengths_vary) == (4096, 128, False)


@pytest.mark.parametrize("key, median", [
    ("Median TPOT (ms)", True), ("tpot_ms (P50, as printed)", True), ("TPOT/ITL (median)", True),
    ("TPOT (ms) (mean or median not stated)", False), ("TPOT (ms, as printed; mean or median not stated)", False),
    ("tpot_ms (as printed)", False), ("Mean TPOT (ms)", False),
])
def test_a_tpot_key_names_a_median_only_where_it_states_one(key, median):
    """The protocol's corrections on replayed rows' medians: a key naming a median or P50 is compared on the replay's
    median, one that says its statistic is not stated on its mean, as one that names none."""
    assert bool(bench.MEDIAN_KEY.search(key)) is median


def test_the_harness_lengths_are_replayed_within_a_token_of_the_ranges_it_drew():
    """The protocol's amendment on replaying InferenceX's lengths: vLLM's random dataset at the floor of each range's
    mean and the prompt range's half-width draws within one token of the harness's [int(0.8 L), L] at each end; fixed
    lengths replay as they are."""
    row = bench.Measurement(row="t:0", engine="vllm", model="qwen3-8b", precision="bf16", kv_dtype="auto",
                            gpu="h100-sxm", tp=1, pp=1, ep=1, dp=1, batch=64, prompt_tokens=7372, output_tokens=922,
                            output_tokens_per_s=None, tpot_s=0.04, ttft_s=None, source="test", form="closed loop",
                            lengths_vary=True, drawn_lengths=((6553, 8192), (819, 1024)))
    shape, ratio, longest = bench.replayed_lengths(row)
    drawn = bench.BenchmarkRun(num_prompts=1, input_len=shape.prompt_tokens, output_len=shape.output_tokens,
                               range_ratio=ratio)
    assert (shape.prompt_tokens, shape.output_tokens) == (7372, 921) and ratio == pytest.approx(1 / 9, abs=1e-3)
    assert drawn.input_bounds == (6552, 8192) and drawn.output_bounds == (818, 1024) and longest == 9216
    fixed = replace(row, lengths_vary=False, drawn_lengths=None, prompt_tokens=8192, output_tokens=1024)
    assert bench.replayed_lengths(fixed) == (bench.Workload(8192, 1024), 0.0, 9216)


def test_a_pool_capped_vllm_loop_of_drawn_lengths_is_replayed_at_them(catalog):
    """vLLM admits on prompt blocks whatever the lengths: a closed loop its pool caps, whose lengths InferenceX's harness
    drew, is the simulated run of those lengths (random dataset, the longest request admitted), not the analytic loop
    it keeps where the distribution is unknown."""
    row = bench.Measurement(row="t:0", engine="vllm", model="qwen3-8b", precision="bf16", kv_dtype="auto",
                            gpu="h100-sxm", tp=1, pp=1, ep=1, dp=1, batch=260, prompt_tokens=1843, output_tokens=230,
                            output_tokens_per_s=None, tpot_s=0.04, ttft_s=None, source="test", form="closed loop",
                            lengths_vary=True, drawn_lengths=((1638, 2048), (204, 256)))
    arch = bench.architecture(catalog, row)
    replayed, analytic = bench.predict(catalog, row, arch), bench.predict(catalog, replace(row, drawn_lengths=None), arch)
    perf = api.perf("qwen3-8b", gpu="h100-sxm", engine="vllm", concurrency=260, prompt_tokens=1843,
                    output_tokens=230, varying_lengths=True, catalog=catalog)
    assert perf.closed_loop.limit == "kv pool" and perf.closed_loop_run is None  # told no distribution: the loop
    assert analytic.tpot_s == pytest.approx(perf.closed_loop.tpot_s)
    shape, ratio, _ = bench.replayed_lengths(row)
    run = bench.BenchmarkRun(num_prompts=2600, max_concurrency=260, input_len=shape.prompt_tokens,
                             output_len=shape.output_tokens, range_ratio=ratio)
    simulated = api.bench("qwen3-8b", run, gpu="h100-sxm", engine="vllm", catalog=catalog).result
    assert replayed.tpot_s == pytest.approx(simulated.tpot.mean_ms / 1000)
    assert replayed.output_tokens_per_s == pytest.approx(simulated.output_throughput)
    # admitted on their prompts' blocks, more run at once than the loop's R of P + N each, and some are preempted
    assert simulated.mean_batch > perf.closed_loop.running and simulated.preemptions > 0
    assert replayed.tpot_s > analytic.tpot_s * 1.05


def test_an_sglang_dp_attention_closed_loop_is_scored_as_planner_perf_predicts_it(catalog):
    """The protocol's amendment on DP-attention closed loops: an SGLang row with DP attention is the closed loop over
    its groups' pools that `planner perf --concurrency --dp` gives (its prompt passes shared by every group), not the
    static batch of its clients; a TensorRT-LLM one, whose memory planner does not size under DP attention, keeps the
    static batch."""
    row = bench.Measurement(row="t:0", engine="sglang", model="qwen3-30b-a3b", precision="bf16", kv_dtype="auto",
                            gpu="h100-sxm", tp=2, pp=1, ep=1, dp=2, batch=64, prompt_tokens=1024, output_tokens=256,
                            output_tokens_per_s=None, tpot_s=0.04, ttft_s=None, source="test", form="closed loop",
                            lengths_vary=True)
    arch = bench.architecture(catalog, row)
    predicted = bench.predict(catalog, row, arch)
    perf = api.perf("qwen3-30b-a3b", gpu="h100-sxm", tp=2, dp=2, engine="sglang", concurrency=64, prompt_tokens=1024,
                    output_tokens=256, varying_lengths=True, catalog=catalog)
    assert predicted.tpot_s == pytest.approx(perf.closed_loop.tpot_s)
    assert predicted.output_tokens_per_s == pytest.approx(perf.closed_loop.output_tokens_per_s)
    static = bench.timer_performance(bench.timer(catalog, row, arch), 64, bench.Workload(1024, 256))
    assert predicted.tpot_s > static.tpot_s * 1.2  # the shared prompt passes, which the static batch leaves out
    assert bench.schedules_closed_loop(row) and not bench.schedules_closed_loop(replace(row, engine="trtllm"))


def test_a_rows_stated_step_budget_and_memory_share_size_its_closed_loop(catalog):
    """The server flags a row's notes state for the step budget and the memory share reach the engine's memory budget
    (the protocol's budget amendment): the engine's own flags, each where it states one value."""
    raw = {"source": "test", "engine": "vLLM", "engine_version": "0.21.0", "model": "Qwen/Qwen3-8B", "precision": "bf16",
           "kv_cache_dtype": "auto", "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1, "isl": 8192, "osl": 1024,
           "concurrency": 32, "measured": {"TPOT (ms)": "20"},
           "notes": "vllm serve ... --max-num-batched-tokens 2048 --gpu-memory-utilization 0.8 --chunked-prefill-size 4096"}
    row = bench.normalise("t:0", raw, catalog)
    assert dict(row.settings) == {"max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.8}
    sglang = bench.normalise("t:1", {**raw, "engine": "SGLang", "engine_version": "0.5.12",
                                     "notes": "--chunked-prefill-size 16384 (c < 16) or --chunked-prefill-size 8192; "
                                              "--mem-fraction-static 0.85"}, catalog)
    assert dict(sglang.settings) == {"mem_fraction_static": 0.85}  # two budgets stated: neither is read
    default = replace(row, settings=())
    arch = bench.architecture(catalog, row)
    # a 2,048-token budget cuts each 8K prompt into four steps' chunks, where the default takes it in one
    assert bench.predict(catalog, row, arch).tpot_s != bench.predict(catalog, default, arch).tpot_s


def test_a_vllm_rows_stated_block_size_pages_its_pool(catalog):
    """The protocol's block-size amendment: a vLLM row's --block-size reaches its engine budget (EngineSettings
    .block_size, as `planner estimate --engine vllm --block-size` takes it), so its requests hold whole blocks of that
    size; an SGLang row's flag of that name is not vLLM's."""
    raw = {"source": "test", "engine": "vLLM", "engine_version": "0.21.0", "model": "Qwen/Qwen3-8B", "precision": "bf16",
           "kv_cache_dtype": "auto", "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1, "isl": 1000, "osl": 600,
           "concurrency": 512, "measured": {"TPOT (ms)": "20"}, "notes": "vllm serve ... --block-size 128 ..."}
    row = bench.normalise("t:0", raw, catalog)
    assert dict(row.settings) == {"block_size": 128}
    assert bench.normalise("t:1", {**raw, "engine": "SGLang", "engine_version": "0.5.12"}, catalog).settings == ()
    arch = bench.architecture(catalog, row)
    # the pool caps the 512 clients; a request of 1,600 tokens holds 13 blocks of 128 (1,664 tokens), against 25 of the
    # default 64 (1,600): fewer run at once, so fewer tokens a second come out
    paged, default = (bench.predict(catalog, r, arch) for r in (row, replace(row, settings=())))
    assert paged.output_tokens_per_s < default.output_tokens_per_s

def test_an_sglang_rows_stated_receive_interval_reaches_its_closed_loop(catalog):
    """SGLang's --scheduler-recv-interval, where a row's notes state one value, sets how often its closed loop polls for
    new requests (the protocol's receive-interval amendment); other engines' rows and two values keep every loop."""
    raw = {"source": "test", "engine": "SGLang", "engine_version": "0.5.12", "model": "Qwen/Qwen3-8B",
           "precision": "bf16", "kv_cache_dtype": "auto", "gpu": "H100 SXM", "num_gpus": 1, "tp": 1, "pp": 1,
           "isl": 1024, "osl": 1024, "concurrency": 32, "measured": {"TPOT (ms)": "20"},
           "dataset": "random 1024/1024 (InferenceX harness)", "notes": "... --scheduler-recv-interval 30 ..."}
    row = bench.normalise("t:0", raw, catalog)
    assert row.recv_interval == 30 and row.lengths_vary
    assert bench.normalise("t:1", {**raw, "engine": "vLLM", "engine_version": "0.21.0"}, catalog).recv_interval == 1
    both = {**raw, "notes": "--scheduler-recv-interval 10 below 16 clients, --scheduler-recv-interval 30 from 16"}
    assert bench.normalise("t:2", both, catalog).recv_interval == 1
    arch = bench.architecture(catalog, row)
    assert bench.predict(catalog, row, arch).tpot_s < bench.predict(catalog, replace(row, recv_interval=1), arch).tpot_s


@pytest.mark.parametrize("reader, engine, notes, name", [
    ("stated_moe_kernel", "sglang", "python3 -m sglang.launch_server ... --moe-runner-backend flashinfer_trtllm --tp 8",
     "flashinfer_trtllm"),
    ("stated_moe_kernel", "sglang", "--moe-runner-backend=triton", "triton"),
    ("stated_moe_kernel", "sglang", "--moe-runner-backend triton; the other arm --moe-runner-backend flashinfer_trtllm",
     None),
    ("stated_moe_kernel", "vllm", "env VLLM_USE_FLASHINFER_MOE_INT4=1 (no --kv-cache-dtype)", "flashinfer_trtllm"),
    ("stated_moe_kernel", "vllm", "env VLLM_USE_FLASHINFER_MOE_INT4=0", None),
    ("stated_moe_kernel", "vllm", "--moe-runner-backend triton", None),  # an SGLang flag in a vLLM row's prose
    ("stated_moe_kernel", "sglang", None, None),
    # TensorRT-LLM's LLM API options: the TRTLLM backend is its trtllm-gen MoE; CUTLASS is its default (no kernel named)
    ("stated_moe_kernel", "trtllm", "extra options: ..., moe_config {backend: TRTLLM}; piecewise CUDA graphs false",
     "flashinfer_trtllm"),
    ("stated_moe_kernel", "trtllm", "moe_config: {backend: CUTLASS}", None),
    ("stated_moe_kernel", "trtllm", "moe_config {backend: TRTLLM} at low concurrency, moe_config {backend: CUTLASS} above",
     None),
    ("stated_attention_backend", "sglang", "--attention-backend triton --tensor-parallel-size $TP", "triton"),
    ("stated_attention_backend", "sglang", "--attention-backend=aiter", "aiter"),
    ("stated_attention_backend", "sglang", "--attention-backend triton; the other arm --attention-backend aiter", None),
    ("stated_attention_backend", "vllm", "--attention-backend triton", None),
    ("stated_attention_backend", "sglang", None, None),
])
def test_the_stated_kernel_and_attention_backend_are_read_from_the_server_command(reader, engine, notes, name):
    assert getattr(bench, reader)(engine, notes) == name


def test_a_rocm_closed_loop_told_triton_keeps_the_whole_fraction(catalog):
    """InferenceX's Qwen3.5-397B FP8 recipe on MI355X (--attention-backend triton --mem-fraction-static 0.8, 8K / 1K at
    TP 2): told triton, SGLang 0.5.12 takes no 0.85 of the fraction, so the pool holds the 32 clients (about 30 ran);
    resolving aiter, it would hold 14."""
    row = bench.Measurement(row="t", engine="sglang", model="qwen3.5-397b-a17b", precision="fp8", kv_dtype="auto",
                            gpu="mi355x", tp=2, pp=1, ep=1, dp=1, batch=32, prompt_tokens=7372, output_tokens=922,
                            output_tokens_per_s=None, tpot_s=0.031, ttft_s=None, source="test", form="closed loop",
                            release="0.5.12", settings=(("mem_fraction_static", 0.8),), attention_backend="triton")
    arch = bench.architecture(catalog, row)
    told, resolved = (bench.predict(catalog, r, arch).tpot_s for r in (row, replace(row, attention_backend=None)))
    assert told > resolved * 1.3  # 32 running against 14


def test_a_stated_kernel_no_table_measures_keeps_the_releases_pick(catalog):
    """An SGLang row stating a kernel the catalog has no table of is timed on its release's pick and says so."""
    row = bench.Measurement(row="t", engine="sglang", model="kimi-k2.5", precision="int4-g32", kv_dtype="auto",
                            gpu="b200", tp=8, pp=1, ep=1, dp=1, batch=4, prompt_tokens=1000, output_tokens=1000,
                            output_tokens_per_s=None, tpot_s=0.01, ttft_s=None, source="test", form="closed loop",
                            moe_kernel="cutlass")
    kimi = bench.architecture(catalog, row)
    kept = bench.with_measured_kernel(catalog, row, kimi)
    assert kept.moe_kernel is None and kept.unmeasured_kernel == "cutlass"
    measured = replace(row, moe_kernel="flashinfer_trtllm")
    assert bench.with_measured_kernel(catalog, measured, kimi) == measured
    # vLLM's switch reaches compressed-tensors group-32 int4 experts only: a GPTQ row keeps Marlin
    gptq = replace(row, engine="vllm", precision="gptq", moe_kernel="flashinfer_trtllm")
    assert bench.with_measured_kernel(catalog, gptq, kimi).unmeasured_kernel == "flashinfer_trtllm"


@pytest.mark.parametrize("text, model", [
    ("nvidia/DeepSeek-R1-0528-FP4-v2 (DeepSeek-R1-0528, NVFP4)", "deepseek-v3"),
    ("nvidia/DeepSeek-R1-0528-NVFP4-v2", "deepseek-v3"),
    ("DeepSeek-R1 FP8 (printed as 'DeepSeek-R1 FP8'; path not stated)", "deepseek-v3"),
    ("GLM-5 FP8 checkpoint (printed 'GLM-5 FP8', 744B MoE)", "glm-5"),
    ("deepseek-ai/DeepSeek-V4-Flash (cookbook variant 'flash'); cookbook name 'DeepSeek-V4 Flash'", "deepseek-v4-flash"),
    ("zai-org/GLM-5.2", None),  # another model: not GLM-5's FP8 release
])
def test_a_rows_model_name_is_reduced_to_the_catalog_model_it_runs(catalog, text, model):
    """The correction note on model names (bench/SPEED_PROTOCOL.md): the model is what precedes a first parenthesis;
    NVIDIA's -v2 NVFP4 releases and DeepSeek-R1 / GLM-5 FP8 named without a repository id are their catalog models."""
    if model is None:
        with pytest.raises(bench.Skip, match="model not in the catalog"):
            bench.catalog_model(catalog, text)
    else:
        assert bench.catalog_model(catalog, text) == model


def test_a_kimi_row_naming_its_checkpoints_int4_experts_is_read_as_int4_g32(catalog):
    """The correction on Kimi-K2.5 rows: "int4 routed experts (checkpoint native ...), bf16 rest" is the checkpoint's
    group-32 int4 experts, not the fall-through bf16 of "bf16 rest"."""
    raw = {"source": "test", "engine": "SGLang", "engine_version": "0.5.6.post2", "model": "moonshotai/Kimi-K2.5",
           "precision": "int4 routed experts (checkpoint native compressed-tensors W4A16), bf16 rest",
           "kv_cache_dtype": "auto", "gpu": "H200", "num_gpus": 8, "tp": 8, "pp": 1, "isl": 500, "osl": 500,
           "concurrency": 16, "measured": {"Mean TPOT (ms)": "30"}}
    assert bench.normalise("t:0", raw, catalog).precision == "int4-g32"



def test_a_closed_loop_is_sized_at_the_release_it_states_where_planner_keeps_its_profile(catalog):
    """The protocol's release-pool amendment: an SGLang 0.5.12 closed loop of Qwen3.5 is sized with 0.5.12's pool (3
    state slots a running request) as `planner perf --engine-version 0.5.12` sizes it; a release planner keeps no
    profile of, or none, is sized with the default's (5 slots a request at 0.5.23). The pool caps 0.5.12's loop, and
    that release counts running outputs at its ratio, so the row is replayed as `planner perf --engine-version 0.5.12`
    replays it (the SGLang-admission amendment)."""
    row = bench.Measurement(row="t:0", engine="sglang", model="qwen3.5-27b", precision="bf16", kv_dtype="auto",
                            gpu="h200-sxm", tp=1, pp=1, ep=1, dp=1, batch=1024, prompt_tokens=8192, output_tokens=1024,
                            output_tokens_per_s=None, tpot_s=0.04, ttft_s=None, source="test", form="closed loop",
                            release="0.5.12")
    arch = bench.architecture(catalog, row)

    def perf(version):
        return api.perf("qwen3.5-27b", gpu="h200-sxm", engine="sglang", engine_version=version, concurrency=1024,
                        prompt_tokens=8192, output_tokens=1024, catalog=catalog)

    at_stated, at_default = perf("0.5.12"), perf(None)
    stated, default = at_stated.closed_loop, at_default.closed_loop
    # 0.5.12 admits 218 // 3 = 72 for its state slots and its token pool holds 61; 0.5.23, 215 // 5 = 43
    assert (stated.running, stated.limit, default.running, default.limit) == (61, "kv pool", 43, "state slots")
    replay = at_stated.closed_loop_run  # as many prompts as a simulated run holds: 2,000,000 output tokens / 1,024
    assert replay.run.num_prompts == 1953 and replay.run.max_concurrency == 1024 and at_default.closed_loop_run is None
    assert bench.predict(catalog, row, arch).tpot_s == pytest.approx(replay.tpot.mean_ms / 1000)
    assert replay.preemptions > 0 and replay.tpot.mean_ms / 1000 > stated.tpot_s
    assert bench.predict(catalog, replace(row, release=None), arch).tpot_s == pytest.approx(default.tpot_s)
