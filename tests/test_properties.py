"""Properties that must hold for every model and every request, and the solver's guarantees.

Estimator (hypothesis, over the catalog's models, the test configs and generated configs):
memory never decreases as context, batch or KV bits grow, nor weights as bits per weight grow;
per-GPU shares under TP/PP cover the whole model; KV heads per rank follow vLLM's replication
rule; every byte count is a non-negative integer; the JSON output round-trips.

Solver: the same scenario gives the same plan; every printed plan passes an independent re-check
(estimator and price); an infeasible scenario names what blocks it, and each change it suggests
does make it feasible at the cost it quotes; the time limit reaches CP-SAT. Strict xfails pin what
does not hold yet (a limit that cuts the search, per-call budgets, ties broken by list order).
"""

import json
import re
import time
from dataclasses import fields
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planner.model.architecture import architecture_from_config, size_only_architecture_from_config
from planner.catalog.load import load_catalog
from planner.estimator.memory import GpuFit, GpuTarget, MemoryEstimate, RankMemory, Request, estimate_memory, kv_heads_per_rank
from planner.render.records import estimate_json
from planner.plan.scenario import load_scenario, parse_scenario
from planner.plan.solver import solve_scenario
from planner.plan.configuration import SIMPLE_ENGINE, check_configuration

from conftest import CONFIGS

CATALOG = load_catalog()
MODEL_NAMES = sorted(m.name for m in CATALOG.models)
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def catalog_arch(name):
    return architecture_from_config(CATALOG.models.get(name).config, name)


@cache
def hybrid_arch():
    """Qwen3-Next: full attention plus Gated DeltaNet layers, sized by its parameter count."""
    return size_only_architecture_from_config(json.loads((CONFIGS / "qwen3-next-80b-a3b" / "config.json").read_text()),
                                              "qwen3-next", 80 * 10**9)


@st.composite
def generated_configs(draw):
    """Small dense configs of the families with distinct cache layouts: GQA, sliding windows, q/k norms."""
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv_heads * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([16, 64, 128]))
    family = draw(st.sampled_from(["llama", "mistral", "qwen2", "qwen3", "gemma2", "phi3"]))
    config = {"model_type": family, "hidden_size": heads * head_dim * draw(st.sampled_from([1, 2])),
              "head_dim": head_dim, "intermediate_size": draw(st.integers(8, 4096)),
              "num_hidden_layers": draw(st.integers(1, 12)), "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "vocab_size": draw(st.integers(2, 50_000)),
              "tie_word_embeddings": draw(st.booleans()), "torch_dtype": "bfloat16",
              "max_position_embeddings": 2 ** draw(st.integers(10, 20))}
    if family in ("mistral", "gemma2", "phi3"):
        config["sliding_window"] = draw(st.sampled_from([16, 1000, 4096]))
    return config


architectures = st.one_of(
    st.sampled_from(MODEL_NAMES).map(catalog_arch),
    generated_configs().map(lambda config: architecture_from_config(config, "generated")),
    st.builds(hybrid_arch),
)


def kv_head_counts(arch):
    return {layer.attention.kv_heads for layer in arch.layers if layer.attention.kind in ("full", "sliding")}


def valid_tps(arch, largest=16):
    """Splits vLLM accepts: tp divides the attention heads and divides, or is a multiple of, every KV head count."""
    return [tp for tp in range(1, largest + 1)
            if (not arch.exact or arch.num_attention_heads % tp == 0)
            and all(tp % kv == 0 or kv % tp == 0 for kv in kv_head_counts(arch) if kv)]


def weight_precisions(arch):
    """Every catalog precision that applies to this model (mxfp4 only to MoE experts)."""
    return [p.name for p in CATALOG.precisions if not (p.scope == "experts" and arch.moe is None)]


def estimate(arch, **request):
    request.setdefault("context", 4096)
    request.setdefault("precision", "bf16")
    return estimate_memory(arch, Request(**request), CATALOG)


def assert_sane(est):
    """Whole bytes, never negative, and every total the sum of its parts."""
    counts = [est.params, est.weights_bytes, est.kv_bytes_per_token, est.kv_cache_bytes, est.overhead_bytes,
              est.total_bytes]
    for r in est.per_gpu:
        counts += [r.weights_bytes, r.kv_bytes_per_token, r.kv_cache_bytes, r.overhead_bytes, r.total_bytes]
        assert r.total_bytes == r.weights_bytes + r.kv_cache_bytes + r.overhead_bytes
        assert r.overhead_bytes >= est.runtime_reserve_bytes  # the CUDA context, on every GPU
    assert all(type(n) is int and n >= 0 for n in counts), counts
    assert est.total_bytes == sum(r.total_bytes for r in est.per_gpu)
    assert est.weights_bytes == sum(r.weights_bytes for r in est.per_gpu)
    assert est.kv_cache_bytes == sum(r.kv_cache_bytes for r in est.per_gpu)


# --- monotonicity ---------------------------------------------------------------------------------

@PROPERTY
@given(arch=architectures, data=st.data(), context=st.integers(1, 200_000), batch=st.integers(1, 64),
       more_context=st.integers(0, 200_000), more_batch=st.integers(0, 64))
def test_memory_never_decreases_as_context_or_batch_grow(arch, data, context, batch, more_context, more_batch):
    tp = data.draw(st.sampled_from(valid_tps(arch, 8)), label="tp")
    pp = data.draw(st.integers(1, min(4, arch.num_layers)), label="pp")
    precision = data.draw(st.sampled_from(weight_precisions(arch)), label="precision")
    base = estimate(arch, context=context, batch=batch, tp=tp, pp=pp, precision=precision)
    grown = estimate(arch, context=context + more_context, batch=batch + more_batch, tp=tp, pp=pp, precision=precision)
    assert_sane(base)
    assert_sane(grown)
    assert grown.weights_bytes == base.weights_bytes
    assert grown.kv_cache_bytes >= base.kv_cache_bytes and grown.total_bytes >= base.total_bytes
    for before, after in zip(base.per_gpu, grown.per_gpu, strict=True):
        assert after.kv_cache_bytes >= before.kv_cache_bytes and after.total_bytes >= before.total_bytes


@PROPERTY
@given(arch=architectures, context=st.integers(1, 100_000), batch=st.integers(1, 16))
def test_memory_never_decreases_as_kv_cache_bits_grow(arch, context, batch):
    by_bits = sorted(CATALOG.kv_dtypes, key=lambda kv: kv.bits)
    estimates = [estimate(arch, context=context, batch=batch, kv_dtype=kv.name) for kv in by_bits]
    for smaller, larger in pairwise(estimates):
        assert larger.kv_cache_bytes >= smaller.kv_cache_bytes and larger.total_bytes >= smaller.total_bytes
    assert len({e.weights_bytes for e in estimates}) == 1  # the KV dtype never touches the weights


def precision_families():
    """Precisions that store the same tensors the same way, differing only in bits: weights must follow bits."""
    families = {}
    for p in CATALOG.precisions:
        layout = (p.scope, p.scales.granularity if p.scales else None, p.scales.group_size if p.scales else None,
                  p.experts)
        families.setdefault(layout, []).append(p)
    return [sorted(members, key=lambda p: p.bits) for members in families.values() if len(members) > 1]


@settings(PROPERTY, max_examples=12)
@given(name=st.sampled_from(MODEL_NAMES))
def test_weights_never_decrease_as_bits_per_weight_grow(name):
    arch = catalog_arch(name)
    families = precision_families()
    assert any(len({p.bits for p in family}) > 1 for family in families)  # there is something to compare
    for family in families:
        weights = [estimate(arch, precision=p.name).weights_bytes for p in family if p.name in weight_precisions(arch)]
        assert weights == sorted(weights), [p.name for p in family]
    bf16 = estimate(arch, precision="bf16").weights_bytes
    for precision in weight_precisions(arch):
        if CATALOG.precisions.get(precision).bits < 16:  # quantizing never costs memory
            assert estimate(arch, precision=precision).weights_bytes < bf16, precision


def test_a_model_known_by_its_size_weighs_its_parameters_times_the_bits():
    arch = hybrid_arch()
    by_bits = sorted(CATALOG.precisions, key=lambda p: p.seed_bits)
    weights = [estimate(arch, precision=p.name).weights_bytes for p in by_bits if p.scope != "experts"]
    assert weights == sorted(weights) and weights[0] < weights[-1]


# --- tensor and pipeline parallelism ----------------------------------------------------------------

@PROPERTY
@given(arch=architectures, data=st.data(), context=st.integers(1, 65_536), batch=st.integers(1, 8))
def test_per_gpu_shares_cover_the_whole_model(arch, data, context, batch):
    tp = data.draw(st.sampled_from(valid_tps(arch)), label="tp")
    pp = data.draw(st.integers(1, min(8, arch.num_layers)), label="pp")
    whole = estimate(arch, context=context, batch=batch)
    split = estimate(arch, context=context, batch=batch, tp=tp, pp=pp)
    assert_sane(split)
    assert [r.rank for r in split.per_gpu] == list(range(tp * pp))
    stages = sorted({(r.first_layer, r.last_layer) for r in split.per_gpu})
    assert stages[0][0] == 0 and stages[-1][1] == arch.num_layers and len(stages) == pp
    assert all(a[1] == b[0] for a, b in pairwise(stages))  # contiguous, no layer lost or repeated
    sizes = [end - start for start, end in stages]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    for stage in range(pp):  # the TP ranks of one stage hold equal shares
        ranks = [r for r in split.per_gpu if r.pp_stage == stage]
        assert len(ranks) == tp and len({(r.weights_bytes, r.kv_cache_bytes, r.total_bytes) for r in ranks}) == 1
    # splitting only adds (replicated tensors, replicated KV heads, an lm_head copy): nothing goes missing
    assert split.weights_bytes >= whole.weights_bytes and split.kv_cache_bytes >= whole.kv_cache_bytes
    if tp == 1:
        assert split.kv_cache_bytes == whole.kv_cache_bytes
        if not arch.exact:  # a size-only model's weights are shared out by layer, each share rounded up
            assert split.weights_bytes <= whole.weights_bytes + pp
        elif not arch.tied_embeddings or pp == 1:
            assert split.weights_bytes == whole.weights_bytes
    mla = "mla" in arch.attention_kinds
    indexed = any(layer.attention.index_key_dim for layer in arch.layers)  # an indexer key is whole on every rank
    if not mla and not indexed and all(kv % tp == 0 for kv in kv_head_counts(arch)):
        assert split.kv_cache_bytes == whole.kv_cache_bytes  # heads divided, none replicated


@given(kv_heads=st.integers(1, 128), tp=st.integers(1, 256))
def test_kv_heads_per_rank_follow_the_replication_rule(kv_heads, tp):
    assume(tp % kv_heads == 0 or kv_heads % tp == 0)
    per_rank = kv_heads_per_rank(kv_heads, tp)
    if tp <= kv_heads:
        assert per_rank * tp == kv_heads  # split evenly
    else:
        assert per_rank == 1  # every rank holds one whole head: tp / kv_heads copies of each


@PROPERTY
@given(arch=architectures, data=st.data())
def test_each_rank_caches_its_share_of_kv_heads(arch, data):
    counts = kv_head_counts(arch)
    assume(len(counts) == 1 and arch.attention_kinds <= {"full", "sliding"})
    # a sparse-attention indexer's key is whole on every rank (MiniMax-M3): not a share of the KV heads
    assume(not any(layer.attention.index_key_dim for layer in arch.layers))
    (kv_heads,) = counts
    tp = data.draw(st.sampled_from(valid_tps(arch, 64)), label="tp")
    whole = estimate(arch, kv_dtype="fp8")
    split = estimate(arch, kv_dtype="fp8", tp=tp)
    for rank in split.per_gpu:
        assert rank.kv_bytes_per_token * kv_heads == whole.kv_bytes_per_token * kv_heads_per_rank(kv_heads, tp)


# --- output --------------------------------------------------------------------------------------------

def estimate_from_json(text):
    """Rebuild a MemoryEstimate from `planner estimate --format json` output."""
    data = json.loads(text)
    data["per_gpu"] = tuple(RankMemory(**rank) for rank in data["per_gpu"])
    data["gpu"] = GpuFit(**data["gpu"]) if data["gpu"] is not None else None
    for f in fields(MemoryEstimate):
        if isinstance(data[f.name], list):
            data[f.name] = tuple(data[f.name])
    return MemoryEstimate(**data)


@PROPERTY
@given(arch=architectures, data=st.data(), context=st.integers(1, 10**6), batch=st.integers(1, 256),
       card_gib=st.none() | st.integers(1, 300))
def test_json_output_round_trips(arch, data, context, batch, card_gib):
    tp = data.draw(st.sampled_from(valid_tps(arch, 8)), label="tp")
    gpu = GpuTarget("card", card_gib * 2**30) if card_gib else None
    est = estimate_memory(arch, Request(context=context, batch=batch, tp=tp, precision="auto"), CATALOG, gpu)
    text = estimate_json(est)
    assert estimate_from_json(text) == est
    byte_fields = re.findall(r'"(\w+_bytes(?:_per_token)?)": ([^,\n]+)', text)
    assert byte_fields and all(re.fullmatch(r"-?\d+", value) for _, value in byte_fields)  # bytes print as integers


# --- the solver -------------------------------------------------------------------------------------

SCENARIOS = {p.stem: p for p in (Path(__file__).resolve().parent.parent / "scenarios").glob("*.yaml")}


def plan_key(plan):
    return (plan.gpu, plan.tp, plan.pp, plan.precision, plan.kv_dtype, plan.context, plan.concurrency, plan.replicas,
            plan.provider, plan.instance, plan.region, plan.market, plan.instances, plan.usd_per_hour,
            plan.headroom_bytes)


def result_key(result):
    return (result.status, result.best and plan_key(result.best), [plan_key(p) for p in result.alternatives],
            result.rejected_cheaper, result.configurations_checked, result.candidates, result.variables)


@pytest.mark.parametrize("name", ["8b-budget", "128k-summarization", "deepseek-v3-multinode"])
def test_the_same_scenario_gives_the_same_plan(name):
    scenario = load_scenario(SCENARIOS[name])
    first, second = solve_scenario(scenario, CATALOG), solve_scenario(scenario, CATALOG)
    assert first.best is not None and result_key(first) == result_key(second)


def test_the_order_of_a_scenario_list_does_not_change_the_plan():
    search = {"gpus": ["h100-sxm", "mi300x", "h200-sxm"], "precisions": ["fp8", "int8"], "kv_dtypes": ["auto", "fp8"],
              "max_gpus_per_replica": 2}
    listed = {"model": "llama-3.3-70b", "workload": {"context": 8192, "concurrency": 1}, "search": search,
              "solver": {"top": 2}}
    reordered = {**listed, "search": {key: value[::-1] if isinstance(value, list) else value
                                      for key, value in search.items()}}
    first, second = (solve_scenario(parse_scenario(s), CATALOG) for s in (listed, reordered))
    assert result_key(first)[:3] == result_key(second)[:3]


GPU_POOL = ["rtx-3090", "rtx-4090", "l4", "l40s", "a10g", "a100-sxm-80gb", "h100-sxm", "h200-sxm", "mi300x",
            "rtx-a6000"]
MODEL_POOL = ["llama-3.1-8b", "qwen2.5-7b", "gemma-2-9b", "qwen3-30b-a3b", "phi-4", "llama-3.3-70b", "deepseek-v2-lite"]


@st.composite
def small_scenarios(draw):
    return {
        "model": draw(st.sampled_from(MODEL_POOL)),
        "workload": {"context": draw(st.lists(st.sampled_from([2048, 8192, 32768, 131072]), min_size=1, max_size=2)),
                     "concurrency": draw(st.sampled_from([1, 4, 32])), "replicas": draw(st.integers(1, 3))},
        "search": {"gpus": draw(st.lists(st.sampled_from(GPU_POOL), min_size=1, max_size=3, unique=True)),
                   "precisions": draw(st.lists(st.sampled_from(["bf16", "fp8", "int8", "int4"]), min_size=1,
                                               max_size=2, unique=True)),
                   "kv_dtypes": draw(st.sampled_from([["auto"], ["fp8"], ["auto", "fp8"]])),
                   "max_gpus_per_replica": draw(st.sampled_from([1, 2, 4, 8]))},
        "pricing": {"market": draw(st.sampled_from(["on-demand", "spot", "any"]))},
        "solver": {"top": 2},
    }


def offer_price(plan):
    offers = [o for o in CATALOG.offers if (o.provider, o.instance, o.region, o.gpu) ==
              (plan.provider, plan.instance, plan.region, plan.gpu) and o.price(plan.market) is not None]
    return min(o.price(plan.market) for o in offers)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=small_scenarios())
def test_every_printed_plan_passes_an_independent_recheck(data):
    scenario = parse_scenario(data)
    result = solve_scenario(scenario, CATALOG)
    assert (result.best is None) == (result.status == "INFEASIBLE")
    if result.best is None:
        assert result.infeasible is not None and result.infeasible.reason
        return
    arch = catalog_arch(scenario.model)
    for plan in (result.best, *result.alternatives):
        gpu = CATALOG.gpus.get(plan.gpu)
        # from scratch: the estimator's breakdown, and the fit as the plan's engine decides it with the settings it
        # resolved (a vLLM plan pinned to --kv-cache-memory-bytes fits where the planning margin's 10% would not)
        again = check_configuration(arch, plan.configuration, GpuTarget.from_catalog(gpu), CATALOG)
        assert again.gpu.fits and again.total_bytes == plan.memory.total_bytes
        if plan.configuration.engine.name == SIMPLE_ENGINE:
            assert all(r.total_bytes <= gpu.memory_bytes for r in again.per_gpu)
        assert plan.gpus_per_replica == plan.tp * plan.pp == len(again.per_gpu)
        assert plan.gpus_per_replica <= scenario.search.max_gpus_per_replica and plan.gpu in scenario.search.gpus
        assert plan.precision in scenario.search.precisions and plan.context in scenario.workload.context
        assert plan.instances * plan.gpus_per_instance >= plan.replicas * plan.gpus_per_replica  # every replica housed
        assert plan.usd_per_hour == pytest.approx(plan.instances * offer_price(plan))
        assert plan.usd_per_hour >= result.best.usd_per_hour


# --- infeasible scenarios: what blocks them, and changes that work ------------------------------------

# The changes explain_infeasible suggests, as edits of the scenario that make them.
SUGGESTED_CHANGES = [
    (r"allow (\d+) GPUs per replica", lambda s, m: s["search"].update(max_gpus_per_replica=int(m[1]))),
    (r"allow (\S+) \(.*\) in search\.precisions", lambda s, m: s["search"]["precisions"].append(m[1])),
    (r"an fp8 KV cache", lambda s, m: s["search"].update(kv_dtypes=["fp8"])),
    (r"a context of ([\d,]+) tokens", lambda s, m: s["workload"].update(context=int(m[1].replace(",", "")))),
    (r"concurrency 1", lambda s, m: s["workload"].update(concurrency=1)),
    (r"search\.allow_emulated: true", lambda s, m: s["search"].update(allow_emulated=True)),
]


def apply_suggestion(data, suggestion):
    changed = json.loads(json.dumps(data))
    for pattern, edit in SUGGESTED_CHANGES:
        if match := re.search(pattern, suggestion):
            edit(changed, match)
            return changed
    raise AssertionError(f"a suggestion no scenario key makes: {suggestion!r}")


@pytest.mark.parametrize("data, blocker", [
    # 70B at bf16 is 141 GB: one 80 GB card cannot hold it, whatever the context (the engine's refusal, in its words)
    ({"model": "llama-3.3-70b", "workload": {"context": 8192, "concurrency": 4},
      "search": {"gpus": ["a100-sxm-80gb"], "precisions": ["bf16"], "max_gpus_per_replica": 1}},
     r"weights 141\.1 GB per GPU > the a100-sxm-80gb's 85\.9 GB"),
    # the same under the seed's margin: the bytes it needs against the card's
    ({"model": "llama-3.3-70b", "workload": {"context": 8192, "concurrency": 4}, "engine": {"name": "simple"},
      "search": {"gpus": ["a100-sxm-80gb"], "precisions": ["bf16"], "max_gpus_per_replica": 1}},
     r"needs [\d.]+ GB .*per GPU; a100-sxm-80gb holds [\d.]+ GB"),
    # fp8 weights on Ampere only with vLLM's weight-only (Marlin) kernels, which the scenario does not allow
    ({"model": "llama-3.1-8b", "workload": {"context": 8192},
      "search": {"gpus": ["a100-sxm-80gb", "rtx-3090"], "precisions": ["fp8"], "allow_emulated": False}},
     r"runs fp8 on ampere only with weight-only kernels"),
])
def test_an_infeasible_scenario_names_its_blocker_and_each_suggested_change_works(data, blocker):
    result = solve_scenario(parse_scenario(data), CATALOG)
    assert result.status == "INFEASIBLE" and result.best is None
    assert re.search(blocker, result.infeasible.reason + " ".join(result.skipped)), result.infeasible.reason
    assert result.infeasible.suggestions and not result.infeasible.suggestions[0].startswith("no single change")
    for suggestion in result.infeasible.suggestions:
        relaxed = solve_scenario(parse_scenario(apply_suggestion(data, suggestion)), CATALOG)
        assert relaxed.best is not None, suggestion
        if quoted := re.search(r"cheapest \$([\d,.]+)/hour", suggestion):
            assert relaxed.best.usd_per_hour == pytest.approx(float(quoted[1].replace(",", "")), abs=0.005), suggestion


# --- the time limit ------------------------------------------------------------------------------------

def test_a_time_limit_that_cuts_the_search_gives_a_feasible_plan_and_its_gap():
    # the limit covers the whole search (planner.plan.deadline): cut before any configuration fits, it is the
    # one-line error naming the limit; cut later, the best plan found, never called infeasible
    from planner.plan.deadline import OutOfTime

    scenario = load_scenario(SCENARIOS["8b-budget"])
    try:
        result = solve_scenario(scenario, CATALOG, time_limit_s=1e-4, top=0)
    except OutOfTime as exc:
        assert "time limit" in str(exc) and "ran out" in str(exc) and "\n" not in str(exc)
        return
    assert result.candidates > 0  # plans exist: the limit only cut the search short
    assert result.status in ("OPTIMAL", "FEASIBLE") and result.best is not None and result.infeasible is None
    if result.status == "FEASIBLE":
        assert 0 <= result.gap <= 1


@pytest.fixture
def cp_sat_calls(monkeypatch):
    """Every CP-SAT solve: when it started, the budget it was given, how long it ran."""
    from ortools.sat.python import cp_model

    calls = []
    original = cp_model.CpSolver.solve

    def recorded(solver, *args, **kwargs):
        started = time.perf_counter()
        status = original(solver, *args, **kwargs)
        calls.append((started, solver.parameters.max_time_in_seconds, time.perf_counter() - started))
        return status

    monkeypatch.setattr(cp_model.CpSolver, "solve", recorded)
    return calls


def test_a_solve_finishing_under_its_time_limit_is_proven_optimal(cp_sat_calls):
    result = solve_scenario(load_scenario(SCENARIOS["8b-budget"]), CATALOG, time_limit_s=30, top=3)
    assert result.status == "OPTIMAL" and result.gap == 0 and result.time_limit_s == 30
    # the limit reaches CP-SAT: one deadline shared by every call, the first given (almost) all of it
    assert 29 < cp_sat_calls[0][1] <= 30 and all(budget <= 30 for _, budget, _ in cp_sat_calls)


def test_no_cp_sat_call_may_run_past_the_time_limit(cp_sat_calls):
    from planner.plan.deadline import OutOfTime

    limit = 0.05
    scenario = load_scenario(SCENARIOS["8b-budget"])  # read before the clock starts: the limit is the solve's
    solve_started = time.perf_counter()
    try:
        solve_scenario(scenario, CATALOG, time_limit_s=limit, top=5)
    except OutOfTime:
        pass  # the limit covers the candidate search too (planner.plan.deadline): it may end before CP-SAT runs
    for started, budget, _ in cp_sat_calls:
        assert started - solve_started + budget <= limit + 0.01


def test_a_search_that_spends_the_limit_leaves_cp_sat_uncalled(cp_sat_calls, monkeypatch):
    # a busy machine's candidate search may end past a short limit: CP-SAT is then not started with no time (it
    # would return nothing), the cheapest pair found stands as the unproven answer
    import planner.plan.solver as solver_module

    searched = solver_module.slower_speculative

    def slow(*args):
        time.sleep(0.1)
        return searched(*args)

    monkeypatch.setattr(solver_module, "slower_speculative", slow)
    result = solve_scenario(load_scenario(SCENARIOS["8b-budget"]), CATALOG, time_limit_s=0.05, top=5)
    assert cp_sat_calls == []
    assert result.status == "FEASIBLE" and result.gap == 1 and result.best is not None
    proven = solve_scenario(load_scenario(SCENARIOS["8b-budget"]), CATALOG, top=0)
    assert proven.status == "OPTIMAL" and result.best.usd_per_hour == proven.best.usd_per_hour
