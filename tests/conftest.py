import os
import tempfile
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
