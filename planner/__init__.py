"""planner: exact inference memory and the cheapest GPU plan for serving an LLM."""

from planner.api import estimate, solve
from planner.catalog.load import load_catalog

__all__ = ["estimate", "load_catalog", "solve"]
