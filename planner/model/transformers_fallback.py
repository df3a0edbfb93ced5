"""An exact count for an architecture planner has no family for, from transformers' own modelling code.

With the optional extra (pip install "planner[transformers]"), the model is built on torch's meta device
(shapes only: no weights are allocated or downloaded) and every parameter and persistent buffer becomes a
planner Tensor. Without the extra, or when transformers does not know the model_type either, nothing is
returned and the caller keeps today's route (safetensors header or --params). planner's own families are
never sent here: they need neither torch nor the seconds a model build takes.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from planner.model.families.core import Architecture, Layer, Role, Split, Tensor

LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# module names that belong to vision / audio towers and their projectors, not to the language model
MULTIMODAL = re.compile(r"vision|visual|audio|vit\.|mm_projector|multi_modal_projector|embed_vision|merger")


def transformers_available() -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def meta_tensors(config: dict[str, Any]) -> list[tuple[str, tuple[int, ...], bool]] | None:
    """(name, shape, is a parameter) of every parameter and persistent buffer the transformers model holds,
    tied weights once; None when transformers cannot build this config. Remote code is never run (auto_map
    is dropped)."""
    import torch
    import transformers

    data = {k: v for k, v in config.items() if k not in ("auto_map", "quantization_config")}
    model_type = data.pop("model_type", None)
    try:
        cfg = transformers.AutoConfig.for_model(model_type, **data)
        declared = (config.get("architectures") or [None])[0]
        model_class = getattr(transformers, declared, None) if isinstance(declared, str) else None
        with torch.device("meta"):
            if model_class is not None:
                model = model_class(cfg)
            elif "vision_config" in data:
                model = transformers.AutoModelForImageTextToText.from_config(cfg)
            else:
                model = transformers.AutoModelForCausalLM.from_config(cfg)
    except (ValueError, KeyError, TypeError, AttributeError, ImportError):
        return None
    persistent = set(model.state_dict().keys())
    tensors = [(n, tuple(p.shape), True) for n, p in model.named_parameters()]
    tensors += [(n, tuple(b.shape), False) for n, b in model.named_buffers() if n in persistent]
    return tensors


def _tensor(name: str, shape: tuple[int, ...], multimodal: bool) -> Tensor:
    role: Role
    split: Split = "replicated"
    count = 1
    if multimodal:
        role = "projector" if re.search(r"projector|merger", name) else "vision"
    elif "embed_tokens" in name or name.endswith("embeddings.weight"):
        role, split = "embedding", "vocab"
    elif name.startswith("lm_head"):
        role, split = "lm_head", "vocab"
    elif ".experts." in name:
        role, split = "expert", "column"
        if len(shape) == 3:  # fused experts: (experts, out, in)
            count, shape = shape[0], shape[1:]
    elif re.search(r"(mlp|moe)\.(gate|router)\b|router\.", name):
        role = "router"
    elif len(shape) == 1:
        role = "norm"
    else:
        role, split = "linear", "column"
    return Tensor(name, shape, role, split, count)


def architecture_from_transformers(config: dict[str, Any], shape: Architecture) -> Architecture | None:
    """The exact tensors of `shape` (a size-only Architecture carrying the cache layout) from transformers."""
    found = meta_tensors(config)
    if found is None:
        return None
    per_layer: dict[int, list[Tensor]] = {}
    embedding: list[Tensor] = []
    head: list[Tensor] = []
    multimodal: list[Tensor] = []
    for name, dims, _ in found:
        if MULTIMODAL.search(name):
            multimodal.append(_tensor(name, dims, True))
            continue
        t = _tensor(name, dims, False)
        match = LAYER_INDEX.search(name)
        if match and int(match.group(1)) < shape.num_layers:
            per_layer.setdefault(int(match.group(1)), []).append(replace(t, name=name[match.end():]))
        elif t.role == "embedding":
            embedding.append(t)
        else:
            head.append(t)
    layers = tuple(Layer(layer.attention, tuple(per_layer.get(i, ())), is_moe=any(
        t.role == "expert" for t in per_layer.get(i, ()))) for i, layer in enumerate(shape.layers))
    return replace(shape, layers=layers, embedding=tuple(embedding), head=tuple(head), multimodal=tuple(multimodal),
                   tied_embeddings=not any(t.role == "lm_head" for t in head), exact=True, declared_params=None)
