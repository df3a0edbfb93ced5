"""Rules with one home: every planner path that asks the question gets the same answer."""

import json
from types import SimpleNamespace

import pytest

from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings
from planner.estimator.engines.need import engine_need
from planner.estimator.layout import layouts_on_gpus, searched_tensor_parallel_sizes, tensor_parallel_refusal
from planner.estimator.memory import GpuTarget, Request, estimate_memory
from planner.model.architecture import architecture_from_config
from planner.plan.configuration import check_configuration
from planner.plan.fleet import Pool, _fits_pool
from planner.plan.rental import footprint, rent
from planner.plan.scenario import parse_scenario
from planner.plan.search import build_search_space, enumerate_candidates, recheck

from conftest import CONFIGS
from engine_fixtures import arch, h100  # noqa: F401  (fixtures)


@pytest.mark.parametrize("gpus, tp, instance, taken", [
    (1, 1, 8, 1), (2, 2, 8, 2), (3, 1, 8, 4), (5, 1, 8, 8), (6, 2, 8, 8), (8, 8, 8, 8),
    (16, 8, 8, 16), (12, 4, 8, 16),  # across nodes: whole instances
    (16, 8, 4, None),  # a TP group wider than the instance
    (2, 1, 1, None),  # single-GPU rentals are not networked for pipeline stages
])
def test_footprint(gpus, tp, instance, taken):
    assert footprint(gpus, tp, instance) == taken


def test_single_and_fleet_planners_rent_by_the_same_rule(catalog):
    offer = next(o for o in catalog.offers if o.gpus == 8 and o.price("on-demand"))
    pool = Pool(offer, "on-demand")
    # the GPUs that must share an instance: the TP group, or under DP attention the attention-TP group (16 / 4)
    for gpus, node_group in ((1, 1), (3, 1), (6, 2), (12, 4), (16, 16), (16, 4)):
        config = SimpleNamespace(candidate=SimpleNamespace(gpus=gpus, node_group=node_group))
        assert _fits_pool(config, pool) == (rent(gpus, node_group, 1, offer, "on-demand") is not None)
    three = rent(3, 1, 3, offer, "on-demand")  # two 3-GPU replicas share an 8-GPU instance
    assert (three.instances, three.replicas_per_instance, three.idle_gpus) == (2, 2, 7)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b", "gemma-2-9b", "phi-4"])
def test_layouts_the_searches_propose_are_the_ones_the_estimator_accepts(arch, catalog, name):
    model = arch(name)
    for tp in range(1, 17):
        accepted = tensor_parallel_refusal(model, tp) is None
        try:
            estimate_memory(model, Request(context=1024, tp=tp), catalog)
            estimated = True
        except PlannerInputError:
            estimated = False
        assert accepted == estimated, tp
        assert (tp in searched_tensor_parallel_sizes(model, 16, 16)) == accepted
    assert all(tensor_parallel_refusal(model, s.tp) is None for s in layouts_on_gpus(model, 8, "vllm", 8))


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "simple"])
def test_the_search_and_the_recheck_agree(catalog, engine):
    scenario = parse_scenario({
        "model": "llama-3.1-8b", "workload": {"context": [32768, 65536], "concurrency": [8, 32]},
        "search": {"gpus": ["l4", "rtx-4090", "h100-sxm"], "precisions": ["bf16", "fp8"], "max_gpus_per_replica": 2},
        "engine": {"name": engine}})
    space = build_search_space(scenario, catalog)
    enumeration = enumerate_candidates(space, catalog)
    assert enumeration.candidates and enumeration.rejections
    for candidate in enumeration.candidates:
        assert recheck(candidate, space, catalog).gpu.fits, candidate.configuration
        assert candidate.configuration.engine.name == engine
    gpus = {g.name: g for g in space.gpus}
    for rejection in enumeration.rejections:
        assert rejection.reason
        card = GpuTarget.from_catalog(gpus[rejection.gpu])
        assert not check_configuration(space.arch, rejection.configuration, card, catalog).gpu.fits


def test_llamacpp_holds_several_sequences_in_the_search(catalog):
    """llama.cpp sizes its cache for every --parallel slot: the search asks at the batch, as the re-check does."""
    scenario = parse_scenario({
        "model": "llama-3.1-8b", "workload": {"context": 4096, "concurrency": 4},
        "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"]}, "engine": {"name": "llamacpp"}})
    space = build_search_space(scenario, catalog)
    assert any(c.concurrency == 4 for c in enumerate_candidates(space, catalog).candidates)


def test_engine_need_gives_a_reason_instead_of_raising(catalog, h100):
    config = json.loads((CONFIGS / "kimi-linear-48b-a3b" / "config.json").read_text())
    hybrid = architecture_from_config(config, "kimi-linear")
    # llama.cpp's state of Kimi Delta Attention is not modelled: a refusal with its reason, not an exception
    need = engine_need(hybrid, Request(context=4096, precision="fp8"), EngineSettings("llamacpp"), h100, catalog)
    assert not need.fits and need.budget is None and "kda layers" in need.reason
    with pytest.raises(PlannerInputError, match="max_num_batched_tokens"):  # a wrong setting stays an input error
        engine_need(arch_of(catalog), Request(context=4096), EngineSettings("vllm", max_num_batched_tokens=8,
                                                                            max_num_seqs=64), h100, catalog)


def arch_of(catalog, name="llama-3.1-8b"):
    record = catalog.models.get(name)
    return architecture_from_config(record.config, record.name)


def test_the_cuda_context_has_one_home(tmp_path):
    import shutil

    from planner.catalog.load import catalog_dir, load_catalog
    from planner.estimator.engines.profiles import load_profiles

    assert load_catalog().engines.get("simple").runtime_reserve_mib == load_profiles().cuda.context_mib.value
    for name in ("gpus.yaml", "models.yaml", "precisions.yaml", "engines.yaml", "prices.yaml", "engine_profiles.yaml"):
        shutil.copy(catalog_dir() / name, tmp_path / name)
    engines = tmp_path / "engines.yaml"
    engines.write_text(engines.read_text().replace("    overhead_fraction: 0.10\n",
                                                   "    overhead_fraction: 0.10\n    runtime_reserve_mib: 500\n"))
    with pytest.raises(PlannerInputError, match="cuda.context_mib"):
        load_catalog(str(tmp_path))
