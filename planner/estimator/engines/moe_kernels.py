"""How a server is told to run a fused-MoE kernel other than the one its release picks, and which experts that reaches.

SGLang takes the kernel by name (`--moe-runner-backend NAME`); the kernel tables then decide whether it is timed for
the experts' format. vLLM has no such flag: an environment variable switches one kernel on for the experts its code
sends there, and nothing else (bench/SPEED_PROTOCOL.md, the amendment on the kernel a run states). TensorRT-LLM takes a
backend in its LLM API options (`moe_config: {backend: NAME}`); the one planner times besides the tables' own is
TRTLLM, its trtllm-gen MoE, measured in SGLang's tables of FlashInfer's copy of it (the amendment on TensorRT-LLM's
TRTLLM MoE backend).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoeKernelSwitch:
    environment: tuple[tuple[str, str], ...]  # what the server is started with
    precisions: tuple[str, ...]  # the experts the switch reaches (planner precision names)
    source: str


VLLM_SWITCHES = {
    "flashinfer_trtllm": MoeKernelSwitch(
        environment=(("VLLM_USE_FLASHINFER_MOE_INT4", "1"),), precisions=("int4-g32",),
        source="vLLM 0.21.0 quantization/utils/flashinfer_mxint4_moe.py:24-31 (the variable, on compute capability "
               "10.x) and compressed_tensors_moe/compressed_tensors_moe_wna16_marlin.py:79-83 (group_size 32, 4 bits: "
               "compressed-tensors int4 experts; AWQ and GPTQ run their own Marlin methods)"),
}


# planner's kernel name -> TensorRT-LLM's MoeConfig.backend that runs it (tensorrt_llm/llmapi/llm_args.py MoeConfig:
# CUTLASS by default; TRTLLM is TRTLLMGenFusedMoE)
TRTLLM_BACKENDS = {"flashinfer_trtllm": "TRTLLM"}


def switch_refusal(engine: str, kernel: str, precision: str) -> str | None:
    """Why `engine` cannot be told to run `kernel` for experts in `precision` (None: it can)."""
    if engine == "trtllm" and kernel not in TRTLLM_BACKENDS:
        return (f"TensorRT-LLM has no MoE backend planner times as {kernel!r}; use "
                f"{' or '.join(TRTLLM_BACKENDS)} (moe_config backend {'/'.join(TRTLLM_BACKENDS.values())}), or drop it")
    if engine != "vllm":
        return None
    switch = VLLM_SWITCHES.get(kernel)
    if switch is None:
        return f"vLLM has no switch to {kernel!r}; use {' or '.join(VLLM_SWITCHES)}, or drop it"
    if precision not in switch.precisions:
        names = " ".join(f"{name}={value}" for name, value in switch.environment)
        return (f"vLLM's switch to {kernel!r} ({names}) reaches {' and '.join(switch.precisions)} experts only, "
                f"not {precision}; drop it")
    return None


__all__ = ["MoeKernelSwitch", "TRTLLM_BACKENDS", "VLLM_SWITCHES", "switch_refusal"]
