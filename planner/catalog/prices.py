"""Price offers: the rows of catalogs/prices.yaml, and how old a price is (planner.catalog.price_update
rebuilds the rows)."""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Annotated, Callable, Literal, Sequence, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from planner.catalog.load import Gpu, Registry, read_yaml, validate_record
from planner.errors import PlannerInputError

# Provider, instance and region names as providers spell them (letters of any script, digits, spaces, - _ . , / ( );
# vast.ai names regions "Bács-Kiskun, HU, EU"), starting with a letter or a digit: never markup ([/x]), math
# ($x^$), a spreadsheet formula (=...) or a control character
Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^\w[\w .,/()-]*$")]
# A price per hour for a whole instance: the dearest shipped is $98 (8 x B200); a hundred times that rents no GPU
MAX_USD_PER_HOUR = 10_000.0
# GPUs in one rentable instance, as a scenario's search.max_gpus_per_node
MAX_INSTANCE_GPUS = 64
MARKETS = ("on-demand", "spot")
_PRICE_FIELD = {"on-demand": "on_demand_usd_per_hour", "spot": "spot_usd_per_hour"}
Price = Annotated[float | None, Field(gt=0, le=MAX_USD_PER_HOUR, allow_inf_nan=False)]
# What a price is: `list` the provider's published rate, `marketplace` a "from" / "starting at" / median price on a
# marketplace of hosts (what one pays depends on the host), `quote` a figure someone reports or was quoted (a sales
# quote, a research note, a blog) and no published rate confirms
PriceKind = Literal["list", "marketplace", "quote"]
PRICE_KINDS: tuple[str, ...] = get_args(PriceKind)
# A commitment: the price is paid every hour of a month, a year or three years (reserved instances, committed-use
# discounts), used or not. A row without a term is pay-as-you-go
Term = Literal["1m", "1y", "3y"]


def one_line(text: str) -> str:
    """A pydantic check: text that prints as one line (a newline would end a comment line of an export, and a
    lone surrogate cannot print)."""
    if not text.isprintable():
        raise ValueError("holds a line break, a control character or a lone surrogate")
    return text


class Offer(BaseModel):
    """One rentable shape: an instance of `gpus` GPUs at a provider, in a region, with its prices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Name
    instance: Name
    gpu: str
    gpus: int = Field(gt=0, le=MAX_INSTANCE_GPUS)
    region: Name
    kind: PriceKind
    term: Term | None = None  # with a term, on_demand_usd_per_hour is the committed hourly rate
    on_demand_usd_per_hour: Price = None
    spot_usd_per_hour: Price = None
    as_of: Annotated[str, StringConstraints(max_length=1000), AfterValidator(one_line)]
    source: Annotated[str, StringConstraints(max_length=1000), AfterValidator(one_line)]

    @field_validator("as_of")
    @classmethod
    def _dated(cls, as_of: str) -> str:
        for market in MARKETS:
            period(as_of, market)
        return as_of

    @model_validator(mode="after")
    def _committed(self) -> Offer:
        if self.term is not None and (self.spot_usd_per_hour is not None or self.on_demand_usd_per_hour is None):
            raise ValueError(f"a {self.term} commitment is priced by on_demand_usd_per_hour (its hourly rate) alone; "
                             "give spot prices on a row without a term")
        return self

    def price(self, market: str) -> float | None:
        return self.on_demand_usd_per_hour if market == "on-demand" else self.spot_usd_per_hour


def paid_as(market: str, term: str | None) -> str:
    """The market of a pay-as-you-go price ("on-demand", "spot"), or its commitment ("1y committed")."""
    return f"{term} committed" if term else market


def price_terms(market: str, kind: str, term: str | None = None) -> str:
    """How a plan says what it pays: the market or the commitment, and the kind of price ("on-demand, list price",
    "1y committed, list price")."""
    return f"{paid_as(market, term)}, {kind} price"


def offer_label(offer: Offer, market: str) -> str:
    """An offer's price in one market as plans name it: "lambda gpu_1x_gh200 (all, on-demand, list price)"."""
    return f"{offer.provider} {offer.instance} ({offer.region}, {price_terms(market, offer.kind, offer.term)})"


def load_offers(path: Path, gpus: Registry[Gpu]) -> tuple[Offer, ...]:
    """prices.yaml as offers, each naming a GPU of the GPU catalog, each market's price the current one
    (current_offers)."""
    rows = read_yaml(path).get("prices")
    if not isinstance(rows, list):
        raise PlannerInputError(f"catalog {path.name}: missing the list 'prices'")
    offers = tuple(validate_record(Offer, row, f"catalog {path.name}: prices[{i}]") for i, row in enumerate(rows))
    for offer in offers:
        gpus.get(offer.gpu)
    return current_offers(offers, lambda i: f"catalog {path.name}: prices[{i}]")


def current_offers(offers: Sequence[Offer], where: Callable[[int], str]) -> tuple[Offer, ...]:
    """The offers with only each offer's current price per market: of the rows of one offer (provider, instance,
    region, commitment term) that price a market, the newest dated supersedes the others, whose price in that market
    is dropped (a row left with no price is dropped). Newest means its as_of period starts after every other row's ends: as_of
    names a period (period), so "2025" (2025-01-01 to 2025-12-31) is older than "2026-09-25" and than "2026", but
    neither older nor newer than "2025-06" or "2025-06-15", which it contains. Rows whose dates do not tell which is
    newer (the same as_of, or one period within the other) are refused: `where(index)` names them."""
    rows: dict[tuple[str, str, str, str, str | None], list[int]] = {}
    for i, offer in enumerate(offers):
        for market in MARKETS:
            if offer.price(market) is not None:
                rows.setdefault((offer.provider, offer.instance, offer.region, market, offer.term), []).append(i)
    superseded: dict[int, list[str]] = {}
    for (provider, instance, region, market, term), indices in rows.items():
        periods = {i: period(offers[i].as_of, market) for i in indices}
        newest = max(indices, key=lambda i: periods[i][1])
        for i in indices:
            if i == newest:
                continue
            if periods[i][1] >= periods[newest][0]:
                first, second = sorted((i, newest))
                raise PlannerInputError(
                    f"{where(first)} and {where(second)}: both price the {paid_as(market, term)} "
                    f"offer {provider} {instance} ({region}) "
                    f"and their dates ({offers[first].as_of!r}, {offers[second].as_of!r}) do not tell which is newer; "
                    "delete the older row or date the newer one after it")
            superseded.setdefault(i, []).append(market)
    current = []
    for i, offer in enumerate(offers):
        dropped = superseded.get(i, [])
        if len(dropped) < sum(offer.price(m) is not None for m in MARKETS):
            current.append(offer.model_copy(update={_PRICE_FIELD[m]: None for m in dropped}))
    return tuple(current)


MAX_PRICE_AGE_DAYS = 90  # issue 12: a plan priced older than this says so (the default of pricing.max_price_age_days)
_PERIOD = re.compile(r"\b(\d{4})(?:-(\d{2}))?(?:-(\d{2}))?\b")


def period(as_of: str, market: str) -> tuple[date, date]:
    """The first and last day of the period `as_of` names for `market` (2025-06 -> 2025-06-01, 2025-06-30).
    as_of may date the markets apart: "on-demand: D1; spot: D2". ValueError when it names no calendar date."""
    text = as_of
    label = "on-demand:" if market == "on-demand" else "spot:"
    if label in text:
        text = text.split(label, 1)[1].split(";", 1)[0]
    match = _PERIOD.search(text)
    if match is None:
        raise ValueError("holds no date; write YYYY-MM-DD, YYYY-MM or YYYY")
    year, month, day = int(match.group(1)), match.group(2), match.group(3)
    try:
        if month is None:
            return date(year, 1, 1), date(year, 12, 31)
        if day is None:
            return date(year, int(month), 1), date(year, int(month), calendar.monthrange(year, int(month))[1])
        day_ = date(year, int(month), int(day))
        return day_, day_
    except ValueError:
        raise ValueError(f"{match.group(0)} is not a calendar date") from None


def price_date(offer: Offer, market: str) -> date:
    """The date of `offer`'s `market` price: the end of its as_of period, so an age is never overstated."""
    try:
        return period(offer.as_of, market)[1]
    except ValueError as exc:
        raise PlannerInputError(f"catalog prices.yaml: {offer.provider} {offer.instance} ({offer.region}): as_of "
                                f"{offer.as_of!r} {exc}") from None


@dataclass(frozen=True)
class PriceAge:
    """How old the price a plan pays is: `stale` past the plan's limit (a scenario's pricing.max_price_age_days,
    the CLI's --max-price-age), with the warning every format prints then."""

    as_of: str
    age_days: int
    stale: bool
    warning: str | None


def age_of(as_of: str, day: date, what: str, refresh: str, max_age_days: int = MAX_PRICE_AGE_DAYS,
           today: date | None = None) -> PriceAge:
    """The one stale-price rule, for rental and hosted-API prices alike: a price is stale when more than
    `max_age_days` have passed since `day`, the end of its as_of period. `what` names the price in the warning,
    `refresh` says how to renew it."""
    age = ((today or date.today()) - day).days
    stale = age > max_age_days
    warning = (f"{what} is {age} days old (as of {as_of}), past the {max_age_days}-day limit; prices move: "
               f"{refresh}") if stale else None
    return PriceAge(as_of, age, stale, warning)


def price_age(offer: Offer, market: str, max_age_days: int = MAX_PRICE_AGE_DAYS, today: date | None = None) -> PriceAge:
    """How old `offer`'s `market` price is (age_of, from the end of its as_of period: price_date)."""
    return age_of(offer.as_of, price_date(offer, market), f"the {market} price of {offer.provider} {offer.instance}",
                  "check the provider, or refresh with `planner prices update`", max_age_days, today)
