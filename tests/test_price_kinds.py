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


# --- committed terms ----------------------------------------------------------------------------

A100_8B = {"model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 8},
           "search": {"gpus": ["a100-40gb"], "precisions": ["bf16"], "kv_dtypes": ["auto"]},
           "pricing": {"providers": ["gcp"]}}


def test_a_commitment_is_its_own_offer_beside_the_on_demand_one():
    a2 = {(o.term, o.on_demand_usd_per_hour) for o in CATALOG.offers if (o.provider, o.instance) == ("gcp", "a2-highgpu-1g")}
    # Cyclenerd's pricing.yml: month_1y 1689.3711392 and month_3y 938.56707798 over 730 hours
    assert a2 == {(None, 3.673385), ("1y", round(1689.3711392 / 730, 6)), ("3y", round(938.56707798 / 730, 6))}
    a3 = {o.term: o for o in CATALOG.offers if (o.provider, o.instance) == ("gcp", "a3-highgpu-8g")}
    assert a3["1y"].on_demand_usd_per_hour == round(44810.08066464 / 730, 6) == 61.383672
    assert a3["3y"].on_demand_usd_per_hour == round(28370.99821392 / 730, 6) == 38.864381
    assert all(o.source and o.as_of == "2026-07-30" and o.spot_usd_per_hour is None for o in a3.values() if o.term)


def test_a_commitment_row_is_priced_by_its_hourly_rate_alone(tmp_path):
    path = tmp_path / "prices.yaml"
    row = {"provider": "gcp", "instance": "x", "gpu": "a100-40gb", "gpus": 1, "region": "r", "kind": "list",
           "term": "1y", "on_demand_usd_per_hour": 2.0, "spot_usd_per_hour": 1.0, "as_of": "2026-07-30", "source": "t"}
    path.write_text(yaml.safe_dump({"schema_version": 1, "prices": [row]}))
    with pytest.raises(PlannerInputError, match=r"^catalog prices.yaml: prices\[0\]: Value error, a 1y commitment is priced by "
                                                r"on_demand_usd_per_hour \(its hourly rate\) alone; give spot prices on a "
                                                r"row without a term$"):
        load_offers(path, CATALOG.gpus)
    path.write_text(yaml.safe_dump({"schema_version": 1, "prices": [{**row, "term": "2y", "spot_usd_per_hour": None}]}))
    with pytest.raises(PlannerInputError, match=r"prices\[0\].term: Input should be '1m', '1y' or '3y'"):
        load_offers(path, CATALOG.gpus)
    # two rows of one commitment on one date are refused as two on-demand rows are
    path.write_text(yaml.safe_dump({"schema_version": 1, "prices": [{**row, "spot_usd_per_hour": None}] * 2}))
    with pytest.raises(PlannerInputError, match=r"both price the 1y committed offer gcp x \(r\)"):
        load_offers(path, CATALOG.gpus)


def test_commitments_count_only_when_the_scenario_names_their_term():
    on_demand = solve(A100_8B).best
    assert (on_demand.instance, on_demand.price_term, on_demand.usd_per_hour) == ("a2-highgpu-1g", None, 3.6734)
    committed = solve({**A100_8B, "pricing": {"providers": ["gcp"], "terms": ["1y", "3y"]}})
    best = committed.best
    assert (best.instance, best.price_term, best.usd_per_hour) == ("a2-highgpu-1g", "3y", 1.2857)
    assert best.price_terms == "3y committed, list price"
    assert committed.rows()[0]["price_term"] == "3y" and committed.rows()[0]["market"] == "on-demand"
    one_year = solve({**A100_8B, "pricing": {"providers": ["gcp"], "terms": ["1y"]}}).best
    assert (one_year.price_term, one_year.usd_per_hour) == ("1y", 2.3142)


def test_terms_with_spot_only_are_refused():
    with pytest.raises(PlannerInputError, match="^scenario: pricing: terms: a commitment is priced as on-demand "
                                                "capacity, and market is spot; set market: on-demand or any, or remove "
                                                "terms$"):
        parse_scenario({**A100_8B, "pricing": {"market": "spot", "terms": ["1y"]}})


def test_a_committed_pool_is_paid_every_hour_of_a_day_profile():
    from planner.api import plan_day

    day_fleet = {**A100_8B, "workload": {"context": 8192, "concurrency": 8, "traffic": {
        "profile": [{"hour": 0, "requests_per_s": 0.5}, {"hour": 12, "requests_per_s": 4.0}],
        "prompt_tokens": 1000, "output_tokens": 200}, "slo": {"tpot_s": 0.05}}}
    scaled = plan_fleet(day_fleet)
    assert {u.pool.offer.term for u in scaled.pools} == {None}
    day = plan_day(day_fleet, scaled)
    assert day.saving_usd_per_day > 0  # on demand, the night runs fewer instances
    committed = {**day_fleet, "pricing": {"providers": ["gcp"], "terms": ["1y"]}}
    plan = plan_fleet(committed)
    assert {u.pool.offer.term for u in plan.pools} == {"1y"}
    assert [u.pool.label for u in plan.pools][0].endswith("(us-central1, 1y committed, list price)")
    day = plan_day(committed, plan)
    # a commitment is paid every hour used or not: every hour pays the peak fleet, nothing scales
    assert {h.usd_per_hour for h in day.hours} == {plan.usd_per_hour}
    assert day.base_usd_per_hour == plan.usd_per_hour and day.saving_usd_per_day == 0
