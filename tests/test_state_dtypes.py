"""Recurrent state held part by part: the convolution window and the recurrent state each in the dtype the engine
gives it (vLLM v0.19.0 vllm/model_executor/layers/mamba/mamba_utils.py MambaStateDtypeCalculator; SGLang
python/sglang/srt/configs/mamba_utils.py Mamba2StateDType), and a compressed-tensors checkpoint's precision applied to
the modules its config targets."""

import json

import pytest

from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings, engine_budget
from planner.estimator.engines.base import serve
from planner.estimator.engines.profiles import load_profiles
from planner.estimator.engines.vllm import StateShape, state_shape
from planner.estimator.memory import GpuTarget, Request
from planner.model.architecture import architecture_from_config
from planner.model.precision import resolve_precision, tensor_bytes, weights_bytes

from conftest import CONFIGS

# A small Kimi Linear: 4 layers, KDA on 1-3 (4 heads of 32, kernel 4), MLA on 4
SMALL_KDA = {"model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"], "torch_dtype": "bfloat16",
             "hidden_size": 256, "num_hidden_layers": 4, "vocab_size": 1024, "num_attention_heads": 4,
             "q_lora_rank": None, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
             "intermediate_size": 512, "tie_word_embeddings": False,
             "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "num_heads": 4, "head_dim": 32,
                                    "short_conv_kernel_size": 4}}
# on each of 2 TP ranks: the q, k and v windows of 3 steps x 4 x 32 / 2 channels, and 2 heads of a 32 x 32 state
SMALL_KDA_CONV = 3 * 3 * (4 * 32 // 2)
SMALL_KDA_RECURRENT = 2 * 32 * 32


def _arch(name: str):
    return architecture_from_config(json.loads((CONFIGS / name / "config.json").read_text()), name)


def _vllm_state(arch, tp: int, gpu: str, catalog) -> StateShape:
    model = serve(arch, Request(context=32768, tp=tp), catalog, "vllm")
    return state_shape(model, GpuTarget.from_catalog(catalog.gpus.get(gpu)), load_profiles().vllm.get("0.19.0", "vllm"))


def test_vllm_holds_the_kda_recurrent_state_in_fp32(catalog):
    """kda_state_dtype: (model dtype x 3 convolutions, torch.float32) whatever --mamba-ssm-cache-dtype says."""
    arch = architecture_from_config(SMALL_KDA, "small-kda")
    kda = arch.layers[0].attention
    assert (kda.conv_elements_on_rank(2), kda.state_elements_on_rank(2)) == (576, 576 + 2048)
    state = SMALL_KDA_CONV * 2 + SMALL_KDA_RECURRENT * 4  # bf16 windows, fp32 state: 1,152 + 8,192 B
    assert _vllm_state(arch, 2, "h100-sxm", catalog).state_bytes == state == 9_344
    budget = engine_budget(arch, Request(context=8192, tp=2), EngineSettings(name="vllm", version="0.19.0"),
                           GpuTarget.from_catalog(catalog.gpus.get("h100-sxm")), catalog)
    assert budget.layout.state_bytes == 9_344


def test_sglang_dtypes_give_the_same_kda_state(catalog):
    """SGLang KimiLinearCacheParams.mamba_cache_per_req: the three windows in CONV_DTYPE (bfloat16), the temporal
    state in the config's mamba_ssm_dtype or else float32 (the profile's state_dtypes)."""
    arch = architecture_from_config(SMALL_KDA, "small-kda")
    model = serve(arch, Request(context=8192, tp=2), catalog, "sglang")
    bits = model.state_bits(arch.layers[0], load_profiles().sglang.get("0.5.9", "sglang").state_dtypes.value)
    assert model.layer_state_bytes(arch.layers[0], *bits) == SMALL_KDA_CONV * 2 + SMALL_KDA_RECURRENT * 4


def test_kimi_k3_state_per_layer_at_tp8(catalog):
    # 96 heads of 128 over 8 ranks: windows 3 x 3 x 1,536 bf16 + 12 x 128 x 128 fp32 (was 420,864 B all in bf16)
    assert _vllm_state(_arch("kimi-k3"), 8, "b200", catalog).state_bytes == 3 * 3 * 1536 * 2 + 12 * 128 * 128 * 4 == 814_080


def test_qwen35_config_replays_the_v019_state_and_block(catalog):
    """Qwen3_5ForConditionalGenerationConfig sets mamba_ssm_cache_dtype from text_config mamba_ssm_dtype (float32):
    vllm-project/vllm #40691 (v0.19.0, Qwen3.5-27B) implies a 3,207,168 B state and 784-token blocks."""
    shape = _vllm_state(_arch("qwen3.5-27b"), 1, "h20", catalog)
    assert shape.state_bytes == (2 * 16 * 128 + 48 * 128) * 3 * 2 + 48 * 128 * 128 * 4 == 3_207_168
    assert shape.block_size() == 784


def test_qwen3_next_keeps_its_state_in_the_model_dtype(catalog):
    # no mamba_ssm_dtype in its config and no vLLM hook: conv and SSM in bf16, as before
    shape = _vllm_state(_arch("qwen3-next-80b-a3b"), 4, "h100-sxm", catalog)
    assert shape.state_bytes == ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) // 4 * 2


def test_nemotron_h_follows_its_mamba_ssm_cache_dtype(catalog):
    """NemotronHForCausalLMConfig: the config's mamba_ssm_cache_dtype (float32 for Nemotron 3) holds the SSM state."""
    conv = (64 * 64 + 2 * 8 * 128) * 3  # 8 groups of 128, kernel 4, whole at tp 1
    assert _vllm_state(_arch("nemotron-3-nano-30b-a3b"), 1, "h100-sxm", catalog).state_bytes == \
        conv * 2 + 64 * 64 * 128 * 4 == 2_134_016


def test_a_config_state_dtype_is_checked():
    config = json.loads((CONFIGS / "qwen3-next-80b-a3b" / "config.json").read_text())
    config["mamba_ssm_dtype"] = "float8"
    with pytest.raises(PlannerInputError, match="'mamba_ssm_dtype' must be one of float32, bfloat16, float16"):
        architecture_from_config(config, "bad")


# Kimi-K3's compressed-tensors config targets Linear and ignores self_attn, shared_experts, the dense MLP, lm_head and
# the vision tower: per MoE layer the latent projections (3,584 x 7,168 and 7,168 x 3,584) are MXFP4 beside the experts,
# and so are the 1 x 7,168 attention-residual projections (two per layer, one before the final norm)
LATENT = 3584 * 7168
LATENT_MXFP4 = LATENT // 2 + LATENT // 32  # e2m1 nibbles + one e8m0 scale per 32
RESIDUAL_MXFP4 = 7168 // 2 + 7168 // 32


def test_kimi_k3_quantizes_what_its_config_targets(catalog):
    """Its own precision, by `auto` or by name, is the checkpoint's bytes; another model keeps mxfp4's expert scope."""
    arch = _arch("kimi-k3")
    assert resolve_precision(catalog, _arch("qwen3-next-80b-a3b"), "mxfp4").scope == "experts"
    auto, by_name = resolve_precision(catalog, arch, "auto"), resolve_precision(catalog, arch, "mxfp4")
    experts_only = catalog.precisions.get("mxfp4")  # the catalog entry's scope, after gpt-oss
    assert (auto.name, auto.scope, by_name, experts_only.scope) == ("mxfp4", "linear", auto, "experts")
    moe = {t.name: t for t in arch.layers[1].tensors}
    down = moe["block_sparse_moe.routed_expert_down_proj.weight"]
    assert tensor_bytes(down.shape, 1, down, auto) == LATENT_MXFP4 == 13_647_872
    for kept in ("self_attn.q_proj.weight", "block_sparse_moe.shared_experts.up_proj.weight",
                 "block_sparse_moe.gate.weight"):
        t = moe[kept]
        assert tensor_bytes(t.shape, 1, t, auto) == t.numel * 2
    tensors = [t for layer in arch.layers for t in layer.tensors] + [*arch.embedding, *arch.head, *arch.multimodal]
    saved = 92 * 2 * (LATENT * 2 - LATENT_MXFP4) + (93 * 2 + 1) * (7168 * 2 - RESIDUAL_MXFP4)
    assert saved == 6_944_721_504
    assert weights_bytes(tensors, experts_only) - weights_bytes(tensors, auto) == saved
    assert weights_bytes(tensors, auto) == 1_553_893_354_080
