"""`planner prices update`: rebuilding catalogs/prices.yaml rows from SkyPilot's catalog.

SkyPilot's catalog (github.com/skypilot-org/skypilot-catalog, catalogs/v<N>/<cloud>/vms.csv) is the
maintained public source planner already cites: one row per instance type and region (AWS: per
availability zone) with InstanceType, AcceleratorName, AcceleratorCount, Price (on-demand USD/hour
for the instance), SpotPrice, Region, GpuInfo. Column order differs between clouds and versions, so
columns are read by name. Kept apart from planner.catalog.prices so that reading prices does not import
the network, subprocess and CSV code only an update uses.
"""

from __future__ import annotations

import csv
import math
import os
import re
import subprocess
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import yaml

from planner.catalog.load import Catalog, catalog_dir, validate_record
from planner.catalog.prices import Offer, current_offers
from planner.catalog.skypilot import SkyPilotCatalog
from planner.errors import PlannerInputError
from planner.files import PRICES, SKYPILOT_CSV, read_bytes, read_text, read_url, write_output
from planner.units import MiB
from planner.yamlfile import parse_yaml

SKYPILOT_SOURCE = "skypilot-org/skypilot-catalog"
REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")
# The whole download of one vms.csv: AWS's, the largest (about 30 MB), takes a few seconds on a common link;
# a server that stalls or sends a byte at a time is given up, as every hostile input is, within 10 s
DOWNLOAD_DEADLINE_S = 10.0

@dataclass(frozen=True)
class PriceUpdate:
    """What `planner prices update` did to prices.yaml."""

    path: Path
    providers: tuple[str, ...]
    added: int
    replaced: int  # earlier SkyPilot-catalog rows of those providers
    unknown_rows: int  # GPU rows whose accelerator planner's catalogs do not map
    as_of: str
    origin: str


def read_csv_text(source: str, cloud: str) -> tuple[str, str, str | None]:
    """(CSV text, where it came from, its date when the source dates it) for one cloud: read by planner's file
    reader (a regular file, under the vms.csv cap), or fetched whole within DOWNLOAD_DEADLINE_S."""
    if re.match(r"^https?://", source):
        url = f"{source.rstrip('/')}/{cloud}/vms.csv"
        data = read_url(url, SKYPILOT_CSV, DOWNLOAD_DEADLINE_S)
        return data.decode("utf-8", errors="replace"), url, datetime.now(timezone.utc).date().isoformat()
    folder = Path(source)
    if not folder.is_dir():
        raise PlannerInputError(f"--from: {source!r} is not a folder or an http(s) URL; give a skypilot-catalog "
                                "catalogs/v<N> folder (holding <cloud>/vms.csv)")
    path = folder / cloud / "vms.csv"
    if not os.path.lexists(path):
        raise PlannerInputError(f"--provider {cloud}: no {cloud}/vms.csv in {source!r}")
    return read_bytes(path, SKYPILOT_CSV).decode("utf-8", errors="replace"), str(path), _git_date(path)


def _git_date(path: Path) -> str | None:
    """The commit date of the file in a git checkout of skypilot-catalog (None outside git)."""
    try:
        done = subprocess.run(["git", "-C", str(path.parent), "log", "-1", "--format=%cs", "--", path.name],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", out) else None


class _Row:
    """One vms.csv row as read: its cells by column name, and the line it ends on (errors name it)."""

    def __init__(self, cells: dict[str, str], origin: str, line: int) -> None:
        self.cells, self.origin, self.line = cells, origin, line

    def where(self) -> str:
        return f"--from: {self.origin} line {self.line}"

    def refuse(self, column: str, why: str) -> PlannerInputError:
        shown = self.cells.get(column) or ""
        shown = shown if len(shown) <= 60 else shown[:60] + "..."
        return PlannerInputError(f"{self.where()}: {column} {shown!r} {why}; not a SkyPilot vms.csv row")

    def number(self, column: str) -> float | None:
        """A price or count as written: None when empty or 0 (SkyPilot writes 0.00 for "no spot price"); the
        catalog's own checks (finite, in range) follow when the row becomes an offer."""
        text = self.cells.get(column) or ""
        try:
            value = float(text) if text else None
        except ValueError:
            raise self.refuse(column, "is not a number") from None
        return value or None

    def count(self) -> int | None:
        """AcceleratorCount: None for a share of a GPU (Azure sells 1/6 of an A10); a whole number otherwise."""
        value = self.number("AcceleratorCount")
        if value is not None and not math.isfinite(value):
            raise self.refuse("AcceleratorCount", "is not a number of GPUs")
        return None if value is None or value < 1 else int(value)

    def gpu_mib(self) -> int | None:
        """Per-GPU memory from the GpuInfo column (None: not given)."""
        info = self.cells.get("GpuInfo")
        found = {key: pattern.search(info) for key, pattern in _GPU_INFO_FIELDS.items()} if info else {}
        if not found.get("SizeInMiB"):
            return None
        try:
            size = float(found["SizeInMiB"].group(1))
            count = float(found["Count"].group(1)) if found["Count"] else 1.0
        except ValueError:
            raise self.refuse("GpuInfo", "holds a GPU memory or count that is not a number") from None
        if not (math.isfinite(size) and math.isfinite(count)):
            raise self.refuse("GpuInfo", "holds a GPU memory or count out of range")
        return int(size) // max(1, int(count)) if size > 0 else None  # 0: the memory is not listed


# In GpuInfo (a Python-literal dict per row), the first GPU entry's Count and MemoryInfo.SizeInMiB: read by pattern,
# as data (never evaluated, nor parsed into a syntax tree: ast.literal_eval took 50 us a row, 11 s of a 40 MB file)
_GPU_INFO_FIELDS = {key: re.compile(rf"""['"]{key}['"]\s*:\s*([^,}}\]\s]+)""") for key in ("Count", "SizeInMiB")}


class _Lines:
    """The lines of a text, each with its newline, as csv.reader reads them (io.StringIO would copy the text at
    four bytes a character), counted: `read` is the line a row ends on, or the line csv failed on."""

    def __init__(self, text: str) -> None:
        self.text, self.read = text, 0

    def __iter__(self) -> Iterator[str]:
        start, text = 0, self.text
        while start < len(text):
            end = text.find("\n", start) + 1 or len(text)
            self.read += 1
            yield text[start:end]
            start = end


def _rows(text: str, origin: str) -> Iterator[_Row]:
    lines = _Lines(text)
    reader = csv.DictReader(lines)
    try:
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise PlannerInputError(f"--from: {origin} lacks the column(s) {', '.join(missing)}; not a SkyPilot vms.csv")
        for cells in reader:
            yield _Row(cells, origin, lines.read)
    except csv.Error as exc:  # a field past csv's limit (128 KB: no real cell is near it)
        raise PlannerInputError(f"--from: {origin} line {lines.read}: {exc}; not a SkyPilot vms.csv") from None


def offers_from_csv(text: str, cloud: str, origin: str, as_of: str,
                    skypilot: SkyPilotCatalog) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """prices.yaml rows from one vms.csv, each with where the vms.csv row that set its price is: per instance type,
    the region with the cheapest on-demand price (spot: the cheapest zone of that region), or the cheapest spot
    region when none is sold on demand. More instance types than a prices.yaml planner reads can hold are refused
    as they are met."""
    best: dict[str, tuple[str, dict[str, Any]]] = {}
    instances: set[str] = set()
    most = _most_rows()
    unknown = 0
    # GpuInfo is read only for the accelerator names that need it to tell catalog GPUs apart (vast's A100)
    by_memory = {a.name for a in skypilot.accelerators.get(cloud, ()) if a.gpu_mib is not None}
    for line in _rows(text, origin):
        row = line.cells
        name, instance = row.get("AcceleratorName") or "", row.get("InstanceType") or ""
        if not name or not instance:
            continue  # CPU-only shapes
        gpu = skypilot.gpu_for(cloud, name, instance, line.gpu_mib() if name in by_memory else None)
        count = line.count()
        if gpu is None or count is None:
            unknown += 1
            continue
        region = row.get("Region") or "unspecified"
        on_demand, spot = line.number("Price"), line.number("SpotPrice")
        if on_demand is None and spot is None:
            continue
        zone = row.get("AvailabilityZone")
        key = f"{instance}\0{region}"
        instances.add(instance)
        if len(instances) > most:
            raise _too_many(origin, f"more than {most:,} instance types")
        held, current = best.setdefault(key, (line.where(), {
            "provider": cloud, "instance": instance, "gpu": gpu, "gpus": count, "region": region,
            "kind": skypilot.clouds[cloud].price_kind, "on_demand_usd_per_hour": None, "spot_usd_per_hour": None, "as_of": as_of,
            "source": f"{SKYPILOT_SOURCE} {origin}"}))
        if on_demand is not None:
            current["on_demand_usd_per_hour"] = on_demand
            best[key] = line.where(), current
        if spot is not None and (current["spot_usd_per_hour"] is None or spot < current["spot_usd_per_hour"]):
            current["spot_usd_per_hour"] = spot
            if current["on_demand_usd_per_hour"] is None:
                best[key] = line.where(), current
            if zone:
                current["source"] = f"{SKYPILOT_SOURCE} {origin} | spot price is for zone {zone}"
    per_instance: dict[str, tuple[str, dict[str, Any]]] = {}
    for line, row in best.values():
        held = per_instance.get(row["instance"])
        if held is None or _rank(row) < _rank(held[1]):
            per_instance[row["instance"]] = line, row
    return sorted(per_instance.values(), key=lambda r: (r[1]["gpu"], r[1]["gpus"], r[1]["instance"])), unknown


def _rank(row: dict[str, Any]) -> tuple[int, float, str]:
    if row["on_demand_usd_per_hour"] is not None:
        return 0, row["on_demand_usd_per_hour"], row["region"]
    return 1, row["spot_usd_per_hour"], row["region"]


def update_prices(source: str, providers: tuple[str, ...], catalog: Catalog, skypilot: SkyPilotCatalog,
                  prices_path: Path | None = None, as_of: str | None = None) -> PriceUpdate:
    """Replace the SkyPilot-catalog rows of `providers` in prices.yaml with rows read from `source`.
    Rows that merge a SkyPilot price with another source's ("on-demand: ... || spot: ...") are kept."""
    path = prices_path or catalog_dir() / "prices.yaml"
    clouds = providers or tuple(skypilot.accelerators)
    for cloud in clouds:
        if cloud not in skypilot.accelerators:
            raise PlannerInputError(f"--provider: {cloud!r} has no GPU names in catalogs/skypilot.yaml; "
                                    f"use one of {', '.join(skypilot.accelerators)}")
    if as_of is not None:
        try:
            date.fromisoformat(as_of if re.fullmatch(r"\d{4}-\d{2}-\d{2}", as_of) else "")
        except ValueError:
            raise PlannerInputError(f"--as-of: {as_of!r} is not a calendar date; write YYYY-MM-DD") from None
    parsed: list[tuple[str, dict[str, Any]]] = []
    unknown, dates, origins = 0, set(), []
    for cloud in clouds:
        text, origin, dated = read_csv_text(source, cloud)
        stamp = as_of or dated
        if stamp is None:
            raise PlannerInputError(f"--as-of: {origin} is not in a git checkout, so its date is unknown; "
                                    "give the snapshot's date with --as-of YYYY-MM-DD")
        rows, skipped = offers_from_csv(text, cloud, origin, stamp, skypilot)
        parsed += rows
        unknown += skipped
        dates.add(stamp)
        origins.append(origin)
    header, old_rows = _split_prices_file(path)
    kept_at = [i for i, r in enumerate(old_rows) if not (r.get("provider") in clouds and SKYPILOT_SOURCE in
                                                          str(r.get("source", "")) and "||" not in str(r.get("source", "")))]
    kept = [old_rows[i] for i in kept_at]
    new_rows = [row for _, row in parsed]
    text = _prices_text(path, header, kept + new_rows)  # first: a file past the cap stops here, unchecked
    wheres = [f"--prices {path.name}: prices[{i}]" for i in kept_at] + [f"{w}: the prices row" for w, _ in parsed]
    offers = []
    for where, row in zip(wheres, kept + new_rows):  # as the catalog loader checks them, before anything is written
        offers.append(validate_record(Offer, row, where))
        catalog.gpus.get(row["gpu"])
    current_offers(offers, lambda i: wheres[i])  # one offer priced twice with no newer date is refused
    write_output(str(path), text, "--prices")
    return PriceUpdate(path, clouds, len(new_rows), len(old_rows) - len(kept), unknown, ", ".join(sorted(dates)),
                       "; ".join(origins))


def _split_prices_file(path: Path) -> tuple[str, list[dict[str, Any]]]:
    text = read_text(path, PRICES)
    data = parse_yaml(text, f"--prices {path.name}")
    rows = data.get("prices") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise PlannerInputError(f"--prices: {path.name} holds no list 'prices'; {PRICES.fix}")
    header = text.split("\nprices:", 1)[0] + "\n"
    return header, rows


def _dump(row: dict[str, Any]) -> str:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: a tenth of the pure-Python dumper's time
    return yaml.dump([row], Dumper=dumper, sort_keys=False, width=10_000, allow_unicode=True)


def _most_rows() -> int:
    """The most rows a prices.yaml planner reads back can hold: no row is shorter than one of one-character values."""
    return (PRICES.max_bytes or 0) // len(_dump({key: "x" for key in Offer.model_fields}))


def _too_many(where: str, what: str) -> PlannerInputError:
    return PlannerInputError(f"--from: {where} holds {what}, more rows than a prices.yaml planner reads can hold "
                             f"({PRICES.max_bytes // MiB} MiB); not a SkyPilot vms.csv")


def _prices_text(path: Path, header: str, rows: list[dict[str, Any]]) -> str:
    """prices.yaml's text, as planner reads it back: refused past the prices cap."""
    lines = [header.rstrip("\n"), "prices:"]
    provider, size = None, len(header)
    for row in rows:
        if row["provider"] != provider:
            provider = row["provider"]
            lines += ["", f"  # ---- {provider}"]
        dumped = _dump(row)
        lines += ["  " + line for line in dumped.rstrip("\n").splitlines()]
        size += len(dumped) + 2 * dumped.count("\n")
        if PRICES.max_bytes is not None and size > PRICES.max_bytes:
            raise _too_many(path.name, f"{len(rows):,} rows with those it keeps")
    return "\n".join(lines) + "\n"
