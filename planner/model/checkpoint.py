"""Weights as stored: safetensors headers and GGUF tensor tables, read without loading any weight.

These give exact bytes for checkpoints planner cannot count tensor by tensor (an unknown
architecture, a GGUF file with its own mix of quantization types) and the parameter count the
file itself declares.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from planner.model.architecture import Architecture, Attention, Layer
from planner.errors import PlannerInputError

# safetensors dtype -> bits per element (safetensors format spec, huggingface/safetensors README)
SAFETENSORS_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U8": 8,
                    "U16": 16, "U32": 32, "U64": 64, "BOOL": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F4": 4,
                    "F6_E2M3": 6, "F6_E3M2": 6}
MAX_HEADER_BYTES = 100 * 2**20  # the format caps headers at 100 MB


@dataclass(frozen=True)
class StoredWeights:
    """What a checkpoint's files hold: bytes, element counts, and a breakdown by stored dtype."""

    files: tuple[str, ...]
    total_bytes: int
    elements: int  # stored elements (packed quantized tensors count their storage elements)
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    declared_params: int | None = None  # a count the file states (GGUF), when it has one


def read_safetensors_header(path: Path) -> dict:
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise PlannerInputError(f"{path.name}: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise PlannerInputError(f"{path.name}: header of {length:,} bytes is beyond the format's 100 MB limit")
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise PlannerInputError(f"{path.name}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise PlannerInputError(f"{path.name}: not a safetensors file (header is not an object)")
    return header


def safetensors_weights(paths: list[Path]) -> StoredWeights:
    total = elements = 0
    by_dtype: dict[str, int] = {}
    for path in paths:
        for name, info in read_safetensors_header(path).items():
            if name == "__metadata__":
                continue
            try:
                dtype, shape, (start, end) = info["dtype"], info["shape"], info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise PlannerInputError(f"{path.name}: tensor {name!r} lacks dtype/shape/data_offsets") from None
            if dtype not in SAFETENSORS_BITS:
                raise PlannerInputError(f"{path.name}: tensor {name!r} has dtype {dtype!r} planner does not know")
            count = 1
            for dim in shape:
                count *= int(dim)
            size = int(end) - int(start)
            total += size
            elements += count
            by_dtype[dtype] = by_dtype.get(dtype, 0) + size
    return StoredWeights(tuple(p.name for p in paths), total, elements, by_dtype)


def find_safetensors(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.safetensors"))


# --------------------------------------------------------------------------------------------
# GGUF (via the `gguf` package that llama.cpp publishes)


@dataclass(frozen=True)
class GgufModel:
    weights: StoredWeights
    architecture: str
    file_type: str | None
    layers: int
    heads: int
    kv_heads: int
    key_length: int
    value_length: int
    context_length: int | None


def read_gguf(path: Path) -> GgufModel:
    try:
        from gguf import GGUFReader
    except ImportError:
        raise PlannerInputError("a .gguf model needs the gguf package: pip install gguf") from None
    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the reader raises plain ValueError/struct errors on a damaged file
        raise PlannerInputError(f"{path.name}: not a readable GGUF file ({exc.__class__.__name__}: {exc})") from None

    def field_value(key: str):
        found = reader.fields.get(key)
        if found is None:
            return None
        value = found.contents()
        return value

    arch = field_value("general.architecture")
    if not arch:
        raise PlannerInputError(f"{path.name}: GGUF metadata lacks general.architecture")

    def required(key: str) -> int:
        value = field_value(f"{arch}.{key}")
        if value is None:
            raise PlannerInputError(f"{path.name}: GGUF metadata lacks {arch}.{key}")
        return int(value)

    heads = required("attention.head_count")
    embedding = required("embedding_length")
    kv_heads = int(field_value(f"{arch}.attention.head_count_kv") or heads)
    key_length = int(field_value(f"{arch}.attention.key_length") or embedding // heads)
    value_length = int(field_value(f"{arch}.attention.value_length") or key_length)
    by_type: dict[str, int] = {}
    total = elements = 0
    for tensor in reader.tensors:
        size = int(tensor.n_bytes)
        total += size
        elements += int(tensor.n_elements)
        by_type[tensor.tensor_type.name] = by_type.get(tensor.tensor_type.name, 0) + size
    file_type = field_value("general.file_type")
    return GgufModel(
        weights=StoredWeights((path.name,), total, elements, by_type, declared_params=elements),
        architecture=str(arch), file_type=None if file_type is None else str(file_type),
        layers=required("block_count"), heads=heads, kv_heads=kv_heads, key_length=key_length,
        value_length=value_length, context_length=field_value(f"{arch}.context_length"),
    )


def gguf_file_type_name(file_type: str | None) -> str | None:
    """general.file_type (llama.cpp's LLAMA_FTYPE number) as a catalog precision name, e.g. 15 -> q4_k_m."""
    if file_type is None:
        return None
    from gguf import LlamaFileType

    try:
        return LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_").removeprefix("ALL_").lower()
    except ValueError:
        return None


def architecture_from_gguf(model: GgufModel, name: str, precision: str | None) -> Architecture:
    """KV shape from GGUF metadata (every layer full attention: an upper bound for sliding-window models)."""
    attention = Attention("full", model.kv_heads, model.key_length, model.value_length)
    return Architecture(
        name=name, model_type=f"gguf:{model.architecture}", hidden_size=model.heads * model.key_length,
        num_attention_heads=model.heads, vocab_size=0, layers=tuple(Layer(attention) for _ in range(model.layers)),
        exact=False, declared_params=model.weights.elements, stored_bytes=model.weights.total_bytes,
        stored_precision=precision,
        max_position_embeddings=int(model.context_length) if model.context_length else None,
    )
