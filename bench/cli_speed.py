"""How fast planner's commands start and finish, as whole processes, against fixed yardsticks.

    python bench/cli_speed.py [--repeat 5] [--peer-python /path/to/venv/bin/python] [--skip-scale]

Every command runs as a fresh process (what a user waits for), best of --repeat runs, all in one
invocation so the ratios compare like with like on whatever load the machine has. Targets (issue 14):

  planner estimate llama-3.1-8b --context 8192   <= 2 x  python -c "import yaml"
                                                 <= 0.5 x the fastest offline peer CLI installed
                                                   (llm-analysis; skipped when absent)
  planner solve scenarios/70b-chat.yaml          <= 2.5 x  python -c "import ortools ... pandas, typer, yaml"
  planner report scenarios/70b-chat.yaml         <= 5 s
  bench/solver_scale.py --workloads 50 --pools 40   <= 10 s in total

llm-analysis pins transformers < 5 and huggingface-hub < 0.15, so it lives in its own venv:
    python3 -m venv /tmp/peer && /tmp/peer/bin/pip install llm-analysis
    python bench/cli_speed.py --peer-python /tmp/peer/bin/python
Its estimate for the same question (Llama 2 7B, the closest of its built-in offline configs, fp16, one
A100 80GB, 4,096 tokens: its Llama 2 config stops there) reads its bundled config, so it needs no network either.

The catalog parse cache (planner/yamlfile.py) is warmed by one untimed run first: the timed runs
measure what every run after a user's first one costs.
"""

from __future__ import annotations

import argparse
import os
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
    seconds: float


def best_of(command: list[str], repeat: int, env: dict[str, str]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        best = min(best, elapsed)
    return best


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


def ratio_line(name: str, seconds: float, yardstick: Timing, limit: float) -> str:
    ratio = seconds / yardstick.seconds
    verdict = "met" if ratio <= limit else "MISSED"
    return f"  {name:<44} {seconds:7.3f} s = {ratio:5.2f} x {yardstick.label:<34} (target <= {limit} x: {verdict})"


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
    }
    subprocess.run(commands["estimate"], cwd=ROOT, env=env, capture_output=True)  # warm the catalog cache
    yaml_import = Timing('python -c "import yaml"', best_of([py, "-c", "import yaml"], args.repeat, env))
    stack_import = Timing("import ortools+pandas+typer+yaml", best_of(
        [py, "-c", "import ortools.sat.python.cp_model, pandas, typer, yaml"], args.repeat, env))
    timings = {name: best_of(cmd, args.repeat, env) for name, cmd in commands.items()}

    print(f"best of {args.repeat} whole-process runs, {os.cpu_count()} cores")
    print(f"  {yaml_import.label:<44} {yaml_import.seconds:7.3f} s")
    print(f"  {stack_import.label:<44} {stack_import.seconds:7.3f} s")
    print(ratio_line("planner estimate llama-3.1-8b --context 8192", timings["estimate"], yaml_import, 2.0))
    peer = peer_python(args.peer_python)
    if peer:
        peer_cmd = [peer, "-m", "llm_analysis.analysis", "infer", "--model_name=NousResearch_Llama-2-7b-hf",
                    "--gpu_name=a100-sxm-80gb", "--seq_len=4096", "--log_level=ERROR"]
        peer_timing = Timing("llm-analysis infer (Llama 2 7B)", best_of(peer_cmd, args.repeat, env))
        print(f"  {peer_timing.label:<44} {peer_timing.seconds:7.3f} s")
        print(ratio_line("planner estimate llama-3.1-8b --context 8192", timings["estimate"], peer_timing, 0.5))
    else:
        print("  llm-analysis: not installed (see --peer-python), peer ratio skipped")
    print(ratio_line("planner solve scenarios/70b-chat.yaml", timings["solve"], stack_import, 2.5))
    verdict = "met" if timings["report"] <= 5 else "MISSED"
    print(f"  {'planner report scenarios/70b-chat.yaml':<44} {timings['report']:7.3f} s (target <= 5 s: {verdict})")
    if not args.skip_scale:
        scale = best_of([py, str(ROOT / "bench" / "solver_scale.py"), "--workloads", "50", "--pools", "40"], 1, env)
        verdict = "met" if scale <= 10 else "MISSED"
        print(f"  {'bench/solver_scale.py 50 workloads x 40 pools':<44} {scale:7.3f} s (target <= 10 s: {verdict})")


if __name__ == "__main__":
    main()
