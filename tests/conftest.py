import os
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

# the catalog parse cache goes to a folder of this run, not the user's ~/.cache
os.environ.setdefault("PLANNER_CACHE_DIR", tempfile.mkdtemp(prefix="planner-cache-"))

from planner.catalog.load import load_catalog

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


def without_delta_prefill(perf):
    """The catalog with no engine's Gated DeltaNet prefill kernels: those layers timed by their projections alone."""
    return replace(perf, generations=tuple(
        replace(g, engines={name: replace(own, gated_delta_prefill=()) for name, own in g.engines.items()})
        for g in perf.generations))
