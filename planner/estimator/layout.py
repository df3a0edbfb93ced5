"""How a model is laid out over GPUs: which tensor-parallel sizes it allows, which layers and tensors each
pipeline stage holds, what one TP rank keeps of a tensor, and how many GPUs a node offers.

Every planner path that proposes or checks a TP x PP layout (the estimate's request check, the candidate
search, `planner fit`, the plan-file check) asks these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from planner.catalog.load import Gpu
from planner.model.architecture import Architecture, Tensor

# For a card outside the catalog: an HGX/DGX node (catalogs/gpus.yaml gives each catalog card its own)
DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class ParallelLayout:
    """Tensor- and pipeline-parallel sizes of one replica."""

    tp: int
    pp: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


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


def searched_tensor_parallel_sizes(arch: Architecture, node: int, limit: int) -> list[int]:
    """TP sizes a search proposes: inside one `node`, at most `limit`, valid for the model; a model known only
    by its size (heads unknown) gets power-of-two sizes, the ones every common head count divides by."""
    sizes = [tp for tp in range(1, min(node, limit) + 1) if tensor_parallel_refusal(arch, tp) is None]
    return sizes if arch.exact else [tp for tp in sizes if tp & (tp - 1) == 0]


def layouts_on_gpus(arch: Architecture, gpus: int, engine: str, node: int) -> list[ParallelLayout]:
    """The TP x PP layouts of exactly `gpus` GPUs the model allows, TP within a `node`-GPU node, most TP first.
    llama.cpp has no tensor parallelism here: it splits layers over the cards (--split-mode layer)."""
    if engine == "llamacpp":
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


__all__ = ["DEFAULT_GPUS_PER_NODE", "ParallelLayout", "kv_heads_per_rank", "layout_refusal", "layouts_on_gpus",
           "model_kv_heads", "node_gpus", "pipeline_parallel_refusal", "pipeline_stages",
           "searched_tensor_parallel_sizes", "shard_shape", "tensor_parallel_refusal", "tied_lm_head"]
