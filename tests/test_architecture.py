"""Exact parameter counts, tensor by tensor, against published totals."""

import json

import pytest

from planner.model.architecture import (
    UnsupportedArchitecture,
    architecture_from_config,
    load_config_file,
    size_only_architecture_from_config,
)
from planner.errors import PlannerInputError

from conftest import CONFIGS


def _count(path):
    return architecture_from_config(load_config_file(path), path.name)


def test_llama_3_1_8b_from_its_config_json_is_exact():
    arch = _count(CONFIGS / "llama-3.1-8b-instruct")
    assert arch.checkpoint_params == 8_030_261_248
    assert arch.num_layers == 32 and arch.attention_kinds == {"full"}
    assert not arch.tied_embeddings


def test_qwen2_counts_the_qkv_biases():
    arch = _count(CONFIGS / "qwen2.5-7b-instruct-awq")
    assert arch.checkpoint_params == 7_615_616_512  # Qwen2.5-7B, same shape as the AWQ checkpoint's source
    layer = arch.layers[0]
    biases = {t.name for t in layer.tensors if t.role == "bias"}
    assert biases == {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}


def test_multimodal_gemma3_reads_text_config_and_counts_the_vision_tower_apart():
    arch = _count(CONFIGS / "gemma-3-27b-it")
    assert arch.checkpoint_params == 27_432_406_640
    assert arch.multimodal_params == 416_866_032 + 6_194_304  # SigLIP tower + projector
    assert arch.language_params == 27_009_346_304
    # 5 sliding (1024) layers to 1 global: 62 layers -> 10 global
    kinds = [layer.attention.kind for layer in arch.layers]
    assert kinds.count("full") == 10 and kinds.count("sliding") == 52
    assert kinds[5] == "full" and kinds[0] == "sliding"


def test_deepseek_v2_lite_mla_dense_first_layer_and_shared_experts():
    arch = _count(CONFIGS / "deepseek-v2-lite-chat")
    assert arch.checkpoint_params == 15_706_484_224
    assert arch.attention_kinds == {"mla"}
    assert arch.layers[0].attention.latent_dim == 512 + 64
    assert not arch.layers[0].is_moe and all(layer.is_moe for layer in arch.layers[1:])


PUBLISHED = {
    # model_type and shape -> published total (HF safetensors metadata)
    "mistral-7b-v0.1": (dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                             tie_word_embeddings=False, sliding_window=4096), 7_241_732_096),
    "llama-3.1-70b": (dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                           num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                           tie_word_embeddings=False), 70_553_706_496),
    "mixtral-8x7b": (dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                          num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, num_local_experts=8,
                          num_experts_per_tok=2, tie_word_embeddings=False), 46_702_792_704),
    "phi-2": (dict(model_type="phi", hidden_size=2560, intermediate_size=10240, num_hidden_layers=32,
                   num_attention_heads=32, vocab_size=51200, tie_word_embeddings=False), 2_779_683_840),
    "gemma-7b": (dict(model_type="gemma", hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=16, head_dim=256, vocab_size=256000), 8_537_680_896),
    "gpt-oss-20b": (dict(model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
                         num_attention_heads=64, num_key_value_heads=8, head_dim=64, vocab_size=201088,
                         num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
                         layer_types=["sliding_attention", "full_attention"] * 12,
                         tie_word_embeddings=False), 20_914_757_184),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_counts(name):
    config, expected = PUBLISHED[name]
    assert architecture_from_config(config, name).checkpoint_params == expected


def test_mistral_v01_slides_on_every_layer():
    arch = architecture_from_config(PUBLISHED["mistral-7b-v0.1"][0])
    assert {(layer.attention.kind, layer.attention.window) for layer in arch.layers} == {("sliding", 4096)}


def test_explicit_head_dim_differs_from_hidden_over_heads():
    config = dict(PUBLISHED["mistral-7b-v0.1"][0], hidden_size=5120, num_attention_heads=32, head_dim=128,
                  sliding_window=None)
    arch = architecture_from_config(config)
    q = next(t for t in arch.layers[0].tensors if t.name == "self_attn.q_proj.weight")
    assert q.shape == (32 * 128, 5120)


def test_tied_embeddings_have_no_lm_head():
    tied = architecture_from_config(dict(PUBLISHED["llama-3.1-70b"][0], tie_word_embeddings=True))
    untied = architecture_from_config(PUBLISHED["llama-3.1-70b"][0])
    assert untied.checkpoint_params - tied.checkpoint_params == 128256 * 8192


def test_unknown_architecture_asks_for_params():
    with pytest.raises(UnsupportedArchitecture, match="--params"):
        _count(CONFIGS / "broken" / "unknown-arch.json")


def test_a_near_miss_model_type_names_the_closest_ones_planner_counts(monkeypatch):
    import planner.model.transformers_fallback as fallback

    monkeypatch.setattr(fallback, "transformers_available", lambda: False)
    config = dict(load_config_file(CONFIGS / "olmoe-defaults"), model_type="olmoe2")
    with pytest.raises(UnsupportedArchitecture) as raised:
        architecture_from_config(config, "m")
    message = str(raised.value)
    assert "closest" in message and "olmoe" in message and "--params N" in message and "[transformers]" in message
    assert "\n" not in message and len(message) < 400  # one line, not the whole list


def test_missing_key_is_named():
    with pytest.raises(PlannerInputError, match="'num_hidden_layers'"):
        _count(CONFIGS / "broken" / "missing-layers.json")


def test_truncated_json_is_a_clear_error():
    with pytest.raises(PlannerInputError, match="not valid JSON"):
        _count(CONFIGS / "broken" / "truncated.json")


def test_wrong_type_is_named():
    config = dict(PUBLISHED["llama-3.1-70b"][0], num_hidden_layers="eighty")
    with pytest.raises(PlannerInputError, match="'num_hidden_layers' must be a whole number"):
        architecture_from_config(config)


def test_layer_types_length_must_match(tmp_path):
    config = dict(PUBLISHED["gpt-oss-20b"][0], layer_types=["full_attention"] * 3)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(PlannerInputError, match="layer_types"):
        _count(path)


def test_recurrent_layers_in_a_family_without_state_rules_are_refused_not_zeroed():
    config = dict(PUBLISHED["gpt-oss-20b"][0], layer_types=["linear_attention", "full_attention"] * 12)
    with pytest.raises(UnsupportedArchitecture, match="recurrent-state"):
        architecture_from_config(config)


@pytest.mark.parametrize("key, value", [
    ("attn_layer_period", 8),  # Jamba: every 8th layer attention, the rest Mamba
    ("attn_layer_indices", [4, 12, 20]),  # Bamba
    ("mamba_d_ssm", 1024),  # Falcon-H1: a Mamba mixer beside attention in every layer
    ("layers_block_type", ["mamba", "attention"] * 16),
])
def test_a_config_that_places_recurrent_layers_by_keys_planner_does_not_read_is_refused_not_sized_as_attention(
        key, value):
    """A family planner does not count is sized from its config's cache keys (--params for the weights): its layers
    are not all attention when the config says otherwise, so the cache is refused rather than sized 8x too large."""
    config = {"model_type": "some_hybrid", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 65536, key: value}
    with pytest.raises(UnsupportedArchitecture, match=f"'{key}' describes recurrent .* add 'layer_types'"):
        size_only_architecture_from_config(config, "hybrid", 10**10)
    # a layer_types list places them, and a config without such keys is attention throughout
    placed = dict(config, layer_types=["full_attention"] * 32)
    assert size_only_architecture_from_config(placed, "hybrid", 10**10).num_layers == 32
    plain = {k: v for k, v in config.items() if k != key}
    assert {layer.attention.kind for layer in size_only_architecture_from_config(plain, "p", 10**10).layers} == {"full"}


def test_an_unknown_vision_tower_names_the_closest_towers_and_goes_to_transformers_when_installed(monkeypatch):
    import planner.model.transformers_fallback as fallback
    from planner.model import architecture

    config = dict(load_config_file(CONFIGS / "qwen3-vl-8b-instruct"), model_type="llava")
    config["vision_config"] = dict(config["vision_config"], model_type="clip_vision_model")
    monkeypatch.setattr(fallback, "transformers_available", lambda: False)
    with pytest.raises(UnsupportedArchitecture) as raised:
        architecture_from_config(config, "llava-like")
    message = str(raised.value)
    assert "'clip_vision_model'" in message and "closest" in message and "siglip_vision_model" in message
    assert "--params N" in message and "[transformers]" in message and "\n" not in message and len(message) < 400
    # with the extra, transformers counts the whole model (text and tower) instead
    counted = object()
    monkeypatch.setattr(architecture, "_count_with_transformers", lambda data, name: counted)
    assert architecture_from_config(config, "llava-like") is counted


def test_sliding_layers_whose_window_covers_every_position_are_full_attention():
    """EXAONE 4.5's config class: a 4,096-token window, max_position_embeddings 2,048 (its defaults)."""
    config = {"model_type": "exaone4", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 2048, "sliding_window": 4096,
              "max_position_embeddings": 2048,
              "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}
    assert {layer.attention.kind for layer in architecture_from_config(config, "e").layers} == {"full"}
    chunked = dict(config, layer_types=["chunked_attention"] * 4)
    with pytest.raises(PlannerInputError, match="chunked_attention"):
        architecture_from_config(chunked, "c")  # a chunk size is its own key, never the window


def test_an_unknown_family_with_a_latent_attention_cache_is_refused_with_the_flags_that_give_its_cache(monkeypatch):
    """vLLM caches DeepSeek-style MLA as one latent per token and MiniCPM3's as whole heads (models/minicpm3.py @
    v0.34.0: Attention(num_kv_heads=num_local_heads)): the config alone does not say which."""
    import planner.model.transformers_fallback as fallback

    config = {"model_type": "minicpm3", "hidden_size": 2560, "num_hidden_layers": 62, "num_attention_heads": 40,
              "num_key_value_heads": 40, "vocab_size": 73448, "kv_lora_rank": 256, "q_lora_rank": 768,
              "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64}
    with pytest.raises(UnsupportedArchitecture, match="'kv_lora_rank' .* --layers, --kv-heads and --head-dim"):
        size_only_architecture_from_config(config, "minicpm3", 4 * 10**9)
    # with the transformers extra, the same reason, not a request for --params that would meet it again
    monkeypatch.setattr(fallback, "transformers_available", lambda: True)
    with pytest.raises(UnsupportedArchitecture, match="'kv_lora_rank'"):
        architecture_from_config(config, "minicpm3")


@pytest.mark.parametrize("extra, kinds", [
    ({}, {"sliding"}),  # Mistral v0.1's rule: one window on every layer
    ({"use_sliding_window": False, "max_window_layers": 28}, {"full"}),  # Qwen2's: the window turned off
])
def test_an_unknown_family_reads_a_window_turned_off_as_none(extra, kinds):
    config = {"model_type": "new_family", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 2, "vocab_size": 1000, "sliding_window": 4096, "max_position_embeddings": 32768,
              **extra}
    assert {layer.attention.kind for layer in size_only_architecture_from_config(config, "n", 10**9).layers} == kinds


@pytest.mark.parametrize("extra, key", [
    ({"sliding_window": 4096, "sliding_window_pattern": 6}, "sliding_window_pattern"),  # Gemma 3's rule
    ({"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 2}, "max_window_layers"),
    ({"use_cla": True, "cla_share_factor": 2}, "use_cla"),  # Hunyuan-Large's layers sharing a cache
    ({"attention_chunk_size": 8192}, "attention_chunk_size"),
])
def test_an_unknown_family_that_places_windows_or_shares_caches_by_its_own_rule_is_refused(extra, key):
    config = {"model_type": "new_family", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 32768, **extra}
    with pytest.raises(UnsupportedArchitecture, match=f"'{key}' places .* add 'layer_types'"):
        size_only_architecture_from_config(config, "n", 10**9)
    per_layer = dict(config, layer_types=["full_attention", "sliding_attention"] * 2, sliding_window=4096)
    assert [layer.attention.kind for layer in size_only_architecture_from_config(per_layer, "n", 10**9).layers] == [
        "full", "sliding", "full", "sliding"]
