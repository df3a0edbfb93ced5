"""How the fleet model scales: workloads x GPU pools -> configurations, variables, time to a proven optimum,
and what a greedy baseline (each workload alone, its cheapest $/capacity pool, no sharing) would pay.

    python bench/solver_scale.py                 # the default grid
    python bench/solver_scale.py --workloads 20 --pools 30

Targets: 20 workloads x 30 pools proven optimal within 10 s on 2 cores (issue "Fleet capacity planning");
50 workloads x 40 pools within 10 s as a whole process, serving configurations included (issue 14; bench/cli_speed.py
times it beside its other commands).
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import replace
from math import ceil

from planner.plan.search import build_search_space
from planner.catalog.load import load_catalog
from planner.plan.fleet import FleetProblem, Quota, plan_fleet
from planner.plan.rental import rent
from planner.plan.serving import Bucket, FleetWorkload, ServingCache, Slo
from planner.plan.scenario import parse_scenario

MODELS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.3", "qwen3-8b", "gemma-2-9b", "phi-4", "qwen2.5-14b",
          "llama-3.2-3b", "qwen3-30b-a3b", "mistral-nemo-12b")


def pools_subset(catalog, n: int, rng: random.Random) -> set[tuple[str, str, str]]:
    offers = [(o.provider, o.instance, o.region) for o in catalog.offers if o.on_demand_usd_per_hour]
    rng.shuffle(offers)
    return set(offers[:n])


def make_problem(n_workloads: int, n_pools: int, seed: int = 0) -> FleetProblem:
    catalog = load_catalog()
    rng = random.Random(seed)
    allowed = pools_subset(catalog, n_pools, rng)
    gpus = sorted({o.gpu for o in catalog.offers if (o.provider, o.instance, o.region) in allowed})
    workloads = []
    for i in range(n_workloads):
        scenario = parse_scenario({"model": MODELS[i % len(MODELS)], "workload": {"context": 4096},
                                   "search": {"gpus": gpus, "precisions": ["bf16", "fp8"]}})
        space = build_search_space(scenario, catalog)
        space = replace(space, offers=tuple((o, m) for o, m in space.offers
                                            if (o.provider, o.instance, o.region) in allowed))
        workloads.append(FleetWorkload(f"w{i}", space, (Bucket(rng.choice([2.0, 5.0, 10.0, 20.0]), 1000, 200),),
                                       Slo(ttft_s=3.0, tpot_s=0.08)))
    providers = sorted({p for p, _, _ in allowed})
    quotas = tuple(Quota(max_gpus=rng.choice([8, 16, 32]), provider=p) for p in providers[:2])
    return FleetProblem(tuple(workloads), quotas, time_limit_s=60.0)


def greedy_cost(problem: FleetProblem, cache: ServingCache) -> float | None:
    """Each workload alone on its cheapest $-per-capacity pool, whole instances, quotas ignored."""
    total = 0.0
    for w in problem.workloads:
        best = None
        for config in cache.configs(w):
            for offer, market in w.space.offers:
                if offer.gpu != config.candidate.gpu.name:
                    continue
                replicas = ceil(w.buckets[0].requests_per_s / config.capacity_rps)
                rental = rent(config.candidate.gpus, config.candidate.tp, replicas, offer, market)
                if rental is not None:
                    best = rental.usd_per_hour if best is None else min(best, rental.usd_per_hour)
        if best is None:
            return None
        total += best
    return total


def run(n_workloads: int, n_pools: int) -> None:
    catalog = load_catalog()
    problem = make_problem(n_workloads, n_pools)
    cache = ServingCache(catalog)  # the greedy baseline prices the configurations the fleet model had
    started = time.perf_counter()
    plan = plan_fleet(problem, catalog, explain=False, cache=cache)
    elapsed = time.perf_counter() - started
    greedy = greedy_cost(problem, cache)
    extra = (f"{(greedy - plan.usd_per_hour) / plan.usd_per_hour:+.1%}" if greedy and plan.usd_per_hour else "n/a")
    cost = f"${plan.usd_per_hour:,.2f}" if plan.usd_per_hour is not None else "infeasible"
    print(f"{n_workloads:>3} workloads x {n_pools:>2} pools | configs {plan.configurations:>5} | variables "
          f"{plan.variables:>6} | {plan.status:<10} gap {plan.gap:.1%} | total {elapsed:6.2f} s "
          f"(CP-SAT part {plan.solve_seconds - plan.candidate_seconds:5.2f} s) | {cost}/h | greedy {extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, nargs="*", default=[1, 5, 10, 20])
    parser.add_argument("--pools", type=int, nargs="*", default=[5, 15, 30])
    args = parser.parse_args()
    for n_workloads in args.workloads:
        for n_pools in args.pools:
            run(n_workloads, n_pools)


if __name__ == "__main__":
    main()
