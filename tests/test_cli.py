"""The installed `planner` command, run as a user runs it: from another directory, offline."""

import json
from pathlib import Path
import subprocess
import sys

import pytest

from conftest import CONFIGS


def run(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    return proc


def refused(*args, cwd, needle):
    """The command fails as bad input must: exit 2, one `error:` line naming `needle`, no traceback."""
    proc = run(*args, cwd=cwd)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def ok_json(*args, cwd):
    proc = run(*args, "--format", "json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_seed_example_by_flags(tmp_path):
    out = ok_json("estimate", "--params", "8e9", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                  "--precision", "fp16", "--context", "8192", "--gpu-memory", "24GB", cwd=tmp_path)
    assert out["weights_bytes"] == 16_000_000_000
    assert out["kv_bytes_per_token"] == 131_072
    assert out["kv_cache_bytes"] == 1_073_741_824
    assert round(out["total_bytes"] / 1e9, 1) == 18.8
    assert out["gpu"]["fits"] is True and out["gpu"]["memory_bytes"] == 24_000_000_000


def test_context_is_read_as_context_lengths_are_quoted(tmp_path):
    """--context takes 32K as the scenario files do (K = 1024): the same bytes as 32768."""
    quoted = ok_json("estimate", "llama-3.1-8b", "--context", "32K", cwd=tmp_path)
    plain = ok_json("estimate", "llama-3.1-8b", "--context", "32768", cwd=tmp_path)
    assert quoted["context"] == 32_768 and quoted == plain
    proc = run("estimate", "llama-3.1-8b", "--context", "32Q", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --context: must be a whole number of tokens, e.g. 8192 or 8K (got '32Q')"]


def test_json_contract_keys(tmp_path):
    out = ok_json("estimate", "llama-3.1-8b", "--precision", "fp16", "--context", "8192", "--gpu", "rtx-4090",
                  "--tp", "2", cwd=tmp_path)
    for key, kind in {"model": str, "params": int, "precision": str, "kv_dtype": str, "context": int, "batch": int,
                      "tp": int, "pp": int, "weights_bytes": int, "kv_bytes_per_token": int, "kv_cache_bytes": int,
                      "overhead_bytes": int, "total_bytes": int, "per_gpu": list, "gpu": dict,
                      "warnings": list}.items():
        assert isinstance(out[key], kind), key
    assert out["params"] == 8_030_261_248
    assert len(out["per_gpu"]) == 2
    for rank in out["per_gpu"]:
        assert rank["total_bytes"] == rank["weights_bytes"] + rank["kv_cache_bytes"] + rank["overhead_bytes"]
    assert set(out["gpu"]) >= {"name", "memory_bytes", "fits", "headroom_bytes"}
    assert out["gpu"]["memory_bytes"] == 24564 * 2**20  # nvidia-smi memory.total of an RTX 4090


def test_table_output_names_every_part(tmp_path):
    proc = run("estimate", "llama-3.1-8b", "--precision", "fp16", "--context", "8192", "--gpu", "rtx-4090",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for word in ("weights", "KV cache", "overhead", "total", "131,072 B/token", "GB", "GiB", "fits", "headroom"):
        assert word in proc.stdout, word


def test_model_by_hf_id_case_insensitive_and_by_config_path(tmp_path):
    by_id = ok_json("estimate", "META-LLAMA/llama-3.1-8b-instruct", cwd=tmp_path)
    by_path = ok_json("estimate", str(CONFIGS / "llama-3.1-8b-instruct" / "config.json"), cwd=tmp_path)
    by_dir = ok_json("estimate", str(CONFIGS / "llama-3.1-8b-instruct"), cwd=tmp_path)
    assert by_id["weights_bytes"] == by_path["weights_bytes"] == by_dir["weights_bytes"] == 2 * 8_030_261_248


@pytest.mark.parametrize("kind", ["gpus", "models", "precisions"])
def test_catalog_json_and_csv(tmp_path, kind):
    rows = ok_json("catalog", kind, cwd=tmp_path)
    assert rows and all("name" in r for r in rows)
    proc = run("catalog", kind, "--format", "csv", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.splitlines()[0].startswith("name,")
    assert len(proc.stdout.splitlines()) == len(rows) + 1


def test_catalog_models_and_gpus_carry_the_contract_fields(tmp_path):
    models = ok_json("catalog", "models", cwd=tmp_path)
    assert all({"name", "hf_id", "params"} <= set(m) for m in models)
    gpus = ok_json("catalog", "gpus", cwd=tmp_path)
    assert all(isinstance(g["memory_bytes"], int) for g in gpus)


@pytest.mark.parametrize("args, needle", [
    (["estimate", "llama-3.1-8bb"], "did you mean llama-3.1-8b"),
    (["estimate", "llama-3.1-8b", "--gpu", "h10"], "unknown gpu 'h10'"),
    (["estimate", "llama-3.1-8b", "--precision", "fp9"], "unknown precision 'fp9'"),
    (["estimate", "llama-3.1-8b", "--tp", "3"], "--tp: 3 does not divide"),
    (["estimate", "llama-3.1-8b", "--context", "0"], "--context: must be at least 1"),
    (["estimate", "llama-3.1-8b", "--gpu-memory", "24 parsecs"], "--gpu-memory"),
    (["estimate", "--params", "8e9"], "--layers, --kv-heads, --head-dim"),
    (["estimate", str(CONFIGS / "broken" / "missing-layers.json")], "missing key 'num_hidden_layers'"),
    (["estimate", str(CONFIGS / "broken" / "truncated.json")], "not valid JSON"),
    (["estimate", str(CONFIGS / "broken" / "unknown-arch.json")], "--params"),
    (["estimate", "nowhere/config.json"], "no file"),
    (["estimate", "llama-3.1-8b", "--kv-dtype", "fp4"], "unknown kv-dtype 'fp4'"),
    (["estimate", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpu-memory", "80GB"], "give one of them"),
    (["perf", "kimi-k2.5", "--gpu", "h200-sxm", "--tp", "8", "--precision", "int4-g32", "--moe-kernel",
      "flashinfer_trtllm"], "no vllm table on hopper GPUs times 'flashinfer_trtllm'"),
    (["perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--moe-kernel", "triton"], "the model has no routed experts"),
    (["bench", "kimi-k2.5", "--gpu", "b200", "--tp", "8", "--precision", "int4-g32", "--moe-kernel", "cutlass"],
     "vLLM has no switch to 'cutlass'"),
    (["perf", "kimi-k2.5", "--gpu", "b200", "--tp", "8", "--precision", "int4-g32", "--engine", "simple",
      "--moe-kernel", "flashinfer_trtllm"], "simple is not told which fused-MoE kernel to run"),
    (["simulate", "nowhere.yaml", "--moe-kernel", "triton"], "--moe-kernel: a benchmark replay's option"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_unknown_option_is_a_usage_error(tmp_path):
    proc = run("estimate", "llama-3.1-8b", "--contxt", "8192", cwd=tmp_path)
    assert proc.returncode == 2 and "No such option" in proc.stderr and "Traceback" not in proc.stderr


def test_unsupported_architecture_with_params_keeps_its_kv_shape(tmp_path):
    out = ok_json("estimate", str(CONFIGS / "broken" / "unknown-arch.json"), "--params", "7e9", "--precision", "bf16",
                  "--context", "1000", cwd=tmp_path)
    assert out["weights_bytes"] == 14_000_000_000
    assert out["kv_bytes_per_token"] == 32 * 2 * 32 * 128 * 2


SCENARIO = str(Path(__file__).parent.parent / "scenarios" / "8b-budget.yaml")


def test_solve_table_json_csv_markdown(tmp_path):
    table = run("solve", SCENARIO, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "Best plan: $" in table.stdout and "re-checked by the estimator" in table.stdout
    out = ok_json("solve", SCENARIO, cwd=tmp_path)
    assert out["status"] == "OPTIMAL" and out["best"]["memory"]["gpu"]["fits"] is True
    assert out["plans"][0]["rank"] == "best"
    csv_out = run("solve", SCENARIO, "--format", "csv", cwd=tmp_path)
    assert csv_out.stdout.splitlines()[0].startswith("rank,gpu,")
    md = run("solve", SCENARIO, "--format", "markdown", cwd=tmp_path)
    assert "**Best plan: $" in md.stdout and "| # | GPUs |" in md.stdout


def test_solve_writes_the_output_file(tmp_path):
    proc = run("solve", SCENARIO, "--format", "json", "-o", "plan.json", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    assert json.loads((tmp_path / "plan.json").read_text())["best"] is not None
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left behind


@pytest.mark.parametrize("content, needle", [
    ("model: llama-3.1-8b\nworkload: {context: 8192}\nserach: {}\n", "serach: unknown key"),
    ("model: llama-3.1-8b\nworkload: {context: 8192}\nsearch: {gpus: [h10]}\n", "did you mean"),
    ("model: [unclosed\n", "invalid YAML"),
    ("model: qwen3-30b-a3b\nworkload: {context: 8192}\nengine: {moe_kernel: 'triton; rm -rf /'}\n", "moe_kernel"),
    ("model: qwen3-30b-a3b\nworkload: {context: 8192}\nengine: {name: simple, moe_kernel: triton}\n",
     "simple is not told which fused-MoE kernel to run"),
    ("model: qwen3-30b-a3b\nworkload: {context: 8192}\nengine: {name: llamacpp, moe_kernel: triton}\n",
     "use engine vllm, sglang or trtllm"),
    ("model: qwen3-30b-a3b\nworkload: {context: 8192}\nengine: {name: sglang, attention_backend: 'aiter; reboot'}\n",
     "attention_backend"),
    ("model: qwen3-30b-a3b\nworkload: {context: 8192}\nengine: {name: vllm, attention_backend: triton}\n",
     "only SGLang's budget depends on its attention backend"),
    ("model: qwen3-30b-a3b\nworkload: {context: 8192}\nengine: {name: vllm, max_running_requests: 64}\n",
     "SGLang's flag, not vllm's"),
    ("model: qwen3-30b-a3b\nworkload: {context: 8192}\nengine: {name: sglang, max_running_requests: 0}\n",
     "max_running_requests"),
])
def test_solve_bad_scenarios_exit_2_with_one_line(tmp_path, content, needle):
    (tmp_path / "s.yaml").write_text(content)
    proc = run("solve", "s.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_solve_missing_scenario_file(tmp_path):
    proc = run("solve", "nope.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "cannot read" in proc.stderr


def test_compare_is_sorted_by_price_with_one_row_per_gpu_and_provider(tmp_path):
    rows = ok_json("compare", "llama-3.1-8b", "--context", "8192", "--concurrency", "4",
                   "--gpus", "l4,l40s,h100-sxm", cwd=tmp_path)
    prices = [r["usd_per_hour"] for r in rows]
    assert rows and prices == sorted(prices)
    assert len({(r["gpu"], r["provider"]) for r in rows}) == len(rows)
    assert {r["gpu"] for r in rows} <= {"l4", "l40s", "h100-sxm"}
    assert all(r["headroom_gb"] >= 0 for r in rows)
    md = run("compare", "llama-3.1-8b", "--gpus", "l4", "--format", "markdown", cwd=tmp_path)
    assert md.stdout.startswith("| gpu | provider |")


def test_compare_unknown_gpu_is_a_usage_error(tmp_path):
    proc = run("compare", "llama-3.1-8b", "--gpus", "h10", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown gpu 'h10'" in proc.stderr


def test_what_if_honours_format_and_output(tmp_path):
    budget = str(Path(__file__).parents[1] / "scenarios" / "8b-budget.yaml")
    proc = run("solve", budget, "--what-if", "--format", "csv", "-o", "whatif.csv", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    lines = (tmp_path / "whatif.csv").read_text().splitlines()
    assert lines[0] == "variant,status,usd_per_hour,change_usd_per_hour" and lines[1].startswith("as written,OPTIMAL,")
    assert len(lines) == 6


# --- plain command lines skip typer's parsing (planner.direct); the call must be the one typer makes ----------

PLAIN = [
    ["estimate", "llama-3.1-8b"],
    ["estimate", "llama-3.1-8b", "--context", "8192", "--gpu", "h100", "--tp", "2"],
    ["fit", "llama-3.1-8b", "--context", "32K", "--gpu", "h100"],
    ["estimate", "--params", "8e9", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--gpu-memory=24GB"],
    ["estimate", "llama-3.1-8b", "--engine", "vllm", "--gpu", "l4", "--enforce-eager", "--gpu-memory-utilization",
     "0.85", "--format", "json", "--context", "0010"],
    ["estimate", "--precision", "fp8", "llama-3.1-8b", "--overhead", "0.2", "--gpu", ""],
    ["fit", "qwen3-8b", "--gpu", "h100", "--engine", "vllm", "--engine", "sglang", "--gpus", "2"],
    ["solve", "scenarios/70b-chat.yaml", "-o", "plan.json", "--format", "json", "--top", "0"],
    ["solve", "a b.yaml", "--what-if", "--time-limit", "2.5"],
    ["report", "s.yaml", "--output", "r.html", "-q"],
    ["compare", "llama-3.1-8b", "--gpus", "h100,l4", "--market", "spot", "--max-gpus", "4"],
    ["export", "plan.json", "--to", "vllm", "--plan", "1"],
    ["catalog", "gpus", "--format", "csv"],
    ["perf", "llama-3.1-8b", "--gpu", "h100", "--rate", "3"],
    ["perf", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "16", "--tp", "2"],
    ["bench", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "50", "--request-rate", "inf", "--max-concurrency", "4",
     "--random-range-ratio", "0.5"],
    ["simulate", "plan.json", "--duration", "60", "--seed", "3"],
    ["simulate", "--benchmark", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "50", "--request-rate", "4",
     "--max-concurrency", "4", "--input-len", "512"],
    ["serve", "--port", "9000"],
]

NOT_PLAIN = [
    [], ["--help"], ["estimate", "--help"], ["nope"], ["prices", "update", "--from", "x"],  # help, typo, group
    ["estimate", "llama-3.1-8b", "--batch", "1e3"], ["estimate", "x", "--batch", "-5"],  # typer coerces/refuses
    ["estimate", "x", "--context", "8192", "--context", "4096"], ["estimate", "x", "y"],  # repeated, one too many
    ["estimate", "x", "--engine", "VLLM"], ["estimate", "x", "--contxt", "1"], ["estimate", "x", "--enforce-eager=1"],
    ["fit", "x", "--gpus", "0"], ["serve", "--port", "70000"],  # typer's bounds
    ["solve"], ["report", "s.yaml"], ["export", "plan.json"], ["estimate", "x", "--gpu"],  # required value missing
    ["estimate", "x", "--", "--gpu"], ["solve", "s.yaml", "-o=plan.json"], ["estimate", "x", "--tp", " 2"],
    ["check", "plan.json", "r1.json", "r 2.jsonl"],  # a list argument: typer's to read
]


def _typer_call(argv, monkeypatch):
    """What typer passes to the command function for argv."""
    import functools

    from planner import cli

    seen = {}
    info = next(c for c in cli.app.registered_commands if (c.name or c.callback.__name__) == argv[0])

    @functools.wraps(info.callback)
    def capture(**kwargs):
        seen.update(kwargs)

    monkeypatch.setattr(info, "callback", capture)
    cli.app(argv, standalone_mode=False)
    return seen


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_a_plain_command_line_makes_the_call_typer_makes(argv, monkeypatch):
    from planner import cli
    from planner.direct import direct_call

    call = direct_call(cli.app, argv)
    assert call is not None
    direct = call.keywords
    expected = _typer_call(argv, monkeypatch)
    assert direct == expected and {k: type(v) for k, v in direct.items()} == {k: type(v) for k, v in expected.items()}


@pytest.mark.parametrize("argv", NOT_PLAIN, ids=" ".join)
def test_every_other_command_line_is_left_to_typer(argv):
    from planner import cli
    from planner.direct import direct_call

    assert direct_call(cli.app, argv) is None


def test_estimate_runs_without_typer_parsing_or_pydantic(tmp_path):
    code = ("import sys; sys.argv = ['planner', 'estimate', 'llama-3.1-8b', '--gpu', 'h100']; "
            "from planner.cli import main; main(); print(sorted(m for m in ('pydantic', 'pandas', 'ortools', "
            "'planner.render.html', 'planner.plan.solver') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "fits" in proc.stdout and proc.stdout.splitlines()[-1] == "[]"


def test_a_closed_pipe_ends_a_direct_command_quietly(tmp_path):
    proc = subprocess.run(f"{sys.executable} -m planner.cli catalog models | head -1", shell=True, cwd=tmp_path,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert proc.stdout.count("\n") == 1 and "Traceback" not in proc.stderr and "Broken pipe" not in proc.stderr


WIDE_TERMINAL = {"FORCE_COLOR": "1", "COLUMNS": "150", "LINES": "40"}
NARROW_TERMINAL = {"FORCE_COLOR": "1", "COLUMNS": "60", "LINES": "20"}


@pytest.mark.parametrize("env,loaded", [({}, []), (WIDE_TERMINAL, []), (NARROW_TERMINAL, ["rich"])],
                         ids=["pipe", "wide-terminal", "narrow-terminal"])
def test_a_plain_estimate_starts_without_typer_and_prints_without_rich_where_its_tables_fit(tmp_path, env, loaded):
    """planner.direct reads the command line and planner.render.plain writes rich's bytes for the tables, styled
    on a terminal (FORCE_COLOR makes the pipe one); a table wider than the terminal is rich's to shrink."""
    code = ("import sys; sys.argv = ['planner', 'estimate', 'llama-3.1-8b', '--gpu', 'h100', '--tp', '2']; "
            "from planner.cli import main; main(); print(sorted(m for m in ('typer', 'rich', 'pydantic') "
            "if m in sys.modules))")
    checkout = str(Path(__file__).resolve().parents[1])  # this checkout's planner, wherever it is installed from
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": checkout, **env})
    assert proc.returncode == 0, proc.stderr
    assert "per GPU" in proc.stdout and proc.stdout.splitlines()[-1] == str(loaded)
    assert ("\x1b[1mllama-3.1-8b\x1b[0m" in proc.stdout) is bool(env)


def test_simulate_benchmark_replays_a_vllm_bench_serve_run(tmp_path):
    """`planner simulate --benchmark MODEL` is `planner bench MODEL`: the same run, vLLM's saved-result keys; a fleet
    simulation's options and a benchmark's do not mix (one line, exit 2)."""
    args = ["llama-3.1-8b", "--gpu", "h100", "--num-prompts", "40", "--request-rate", "inf", "--max-concurrency", "8",
            "--input-len", "512", "--output-len", "64"]
    replayed = ok_json("simulate", "--benchmark", *args, cwd=tmp_path)
    assert replayed == ok_json("bench", *args, cwd=tmp_path)
    assert replayed["completed"] == 40 and replayed["max_concurrency"] == 8
    assert {"mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "output_throughput"} <= set(replayed)
    for bad, flag in ((["simulate", "--benchmark", *args, "--rate", "2"], "--rate"),
                      (["simulate", "--benchmark", "llama-3.1-8b"], "--gpu"),
                      (["simulate", "scenarios/70b-chat.yaml", "--max-concurrency", "4"], "--max-concurrency")):
        proc = run(*bad, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith(f"error: {flag}") and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("args, needle", [
    (("bench", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-running-requests", "8"), "SGLang's flag, not vllm's"),
    (("simulate", "llama-3.1-8b", "--benchmark", "--gpu", "h100-sxm", "--engine", "sglang", "--max-running-requests",
      "0"), "--max-running-requests: must be at least 1"),
    (("perf", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "trtllm", "--concurrency", "4",
      "--max-running-requests", "8"), "SGLang's flag, not trtllm's"),
    (("estimate", "llama-3.1-8b", "--max-running-requests", "8"), "SGLang's flag, not simple's"),
])
def test_max_running_requests_is_sglangs_and_at_least_one_on_every_command(tmp_path, args, needle):
    refused(*args, cwd=tmp_path, needle=needle)


def test_top_is_refused_for_a_fleet_not_ignored(tmp_path):
    fleet = str(Path(__file__).parents[1] / "scenarios" / "multi-model-fleet.yaml")
    refused("solve", fleet, "--top", "3", cwd=tmp_path, needle="--top: the alternatives it lists are a single")


@pytest.mark.parametrize("args, needle", [
    (("--engine", "sglang", "--gpu-memory-utilization", "0.5"), "--gpu-memory-utilization: the sglang budget"),
    (("--engine", "llamacpp", "--block-size", "32"), "--block-size: the llamacpp budget"),
    (("--engine", "vllm", "--mem-fraction-static", "0.8"), "--mem-fraction-static: the vllm budget"),
    (("--engine", "sglang", "--n-batch", "512"), "--n-batch: the sglang budget"),
    (("--gpu-memory-utilization", "0.5"), "--gpu-memory-utilization: the simple budget"),  # no --engine: the margin
])
def test_an_engine_flag_the_engine_does_not_read_is_refused_not_ignored(tmp_path, args, needle):
    refused("estimate", "llama-3.1-8b", "--gpu", "h100-sxm", *args, cwd=tmp_path, needle=needle)
