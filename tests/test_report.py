"""planner report: a self-contained page (and Markdown) with the plan, charts, curves and inputs."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planner.catalog.load import load_catalog
from planner.render.html import review_html
from planner.render.markdown import review_markdown
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


FLEET = Path(__file__).parent.parent / "scenarios" / "70b-chat.yaml"


@pytest.fixture(scope="module")
def fleet_review():
    from planner.plan.review import review_fleet

    return review_fleet(load_scenario(FLEET), load_catalog())


def test_a_fleet_report_has_the_single_reports_sections(fleet_review):
    """issue 24: the fleet report had no cost curves, no provider-price table and no catalog sizes."""
    from planner.plan.review import TRAFFIC_SWEEP
    from planner.render.html import fleet_review_html
    from planner.render.markdown import fleet_review_markdown

    catalog, plan = load_catalog(), fleet_review.plan
    # the curve: the fleet at every workload's demand x 0.25 ... x 8, the plan itself at x 1, never cheaper for more
    curve = dict(fleet_review.traffic_costs)
    assert tuple(curve) == TRAFFIC_SWEEP and curve[1.0] == plan.usd_per_hour
    costs = [cost for cost in curve.values() if cost is not None]
    assert costs == sorted(costs) and len(costs) == len(TRAFFIC_SWEEP)
    # every price the catalog holds for the GPU types the fleet rents (70b-chat: gh200 only)
    assert {u.pool.offer.gpu for u in plan.pools} == {"gh200"}
    assert len(fleet_review.offers) == sum(1 for o in catalog.offers if o.gpu == "gh200"
                                           for market in ("on-demand", "spot") if o.price(market))
    assert fleet_review.catalog_counts == {"gpus": len(catalog.gpus), "models": len(catalog.models),
                                           "precisions": len(catalog.precisions), "offers": len(catalog.offers)}
    text = fleet_review_markdown("70b-chat", fleet_review, FLEET.read_text())
    assert "### Load per replica" in text and "### Cost vs traffic" in text and "### Provider prices for gh200" in text
    assert f"| 1 | {plan.usd_per_hour:,.2f} |" in text and f"| 8 | {curve[8.0]:,.2f} |" in text
    assert f"Catalogs: {len(catalog.gpus)} gpus, {len(catalog.models)} models" in text and "```yaml" in text
    page = fleet_review_html("70b-chat", fleet_review, FLEET.read_text())
    for section in ("Replicas", "Load per replica", "Memory per GPU", "Rented", "How the cost moves",
                    "Provider prices for gh200", "Inputs"):
        assert f"<h2>{section}</h2>" in page
    assert page.count("<svg") == 3 and "cost vs traffic" in page  # memory, the traffic curve, prices
    assert "<th>batch</th>" not in page  # a fleet's replicas hold one request of the context each: no "batch 1"


def test_a_fleet_reports_curve_names_the_points_the_time_limit_left_out(monkeypatch):
    from planner.plan import review

    solve = review.plan_fleet

    def cut_at_x8(problem, catalog, explain=True, cache=None, deadline=None):
        if problem.workloads[0].buckets[0].requests_per_s > 20:  # 70b-chat: 3 req/s, x 8 = 24
            raise deadline.out_of_time("the points before it", "the scenario")
        return solve(problem, catalog, explain, cache, deadline)

    monkeypatch.setattr(review, "plan_fleet", cut_at_x8)
    cut = review.review_fleet(load_scenario(FLEET), load_catalog())
    assert [times for times, _ in cut.traffic_costs] == [0.25, 0.5, 1.0, 2.0, 4.0]
    assert cut.cut_short.startswith("the 30 s time limit (--time-limit, solver.time_limit_s) ran out before 1 of 6 "
                                    "cost-curve points were solved, left out: traffic x8; raise --time-limit")
