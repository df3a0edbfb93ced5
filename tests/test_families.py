"""The 2025-2026 families, counted tensor by tensor, against transformers' own count of the same config.

tests/data/transformers-counts.json holds what transformers builds on the meta device for each published
config (bench/transformers_counts.py, version recorded in the file): parameters plus the persistent
buffers the checkpoint also stores (router score-correction biases).
"""

import json

import pytest

from planner.errors import PlannerInputError
from planner.estimator.memory import Request, estimate_memory
from planner.model.architecture import architecture_from_config, load_config_file
from planner.model.families import FAMILIES
from planner.model.precision import weights_bytes

from conftest import CONFIGS, DATA

RECORDED = json.loads((DATA / "transformers-counts.json").read_text())


def _model_type(name):
    """The text model's model_type, the outer one when text_config leaves it out (as MiniMax-M3-VL's does)."""
    config = load_config_file(CONFIGS / name)
    return (config.get("text_config") or {}).get("model_type") or config["model_type"]


COUNTED = sorted(name for name in RECORDED["counts"] if _model_type(name) in FAMILIES)


def _arch(name):
    return architecture_from_config(load_config_file(CONFIGS / name), name)


def test_every_listed_builder_exists_and_each_model_type_is_listed_once():
    from planner.model.families.registry import FAMILY_BUILDERS, TOWER_BUILDERS, VISION_TOWERS

    for table, builders in ((FAMILIES, FAMILY_BUILDERS), (VISION_TOWERS, TOWER_BUILDERS)):
        listed = [model_type for model_type_list in builders.values() for model_type in model_type_list]
        assert len(listed) == len(set(listed)) == len(table)  # a second listing would silently win
        assert all(callable(table[model_type]) for model_type in table)
    assert "llama" in FAMILIES and "no_such_type" not in FAMILIES and FAMILIES.get("no_such_type") is None


def test_the_recorded_counts_cover_every_new_family():
    families = {_model_type(n) for n in COUNTED}
    assert {"qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "qwen3_vl_text", "qwen3_vl_moe_text", "deepseek_v3",
            "deepseek_v32", "glm4_moe", "glm_moe_dsa", "kimi_k2", "minimax_m2", "nemotron_h", "minimax_m3",
            "minimax_m3_vl", "deepseek_v4", "gemma3n_text", "kimi_linear", "ministral3", "mistral4",
            "step3p5", "seed_oss", "olmo2", "olmo3", "exaone4", "smollm3", "ernie4_5", "apertus", "arcee", "olmoe",
            "ernie4_5_moe", "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "cohere2", "starcoder2",
            "phimoe", "granitemoe", "granitemoeshared", "glm4v_text", "glm4v_moe_text", "hy_v3",
            "exaone_moe", "solar_open", "afmoe", "jais2", "sarvam_moe", "param2moe", "cohere2_moe",
            "granitemoehybrid", "falcon_h1"} <= families


@pytest.mark.parametrize("name", COUNTED)
def test_planner_counts_what_transformers_builds(name):
    recorded = RECORDED["counts"][name]
    expected = recorded["parameters"] + recorded["buffers"]
    loaded = _arch(name).loaded_params
    assert abs(loaded - expected) <= expected // 1000  # the acceptance bound: 0.1%
    assert loaded == expected  # and in fact every tensor agrees


def test_qwen3_5_reports_its_mtp_module_and_vision_tower_apart():
    arch = _arch("qwen3.5-35b-a3b")
    assert arch.multimodal_params == 446_571_248  # ViT + merger, loaded by vLLM unless --language-model-only
    mtp = arch.checkpoint_params - arch.loaded_params
    assert mtp > 0 and all(t.name.startswith("mtp.") for t in arch.unloaded)
    kinds = [layer.attention.kind for layer in arch.layers]
    assert kinds.count("linear") == 30 and kinds.count("full") == 10 and kinds[3] == "full"
    assert all(layer.is_moe for layer in arch.layers)


def test_qwen3_vl_counts_its_deepstack_mergers():
    arch = _arch("qwen3-vl-8b-instruct")
    merger_norms = [t for t in arch.multimodal if t.name.endswith(".norm.weight") and "merger" in t.name]
    assert len(merger_norms) == 1 + 3  # the final merger and one per deepstack layer (8, 16, 24)


def test_dsa_indexer_key_cache_joins_the_per_token_bytes(catalog):
    arch = _arch("deepseek-v3.2")
    assert {layer.attention.indexer_head_dim for layer in arch.layers} == {128}
    estimate = estimate_memory(arch, Request(context=4096, precision="fp8-block", kv_dtype="bf16"), catalog)
    # 61 layers x (MLA latent 512 + 64 in bf16, plus the indexer's fp8 key of 128 values and one fp32 scale)
    assert estimate.kv_bytes_per_token == 61 * ((512 + 64) * 2 + 128 + 4)


def test_minimax_m3_sparse_layers_cache_the_indexer_key_beside_k_and_v(catalog):
    arch = _arch("minimax-m3")
    indexed = [layer.attention.index_key_dim for layer in arch.layers]
    assert indexed[:3] == [0, 0, 0] and set(indexed[3:]) == {128}  # sparse_attention_freq: dense first 3 layers
    assert [layer.is_moe for layer in arch.layers[2:4]] == [False, True]  # moe_layer_freq
    assert all(any("indexer" in t.name for t in layer.tensors) == bool(dim) for layer, dim in zip(arch.layers, indexed))
    estimate = estimate_memory(arch, Request(context=4096, precision="bf16", kv_dtype="bf16"), catalog)
    # per layer kind, in bf16: full GQA 4 KV heads x (128 + 128); sparse adds the indexer's one 128-value key
    assert estimate.kv_bytes_per_token == 3 * 4 * 256 * 2 + 57 * (4 * 256 + 128) * 2
    tp8 = estimate_memory(arch, Request(context=4096, precision="bf16", kv_dtype="bf16", tp=8), catalog)
    # 4 KV heads over 8 ranks: one whole head per rank; the indexer key is whole on every rank
    assert {rank.kv_bytes_per_token for rank in tp8.per_gpu} == {3 * 256 * 2 + 57 * (256 + 128) * 2}


@pytest.mark.parametrize("kv_dtype, bits", [("bf16", 16), ("fp8", 8)])
def test_deepseek_v4_caches_a_window_and_one_compressed_entry_per_ratio_tokens(catalog, kv_dtype, bits):
    arch = _arch("deepseek-v4-flash")
    ratios = [layer.attention.compress_ratio for layer in arch.layers]
    assert (ratios.count(0), ratios.count(4), ratios.count(128)) == (2, 21, 20)  # compress_ratios, first 43 of its 44
    assert {(a.kind, a.kv_heads, a.k_head_dim, a.v_head_dim, a.window) for a in (l.attention for l in arch.layers)} == {
        ("sliding", 1, 512, 0, 128)}  # one key=value head (DeepseekV4HCACache: values = keys)
    context = 131_072
    estimate = estimate_memory(arch, Request(context=context, precision="bf16", kv_dtype=kv_dtype, tp=4), catalog)
    byte = bits // 8
    # per layer kind: CSA pools 512 KV + 128 indexer values per 4 tokens, HCA 512 per 128, sliding layers nothing
    assert estimate.kv_bytes_per_token == 21 * (512 + 128) * byte // 4 + 20 * 512 * byte // 128
    window = 43 * 128 * 512 * byte
    compressed = 21 * (context // 4) * (512 + 128) * byte + 20 * (context // 128) * 512 * byte
    assert {rank.kv_cache_bytes for rank in estimate.per_gpu} == {window + compressed}  # whole on every rank


def test_deepseek_v4_pro_and_the_engines_that_cannot_page_its_cache(catalog):
    from planner.estimator.engines.base import engine_refusal
    pro = _arch("deepseek-v4-pro")
    assert [layer.attention.compress_ratio for layer in pro.layers][:3] == [128, 128, 4] and pro.num_layers == 61
    assert all(layer.is_moe for layer in pro.layers)
    hashed = [any(t.name == "mlp.gate.tid2eid" for t in layer.tensors) for layer in pro.layers]
    assert hashed[:4] == [True, True, True, False] and sum(hashed) == 3  # num_hash_layers
    for engine in ("simple", "vllm", "sglang", "llamacpp"):  # vLLM's packed pool, SGLang's and llama.cpp's DSV4 caches
        assert engine_refusal(pro, engine) is None


def test_gemma_3n_counts_each_encoder_and_shares_the_last_layers_caches(catalog):
    arch = _arch("gemma-3n-e4b-it")
    towers = {}
    for t in arch.multimodal:
        towers[t.name.split(".")[0]] = towers.get(t.name.split(".")[0], 0) + t.numel
    # transformers 5.24 + timm 1.0.31 on the meta device: MobileNetV5 294,126,912; conformer 681,348,640
    assert (towers["vision_tower"], towers["audio_tower"]) == (294_126_912, 681_348_640)
    assert arch.language_params == 6_835_235_568
    # 35 blocks, the last 15 reuse the caches of layers 18 (sliding) and 19 (full): 20 cache layers
    kinds = [(layer.attention.kind, layer.attention.window) for layer in arch.layers]
    assert len(kinds) == 20 and kinds.count(("full", None)) == 4 and kinds.count(("sliding", 512)) == 16
    estimate = estimate_memory(arch, Request(context=32768, precision="bf16", kv_dtype="bf16"), catalog)
    assert estimate.kv_bytes_per_token == 4 * 2 * 2 * 256 * 2  # full layers: 2 KV heads x (K + V) of 256, bf16
    assert estimate.kv_sliding_bytes_per_token == 16 * 2 * 2 * 256 * 2


@pytest.mark.parametrize("kernels", [[3, 3], [[3]], [["a", 3], [3, 3]], 5])
def test_a_malformed_audio_subsampling_list_is_named(kernels):
    from planner.errors import PlannerInputError
    config = load_config_file(CONFIGS / "gemma-3n-e4b-it")
    config = {**config, "audio_config": {**config["audio_config"], "sscp_conv_kernel_size": kernels}}
    with pytest.raises(PlannerInputError, match="sscp_conv_kernel_size"):
        architecture_from_config(config, "gemma3n")


def test_an_unknown_timm_vision_architecture_is_refused():
    from planner.model.families.core import UnsupportedArchitecture
    config = load_config_file(CONFIGS / "gemma-3n-e4b-it")
    config = {**config, "vision_config": {**config["vision_config"], "architecture": "mobilenetv9_enc"}}
    with pytest.raises(UnsupportedArchitecture, match="mobilenetv9_enc"):
        architecture_from_config(config, "gemma3n")


@pytest.mark.parametrize("context", [1000, 2048, 131_072])
def test_minimax_m3_sparse_layers_read_their_top_k_blocks_and_every_index_key(catalog, context):
    """A decode step on one of 8 ranks (one of the 4 KV heads a rank, bf16): a dense layer reads every token's K and V;
    a sparse layer the K and V of its 16 top-k blocks of 128 tokens (2,048) and every token's 128-value index key, and
    past 2,048 tokens its index head (4 heads over 8 ranks: one a rank) scores every key (SPEED_PROTOCOL, the MiniMax
    Sparse Attention amendment)."""
    from planner.estimator.performance import Step, replica_timer

    arch = _arch("minimax-m3")
    assert {layer.attention.index_topk for layer in arch.layers[3:]} == {16 * 128}
    timer = replica_timer(arch, "bf16", "bf16", catalog.gpus.get("b200"), 8, 1, catalog, "vllm")
    _, forward, _ = timer.step(Step(1, context, 0, 0, 0))
    kv = 256 * 2  # one KV head's K and V of 128 values each, bf16
    assert forward.kv_bytes == 3 * kv * context + 57 * (kv * min(context, 2048) + 128 * 2 * context)
    assert timer.indexers == (((0, 57 * 2 * 1 * 128, 57 * 2 * 1 * 128, 1, 2048, False),),)  # keys in the KV dtype


def test_minimax_m3_vl_tower_is_the_models_own_whatever_its_vision_config_says():
    arch = _arch("minimax-m3-vl-nvfp4")
    assert arch.multimodal_params == 865_567_232 and arch.language_params == _arch("minimax-m3").language_params
    assert {t.name for t in arch.multimodal if t.role == "projector"} >= {"projector.merge_linear_1.weight"}


def test_glm_5_2_shared_indexer_layers_keep_no_indexer():
    arch = _arch("glm-5.2")
    indexed = [layer.attention.indexer_head_dim > 0 for layer in arch.layers]
    assert indexed[:4] == [True, True, True, False] and sum(indexed) == 21
    assert all(any("indexer" in t.name for t in layer.tensors) == has
               for layer, has in zip(arch.layers, indexed))


def test_nemotron_h_layers_open_at_each_mamba_or_attention_block():
    arch = _arch("nemotron-3-nano-30b-a3b")
    kinds = [layer.attention.kind for layer in arch.layers]
    # pattern MEMEM*EMEMEM*E...: 23 Mamba-2 and 6 attention blocks; the 23 MoE blocks join them
    assert kinds.count("mamba") == 23 and kinds.count("full") == 6
    assert sum(layer.is_moe for layer in arch.layers) == 23
    mamba = next(layer.attention for layer in arch.layers if layer.attention.kind == "mamba")
    # vLLM MambaStateShapeCalculator: conv (64*64 + 2*8*128) x (4-1) + SSM 64 x 64 x 128
    assert mamba.state_elements == (64 * 64 + 2 * 8 * 128) * 3 + 64 * 64 * 128


def test_step_sliding_layers_take_their_own_query_heads():
    arch = _arch("step-3.7-flash-assembled")
    for layer in arch.layers:
        rows = {t.name: t.shape[0] for t in layer.tensors}
        heads = 96 if layer.attention.kind == "sliding" else 64  # attention_other_setting, num_attention_heads
        assert (rows["self_attn.q_proj.weight"], rows["self_attn.g_proj.weight"]) == (heads * 128, heads)
        assert (layer.attention.kv_heads, layer.attention.window) == (8, 512 if heads == 96 else None)
    assert [layer.is_moe for layer in arch.layers[:4]] == [False, False, False, True]


def test_step_text_config_counts_the_language_model_and_drops_the_mtp_padding():
    text = load_config_file(CONFIGS / "step-3.7-flash-assembled")["text_config"]
    flat = architecture_from_config(dict(text), "step-3.5-style")
    vlm = _arch("step-3.7-flash-assembled")
    assert flat.loaded_params == vlm.loaded_params - vlm.multimodal_params > 0
    # hub configs list the MTP layers' types after the decoder's; transformers drops them, and so does planner
    padded = dict(text, layer_types=text["layer_types"] + ["full_attention", "sliding_attention", "sliding_attention"])
    assert architecture_from_config(padded, "padded").loaded_params == flat.loaded_params
    with pytest.raises(PlannerInputError, match="layer_types"):
        architecture_from_config(dict(text, layer_types=text["layer_types"][:40]), "short")


def test_glm_4_6_mtp_layer_is_reported_apart():
    arch = _arch("glm-4.6")
    assert arch.checkpoint_params == 358_337_791_296  # loaded 352,797,829,024 + one DeepSeek-format MTP layer
    assert not arch.layers[2].is_moe and arch.layers[3].is_moe


def test_modelopt_ignore_list_keeps_modules_16_bit(catalog):
    arch = _arch("qwen3.5-397b-a17b-nvfp4")
    head = {t.name: t.kept_unquantized for t in arch.head}
    assert head["lm_head.weight"]
    layer0 = {t.name: t.kept_unquantized for t in arch.layers[0].tensors}
    assert layer0["linear_attn.in_proj_qkv.weight"] and not layer0["mlp.experts.gate_up_proj.weight"]
    nvfp4 = catalog.precisions.get("nvfp4")
    plain = architecture_from_config({**load_config_file(CONFIGS / "qwen3.5-397b-a17b"), "quantization_config": None})
    tensors = [t for layer in arch.layers for t in layer.tensors]
    plain_tensors = [t for layer in plain.layers for t in layer.tensors]
    assert weights_bytes(tensors, nvfp4) > weights_bytes(plain_tensors, nvfp4)
    assert arch.loaded_params == plain.loaded_params


def test_a_malformed_exclusion_list_is_named():
    from planner.errors import PlannerInputError
    config = dict(load_config_file(CONFIGS / "glm-5-fp8"))
    config["quantization_config"] = dict(config["quantization_config"], modules_to_not_convert="lm_head")
    with pytest.raises(PlannerInputError, match="modules_to_not_convert"):
        architecture_from_config(config, "glm")


# -- the optional exact fallback: transformers on the meta device (CI does not install it) ---------------

@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b", "deepseek-v3.2", "glm-4.6", "minimax-m2.5", "gemma-4-26b-a4b",
                                  "nemotron-3-nano-30b-a3b", "qwen3-vl-8b-instruct", "glm-5.2", "minimax-m3-vl-nvfp4",
                                  "deepseek-v4-flash", "gemma-3n-e4b-it", "kimi-linear-48b-a3b",
                                  "ministral-3-8b-defaults", "mistral-small-4-defaults", "step-3.7-flash-assembled"])
def test_the_transformers_fallback_agrees_with_the_family_count(name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from planner.model.architecture import size_only_architecture_from_config
    from planner.model.transformers_fallback import architecture_from_transformers

    config = load_config_file(CONFIGS / name)
    # the shape only numbers the blocks here: Nemotron-H's pattern is not a layer_types list the size-only route reads,
    # and it refuses an MLA cache it cannot tell the engines' layout of
    text = config.get("text_config", config)
    blocks = {"layer_types": ["full_attention"] * text["num_hidden_layers"]} if "hybrid_override_pattern" in text else {}
    mla = {"kv_lora_rank": None} if text.get("kv_lora_rank") is not None else {}
    shape_config = dict(config, text_config=dict(text, **blocks, **mla)) if "text_config" in config else dict(
        config, **blocks, **mla)
    shape = size_only_architecture_from_config(shape_config, name, 1)
    fallback = architecture_from_transformers(config, shape)
    assert fallback is not None and fallback.loaded_params == _arch(name).loaded_params


# -- the current catalog ------------------------------------------------------------------------------------

@pytest.mark.parametrize("hf_id, entry, precision", [
    ("Qwen/Qwen3.5-397B-A17B-FP8", "qwen3.5-397b-a17b", "fp8-block"),
    ("nvidia/Qwen3.5-397B-A17B-NVFP4", "qwen3.5-397b-a17b", "nvfp4"),
    ("amd/Qwen3.5-397B-A17B-MXFP4", "qwen3.5-397b-a17b", "mxfp4-w4a4"),  # AMD Quark: weights and activations
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "qwen3-coder-480b-a35b", "fp8-block"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "nemotron-3-nano-30b-a3b", "nvfp4"),
    ("Qwen/Qwen3-VL-8B", "qwen3-vl-8b", None),  # -Instruct left off
    ("zai-org/GLM-5", "glm-5", None),
    ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3", None),
    ("Qwen/Qwen3-Coder-Next-FP8", "qwen3-coder-next", "fp8-block"),
    ("Qwen/Qwen3-Coder-Next-Instruct", "qwen3-coder-next", None),  # an -Instruct the repo name does not carry
    ("moonshotai/Kimi-K3", "kimi-k3", None),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral-small-3.2-24b", None),
    ("zai-org/GLM-4.7-Flash", "glm-4.7-flash", None),
    ("moonshotai/Kimi-Linear-48B-A3B-Instruct", "kimi-linear-48b-a3b", None),
    ("mistralai/Ministral-3-14B-Reasoning-2512", "ministral-3-14b", None),
    ("mistralai/Ministral-3-8B-Instruct-2512", "ministral-3-8b", None),  # the FP8 Instruct repo: same shapes
    ("mistralai/Ministral-3-3B-Instruct-2512", "ministral-3-3b", None),
    ("Qwen/Qwen3.8-27B", "qwen3.5-27b", None),  # the same shapes and total as Qwen3.5-27B
    ("Qwen/Qwen3.8-27B-FP8", "qwen3.5-27b", "fp8-block"),
    ("deepseek-ai/DeepSeek-Math-V2", "deepseek-v3.2", None),  # built on DeepSeek-V3.2-Exp-Base
])
def test_hf_ids_resolve_with_or_without_suffixes(catalog, hf_id, entry, precision):
    record, suffix_precision = catalog.model_and_precision(hf_id)
    assert (record.name, suffix_precision) == (entry, precision)


def test_a_precision_suffix_sets_the_precision_planner_sizes(catalog):
    from planner.model.sources import resolve_model
    arch = resolve_model(catalog, "nvidia/Qwen3.5-397B-A17B-NVFP4")
    estimate = estimate_memory(arch, Request(context=8192, tp=8), catalog)
    assert arch.name == "qwen3.5-397b-a17b" and estimate.precision == "nvfp4"
    bf16 = estimate_memory(resolve_model(catalog, "Qwen/Qwen3.5-397B-A17B"), Request(context=8192, tp=8), catalog)
    assert bf16.precision == "bf16" and estimate.weights_bytes < bf16.weights_bytes // 3


def test_an_unknown_suffixed_id_is_still_refused(catalog):
    from planner.errors import PlannerInputError
    with pytest.raises(PlannerInputError, match="unknown model"):
        catalog.model_and_precision("someone/Not-A-Model-FP8")


def test_catalog_lists_the_current_families(catalog):
    families = {m.family for m in catalog.models}
    assert {"qwen3_5", "qwen3_5_moe", "qwen3_next", "qwen3_vl", "qwen3_vl_moe", "deepseek_v32", "glm4_moe", "glm_moe_dsa",
            "kimi_k2", "kimi_k25", "minimax_m2", "nemotron_h", "llama4", "gemma4", "nemotron-nas", "deepseek_v4",
            "minimax_m3", "gemma3n", "kimi_k3"} <= families


def test_nemotron_nas_counts_each_searched_block():
    arch = _arch("llama-3.3-nemotron-super-49b")
    assert arch.checkpoint_params == 49_867_145_216  # the published total; transformers has no class for it
    assert arch.num_layers == 49  # blocks with attention; the 31 attention-less blocks join the layer before
    assert {layer.attention.kv_heads for layer in arch.layers} == {8}


def test_gemma_4_full_layers_use_global_heads_and_share_keys_as_values():
    arch = _arch("gemma-4-26b-a4b")
    full = [layer for layer in arch.layers if layer.attention.kind == "full"]
    assert len(full) == 5 and {(a.attention.kv_heads, a.attention.k_head_dim) for a in full} == {(2, 512)}
    assert not any("v_proj" in t.name for t in full[0].tensors)
    assert {layer.attention.window for layer in arch.layers if layer.attention.kind == "sliding"} == {1024}


def test_mimo_mtp_layers_and_sliding_window_hybrid():
    mimo = _arch("mimo-7b-base")
    assert mimo.unloaded and all(t.name.startswith("mtp_layers.0.") for t in mimo.unloaded)
    flash = _arch("mimo-v2-flash")
    sliding = [layer.attention for layer in flash.layers if layer.attention.kind == "sliding"]
    assert len(sliding) == 39 and {(a.kv_heads, a.k_head_dim, a.v_head_dim, a.window) for a in sliding} == {(8, 192, 128, 129)}


def test_exclusions_by_name_scale_and_wildcards_are_bounded():
    from planner.errors import PlannerInputError
    config = dict(load_config_file(CONFIGS / "glm-5-fp8"))
    by_name = [f"model.layers.{i}.mlp.experts.{j}.gate_proj" for i in range(3, 78) for j in range(256)]
    config["quantization_config"] = dict(config["quantization_config"], modules_to_not_convert=by_name)
    assert architecture_from_config(config, "glm").loaded_params == _arch("glm-5").loaded_params
    config["quantization_config"] = dict(config["quantization_config"], modules_to_not_convert=["*x"] * 5000)
    with pytest.raises(PlannerInputError, match="wildcard"):
        architecture_from_config(config, "glm")


def test_kimi_k2_5_int4_checkpoint_keeps_its_ignored_modules_in_16_bit(catalog):
    from planner.model.precision import resolve_precision
    arch = _arch("kimi-k2.5")
    precision = resolve_precision(catalog, arch, "auto")
    assert precision.name == "int4-g32" and precision.scales.group_size == 32
    # compressed-tensors "re:" patterns: attention, shared experts and the dense MLP stay 16-bit; experts are int4
    dense, moe = arch.layers[0], arch.layers[1]
    assert all(t.kept_unquantized for t in dense.tensors if t.name.startswith(("self_attn.", "mlp.")) and len(t.shape) == 2)
    experts = [t for t in moe.tensors if t.role == "expert"]
    assert experts and not any(t.kept_unquantized for t in experts)


def test_a_backtracking_exclusion_regex_is_refused():
    from planner.errors import PlannerInputError
    config = dict(load_config_file(CONFIGS / "kimi-k2.5"))
    text = dict(config["text_config"])
    text["quantization_config"] = dict(text["quantization_config"], ignore=["re:(a+)+$"])
    with pytest.raises(PlannerInputError, match="too complex"):
        architecture_from_config({**config, "text_config": text}, "kimi")


def test_nemotron_3_super_mtp_blocks_are_reported_apart():
    arch = _arch("nemotron-3-super-120b-a12b-nvfp4")
    assert arch.checkpoint_params > arch.loaded_params
    names = {t.name.split(".")[2] for t in arch.unloaded}
    assert names == {"0", "1"}  # mtp_hybrid_override_pattern "*E": an attention block, then a MoE block
    assert any(t.name == "mtp.layers.0.eh_proj.weight" for t in arch.unloaded)
    assert any(t.name == "mtp.layers.1.final_layernorm.weight" for t in arch.unloaded)


def test_params_are_what_the_engine_loads_and_the_checkpoint_total_is_reported_apart(catalog):
    arch = _arch("qwen3.5-397b-a17b")
    estimate = estimate_memory(arch, Request(context=4096, precision="bf16"), catalog)  # one rank: no replicas
    assert estimate.params == arch.loaded_params == estimate.language_params + estimate.multimodal_params
    assert estimate.checkpoint_params == arch.checkpoint_params > estimate.params  # + the MTP module
    loaded_tensors = [t for layer in arch.layers for t in layer.tensors] + list(arch.embedding + arch.head + arch.multimodal)
    assert estimate.weights_bytes == weights_bytes(loaded_tensors, catalog.precisions.get("bf16")) == 2 * estimate.params


@pytest.mark.parametrize("change", [
    {"vision_config": {"depth": 10**9}},
    {"text_config": {"layer_types": ["linear_attention"] * 5000}},
])
def test_sizes_past_any_real_model_are_refused_fast(change):
    from planner.errors import PlannerInputError
    config = load_config_file(CONFIGS / "qwen3.5-35b-a3b")
    for key, value in change.items():
        config = {**config, key: {**config[key], **value}}
    with pytest.raises(PlannerInputError, match="beyond any real model"):
        architecture_from_config(config, "qwen3.5")


def test_a_nemotron_pattern_longer_than_any_model_is_refused():
    from planner.errors import PlannerInputError
    config = dict(load_config_file(CONFIGS / "nemotron-3-nano-30b-a3b"), hybrid_override_pattern="M" * 10**6)
    with pytest.raises(PlannerInputError, match="hybrid_override_pattern"):
        architecture_from_config(config, "nemotron")


def test_granite_4_hybrid_layers_are_mamba_or_attention_each_with_the_shared_mlp_and_experts():
    arch = _arch("granitemoehybrid-defaults")
    kinds = [layer.attention.kind for layer in arch.layers]
    assert kinds == (["mamba"] * 3 + ["full"]) * 8 and all(layer.is_moe for layer in arch.layers)
    mamba = arch.layers[0].attention
    # mamba_d_head 64 (128 heads over 2 x 4,096): conv (8,192 + 2 x 256) x (4 - 1) + SSM 128 x 64 x 256
    assert mamba.state_elements == (8192 + 2 * 256) * 3 + 128 * 64 * 256 and mamba.config_ssm_dtype is None
    shapes = {t.name: (t.shape, t.count) for t in arch.layers[3].tensors}
    assert shapes["mlp.shared_expert.gate_proj.weight"] == ((1024, 4096), 1)
    assert shapes["mlp.experts.down_proj.weight"] == ((4096, 11008), 8) and "self_attn.q_proj.weight" in shapes
    assert (arch.moe.num_experts, arch.moe.experts_per_token, arch.moe.shared_intermediate_size) == (8, 2, 1024)


def test_granite_4_attention_only_holds_no_recurrent_state():
    """Granite 4.0 Micro's rule: no experts, every layer attention; mamba_d_head "auto" is never needed."""
    arch = _arch("granitemoehybrid-dense-defaults")
    assert {layer.attention.kind for layer in arch.layers} == {"full"} and arch.moe is None
    assert not any(layer.is_moe or layer.attention.state_elements for layer in arch.layers)
    assert arch.intermediate_size == 2048


@pytest.mark.parametrize("change, message", [
    ({"layer_types": ["mamba"] * 31}, "layer_types"),
    ({"layer_types": ["mamba"] * 31 + ["moe"]}, "layer_types"),
    ({"mamba_d_head": 48}, "Mamba width 8192"),
])
def test_granite_4_hybrid_refuses_layer_types_and_mamba_heads_its_class_refuses(change, message):
    config = dict(load_config_file(CONFIGS / "granitemoehybrid-defaults"), **change)
    with pytest.raises(PlannerInputError, match=message):
        architecture_from_config(config, "granite")


def test_granite_4_hybrid_without_layer_types_is_mamba_throughout():
    config = load_config_file(CONFIGS / "granitemoehybrid-defaults")
    config = {k: v for k, v in config.items() if k != "layer_types"}
    assert {layer.attention.kind for layer in architecture_from_config(config, "granite").layers} == {"mamba"}


def test_falcon_h1_decoder_layers_keep_a_mamba_state_and_a_kv_cache_each():
    """Two cache layers a decoder layer, as vLLM's FalconH1ParallelHybrid registers a MambaMixer2 and an Attention."""
    arch = _arch("falcon-h1-defaults")
    assert [layer.attention.kind for layer in arch.layers] == ["mamba", "full"] * 32
    # mamba_d_ssm 1,024 over 128 heads of 8: conv (1,024 + 2 x 256) x (4 - 1) + SSM 128 x 8 x 256
    assert arch.layers[0].attention.state_elements == (1024 + 2 * 256) * 3 + 128 * 8 * 256
    names = {t.name for t in arch.layers[0].tensors}
    assert "mamba.norm.weight" not in names and "mamba.out_proj.bias" not in names  # mamba_rms_norm, projectors_bias
    variant = _arch("falcon-h1-variant-defaults")  # mamba_d_ssm null: mamba_expand x hidden_size = 8,192 = 128 x 64
    assert variant.layers[0].attention.state_elements == (8192 + 2 * 256) * 3 + 128 * 64 * 256
    assert {"mamba.norm.weight", "mamba.out_proj.bias"} <= {t.name for t in variant.layers[0].tensors}
    assert variant.layers[1].attention.kv_heads == 8 and variant.layers[1].attention.k_head_dim == 128


# -- families transformers does not build: the model's own code (tests/data/model-code-counts.json) ------------------

MODEL_CODE = json.loads((DATA / "model-code-counts.json").read_text())["counts"]


@pytest.mark.parametrize("name", sorted(MODEL_CODE))
def test_planner_counts_what_the_models_own_code_builds(name):
    recorded = MODEL_CODE[name]
    arch = _arch(name)
    assert arch.loaded_params == recorded["parameters"] + recorded["buffers"]
    assert arch.multimodal_params == recorded["parameters"] - recorded["language_model"]


def test_kimi_k3_interleaves_kda_and_mla_and_keeps_a_state_per_sequence(catalog):
    arch = _arch("kimi-k3")
    kinds = [layer.attention.kind for layer in arch.layers]
    # linear_attn_config lists layers 1-based: KDA on 1-3, 5-7, ..., MLA on every 4th and the last (93)
    assert kinds.count("linear") == 69 and kinds.count("mla") == 24 and kinds[3] == kinds[92] == "mla"
    assert not arch.layers[0].is_moe and all(layer.is_moe for layer in arch.layers[1:])
    experts = [t for t in arch.layers[1].tensors if t.role == "expert"]
    assert {t.shape for t in experts} == {(3072, 3584), (3584, 3072)}  # routed experts run in the 3584-wide latent
    estimate = estimate_memory(arch, Request(context=8192, precision="bf16", kv_dtype="bf16"), catalog)
    assert estimate.kv_bytes_per_token == 24 * (512 + 64) * 2  # MLA latent + rope key, bf16
    # KDA per layer (vLLM kda_state_shape): q, k, v conv windows of 3 steps x 96 x 128, state 96 x 128 x 128
    assert estimate.kv_state_bytes_per_sequence == 69 * (3 * 3 * 96 * 128 + 96 * 128 * 128) * 2


def test_kimi_k3_keeps_its_ignored_modules_16_bit():
    arch = _arch("kimi-k3")
    moe = {t.name: t.kept_unquantized for t in arch.layers[1].tensors}
    assert not moe["block_sparse_moe.experts.w1.weight"] and moe["block_sparse_moe.shared_experts.up_proj.weight"]
    assert moe["self_attn.q_proj.weight"] and moe["self_attn.q_conv1d.weight"]
    assert {t.name: t.kept_unquantized for t in arch.head}["lm_head.weight"]


def test_qwen3_coder_next_is_counted_as_the_published_total(catalog):
    from planner.model.sources import resolve_model
    arch = resolve_model(catalog, "Qwen/Qwen3-Coder-Next")
    assert arch.checkpoint_params == 79_674_391_296  # the hub's safetensors total, quoted in the entry's params_source
    assert [layer.attention.kind for layer in arch.layers].count("full") == 12


def test_kimi_k3_ships_mxfp4_experts(catalog):
    from planner.model.precision import resolve_precision
    # compressed-tensors float 4-bit with one scale per 32 values: MXFP4, not NVFP4 (one scale per 16)
    assert resolve_precision(catalog, _arch("kimi-k3"), "auto").name == "mxfp4"


def test_glm_4_7_flash_is_counted_as_its_safetensors_total(catalog):
    from planner.model.sources import resolve_model
    arch = resolve_model(catalog, "zai-org/GLM-4.7-Flash")
    assert arch.checkpoint_params == 31_221_488_576  # the safetensors listing's total, quoted in the entry's params_source
    assert arch.loaded_params == _arch("glm-4.7-flash").loaded_params  # the sizes-only copy transformers counted
    assert [layer.is_moe for layer in arch.layers[:2]] == [False, True] and arch.num_layers == 47


def test_kimi_linear_entry_is_the_sizes_transformers_counted(catalog):
    from planner.model.sources import resolve_model
    arch = resolve_model(catalog, "moonshotai/Kimi-Linear-48B-A3B-Instruct")
    assert arch.checkpoint_params == arch.loaded_params == _arch("kimi-linear-48b-a3b").loaded_params == 49_122_681_728
    kinds = [layer.attention.kind for layer in arch.layers]
    assert kinds.count("mla") == 7 and kinds.count("linear") == 20 and kinds[3] == kinds[26] == "mla"


@pytest.mark.parametrize("name, total, tied", [("ministral-3-14b", 13_945_031_680, False), ("ministral-3-8b", 8_918_026_240, False),
                                                ("ministral-3-3b", 4_251_743_232 - 131_072 * 3_072, True)])
def test_ministral_3_counts_are_the_safetensors_totals(catalog, name, total, tied):
    model = catalog.models.get(name)
    arch = architecture_from_config(model.config, name)
    # the index metadata's total_parameters; the 3B's counts its tied embedding twice
    assert arch.checkpoint_params == total and arch.tied_embeddings == tied
    assert arch.multimodal_params < arch.language_params // 7  # the 24-layer Pixtral tower and its projector


def test_ministral_3_8b_differs_from_the_transformers_defaults_only_by_its_untied_head(catalog):
    arch = architecture_from_config(catalog.models.get("ministral-3-8b").config, "ministral-3-8b")
    defaults = _arch("ministral-3-8b-defaults")  # Ministral3Config() sizes with the outer tie left at true
    assert arch.loaded_params - defaults.loaded_params == 131_072 * 4_096


@pytest.mark.parametrize("name, kinds", [
    # Olmo3Config / Exaone4Config without layer_types: a 4,096-token window, every 4th layer full attention
    ("olmo-3-defaults", [("sliding", 4096)] * 3 + [("full", None)]),
    ("exaone-4-defaults", [("sliding", 4096)] * 3 + [("full", None)]),
    ("cohere2-defaults", [("sliding", 4096)] * 3 + [("full", None)]),  # Cohere2Config's sliding_window_pattern 4
    ("exaone-moe-defaults", [("sliding", 4096)] * 3 + [("full", None)]),
    ("afmoe-defaults", [("sliding", 1024)] * 3 + [("full", None)]),  # AfmoeConfig's global_attn_every_n_layers 4
    # SmolLM3 slides only with use_sliding_window (its default off); Seed-OSS has no window in its code at all
    ("smollm3-defaults", [("full", None)] * 4),
])
def test_layer_kinds_follow_each_config_class_rule(name, kinds):
    # the classes' default max_position_embeddings (2,048) is below their window, which makes every layer full: the
    # released checkpoints hold 32K-64K tokens
    config = load_config_file(CONFIGS / name)
    layers = architecture_from_config({**config, "max_position_embeddings": 65536}, name).layers
    assert [(layer.attention.kind, layer.attention.window) for layer in layers[:4]] == kinds
    assert len({(layer.attention.kind, layer.attention.window) for layer in layers}) == len(set(kinds))


def test_a_window_in_a_config_whose_code_has_none_is_not_read():
    config = load_config_file(CONFIGS / "seed-oss-defaults")
    arch = architecture_from_config({**config, "sliding_window": 4096}, "seed-oss")
    assert {layer.attention.kind for layer in arch.layers} == {"full"}


def test_ernie_4_5_moe_layers_and_its_float32_router():
    arch = _arch("ernie-4.5-moe-defaults")
    assert [layer.is_moe for layer in arch.layers] == [False] + [True] * 27  # from moe_layer_start_index 1 to the last
    routers = [t for t in arch.layers[1].tensors if t.role == "router"]
    assert {t.stored_bits for t in routers} == {32} and len(routers) == 2  # gate.weight, moe_statics bias
    assert arch.moe.shared_intermediate_size == 2 * 1536  # moe_num_shared_experts x moe_intermediate_size


def test_hy_v3_moe_layers_follow_mlp_layer_types_and_a_malformed_list_is_named():
    arch = _arch("hy-v3-defaults")  # its file leaves mlp_layer_types out: the class's dense first layer
    assert [layer.is_moe for layer in arch.layers[:3]] == [False, True, True] and arch.moe.routing == "sigmoid"
    config = load_config_file(CONFIGS / "hy-v3-defaults")
    for bad in (["dense"], ["dense", {"sparse": 1}] + ["sparse"] * (config["num_hidden_layers"] - 2)):
        with pytest.raises(PlannerInputError, match="mlp_layer_types"):
            architecture_from_config({**config, "mlp_layer_types": bad}, "hy")


@pytest.mark.parametrize("name, dense", [("exaone-moe-defaults", 1), ("solar-open-defaults", 0), ("afmoe-defaults", 1)])
def test_sigmoid_routed_moe_dense_layers_and_float32_router(name, dense):
    """first_k_dense_replace where mlp_layer_types is not given: EXAONE MoE's one, Solar Open's none."""
    arch = _arch(name)
    assert [layer.is_moe for layer in arch.layers[:2]] == [False] * dense + [True] * (2 - dense)
    routers = [t for t in arch.layers[1].tensors if t.role == "router"]
    assert {t.stored_bits for t in routers} == {32} and arch.moe.routing == "sigmoid"


def test_cohere_2_moe_dense_prefix_keeps_its_own_width_and_window_pattern():
    """Its file sets first_k_dense_replace 2, prefix_dense_intermediate_size 12,288 and
    prefix_dense_sliding_window_pattern 2, and leaves layer_types and mlp_layer_types to the class's rule."""
    arch = _arch("cohere2-moe-defaults")
    assert [layer.is_moe for layer in arch.layers[:3]] == [False, False, True] and arch.moe.routing == "sigmoid"
    assert [layer.attention.kind for layer in arch.layers[:6]] == ["sliding", "full", "sliding", "sliding", "sliding",
                                                                   "full"]
    assert {t.shape for t in arch.layers[0].tensors if t.name == "mlp.gate_proj.weight"} == {(12288, 8192)}
