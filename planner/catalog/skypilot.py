"""catalogs/skypilot.yaml as typed records: what each SkyPilot cloud calls a GPU, and what it refuses."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.load import catalog_dir, load_catalog, read_yaml, validate_record
from planner.catalog.prices import PriceKind
from planner.errors import PlannerInputError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CloudFeatures(_Strict):
    multi_node: bool
    spot_instance: bool
    open_ports: bool


class Cloud(_Strict):
    features: CloudFeatures
    price_kind: PriceKind = "list"  # what its vms.csv prices are: `planner prices update` writes it as each row's kind


class AcceleratorName(_Strict):
    gpu: str
    name: str
    instance: str | None = None  # regex on the vms.csv InstanceType
    gpu_mib: int | None = Field(default=None, gt=0)

    def matches(self, name: str, instance: str, gpu_mib: int | None) -> bool:
        return (name == self.name and (self.instance is None or re.search(self.instance, instance) is not None)
                and (self.gpu_mib is None or gpu_mib == self.gpu_mib))


class SkyPilotCatalog(_Strict):
    schema_version: int
    source: str
    as_of: str
    clouds: dict[str, Cloud]
    accelerators: dict[str, tuple[AcceleratorName, ...]]

    def accelerator(self, cloud: str, gpu: str) -> str | None:
        """What `cloud` calls catalog GPU `gpu` (None: no confirmed name)."""
        return next((a.name for a in self.accelerators.get(cloud, ()) if a.gpu == gpu), None)

    def gpu_for(self, cloud: str, name: str, instance: str, gpu_mib: int | None) -> str | None:
        """The catalog GPU behind one vms.csv row (None: a GPU planner does not know)."""
        return next((a.gpu for a in self.accelerators.get(cloud, ()) if a.matches(name, instance, gpu_mib)), None)


@cache
def load_skypilot(directory: str | None = None) -> SkyPilotCatalog:
    path = Path(directory or catalog_dir()) / "skypilot.yaml"
    catalog = validate_record(SkyPilotCatalog, read_yaml(path), f"catalog {path.name}")
    gpus = load_catalog(directory).gpus
    for cloud, names in catalog.accelerators.items():
        if cloud not in catalog.clouds:
            raise PlannerInputError(f"catalog {path.name}: accelerators.{cloud}: not a cloud listed under clouds")
        for entry in names:
            gpus.get(entry.gpu)
    return catalog
