"""Price dates, the stale-price warning, and `planner prices update` from SkyPilot catalog CSVs (fixtures)."""

import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
import yaml

from planner.catalog.load import Offer, catalog_dir, load_catalog, validate_record
from planner.catalog.price_update import update_prices
from planner.catalog.prices import MAX_PRICE_AGE_DAYS, load_offers, price_age, price_date
from planner.catalog.skypilot import load_skypilot
from planner.errors import PlannerInputError

FIXTURE = Path(__file__).parent / "data" / "skypilot-catalog"
CATALOG = load_catalog()
SKYPILOT = load_skypilot()


def offer(as_of: str) -> Offer:
    return Offer(provider="aws", instance="x", gpu="l4", gpus=1, region="r", kind="list", on_demand_usd_per_hour=1.0,
                 spot_usd_per_hour=0.5, as_of=as_of, source="test")


def test_every_shipped_price_is_dated():
    for o in CATALOG.offers:
        for market in ("on-demand", "spot"):
            if o.price(market) is not None:
                assert price_date(o, market) <= date(2027, 1, 1)


@pytest.mark.parametrize("as_of, market, expected", [
    ("2026-11-09", "on-demand", date(2026, 11, 9)),
    ("2025-06 (end of H1)", "spot", date(2025, 6, 30)),
    ("2025 (year only)", "spot", date(2025, 12, 31)),
    ("on-demand: 2026-11-09; spot: 2025-06 (before the cut)", "spot", date(2025, 6, 30)),
    ("on-demand: 2026-11-09; spot: 2025-06 (before the cut)", "on-demand", date(2026, 11, 9)),
])
def test_price_date_takes_the_end_of_the_period(as_of, market, expected):
    assert price_date(offer(as_of), market) == expected


@pytest.mark.parametrize("as_of", ["catalog snapshot, undated", "2026-13"])
def test_undated_price_is_an_error(as_of):
    row = offer("2026-01").model_dump() | {"as_of": as_of}
    with pytest.raises(PlannerInputError, match="as_of"):
        validate_record(Offer, row, "prices[0]")


def test_stale_warning_after_90_days():
    today = date(2026, 12, 2)
    fresh = price_age(offer("2026-09-03"), "on-demand", today=today)  # 90 days
    assert (fresh.age_days, fresh.stale, fresh.warning) == (MAX_PRICE_AGE_DAYS, False, None)
    stale = price_age(offer("2026-09-02"), "on-demand", today=today)
    assert stale.stale and f"{MAX_PRICE_AGE_DAYS + 1} days old" in stale.warning
    assert not price_age(offer("2026-09-02"), "on-demand", MAX_PRICE_AGE_DAYS + 1, today).stale  # the limit is a setting


def test_solve_carries_the_price_warning_as_data():
    from planner import solve

    result = solve({"model": "llama-3.1-8b", "workload": {"context": 4096, "concurrency": 4},
                    "search": {"gpus": ["l4"]}, "pricing": {"providers": ["aws"]}})
    age = (date.today() - price_date(CATALOG.offers[0].model_copy(update={"as_of": result.best.price_as_of}),
                                     result.best.market)).days
    assert (result.best.price_age.age_days, result.best.price_age.stale) == (age, age > MAX_PRICE_AGE_DAYS)


@pytest.fixture
def prices_copy(tmp_path):
    path = tmp_path / "prices.yaml"
    shutil.copy(catalog_dir() / "prices.yaml", path)
    return path


def test_update_from_a_local_skypilot_catalog(prices_copy):
    before = yaml.safe_load(prices_copy.read_text())["prices"]
    done = update_prices(str(FIXTURE), ("vast", "lambda"), CATALOG, SKYPILOT, prices_copy, "2026-11-30")
    rows = yaml.safe_load(prices_copy.read_text())["prices"]
    assert prices_copy.read_text().startswith("# Rental-price catalog")  # the header comments stay
    vast = {r["instance"]: r for r in rows if r["provider"] == "vast" and str(FIXTURE) in r["source"]}
    # one row per instance type: RTX 5090 is listed in Texas and Hungary at one price, kept once
    assert vast["1x-RTX_5090-32-65536"]["gpu"] == "rtx-5090" and vast["1x-RTX_5090-32-65536"]["on_demand_usd_per_hour"] == 0.48
    assert vast["1x-H100_NVL-32-65536"]["gpu"] == "h100-nvl" and vast["1x-H100_SXM-32-65536"]["gpu"] == "h100-sxm"
    assert vast["1x-A100_SXM4-32-65536"]["gpu"] == "a100-40gb" and vast["1x-A100_PCIE-32-65536"]["gpu"] == "a100-pcie-80gb"
    assert all(r["spot_usd_per_hour"] is None for r in vast.values())  # SpotPrice 0.00 = none
    # the kind is skypilot.yaml's for the cloud: vast's prices are marketplace offers, lambda's its list prices
    assert {r["kind"] for r in vast.values()} == {"marketplace"}
    assert {r["kind"] for r in rows if r["provider"] == "lambda" and str(FIXTURE) in r["source"]} == {"list"}
    lam = {r["instance"]: r for r in rows if r["provider"] == "lambda" and str(FIXTURE) in r["source"]}
    assert lam["gpu_1x_a6000"]["gpu"] == "rtx-a6000" and lam["gpu_8x_v100"]["gpus"] == 8
    assert all(r["as_of"] == "2026-11-30" and "skypilot-org/skypilot-catalog" in r["source"] for r in lam.values())
    assert done.unknown_rows == 1  # vast's RTX4070 is not in gpus.yaml
    old_lambda = [r for r in before if r["provider"] == "lambda" and "skypilot-org/skypilot-catalog" in r["source"]]
    assert done.replaced == len(old_lambda) and done.added == len(vast) + len(lam)
    assert len(rows) == len(before) - done.replaced + done.added
    assert load_catalog(str(_catalog_with(prices_copy))).offers  # the result loads


def _catalog_with(prices: Path) -> Path:
    folder = prices.parent / "catalog"
    shutil.copytree(catalog_dir(), folder, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    shutil.copy(prices, folder / "prices.yaml")
    return folder


def test_update_dates_rows_by_the_git_commit_of_the_csv(prices_copy, tmp_path):
    copy = tmp_path / "skypilot-catalog"
    shutil.copytree(FIXTURE, copy)
    with pytest.raises(PlannerInputError, match="--as-of"):
        update_prices(str(copy), ("vast",), CATALOG, SKYPILOT, prices_copy)  # not a git checkout: no date
    git = ["git", "-C", str(copy), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "snapshot"], check=True,
                   env={"GIT_COMMITTER_DATE": "2026-10-15T12:00:00Z", "GIT_AUTHOR_DATE": "2026-10-15T12:00:00Z",
                        "PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    done = update_prices(str(copy), ("vast",), CATALOG, SKYPILOT, prices_copy)
    assert done.as_of == "2026-10-15"


def test_update_refuses_what_it_cannot_read(prices_copy, tmp_path):
    with pytest.raises(PlannerInputError, match="--provider"):
        update_prices(str(FIXTURE), ("coreweave",), CATALOG, SKYPILOT, prices_copy, "2026-11-30")
    with pytest.raises(PlannerInputError, match="no aws/vms.csv"):
        update_prices(str(FIXTURE), ("aws",), CATALOG, SKYPILOT, prices_copy, "2026-11-30")
    (tmp_path / "bad" / "vast").mkdir(parents=True)
    (tmp_path / "bad" / "vast" / "vms.csv").write_text("a,b\n1,2\n")
    with pytest.raises(PlannerInputError, match="lacks the column"):
        update_prices(str(tmp_path / "bad"), ("vast",), CATALOG, SKYPILOT, prices_copy, "2026-11-30")


def test_update_from_an_unreachable_url_is_a_clear_error(prices_copy):
    with pytest.raises(PlannerInputError, match="cannot fetch"):
        update_prices("http://127.0.0.1:9/catalogs/v8", ("vast",), CATALOG, SKYPILOT, prices_copy)


def test_cli_prices_update(prices_copy):
    done = subprocess.run([sys.executable, "-m", "planner.cli", "prices", "update", "--from", str(FIXTURE),
                           "--provider", "vast", "--as-of", "2026-11-30", "--prices", str(prices_copy)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "9 rows" in done.stdout and "1 GPU rows skipped" in done.stdout


@pytest.mark.parametrize("gpu", ["gb200", "gb300", "b300", "mi355x"])
def test_current_rack_and_blackwell_ultra_gpus_are_rentable(gpu):
    # issue 11: every GPU rentable today has a dated on-demand price from a cited source
    offers = [o for o in CATALOG.offers if o.gpu == gpu and o.price("on-demand") is not None]
    assert offers, f"no on-demand price for {gpu}"
    assert all(o.source and price_date(o, "on-demand") >= date(2026, 1, 1) for o in offers)


def _row(instance: str, as_of: str, on_demand: float | None, spot: float | None = None) -> dict:
    return {"provider": "lambda", "instance": instance, "gpu": "gh200", "gpus": 1, "region": "all", "kind": "list",
            "on_demand_usd_per_hour": on_demand, "spot_usd_per_hour": spot, "as_of": as_of, "source": "test"}


def _load(tmp_path: Path, rows: list[dict]) -> tuple:
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "prices": rows}))
    return load_offers(path, CATALOG.gpus)


def test_the_newest_dated_price_of_an_offer_supersedes_older_rows_per_market(tmp_path):
    offers = _load(tmp_path, [_row("gpu_1x_gh200", "2025 (year only)", 1.49, spot=0.9),
                              _row("gpu_1x_gh200", "2026-09-25", 2.29),
                              _row("other", "2025", 1.0)])
    # the 2025 row keeps only its spot price (no newer spot row); its on-demand 1.49 is superseded by 2.29
    assert [(o.instance, o.as_of, o.on_demand_usd_per_hour, o.spot_usd_per_hour) for o in offers] == [
        ("gpu_1x_gh200", "2025 (year only)", None, 0.9), ("gpu_1x_gh200", "2026-09-25", 2.29, None), ("other", "2025", 1.0, None)]
    # a row left without a price is dropped
    offers = _load(tmp_path, [_row("gpu_1x_gh200", "2026-09-25", 2.29), _row("gpu_1x_gh200", "2025-06", 1.49)])
    assert [o.on_demand_usd_per_hour for o in offers] == [2.29]


@pytest.mark.parametrize("older, newer", [("2026-09-25", "2026-09-25"), ("2025", "2025-06-15"), ("2025-06", "2025")])
def test_one_offer_priced_twice_with_no_newer_date_is_refused(tmp_path, older, newer):
    with pytest.raises(PlannerInputError, match=r"prices\[0\] and catalog prices.yaml: prices\[1\]: both price the on-demand offer lambda "
                                                r"gpu_1x_gh200 \(all\).*do not tell which is newer"):
        _load(tmp_path, [_row("gpu_1x_gh200", older, 1.49), _row("gpu_1x_gh200", newer, 2.29)])


def test_the_shipped_catalog_prices_each_offer_once_per_market():
    seen = [(o.provider, o.instance, o.region, m, o.term) for o in CATALOG.offers for m in ("on-demand", "spot")
            if o.price(m)]
    assert len(seen) == len(set(seen))
    gh200 = [o for o in CATALOG.offers if (o.provider, o.instance, o.region) == ("lambda", "gpu_1x_gh200", "all")]
    assert [(o.on_demand_usd_per_hour, o.as_of) for o in gh200] == [(2.29, "2026-09-25")]  # not 1.49 of "2025"


def test_the_70b_chat_fleet_pays_the_current_gh200_price():
    from planner.api import plan_fleet

    fleet = plan_fleet(Path(__file__).parents[1] / "scenarios" / "70b-chat.yaml")
    [use] = fleet.pools
    assert (use.pool.offer.instance, use.pool.offer.as_of, use.pool.offer.on_demand_usd_per_hour) == (
        "gpu_1x_gh200", "2026-09-25", 2.29)
    assert fleet.usd_per_hour == pytest.approx(use.instances * 2.29)


def test_update_refuses_a_row_that_prices_a_kept_offer_on_the_same_date(prices_copy):
    rows = yaml.safe_load(prices_copy.read_text())["prices"]
    rows.append({"provider": "vast", "instance": "1x-RTX_5090-32-65536", "gpu": "rtx-5090", "gpus": 1, "region": "Bács-Kiskun, HU, EU",
                 "kind": "marketplace", "on_demand_usd_per_hour": 0.5, "spot_usd_per_hour": None, "as_of": "2026-11-30", "source": "hand-written"})
    prices_copy.write_text(yaml.safe_dump({"schema_version": 1, "prices": rows}))
    before = prices_copy.read_text()
    with pytest.raises(PlannerInputError, match=rf"--prices prices.yaml: prices\[{len(rows) - 1}\] and --from: .* line \d+: "
                                                 "the prices row: both price the on-demand offer vast 1x-RTX_5090"):
        update_prices(str(FIXTURE), ("vast",), CATALOG, SKYPILOT, prices_copy, "2026-11-30")
    assert prices_copy.read_text() == before  # nothing written
