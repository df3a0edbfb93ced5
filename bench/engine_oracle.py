"""An oracle from the engines' own code (issue 21, item 2): planner's KV layout against the engines' own functions.

For each case (catalog model, GPU, TP, context) planner's engine budget (planner.estimator.engines.engine_budget) gives
the KV memory of each worker and the layout planner derives from it. The same memory is handed to the engine's own
sizing functions, called with stubbed contexts (no GPU, no model loaded), and each figure is compared:

  --engine vllm    (default) oracle_vllm.py: vLLM v0.34.0's KV-cache grouping, page-size alignment, block count,
                   "GPU KV cache size" and "Maximum concurrency" (kv_cache_planning.py / kv_cache_utils.py)
  --engine sglang  oracle_sglang.py: SGLang v0.5.23's own server-argument resolution (mem_fraction_static, chunked
                   prefill, page size) and pool sizing (KVCacheConfigurator: the mamba state pool, the pool
                   configurators' cell size and max_total_num_tokens, max_running_requests)

Each row: planner's figure, the engine's, the difference and what explains it. A difference is explained only when
the engine's module names its cause (EXPLAINED, by planner's profile); the exit code is 1 when any difference is left
unexplained. `--version` compares another of planner's profiles of that engine with the same engine functions.

Run it in a venv holding the engines (see bench/ENGINE_ORACLE.md); it is not imported by planner nor run by tests.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from planner.catalog.load import load_catalog  # noqa: E402
from planner.estimator.engines import EngineSettings, engine_budget  # noqa: E402
from planner.estimator.memory import GpuTarget, Request  # noqa: E402
from planner.model.sources import resolve_model  # noqa: E402

# --engine: the module holding that engine's side (CASES, EXPLAINED, RELEASE, engine_side, planner_side)
ENGINES = {"vllm": "oracle_vllm", "sglang": "oracle_sglang"}


@dataclass(frozen=True)
class Case:
    model: str  # catalog name
    gpu: str  # catalog name
    tp: int
    context: int


@dataclass(frozen=True)
class Row:
    version: str  # planner's profile of the engine
    model: str
    figure: str
    planner: float
    engine: float
    explanations: dict  # the engine module's EXPLAINED

    @property
    def differs(self) -> bool:
        return self.planner != self.engine

    @property
    def explanation(self) -> str:
        if not self.differs:
            return ""
        return self.explanations.get(self.version, {}).get((self.model, self.figure), "UNEXPLAINED")


def checkpoint_config(catalog, model: str) -> dict:
    """The checkpoint's config.json as the catalog holds it, without its quantization_config: the KV layout does not
    depend on the weights' format (and the engines' quantization registries need a GPU to import their kernels)."""
    config = next(m for m in catalog.models if m.name == model).config
    return {key: value for key, value in config.items() if key != "quantization_config"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), default="vllm")
    parser.add_argument("--version", default=None,
                        help="planner's profile of the engine to compare (default: planner's default profile)")
    args = parser.parse_args(argv)
    side = importlib.import_module(ENGINES[args.engine])
    catalog = load_catalog()
    rows = []
    for case in side.CASES:
        case = Case(*case)
        arch = resolve_model(catalog, case.model)
        gpu = GpuTarget.from_catalog(catalog.gpus.get(case.gpu))
        budget = engine_budget(arch, Request(context=case.context, tp=case.tp),
                               EngineSettings(args.engine, version=args.version), gpu, catalog)
        ours, theirs = side.planner_side(budget), side.engine_side(case, checkpoint_config(catalog, case.model), budget, gpu)
        print(side.describe(case, budget))
        rows += [Row(budget.settings.version, case.model, figure, ours[figure], theirs[figure], side.EXPLAINED)
                 for figure in ours if figure in theirs]
    print("\n| engine | model | figure | planner | engine function | difference | explanation |\n"
          "|---|---|---|---:|---:|---:|---|")
    for row in rows:
        print(f"| {side.NAME.lower()} {side.RELEASE} | {row.model} | {row.figure} | {row.planner:,} | {row.engine:,} | "
              f"{row.planner - row.engine:+,.2f} | {row.explanation} |")
    unexplained = [row for row in rows if row.explanation == "UNEXPLAINED"]
    print(f"\n{sum(row.differs for row in rows)} differences, {len(unexplained)} unexplained")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
