"""A day profile (workload.traffic.profile, planner.plan.profile): hourly replicas from the peak plan's capacity,
the day's cost against the peak fleet all day, and the profile's validation."""

import json
import subprocess
import sys
from dataclasses import replace
from math import ceil
from pathlib import Path

import pytest
import yaml

from planner.catalog.load import load_catalog
from planner.errors import PlannerInputError
from planner.plan.fleet import Pool, fleet_problem, plan_fleet
from planner.plan.profile import plan_day
from planner.plan.scenario import load_scenario, parse_scenario
from planner.plan.serving import CAPACITY_UNITS_PER_RPS

CATALOG = load_catalog()
EXAMPLE = Path(__file__).parents[1] / "scenarios" / "day-profile.yaml"
# a day in four blocks of six hours: requests/s 0, 1, 3.5 and 8
BLOCKS = [0.0] * 6 + [1.0] * 6 + [3.5] * 6 + [8.0] * 6


def scenario(profile=None, **workload):
    return parse_scenario({
        "name": "chat", "model": "llama-3.1-8b",
        "workload": {"context": 4096, "traffic": {"profile": profile or BLOCKS, "prompt_tokens": 1000,
                                                  "output_tokens": 200}, **workload},
        "search": {"gpus": ["l40s"], "precisions": ["fp8"]}, "pricing": {"providers": ["runpod"]},
        "fleet": {"scale_up_minutes": 12}})


def hand_plan(loaded, instance_gpus, usd_per_instance_hour, peak_replicas=5):
    """The scenario's peak plan with round figures put in: one 1-GPU replica serves 2.0 req/s, its pool rents
    `instance_gpus`-GPU instances at `usd_per_instance_hour`, and the peak plan runs `peak_replicas` of them."""
    plan = plan_fleet(fleet_problem(loaded, CATALOG), CATALOG, explain=False)
    (a,) = plan.assignments
    assert a.config.candidate.gpus == 1
    offer = a.pool.offer.model_copy(update={"gpus": instance_gpus, "on_demand_usd_per_hour": usd_per_instance_hour})
    a = replace(a, config=replace(a.config, capacity_rps=2.0), pool=Pool(offer, "on-demand"), replicas=peak_replicas)
    peak = ceil(peak_replicas / instance_gpus) * usd_per_instance_hour
    return replace(plan, assignments=(a,), usd_per_hour=peak)


def test_each_hour_runs_ceil_demand_over_capacity_plus_k_at_least_min_replicas():
    loaded = scenario(redundancy=1, min_replicas=2)
    day = plan_day(loaded, hand_plan(loaded, instance_gpus=1, usd_per_instance_hour=1.0))
    # 0 req/s: no replica needed, min_replicas 2; 1 req/s: ceil(1/2) + 1 = 2; 3.5: ceil(1.75) + 1 = 3; 8: 4 + 1 = 5
    assert [h.replicas for h in day.hours] == [2] * 6 + [2] * 6 + [3] * 6 + [5] * 6
    assert [h.requests_per_s for h in day.hours] == BLOCKS
    # replicas added start 12 min early: +1 at 12:00, +2 at 18:00, none at 00:00 (5 -> 2 scales down)
    assert [h.instances_started for h in day.hours if h.instances_started] == [1, 2]
    assert day.hours[12].usd_per_hour == 3 + 1 * 12 / 60 and day.hours[18].usd_per_hour == 5 + 2 * 12 / 60
    # 72 replica-hours at $1 + 3 warm-ups of 12 min = $72.60; the base is 2 replicas all day, $48
    assert day.usd_per_day == pytest.approx(72.6)
    assert day.base_replicas == (2,) and day.base_usd_per_hour == 2.0 and day.base_usd_per_day == 48.0
    assert day.scaled_usd_per_day == pytest.approx(24.6)
    assert day.peak_usd_per_day == 120.0 and day.saving_usd_per_day == pytest.approx(47.4)


def test_without_redundancy_an_idle_hour_runs_min_replicas_only():
    loaded = scenario(min_replicas=1)
    day = plan_day(loaded, hand_plan(loaded, instance_gpus=1, usd_per_instance_hour=1.0))
    # k = 0: 0 req/s -> min 1; 1 -> 1; 3.5 -> 2; 8 -> 4
    assert [h.replicas for h in day.hours[::6]] == [1, 1, 2, 4]


def test_replicas_share_instances_as_the_fleet_packs_them():
    loaded = scenario(redundancy=1, min_replicas=2)
    day = plan_day(loaded, hand_plan(loaded, instance_gpus=2, usd_per_instance_hour=2.0))
    # 2, 2, 3, 5 one-GPU replicas on 2-GPU instances: 1, 1, 2, 3 instances at $2
    assert [h.usd_per_hour for h in day.hours[::6]] == [2.0, 2.0, 4.0 + 2 * 0.2, 6.0 + 2 * 0.2]
    assert day.usd_per_day == pytest.approx(6 * (2 + 2 + 4 + 6) + 2 * 2 * 0.2)
    assert day.base_usd_per_hour == 2.0 and day.peak_usd_per_day == 144.0


def test_periods_hold_until_the_next_period():
    loaded = scenario([{"hour": 0, "requests_per_s": 1}, {"hour": 9, "requests_per_s": 4},
                       {"hour": 18, "requests_per_s": 2.5}])
    assert loaded.workload.traffic.profile == (1.0,) * 9 + (4.0,) * 9 + (2.5,) * 6
    assert loaded.workload.traffic.total_requests_per_s == 4.0  # the fleet is sized for the peak hour


def test_the_example_scenario_sizes_each_hour_from_its_peak_plan():
    loaded = load_scenario(EXAMPLE)
    plan = plan_fleet(fleet_problem(loaded, CATALOG), CATALOG, explain=False)
    day = plan_day(loaded, plan)
    (a,) = plan.assignments
    traffic = loaded.workload.traffic
    assert a.replicas == ceil(ceil(max(traffic.profile) * CAPACITY_UNITS_PER_RPS) / a.config.capacity_units) + 1
    for h in day.hours:
        needed = ceil(ceil(traffic.profile[h.hour] * CAPACITY_UNITS_PER_RPS) / a.config.capacity_units) + 1
        assert h.replicas == max(needed, loaded.workload.min_replicas)
    price = a.pool.offer.on_demand_usd_per_hour  # one GPU per replica and per instance
    started = sum(h.instances_started for h in day.hours)
    assert day.usd_per_day == pytest.approx(price * (sum(h.replicas for h in day.hours) + started * 10 / 60))
    assert day.peak_usd_per_day == pytest.approx(24 * plan.usd_per_hour)
    assert day.saving_usd_per_day == pytest.approx(day.peak_usd_per_day - day.usd_per_day) and day.saving_usd_per_day > 0
    assert day.base_usd_per_day + day.scaled_usd_per_day == pytest.approx(day.usd_per_day)


def test_the_api_plans_the_day_of_a_scenario_file():
    from planner import plan_day as api_plan_day, plan_fleet as api_plan_fleet

    fleet = api_plan_fleet(EXAMPLE)
    day = api_plan_day(EXAMPLE, fleet)
    assert len(day.hours) == 24 and day.peak_usd_per_day == pytest.approx(24 * fleet.usd_per_hour)
    assert max(h.replicas for h in day.hours) == sum(a.replicas for a in fleet.assignments)


def test_a_scenario_without_a_profile_has_no_day():
    loaded = parse_scenario({"model": "llama-3.1-8b", "workload": {"context": 4096, "traffic": {
        "requests_per_s": 1, "prompt_tokens": 100, "output_tokens": 10}}})
    assert plan_day(loaded, hand_plan(scenario(), 1, 1.0)) is None


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})


def test_planner_solve_prints_the_day_in_every_format(tmp_path):
    table = run("solve", str(EXAMPLE), cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "Day, scaled hour by hour: $" in table.stdout and "Sized for the peak all day: $" in table.stdout
    assert "Hour by hour" in table.stdout and "23:00" in table.stdout
    doc = json.loads(run("solve", str(EXAMPLE), "--format", "json", cwd=tmp_path).stdout)
    day = doc["day"]
    assert len(day["hours"]) == 24 and day["saving_usd_per_day"] > 0
    assert day["usd_per_day"] == pytest.approx(sum(h["usd_per_hour"] for h in day["hours"]), abs=1e-3)
    assert day["peak_usd_per_day"] == pytest.approx(24 * doc["usd_per_hour"])
    markdown = run("solve", str(EXAMPLE), "--format", "markdown", cwd=tmp_path).stdout
    assert "### Day, hour by hour" in markdown and "| 10:00 | 6.00 |" in markdown


BASE = {"model": "llama-3.1-8b", "workload": {"context": 4096, "traffic": {"prompt_tokens": 100, "output_tokens": 10}}}


@pytest.mark.parametrize("profile, extra, needle", [
    ([1.0] * 23, {}, "workload.traffic.profile: lists 23 rates; a day profile lists 24"),
    ([1.0] * 23 + [-0.5], {}, "workload.traffic.profile: hour 23: -0.5 requests/s must be a number from 0"),
    ([1.0] * 23 + ["x"], {}, "hour 23: 'x' requests/s must be a number"),
    ([{"hour": 0, "rps": 1}], {}, "workload.traffic.profile: period 0: unknown key 'rps'; a period has hour and "
                                  "requests_per_s"),
    ([{"hour": 1, "requests_per_s": 1}], {}, "the first period starts at hour 1; start it at hour 0"),
    ([{"hour": 0, "requests_per_s": 1}, {"hour": 24, "requests_per_s": 1}], {}, "period 1: hour 24 must be a whole"),
    ([{"hour": 0, "requests_per_s": 1}, {"hour": 0, "requests_per_s": 2}], {}, "period 1: hour 0 must come after"),
    ([{"hour": 0}], {}, "period 0: give hour and requests_per_s"),
    ([0.0] * 24, {}, "the profile's peak hour, 0 requests/s is below the 0.001"),
    ([1.0] * 24, {"requests_per_s": 1}, "give one of requests_per_s, output_tokens_per_s or profile"),
])
def test_a_bad_profile_is_one_line_naming_the_field_and_the_fix(tmp_path, profile, extra, needle):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["workload"]["traffic"] |= {"profile": profile, **extra}
    with pytest.raises(PlannerInputError, match="^scenario") as caught:
        parse_scenario(data)
    assert needle in str(caught.value) and "\n" not in str(caught.value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = run("solve", str(path), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and needle in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_scale_up_minutes_without_a_profile_is_refused():
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["workload"]["traffic"]["requests_per_s"] = 1
    data["fleet"] = {"scale_up_minutes": 5}
    with pytest.raises(PlannerInputError, match="fleet.scale_up_minutes times the replicas a day profile adds, and "
                                                "no workload has one; add workload.traffic.profile or remove"):
        parse_scenario(data)
    data["fleet"] = {"scale_up_minutes": 90}
    with pytest.raises(PlannerInputError, match="fleet.scale_up_minutes: Input should be less than or equal to 60"):
        parse_scenario(data)


def test_traffic_x2_doubles_every_hour_of_a_profile_and_a_single_rate():
    assert scenario().workload.traffic.scaled(2).profile == tuple(2 * rate for rate in BLOCKS)
    steady = parse_scenario({"model": "llama-3.1-8b", "workload": {"context": 4096, "traffic": {
        "requests_per_s": 1.5, "prompt_tokens": 100, "output_tokens": 10}}}).workload.traffic
    assert steady.scaled(2).requests_per_s == 3.0 and steady.scaled(2).profile is None


def write_csv(folder, rows):
    (folder / "rates.csv").write_text("timestamp,requests_per_s\n" + "".join(f"{t},{r}\n" for t, r in rows))
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump({"model": "llama-3.1-8b", "workload": {"context": 4096, "traffic": {
        "profile": "rates.csv", "prompt_tokens": 100, "output_tokens": 10}}}))
    return path


def test_a_csv_profile_averages_each_clock_hour_and_keeps_each_hours_busiest_day(tmp_path):
    rows = [(f"2026-11-02T{h:02d}:{m:02d}:00Z", 1 + m / 30) for h in range(24) for m in (0, 30)]  # 1 and 2: mean 1.5
    rows += [("2026-11-03T10:15:00Z", 4), ("2026-11-03T10:45:00Z", 6)]  # another day's 10:00, mean 5: the busier
    rows += [("2026-11-03T13:20:00+02:00", 9)]  # 11:20 UTC, 9 > 1.5
    rows += [("2026-11-03T05:00:00", 1)]  # no offset: UTC; its mean 1 < 1.5
    profile = load_scenario(write_csv(tmp_path, rows)).workload.traffic.profile
    assert profile == (1.5,) * 10 + (5.0, 9.0) + (1.5,) * 12


@pytest.mark.parametrize("rows, needle", [
    ([("yesterday", 1)], "'rates.csv' line 2: 'yesterday' is not an ISO 8601 time"),
    ([("2026-11-02T00:00:00Z", -1)], "'rates.csv' line 2: -1.0 requests/s must be a number from 0"),
    ([("2026-11-02T00:00:00Z", "many")], "'rates.csv' line 2: 'many' requests/s must be a number from 0"),
    ([(f"2026-11-02T{h:02d}:00:00Z", 1) for h in range(23)], "no sample in UTC hour 23; the samples must cover"),
    ([("2026-11-02T00:00:00Z", 1)], "no sample in UTC hours 1, 2, 3, 4, 5 ...; the samples must cover every hour"),
])
def test_a_bad_csv_profile_names_the_line_and_the_fix(tmp_path, rows, needle):
    proc = run("solve", str(write_csv(tmp_path, rows)), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: scenario s.yaml: workload.traffic.profile: ")
    assert needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_a_csv_profile_is_read_only_beside_a_scenario_file(tmp_path):
    write_csv(tmp_path, [])
    data = {"model": "llama-3.1-8b", "workload": {"context": 4096, "traffic": {
        "profile": str(tmp_path / "rates.csv"), "prompt_tokens": 100, "output_tokens": 10}}}
    with pytest.raises(PlannerInputError, match="a CSV profile is read from the scenario file's folder, and this "
                                                "scenario is no file"):
        parse_scenario(data)  # the Python API's dict, or the web planner's form: no file of the server is read


def test_each_hour_keeps_the_fleets_on_demand_share():
    """fleet.on_demand_share holds every hour, as the peak plan holds it: off-peak hours ran the cheaper spot replica
    alone (0% on demand) under a share of 0.5."""
    scenario = parse_scenario({
        "name": "od", "model": "llama-3.1-8b",
        "workload": {"context": "4K", "slo": {"ttft_s": 2.0, "tpot_s": 0.05},
                     "traffic": {"profile": [2] * 8 + [60] * 10 + [2] * 6, "prompt_tokens": 500, "output_tokens": 100}},
        "search": {"precisions": ["fp8"], "gpus": ["l40s"]}, "pricing": {"market": "any"},
        "fleet": {"on_demand_share": 0.5}})
    plan = plan_fleet(fleet_problem(scenario, CATALOG), CATALOG, explain=False)
    assert {a.pool.market for a in plan.assignments} == {"spot", "on-demand"}
    day = plan_day(scenario, plan)
    for hour in day.hours:
        demand = ceil(scenario.workload.traffic.hour_requests_per_s(hour.hour) * CAPACITY_UNITS_PER_RPS)
        on_demand = sum(n * a.capacity_units for n, a in zip(hour.assignment_replicas, plan.assignments)
                        if a.pool.market == "on-demand")
        assert on_demand >= ceil(0.5 * demand), hour
