"""llama.cpp's recurrent memory (llama_memory_recurrent) beside the KV cache of hybrid models, counted by hand.

Per cell and recurrent layer llama.cpp keeps an r row of n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x d_state)
f32 values and an s row of n_embd_s = d_state x d_inner f32 values (src/llama-hparams.cpp), one cell per --parallel
sequence (src/llama-model.cpp create_memory: max(1, n_seq_max)). The counts below come from the catalog configs.
"""

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.model.architecture import architecture_from_config, size_only_architecture_from_config
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.engines.base import engine_refusal
from planner.estimator.memory import GpuTarget, Request

from conftest import CONFIGS
from engine_fixtures import arch, h100  # noqa: F401  (fixtures)

# Qwen3.5-27B: 48 Gated DeltaNet layers (3 of every 4 of 64), 16 key / 48 value heads of 128, conv kernel 4
QWEN35_R = 48 * 3 * (2 * 16 * 128 + 48 * 128) * 4  # 5,898,240 B: llama.cpp logs "R (f32): 5.62 MiB" a sequence
QWEN35_S = 48 * 128 * (48 * 128) * 4  # 150,994,944 B: "S (f32): 144.00 MiB"
# its 16 full-attention layers: 4 KV heads x 256, K and V, 2 B a value (f16 / bf16 cache)
QWEN35_KV_PER_CELL = 16 * 4 * 256 * 2 * 2
# NVIDIA-Nemotron-3-Nano-30B-A3B: 23 Mamba-2 layers (the M of its pattern), 64 heads of 64 (d_inner 4096),
# 8 groups, state 128, conv kernel 4
NEMOTRON_R = 23 * 3 * (64 * 64 + 2 * 8 * 128) * 4  # 1,695,744 B
NEMOTRON_S = 23 * 128 * (64 * 64) * 4  # 48,234,496 B
NEMOTRON_KV_PER_CELL = 6 * 2 * 128 * 2 * 2  # its 6 attention layers: 2 KV heads x 128


def llamacpp(**settings):
    return EngineSettings(name="llamacpp", **settings)


@pytest.fixture(scope="module")
def b200(catalog):
    return GpuTarget.from_catalog(catalog.gpus.get("b200"))


@pytest.mark.parametrize("parallel", [1, 4])
@pytest.mark.parametrize("model, r, s, kv_per_cell", [
    ("qwen3.5-27b", QWEN35_R, QWEN35_S, QWEN35_KV_PER_CELL),
    ("nemotron-3-nano-30b-a3b", NEMOTRON_R, NEMOTRON_S, NEMOTRON_KV_PER_CELL),
])
def test_recurrent_states_by_hand(model, r, s, kv_per_cell, parallel, arch, b200, catalog):
    budget = engine_budget(arch(model), Request(context=4096, batch=parallel, precision="q4_k_m"), llamacpp(), b200,
                           catalog)
    assert budget.fits and budget.gpu_layers == budget.total_layers
    layout = budget.layout
    assert layout.state_slots == parallel  # one cell a sequence, whatever the context
    assert layout.state_pool_bytes == parallel * (r + s)
    # the attention layers' KV cache beside it: parallel streams of 4096 cells
    assert budget.kv_pool_bytes == parallel * 4096 * kv_per_cell + parallel * (r + s)
    assert budget.kv_cache_capacity_tokens == parallel * 4096
    mib = 1024 * 1024
    assert f"R (f32): {parallel * r / mib:.2f} MiB, S (f32): {parallel * s / mib:.2f} MiB" in layout.notes[1]
    assert f"CUDA0 RS buffer size = {parallel * (r + s) / mib:.2f} MiB" in layout.notes[2]


def test_recurrent_states_do_not_grow_with_the_context(arch, b200, catalog):
    short, long = (engine_budget(arch("qwen3.5-27b"), Request(context=context, precision="q4_k_m"), llamacpp(), b200,
                                 catalog) for context in (4096, 65536))
    assert short.layout.state_pool_bytes == long.layout.state_pool_bytes == QWEN35_R + QWEN35_S
    assert long.kv_pool_bytes - short.kv_pool_bytes == (65536 - 4096) * QWEN35_KV_PER_CELL


def test_states_stay_with_their_layers(arch, b200, catalog):
    # -ngl 33 of 65 (64 blocks + output): blocks 32..63 on the GPU; 8 of them (35, 39, ... 63) are attention layers
    budget = engine_budget(arch("qwen3.5-27b"), Request(context=4096, precision="q4_k_m"), llamacpp(n_gpu_layers=33),
                           b200, catalog)
    per_layer = (QWEN35_R + QWEN35_S) // 48
    assert budget.layout.state_pool_bytes == 24 * per_layer
    assert "CPU RS buffer size = 74.81 MiB" in budget.layout.notes[2]  # the other 24 layers' states: 24 x 3.117 MiB


def test_log_of_pull_request_23792_two_sequences(arch, b200, catalog):
    """ggml-org/llama.cpp pull request #23792 logs a 64-layer Qwen3.5 at 2 sequences: "llama_memory_recurrent:
    size = 299.25 MiB (2 cells, 64 layers, 2 seqs 0 rs_seq), R (f32): 11.25 MiB, S (f32): 288.00 MiB"."""
    budget = engine_budget(arch("qwen3.5-27b"), Request(context=4096, batch=2, precision="q4_k_m"), llamacpp(), b200,
                           catalog)
    assert "size = 299.25 MiB (2 cells, 48 recurrent layers" in budget.layout.notes[1]
    assert "R (f32): 11.25 MiB, S (f32): 288.00 MiB" in budget.layout.notes[1]


def test_hybrids_are_sized_and_unsized_mixers_refused(arch):
    assert engine_refusal(arch("qwen3.5-27b"), "llamacpp") is None
    assert engine_refusal(arch("nemotron-3-nano-30b-a3b"), "llamacpp") is None
    kimi = architecture_from_config(json.loads((CONFIGS / "kimi-linear-48b-a3b" / "config.json").read_text()),
                                    "kimi-linear")
    assert "kda layers" in engine_refusal(kimi, "llamacpp")


def test_kimi_linear_is_refused_with_one_error_line(catalog, h100):
    kimi = architecture_from_config(json.loads((CONFIGS / "kimi-linear-48b-a3b" / "config.json").read_text()),
                                    "kimi-linear")
    with pytest.raises(PlannerInputError, match="--engine vllm, sglang or simple"):
        engine_budget(kimi, Request(context=4096), llamacpp(), h100, catalog)


def test_a_size_only_qwen3_next_is_sized(catalog, h100):
    config = json.loads((CONFIGS / "qwen3-next-80b-a3b" / "config.json").read_text())
    hybrid = size_only_architecture_from_config(config, "qwen3-next", 80 * 10**9)
    budget = engine_budget(hybrid, Request(context=4096, precision="fp8"), llamacpp(), h100, catalog)
    # 36 Gated DeltaNet layers of 16 key / 32 value heads of 128, kernel 4: 75.38 MiB a sequence
    assert budget.layout.state_slots == 1
    assert budget.layout.state_bytes * 36 == 36 * (3 * (2 * 16 * 128 + 32 * 128) * 4 + 128 * 32 * 128 * 4)


def test_a_pure_attention_model_is_unchanged(arch, b200, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192, batch=2), llamacpp(), b200, catalog)
    assert budget.kv_pool_bytes == 2 * 8192 * 32 * 8 * 128 * 2 * 2  # 32 layers, 8 KV heads x 128, K and V, f16
    assert budget.layout is None and budget.warnings == ()


def test_the_cli_prints_the_recurrent_memory():
    result = CliRunner().invoke(app, ["estimate", "qwen3.5-27b", "--engine", "llamacpp", "--gpu", "rtx-4090",
                                      "--precision", "q4_k_m", "--context", "8192", "--batch", "4"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "llama_memory_recurrent: size = 598.50 MiB (4 cells, 48 recurrent layers, 4 seqs" in out
    assert "R (f32): 22.50 MiB, S (f32): 576.00 MiB" in out
    # 32,768 cells x 65,536 B (16 layers x 4 KV heads x 256 x K and V x 2 B)
    assert "llama_kv_cache: size = 2048.00 MiB (32,768 cells, 16 attention layers, 4 stream(s) of 8,192)" in out
    assert "CUDA0 RS buffer size = 598.50 MiB" in out
    assert "Traceback" not in result.output
