"""Failure and interruption (planner.plan.failure): spot capacity counted at its expected availability, the on-demand
fallback of a spot pool, and fleet.survive on a small catalog, with numbers computed by hand."""

from dataclasses import replace

import pytest
import yaml

from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.plan.failure import HOURS_PER_MONTH, SpotRates, counted_units, interruption_rate
from planner.plan.fleet import fleet_problem, plan_fleet
from planner.plan.profile import _covered
from planner.plan.scenario import parse_scenario
from planner.render.markdown import fleet_markdown
from planner.render.records import fleet_json
from test_cli import run

CATALOG = load_catalog()


def offer(provider, instance, region, on_demand=None, spot=None, gpus=1):
    return {"provider": provider, "instance": instance, "gpu": "l40s", "gpus": gpus, "region": region, "kind": "list",
            "on_demand_usd_per_hour": on_demand, "spot_usd_per_hour": spot, "as_of": "2026-12-01",
            "source": "a test's hand-made row"}


# three zones of one L40S each: aws us-east-1 ($1.00 on demand, $0.50 spot), aws us-west-2 ($1.50), runpod eu ($2.00)
SMALL = [offer("aws", "g6e.xlarge", "us-east-1", 1.0, 0.5), offer("aws", "g6e.xlarge", "us-west-2", 1.5),
         offer("runpod", "L40S", "eu", 2.0)]


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "prices": SMALL}))
    return replace(CATALOG, prices_file=path)


def data(market="on-demand", rps=1.0, **fleet):
    return {"model": "llama-3.1-8b",
            "workload": {"context": 4096, "traffic": {"requests_per_s": rps, "prompt_tokens": 500, "output_tokens": 100}},
            "search": {"gpus": ["l40s"], "precisions": ["bf16"], "max_gpus_per_replica": 1},
            "pricing": {"market": market}} | ({"fleet": fleet} if fleet else {})


def scenario(market="on-demand", rps=1.0, **fleet):
    return parse_scenario(data(market, rps, **fleet))


def where(plan):
    return sorted((a.pool.offer.provider, a.pool.offer.region, a.pool.market, a.replicas) for a in plan.assignments)


def test_the_fraction_unavailable_is_the_monthly_rate_over_730_hours_times_the_time_to_replace():
    aws = next(o for o in CATALOG.offers if o.provider == "aws")
    # 14.6% a month = 0.146 / 730 = 0.0002 interruptions per instance-hour, each down 30 minutes: 0.0001
    assert SpotRates(30, 0.146).unavailable(aws) == pytest.approx(0.0001)
    assert HOURS_PER_MONTH == 365 * 24 / 12
    # a band reads at its upper end; a provider not named has no rate
    assert interruption_rate("15-20%") == 0.20 and interruption_rate(" <5% ") == 0.05
    assert SpotRates(10, None, (("gcp", 0.1),)).unavailable(aws) is None
    # 20,000 milli-requests/s at 1 - 0.0001 counts 19,998: whole units, rounded down
    assert counted_units(20_000, 1 - 0.0001) == 19_998 and counted_units(20_000, 1.0) == 20_000


def test_a_spot_replica_counts_at_its_expected_availability(small):
    problem = fleet_problem(scenario("spot"), small)
    c = plan_fleet(problem, small, explain=False).assignments[0].config.capacity_units
    # demand of exactly two replicas' capacity: two whole replicas meet it...
    exact = fleet_problem(scenario("spot", rps=2 * c / 1000), small)
    assert [a.replicas for a in plan_fleet(exact, small, explain=False).assignments] == [2]
    # ...but at 100% interrupted a month and 60 minutes to replace, each counts c - ceil(c / 730) < c: three
    spotty = replace(exact, spot=SpotRates(60, 1.0))
    plan = plan_fleet(spotty, small, explain=False)
    assert [a.replicas for a in plan.assignments] == [3]
    assert plan.assignments[0].available == pytest.approx(1 - 1 / 730)
    assert plan.assignments[0].capacity_units == c - -(-c // 730)
    risk = plan.pools[0].spot
    assert risk.unavailable == pytest.approx(1 / 730)
    assert risk.lost_requests_per_s == pytest.approx(3 * plan.assignments[0].config.capacity_rps / 730)
    # the on-demand offers the pricing allows (any market): the same instance on demand, 3 x $1.00
    assert (risk.fallback.offer.region, risk.fallback.instances, risk.fallback.usd_per_hour) == ("us-east-1", 3, 3.0)
    assert "falls back to aws g6e.xlarge (us-east-1, on-demand, list price): 3 instance(s), $3.00/hour" in risk.line


def test_a_spot_pool_without_a_stated_rate_counts_whole_and_still_names_its_fallback(small):
    plan = plan_fleet(fleet_problem(scenario("spot"), small), small, explain=False)
    assert plan.assignments[0].available == 1.0
    assert plan.pools[0].spot.line.startswith("no interruption rate stated (fleet.spot.interruption_rate)")


@pytest.mark.parametrize("survive, expected, cost", [
    (None, [("aws", "us-east-1", "on-demand", 1)], 1.0),
    # any one region lost: one replica outside each region in use, the two cheapest regions: $1.00 + $1.50
    ("region", [("aws", "us-east-1", "on-demand", 1), ("aws", "us-west-2", "on-demand", 1)], 2.5),
    # any one provider lost: aws's cheapest and runpod: $1.00 + $2.00
    ("provider", [("aws", "us-east-1", "on-demand", 1), ("runpod", "eu", "on-demand", 1)], 3.0),
])
def test_survive_keeps_demand_met_outside_any_one_zone(small, survive, expected, cost):
    plan = plan_fleet(fleet_problem(scenario(**({"survive": survive} if survive else {})), small), small)
    assert where(plan) == expected and plan.usd_per_hour == cost
    saving = f"surviving the loss of any one {survive} (fleet.survive) costs +${cost - 1:,.2f}/hour"
    assert (saving in plan.binding) == (survive is not None)


def test_survival_and_spot_together(small):
    # spot in us-east-1 ($0.50) and on demand in us-west-2 ($1.50); the spot pool falls back to us-east-1 on demand
    plan = plan_fleet(fleet_problem(scenario("any", survive="region", spot={"interruption_rate": "<5%"}), small), small)
    assert where(plan) == [("aws", "us-east-1", "spot", 1), ("aws", "us-west-2", "on-demand", 1)]
    assert plan.usd_per_hour == 2.0
    spot = next(u.spot for u in plan.pools if u.spot)
    assert spot.interruption_rate == 0.05 and spot.replace_minutes == 10  # fleet.scale_up_minutes's default
    assert spot.unavailable == pytest.approx(0.05 / 730 / 6)


def test_the_outputs_show_each_spot_pool_its_assumption_loss_and_fallback(small):
    import json

    problem = fleet_problem(scenario("spot", rps=1.0, spot={"interruption_rate": 0.073, "replace_minutes": 60}), small)
    plan = plan_fleet(problem, small)
    pool = json.loads(fleet_json(plan, "spot"))["pools"][0]
    # 7.3% a month over 730 hours, 60 minutes down each: 0.0001
    assert pool["market"] == "spot" and pool["spot"]["interruption_rate_per_month"] == 0.073
    assert pool["spot"]["unavailable_fraction"] == pytest.approx(0.0001)
    assert pool["spot"]["on_demand_fallback"] == {"provider": "aws", "instance": "g6e.xlarge", "region": "us-east-1",
                                                  "instances": 1, "usd_per_hour": 1.0}
    assert ("- spot: aws g6e.xlarge (us-east-1, spot, list price): interrupted 7.3% a month, 60 min to replace: 0.0100% "
            "of its capacity expected down") in fleet_markdown("spot", plan)


def test_the_day_keeps_the_survival_rule_hour_by_hour():
    # 1,000 milli-requests/s with one 1,000-unit replica in zone a: met, but not without zone a
    assert not _covered(1000, 0, [(1, 1000, 1000, "a"), (0, 1000, 1000, "b")])
    assert _covered(1000, 0, [(1, 1000, 1000, "a"), (1, 1000, 1000, "b")])
    assert _covered(1000, 0, [(1, 1000, 1000, None)])


def test_every_offer_in_one_region_is_infeasible_in_one_line(small):
    one = parse_scenario(data(survive="region") | {"pricing": {"regions": ["us-east-1"]}})
    with pytest.raises(PlannerInputError, match=r"^fleet.survive: region: every offer llama-3.1-8b may rent is in "
                                                r"region aws us-east-1, so no fleet survives losing it \(infeasible\)"):
        fleet_problem(one, small)


@pytest.mark.parametrize("fleet, needle", [
    ({"spot": {"interruption_rate": 1.5}}, "fleet.spot.interruption_rate: 1.5 is no share of spot instances"),
    ({"spot": {"interruption_rate": -0.1}}, "fleet.spot.interruption_rate: -0.1 is no share"),
    ({"spot": {"interruption_rate": True}}, "fleet.spot.interruption_rate: True is no share"),
    ({"spot": {"interruption_rate": ">20%"}}, "'>20%' has no upper end to plan with"),
    ({"spot": {"interruption_rate": "often"}}, "'often' is no AWS Spot Instance Advisor band"),
    ({"spot": {"interruption_rate": {"aws": 2}}}, "fleet.spot.interruption_rate: aws: 2 is no share"),
    ({"spot": {"interruption_rate": {}}}, "fleet.spot.interruption_rate: names no provider"),
    ({"spot": {"interruption_rate": 0.1, "replace_minutes": -1}}, "fleet.spot.replace_minutes: Input should be"),
    ({"spot": {"replace_minutes": 5}}, "fleet.spot.interruption_rate: Field required"),
    ({"survive": "zone"}, "fleet.survive: Input should be 'region' or 'provider'"),
])
def test_bad_failure_keys_are_one_line_naming_the_field(fleet, needle):
    with pytest.raises(PlannerInputError, match="^scenario") as caught:
        parse_scenario(data("any") | {"fleet": fleet})
    assert needle in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("fleet, pricing, needle", [
    ({"spot": {"interruption_rate": {"aws5": 0.1}}}, {"market": "any"},
     "fleet.spot.interruption_rate.aws5: 'aws5' is in no spot offer of the price catalog; did you mean aws?"),
    ({"spot": {"interruption_rate": 0.1}}, {"market": "on-demand"},
     "fleet.spot: interruption rates apply to spot pools, and pricing.market is on-demand"),
    ({"survive": "region"}, {"market": "on-demand", "providers": ["aws"], "regions": ["us-east-1"]},
     "fleet.survive: region: every offer"),
])
def test_the_cli_refuses_them_in_one_line_with_exit_2(tmp_path, fleet, pricing, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data() | {"fleet": fleet, "pricing": pricing}))
    proc = run("solve", str(path), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and needle in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
