"""planner: exact inference memory and the cheapest GPU plan for serving an LLM."""

from __future__ import annotations

from typing import Any

__all__ = ["estimate", "load_catalog", "solve"]


def __getattr__(name: str) -> Any:
    """The API loads on first use: `planner.cli` (the command) imports only the modules its command needs."""
    if name in ("estimate", "solve"):
        from planner import api

        return getattr(api, name)
    if name == "load_catalog":
        from planner.catalog.load import load_catalog

        return load_catalog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
