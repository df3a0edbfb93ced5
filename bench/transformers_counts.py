#!/usr/bin/env python3
"""Record transformers' own parameter count of every test config, for tests/test_families.py.

Run once, in a throwaway environment with torch and transformers (not planner's test environment):

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install -e ".[transformers]" timm
    /tmp/tfvenv/bin/python bench/transformers_counts.py   # writes tests/data/transformers-counts.json
    /tmp/tfvenv/bin/python bench/transformers_counts.py kimi-linear-48b-a3b   # (re)counts one folder into it

(recorded with transformers 5.24.0 and torch 2.14.1 from PyPI; both versions are written into the file; timm
1.0.31 builds Gemma 3n's MobileNetV5 vision tower, which transformers takes from timm)

Each config is built on the meta device (planner.model.transformers_fallback.meta_tensors: shapes only,
no weights, no remote code). `parameters` is what model.parameters() holds (tied weights once);
`buffers` the persistent buffers the checkpoint also stores (e.g. DeepSeek's e_score_correction_bias).
Model_types transformers does not register are built as the code their checkpoints declare: Kimi K2
("kimi_k2", DeepseekV3ForCausalLM with DeepSeek-V3's modelling code) as deepseek_v3, and MiMo-7B ("mimo",
whose modeling_mimo.py subclasses Qwen2ForCausalLM and adds MTP layers) as qwen2, without the MTP layers.
MiniMax-M3's text checkpoint ("minimax_m3", MiniMaxM3ForCausalLM) is built as the decoder transformers ships for
the M3 family, minimax_m3_vl_text (MiniMaxM3VLForCausalLM), which the VL checkpoint nests under text_config.
"""

from __future__ import annotations

import json
import sys
from math import prod
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.model.transformers_fallback import meta_tensors  # noqa: E402

CONFIGS = ROOT / "tests" / "data" / "configs"
OUT = ROOT / "tests" / "data" / "transformers-counts.json"
# model_type transformers does not register -> the one whose code the checkpoint declares
DECLARED_CODE = {"kimi_k2": "deepseek_v3", "mimo": "qwen2", "minimax_m3": "minimax_m3_vl_text"}
# ... and the class that builds it, where the checkpoint's declared architecture is not a transformers class
DECLARED_CLASS = {"minimax_m3": "MiniMaxM3VLForCausalLM"}


def count(config: dict) -> dict | None:
    model_type = config.get("model_type")
    config = dict(config, model_type=DECLARED_CODE.get(model_type, model_type))
    if model_type in DECLARED_CLASS:
        config["architectures"] = [DECLARED_CLASS[model_type]]
    tensors = meta_tensors(config)
    if tensors is None:
        return None
    params = sum(prod(shape) for _, shape, is_parameter in tensors if is_parameter)
    return {"parameters": params, "buffers": sum(prod(shape) for _, shape, _ in tensors) - params}


def main(names: list[str]) -> int:
    """Count every test config, or only the folders named (merged into the recorded file; an entry counted
    with other transformers / torch versions than the file's records its own)."""
    import torch
    import transformers
    versions = {"transformers_version": transformers.__version__, "torch_version": torch.__version__}
    recorded = json.loads(OUT.read_text()) if names else {}
    counts = recorded.get("counts", {})
    paths = [CONFIGS / n / "config.json" for n in names] if names else sorted(CONFIGS.glob("*/config.json"))
    for path in paths:
        result = count(json.loads(path.read_text()))
        if result is None:
            print(f"{path.parent.name}: transformers cannot build it", file=sys.stderr)
            continue
        if names:
            result.update({k: v for k, v in versions.items() if recorded.get(k) != v})
        counts[path.parent.name] = result
        print(f"{path.parent.name}: {result['parameters']:,} parameters + {result['buffers']:,} buffer elements")
    if names:
        OUT.write_text(json.dumps({**recorded, "counts": dict(sorted(counts.items()))}, indent=1) + "\n")
        return 0
    import timm  # builds Gemma 3n's vision tower for transformers
    OUT.write_text(json.dumps({**versions, "timm_version": timm.__version__, "device": "meta", "counts": counts},
                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
