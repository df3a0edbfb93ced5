"""The stale-price warning (pricing.max_price_age_days / --max-price-age): one rule, printed wherever a price is."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner import api
from planner.errors import PlannerInputError
from planner.plan.review import Review
from planner.plan.scenario import parse_scenario
from planner.render.html import fleet_html, review_html
from planner.render.markdown import fleet_markdown, solve_markdown
from planner.render.records import compare_frame, fleet_json, fleet_rows, rows_csv, solve_json

SCENARIOS = Path(__file__).parents[1] / "scenarios"
EVERYTHING_STALE, NOTHING_STALE = 0, 10**6  # days: every shipped price is older than 0 days and younger than 10**6


@pytest.fixture(scope="module")
def fleets():
    return {days: api.plan_fleet(api.load_scenario(SCENARIOS / "70b-chat.yaml", days))
            for days in (EVERYTHING_STALE, NOTHING_STALE)}


@pytest.fixture(scope="module")
def singles():
    return {days: api.solve(api.load_scenario(SCENARIOS / "8b-budget.yaml", days))
            for days in (EVERYTHING_STALE, NOTHING_STALE)}


def test_a_fleet_warns_of_a_stale_price_in_every_format(fleets):
    stale, fresh = fleets[EVERYTHING_STALE], fleets[NOTHING_STALE]
    [use] = stale.pools
    assert use.price_age.stale and "past the 0-day limit" in use.price_age.warning
    pool = json.loads(fleet_json(stale, "x"))["pools"][0]
    assert pool["price_age"]["as_of"] == use.pool.offer.as_of and pool["price_age"]["stale"] is True
    assert pool["price_age"]["age_days"] == use.price_age.age_days > 0
    assert f"- warning: {use.pool.label}: the on-demand price" in fleet_markdown("x", stale)
    assert "warning: " in fleet_html("x", stale, "")
    assert {row["price_stale"] for row in csv.DictReader(io.StringIO(rows_csv(fleet_rows(stale))))} == {"True"}
    # the same plan under a limit it meets: the same ages, no warning anywhere
    assert [u.price_age.age_days for u in fresh.pools] == [use.price_age.age_days]
    assert "warning" not in fleet_markdown("x", fresh) and "warning" not in fleet_html("x", fresh, "")
    assert json.loads(fleet_json(fresh, "x"))["pools"][0]["price_age"]["stale"] is False


def test_a_single_plan_and_its_alternatives_carry_their_price_age(singles):
    stale, fresh = singles[EVERYTHING_STALE], singles[NOTHING_STALE]
    plans = [stale.best, *stale.alternatives]
    assert all(p.price_age.stale for p in plans) and not any(p.price_age.stale for p in [fresh.best, *fresh.alternatives])
    best = json.loads(solve_json(stale))
    assert best["best"]["price_age"]["stale"] is True and best["best"]["price_age"]["as_of"] == stale.best.price_as_of
    assert [p["price_stale"] for p in best["plans"]] == [True] * len(plans)
    assert f"Warning: the {stale.best.market} price of" in solve_markdown(stale)
    assert f"{stale.best.price_age.age_days:,} d, stale |" in solve_markdown(stale)
    assert "Warning:" not in solve_markdown(fresh) and ", stale" not in solve_markdown(fresh)
    review = Review(result=stale, context_costs=(), concurrency_costs=(), offers=(), binding=(), catalog_counts={})
    assert "warning: the " in review_html(review, "") and ", stale" in review_html(review, "")


def test_compare_flags_each_stale_row():
    for days, stale in ((EVERYTHING_STALE, True), (NOTHING_STALE, False)):
        frame = compare_frame(api.compare("llama-3.1-8b", gpus=["l4", "l40s"], max_price_age_days=days))
        assert len(frame) and set(frame["price_stale"]) == {stale} and (frame["price_age_days"] > 0).all()


def test_the_cli_setting_reaches_the_plan():
    def solve(*flags: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "planner.cli", "solve", str(SCENARIOS / "8b-budget.yaml"),
                               "--format", "json", *flags], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["best"]["price_age"]

    assert solve("--max-price-age", "0")["stale"] is True
    assert solve("--max-price-age", str(NOTHING_STALE))["stale"] is False


def test_a_negative_limit_is_refused_naming_the_key():
    with pytest.raises(PlannerInputError, match=r"pricing\.max_price_age_days: Input should be greater than or equal to 0"):
        parse_scenario({"model": "llama-3.1-8b", "workload": {"context": 4096}, "pricing": {"max_price_age_days": -1}})
