"""Results as JSON: the one serializer of plans and fleets (`--format json`, the plan files `planner export`
reads). Field names are the dataclasses' own; a record that carries a configuration has the
configuration's fields at its top level (planner.plan.planfile describes the layout and reads it back).
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from typing import TYPE_CHECKING, Any

from planner.plan.configuration import Configuration
from planner.plan.planfile import SCHEMA_VERSION

if TYPE_CHECKING:
    from planner.plan.fleet import Assignment, FleetPlan
    from planner.plan.solver import SolveResult


def configuration_record(configuration: Configuration) -> dict[str, Any]:
    """The configuration's fields, the engine as {name, every resolved setting}, and the two names export reads
    for the layout: gpus_per_replica and max_model_len."""
    out = record(configuration)
    out["gpus_per_replica"] = configuration.gpus
    out["max_model_len"] = configuration.max_model_len
    return out


def record(value: Any) -> Any:
    """A dataclass tree as JSON-ready values; a `configuration` field is merged into the record holding it."""
    if isinstance(value, Configuration):
        return {f.name: record(getattr(value, f.name)) for f in fields(value)}
    if is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in fields(value):
            item = getattr(value, f.name)
            if isinstance(item, Configuration):
                out.update(configuration_record(item))
            else:
                out[f.name] = record(item)
        return out
    if isinstance(value, (list, tuple)):
        return [record(v) for v in value]
    if isinstance(value, dict):
        return {str(k): record(v) for k, v in value.items()}
    return value


def document(kind: str, body: dict[str, Any]) -> str:
    """A plan file: the schema version and kind first, then the body."""
    return json.dumps({"schema_version": SCHEMA_VERSION, "kind": kind, **body}, indent=2)


def solve_json(result: SolveResult) -> str:
    body = record(result)
    body["plans"] = result.rows()
    return document("plan", body)


def assignment_row(a: Assignment) -> dict[str, Any]:
    """One fleet assignment, flat: the workload, the configuration, what one replica serves, where it runs."""
    perf = a.config.performance
    return {"workload": a.workload, "bucket": a.bucket, "replicas": a.replicas,
            **configuration_record(a.configuration),
            "capacity_rps_per_replica": round(a.config.capacity_rps, 3), "ttft_s": round(perf.ttft_s, 4),
            "tpot_s": round(perf.tpot_s, 5), "provider": a.pool.offer.provider, "instance": a.pool.offer.instance,
            "region": a.pool.offer.region, "market": a.pool.market, "gpus_per_instance": a.pool.offer.gpus,
            "headroom_bytes": a.memory.gpu.headroom_bytes if a.memory.gpu else None}


def fleet_json(plan: FleetPlan, scenario: str) -> str:
    return document("fleet", {
        "scenario": scenario, "status": plan.status, "gap": plan.gap, "solve_seconds": plan.solve_seconds,
        "usd_per_hour": plan.usd_per_hour, "usd_per_million_output_tokens": plan.usd_per_million_output_tokens,
        "assignments": [assignment_row(a) for a in plan.assignments],
        "pools": [{"provider": u.pool.offer.provider, "instance": u.pool.offer.instance, "region": u.pool.offer.region,
                   "market": u.pool.market, "gpu": u.pool.offer.gpu, "instances": u.instances,
                   "gpus_per_instance": u.pool.offer.gpus, "gpus_used": u.gpus_used, "usd_per_hour": u.usd_per_hour,
                   "price_as_of": u.pool.offer.as_of, "price_source": u.pool.offer.source} for u in plan.pools],
        "unmet": list(plan.unmet), "binding": list(plan.binding), "configurations": plan.configurations,
        "variables": plan.variables})
