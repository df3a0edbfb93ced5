"""Hostile input, round 3: files written that were not asked for, price sources that hang or break later
commands, exports that launch what was not checked, names that reach a terminal, page, chart, Markdown or CSV
as something other than text.

Each test is a reproducer from the issue that failed before its fix.
"""

import os
import shutil
from pathlib import Path

import pytest


from planner.catalog.load import catalog_dir, load_catalog
from planner.catalog.price_update import update_prices
from planner.catalog.skypilot import load_skypilot

REPO = Path(__file__).resolve().parent.parent
SKYPILOT_FIXTURE = REPO / "tests" / "data" / "skypilot-catalog"
CATALOG = load_catalog()
SKYPILOT = load_skypilot()
VAST_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region\n"
H200_INFO = "\"{'Gpus': [{'Name': 'H200', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 143771}}], 'TotalGpuMemoryInMiB': 143771}\""


def vast_row(instance="1x-H200-32-65536", count="1", info=H200_INFO, price="2.65", spot="0.00", region="France") -> str:
    return f"{instance},H200,{count},32,64.0,{info},{price},{spot},{region}\n"


@pytest.fixture
def prices_copy(tmp_path):
    path = tmp_path / "prices.yaml"
    shutil.copy(catalog_dir() / "prices.yaml", path)
    return path


def vast_catalog(tmp_path, *rows: str) -> Path:
    folder = tmp_path / "catalog-v8"
    (folder / "vast").mkdir(parents=True)
    (folder / "vast" / "vms.csv").write_text(VAST_HEADER + "".join(rows))
    return folder


def update(source, prices, **options):
    return update_prices(str(source), ("vast",), CATALOG, SKYPILOT, prices, options.pop("as_of", "2026-11-30"), **options)


# --- finding 1: every file planner writes goes through its one output writer ---------------------

def test_prices_update_does_not_follow_a_link_planted_at_a_temporary_name(prices_copy, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / ".prices.yaml.tmp").symlink_to(victim)
    update(SKYPILOT_FIXTURE, prices_copy)
    assert victim.read_text() == "keep me\n"
    assert "1x-H200-32-65536" in prices_copy.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".prices.yaml.tmp", "prices.yaml", "victim.txt"]


def test_prices_update_through_a_link_keeps_the_link(prices_copy, tmp_path):
    link = tmp_path / "link.yaml"
    link.symlink_to(prices_copy)
    update(SKYPILOT_FIXTURE, link)
    assert link.is_symlink() and "1x-H200-32-65536" in prices_copy.read_text()
