"""Fixtures the engine and fit tests share: catalog models as architectures, and the H100 the v0.19 logs ran on."""

import pytest

from planner.model.architecture import architecture_from_config
from planner.estimator.memory import GpuTarget


@pytest.fixture(scope="module")
def arch(catalog):
    def build(name):
        record = catalog.models.get(name)
        return architecture_from_config(record.config, record.name)
    return build


@pytest.fixture(scope="module")
def h100(catalog):
    return GpuTarget.from_catalog(catalog.gpus.get("h100-sxm"))
