"""Analytic capacity (planner.estimator.capacity.max_rate) against the simulated one (planner.estimator.simulate).

For each point of the grid (dense and MoE models, three GPUs, a short and a long request shape), the
analytic model gives the largest arrival rate meeting the SLO; the simulator is then bisected for the
largest Poisson rate whose measured latencies (mean TTFT and TPOT, as the SLO asks) meet the same SLO.
Prints both and their gap, (analytic - simulated) / simulated; target: median |gap| <= 10%.

    python bench/capacity_check.py [--duration 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

from planner.catalog.load import load_catalog
from planner.estimator.capacity import Scheduler, Slo, max_rate
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.memory import GpuTarget, Request
from planner.estimator.performance import Workload, replica_timer
from planner.estimator.simulate import poisson_arrivals, simulate
from planner.model.sources import resolve_model

# (model, precision, tp) x GPU x shape: dense small and large, a MoE; a chat and a long-prompt shape.
MODELS = (("llama-3.1-8b", "bf16", 1), ("llama-3.3-70b", "fp8", 2), ("qwen3-30b-a3b", "bf16", 1))
GPUS = ("h100-sxm", "a100-sxm-80gb", "l40s")
SHAPES = (Workload(1500, 400), Workload(8000, 250))
CONTEXT = 16384
SLO = Slo(ttft_s=2.0, tpot_s=0.05)
BISECTIONS = 8  # the simulated capacity to 2^-8 of its bracket (0.4%)


def simulated_capacity(timer, scheduler, shape, slo, duration, seed, low, high):
    """Bisection on the rate: the largest whose simulated mean TTFT and TPOT meet the SLO."""
    def meets(rate):
        result = simulate(timer, scheduler, poisson_arrivals(rate, duration, shape, seed), warmup_s=duration / 10)
        return (result.ttft_s.at(slo.percentile) <= slo.ttft_s and result.tpot_s.at(slo.percentile) <= slo.tpot_s)

    while meets(high):
        low, high = high, high * 1.5
    while low > 0 and not meets(low):
        high, low = low, low / 1.5
    for _ in range(BISECTIONS):
        mid = (low + high) / 2
        low, high = (mid, high) if meets(mid) else (low, mid)
    return low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=300.0, help="simulated seconds per run")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    catalog = load_catalog()
    gaps = []
    print(f"{'model':<16}{'gpu':<15}{'tp':>3}{'shape':>12}{'analytic':>10}{'simulated':>11}{'gap':>8}  limit")
    started = time.perf_counter()
    for model, precision, tp in MODELS:
        arch = resolve_model(catalog, model)
        for gpu_name in GPUS:
            gpu = catalog.gpus.get(gpu_name)
            request = Request(context=CONTEXT, batch=1, tp=tp, pp=1, precision=precision, kv_dtype="auto")
            budget = engine_budget(arch, request, EngineSettings("vllm"), GpuTarget.from_catalog(gpu), catalog)
            if not budget.fits:
                print(f"{model:<16}{gpu_name:<15}{tp:>3}  does not fit one request of {CONTEXT:,} tokens")
                continue
            scheduler = Scheduler.of(budget)
            timer = replica_timer(arch, precision, "auto", gpu, tp, 1, catalog)
            for shape in SHAPES:
                label = f"{shape.prompt_tokens}/{shape.output_tokens}"
                analytic = max_rate(timer, scheduler, shape, SLO)
                if analytic is None:
                    print(f"{model:<16}{gpu_name:<15}{tp:>3}{label:>12}  a lone request misses the SLO")
                    continue
                rate = analytic.requests_per_s
                simulated = simulated_capacity(timer, scheduler, shape, SLO, args.duration, args.seed, rate * 0.8, rate * 1.2)
                gap = (rate - simulated) / simulated
                gaps.append(gap)
                print(f"{model:<16}{gpu_name:<15}{tp:>3}{label:>12}{rate:>10.2f}{simulated:>11.2f}{gap:>8.1%}  {analytic.limit}")
    if gaps:
        absolute = sorted(abs(g) for g in gaps)
        print(f"\n{len(gaps)} points: median |gap| {statistics.median(absolute):.1%}, largest {absolute[-1]:.1%}, "
              f"analytic above simulated by at most {max(gaps):.1%} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
