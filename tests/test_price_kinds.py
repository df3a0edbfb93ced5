"""Price kinds (issue 24): every price row says whether it is a provider's list price, a marketplace's "from" price or
a quote; scenarios choose which kinds count (pricing.kinds), and plans say the kind of each price they pay."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.api import plan_fleet, solve
from planner.catalog.load import load_catalog
from planner.catalog.prices import load_offers
from planner.errors import PlannerInputError
from planner.plan.scenario import parse_scenario

CATALOG = load_catalog()
SCENARIOS = Path(__file__).parents[1] / "scenarios"
GLM = yaml.safe_load((SCENARIOS / "glm-5-nvfp4-b200.yaml").read_text())


def test_the_shipped_rows_are_classified_by_their_sources():
    kinds = {(o.provider, o.instance, o.region): o.kind for o in CATALOG.offers}
    # research notes and blog posts are quotes, not list prices
    for o in CATALOG.offers:
        if "cliffcenter.com/research" in o.source or "kaelresearch.com/blog" in o.source:
            assert o.kind == "quote", (o.provider, o.instance)
    assert kinds[("coreweave", "HGX B200 8x", "unspecified")] == "quote"
    assert kinds[("tensorwave", "MI300X", "unspecified")] == "quote"
    # akash's "starting at" prices and vast's marketplace median are marketplace prices
    assert {o.kind for o in CATALOG.offers if o.provider in ("akash", "vast")} == {"marketplace"}
    # a provider's pricing page, first-hand or through a catalog that cites it, is its list price
    assert kinds[("lambda", "gpu_1x_gh200", "all")] == "list"
    assert kinds[("gcp", "a2-highgpu-1g", "us-central1")] == "list"


def test_an_unknown_kind_in_the_catalog_is_one_line_naming_the_field(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "prices": [
        {"provider": "lambda", "instance": "x", "gpu": "gh200", "gpus": 1, "region": "all", "kind": "retail",
         "on_demand_usd_per_hour": 1.0, "as_of": "2026-09-25", "source": "test"}]}))
    with pytest.raises(PlannerInputError, match=r"^catalog prices.yaml: prices\[0\].kind: Input should be 'list', "
                                                r"'marketplace' or 'quote'$"):
        load_offers(path, CATALOG.gpus)
    del_kind = yaml.safe_load(path.read_text())
    del del_kind["prices"][0]["kind"]
    path.write_text(yaml.safe_dump(del_kind))
    with pytest.raises(PlannerInputError, match=r"prices\[0\].kind: Field required"):
        load_offers(path, CATALOG.gpus)


def test_an_unknown_kind_in_a_scenario_is_exit_2_naming_the_field(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**GLM, "pricing": {"kinds": ["list", "retail"]}}))
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "solve", str(path)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    assert proc.stderr == ("error: scenario s.yaml: pricing.kinds.1: Input should be 'list', 'marketplace' or "
                           "'quote'\n")
    with pytest.raises(PlannerInputError, match="pricing.kinds: List should have at least 1 item"):
        parse_scenario({**GLM, "pricing": {"kinds": []}})


def test_every_kind_counts_by_default_and_a_plan_says_which_it_pays():
    # the only 8-GPU B200 instance priced is CoreWeave's, read from a blog post: a quote
    result = solve(GLM)
    best = result.best
    assert (best.provider, best.instance, best.price_kind, best.usd_per_hour) == (
        "coreweave", "HGX B200 8x", "quote", 68.80)
    assert best.price_terms == "on-demand, quote price"
    assert result.rows()[0]["price_kind"] == "quote"


def test_list_prices_only_leave_the_b200_scenario_without_an_offer_and_say_why():
    result = solve({**GLM, "pricing": {"market": "on-demand", "kinds": ["list"]}})
    # its list-priced B200s (lambda, runpod, nebius, hyperstack) are 1-GPU rentals, which no replica spans (only
    # 8-GPU nodes are networked for it): GLM-5 needs the 8-GPU instance, priced only by a quote
    assert result.best is None
    assert {o.gpus for o in CATALOG.offers if o.gpu == "b200" and o.kind == "list"} == {1}
    only_marketplace = solve({**GLM, "pricing": {"kinds": ["marketplace"], "providers": ["coreweave"]}})
    assert "price kinds marketplace" in only_marketplace.infeasible.reason


def test_a_fleet_names_the_kind_of_each_pool_in_json_and_markdown(tmp_path):
    fleet = plan_fleet(SCENARIOS / "70b-chat.yaml")
    [use] = fleet.pools
    assert use.pool.label == "lambda gpu_1x_gh200 (all, on-demand, list price)"
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "solve", str(SCENARIOS / "70b-chat.yaml"), "--format",
                           "json", "-o", str(out)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(out.read_text())
    assert [p["price_kind"] for p in plan["pools"]] == ["list"]
    assert [a["price_kind"] for a in plan["assignments"]] == ["list"]
    from planner.render.markdown import fleet_markdown

    assert "lambda gpu_1x_gh200 (all, on-demand, list price)" in fleet_markdown("70b-chat", fleet)
