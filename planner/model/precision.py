"""A precision applied to an Architecture's tensors: exact bytes per tensor, scales included."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from math import ceil, prod
from typing import Any

from planner.model.architecture import Architecture, Tensor
from planner.catalog.load import Catalog, Precision, Scales
from planner.errors import PlannerInputError

# Tensors a checkpoint keeps unquantized are stored in the model's 16-bit activation dtype, unless the
# model's code gives one its own width (Tensor.stored_bits).
UNQUANTIZED_BITS = 16
# compressed-tensors config_groups target naming the module class of every linear layer (torch.nn.Linear)
LINEAR_CLASS_TARGET = "Linear"
# ggml keeps 1-D tensors (norms, biases) and MoE routers (ffn_gate_inp) in F32:
# llama.cpp src/llama-quant.cpp skips 1-D tensors and "ffn_gate_inp.weight" when quantizing.
GGUF_UNQUANTIZED_BITS = 32


def _is_quantized(tensor: Tensor, precision: Precision) -> bool:
    if tensor.kept_unquantized:
        return False
    matrix = len(tensor.shape) == 2
    if precision.scope == "all":
        return True
    if precision.scope == "linear":
        return matrix and tensor.role in ("linear", "expert")
    if precision.scope == "experts":
        return matrix and tensor.role == "expert"
    return matrix and tensor.role in ("linear", "expert", "embedding", "lm_head")  # gguf


def _scale_count(shape: tuple[int, ...], count: int, scales: Scales | None) -> int:
    if scales is None:
        return 0
    rows, cols = shape
    if scales.granularity == "tensor":
        per_tensor = 1
    elif scales.granularity == "channel":
        per_tensor = rows
    elif scales.granularity == "group":
        per_tensor = rows * ceil(cols / (scales.group_size or cols))
    else:  # block
        size = scales.group_size or max(rows, cols)
        per_tensor = ceil(rows / size) * ceil(cols / size)
    return per_tensor * count


def _format(tensor: Tensor, precision: Precision) -> tuple[float, Scales | None]:
    """The bits and scales a quantized tensor takes: the experts' own format when the precision names one."""
    if tensor.role == "expert" and precision.experts is not None:
        return precision.experts.bits, precision.experts.scales
    return precision.bits, precision.scales


def tensor_bytes(shape: tuple[int, ...], count: int, tensor: Tensor, precision: Precision) -> int:
    """Bytes of `count` tensors of `shape` (a shard of `tensor`) stored in `precision`."""
    numel = prod(shape) * count
    if _is_quantized(tensor, precision):
        bits, scales = _format(tensor, precision)
        data = ceil(numel * Fraction(str(bits)) / 8)
        if precision.scope == "all" or len(shape) != 2:
            return data
        extra_bits = (scales.scale_bits + scales.zero_bits) if scales else 0
        return data + ceil(_scale_count(shape, count, scales) * extra_bits / 8)
    if precision.scope == "gguf" and (len(shape) == 1 or tensor.role == "router"):
        return numel * GGUF_UNQUANTIZED_BITS // 8
    return numel * (tensor.stored_bits or UNQUANTIZED_BITS) // 8


def weights_bytes(tensors: tuple[Tensor, ...] | list[Tensor], precision: Precision) -> int:
    return sum(tensor_bytes(t.shape, t.count, t, precision) for t in tensors)


# --------------------------------------------------------------------------------------------
# --precision auto


def _compressed_tensors_precision(qc: dict[str, Any]) -> str | None:
    groups = qc.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, dict) else []:
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            continue  # not a scheme planner reads: the caller asks for --precision
        kind, bits = weights.get("type"), weights.get("num_bits")
        if kind == "float" and bits == 8:
            return "fp8"
        if kind == "float" and bits == 4:
            # one scale per 32 is MXFP4's block (OCP MX: e8m0 scale, e.g. Kimi-K3's mxfp4-pack-quantized); NVFP4 scales per 16
            return "mxfp4" if weights.get("group_size") == 32 else "nvfp4"
        if kind == "int" and bits == 8:
            return "int8"
        if kind == "int" and bits == 4:
            # Kimi's QAT checkpoints: symmetric, one scale per 32 (catalog int4-g32); AWQ/GPTQ-style otherwise
            return "int4-g32" if weights.get("group_size") == 32 and weights.get("symmetric") else "int4"
    return None


def _targets_every_linear(qc: dict[str, Any]) -> bool:
    """Whether every compressed-tensors config group targets the Linear module class (compressed-tensors matches a
    target against a module's class name as well as its name): then every linear layer the `ignore` list does not
    name is quantized."""
    groups = qc.get("config_groups")
    return (isinstance(groups, dict) and bool(groups)
            and all(isinstance(g, dict) and g.get("targets") == [LINEAR_CLASS_TARGET] for g in groups.values()))


def checkpoint_scope(precision: Precision, arch: Architecture) -> Precision:
    """The precision as the checkpoint that ships in it applies it: a compressed-tensors config that targets Linear
    quantizes every linear tensor (routed experts, and e.g. Kimi-K3's latent MoE projections), not only the scope the
    catalog entry describes (mxfp4: experts, after gpt-oss). The modules its `ignore` list names are already marked
    kept_unquantized (planner.model.families.exclusions), so linear scope less them is the config's targets less
    its ignore list, tensor by tensor. Asked for by name or by `auto`, the checkpoint's own precision is the same
    bytes: they are what it stores."""
    qc = arch.quantization_config
    if (precision.scope != "experts" or not isinstance(qc, dict)
            or str(qc.get("quant_method", "")).lower() != "compressed-tensors" or not _targets_every_linear(qc)
            or _compressed_tensors_precision(qc) != precision.name):
        return precision
    return replace(precision, scope="linear")


def precision_from_checkpoint(arch: Architecture) -> str:
    """The precision a checkpoint ships in: its quantization_config, else its torch_dtype."""
    qc = arch.quantization_config
    if qc is not None and not isinstance(qc, dict):
        raise PlannerInputError(f"{arch.name}: quantization_config must be an object, got {qc!r}; "
                                "fix the config or pass --precision")
    if qc:
        method = str(qc.get("quant_method", "")).lower()
        name: str | None = None
        if method == "fp8":
            name = "fp8-block" if qc.get("weight_block_size") else "fp8"
        elif method == "compressed-tensors":
            name = _compressed_tensors_precision(qc)
        elif method in ("awq", "gptq"):
            name = method if qc.get("bits", 4) == 4 else None
        elif method == "mxfp4":
            name = "mxfp4"
        elif method == "bitsandbytes":
            name = "nf4" if qc.get("load_in_4bit") else None
        elif method == "modelopt":
            algo = str(qc.get("quant_algo", "")).upper()
            name = {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo)
            if algo == "MIXED_PRECISION":
                raise PlannerInputError(
                    f"{arch.name}: quantization_config quant_algo MIXED_PRECISION gives each layer its own format "
                    "(quantized_layers), which no catalog precision sizes exactly; pass --precision with the format "
                    "most of its weights take (e.g. nvfp4 where the experts are NVFP4) and read the result as "
                    "approximate")
        if name is None:
            raise PlannerInputError(
                f"{arch.name}: quantization_config {method or qc!r} is not one planner reads; "
                "pass --precision with the matching catalog precision"
            )
        return name
    dtype = (arch.torch_dtype or "").lower()
    # A float32 checkpoint is served in 16-bit: vLLM's --dtype auto casts float32 configs down
    # (vllm/config ModelConfig dtype resolution); ask for --precision fp32 to keep 32-bit.
    by_dtype = {"float32": "bf16", "float16": "fp16", "bfloat16": "bf16"}
    if dtype not in by_dtype:
        raise PlannerInputError(
            f"{arch.name}: config has no torch_dtype or quantization_config to read the precision from; "
            "pass --precision (e.g. bf16)"
        )
    return by_dtype[dtype]


def resolve_precision(catalog: Catalog, arch: Architecture, requested: str | None) -> Precision:
    if requested is None or requested.lower() == "auto":
        if arch.stored_precision:
            return catalog.precisions.get(arch.stored_precision)
        if not arch.exact and arch.quantization_config is None and arch.torch_dtype is None:
            return catalog.precisions.get("fp16")
        return checkpoint_scope(catalog.precisions.get(precision_from_checkpoint(arch)), arch)
    precision = checkpoint_scope(catalog.precisions.get(requested), arch)
    if precision.scope == "experts" and arch.exact and arch.moe is None:
        raise PlannerInputError(
            f"--precision: {precision.name} quantizes MoE experts only and {arch.name} has none; "
            "pick a dense-model precision such as fp8 or int4"
        )
    return precision


def _float8(scheme: object) -> bool:
    """A quantization config's KV scheme of 8-bit floats, as ModelOpt and llm-compressor write it."""
    return isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8


def declared_fp8_kv_cache(arch: Architecture, compressed_tensors: bool) -> bool:
    """Whether the checkpoint's quantization_config declares an FP8 KV cache the engines' `--kv-cache-dtype auto`
    takes (calibrated scales ship with the weights). ModelOpt (quant_method modelopt*): a kv_cache_scheme of static
    8-bit floats, or kv_cache_quant_algo "FP8" where it states no scheme: vLLM
    utils/torch_utils.py get_kv_cache_quant_algo_string @ v0.19.0 and v0.34.0, SGLang layers/quantization/
    modelopt_quant.py from_config plus mem_cache/kv_cache_dtype.py configure_kv_cache_dtype @ v0.5.23 (model_runner.py
    configure_kv_cache_dtype @ v0.5.9). `compressed_tensors`: the engine also takes any compressed-tensors
    kv_cache_scheme as FP8 (vLLM model_executor/layers/attention/attention.py @ v0.19.0 and v0.34.0)."""
    qc = arch.quantization_config
    if not isinstance(qc, dict):
        return False
    method = qc.get("quant_method")
    method = method.lower() if isinstance(method, str) else ""
    if method == "compressed-tensors":
        return compressed_tensors and qc.get("kv_cache_scheme") is not None
    if not method.startswith("modelopt"):
        return False
    scheme = qc.get("kv_cache_scheme")
    if scheme:  # a string scheme, which the two engines read apart, is left at the compute dtype
        return _float8(scheme) and scheme.get("dynamic") is False
    algo = qc.get("kv_cache_quant_algo")
    return isinstance(algo, str) and algo.upper() == "FP8"


def resolve_kv_dtype(arch: Architecture, precision: Precision, requested: str | None) -> str:
    """`auto`: the dtype the engine computes in (vLLM's --kv-cache-dtype auto = the model dtype)."""
    if requested and requested.lower() != "auto":
        return requested.lower()
    if precision.scope == "all":
        return precision.name
    dtype = (arch.torch_dtype or "").lower()
    return {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, "fp16")
