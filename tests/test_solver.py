"""planner solve: CP-SAT against brute force, every printed plan re-checked, infeasibility explained."""

import itertools
import random
from math import ceil
from pathlib import Path

import pytest

from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.estimator.memory import GpuTarget, Request, estimate_memory
from planner.model.precision import resolve_kv_dtype
from planner.plan.scenario import load_scenario, parse_scenario
from planner.plan.solver import solve_scenario

CATALOG = load_catalog()
ALL_SCENARIOS = sorted((Path(__file__).parent.parent / "scenarios").glob("*.yaml"))
SCENARIOS = [p for p in ALL_SCENARIOS if not load_scenario(p).is_fleet]  # one-configuration scenarios


def scenario(**overrides):
    data = {"model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 8}}
    for key, value in overrides.items():
        data[key] = value
    return parse_scenario(data)


# --- brute force ------------------------------------------------------------------------------

def brute_force_cheapest(s) -> float | None:
    """Every GPU x split x precision x KV x context x concurrency x offer, re-derived from the estimator."""
    from planner.model.sources import resolve_model

    arch = resolve_model(CATALOG, s.model)
    gpus = [CATALOG.gpus.get(g) for g in s.search.gpus]
    precisions = [CATALOG.precisions.get(p) for p in s.search.precisions]
    markets = ["on-demand", "spot"] if s.pricing.market == "any" else [s.pricing.market]
    best = None
    for gpu in gpus:
        node = min(gpu.gpus_per_node, s.search.max_gpus_per_node or gpu.gpus_per_node)
        tps = [t for t in range(1, node + 1) if t <= s.search.max_gpus_per_replica and arch.num_attention_heads % t == 0
               and all(t % kv == 0 or kv % t == 0 for kv in {8, 4, 2, 1} & {l.attention.kv_heads for l in arch.layers})]
        layouts = [(t, 1) for t in tps] + [(max(tps), p) for p in range(2, s.search.max_gpus_per_replica // max(tps) + 1)]
        for (tp, pp), precision, kv, ctx, conc in itertools.product(
                layouts, precisions, s.search.kv_dtypes, s.workload.context, s.workload.concurrency):
            if not CATALOG.support(s.engine.name, precision, gpu).runs:
                continue
            est = estimate_memory(arch, Request(context=ctx, batch=conc, tp=tp, pp=pp, precision=precision.name,
                                                kv_dtype=resolve_kv_dtype(arch, precision, kv)), CATALOG,
                                  GpuTarget.from_catalog(gpu))
            if not est.gpu.fits:
                continue
            n = tp * pp
            for offer in CATALOG.offers:
                if offer.gpu != gpu.name:
                    continue
                for market in markets:
                    price = offer.price(market)
                    if price is None:
                        continue
                    if n <= offer.gpus:
                        instances = ceil(s.workload.replicas / (offer.gpus // n))
                    elif tp <= offer.gpus and offer.gpus % tp == 0:
                        instances = s.workload.replicas * ceil(n / offer.gpus)
                    else:
                        continue
                    cost = round(instances * price * 10_000) / 10_000
                    best = cost if best is None else min(best, cost)
    return best


GPU_POOL = ["rtx-3090", "rtx-4090", "l4", "l40s", "a10g", "a100-sxm-80gb", "h100-sxm", "h200-sxm", "mi300x", "rtx-a6000"]
MODEL_POOL = ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "gemma-2-9b", "qwen3-30b-a3b", "phi-4"]


@pytest.mark.parametrize("seed", range(12))
def test_cp_sat_matches_brute_force_on_random_scenarios(seed):
    rng = random.Random(seed)
    s = scenario(
        model=rng.choice(MODEL_POOL),
        workload={"context": sorted(rng.sample([2048, 4096, 8192, 16384, 32768], 2)),
                  "concurrency": rng.choice([1, 4, 16, 64]), "replicas": rng.choice([1, 2, 3])},
        search={"gpus": rng.sample(GPU_POOL, 4), "precisions": rng.sample(["bf16", "fp8", "int8", "int4"], 2),
                "kv_dtypes": rng.sample(["auto", "fp8"], rng.choice([1, 2])),
                "max_gpus_per_replica": rng.choice([1, 2, 4, 8])},
        pricing={"market": rng.choice(["on-demand", "spot", "any"])},
        engine={"name": "simple"},  # the brute force re-derives fits from the estimator's margin
        solver={"top": 0},
    )
    result = solve_scenario(s, CATALOG)
    expected = brute_force_cheapest(s)
    if expected is None:
        assert result.best is None and result.status == "INFEASIBLE"
    else:
        assert result.status == "OPTIMAL"
        assert result.best.usd_per_hour == pytest.approx(expected, abs=1e-9)


# --- every printed plan fits -------------------------------------------------------------------

@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_plan_of_the_shipped_scenarios_is_rechecked_and_fits(path):
    result = solve_scenario(load_scenario(path), CATALOG)
    assert result.best is not None, f"{path.name} should have a plan"
    for plan in (result.best, *result.alternatives):
        assert plan.memory.gpu.fits
        card = CATALOG.gpus.get(plan.gpu).memory_bytes
        assert all(r.total_bytes <= card for r in plan.memory.per_gpu)
        assert len(plan.memory.per_gpu) == plan.gpus_per_replica
    costs = [p.usd_per_hour for p in result.alternatives]
    assert costs == sorted(costs)
    assert all(c >= result.best.usd_per_hour for c in costs)


def test_a_fleet_scenario_is_refused_by_the_one_configuration_solver():
    fleet = next(p for p in ALL_SCENARIOS if load_scenario(p).is_fleet)
    with pytest.raises(PlannerInputError, match="sizes a fleet"):
        solve_scenario(load_scenario(fleet), CATALOG)


def test_the_same_scenario_gives_the_same_plan():
    s = load_scenario(SCENARIOS[0])
    first, second = solve_scenario(s, CATALOG), solve_scenario(s, CATALOG)
    assert (first.best.gpu, first.best.instance, first.best.precision, first.best.context) == \
           (second.best.gpu, second.best.instance, second.best.precision, second.best.context)


def test_at_equal_cost_the_larger_context_wins():
    s = scenario(workload={"context": {"min": 1024, "max": 8192}, "concurrency": 1},
                 search={"gpus": ["h100-sxm"], "precisions": ["bf16"]}, solver={"top": 0})
    result = solve_scenario(s, CATALOG)
    assert result.best.context == 8192


def test_cheaper_rejected_options_say_why():
    s = scenario(model="llama-3.3-70b", workload={"context": 8192, "concurrency": 8},
                 search={"gpus": ["rtx-4090", "h100-sxm"], "precisions": ["bf16"], "max_gpus_per_replica": 4})
    result = solve_scenario(s, CATALOG)
    assert result.best.gpu == "h100-sxm"
    rejected = {r.gpu: r for r in result.rejected_cheaper}
    assert "rtx-4090" in rejected and rejected["rtx-4090"].needed_bytes > rejected["rtx-4090"].card_bytes


def test_infeasible_scenario_is_explained_with_changes_that_fit():
    s = scenario(model="llama-3.3-70b", workload={"context": 8192, "concurrency": 1},
                 search={"gpus": ["a100-sxm-80gb"], "precisions": ["bf16"], "max_gpus_per_replica": 1})
    result = solve_scenario(s, CATALOG)
    assert result.best is None and result.status == "INFEASIBLE"
    assert "per GPU" in result.infeasible.reason and "a100-sxm-80gb" in result.infeasible.reason
    assert any("GPUs per replica" in x for x in result.infeasible.suggestions)
    assert any("in search.precisions" in x for x in result.infeasible.suggestions)  # int8 on Ampere


def test_no_offer_is_explained():
    s = scenario(search={"gpus": ["h100-sxm"]}, pricing={"providers": ["aws"], "regions": ["antarctica-1"]})
    result = solve_scenario(s, CATALOG)
    assert result.best is None and "no rentable offer" in result.infeasible.reason


def test_small_replicas_share_a_multi_gpu_instance():
    s = scenario(workload={"context": 4096, "concurrency": 1, "replicas": 8},
                 search={"gpus": ["h100-sxm"], "precisions": ["bf16"]}, pricing={"providers": ["aws"]})
    best = solve_scenario(s, CATALOG).best
    assert best.replicas_per_instance >= 1
    assert best.instances * best.gpus_per_instance >= 8 * best.gpus_per_replica


# --- scenario validation -----------------------------------------------------------------------

@pytest.mark.parametrize("data, needle", [
    ({"model": "llama-3.1-8b", "workload": {"context": 8192}, "serach": {}}, "serach: unknown key"),
    ({"model": "llama-3.1-8b", "workload": {"contxt": 8192}}, "workload.contxt: unknown key"),
    ({"model": "llama-3.1-8b", "workload": {"context": "lots"}}, "workload"),
    ({"model": "llama-3.1-8b", "workload": {"context": {"min": 32768, "max": 8192}}}, "must be at least min"),
    ({"model": "llama-3.1-8b", "workload": {"context": 8192}, "pricing": {"market": "cheap"}}, "pricing.market"),
    ({"model": "llama-3.1-8b", "workload": {"context": 8192}, "search": {"max_gpus_per_replica": 0}},
     "search.max_gpus_per_replica"),
    ({"workload": {"context": 8192}}, "model"),
    ([1, 2, 3], "mapping"),
])
def test_scenario_errors_name_the_key_path(data, needle):
    with pytest.raises(PlannerInputError, match=needle):
        parse_scenario(data)


@pytest.mark.parametrize("search, needle", [
    ({"gpus": ["h10"]}, r"search.gpus\[0\]: unknown gpu 'h10'"),
    ({"precisions": ["fp9"]}, r"search.precisions\[0\]: unknown precision"),
    ({"kv_dtypes": ["fp4"]}, r"search.kv_dtypes\[0\]"),
])
def test_unknown_names_in_a_scenario_are_named(search, needle):
    with pytest.raises(PlannerInputError, match=needle):
        solve_scenario(scenario(search=search), CATALOG)


def test_duplicate_keys_and_bad_yaml_are_errors(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("model: llama-3.1-8b\nmodel: qwen2.5-7b\nworkload: {context: 8192}\n")
    with pytest.raises(PlannerInputError, match="duplicate key 'model'"):
        load_scenario(dup)
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(PlannerInputError, match="invalid YAML"):
        load_scenario(bad)


def test_model_paths_resolve_relative_to_the_scenario(tmp_path):
    (tmp_path / "models").mkdir()
    source = Path(__file__).parent / "data" / "configs" / "llama-3.1-8b-instruct" / "config.json"
    (tmp_path / "models" / "config.json").write_text(source.read_text())
    path = tmp_path / "s.yaml"
    path.write_text("model: models/config.json\nworkload: {context: 4096}\nsearch: {gpus: [h100-sxm]}\n")
    assert solve_scenario(load_scenario(path), CATALOG).best.memory.params == 8_030_261_248


def test_with_the_vllm_engine_the_plan_fits_vllms_own_pool():
    from planner.estimator.engines import EngineSettings, engine_budget
    from planner.estimator.memory import GpuTarget, Request
    from planner.model.sources import resolve_model

    s = scenario(workload={"context": 8192, "concurrency": 32}, search={"gpus": ["l40s", "h100-sxm"],
                 "precisions": ["bf16"]}, engine={"name": "vllm"})
    best = solve_scenario(s, CATALOG).best
    budget = engine_budget(resolve_model(CATALOG, "llama-3.1-8b"),
                           Request(context=8192, batch=32, tp=best.tp, pp=best.pp, precision="bf16"),
                           EngineSettings("vllm"), GpuTarget.from_catalog(CATALOG.gpus.get(best.gpu)), CATALOG)
    assert budget.fits and budget.max_concurrency >= 32 and best.memory.gpu.fits


def test_a_plan_without_traffic_says_its_speed_at_the_full_context(catalog):
    """A single-configuration plan times its decode step with every request holding the whole context (the speed
    model's, as replica_timer gives it), and its $/million output tokens busy all hour follows from it."""
    from planner.estimator.performance import Step, replica_timer
    from planner.model.architecture import architecture_from_config

    result = solve_scenario(parse_scenario({
        "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 4},
        "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"]}, "engine": {"name": "vllm"}}), catalog)
    best = result.best
    arch = architecture_from_config(catalog.models.get("llama-3.1-8b").config, "llama-3.1-8b")
    timer = replica_timer(arch, best.precision, best.kv_dtype, catalog.gpus.get(best.gpu), best.tp, best.pp, catalog,
                          "vllm")
    assert best.full_context_step_s == timer.step_s(Step(4, 8192.0))
    assert best.full_context_output_tokens_per_s == pytest.approx(best.replicas * 4 / best.full_context_step_s)
    assert best.usd_per_million_output_tokens == pytest.approx(
        best.usd_per_hour / (best.full_context_output_tokens_per_s * 3600) * 1e6)
    assert result.rows()[0]["full_context_tpot_s"] == pytest.approx(best.full_context_step_s, rel=1e-4)
