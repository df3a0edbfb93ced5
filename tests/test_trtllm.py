"""The TensorRT-LLM profile: KvCacheCreator's and KVCacheManager's arithmetic by hand, its refusals, its exports."""

import shlex
from dataclasses import replace

import pytest
import yaml

from planner import api, solve
from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.estimator.engines import EngineSettings, engine_budget, registry
from planner.estimator.engines.need import engine_need
from planner.estimator.memory import GpuTarget, Request
from planner.render.export import TARGETS, export, load_plan
from planner.render.records import solve_json
from planner.units import MiB

from engine_fixtures import arch, h100  # noqa: F401  (fixtures)

CATALOG = load_catalog()
H100_VISIBLE = (81559 - 468) * MiB  # nvidia-smi's 81,559 MiB less the driver's reserve: 85,030,076,416 B
CONTEXT_MIB = 522  # the CUDA context (engine_profiles.yaml cuda.context_mib)
LLAMA_8B_WEIGHTS = 16_060_522_496  # bf16, one rank
LLAMA_8B_KV_PER_TOKEN = 32 * 2 * 8 * 128 * 2  # layers x K,V x KV heads x head_dim x 2 bytes = 131,072
# trtllm-serve's flags (tensorrt_llm/commands/serve.py click options at v1.2.1) the export may pass
TRTLLM_SERVE_FLAGS = {"--backend", "--host", "--port", "--tp_size", "--pp_size", "--max_seq_len", "--max_batch_size",
                      "--max_num_tokens", "--kv_cache_free_gpu_memory_fraction", "--extra_llm_api_options"}


def trtllm(**settings):
    return EngineSettings(name="trtllm", **settings)


def test_llama_8b_on_an_h100_as_kv_cache_creator_sizes_it(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192), trtllm(), h100, catalog)
    # the profiling forward of max_num_tokens 8,192 tokens: 4 hidden buffers (4,096) + gate_up and activated halves of
    # the MLP (3 x 14,336), in bf16: (8,192 x 4 x 4,096 + 8,192 x 3 x 14,336) x 2
    assert budget.activation_bytes == (8192 * 4 * 4096 + 8192 * 3 * 14336) * 2 == 973_078_528
    assert budget.non_torch_bytes == CONTEXT_MIB * MiB == 547_356_672
    assert budget.budget_bytes == H100_VISIBLE == 85_030_076_416
    assert budget.weights_bytes == LLAMA_8B_WEIGHTS
    # KV memory = 0.9 x (85,030,076,416 - 547,356,672 - 16,060,522,496 - 973,078,528) = 0.9 x 67,449,118,720
    #           = 60,704,206,848 B; max_tokens = // 131,072 = 463,136; ceil(463,136 / 32) = 14,473 blocks
    assert budget.kv_cache_capacity_tokens == 14_473 * 32 == 463_136
    assert budget.kv_pool_bytes == 463_136 * LLAMA_8B_KV_PER_TOKEN == 60_704_161_792
    assert budget.max_concurrency == pytest.approx(14_473 / 256)  # 8,192 tokens hold 256 blocks of 32
    assert budget.fits and budget.message is None and budget.release == "v1.2.1"
    assert (budget.settings.gpu_memory_utilization, budget.settings.block_size, budget.settings.max_num_seqs,
            budget.settings.max_num_batched_tokens) == (0.9, 32, 2048, 8192)
    assert budget.layout.block_size == 32 and budget.layout.page_bytes == 32 * 4096


def test_an_fp8_cache_takes_one_byte_a_value(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192, kv_dtype="fp8"), trtllm(), h100, catalog)
    # 60,704,206,848 // 65,536 = 926,272 tokens = 28,946 blocks of 32
    assert budget.kv_cache_capacity_tokens == 926_272 and budget.kv_pool_bytes == 926_272 * 65_536


def test_tensor_parallel_ranks_split_the_mlp_and_add_nccl(arch, h100, catalog):
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=8192, tp=2), trtllm(), h100, catalog)
    assert budget.activation_bytes == (8192 * 4 * 4096 + 8192 * 3 * 7168) * 2 == 620_756_992
    assert budget.non_torch_bytes == (CONTEXT_MIB + 1000) * MiB  # + NCCL (distributed_init_mib)
    per_token = LLAMA_8B_KV_PER_TOKEN // 2  # 4 of the 8 KV heads on each rank
    memory = (H100_VISIBLE - budget.non_torch_bytes - budget.weights_bytes - budget.activation_bytes) * 9 // 10
    blocks = -(-(memory // per_token) // 32)
    assert budget.kv_cache_capacity_tokens == blocks * 32 and len(budget.per_rank) == 2


def test_a_context_beyond_the_pool_lowers_max_seq_len(arch, catalog):
    card = GpuTarget.from_catalog(catalog.gpus.get("rtx-4090"))  # 24,564 MiB, 24,096 MiB as CUDA reports it
    budget = engine_budget(arch("llama-3.1-8b"), Request(context=131072), trtllm(), card, catalog)
    # 0.9 x (25,266,487,296 - 547,356,672 - 16,060,522,496 - 973,078,528) = 6,916,976,640 B: 52,772 tokens, rounded up
    # to 1,650 blocks of 32 (KVCacheManager's ceil)
    assert budget.kv_cache_capacity_tokens == 52_800 and not budget.fits
    assert budget.max_context_that_fits == 52_800
    assert budget.message.startswith("TensorRT-LLM's 1,650 blocks hold 52,800 tokens, fewer than max_seq_len 131,072: "
                                     "it lowers max_seq_len to 52,800")


def test_a_batch_beyond_the_pool_waits_and_max_batch_size_caps_it(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    budget = engine_budget(llama, Request(context=131072, batch=4), trtllm(), h100, catalog)
    # 14,473 blocks / 4,096 blocks per 131,072-token request = 3.53 requests
    assert budget.max_concurrency == pytest.approx(14_473 / 4096) and not budget.fits
    assert budget.message == ("TensorRT-LLM starts, but its 14,473 blocks of 32 tokens hold 3.53 requests of 131,072 "
                              "tokens at once, fewer than --batch 4; the others wait in the queue")
    need = engine_need(llama, Request(context=8192, batch=8), trtllm(max_num_seqs=4), h100, catalog)
    assert not need.fits and need.reason == "trtllm runs at most max_num_seqs = 4 sequences at once, not 8"


def test_its_flags_and_what_it_refuses(arch, h100, catalog):
    llama = arch("llama-3.1-8b")
    smaller = engine_budget(llama, Request(context=8192), trtllm(gpu_memory_utilization=0.5, block_size=64), h100, catalog)
    # 0.5 x 67,449,118,720 = 33,724,559,360 B: 257,297 tokens, 4,021 blocks of 64
    assert smaller.kv_cache_capacity_tokens == 4021 * 64
    for settings, message in ((trtllm(gpu_memory_utilization=1.0), r"^--gpu-memory-utilization / engine.gpu_memory_util"
                                                                    r"ization: 1.0 is TensorRT-LLM's free_gpu_memory_fraction"),
                              (trtllm(block_size=48), r"^--block-size: TensorRT-LLM's tokens_per_block must be a power of two")):
        with pytest.raises(PlannerInputError, match=message):
            engine_budget(llama, Request(context=8192), settings, h100, catalog)
    with pytest.raises(PlannerInputError, match=r"^--kv-dtype: TensorRT-LLM keeps the KV cache in a 16-bit dtype or fp8"):
        engine_budget(llama, Request(context=8192, kv_dtype="fp32"), trtllm(), h100, catalog)
    with pytest.raises(PlannerInputError, match=r"^--engine trtllm: qwen3-next-80b-a3b has gated_delta_net layers"):
        engine_budget(arch("qwen3-next-80b-a3b"), Request(context=8192), trtllm(), h100, catalog)
    with pytest.raises(PlannerInputError, match=r"^--engine-version / engine.version: TensorRT-LLM 1.0.0 has no profile "
                                                r"in planner; use one of 1.2.1 \(default 1.2.1\)$"):
        engine_budget(llama, Request(context=8192), trtllm(version="1.0.0"), h100, catalog)
    assert engine_budget(llama, Request(context=8192), trtllm(version="v1.2.1"), h100, catalog).settings.version == "1.2.1"


def test_the_registry_lists_it_under_its_names():
    assert registry.engine_names()[-1] == "trtllm" and registry.export_targets()[-3:] == ("trtllm", "skypilot", "kubernetes")
    assert registry.canonical("TensorRT-LLM") == registry.canonical("trt-llm") == "trtllm"
    assert registry.label("trtllm") == "TensorRT-LLM" and "trtllm" in TARGETS


def test_perf_sizes_its_scheduler_with_this_profile():
    result = api.perf("llama-3.1-8b", gpu="h100-sxm", engine="tensorrt-llm", concurrency=16, catalog=CATALOG)
    # max-model-len 1,280 (1,024 + 256): the logits of 7 dummy requests stay below the forward's peak, so the pool is
    # the 8,192-context one above
    assert result.closed_loop.pool_tokens == 463_136 and result.engine == "tensorrt-llm"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("p") / "plan.json"
    path.write_text(solve_json(solve({
        "name": "trt 8b", "model": "llama-3.1-8b", "workload": {"context": 32768, "concurrency": 8, "replicas": 2},
        "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"], "kv_dtypes": ["fp8"]}, "engine": {"name": "trtllm"}})))
    return path


def test_a_scenario_plans_with_it(plan_file):
    plan = load_plan(plan_file, CATALOG)
    assert plan.configuration.engine.name == "trtllm" and plan.configuration.engine.version == "1.2.1"
    assert plan.gpu == "h100-sxm" and plan.replicas == 2


def test_the_trtllm_serve_command(plan_file):
    text = export(load_plan(plan_file, CATALOG), "trtllm")
    lines = text.splitlines()
    assert lines[0] == ("# TensorRT-LLM 1.2.1 (the release the plan was checked against): the image "
                        "nvcr.io/nvidia/tensorrt-llm/release:1.2.1")
    assert lines[1:6] == ["cat > extra-llm-api-options.yaml <<'EOF'", "kv_cache_config:", "  tokens_per_block: 32",
                          "  dtype: fp8", "EOF"]
    argv = shlex.split(lines[6])
    assert argv[:2] == ["trtllm-serve", "meta-llama/Llama-3.1-8B-Instruct"]
    flags = dict(zip(argv[2::2], argv[3::2]))
    assert set(flags) <= TRTLLM_SERVE_FLAGS
    assert flags == {"--backend": "pytorch", "--host": "0.0.0.0", "--port": "8000", "--tp_size": "1", "--pp_size": "1",
                     "--max_seq_len": "32768", "--max_batch_size": "8", "--max_num_tokens": "8192",
                     "--kv_cache_free_gpu_memory_fraction": "0.90",
                     "--extra_llm_api_options": "extra-llm-api-options.yaml"}


def test_kubernetes_runs_the_ngc_image_with_its_options(plan_file):
    config, deployment = yaml.safe_load_all(export(load_plan(plan_file, CATALOG), "kubernetes"))
    assert config["kind"] == "ConfigMap"
    assert yaml.safe_load(config["data"]["extra-llm-api-options.yaml"]) == {
        "kv_cache_config": {"tokens_per_block": 32, "dtype": "fp8"}}
    assert deployment["kind"] == "Deployment" and deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"
    assert container["command"][:2] == ["trtllm-serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert container["command"][-2:] == ["--extra_llm_api_options", "/etc/trtllm/extra-llm-api-options.yaml"]
    assert container["ports"] == [{"containerPort": 8000}] and container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert pod["volumes"][0] == {"name": "options", "configMap": {"name": config["metadata"]["name"]}}


def test_export_refuses_what_trtllm_serve_cannot_run(plan_file):
    plan = load_plan(plan_file, CATALOG)
    amd = replace(plan, vendor="amd", configuration=replace(plan.configuration, gpu="mi300x"))
    with pytest.raises(PlannerInputError, match=r"^--to trtllm: TensorRT-LLM runs on NVIDIA GPUs only"):
        export(amd, "trtllm")
    gguf = replace(plan, weights=CATALOG.precisions.get("q4_k_m"),
                   configuration=replace(plan.configuration, precision="q4_k_m"))
    with pytest.raises(PlannerInputError, match=r"^--to trtllm: TensorRT-LLM does not load GGUF files \(q4_k_m\)"):
        export(gguf, "trtllm")
    fp8 = replace(plan, weights=CATALOG.precisions.get("fp8"), configuration=replace(plan.configuration, precision="fp8"))
    with pytest.raises(PlannerInputError, match=r"^--checkpoint: TensorRT-LLM does not quantize weights to fp8 on load"):
        export(fp8, "trtllm")
    nf4 = replace(plan, weights=CATALOG.precisions.get("nf4"), configuration=replace(plan.configuration, precision="nf4"))
    with pytest.raises(PlannerInputError, match=r"^--checkpoint: TensorRT-LLM does not quantize weights to nf4 on load"):
        export(nf4, "trtllm")
    assert "trtllm-serve nvidia/Llama-3.1-8B-Instruct-FP8 " in export(fp8, "trtllm", checkpoint="nvidia/Llama-3.1-8B-Instruct-FP8")
    several = replace(plan, nodes_per_replica=2)
    with pytest.raises(PlannerInputError, match=r"^--to trtllm: this plan spans several nodes"):
        export(several, "trtllm")


def test_a_plan_made_with_another_engine_keeps_its_kubernetes_manifest_and_may_still_export_trtllm(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(solve_json(solve({"model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 4},
                                      "search": {"gpus": ["h100-sxm"], "precisions": ["bf16"]}})))
    plan = load_plan(path, CATALOG)
    assert yaml.safe_load(export(plan, "kubernetes"))["spec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "vllm/vllm-openai:")
    assert "--kv_cache_free_gpu_memory_fraction 0.90" in export(plan, "trtllm")  # TensorRT-LLM's own default


def test_a_plan_timed_on_the_trtllm_moe_backend_tells_trtllm_serve_to_run_it(tmp_path):
    """engine.moe_kernel flashinfer_trtllm on TensorRT-LLM is its TRTLLM MoE backend (bench/SPEED_PROTOCOL.md, the
    amendment on TensorRT-LLM's TRTLLM MoE backend): the plan is timed on it and its options file sets moe_config;
    the same plan without it sets none."""
    scenario = {"name": "trt ds", "model": "deepseek-v3", "workload": {"context": 4096, "concurrency": 8},
                "search": {"gpus": ["b200"], "precisions": ["fp8-block"], "kv_dtypes": ["fp8"]}}
    options = {}
    for kernel in ("flashinfer_trtllm", None):
        engine = {"name": "trtllm", **({"moe_kernel": kernel} if kernel else {})}
        path = tmp_path / f"{kernel}.json"
        path.write_text(solve_json(solve({**scenario, "engine": engine})))
        plan = load_plan(path, CATALOG)
        assert plan.configuration.engine.moe_kernel == kernel
        lines = export(plan, "trtllm").splitlines()
        start, end = lines.index("cat > extra-llm-api-options.yaml <<'EOF'"), lines.index("EOF")
        options[kernel] = yaml.safe_load("\n".join(lines[start + 1:end]))
    assert options["flashinfer_trtllm"] == {**options[None], "moe_config": {"backend": "TRTLLM"}}
    assert "moe_config" not in options[None]


def test_the_kubernetes_manifest_of_a_trtllm_plan_told_its_moe_backend_carries_it(tmp_path):
    """TensorRT-LLM's own manifest starts trtllm-serve, so a plan timed on its TRTLLM MoE backend exports to Kubernetes
    with moe_config in the options ConfigMap; a SkyPilot task starts vLLM, which would not run that kernel: refused."""
    path = tmp_path / "plan.json"
    path.write_text(solve_json(solve({
        "name": "trt ds", "model": "deepseek-v3", "workload": {"context": 4096, "concurrency": 8},
        "search": {"gpus": ["b200"], "precisions": ["fp8-block"], "kv_dtypes": ["fp8"]},
        "engine": {"name": "trtllm", "moe_kernel": "flashinfer_trtllm"}})))
    plan = load_plan(path, CATALOG)
    config, _ = yaml.safe_load_all(export(plan, "kubernetes"))
    assert yaml.safe_load(config["data"]["extra-llm-api-options.yaml"])["moe_config"] == {"backend": "TRTLLM"}
    with pytest.raises(PlannerInputError, match="--to skypilot: the plan was timed on trtllm's 'flashinfer_trtllm'"):
        export(plan, "skypilot")
