"""Each engine's name for a planner KV cache dtype: one table per engine, read by the memory profiles
and by `planner export`. A dtype missing from a table runs in the engine's default ("auto": the model's
activation dtype)."""

from __future__ import annotations

# vLLM --kv-cache-dtype (vllm/config/cache.py CacheDType): "fp8" is e4m3 on CUDA
VLLM_KV_CACHE_DTYPES = {"fp8": "fp8"}
# SGLang --kv-cache-dtype (sglang/srt/server_args.py) names the fp8 flavour
SGLANG_KV_CACHE_DTYPES = {"fp8": "fp8_e4m3"}
# llama.cpp --cache-type-k/-v (common/arg.cpp kv_cache_types); fp8 has no ggml type, q8_0 is its 8-bit cache
LLAMACPP_CACHE_TYPES_OF_KV_DTYPE = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "fp8": "q8_0"}

KV_CACHE_DTYPES = {"vllm": VLLM_KV_CACHE_DTYPES, "sglang": SGLANG_KV_CACHE_DTYPES,
                   "llamacpp": LLAMACPP_CACHE_TYPES_OF_KV_DTYPE}


def engine_kv_dtype(engine: str, kv_dtype: str) -> str | None:
    """The engine's flag value for `kv_dtype`: "auto" where vLLM / SGLang use the model's dtype, None where
    llama.cpp has no cache type for it."""
    if engine == "llamacpp":
        return LLAMACPP_CACHE_TYPES_OF_KV_DTYPE.get(kv_dtype)
    return KV_CACHE_DTYPES[engine].get(kv_dtype, "auto")
