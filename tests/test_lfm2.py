"""Liquid AI LFM2 / LFM2.5 (lfm2) and LFM2-MoE (lfm2_moe): parameter counts by hand from transformers' modelling code,
the short-convolution state per sequence as each engine holds it, the KV on attention layers only, the CLI, the speed.

Hand counts follow transformers 5.24.0 models/lfm2/modeling_lfm2.py and models/lfm2_moe/modeling_lfm2_moe.py:
  short conv (Lfm2ShortConv): conv (hidden, 1, L) + in_proj (3 hidden, hidden) + out_proj (hidden, hidden)
  attention (Lfm2Attention): q (heads x 64, hidden) + k, v (8 x 64, hidden) + out (hidden, heads x 64) + q/k norms (64 each)
  MLP (Lfm2MLP): w1, w3 (I, hidden) + w2 (hidden, I); two RMSNorms a layer; embedding_norm; tied lm_head
"""

import json
import subprocess
import sys

import pytest

from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.engines.llamacpp import recurrent_state_bytes
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.engines.vllm import state_blocks
from planner.estimator.memory import GpuTarget, Request, estimate_memory
from planner.estimator.performance import Step, replica_timer
from planner.model.architecture import architecture_from_config

from conftest import DATA
from engine_fixtures import h100  # noqa: F401  (fixture)

RECORDED = json.loads((DATA / "transformers-counts.json").read_text())["catalog_counts"]["counts"]
ATTENTION_1_2B = (2, 5, 8, 10, 12, 14)


def model(catalog, name):
    return architecture_from_config(catalog.models.get(name).config, name)


# -- parameters ------------------------------------------------------------------------------------------------------

def test_lfm2_1_2b_by_layer_kind(catalog):
    arch = model(catalog, "lfm2.5-1.2b-instruct")
    h, layers = 2048, arch.layers
    conv = h * 1 * 3 + 3 * h * h + h * h                      # 6,144 + 12,582,912 + 4,194,304 = 16,783,360
    attention = 2048 * 2048 + 2 * 512 * 2048 + 2048 * 2048 + 2 * 64  # 10,485,888
    mlp = 3 * 8192 * 2048                                      # int(2 x 12,288 / 3) = 8,192, rounded to 256: 50,331,648
    norms = 2 * h
    assert (conv, attention, mlp) == (16_783_360, 10_485_888, 50_331_648)
    assert [i for i, layer in enumerate(layers) if layer.attention.kind == "full"] == list(ATTENTION_1_2B)
    for layer in layers:
        mixer = attention if layer.attention.kind == "full" else conv
        assert layer.params == mixer + mlp + norms
    embedding, final_norm = 65536 * h, h                       # tied: no lm_head tensor
    total = embedding + final_norm + 10 * (conv + mlp + norms) + 6 * (attention + mlp + norms)
    assert total == 1_170_340_608  # the publisher's safetensors total for LFM2.5-1.2B-Instruct
    assert arch.loaded_params == arch.checkpoint_params == total
    assert arch.tied_embeddings and not any(t.name == "lm_head.weight" for t in arch.head)


def test_lfm2_8b_a1b_by_layer_kind(catalog):
    arch = model(catalog, "lfm2-8b-a1b")
    h = 2048
    conv, attention = 16_783_360, 10_485_888                  # the same mixers as the 1.2B (hidden 2048, 32 / 8 heads)
    dense = 3 * 7168 * 2048                                    # Lfm2MoeMLP at intermediate_size, no adjustment: 44,040,192
    router, bias = 32 * 2048, 32                               # gate.weight and the float32 expert_bias buffer
    experts = 32 * (2 * 1792 * 2048 + 2048 * 1792)             # gate_up_proj (32, 3584, 2048) + down_proj (32, 2048, 1792)
    assert (dense, experts) == (44_040_192, 352_321_536)
    kinds = ["full" if i in (2, 6, 10, 14, 18, 21) else "linear" for i in range(24)]
    assert [layer.attention.kind for layer in arch.layers] == kinds
    assert [layer.is_moe for layer in arch.layers] == [False, False] + [True] * 22
    for i, layer in enumerate(arch.layers):
        mixer = attention if kinds[i] == "full" else conv
        assert layer.params == mixer + (router + bias + experts if i >= 2 else dense) + 2 * h
    total = 65536 * h + h + 18 * conv + 6 * attention + 2 * dense + 22 * (router + bias + experts) + 24 * 2 * h
    assert total == 8_339_930_560
    assert arch.loaded_params == total
    assert (arch.moe.num_experts, arch.moe.experts_per_token, arch.moe.routing) == (32, 4, "sigmoid")


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_planner_counts_what_transformers_builds(catalog, name):
    recorded = RECORDED[name]
    assert model(catalog, name).loaded_params == recorded["parameters"] + recorded["buffers"]
    assert catalog.models.get(name).params == recorded["parameters"] + recorded["buffers"]


def test_full_attn_idxs_and_layer_types_build_the_same_model(catalog):
    spelled = dict(catalog.models.get("lfm2.5-1.2b-instruct").config)
    listed = {**{k: v for k, v in spelled.items() if k != "layer_types"}, "full_attn_idxs": list(ATTENTION_1_2B)}
    assert architecture_from_config(listed, "x").layers == architecture_from_config(spelled, "x").layers
    # Lfm2Config without either: every layer is attention (configuration_lfm2.py __post_init__)
    neither = {k: v for k, v in listed.items() if k != "full_attn_idxs"}
    assert {layer.attention.kind for layer in architecture_from_config(neither, "x").layers} == {"full"}


def test_block_ff_dim_multiplier_and_auto_adjust():
    base = {"model_type": "lfm2", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 1000, "layer_types": ["conv", "full_attention"]}
    width = lambda **keys: architecture_from_config({**base, **keys}, "x").intermediate_size  # noqa: E731
    assert width(intermediate_size=6656) == 4608                      # int(2 x 6656 / 3) = 4437 -> 18 x 256
    assert width(intermediate_size=1000, block_ff_dim=6656) == 4608   # block_ff_dim wins, as Lfm2Config pops it
    assert width(intermediate_size=6656, block_ffn_dim_multiplier=None) == 4437  # no multiplier: no rounding
    assert width(intermediate_size=6656, block_ffn_dim_multiplier=1.5, block_multiple_of=64) == 6656  # 6655 -> 104 x 64
    assert width(intermediate_size=6656, block_auto_adjust_ff_dim=False) == 6656


# -- memory ----------------------------------------------------------------------------------------------------------

def test_kv_only_on_attention_layers_and_a_constant_conv_window(catalog):
    arch = model(catalog, "lfm2.5-1.2b-instruct")
    short = estimate_memory(arch, Request(context=1000, batch=3), catalog)
    long = estimate_memory(arch, Request(context=8000, batch=3), catalog)
    per_token = 6 * 8 * 64 * 2 * 2    # 6 attention layers x 8 KV heads x 64 x (K + V) x bf16 = 12,288 B
    window = 10 * (3 - 1) * 2048 * 2  # 10 conv layers x (L - 1) x hidden x bf16 = 81,920 B a sequence
    assert short.kv_bytes_per_token == long.kv_bytes_per_token == per_token
    assert short.kv_state_bytes_per_sequence == long.kv_state_bytes_per_sequence == window
    assert long.kv_cache_bytes == 3 * (8000 * per_token + window)
    assert long.kv_cache_bytes - short.kv_cache_bytes == 3 * 7000 * per_token  # the window does not grow
    tp2 = estimate_memory(arch, Request(context=1000, tp=2), catalog)
    assert tp2.per_gpu[0].kv_cache_bytes == 1000 * per_token // 2 + window // 2  # heads and conv channels split


def test_vllm_pages_the_conv_window(catalog, h100):
    arch = model(catalog, "lfm2.5-1.2b-instruct")
    old = engine_budget(arch, Request(context=8192), EngineSettings(name="vllm", version="0.19.0"), h100, catalog)
    # short_conv_state_shape (conv_kernel - 1, conv_dim / tp) in the model dtype: 2 x 2,048 x 2 = 8,192 B a layer; one
    # attention token is 8 x 64 x 2 x 2 = 2,048 B, so the smallest 16-token block (32,768 B) holds a state
    assert (old.layout.state_bytes, old.layout.block_size, old.layout.page_bytes) == (8192, 16, 16 * 2048)
    state = next(g for g in old.layout.groups if g.kind == "state")
    assert (state.layers, state.blocks_per_request) == (10, 1)      # mamba_cache_mode "none": one block
    new = engine_budget(arch, Request(context=8192), EngineSettings(name="vllm", version="0.34.0"), h100, catalog)
    state = next(g for g in new.layout.groups if g.kind == "state")
    assert (new.layout.block_size, new.layout.page_bytes, state.blocks_per_request) == (64, 64 * 2048, 2)  # "align"
    tp2 = engine_budget(arch, Request(context=8192, tp=2), EngineSettings(name="vllm", version="0.19.0"), h100, catalog)
    assert tp2.layout.state_bytes == 4096                            # conv_dim / tp channels


def test_vllm_short_conv_holds_the_base_state_blocks():
    profiles = load_profiles().vllm
    for version, base in (("0.19.0", 1), ("0.34.0", 2)):
        for card in ("h100-sxm", "b200"):
            assert dict(state_blocks(GpuTarget(card, 80 << 30), profiles.get(version, "vllm")))["short_conv"] == base


def test_sglang_state_pool_holds_the_conv_windows(catalog, h100):
    arch = model(catalog, "lfm2.5-1.2b-instruct")
    budget = engine_budget(arch, Request(context=8192), EngineSettings(name="sglang", version="0.5.9"), h100, catalog)
    # Mamba2StateShape(state_size=0): conv (hidden / tp, conv_kernel - 1) in bfloat16, an empty temporal state
    assert budget.layout.state_bytes == 2 * 2048 * 2
    pool_bytes = budget.layout.state_pool_bytes
    assert pool_bytes == budget.layout.state_slots * 10 * 8192  # mamba_cache_per_req = 10 layers x 8,192 B


def test_llamacpp_holds_one_f32_window_a_sequence(catalog, h100):
    arch = model(catalog, "lfm2.5-1.2b-instruct")
    conv = next(layer for layer in arch.layers if layer.attention.kind == "linear")
    # n_embd_r = n_embd x (n_shortconv_l_cache - 1) f32 values, n_embd_s = 0
    assert recurrent_state_bytes(conv) == (2048 * 2 * 4, 0)
    budget = engine_budget(arch, Request(context=4096, batch=4), EngineSettings(name="llamacpp"), h100, catalog)
    assert budget.fits
    # one cell per --parallel sequence: 4 cells of 16,384 B in each of the 10 conv layers, whatever the context
    assert (budget.layout.state_bytes, budget.layout.state_slots) == (16_384, 4)
    kv = 4 * 4096 * 6 * 8 * 64 * 2 * 2                              # 4 streams of 4,096 cells, 6 attention layers, f16
    assert budget.kv_pool_bytes == kv + 4 * 10 * 16_384


def test_malformed_lfm2_configs_name_the_field(catalog):
    good = dict(catalog.models.get("lfm2-8b-a1b").config)
    dense = dict(catalog.models.get("lfm2-1.2b").config)
    cases = [
        ({**good, "layer_types": good["layer_types"][:-1]}, "'layer_types' has 23 entries for 24 layers"),
        ({**good, "layer_types": ["mamba"] * 24}, "layer_types[0] = 'mamba'"),
        ({k: v for k, v in good.items() if k != "layer_types"}, "missing key 'layer_types'"),
        ({**good, "num_experts_per_tok": 64}, "'num_experts_per_tok' 64 exceeds 'num_experts' 32"),
        ({**dense, "full_attn_idxs": [2, 16]}, "'full_attn_idxs' lists layer 16"),
        ({**dense, "block_ffn_dim_multiplier": "1.0"}, "'block_ffn_dim_multiplier' must be a positive number"),
        ({**dense, "conv_dim": 1024}, "'conv_dim' 1024 differs from hidden_size 2048"),
        ({**dense, "conv_L_cache": 1}, "'conv_L_cache' must be at least 2"),
    ]
    for config, message in cases:
        with pytest.raises(PlannerInputError) as err:
            architecture_from_config(config, "bad")
        assert message in str(err.value) and "\n" not in str(err.value)


# -- the CLI and the speed ---------------------------------------------------------------------------------------------

def test_planner_estimate_from_the_cli():
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "estimate", "LiquidAI/LFM2.5-1.2B-Thinking", "--context",
                           "32768", "--batch", "2", "--format", "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["params"] == 1_170_340_608
    assert out["kv_bytes_per_token"] == 12_288
    assert out["kv_cache_bytes"] == 2 * (32768 * 12_288 + 81_920)
    assert out["weights_bytes"] == 1_170_340_608 * 2


def test_decode_step_grows_with_batch_and_context(catalog):
    arch = model(catalog, "lfm2.5-1.2b-instruct")
    timer = replica_timer(arch, "bf16", "auto", catalog.gpus.get("h100-sxm"), 1, 1, catalog, "vllm")
    by_batch = [timer.step_s(Step(b, 4096.0)) for b in (1, 8, 64, 256)]
    by_context = [timer.step_s(Step(32, c)) for c in (256.0, 4096.0, 32768.0)]
    assert by_batch == sorted(by_batch) and by_batch[0] < by_batch[-1]
    assert by_context == sorted(by_context) and by_context[0] < by_context[-1]
    # a decode step reads every held token's KV on the 6 attention layers and each sequence's conv windows once
    _, forward, _ = timer.step(Step(8, 4096.0))
    assert forward.kv_bytes == 8 * (4096 * 12_288 + 81_920)
