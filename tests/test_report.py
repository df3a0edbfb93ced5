"""planner report: a self-contained page (and Markdown) with the plan, charts, curves and inputs."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planner.catalog.load import load_catalog
from planner.render.report import review_html, review_markdown
from planner.plan.scenario import load_scenario
from planner.plan.review import review_scenario

SCENARIO = Path(__file__).parent.parent / "scenarios" / "8b-budget.yaml"


@pytest.fixture(scope="module")
def review():
    return review_scenario(load_scenario(SCENARIO), load_catalog())


@pytest.fixture(scope="module")
def page(review):
    return review_html(review, SCENARIO.read_text())


def test_page_is_self_contained_and_carries_the_key_numbers(review, page):
    best = review.result.best
    assert page.startswith("<!doctype html>") and page.count("<svg") >= 4  # memory, 2 cost curves, prices
    # nothing to fetch: no scripts, stylesheets or images from elsewhere (xmlns URIs are names, not requests)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page) and "<script" not in page and "<link" not in page
    assert f"${best.usd_per_hour:,.2f}/hour" in page
    assert best.gpu in page and "re-checked by the estimator" in page
    assert "Binding constraints" in page and "cost vs context" in page
    assert "quality_floor: near-lossless" in page  # the scenario text is among the inputs


def test_cost_curves_never_fall_as_the_workload_grows(review):
    for curve in (review.context_costs, review.concurrency_costs):
        fitted = [cost for _, cost in curve if cost is not None]
        assert fitted == sorted(fitted)
    assert dict(review.context_costs)[8192] == review.result.best.usd_per_hour


def test_markdown_has_the_same_tables(review):
    md = review_markdown(review, SCENARIO.read_text())
    assert "**Best plan: $" in md and "| context | $/hour |" in md and "```yaml" in md


def test_cli_writes_html_and_markdown_atomically(tmp_path):
    for name in ("r.html", "r.md"):
        proc = subprocess.run([sys.executable, "-m", "planner.cli", "report", str(SCENARIO), "-o", name],
                              cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.md"]
    bad = subprocess.run([sys.executable, "-m", "planner.cli", "report", str(SCENARIO), "-o", "r.pdf"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 2 and "must end in .html or .md" in bad.stderr


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_page_renders_in_headless_chromium(page, review, tmp_path):
    html_path = tmp_path / "report.html"
    html_path.write_text(page)
    profile = tmp_path / "profile"
    dom = subprocess.run([CHROMIUM, *HEADLESS, f"--user-data-dir={profile}", "--dump-dom", html_path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert f"${review.result.best.usd_per_hour:,.2f}/hour" in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *HEADLESS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                    "--window-size=1200,1600", html_path.as_uri()], capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # not blank: a white page of this size compresses to a few KB; charts and tables do not
    assert len(data) > 30_000


def test_fleet_scenarios_get_a_review_page_too(tmp_path):
    fleet = Path(__file__).parent.parent / "scenarios" / "multi-model-fleet.yaml"
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "report", str(fleet), "-o", "f.html"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "f.html").read_text()
    assert "Fleet: $" in page and "<svg" in page and "chat-70b" in page and "Rented" in page
