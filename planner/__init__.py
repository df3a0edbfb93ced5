"""planner: exact inference memory and the cheapest GPU plan for serving an LLM."""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["estimate", "load_catalog", "plan_day", "plan_fleet", "solve"]


def __getattr__(name: str) -> Any:
    """The API loads on first use, so `planner.cli` imports only the modules its command needs; `planner.api`,
    `planner.catalog` ... load when first named, as `import planner` used to load them."""
    if name in ("estimate", "plan_day", "plan_fleet", "solve"):
        return getattr(import_module("planner.api"), name)
    if name == "load_catalog":
        return import_module("planner.catalog.load").load_catalog
    if not name.startswith("_"):
        try:
            return import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
