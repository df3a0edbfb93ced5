"""The SGLang side of the engine oracle (engine_oracle.py --engine sglang): SGLang v0.5.23's own pool sizing.

For each case planner's SGLang budget gives the resolved start-up settings (mem_fraction_static, chunked prefill, the
decode CUDA-graph batch), the static budget less the weights on each rank, and the pools it derives from that: page
size, bytes per token slot, the recurrent-state pool of a hybrid model and its requests, max_total_num_tokens. SGLang
v0.5.23's own code is handed the same checkpoint config, GPU and memory:

  srt/server_args.py ServerArgs.resolve_once       the resolution pipeline (srt/arg_groups/): memory_hook.py
                                                   handle_gpu_memory_settings (mem_fraction_static, chunked_prefill_size,
                                                   decode max_bs), overrides.py / model_overrides (attention backend,
                                                   page size, swa_full_tokens_ratio, mamba ratios)
  srt/configs/model_config.py ModelConfig          the model as SGLang reads its config.json (hybrid SWA or not, MLA,
                                                   DSA, SGLang's own Qwen3Next / Qwen3.5 / NemotronH configs whose
                                                   mamba2_cache_params give one request's recurrent states)
  srt/mem_cache/kv_cache_configurator.py           KVCacheConfigurator._resolve_memory_pool_config: _profile_available
                                                   _bytes (with _handle_max_mamba_cache for hybrids), config_from_budget
                                                   (pool_configurator.py create_memory_pool_configurator: Default /
                                                   HybridSWA cell size, page rounding), resolve_max_num_reqs

Stubs (SGLang needs a GPU and a loaded model to reach these functions; only what they read is given):
  - The machine: runtime_context.override_platform (SGLang's own switch for this) with an SM90 CUDA GPU's facts;
    torch.cuda.get_device_capability answers (9, 0) (model_hook.py asks torch directly); memory_hook
    .get_device_memory_capacity answers the catalog GPU's memory in MiB (what nvidia-smi's memory.total gives);
    cuda_graph_config.default_prefill_backend answers BREAKABLE, its answer on CUDA (it asks torch, not the override).
  - The checkpoint: the catalog's config.json written to a temporary directory (model_path); no weights, no tokenizer,
    no quantization_config (engine_oracle.checkpoint_config: SGLang registers mxfp4 only where torch sees CUDA).
  - torchvision: a module with the two names SGLang's multimodal configs import at module level (InterpolationMode,
    transforms.functional), made after transformers has cached that torchvision is absent: the PyPI torchvision
    wheel is a CUDA build whose operators do not register against a CPU torch.
  - The loaded model: none. ModelLayerInfo comes from layer_setup.resolve_layer_indices with an empty model object
    (start and end layer: the whole model, pp 1); sliding_window_size from load_model_utils
    .resolve_sliding_window_size without the model's own get_attention_sliding_window_size (it only sets the SWA
    pool's admission check, not its size).
  - GPU memory: kv_cache_configurator.get_available_gpu_memory answers planner's static budget less the weights of
    the rank (budget_bytes - weights_bytes), in GiB, with pre_model_load_memory 0: SGLang's slack pre x (1 -
    mem_fraction_static) is outside planner's budget_bytes already. The WORLD group (read for its cpu_group) is a
    namespace.
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers.utils.import_utils import is_torchvision_available

assert not is_torchvision_available(), "transformers must see no torchvision before the stub below exists"
_torchvision = types.ModuleType("torchvision")
_torchvision.transforms = types.ModuleType("torchvision.transforms")
_torchvision.transforms.functional = types.ModuleType("torchvision.transforms.functional")
_torchvision.transforms.InterpolationMode = type("InterpolationMode", (), {})
_torchvision.transforms.functional.InterpolationMode = _torchvision.transforms.InterpolationMode
for _module in (_torchvision, _torchvision.transforms, _torchvision.transforms.functional):
    sys.modules[_module.__name__] = _module

import sglang.srt.arg_groups.memory_hook as memory_hook  # noqa: E402
import sglang.srt.mem_cache.kv_cache_configurator as kv_cache_configurator  # noqa: E402
import sglang.srt.model_executor.cuda_graph_config as cuda_graph_config  # noqa: E402
from sglang.srt.configs.model_config import AttentionArch, ModelConfig  # noqa: E402
from sglang.srt.mem_cache import kv_cache_dtype  # noqa: E402
from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices  # noqa: E402
from sglang.srt.model_executor.model_runner_components.load_model_utils import resolve_sliding_window_size  # noqa: E402
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (  # noqa: E402
    resolve_spec_aux_hidden_state_config)
from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator  # noqa: E402
from sglang.srt.runtime_context import (get_context, get_exec, get_model, get_parallel, get_schedule,  # noqa: E402
                                        get_spec, override_platform)
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from planner.units import GiB, MiB  # noqa: E402

NAME, RELEASE = "SGLang", "0.5.23"
# model, GPU, TP, context: the catalog's plain GQA, sliding-window (gpt-oss: SGLang's hybrid SWA pool; Gemma 3: not
# one of SGLang's hybrid-SWA architectures), MLA, DSA and hybrid (Gated DeltaNet: Qwen3-Next, Qwen3.5; Mamba-2) models
CASES = (("llama-3.1-8b", "h100-sxm", 1, 32768), ("llama-3.1-70b", "h100-sxm", 4, 32768),
         ("gpt-oss-120b", "h100-sxm", 1, 32768), ("gemma-3-27b", "h100-sxm", 1, 32768),
         ("llama-4-scout", "h100-sxm", 4, 32768),
         ("deepseek-v3", "h200-sxm", 8, 32768), ("deepseek-v3.2", "h200-sxm", 8, 32768),
         ("qwen3-next-80b-a3b", "h100-sxm", 4, 32768), ("qwen3.5-27b", "h100-sxm", 1, 32768),
         ("nemotron-3-nano-30b-a3b", "h100-sxm", 1, 32768))

# An SM90 CUDA machine (H100 / H200), every fact SGLang's platform probes answer
HOPPER = dict(is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False, is_sm90=True,
              is_sm100=False, is_sm100_or_sm110=False, is_sm110=False, is_sm120=False, is_blackwell=False,
              is_hopper_with_cuda_12_3=True, has_amx=False, has_flashinfer=True, device_sm=90, device_capability=(9, 0))
torch.cuda.get_device_capability = lambda *args, **kwargs: HOPPER["device_capability"]
# default_prefill_backend asks sglang.srt.utils.is_cuda (torch), not the platform override: its answer on CUDA
cuda_graph_config.default_prefill_backend = lambda: cuda_graph_config.Backend.BREAKABLE

# Differences whose cause is known, by planner's SGLang profile and (model, figure): the explanation column
_FLOAT_CELL = ("HybridSWAPoolConfigurator keeps the cell as a float, full + 0.8 x sliding bytes (pool_configurator.py:786); "
               "planner's layout shows it in whole bytes (PoolLayout.page_bytes) and divides by the exact cell "
               "(sglang.py _cell): max_total_num_tokens agrees")
EXPLAINED: dict[str, dict[tuple[str, str], str]] = {"0.5.23": {
    (model, "cell_bytes"): _FLOAT_CELL for model in ("gpt-oss-120b", "llama-4-scout")}}


def describe(case, budget) -> str:
    rank = min(budget.per_rank, key=lambda r: r.budget_bytes - r.weights_bytes)
    return (f"SGLang {case.model} on {case.gpu} TP{case.tp}, context {case.context}: {rank.budget_bytes - rank.weights_bytes:,}"
            f" B of static budget less weights per rank ({budget.release})")


def _server_args(config: dict, case, path: Path) -> ServerArgs:
    """SGLang's own resolution of its defaults for this checkpoint on this GPU (published as the process's config)."""
    (path / "config.json").write_text(json.dumps(config))
    args = ServerArgs(model_path=str(path), tp_size=case.tp, context_length=case.context, device="cuda")
    args.resolve_once()
    get_context().set_server_args(args)
    return args


def _configurator(args: ServerArgs) -> kv_cache_configurator.KVCacheConfigurator:
    """The KVCacheConfigurator ModelRunner.init_kv_cache_configurator builds (model_runner.py), for one TP rank."""
    model = ModelConfig.from_server_args(args)
    spec = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
    resolved, dtype = kv_cache_dtype.configure_kv_cache_dtype(
        server_args_kv_cache_dtype=get_model().kv_cache_dtype, model=None, model_dtype=model.dtype,
        is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None,
        speculative_draft_kv_cache_dtype=get_spec().speculative_draft_kv_cache_dtype)
    return kv_cache_configurator.KVCacheConfigurator(
        device="cuda", gpu_id=0, attn_dp_size=get_parallel().attn_dp_size, pp_size=1,
        pp_group=SimpleNamespace(world_size=1), model=None, model_config=model, server_args=args,
        kv_cache_dtype=dtype, kv_cache_dtype_str=resolved or get_model().kv_cache_dtype, model_dtype=model.dtype,
        page_size=get_schedule().page_size, sliding_window_size=resolve_sliding_window_size(None, model),
        spec_algorithm=spec, is_draft_worker=False, post_capture_kv_active=False,
        spec_aux_config=resolve_spec_aux_hidden_state_config(server_args=args, model_config=model,
                                                             spec_algorithm=spec, is_draft_worker=False),
        is_hybrid_swa=model.is_hybrid_swa, is_hybrid_swa_compress=model.is_hybrid_swa_compress,
        use_mla_backend=model.attention_arch == AttentionArch.MLA,
        layer_info=resolve_layer_indices(model=SimpleNamespace(), model_config=model, is_draft_worker=False),
        forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None, memory_pool_config=None)


def engine_side(case, config: dict, budget, gpu) -> dict[str, float]:
    """SGLang's figures for planner's checkpoint, GPU and static budget less weights."""
    rank = min(budget.per_rank, key=lambda r: r.budget_bytes - r.weights_bytes)
    memory_hook.get_device_memory_capacity = lambda device=None: gpu.memory_bytes // MiB
    kv_cache_configurator.get_available_gpu_memory = lambda *args, **kwargs: (rank.budget_bytes - rank.weights_bytes) / GiB
    with override_platform(**HOPPER), tempfile.TemporaryDirectory(prefix="oracle-sglang-") as path:
        args = _server_args(config, case, Path(path))
        kvc = _configurator(args)
        with get_parallel().override(world_group=SimpleNamespace(cpu_group=None)):
            pools = kvc._resolve_memory_pool_config(pre_model_load_memory=0)
        schedule = get_schedule()
        figures = {"mem_fraction_static": schedule.mem_fraction_static,
                   "chunked_prefill_size": schedule.chunked_prefill_size,
                   "cuda_graph_max_bs": get_exec().graph.cuda_graph_config.decode.max_bs,
                   "page_size": schedule.page_size,
                   "cell_bytes": round(create_memory_pool_configurator(kvc)._cell_size, 2),
                   "max_total_num_tokens": pools.max_total_num_tokens}
        if kvc.mambaish_config is not None:
            figures |= {"state_bytes_per_request": kvc.mambaish_config.mamba2_cache_params.mamba_cache_per_req,
                        "state_slots": schedule.max_mamba_cache_size,
                        "max_running_requests": pools.max_running_requests}
    return figures


def planner_side(budget) -> dict[str, float]:
    layout, settings = budget.layout, budget.settings
    return {"mem_fraction_static": settings.mem_fraction_static, "chunked_prefill_size": settings.max_num_batched_tokens,
            "cuda_graph_max_bs": settings.max_num_seqs, "page_size": layout.block_size, "cell_bytes": layout.page_bytes,
            "max_total_num_tokens": budget.kv_cache_capacity_tokens,
            "state_bytes_per_request": layout.state_bytes * sum(g.layers for g in layout.groups if g.kind == "state"),
            "state_slots": layout.state_slots, "max_running_requests": layout.running_requests}
