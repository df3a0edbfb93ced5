"""Hosted-API list prices (catalogs/hosted_prices.yaml) and a fleet's cost against them (issue 24, item 2)."""

import html
import json
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
import yaml

from planner import api
from planner.catalog.load import catalog_dir, load_catalog
from planner.catalog.prices import Offer, price_age
from planner.errors import PlannerInputError
from planner.plan.fleet import fleet_problem, plan_fleet
from planner.plan.hosted import workload_costs
from planner.render.html import fleet_html
from planner.render.markdown import fleet_markdown, md
from planner.render.records import fleet_json
from planner.render.summary import fleet_price_warnings, hosted_lines

CATALOG = load_catalog()
SCENARIOS = Path(__file__).parents[1] / "scenarios"
EVERYTHING_STALE, NOTHING_STALE = 0, 10**6  # days


def _plan(name: str, max_price_age_days: int | None = None):
    problem = fleet_problem(api.load_scenario(SCENARIOS / name, max_price_age_days), CATALOG)
    return plan_fleet(problem, CATALOG, explain=False)


@pytest.fixture(scope="module")
def chat():
    return {days: _plan("70b-chat.yaml", days) for days in (EVERYTHING_STALE, NOTHING_STALE)}


# --- the catalog ---------------------------------------------------------------------------------------

def test_every_shipped_row_names_a_catalog_model_and_cites_the_compilation():
    rows = CATALOG.hosted_prices
    assert len(rows) >= 20 and {r.model for r in rows} >= {"llama-3.3-70b", "gpt-oss-120b", "gpt-oss-20b"}
    for r in rows:
        assert CATALOG.models.get(r.model).name == r.model
        assert "model_prices_and_context_window_backup.json @ litellm 1.110.2" in r.source and r.as_of == "2026-11-20"
        assert f"input_cost_per_token {r.input_usd_per_million_tokens / 1e6:g}" in r.source
        assert f"output_cost_per_token {r.output_usd_per_million_tokens / 1e6:g}" in r.source
        assert (r.variant == "Turbo") == r.endpoint.endswith("-Turbo")
        if r.variant:  # a Turbo endpoint may serve a lower precision: the row says so
            assert "lower precision" in r.note


@pytest.mark.parametrize("change, message", [
    ({"input_usd_per_million_tokens": "1.04"}, "hosted_prices[0].input_usd_per_million_tokens: Input should be a valid number"),
    ({"output_usd_per_million_tokens": 0}, "hosted_prices[0].output_usd_per_million_tokens: Input should be greater than 0"),
    ({"colour": "green"}, "hosted_prices[0].colour: Extra inputs are not permitted"),
    ({"as_of": "2026-13-01"}, "hosted_prices[0].as_of: Value error, '2026-13-01' is not a date: write YYYY-MM-DD"),
    ({"as_of": None}, "hosted_prices[0].as_of: Input should be a valid string"),
    ({"source": "a\nb"}, "hosted_prices[0].source: Value error, holds a line break, a control character or a lone surrogate"),
    ({"model": "llama-9"}, "hosted_prices[0].model: unknown model 'llama-9': "),
    ({"model": "meta-llama/Llama-3.3-70B-Instruct"},
     "hosted_prices[0].model: write the catalog name 'llama-3.3-70b', not 'meta-llama/Llama-3.3-70B-Instruct'"),
])
def test_a_bad_row_is_refused_in_one_line_naming_the_key(tmp_path, change, message):
    folder = tmp_path / "c"
    shutil.copytree(catalog_dir(), folder, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    path = folder / "hosted_prices.yaml"
    data = yaml.safe_load(path.read_text())
    data["hosted_prices"][0].update(change)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlannerInputError) as caught:
        load_catalog(str(folder)).hosted_prices
    assert str(caught.value).startswith(f"catalog hosted_prices.yaml: {message}") and "\n" not in str(caught.value)


def test_a_missing_key_and_a_repeated_row_are_refused(tmp_path):
    folder = tmp_path / "c"
    shutil.copytree(catalog_dir(), folder, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    path = folder / "hosted_prices.yaml"
    data = yaml.safe_load(path.read_text())
    del data["hosted_prices"][1]["source"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlannerInputError, match=r"^catalog hosted_prices.yaml: hosted_prices\[1\].source: Field required$"):
        load_catalog(str(folder)).hosted_prices
    data = yaml.safe_load((catalog_dir() / "hosted_prices.yaml").read_text())
    data["hosted_prices"].append(dict(data["hosted_prices"][0]))
    path.write_text(yaml.safe_dump(data))
    last = len(data["hosted_prices"]) - 1
    with pytest.raises(PlannerInputError, match=rf"^catalog hosted_prices.yaml: hosted_prices\[{last}\]: prices together "
                                                r"meta-llama/Llama-3.3-70B-Instruct-Turbo for llama-3.3-70b again "
                                                r"\(hosted_prices\[0\]\); keep one row$"):
        load_catalog(str(folder)).hosted_prices


# --- the comparison ------------------------------------------------------------------------------------

def test_70b_chat_against_a_hand_count(chat):
    """scenarios/70b-chat.yaml: 3 requests/s of 1,500 prompt and 400 reply tokens: 3 x 1,500 x 3,600 = 16.2 M input
    and 3 x 400 x 3,600 = 4.32 M output tokens an hour, priced at the list prices of catalogs/hosted_prices.yaml."""
    plan = chat[NOTHING_STALE]
    by_hand = {  # $/hour: 16.2 x input price + 4.32 x output price
        ("deepinfra", "Turbo"): 16.2 * 0.10 + 4.32 * 0.32,  # 3.0024
        ("deepinfra", None): 16.2 * 0.23 + 4.32 * 0.40,  # 5.454
        ("fireworks", None): 16.2 * 0.90 + 4.32 * 0.90,  # 18.468
        ("together", "Turbo"): 16.2 * 1.04 + 4.32 * 1.04,  # 21.3408
    }
    got = {(h.price.provider, h.price.variant): h for h in plan.hosted}
    assert list(got) == list(by_hand)  # cheapest hosted first
    for key, usd in by_hand.items():
        h = got[key]
        assert (h.input_tokens_per_hour, h.output_tokens_per_hour) == (16_200_000, 4_320_000)
        assert h.usd_per_hour == pytest.approx(usd, abs=1e-4)
        assert h.fleet_usd_per_hour == plan.usd_per_hour  # one workload: the whole fleet is its cost
        assert h.ratio == pytest.approx(plan.usd_per_hour / usd, abs=1e-4)
    [line] = hosted_lines(plan)
    assert line.startswith("Hosted API list prices for llama-3.3-70b at 70b-chat's traffic (16.20M input + 4.32M "
                           f"output tokens/h): self-hosting (${plan.usd_per_hour:,.2f}/h) costs "
                           f"{plan.usd_per_hour / 3.0024:,.2f}x deepinfra Turbo ($3.00/h), ")
    assert f"{plan.usd_per_hour / 21.3408:,.2f}x together Turbo, deprecated 2026-10-22 ($21.34/h)" in line
    assert f"\n{md(line)}\n" in fleet_markdown("70b-chat", plan)
    assert f"<p>{html.escape(line)}</p>" in fleet_html("70b-chat", plan, "")


def test_the_json_carries_each_comparison(chat):
    plan = chat[NOTHING_STALE]
    rows = json.loads(fleet_json(plan, "70b-chat"))["hosted_comparison"]
    assert len(rows) == len(plan.hosted) == 4
    for row, h in zip(rows, plan.hosted):
        assert {k: row[k] for k in ("provider", "model", "usd_per_hour", "ratio", "as_of", "age_days", "stale", "source")} == {
            "provider": h.price.provider, "model": "llama-3.3-70b", "usd_per_hour": h.usd_per_hour, "ratio": h.ratio,
            "as_of": "2026-11-20", "age_days": (date.today() - date(2026, 11, 20)).days, "stale": h.price_age.stale,
            "source": h.price.source}
        assert row["workload"] == "70b-chat" and row["fleet_usd_per_hour"] == plan.usd_per_hour


def test_a_stale_hosted_price_warns_in_every_format(chat):
    stale, fresh = chat[EVERYTHING_STALE], chat[NOTHING_STALE]
    assert all(h.price_age.stale for h in stale.hosted) and not any(h.price_age.stale for h in fresh.hosted)
    warnings = [w for w in fleet_price_warnings(stale) if "hosted list price" in w]
    assert len(warnings) == 4 and warnings[0].startswith(
        "70b-chat: the hosted list price of deepinfra Turbo for llama-3.3-70b is ")
    assert all("past the 0-day limit" in w for w in warnings)
    assert f"- warning: {warnings[0]}" in fleet_markdown("x", stale) and ", stale)" in hosted_lines(stale)[0]
    assert all(row["stale"] for row in json.loads(fleet_json(stale, "x"))["hosted_comparison"])
    assert not any("hosted list price" in w for w in fleet_price_warnings(fresh)) and ", stale" not in hosted_lines(fresh)[0]


def test_hosted_and_rental_prices_age_by_one_rule():
    hosted = CATALOG.hosted_prices[0]
    offer = Offer(provider="x", instance="y", gpu="h100-sxm", gpus=1, region="all", kind="list", on_demand_usd_per_hour=1.0,
                  as_of=hosted.as_of, source="test")
    for today in (date(2027, 2, 18), date(2027, 2, 19)):  # 90 and 91 days after 2026-11-20
        rental, listed = price_age(offer, "on-demand", 90, today), hosted.age(90, today)
        assert (listed.age_days, listed.stale) == (rental.age_days, rental.stale)
    assert hosted.age(90, date(2027, 2, 18)).stale is False and hosted.age(90, date(2027, 2, 19)).stale is True


def test_the_cli_limit_reaches_the_comparison():
    done = subprocess.run([sys.executable, "-m", "planner.cli", "solve", str(SCENARIOS / "70b-chat.yaml"),
                           "--format", "json", "--max-price-age", "0"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["hosted_comparison"]
    assert rows and all(row["stale"] for row in rows)


def test_a_shared_fleet_splits_its_cost_over_its_workloads():
    plan = _plan("multi-model-fleet.yaml")
    costs = workload_costs(plan.assignments, plan.pools)
    assert sum(costs.values()) == pytest.approx(plan.usd_per_hour, abs=1e-3)
    for h in plan.hosted:  # each workload's comparison is against its own share of the fleet
        assert h.fleet_usd_per_hour == pytest.approx(costs[h.workload], abs=1e-4)
    assert len(hosted_lines(plan)) == len({h.workload for h in plan.hosted}) >= 2


def test_the_fleet_report_lists_each_hosted_price_with_its_source(chat):
    from planner.plan.review import FleetReview
    from planner.render.html import fleet_review_html
    from planner.render.markdown import fleet_review_markdown

    plan = chat[NOTHING_STALE]
    review = FleetReview(plan=plan, traffic_costs=(), offers=(), catalog_counts={})
    text = fleet_review_markdown("70b-chat", review, "")
    assert "### Hosted API list prices" in text
    for h in plan.hosted:
        assert (f"| 70b-chat | {md(h.price.label)} | {md(h.price.endpoint)} | {h.price.input_usd_per_million_tokens:g} | "
                f"{h.price.output_usd_per_million_tokens:g} | {h.usd_per_hour:g} | {h.ratio:g} | 2026-11-20 |") in text
        assert md(h.price.source) in text
    page = fleet_review_html("70b-chat", review, "")
    assert "<h2>Hosted API list prices</h2>" in page and page.count("model_prices_and_context_window_backup.json") == 4
