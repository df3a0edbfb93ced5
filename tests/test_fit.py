"""Solving backwards: each answer is the boundary where the engine's own budget flips from fits to not."""

from dataclasses import replace

import pytest

from planner.estimator.engines import ENGINE_NAMES, EngineSettings, engine_budget
from planner.errors import PlannerInputError
from planner.estimator.fit import fewest_gpus, fit_engine, fit_engines, gpus_per_node, largest_context, most_sequences
from planner.estimator.layout import ParallelLayout as Split, layouts_on_gpus as splits
from planner.estimator.memory import GpuTarget, Request

from engine_fixtures import arch, h100  # noqa: F401  (fixtures)


def test_splits_respect_heads_and_the_node(arch, h100, catalog):
    llama = arch("llama-3.1-8b")  # 32 heads, 8 KV heads
    node = gpus_per_node(h100, catalog)
    assert node == 8 and gpus_per_node(GpuTarget("custom", 10**10), catalog) == 8
    assert gpus_per_node(GpuTarget.from_catalog(catalog.gpus.get("rtx-4090")), catalog) == catalog.gpus.get("rtx-4090").gpus_per_node
    assert splits(llama, 8, "vllm", node) == [Split(8, 1), Split(4, 2), Split(2, 4), Split(1, 8)]
    assert splits(llama, 6, "vllm", node) == [Split(2, 3), Split(1, 6)]
    assert splits(llama, 16, "vllm", node) == [Split(8, 2), Split(4, 4), Split(2, 8), Split(1, 16)]
    assert splits(llama, 8, "vllm", 4) == [Split(4, 2), Split(2, 4), Split(1, 8)]
    assert splits(llama, 4, "llamacpp", node) == [Split(1, 4)]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "simple"])
def test_largest_context_is_the_last_that_fits(engine, arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    settings = EngineSettings(name=engine)
    found = largest_context(llama, Request(context=1, precision="bf16"), settings, h100, catalog, Split(1, 1), limit=10_000_000)
    assert found.context is not None and found.budget.fits
    assert not engine_budget(llama, Request(context=found.context + 1, precision="bf16"), settings, h100, catalog).fits


def test_largest_context_stops_at_the_trained_length(arch, h100, catalog):
    found = largest_context(arch("llama-3.1-8b"), Request(context=1), EngineSettings(), h100, catalog, Split(1, 1))
    assert found.limit == 131072 and found.context == 131072


def test_largest_context_agrees_with_vllms_estimate(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    refused = engine_budget(llama, Request(context=2_000_000), EngineSettings(), h100, catalog)
    found = largest_context(llama, Request(context=1), EngineSettings(), h100, catalog, Split(1, 1), limit=2_000_000)
    assert found.context == refused.max_context_that_fits


@pytest.mark.parametrize("engine", ["vllm", "llamacpp"])
def test_most_sequences_is_the_last_batch_that_fits(engine, arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    settings = EngineSettings(name=engine)
    request = Request(context=32768)
    found = most_sequences(llama, request, settings, h100, catalog, Split(1, 1))
    assert engine_budget(llama, replace(request, batch=found.sequences), settings, h100, catalog).fits
    assert not engine_budget(llama, replace(request, batch=found.sequences + 1), settings, h100, catalog).fits
    if engine == "vllm":
        assert found.sequences == int(found.budget.max_concurrency)


def test_fewest_gpus_for_a_70b(arch, h100, catalog):
    seventy = arch("llama-3.1-70b")
    request = Request(context=32768, batch=16, precision="bf16")
    found = fewest_gpus(seventy, request, EngineSettings(), h100, catalog)
    assert found.split is not None and found.budget.fits and found.budget.max_concurrency >= 16
    fewer = found.split.gpus - 1
    assert all(not engine_budget(seventy, replace(request, tp=s.tp, pp=s.pp), EngineSettings(), h100, catalog).fits
               for s in splits(seventy, fewer, "vllm", 8))


def test_nothing_fits_on_too_small_a_card(arch, catalog):
    card = GpuTarget.from_catalog(catalog.gpus.get("rtx-4090"))
    seventy = arch("llama-3.1-70b")
    found = largest_context(seventy, Request(context=1, precision="bf16"), EngineSettings(), card, catalog, Split(1, 1))
    assert found.context is None and found.budget is None
    none = fewest_gpus(seventy, Request(context=8192, precision="bf16"), EngineSettings(), card, catalog, max_gpus=2)
    assert none.split is None and none.max_gpus == 2


def test_fit_engines_answers_for_every_engine_on_n_gpus(arch, h100, catalog):
    fits = fit_engines(arch("llama-3.1-8b"), Request(context=65536, batch=40, precision="bf16"), EngineSettings(), h100,
                       catalog, gpus=2)
    assert tuple(f.engine for f in fits) == ENGINE_NAMES
    for fit in fits:
        assert fit.largest_context.split.gpus == 2 and fit.largest_context.batch == 1
        assert fit.most_sequences.context == 65536 and fit.most_sequences.sequences >= 1
        assert fit.fewest_gpus.split.gpus >= 2  # 40 x 64K tokens of 128 KiB: 320 GiB of cache
    vllm = fits[ENGINE_NAMES.index("vllm")]
    assert vllm.largest_context.context == 131072


def test_a_gpu_count_the_model_cannot_split_over(arch, h100, catalog):
    with pytest.raises(PlannerInputError, match="--gpus"):
        fit_engine(arch("llama-3.1-8b"), Request(context=4096), EngineSettings(), h100, catalog, gpus=7 * 11)
