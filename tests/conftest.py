from pathlib import Path

import pytest

from planner.catalog.load import load_catalog

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()
