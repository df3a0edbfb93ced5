"""Speculative decoding as a searched serving setting (issue 22 item 2): search.speculative [none, mtp] in `planner
solve`, the plan file and the exports. The draft is the checkpoint's MTP layer, held beside the model; a plan's speed
is a cycle over the acceptance length L; the exported flags parse with SGLang 0.5.23's parser and name vLLM 0.34.0's
speculative config fields."""

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from planner import api
from planner.catalog.load import load_acceptance, load_catalog
from planner.errors import PlannerInputError
from planner.estimator.memory import Request, estimate_memory
from planner.estimator.performance import replica_timer
from planner.estimator.speculative import draft_architecture, speculative_timer, with_draft
from planner.model.sources import resolve_model
from planner.plan.planfile import load_plan_file
from planner.plan.scenario import load_scenario, parse_scenario
from planner.render.export import export, load_plan
from planner.render.records import solve_json

from test_cli import refused
from test_parallel_layouts import SGLANG_SOURCE, VLLM_SOURCE, _commands, _vllm_flags, sglang_parser  # noqa: F401

ROOT = Path(__file__).parents[1]
SCENARIO = ROOT / "scenarios" / "deepseek-v3.2-chat-mtp.yaml"
CATALOG = load_catalog()
HIDDEN = 7168  # DeepSeek-V3's hidden_size


@pytest.fixture(scope="module")
def solved():
    return api.solve(load_scenario(SCENARIO), catalog=CATALOG)


@pytest.fixture(scope="module")
def plan_file(solved, tmp_path_factory):
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    path.write_text(solve_json(solved))
    return path


def test_the_draft_layer_by_hand():
    """DeepSeek-V3's MTP layer (config.json: hidden 7168, 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128,
    v 128, 256 routed + 1 shared experts of 2048): MLA, MoE, two norms, and the MTP's enorm, hnorm, eh_proj (2h x h)
    and shared_head.norm. With the shared embedding and lm_head (129,280 x 7168 each) it is the "14B of the
    Multi-Token Prediction (MTP) Module weights" of the model card (huggingface.co/deepseek-ai/DeepSeek-V3)."""
    h = HIDDEN
    attention = h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h
    moe = 257 * 3 * h * 2048 + 256 * h + 256
    mtp = 2 * h + 2 * h * h + h
    layer = attention + moe + 2 * h + mtp
    draft = draft_architecture(resolve_model(CATALOG, "deepseek-v3"))
    assert draft.layers[0].params == layer == 11_610_068_224
    assert abs(layer + 2 * 129_280 * h - 14e9) / 14e9 < 0.05


def test_the_draft_memory_by_hand():
    """The served model holds the MTP layer's weights and one more layer of MLA cache a token: (512 + 64) x 2 bytes in
    bf16 = 1,152 bytes, for each of the batch's tokens on every GPU (MLA's latent is whole on each TP rank)."""
    arch = resolve_model(CATALOG, "deepseek-v3")
    request = Request(context=32_768, batch=4, tp=8, precision="fp8-block")
    alone, served = estimate_memory(arch, request, CATALOG), estimate_memory(with_draft(arch, 1), request, CATALOG)
    assert served.kv_bytes_per_token - alone.kv_bytes_per_token == (512 + 64) * 2
    assert served.per_gpu[0].kv_cache_bytes - alone.per_gpu[0].kv_cache_bytes == 4 * 32_768 * 1_152
    # FP8 weights with their block scales and the 16-bit norms, router and eh_proj: 1 to 1.1 bytes a parameter
    added = served.weights_bytes - alone.weights_bytes
    assert 1.0 < added / 11_610_068_224 < 1.1


def test_solve_compares_with_and_without_mtp(solved):
    best, other = solved.best, solved.speculative_alternative
    assert best.configuration.speculation.name == "MTP 3 tokens, acceptance length 2.65"
    assert other is not None and other.configuration.speculation is None
    # the same GPUs and layout at the same price: MTP runs the faster there
    assert (best.gpu, best.layout, best.usd_per_hour) == (other.gpu, other.layout, other.usd_per_hour)
    assert best.full_context_output_tokens_per_s > other.full_context_output_tokens_per_s
    assert best.usd_per_million_output_tokens < other.usd_per_million_output_tokens
    assert "sglang/pull/20809" in solved.acceptance_source


def test_tokens_per_cycle_by_hand(solved):
    """A request gains L tokens a cycle: the replica's output tokens/s at the full context are concurrency x L over
    the cycle (s - 1 one-token draft forwards, a verify of s + 1 tokens, a draft extend of as many)."""
    best = solved.best
    c = best.configuration
    arch = resolve_model(CATALOG, c.model)
    card = CATALOG.gpus.get(c.gpu)
    timer = lambda model: replica_timer(model, c.precision, c.kv_dtype, card, c.tp, c.pp, CATALOG, "sglang",
                                        ep=c.ep, dp=c.dp, release=c.engine.version)
    cycle = speculative_timer(timer(arch), timer(draft_architecture(arch)), c.speculation).cycle(c.concurrency,
                                                                                                  float(c.context))
    assert best.full_context_step_s == pytest.approx(cycle.cycle_s / 2.65)
    assert best.full_context_output_tokens_per_s == pytest.approx(c.concurrency * 2.65 / cycle.cycle_s)


def test_solve_prints_the_choice_and_the_next_best(tmp_path):
    from test_cli import run

    out = run("solve", str(SCENARIO), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "speculative decoding: MTP 3 tokens, acceptance length 2.65 (published for deepseek_v32" in text
    assert "next best without MTP: $" in text


def test_the_plan_file_carries_it_and_the_recheck_counts_the_draft(plan_file):
    data = json.loads(plan_file.read_text())
    assert data["best"]["speculation"] == {"method": "mtp", "draft_tokens": 3, "acceptance_length": 2.65}
    [plan] = load_plan_file(plan_file, CATALOG)
    assert plan.configuration.speculation.draft_tokens == 3
    [alone] = load_plan_file(_edited(plan_file, plan_file.parent / "alone.json", speculation=None), CATALOG)
    fullest = lambda p: max(r.weights_bytes + r.kv_cache_bytes for r in p.memory.per_gpu)
    assert fullest(plan) > fullest(alone)


def test_sglang_parses_the_exported_draft(plan_file, sglang_parser):
    text = export(load_plan(plan_file, CATALOG), "sglang")
    [argv] = _commands(text, "python3 -m sglang.launch_server")
    assert " ".join(argv).endswith("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
                                   "--speculative-num-draft-tokens 4")
    args = sglang_parser.parse_args(argv)
    assert (args.speculative_algorithm, args.speculative_num_steps, args.speculative_eagle_topk,
            args.speculative_num_draft_tokens) == ("EAGLE", 3, 1, 4)


def _speculative_config_fields() -> tuple[set[str], set[str]]:
    """vLLM 0.34.0's SpeculativeConfig fields and its MTP method names (vllm/config/speculative.py)."""
    tree = ast.parse((VLLM_SOURCE / "vllm" / "config" / "speculative.py").read_text())
    config = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig")
    fields = {n.target.id for n in config.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    mtp = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "MTPModelTypes")
    return fields, {c.value for c in ast.walk(mtp.value) if isinstance(c, ast.Constant)}


def test_vllm_knows_the_exported_draft(plan_file):
    text = export(load_plan(plan_file, CATALOG), "vllm")
    [argv] = _commands(text, "vllm serve")
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "mtp", "num_speculative_tokens": 3}
    if not VLLM_SOURCE.is_dir():
        pytest.skip(f"vLLM 0.34.0's source is not unpacked at {VLLM_SOURCE}")
    assert "--speculative-config" in _vllm_flags()
    fields, methods = _speculative_config_fields()
    assert set(config) <= fields and config["method"] in methods


def test_other_targets_refuse_the_draft(plan_file):
    with pytest.raises(PlannerInputError, match="--to llamacpp: the plan runs speculative decoding") as refusal:
        export(load_plan(plan_file, CATALOG), "llamacpp")
    assert "\n" not in str(refusal.value)
    assert "--speculative-config" in export(load_plan(plan_file, CATALOG), "kubernetes")


def test_the_default_acceptance_lengths_cite_their_sources():
    for figure in load_acceptance():
        assert figure.source.startswith("https://") and figure.as_of
        assert 1 <= figure.acceptance_length <= figure.draft_tokens + 1


def _scenario(**search):
    return {"model": "deepseek-v3", "workload": {"context": "8K"}, "engine": {"name": "sglang"},
            "search": {"gpus": ["b200"], **search}}


@pytest.mark.parametrize("data, message", [
    (_scenario(draft_tokens=2), "search: draft_tokens: sets the MTP draft, and search.speculative has no mtp"),
    (_scenario(speculative=["mtp"], draft_tokens=1, acceptance_length=2.5),
     "search: acceptance_length: 2.5 must be at most draft_tokens + 1 = 2"),
    (_scenario(speculative=["eagle"]), "search.speculative.0: Input should be 'none' or 'mtp'"),
    (_scenario(speculative=["none", "mtp"], acceptance_length=0.5), "search.acceptance_length: Input should be greater"),
    ({**_scenario(speculative=["none", "mtp"], serving=["disaggregated"]), "workload": {"context": "8K", "traffic": {
        "requests_per_s": 1, "prompt_tokens": 100, "output_tokens": 100}}},
     "search.speculative (deepseek-v3): mtp is sized for aggregated replicas; a disaggregated decode pool's MTP cycles "
     "beside transferred prompts are not modelled yet: add aggregated to search.serving or remove mtp"),
])
def test_scenario_keys_are_checked(data, message):
    with pytest.raises(PlannerInputError, match=re.escape(message)):
        parse_scenario(data)


@pytest.mark.parametrize("data, message", [
    ({**_scenario(speculative=["none", "mtp"]), "model": "qwen3-30b-a3b"},
     "search.speculative: qwen3-30b-a3b's checkpoint ships no MTP module"),
    ({**_scenario(speculative=["none", "mtp"]), "model": "qwen3.5-397b-a17b"},
     "search.acceptance_length: planner knows no published MTP acceptance length for qwen3.5-397b-a17b"),
    (_scenario(speculative=["none", "mtp"], draft_tokens=3),
     "search.draft_tokens: the published acceptance length of deepseek_v3 (1.85) was measured at 1 draft tokens"),
    ({**_scenario(speculative=["none", "mtp"]), "engine": {"name": "llamacpp"}},
     "search.speculative: mtp is planned for engine.name sglang or vllm"),
])
def test_what_cannot_be_planned_is_refused(data, message):
    with pytest.raises(PlannerInputError, match=re.escape(message)) as refusal:
        api.solve(parse_scenario(data), catalog=CATALOG)
    assert "\n" not in str(refusal.value)


def test_a_given_acceptance_length_is_planned_as_given():
    data = {**_scenario(speculative=["mtp"], draft_tokens=2, acceptance_length=2.2), "model": "glm-5",
            "workload": {"context": "8K", "concurrency": 4}, "search": {"gpus": ["b200"], "speculative": ["mtp"],
            "draft_tokens": 2, "acceptance_length": 2.2, "precisions": ["nvfp4"], "max_gpus_per_replica": 8}}
    result = api.solve(parse_scenario(data), catalog=CATALOG)
    assert result.best.configuration.speculation.name == "MTP 2 tokens, acceptance length 2.2"
    assert result.acceptance_source == "given" and result.speculative_alternative is None
    from planner.render.summary import speculative_lines

    assert speculative_lines(result) == ["speculative decoding: MTP 2 tokens, acceptance length 2.2 (given)"]


def _edited(plan_file: Path, path: Path, **best) -> Path:
    data = json.loads(plan_file.read_text())
    data["best"].update(best)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("change, message", [
    ({"speculation": {"method": "mtp", "draft_tokens": 1, "acceptance_length": 2.5}},
     "speculation: acceptance_length 2.5 must be at most draft_tokens + 1 = 2"),
    ({"speculation": {"method": "eagle3", "draft_tokens": 1, "acceptance_length": 1.5}},
     "best.speculation.method: Input should be 'mtp'"),
    ({"speculation": {"method": "mtp", "draft_tokens": 0, "acceptance_length": 1}},
     "best.speculation.draft_tokens: Input should be greater than or equal to 1"),
    ({"engine": {"name": "llamacpp"}}, "speculation: MTP is planned for sglang or vllm, and the plan's engine is llamacpp"),
])
def test_plan_file_speculation_is_validated(plan_file, tmp_path, change, message):
    hostile = _edited(plan_file, tmp_path / "hostile.json", **change)
    with pytest.raises(PlannerInputError, match=re.escape(message)) as refusal:
        load_plan(hostile, CATALOG)
    assert "\n" not in str(refusal.value)


def test_cli_refusal_is_one_line(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({**_scenario(speculative=["none", "mtp"]), "model": "qwen3.5-397b-a17b"}))
    refused("solve", str(scenario), cwd=tmp_path, needle="search.acceptance_length: planner knows no published")


@pytest.mark.parametrize("name, outcome", [
    ("deepseek-v3-dp-ep-h100", ("MTP 1 token, acceptance length 1.85 (published for deepseek_v3",
                                "next best without MTP: $47.84/hour")),
    ("deepseek-v3-multinode", ("MTP 1 token, acceptance length 1.85 (published for deepseek_v3",
                               "next best without MTP: $48.00/hour")),
    ("glm-5-nvfp4-b200", ("MTP 3 tokens, acceptance length 1.64 (published for glm_moe_dsa",
                          "next best without MTP: $68.80/hour")),
    ("moe-qwen3-30b-a3b", "search.speculative: qwen3-30b-a3b's checkpoint ships no MTP module"),
])
def test_the_shipped_moe_scenarios_with_mtp(name, outcome):
    """Each shipped MoE scenario with search.speculative [none, mtp]: DeepSeek-V3's and GLM-5's are compared with and
    without MTP at the family's published acceptance length; Qwen3-30B-A3B ships no MTP module."""
    from planner.render.summary import speculative_lines

    data = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
    data["search"]["speculative"] = ["none", "mtp"]
    try:
        result = api.solve(parse_scenario(data), catalog=CATALOG)
    except PlannerInputError as refusal:
        assert outcome in str(refusal)
        return
    lines = speculative_lines(result)
    assert lines[0].startswith(f"speculative decoding: {outcome[0]}") and lines[1].startswith(outcome[1])


def test_when_only_pipeline_stages_hold_it_mtp_is_said_not_to_fit():
    """MTP is planned on one pipeline stage: where only tp 8 x pp 2 holds the scenario, the plan runs without it."""
    from planner.render.summary import speculative_lines

    data = yaml.safe_load(SCENARIO.read_text())
    data["search"].update(layouts=["tp"], max_gpus_per_replica=16)
    result = api.solve(parse_scenario(data), catalog=CATALOG)
    assert result.best.layout == "tp 8 x pp 2" and result.best.configuration.speculation is None
    assert speculative_lines(result)[1].endswith("no configuration searched fits its draft on one pipeline stage")


def test_a_fleet_assignment_with_a_draft_its_model_lacks_is_refused(tmp_path):
    """Fleet assignments may run MTP (tests/test_speculative_fleet.py); one whose model ships no MTP module is refused
    on load, naming the field."""
    from planner.render.records import fleet_json

    scenario = load_scenario(ROOT / "scenarios" / "spot-survive.yaml")
    data = json.loads(fleet_json(api.plan_fleet(scenario, catalog=CATALOG), "spot-survive"))
    data["assignments"][0]["speculation"] = {"method": "mtp", "draft_tokens": 1, "acceptance_length": 1.8}
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlannerInputError, match="speculation: llama-3.1-8b's checkpoint ships no MTP module") as no:
        load_plan_file(path, CATALOG)
    assert "\n" not in str(no.value)
