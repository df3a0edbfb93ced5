"""Weights as stored: safetensors headers, GGUF files, and the Hub path (never needed online)."""

import json
import struct

import numpy as np
import pytest

from planner import estimate
from planner.errors import PlannerInputError

from conftest import CONFIGS


def write_safetensors(path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """A valid safetensors file of zeros; returns the data bytes written."""
    bits = {"BF16": 16, "F32": 32, "I32": 32, "F8_E4M3": 8}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = int(np.prod(shape)) * bits[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def test_unknown_architecture_is_sized_from_its_safetensors(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "broken" / "unknown-arch.json").read_text())
    first = write_safetensors(tmp_path / "model-00001-of-00002.safetensors",
                              {"a.weight": ("BF16", [1024, 512]), "b.weight": ("F8_E4M3", [256, 256])})
    second = write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"c.weight": ("F32", [100])})
    est = estimate(str(tmp_path), context=1000)
    assert est.weights_bytes == first + second
    assert est.params == 1024 * 512 + 256 * 256 + 100
    assert est.kv_bytes_per_token == 32 * 2 * 32 * 128 * 2  # the config still shapes the cache


def test_a_countable_model_ignores_nothing_and_keeps_its_exact_count(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "llama-3.1-8b-instruct" / "config.json").read_text())
    write_safetensors(tmp_path / "model.safetensors", {"x": ("BF16", [4, 4])})
    assert estimate(str(tmp_path)).params == 8_030_261_248


def test_a_damaged_safetensors_header_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "broken" / "unknown-arch.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 5) + b"nope!")
    with pytest.raises(PlannerInputError, match="not a safetensors file"):
        estimate(str(tmp_path))


def write_gguf(path, file_type: int = 1):
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(4096)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_file_type(file_type)
    writer.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float16))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.zeros((64,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_file_gives_exact_bytes_its_type_and_the_cache_shape(tmp_path):
    path = tmp_path / "tiny-F16.gguf"
    write_gguf(path)
    est = estimate(str(path), context=2048)
    assert est.weights_bytes == 100 * 64 * 2 + 64 * 64 * 2 + 64 * 4
    assert est.params == 100 * 64 + 64 * 64 + 64
    assert est.precision == "fp16"  # general.file_type 1 = MOSTLY_F16
    assert est.kv_bytes_per_token == 2 * 2 * (16 + 16) * 2  # 2 layers x 2 KV heads x (k+v 16) x fp16


def test_a_damaged_gguf_is_a_clear_error(tmp_path):
    pytest.importorskip("gguf")
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + b"\x00" * 10)
    with pytest.raises(PlannerInputError, match="not a readable GGUF file"):
        estimate(str(path))


def test_hub_ids_outside_the_catalog_need_the_hub_and_say_how(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-planner-test-cache")
    with pytest.raises(PlannerInputError, match="config.json"):
        estimate("some-org/some-model-that-is-not-cached")
