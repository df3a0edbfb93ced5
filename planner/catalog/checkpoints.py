"""catalogs/checkpoints.yaml: pre-quantized repositories for precisions an engine cannot apply on load."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from planner.catalog.load import catalog_dir, load_catalog, read_yaml, validate_record
from planner.errors import PlannerInputError


class Checkpoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    precision: str
    repo: str
    source: str
    as_of: str


@cache
def load_checkpoints(directory: str | None = None) -> tuple[Checkpoint, ...]:
    path = Path(directory or catalog_dir()) / "checkpoints.yaml"
    rows = read_yaml(path).get("checkpoints")
    if not isinstance(rows, list):
        raise PlannerInputError(f"catalog {path.name}: missing the list 'checkpoints'")
    checkpoints = tuple(validate_record(Checkpoint, row, f"catalog {path.name}: checkpoints[{i}]") for i, row in enumerate(rows))
    catalog = load_catalog(directory)
    for c in checkpoints:
        catalog.models.get(c.model), catalog.precisions.get(c.precision)
    return checkpoints


def known_checkpoint(model_id: str, precision: str) -> str | None:
    """The catalog's pre-quantized repository of `model_id` (a catalog name or HF id) in `precision`."""
    models = load_catalog().models
    try:
        name = models.get(model_id).name
    except PlannerInputError:
        return None
    return next((c.repo for c in load_checkpoints() if c.model == name and c.precision == precision), None)
