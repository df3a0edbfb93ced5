"""How a model is laid out over GPUs: which tensor-parallel sizes it allows, which layers and tensors each
pipeline stage holds, what one TP rank keeps of a tensor, and how many GPUs a node offers.

Data-parallel attention and expert parallelism place a replica's `tp` GPUs as SGLang does
(`--tp T --enable-dp-attention --dp-size D --ep-size E`): attention runs at TP = T / D in each of D
attention-DP groups, each holding its own requests; the routed experts are split E ways, each expert
TP-split T / E ways (whole when E = T). vLLM's `-tp t -dp d --enable-expert-parallel` is the same
placement with T = E = t x d (vllm/model_executor/layers/fused_moe/config.py @ v0.34.0,
FusedMoEParallelConfig.make: "ep_size = tp_size" after flattening TP across DP, MoE tp_size=1).

Every planner path that proposes or checks a TP x PP layout (the estimate's request check, the candidate
search, `planner fit`, the plan-file check) asks these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from planner.catalog.load import Gpu
from planner.model.architecture import Architecture, Layer, Tensor
from planner.estimator.engines.registry import engine as described

# For a card outside the catalog: an HGX/DGX node (catalogs/gpus.yaml gives each catalog card its own)
DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class ParallelLayout:
    """Tensor- and pipeline-parallel sizes of one replica; with data-parallel attention and expert parallelism, the
    attention-DP groups among its tp GPUs, the expert-parallel size and the experts' all-to-all backend."""

    tp: int
    pp: int
    dp: int = 1
    ep: int = 1
    all_to_all: str | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def node_group(self) -> int:
        """The GPUs that must share a node (its NVLink): the attention-TP group, tp / dp (the whole TP group without
        DP attention). The expert all-to-all and the DP groups' gathers may cross nodes, as SGLang runs --tp 16 over
        two 8-GPU nodes."""
        return self.tp // self.dp

    @property
    def name(self) -> str:
        return layout_name(self.tp, self.pp, self.dp, self.ep, self.all_to_all)

    @property
    def expert_parallel(self) -> bool:
        """Of search.layouts' dp_ep family: data-parallel attention, expert parallelism or an all-to-all backend."""
        return (self.dp, self.ep, self.all_to_all) != (1, 1, None)


# --------------------------------------------------------------------------------------------
# Tensor and pipeline parallel sizes


def tensor_parallel_refusal(arch: Architecture, tp: int) -> str | None:
    """Why `tp` cannot split this model (None when it can): attention heads split whole, and KV heads are
    either split or replicated in whole copies (vLLM's rule)."""
    heads = arch.num_attention_heads
    if arch.exact and heads % tp:
        options = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
        return f"{tp} does not divide the model's {heads} attention heads; use one of {options}"
    kv_heads = sorted({layer.attention.kv_heads for layer in arch.layers
                       if layer.attention.kind in ("full", "sliding") and layer.attention.kv_heads})
    for kv in kv_heads:
        if tp % kv and kv % tp:
            return f"{tp} must divide the {kv} KV heads or be a multiple of them (vLLM replicates KV heads only in whole copies)"
    return None


def pipeline_parallel_refusal(arch: Architecture, pp: int) -> str | None:
    if pp > arch.num_layers:
        return f"{pp} stages for {arch.num_layers} layers; use at most {arch.num_layers}"
    return None


def layout_refusal(arch: Architecture, tp: int, pp: int) -> str | None:
    """The first reason the TP x PP layout cannot hold the model, with the flag it concerns."""
    tp_reason = tensor_parallel_refusal(arch, tp)
    if tp_reason:
        return f"--tp: {tp_reason}"
    pp_reason = pipeline_parallel_refusal(arch, pp)
    return f"--pp: {pp_reason}" if pp_reason else None


def data_parallel_refusal(arch: Architecture, tp: int, dp: int) -> str | None:
    """Why `dp` attention-DP groups cannot share `tp` GPUs (None when they can)."""
    if dp < 1:
        return f"must be at least 1 group, got {dp}"
    if tp % dp:
        options = ", ".join(str(d) for d in range(1, tp + 1) if tp % d == 0)
        # sglang/srt/arg_groups/parallel_hook.py @ v0.5.23: "tp_size must be divisible by attn_dp_size"
        return f"{dp} does not divide --tp {tp} (attention runs at TP = tp / dp); use one of {options}"
    if dp > 1 and not arch.exact:
        return "a model known only by its size has no attention/MLP split to place; give its config.json"
    return None


def expert_parallel_refusal(arch: Architecture, tp: int, ep: int) -> str | None:
    """Why the routed experts cannot be split `ep` ways over `tp` GPUs (None when they can)."""
    if ep == 1:
        return None
    if ep < 1:
        return f"must be at least 1, got {ep}"
    if arch.moe is None:
        return f"{arch.name} is a dense model (no routed experts); drop --ep"
    if tp % ep:
        # sglang/srt/model_executor/model_runner_components/moe_ep_setup.py @ v0.5.23: "tp_size must be divisible by ep_size"
        return f"{ep} does not divide --tp {tp} (each expert is TP-split tp / ep ways); use a divisor of {tp}"
    experts = arch.moe.num_experts
    if experts % ep:
        # sglang/srt/layers/moe/token_dispatcher/deepep.py @ v0.5.23: "num_experts % group.size() == 0"
        options = ", ".join(str(d) for d in range(1, tp + 1) if tp % d == 0 and experts % d == 0)
        return f"{ep} does not divide the model's {experts} routed experts; use one of {options}"
    return None


def parallel_refusal(arch: Architecture, tp: int, pp: int, dp: int = 1, ep: int = 1) -> str | None:
    """layout_refusal with data-parallel attention and expert parallelism: the first reason, with its flag."""
    dp_reason = data_parallel_refusal(arch, tp, dp)
    if dp_reason:
        return f"--dp: {dp_reason}"
    ep_reason = expert_parallel_refusal(arch, tp, ep)
    if ep_reason:
        return f"--ep: {ep_reason}"
    if dp == 1:
        return layout_refusal(arch, tp, pp)
    attention_reason = tensor_parallel_refusal(arch, tp // dp)
    if attention_reason:
        return f"--tp / --dp: attention TP {tp // dp}: {attention_reason}"
    return layout_refusal(arch, 1, pp)


def layout_name(tp: int, pp: int, dp: int = 1, ep: int = 1, all_to_all: str | None = None) -> str:
    """`tp 8 x pp 1`, or with DP attention / EP `tp 8 x dp 8 x ep 8 x pp 1`, and `, deepep` with an all-to-all."""
    parts = [f"tp {tp}"] + [f"{name} {size}" for name, size in (("dp", dp), ("ep", ep)) if size > 1]
    return " x ".join(parts + [f"pp {pp}"]) + (f", {all_to_all}" if all_to_all else "")


def searched_tensor_parallel_sizes(arch: Architecture, node: int, limit: int) -> list[int]:
    """TP sizes a search proposes: inside one `node`, at most `limit`, valid for the model; a model known only
    by its size (heads unknown) gets power-of-two sizes, the ones every common head count divides by."""
    sizes = [tp for tp in range(1, min(node, limit) + 1) if tensor_parallel_refusal(arch, tp) is None]
    return sizes if arch.exact else [tp for tp in sizes if tp & (tp - 1) == 0]


def expert_layouts(arch: Architecture, node: int, limit: int, expert_parallel: str,
                   all_to_all: tuple[str | None, ...] = (None,)) -> list[ParallelLayout]:
    """Data-parallel attention and expert-parallel layouts of a MoE model, pp 1, as an engine allows them: tp GPUs
    within a node or whole nodes (at most `limit`), dp attention groups dividing tp with the attention TP (tp / dp)
    inside a node, and ep dividing tp and the routed experts. `expert_parallel` "any" (SGLang: --ep-size any such
    divisor) or "full" (vLLM: --enable-expert-parallel deals the experts over all tp GPUs, or it is off); an
    all-to-all backend (SGLang --moe-a2a-backend) spans the TP group, so it needs ep = tp. The plain TP layouts
    (dp = ep = 1) are the TP x PP search's."""
    if arch.moe is None or not arch.exact:
        return []
    sizes = [tp for tp in range(2, limit + 1) if tp <= node or tp % node == 0]
    out = []
    for tp in sizes:
        divisors = [d for d in range(1, tp + 1) if tp % d == 0]
        eps = divisors if expert_parallel == "any" else [1, tp]
        for dp in divisors:
            for ep in eps:
                for backend in all_to_all:
                    layout = ParallelLayout(tp, 1, dp, ep, backend)
                    if ((dp, ep) == (1, 1) or layout.node_group > node or (backend and ep != tp)
                            or parallel_refusal(arch, tp, 1, dp, ep)):
                        continue
                    out.append(layout)
    return out


def layouts_on_gpus(arch: Architecture, gpus: int, engine: str, node: int) -> list[ParallelLayout]:
    """The TP x PP layouts of exactly `gpus` GPUs the model allows, TP within a `node`-GPU node, most TP first.
    llama.cpp has no tensor parallelism here: it splits layers over the cards (--split-mode layer)."""
    if not described(engine).tensor_parallel:
        candidates = [ParallelLayout(1, gpus)]
    else:
        candidates = [ParallelLayout(tp, gpus // tp) for tp in range(min(gpus, node), 0, -1) if gpus % tp == 0]
    return [c for c in candidates if layout_refusal(arch, c.tp, c.pp) is None]


def node_gpus(card: Gpu | None, cap: int | None = None) -> int:
    """GPUs one node offers for tensor parallelism: the catalog card's node, at most `cap` (a scenario's
    search.max_gpus_per_node)."""
    node = card.gpus_per_node if card else DEFAULT_GPUS_PER_NODE
    return min(node, cap or node)


# --------------------------------------------------------------------------------------------
# What each stage and rank holds


def pipeline_stages(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """Layer ranges per stage, as vLLM's get_pp_indices assigns them (vllm/distributed/utils.py):
    an even split, with the remainder going one layer each to the stages just before the last."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    stages, start = [], 0
    for size in sizes:
        stages.append((start, start + size))
        start += size
    return stages


def tied_lm_head(arch: Architecture) -> tuple[Tensor, ...]:
    """The lm_head a model with tied embeddings computes with: the embedding matrix, read as the output layer."""
    if not arch.tied_embeddings:
        return ()
    return tuple(Tensor("lm_head.weight", t.shape, "lm_head", t.split) for t in arch.embedding)


def model_kv_heads(arch: Architecture) -> int:
    """The KV head count "kv"-split tensors are sharded by."""
    return max((layer.attention.kv_heads for layer in arch.layers), default=0)


def layer_kv_heads(layer: Layer, model_heads: int) -> int:
    """The KV head count a layer's "kv"-split tensors are sharded by: its own (the engines split each layer's
    projections by its heads); the model's for a layer without KV heads, which has no such tensor."""
    return layer.attention.kv_heads or model_heads


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads each TP rank holds: split while tp <= kv_heads, one replicated head beyond."""
    return max(1, kv_heads // tp)


def shard_shape(tensor: Tensor, tp: int, kv_heads: int) -> tuple[int, ...]:
    """The part of `tensor` one TP rank holds."""
    if tp == 1 or tensor.split == "replicated":
        return tensor.shape
    rows, rest = tensor.shape[0], tensor.shape[1:]
    if tensor.split in ("column", "vocab"):
        return (ceil(rows / tp), *rest)
    if tensor.split == "kv":
        heads = kv_heads_per_rank(kv_heads, tp)
        return (rows // kv_heads * heads, *rest)
    if len(rest) == 0:  # a row-parallel layer's 1-D companion is whole on every rank
        return tensor.shape
    return (rows, ceil(rest[0] / tp), *rest[1:])


def rank_share(tensor: Tensor, tp: int, dp: int = 1, ep: int = 1, all_to_all: str | None = None) -> tuple[int, int]:
    """(the TP size `tensor` is sharded by, how many of its `count` copies one rank holds) on a replica of `tp` GPUs
    with `dp` attention-DP groups, `ep`-way expert parallelism and an `all_to_all` backend (None: the experts'
    outputs all-reduced in place); (tp, count) without them. SGLang @ v0.5.23:
      routed experts: count / ep experts, each TP-split tp / ep ways (moe_ep_setup.py: moe_tp_size = tp_size //
        moe_ep_size);
      shared experts: whole on every rank with an all-to-all backend (models/deepseek_v2.py _shared_expert_use_tp1:
        get_moe_a2a_backend().is_deepep() or another a2a backend), else TP-split;
      input embedding: vocab-split over the attention-TP group (layers/vocab_parallel_embedding.py
        get_embedding_tp_kwargs: use_attn_tp_group = is_dp_attention_enabled());
      dense MLP, router and lm_head: over the whole TP group (deepseek_v2.py: mlp parallel_group "tp" unless
        moe_dense_tp_size is 1; ParallelLMHead use_attn_tp_group only with --enable-dp-lm-head);
      attention and everything else in a layer: over the attention-TP group, tp / dp (deepseek_v2.py:
        num_local_heads = num_heads // attn_tp_size)."""
    if tensor.role == "expert":
        return tp // ep, tensor.count // ep
    if "shared_expert" in tensor.name:
        return (1 if all_to_all else tp), tensor.count
    return (tp // dp if on_attention_group(tensor) else tp), tensor.count


def on_attention_group(tensor: Tensor) -> bool:
    """Whether `tensor` runs on the attention-TP group (tp / dp GPUs, each DP group's own tokens) rather than on the
    whole TP group (every token): rank_share's placement, SGLang @ v0.5.23."""
    return not (tensor.role in ("expert", "lm_head", "router") or "shared_expert" in tensor.name
                or tensor.name.startswith("mlp."))


__all__ = ["DEFAULT_GPUS_PER_NODE", "ParallelLayout", "data_parallel_refusal", "expert_layouts", "expert_parallel_refusal",
           "kv_heads_per_rank", "layer_kv_heads", "layout_name", "layout_refusal", "layouts_on_gpus", "model_kv_heads", "node_gpus",
           "on_attention_group",
           "parallel_refusal", "pipeline_parallel_refusal", "pipeline_stages", "rank_share",
           "searched_tensor_parallel_sizes", "shard_shape", "tensor_parallel_refusal", "tied_lm_head"]
