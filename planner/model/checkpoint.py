"""Weights as stored: safetensors headers and GGUF tensor tables, read without loading any weight.

These give exact bytes for checkpoints planner cannot count tensor by tensor (an unknown
architecture, a GGUF file with its own mix of quantization types) and the parameter count the
file itself declares.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import PlannerInputError
from planner.files import CHECKPOINT, open_regular
from planner.model.architecture import Architecture, Attention, Layer
from planner.model.families.config import MAX_CONFIG_NUMBER, MAX_HEADS, MAX_LAYERS
from planner.units import MAX_COUNT, MAX_SIZE_BYTES, MiB

# safetensors dtype -> bits per element (safetensors format spec, huggingface/safetensors README)
SAFETENSORS_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U8": 8,
                    "U16": 16, "U32": 32, "U64": 64, "BOOL": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F4": 4,
                    "F6_E2M3": 6, "F6_E3M2": 6}
FORMAT_MAX_HEADER_BYTES = 100_000_000  # the format's own limit (safetensors lib.rs, MAX_HEADER_SIZE)
# What planner parses: Python holds a JSON header in ~25x its size at worst (a header of empty objects), so
# 16 MiB stays within a few hundred MB. A tensor's entry takes ~100 bytes, so 16 MiB holds ~160,000 tensors:
# more than DeepSeek-V3 has in all its shards (61 layers x 256 experts x 3 projections x weight + fp8 scale ~ 94k).
MAX_HEADER_BYTES = 16 * MiB
_TENSOR_KEYS = {"dtype", "shape", "data_offsets"}


@dataclass(frozen=True)
class StoredWeights:
    """What a checkpoint's files hold: bytes, element counts, and a breakdown by stored dtype."""

    files: tuple[str, ...]
    total_bytes: int
    elements: int  # stored elements (packed quantized tensors count their storage elements)
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    declared_params: int | None = None  # a count the file states (GGUF), when it has one


def read_safetensors_header(path: Path) -> tuple[dict, int]:
    """The header (parsed only after its length and first byte say it can be one) and the bytes of data after it."""
    with open_regular(path, CHECKPOINT) as handle:
        size = os.fstat(handle.fileno()).st_size
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise PlannerInputError(f"{path.name}: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > FORMAT_MAX_HEADER_BYTES:
            raise PlannerInputError(f"{path.name}: header of {length:,} bytes is beyond the format's 100 MB limit")
        if length > MAX_HEADER_BYTES:
            raise PlannerInputError(f"{path.name}: header of {length:,} bytes; planner reads headers up to "
                                    f"{MAX_HEADER_BYTES // MiB} MiB (about 160,000 tensors)")
        if 8 + length > size:
            raise PlannerInputError(f"{path.name}: header of {length:,} bytes in a file of {size:,}: truncated")
        raw = handle.read(length)
    if not raw.lstrip(b" ").startswith(b"{"):
        raise PlannerInputError(f"{path.name}: not a safetensors file (header is not an object)")
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, an integer past the digit limit, deep nesting
        raise PlannerInputError(f"{path.name}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise PlannerInputError(f"{path.name}: not a safetensors file (header is not an object)")
    return header, size - 8 - length


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _tensor_entry(path: Path, name: str, info: object) -> tuple[str, int, int, int]:
    """(dtype, elements, start, end) of one header entry, checked as the safetensors library checks it."""
    where = f"{path.name}: tensor {name[:80]!r}"
    if not isinstance(info, dict) or set(info) != _TENSOR_KEYS:
        raise PlannerInputError(f"{where} must hold exactly dtype, shape and data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_BITS:
        raise PlannerInputError(f"{where} has dtype {str(dtype)[:40]!r} planner does not know "
                                f"({', '.join(SAFETENSORS_BITS)})")
    if not isinstance(shape, list) or not all(_whole(d, 0, MAX_CONFIG_NUMBER) for d in shape):
        raise PlannerInputError(f"{where}: shape must list whole numbers from 0 to {MAX_CONFIG_NUMBER:,}")
    count = 1
    for dim in shape:
        count *= dim
        if count > MAX_COUNT:
            raise PlannerInputError(f"{where}: shape holds more than {MAX_COUNT:.0e} elements, beyond any model")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(o, 0, MAX_SIZE_BYTES) for o in offsets)):
        raise PlannerInputError(f"{where}: data_offsets must be [start, end] in bytes, from 0 to 1 EB")
    start, end = offsets
    bits = count * SAFETENSORS_BITS[dtype]
    if end < start or bits % 8 or end - start != bits // 8:
        raise PlannerInputError(f"{where}: data_offsets {offsets} span {end - start:,} bytes, but {dtype} x {shape} "
                                f"needs {bits / 8:,g}")
    return dtype, count, start, end


def safetensors_weights(paths: list[Path]) -> StoredWeights:
    total = elements = 0
    by_dtype: dict[str, int] = {}
    for path in paths:
        header, data_bytes = read_safetensors_header(path)
        spans = []
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype, count, start, end = _tensor_entry(path, name, info)
            spans.append((start, end))
            elements += count
            total += end - start
            by_dtype[dtype] = by_dtype.get(dtype, 0) + end - start
        # the library's rule: tensors tile the data from byte 0 to its end, no gap, no overlap
        position = 0
        for start, end in sorted(spans):
            if start != position:
                problem = "overlap" if start < position else "leave a gap"
                raise PlannerInputError(f"{path.name}: tensors {problem} at byte {min(start, position):,}; "
                                        "the file is damaged")
            position = end
        if position != data_bytes:
            raise PlannerInputError(f"{path.name}: the header describes {position:,} bytes of tensors, the file holds "
                                    f"{data_bytes:,}; the file is truncated or damaged")
    return StoredWeights(tuple(p.name for p in paths), total, elements, by_dtype)


def find_safetensors(directory: Path) -> list[Path]:
    try:
        # hidden files are left out, as a shell glob leaves them (a download's partial ".x.safetensors")
        return sorted(p for p in directory.iterdir() if p.name.endswith(".safetensors") and not p.name.startswith("."))
    except OSError as exc:
        raise PlannerInputError(f"model: cannot list folder {str(directory)!r} ({exc.strerror}); "
                                "planner needs to read and search it") from None


# --------------------------------------------------------------------------------------------
# GGUF metadata, read as a stream: only the keys planner uses are kept, every other value is
# skipped by its length (checked against the file's size before any seek), so a file claiming
# huge arrays costs nothing. Layout and type codes: ggml/docs/gguf.md (GGUF v2 and v3); the
# quantization block sizes come from the `gguf` package llama.cpp publishes.

_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_INTEGERS = {0, 1, 2, 3, 4, 5, 10, 11}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_MAX_DIMS = 4  # GGML_MAX_DIMS (ggml.h)
_GGUF_PER_LAYER = ("attention.head_count", "attention.head_count_kv")  # llama.cpp reads these as scalars or per layer
# GGUF spec (ggml/docs/gguf.md): a key "must be at most 2^16-1 bytes long"; planner keeps no longer string
_GGUF_MAX_KEPT_STRING = 2**16 - 1
# Real files hold ~40 metadata keys and ~20 tensors per layer (llama.cpp merges a layer's experts into one
# tensor): these bounds are far above both and keep the read of a damaged file under a second.
_GGUF_MAX_KEYS = 100_000
_GGUF_MAX_TENSORS = 100_000
_ARCH_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # llama.cpp's LLM_ARCH names ("llama", "qwen3moe", "deepseek2")


@dataclass(frozen=True)
class GgufModel:
    """What a GGUF file's header says of its model: stored weights, architecture and the KV shape."""

    weights: StoredWeights
    architecture: str
    file_type: str | None
    layers: int
    heads: int  # of the first layer: what llama.cpp derives the head size from
    kv_heads: tuple[int, ...]  # per layer
    key_length: int
    value_length: int
    context_length: int | None


class _GgufStream:
    """A GGUF file read front to back with every length checked against what is left of the file."""

    def __init__(self, handle, size: int, name: str):
        self.handle, self.size, self.name, self.order = handle, size, name, "<"

    def need(self, n: int) -> None:
        if n > self.size - self.handle.tell():
            raise PlannerInputError(f"{self.name}: GGUF metadata claims {n:,} more bytes than the file holds; "
                                    "the file is truncated or damaged")

    def take(self, code: str):
        width = struct.calcsize("<" + code)
        self.need(width)
        return struct.unpack(self.order + code, self.handle.read(width))[0]

    def skip(self, n: int) -> None:
        self.need(n)
        self.handle.seek(n, os.SEEK_CUR)

    def text(self, keep: bool = True) -> bytes | None:
        length = self.take("Q")
        if not keep:
            self.skip(length)
            return None
        if length > _GGUF_MAX_KEPT_STRING:
            raise PlannerInputError(f"{self.name}: a GGUF key or name of {length:,} bytes (the format allows "
                                    f"{_GGUF_MAX_KEPT_STRING:,}); the file is damaged")
        self.need(length)
        return self.handle.read(length)

    def skip_strings(self, count: int) -> None:
        """Skip an array of strings (a tokenizer's 150,000 tokens) a buffer at a time, not a read per item."""
        length_at = struct.Struct(self.order + "Q").unpack_from
        while count:
            start = self.handle.tell()
            buffer = self.handle.read(MiB)
            if len(buffer) < 8:
                self.need(8)  # the file ends inside the array
            position = 0
            while count and position + 8 <= len(buffer):
                position += 8 + length_at(buffer, position)[0]
                count -= 1
            self.handle.seek(start)
            self.skip(position)

    def value(self, kind: int, keep_array: bool):
        """A value of GGUF type `kind`; arrays come back only when `keep_array` (and short), else None."""
        if kind in _GGUF_SCALARS:
            return self.take(_GGUF_SCALARS[kind])
        if kind == _GGUF_STRING:
            return self.text(keep=False)
        if kind != _GGUF_ARRAY:
            raise PlannerInputError(f"{self.name}: GGUF value type {kind} does not exist; the file is damaged")
        item, count = self.take("I"), self.take("Q")
        if item in _GGUF_SCALARS:
            width = struct.calcsize("<" + _GGUF_SCALARS[item])
            if not keep_array or item not in _GGUF_INTEGERS or count > MAX_LAYERS:
                self.skip(count * width)
                return None
            self.need(count * width)
            return list(struct.unpack(f"{self.order}{count}{_GGUF_SCALARS[item]}", self.handle.read(count * width)))
        if item == _GGUF_STRING:
            self.need(count * 8)  # each item is at least its 8-byte length
            self.skip_strings(count)
            return None
        if item == _GGUF_ARRAY:
            self.need(count * 12)  # each item is at least its type and length
            for _ in range(count):
                self.value(item, keep_array=False)
            return None
        raise PlannerInputError(f"{self.name}: GGUF array of type {item} does not exist; the file is damaged")


def _read_gguf_tables(path: Path):
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    with open_regular(path, CHECKPOINT) as handle:
        stream = _GgufStream(handle, os.fstat(handle.fileno()).st_size, path.name)
        if stream.take("I") != 0x46554747:  # "GGUF" read little-endian
            raise PlannerInputError(f"{path.name}: not a readable GGUF file (no GGUF magic)")
        version = stream.take("I")
        if version & 0xFFFF == 0:  # written big-endian: the whole file is
            stream.order, version = ">", struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in (2, 3):
            raise PlannerInputError(f"{path.name}: not a readable GGUF file (version {version}; llama.cpp reads 2 and 3)")
        tensor_count, kv_count = stream.take("Q"), stream.take("Q")
        if tensor_count > _GGUF_MAX_TENSORS or kv_count > _GGUF_MAX_KEYS:
            raise PlannerInputError(f"{path.name}: GGUF header claims {tensor_count:,} tensors and {kv_count:,} metadata "
                                    f"keys (real models: thousands and dozens); the file is damaged")
        stream.need(kv_count * 12 + tensor_count * 24)  # each entry's fixed part: a length and a type at least
        metadata: dict[str, tuple[int, object]] = {}
        for _ in range(kv_count):
            key = stream.text().decode("utf-8", "replace")
            kind = stream.take("I")
            if key == "general.architecture" and kind == _GGUF_STRING:
                value = stream.text()
            else:
                value = stream.value(kind, keep_array=key.endswith(_GGUF_PER_LAYER))
            if key in metadata:
                raise PlannerInputError(f"{path.name}: GGUF metadata holds {key[:80]!r} twice; the file is damaged")
            metadata[key] = (kind, value)
        by_type: dict[str, int] = {}
        total = elements = data_end = 0
        for _ in range(tensor_count):
            stream.text(keep=False)  # the tensor's name
            dims = stream.take("I")
            if not 1 <= dims <= _GGUF_MAX_DIMS:
                raise PlannerInputError(f"{path.name}: a GGUF tensor with {dims} dimensions (ggml allows 1 to 4)")
            shape = [stream.take("Q") for _ in range(dims)]
            type_code, offset = stream.take("I"), stream.take("Q")
            try:
                quant = GGMLQuantizationType(type_code)
                block, block_bytes = GGML_QUANT_SIZES[quant]
            except (ValueError, KeyError):
                raise PlannerInputError(f"{path.name}: a GGUF tensor of type {type_code}, which ggml does not have") from None
            count = 1
            for dim in shape:
                count *= dim
            if count > MAX_COUNT or shape[0] % block:
                raise PlannerInputError(f"{path.name}: a GGUF tensor of shape {shape} cannot be {quant.name}")
            size = count // block * block_bytes
            total += size
            elements += count
            by_type[quant.name] = by_type.get(quant.name, 0) + size
            data_end = max(data_end, offset + size)
        data_start = handle.tell()
    kind, alignment = metadata.get("general.alignment", (4, 32))  # GGUF_DEFAULT_ALIGNMENT
    if kind not in _GGUF_INTEGERS or alignment <= 0 or alignment & (alignment - 1):
        raise PlannerInputError(f"{path.name}: general.alignment must be a power of two")
    if data_end > stream.size - (data_start + -data_start % alignment):
        raise PlannerInputError(f"{path.name}: a tensor ends past the end of the file; the file is truncated")
    return metadata, StoredWeights((path.name,), total, elements, by_type, declared_params=elements)


def read_gguf(path: Path) -> GgufModel:
    try:
        import gguf  # noqa: F401 - the quantization tables below come from it
    except ImportError:
        raise PlannerInputError("a .gguf model needs the gguf package: pip install gguf") from None
    metadata, weights = _read_gguf_tables(path)
    kind, raw_arch = metadata.get("general.architecture", (None, None))
    if kind != _GGUF_STRING:
        raise PlannerInputError(f"{path.name}: GGUF metadata lacks general.architecture (a string)")
    try:
        arch = raw_arch.decode("utf-8")
    except UnicodeDecodeError:
        arch = ""
    if not _ARCH_NAME.fullmatch(arch):
        raise PlannerInputError(f"{path.name}: general.architecture {raw_arch[:40]!r} is not an architecture name")

    def number(key: str, low: int, high: int, default: int | None = None, per_layer: int | None = None):
        """A whole number in [low, high]; with per_layer, also a list of one per layer (returned as a tuple)."""
        kind, value = metadata.get(f"{arch}.{key}", (None, None))
        if kind is None:
            if default is None:
                raise PlannerInputError(f"{path.name}: GGUF metadata lacks {arch}.{key}")
            return default
        if per_layer is not None and kind == _GGUF_ARRAY:
            if not isinstance(value, list) or len(value) != per_layer:
                raise PlannerInputError(f"{path.name}: {arch}.{key} must be a whole number or list one per layer "
                                        f"({per_layer})")
            if not all(low <= v <= high for v in value):
                raise PlannerInputError(f"{path.name}: {arch}.{key} lists values outside {low:,} to {high:,}")
            return tuple(value)
        if kind not in _GGUF_INTEGERS or not low <= value <= high:
            shown = "a list" if kind == _GGUF_ARRAY else "text" if kind == _GGUF_STRING else repr(value)
            raise PlannerInputError(f"{path.name}: {arch}.{key} must be a whole number from {low:,} to {high:,}, "
                                    f"got {shown}")
        return value if per_layer is None else (value,) * per_layer

    layers = number("block_count", 1, MAX_LAYERS)
    heads = number("attention.head_count", 0, MAX_HEADS, per_layer=layers)
    kv_heads = number("attention.head_count_kv", 0, MAX_HEADS, default=heads, per_layer=layers)
    if 0 in heads or 0 in kv_heads:
        raise PlannerInputError(f"{path.name}: layers without attention heads (recurrent, as in Mamba or Jamba) keep "
                                "a state planner does not size from GGUF; give the model's config.json and --params")
    embedding = number("embedding_length", 1, MAX_CONFIG_NUMBER)
    key_length = number("attention.key_length", 1, MAX_CONFIG_NUMBER, default=max(1, embedding // heads[0]))
    value_length = number("attention.value_length", 1, MAX_CONFIG_NUMBER, default=key_length)
    context = number("context_length", 1, MAX_CONFIG_NUMBER, default=0) or None
    file_kind, file_type = metadata.get("general.file_type", (None, None))
    return GgufModel(
        weights=weights, architecture=arch, file_type=str(file_type) if file_kind in _GGUF_INTEGERS else None,
        layers=layers, heads=max(heads), kv_heads=kv_heads, key_length=key_length, value_length=value_length,
        context_length=context,
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
    """KV shape from GGUF metadata, layer by layer (every layer full attention: an upper bound for sliding-window
    models)."""
    layers = tuple(Layer(Attention("full", kv, model.key_length, model.value_length)) for kv in model.kv_heads)
    return Architecture(
        name=name, model_type=f"gguf:{model.architecture}", hidden_size=model.heads * model.key_length,
        num_attention_heads=model.heads, vocab_size=0, layers=layers,
        exact=False, declared_params=model.weights.elements, stored_bytes=model.weights.total_bytes,
        stored_precision=precision, max_position_embeddings=model.context_length,
    )
