"""How fast planner's commands start and finish, as whole processes, against fixed yardsticks.

    python bench/cli_speed.py [--repeat 5] [--peer-python /path/to/venv/bin/python] [--skip-scale]

Every command runs as a fresh process (what a user waits for), best of --repeat runs, all in one
invocation so the ratios compare like with like on whatever load the machine has. Targets (issue 14):

  planner estimate llama-3.1-8b --context 8192   <= 2 x  python -c "import yaml"
                                                 <= 0.5 x the fastest offline peer CLI installed
                                                   (llm-analysis; skipped when absent)
  planner solve scenarios/70b-chat.yaml          <= 2.5 x  python -c "import ortools ... pandas, typer, yaml"
  planner report scenarios/70b-chat.yaml         <= 5 s
  planner calibrate (ten results, Llama 3.1 8B on H100)  <= 10 s (issue 23)
  bench/solver_scale.py --workloads 50 --pools 40   <= 10 s in total

llm-analysis pins transformers < 5 and huggingface-hub < 0.15, so it lives in its own venv:
    python3 -m venv /tmp/peer && /tmp/peer/bin/pip install llm-analysis
    python bench/cli_speed.py --peer-python /tmp/peer/bin/python
Its estimate for the same question (Llama 2 7B, the closest of its built-in offline configs, fp16, one
A100 80GB, 4,096 tokens: its Llama 2 config stops there) reads its bundled config, so it needs no network either.

The catalog parse cache (planner/yamlfile.py) is warmed by one untimed run first: the timed runs
measure what every run after a user's first one costs. Output goes to /dev/null, as to a pipe or a file;
planner writes its tables without rich there (planner/render/plain.py), and on a terminal too, styled as rich
styles them, as long as they fit its width; a table wider than the terminal is rich's to shrink, which costs
the import of rich (measured, best of 15 with FORCE_COLOR=1 standing for a terminal: 0.101 s at 150 columns,
0.135 s at 60, against 0.096 s to a pipe and 0.050 s for import yaml, all in one busy run).

Each line gives the best wall time (what the targets are stated in) and the best CPU time of the process
and its children (steadier on a shared machine), and the ratio of each to the yardstick's. The first line
names the planner being measured: to time a checkout other than the installed one, put it first on
PYTHONPATH (PYTHONPATH=$PWD python bench/cli_speed.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Timing:
    label: str
    seconds: float  # best wall time
    cpu_seconds: float  # best user + system time of the process and its children


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def best_of(label: str, command: list[str], repeat: int, env: dict[str, str]) -> Timing:
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        cpu_before, start = _children_cpu(), time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        elapsed, cpu = time.perf_counter() - start, _children_cpu() - cpu_before
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        best, best_cpu = min(best, elapsed), min(best_cpu, cpu)
    return Timing(label, best, best_cpu)


def ten_results(directory: Path) -> list[str]:
    """Ten vLLM benchmark result files at concurrencies 1 to 64, made from the shipped example run."""
    base = json.loads((ROOT / "examples" / "calibration" / "vllm-llama-3.1-8b-h100-c1.json").read_text())
    paths = []
    for i, concurrency in enumerate((1, 2, 4, 8, 12, 16, 24, 32, 48, 64)):
        path = directory / f"run{i}.json"
        path.write_text(json.dumps({**base, "max_concurrency": concurrency, "completed": 10 * concurrency,
                                    "total_input_tokens": 10_000 * concurrency, "total_output_tokens": 2000 * concurrency,
                                    "mean_tpot_ms": base["mean_tpot_ms"] * (1 + concurrency / 100)}))
        paths.append(str(path))
    return paths


def planner_executable() -> str:
    beside = Path(sys.executable).with_name("planner")
    found = str(beside) if beside.exists() else shutil.which("planner")
    if not found:
        raise SystemExit("planner is not installed in this environment: pip install . first")
    return found


def peer_python(given: str | None) -> str | None:
    """The interpreter that has llm-analysis: --peer-python, else this one if it can import it."""
    for python in filter(None, (given, sys.executable)):
        probe = subprocess.run([python, "-c", "import llm_analysis"], capture_output=True)
        if probe.returncode == 0:
            return python
    return None


def timing_line(t: Timing) -> str:
    return f"  {t.label:<46} {t.seconds:7.3f} s wall {t.cpu_seconds:7.3f} s cpu"


def ratio_line(t: Timing, yardstick: Timing, limit: float) -> str:
    ratio, cpu_ratio = t.seconds / yardstick.seconds, t.cpu_seconds / yardstick.cpu_seconds
    verdict = "met" if ratio <= limit else "MISSED"
    return (f"{timing_line(t)}  = {ratio:5.2f} x (cpu {cpu_ratio:5.2f} x) {yardstick.label}: target <= {limit} x, "
            f"{verdict}")


def limit_line(t: Timing, limit_s: float) -> str:
    return f"{timing_line(t)}  target <= {limit_s} s wall, {'met' if t.seconds <= limit_s else 'MISSED'}"


def measured_planner(env: dict[str, str]) -> str:
    """Where the `planner` command's package comes from (probed outside the checkout, as the command sees it)."""
    probe = subprocess.run([sys.executable, "-c", "import planner; print(planner.__file__)"], cwd=tempfile.gettempdir(),
                           env=env, capture_output=True, text=True)
    return str(Path(probe.stdout.strip()).parent.parent) if probe.returncode == 0 else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--peer-python", help="a Python with llm-analysis installed")
    parser.add_argument("--skip-scale", action="store_true", help="skip the 50 x 40 fleet (about 10 s)")
    args = parser.parse_args()
    env = dict(os.environ, PLANNER_CACHE_DIR=tempfile.mkdtemp(prefix="planner-bench-cache-"))
    planner = planner_executable()
    py = sys.executable
    report_out = Path(tempfile.mkdtemp()) / "report.html"
    commands = {
        "estimate": [planner, "estimate", "llama-3.1-8b", "--context", "8192"],
        "solve": [planner, "solve", "scenarios/70b-chat.yaml"],
        "report": [planner, "report", "scenarios/70b-chat.yaml", "-o", str(report_out), "--quiet"],
        "calibrate": [planner, "calibrate", *ten_results(report_out.parent), "--model", "llama-3.1-8b", "--gpu",
                      "h100-sxm", "--tp", "1", "-o", str(report_out.parent / "calibration.yaml")],
    }
    subprocess.run(commands["estimate"], cwd=ROOT, env=env, capture_output=True)  # warm the catalog cache
    yaml_import = best_of('python -c "import yaml"', [py, "-c", "import yaml"], args.repeat, env)
    stack_import = best_of("import ortools+pandas+typer+yaml",
                           [py, "-c", "import ortools.sat.python.cp_model, pandas, typer, yaml"], args.repeat, env)
    labels = {"estimate": "planner estimate llama-3.1-8b --context 8192", "solve": "planner solve scenarios/70b-chat.yaml",
              "report": "planner report scenarios/70b-chat.yaml", "calibrate": "planner calibrate (ten results)"}
    timings = {name: best_of(labels[name], cmd, args.repeat, env) for name, cmd in commands.items()}

    source = measured_planner(env)
    print(f"best of {args.repeat} whole-process runs, {os.cpu_count()} cores, planner from {source}")
    if not (Path(source) / "planner" / "__pycache__").is_dir():
        # with PYTHONDONTWRITEBYTECODE set no run writes bytecode, so each one compiles planner again (70-100 ms)
        print(f"  note: {source}/planner has no compiled bytecode; run `python -m compileall -q planner` there first")
    print(timing_line(yaml_import))
    print(timing_line(stack_import))
    print(ratio_line(timings["estimate"], yaml_import, 2.0))
    peer = peer_python(args.peer_python)
    if peer:
        peer_cmd = [peer, "-m", "llm_analysis.analysis", "infer", "--model_name=NousResearch_Llama-2-7b-hf",
                    "--gpu_name=a100-sxm-80gb", "--seq_len=4096", "--log_level=ERROR"]
        peer_timing = best_of("llm-analysis infer (Llama 2 7B)", peer_cmd, args.repeat, env)
        print(timing_line(peer_timing))
        print(ratio_line(timings["estimate"], peer_timing, 0.5))
    else:
        print("  llm-analysis: not installed (see --peer-python), peer ratio skipped")
    print(ratio_line(timings["solve"], stack_import, 2.5))
    print(limit_line(timings["report"], 5))
    print(limit_line(timings["calibrate"], 10))
    if not args.skip_scale:
        scale = best_of("bench/solver_scale.py 50 workloads x 40 pools",
                        [py, str(ROOT / "bench" / "solver_scale.py"), "--workloads", "50", "--pools", "40"], 1, env)
        print(limit_line(scale, 10))


if __name__ == "__main__":
    main()
