"""Hosted-API list prices: the rows of catalogs/hosted_prices.yaml, what a model's tokens cost per million at an
inference provider, dated and sourced (a fleet plan compares its own cost with them: planner.plan.hosted)."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from planner.catalog.load import Model, Registry, read_yaml, validate_record
from planner.catalog.prices import MAX_PRICE_AGE_DAYS, Name, PriceAge, age_of, one_line
from planner.errors import PlannerInputError

# A list price per million tokens: the dearest hosted open-weight model is tens of dollars; a thousand is no list price
MAX_USD_PER_MILLION_TOKENS = 1_000.0
UsdPerMillion = Annotated[float, Field(gt=0, le=MAX_USD_PER_MILLION_TOKENS, allow_inf_nan=False)]
Text = Annotated[str, StringConstraints(min_length=1, max_length=1000), AfterValidator(one_line)]


def _day(text: str) -> str:
    """A pydantic check: a calendar day written YYYY-MM-DD."""
    try:
        date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date: write YYYY-MM-DD") from None
    return text


class HostedPrice(BaseModel):
    """One provider's per-token list price for one catalog model, as a dated compilation lists it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    model: str  # a catalog model's name (load_hosted_prices checks it)
    provider: Name
    variant: Name | None = None  # a named tier of the endpoint (Turbo): part of how the plan names it
    endpoint: Text  # the provider's model id
    input_usd_per_million_tokens: UsdPerMillion
    output_usd_per_million_tokens: UsdPerMillion
    deprecated: Annotated[str, AfterValidator(_day)] | None = None  # the endpoint's deprecation date, when listed
    as_of: Annotated[str, AfterValidator(_day)]
    source: Text
    note: Text | None = None

    @property
    def name(self) -> str:
        """The provider and its endpoint's tier: together Turbo."""
        return f"{self.provider} {self.variant}" if self.variant else self.provider

    @property
    def label(self) -> str:
        """How a plan's comparison names it: its name, and a deprecation it carries."""
        return f"{self.name}, deprecated {self.deprecated}" if self.deprecated else self.name

    def usd_per_hour(self, input_tokens_per_hour: float, output_tokens_per_hour: float) -> float:
        """What an hour of this traffic costs at this list price."""
        return (input_tokens_per_hour * self.input_usd_per_million_tokens
                + output_tokens_per_hour * self.output_usd_per_million_tokens) / 1e6

    def age(self, max_age_days: int = MAX_PRICE_AGE_DAYS, today: date | None = None) -> PriceAge:
        """How old the price is, by the rental prices' rule (planner.catalog.prices.age_of)."""
        return age_of(self.as_of, date.fromisoformat(self.as_of),
                      f"the hosted list price of {self.name} for {self.model}",
                      "check the provider's pricing page and catalogs/hosted_prices.yaml", max_age_days, today)


def load_hosted_prices(path: Path, models: Registry[Model]) -> tuple[HostedPrice, ...]:
    """hosted_prices.yaml as rows, each naming a catalog model by its name, one row per (model, provider,
    endpoint)."""
    rows = read_yaml(path).get("hosted_prices")
    if not isinstance(rows, list):
        raise PlannerInputError(f"catalog {path.name}: missing the list 'hosted_prices'")
    prices = []
    seen: dict[tuple[str, str, str], int] = {}
    for i, row in enumerate(rows):
        where = f"catalog {path.name}: hosted_prices[{i}]"
        price = validate_record(HostedPrice, row, where)
        try:
            name = models.get(price.model).name
        except PlannerInputError as exc:
            raise PlannerInputError(f"{where}.model: {exc}") from None
        if name != price.model:
            raise PlannerInputError(f"{where}.model: write the catalog name {name!r}, not {price.model!r}")
        key = (price.model, price.provider, price.endpoint)
        if key in seen:
            raise PlannerInputError(f"{where}: prices {price.provider} {price.endpoint} for {price.model} again "
                                    f"(hosted_prices[{seen[key]}]); keep one row")
        seen[key] = i
        prices.append(price)
    return tuple(prices)
