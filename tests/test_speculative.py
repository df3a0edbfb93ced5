"""Speculative decoding with the checkpoint's MTP module (planner.estimator.speculative; bench/SPEED_PROTOCOL.md, the
speculative-decoding amendment): the draft is the MTP layer, a cycle is s - 1 one-token draft forwards, a verify of
s + 1 tokens a request and a draft extend of as many, and a request gains the acceptance length L tokens a cycle."""

import pytest

from planner import api
from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.estimator.memory import GpuTarget, Request, estimate_memory
from planner.estimator.performance import Step, replica_timer
from planner.estimator.speculative import draft_architecture, speculation, speculative_timer, with_draft
from planner.model.sources import resolve_model

from test_cli import refused, run

MODEL, GPU = "deepseek-v3", "b200"
SHAPE = dict(gpu=GPU, tp=8, engine="sglang", prompt_tokens=1000, output_tokens=1000)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def arch(catalog):
    return resolve_model(catalog, MODEL)


def test_the_draft_is_the_mtp_layer(arch):
    draft = draft_architecture(arch)
    assert draft.num_layers == 1
    layer = draft.layers[0]
    assert layer.is_moe and layer.attention.kind == "mla"
    names = {t.name for t in layer.tensors}
    assert "mtp0.eh_proj.weight" in names and "mtp0.mlp.gate.weight" in names
    # the checkpoint's own embedding and head copies are the target's in the engines: not the draft's
    assert not any(t.role in ("embedding", "lm_head") for t in layer.tensors)
    assert draft.head == arch.head
    # every MTP tensor but those two is in the draft layer
    assert len(layer.tensors) == len(arch.unloaded) - 2


def test_a_cycle_is_its_three_parts(catalog, arch):
    spec = speculation("mtp", 3, 2.5)
    card = catalog.gpus.get(GPU)
    target = replica_timer(arch, "auto", "auto", card, 8, 1, catalog, "sglang")
    draft = replica_timer(draft_architecture(arch), "auto", "auto", card, 8, 1, catalog, "sglang")
    timer = speculative_timer(target, draft, spec)
    batch, context = 4, 1500.0
    wide = Step(batch, context, batch * 3, batch * 3 * context, batch * 3)
    engine_step = draft.hw.step_overhead_s  # the draft's forwards run inside the target's step
    cycle = timer.cycle(batch, context)
    # the verify and the draft's extend carry several tokens a request yet replay CUDA graphs, even where the engine
    # launches its prefill eagerly (DeepSeek-V3 on SM100 at SGLang's default release)
    assert target.hw.eager_launch_s > 0 and target.forward_s(wide) > target.graphed().forward_s(wide)
    assert cycle.verify_s == pytest.approx(target.graphed().forward_s(wide))
    assert cycle.draft_s == pytest.approx(2 * (draft.step_s(Step(batch, context)) - engine_step)
                                          + draft.graphed().forward_s(wide) - engine_step)
    assert cycle.cycle_s == pytest.approx(cycle.verify_s + cycle.draft_s)


def test_tpot_is_the_cycle_over_the_acceptance_length():
    result = api.perf(MODEL, batch=1, speculation=speculation("mtp", 3, 2.5), **SHAPE).to_dict()
    spec = result["speculative"]
    assert result["decode_step_ms"] == pytest.approx(spec["verify_ms"] + spec["draft_ms"])
    assert sum(result["decode_terms_ms"].values()) == pytest.approx(spec["verify_ms"])
    assert result["tpot_ms"] == pytest.approx(result["decode_step_ms"] / 2.5)  # one request: no other prefills


def test_speculation_pays_only_when_drafts_are_accepted():
    plain = api.perf(MODEL, batch=1, **SHAPE).performance.tpot_s
    rejected = api.perf(MODEL, batch=1, speculation=speculation("mtp", 1, 1.0), **SHAPE).performance.tpot_s
    accepted = api.perf(MODEL, batch=1, speculation=speculation("mtp", 3, 3.0), **SHAPE).performance.tpot_s
    assert rejected > plain > accepted


def test_more_draft_tokens_cost_more_a_cycle():
    cycles = [api.perf(MODEL, batch=8, speculation=speculation("mtp", s, 1.0), **SHAPE).performance.decode_step_s
              for s in (1, 2, 3, 5)]
    assert cycles == sorted(cycles) and cycles[0] < cycles[-1]


def test_the_draft_memory_counts_in_the_fit(catalog, arch):
    served, card = with_draft(arch, 1), GpuTarget.from_catalog(catalog.gpus.get(GPU))
    context = 32_000
    for batch in range(1, 400):
        request = Request(context=context, batch=batch, tp=8)
        if estimate_memory(served, request, catalog, card).gpu.headroom_bytes < 0 <= \
                estimate_memory(arch, request, catalog, card).gpu.headroom_bytes:
            break
    else:
        pytest.fail("no batch fits without the draft and not with it")
    api.perf(MODEL, gpu=GPU, tp=8, batch=batch, prompt_tokens=16_000, output_tokens=16_000)  # fits alone
    with pytest.raises(PlannerInputError, match="--batch"):
        api.perf(MODEL, gpu=GPU, tp=8, batch=batch, prompt_tokens=16_000, output_tokens=16_000,
                 speculation=speculation("mtp", 3, 2.0))


@pytest.mark.parametrize("args, needle", [
    (["perf", "llama-3.1-8b", "--gpu", "h100", "--speculative", "mtp", "--acceptance-length", "2"], "ships no MTP module"),
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--speculative", "mtp", "--acceptance-length", "5"],
     "--acceptance-length: 5.0 must be between 1 and 4"),
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--speculative", "mtp"], "--acceptance-length: required"),
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--acceptance-length", "2"], "only with --speculative"),
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--speculative", "eagle3", "--acceptance-length", "2"],
     "--speculative: 'eagle3' is not modelled"),
    (["perf", MODEL, "--gpu", GPU, "--tp", "8", "--speculative", "mtp", "--acceptance-length", "2", "--concurrency", "4"],
     "drop --rate, --concurrency and --pp"),
])
def test_cli_refusals_are_one_line(tmp_path, args, needle):
    refused(*args, cwd=tmp_path, needle=needle)


def test_cli_prints_the_cycle(tmp_path):
    result = run("perf", MODEL, "--gpu", GPU, "--tp", "8", "--engine", "sglang", "--speculative", "mtp",
                 "--speculative-tokens", "3", "--acceptance-length", "2.5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "speculative mtp: 3 draft tokens, acceptance length 2.5 · a cycle" in result.stdout
