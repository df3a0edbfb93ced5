"""Results as records: JSON (the one serializer of plans and fleets, (`--format json`, the plan files `planner export`
reads), CSV rows and DataFrames. Field names are the dataclasses' own; a record that carries a configuration has the
configuration's fields at its top level (planner.plan.planfile describes the layout and reads it back).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import fields, is_dataclass
from typing import TYPE_CHECKING, Any, Iterable

from planner.render.plain import controls_escaped
from planner.units import GiB, gb

if TYPE_CHECKING:
    from planner.catalog.load import Catalog
    from planner.estimator.memory import MemoryEstimate
    from planner.plan.configuration import Configuration
    from planner.estimator.engines import EngineBudget
    from planner.estimator.fit import EngineFit
    from planner.plan.fleet import Assignment, FleetPlan
    from planner.plan.failure import SpotRisk
    from planner.plan.hosted import HostedCost
    from planner.plan.loads import ReplicaLoads
    from planner.plan.profile import DayPlan
    from planner.plan.solver import PlanOption, SolveResult


def configuration_record(configuration: Configuration) -> dict[str, Any]:
    """The configuration's fields, the engine as {name, every resolved setting}, and the two names export reads
    for the layout: gpus_per_replica and max_model_len."""
    out = record(configuration)
    out["gpus_per_replica"] = configuration.gpus
    out["max_model_len"] = configuration.max_model_len
    return out


def _is_configuration(value: Any) -> bool:
    """A Configuration exists only once its module is loaded: an estimate's record is written without loading it
    (and the engines and pydantic it imports)."""
    module = sys.modules.get("planner.plan.configuration")
    return module is not None and isinstance(value, module.Configuration)


def record(value: Any) -> Any:
    """A dataclass tree as JSON-ready values; a `configuration` field is merged into the record holding it."""
    if _is_configuration(value):
        return {f.name: record(getattr(value, f.name)) for f in fields(value)}
    if is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in fields(value):
            item = getattr(value, f.name)
            if _is_configuration(item):
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
    from planner.plan.planfile import SCHEMA_VERSION

    return json.dumps({"schema_version": SCHEMA_VERSION, "kind": kind, **body}, indent=2)


def solve_json(result: SolveResult) -> str:
    body = record(result)
    body["plans"] = result.rows()
    return document("plan", body)


def assignment_row(a: Assignment) -> dict[str, Any]:
    """One fleet assignment, flat: the workload, the configuration, what one replica serves at each load, where it
    runs."""
    return {"workload": a.workload, "bucket": a.bucket, "replicas": a.replicas,
            **configuration_record(a.configuration), "model_precision": a.model_precision,
            "prompt_tokens": a.config.shape.prompt_tokens, "output_tokens": a.config.shape.output_tokens,
            "shared_prefix_tokens": a.config.shape.shared_prefix_tokens,
            "cached_prefill_tokens_per_request": a.config.cached_prefill_tokens,
            "capacity_rps_per_replica": round(a.config.capacity_rps, 3), "demand_share": round(a.demand_share, 4),
            "expected_rps_per_replica": round(a.expected_rps_per_replica, 4), **_loads_fields(a.loads),
            "max_num_seqs": a.config.scheduler.max_num_seqs, "slo": record(a.slo),
            "role": a.config.role, "role_slo": record(a.config.role_slo), "kv_transfer": a.config.transfer and {**record(a.config.transfer), "seconds": a.config.transfer.seconds},
            "provider": a.pool.offer.provider, "instance": a.pool.offer.instance,
            "region": a.pool.offer.region, "market": a.pool.market, "price_kind": a.pool.offer.kind,
            "price_term": a.pool.offer.term, "gpus_per_instance": a.pool.offer.gpus,
            "headroom_bytes": a.memory.gpu.headroom_bytes if a.memory.gpu else None}


def _loads_fields(loads: ReplicaLoads | None) -> dict[str, Any]:
    """planner.plan.loads flat, each figure named by its load: slo_limit_, planned_ (its requests/s are
    capacity_rps_per_replica), expected_ (expected_rps_per_replica), simulated_; latency_statistic says what the
    steady states' TTFT and TPOT are (mean, or the SLO's percentile)."""
    if loads is None:
        return {}
    out: dict[str, Any] = {"latency_statistic": loads.statistic, "utilisation": loads.utilisation,
                           "slo_limit_rps_per_replica": round(loads.slo_limit.requests_per_s, 4)}
    for name, level in (("slo_limit", loads.slo_limit), ("planned", loads.planned), ("expected", loads.expected)):
        out |= {f"{name}_running": round(level.running, 2), f"{name}_ttft_s": round(level.ttft_s, 4),
                f"{name}_tpot_s": round(level.tpot_s, 5)}
    sim = loads.simulated
    out["simulated_requests"] = sim.requests if sim else None
    out["simulated_running_mean"] = round(sim.running, 2) if sim else None
    for metric in ("ttft", "tpot"):
        for p in ("p50", "p90", "p99"):
            out[f"simulated_{metric}_{p}_s"] = round(getattr(getattr(sim, f"{metric}_s"), p), 5) if sim else None
    out["not_simulated"] = loads.not_simulated or None
    return out


def fleet_json(plan: FleetPlan, scenario: str, day: DayPlan | None = None) -> str:
    """The fleet plan file; with a day plan (planner.plan.profile), its costs and hours under "day"."""
    from planner.plan.fleet import TokenCosts

    return document("fleet", {
        "scenario": scenario, "status": plan.status, "gap": plan.gap, "solve_seconds": plan.solve_seconds,
        "usd_per_hour": plan.usd_per_hour,  # and per million tokens (TokenCosts' fields, null without a fleet)
        **(record(plan.token_costs) if plan.token_costs else dict.fromkeys(f.name for f in fields(TokenCosts))),
        "assignments": [assignment_row(a) for a in plan.assignments],
        "pools": [{"provider": u.pool.offer.provider, "instance": u.pool.offer.instance, "region": u.pool.offer.region,
                   "market": u.pool.market, "price_kind": u.pool.offer.kind,
                   "price_term": u.pool.offer.term, "gpu": u.pool.offer.gpu, "instances": u.instances,
                   "gpus_per_instance": u.pool.offer.gpus, "gpus_used": u.gpus_used, "usd_per_hour": u.usd_per_hour,
                   "price_as_of": u.pool.offer.as_of, "price_source": u.pool.offer.source,
                   "price_age": record(u.price_age), "spot": spot_record(u.spot)} for u in plan.pools],
        "unmet": list(plan.unmet), "binding": list(plan.binding), "left_out": list(plan.left_out),
        "speed": list(plan.speed), "serving": [record(s) for s in plan.serving],
        "layouts": [record(c) for c in plan.layouts], "speculative": [record(s) for s in plan.speculative],
        "hosted_comparison": [hosted_row(h) for h in plan.hosted],
        "configurations": plan.configurations,
        "variables": plan.variables, **({"day": record(day)} if day else {})})


def spot_record(spot: SpotRisk | None) -> dict[str, Any] | None:
    """A spot pool's interruption assumption, expected loss and on-demand fallback as JSON (null off spot)."""
    if spot is None:
        return None
    fallback = spot.fallback
    return {"interruption_rate_per_month": spot.interruption_rate, "replace_minutes": spot.replace_minutes,
            "unavailable_fraction": spot.unavailable, "expected_lost_requests_per_s": spot.lost_requests_per_s,
            "on_demand_fallback": fallback and {
                "provider": fallback.offer.provider, "instance": fallback.offer.instance,
                "region": fallback.offer.region, "instances": fallback.instances,
                "usd_per_hour": fallback.usd_per_hour}}


def hosted_row(h: HostedCost) -> dict[str, Any]:
    """A hosted-API comparison as JSON: the provider's price and date, and the fleet's cost against it."""
    p = h.price
    return {"workload": h.workload, "model": p.model, "provider": p.provider, "variant": p.variant,
            "endpoint": p.endpoint, "input_usd_per_million_tokens": p.input_usd_per_million_tokens,
            "output_usd_per_million_tokens": p.output_usd_per_million_tokens,
            "input_tokens_per_hour": h.input_tokens_per_hour, "output_tokens_per_hour": h.output_tokens_per_hour,
            "usd_per_hour": h.usd_per_hour, "fleet_usd_per_hour": h.fleet_usd_per_hour, "ratio": h.ratio,
            "as_of": h.price_age.as_of, "age_days": h.price_age.age_days, "stale": h.price_age.stale,
            "deprecated": p.deprecated, "source": p.source, "note": p.note}


def estimate_json(est: MemoryEstimate) -> str:
    return json.dumps(record(est), indent=2)


def engine_estimate_record(memory: MemoryEstimate, engine: EngineBudget) -> dict[str, Any]:
    """The estimate with an "engine" section (the engine's budget and the settings it resolved); "gpu.fits" is
    the engine's verdict."""
    data = record(memory)
    data["engine"] = record(engine)
    if data["gpu"] is not None:
        data["gpu"]["fits"] = engine.fits
    return data


def engine_estimate_json(memory: MemoryEstimate, engine: EngineBudget) -> str:
    return json.dumps(engine_estimate_record(memory, engine), indent=2)


def catalog_rows(catalog: Catalog, kind: str) -> list[dict[str, Any]]:
    if kind == "gpus":
        return [{"name": g.name, "display_name": g.display_name, "vendor": g.vendor, "generation": g.generation,
                 "segment": g.segment, "memory_bytes": g.memory_bytes, "memory_mib": g.memory_mib,
                 "memory_gb": round(gb(g.memory_bytes), 2), "memory_gib": round(g.memory_bytes / GiB, 2),
                 "memory_bandwidth_gbps": g.memory_bandwidth_gbps, "bf16_dense_tflops": g.dense_tflops.get("bf16"),
                 "fp8_dense_tflops": g.dense_tflops.get("fp8"), "native_formats": list(g.native_formats),
                 "interconnect": g.interconnect.name, "gpus_per_node": g.gpus_per_node, "source": g.source,
                 "as_of": g.as_of} for g in catalog.gpus]
    if kind == "models":
        return [{"name": m.name, "hf_id": m.hf_id, "family": m.family, "params": m.params,
                 "params_b": round(m.params / 1e9, 2), "aliases": list(m.aliases), "source": m.source,
                 "as_of": m.as_of} for m in catalog.models]
    return [{"name": p.name, "bits": p.bits, "scope": p.scope,
             "scales": (f"{p.scales.granularity}"
                        f"{'/' + str(p.scales.group_size) if p.scales.group_size else ''}"
                        f" {p.scales.scale_bits}+{p.scales.zero_bits} bits") if p.scales else "",
             "quality": p.quality, **_kernels(catalog, p.name), "aliases": list(p.aliases), "source": p.source}
            for p in catalog.precisions]


def _kernels(catalog: Catalog, precision: str) -> dict[str, str]:
    """Per engine of precision_support.yaml, the GPU generations it runs the precision on: native, weight-only."""
    out = {}
    for table in catalog.kernels:
        row = next((r for r in table.precisions if r.name == precision), None)
        parts = [f"{label} {', '.join(gens)}" for label, gens in
                 (("native", row.native), ("weight-only", row.weight_only)) if gens] if row else []
        out[table.name] = "; ".join(parts) or "no"
    return out


# A spreadsheet reads a cell starting with one of these as a formula (OWASP, "CSV Injection"; a leading tab or
# carriage return, the other two it lists, is written as its escape)
_FORMULA_STARTS = ("=", "+", "-", "@")


def _csv_cell(value: Any) -> Any:
    """Lists as a;b;c, a nested record (an engine and its settings) as key=value;..., numbers as they are, and text
    that a spreadsheet would run as a formula (a name from a file: =HYPERLINK(...)) after a quote, which it shows;
    control characters as their escapes."""
    if isinstance(value, list):
        value = ";".join(map(str, value))
    elif isinstance(value, dict):
        value = ";".join(f"{k}={v}" for k, v in value.items() if v is not None)
    if not isinstance(value, str):
        return value
    value = controls_escaped(value)  # no escape code reaches the terminal a CSV is printed on
    return "'" + value if value.startswith(_FORMULA_STARTS) else value


def rows_csv(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """Every CSV planner writes (columns: the first row's keys unless given)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns if columns is not None else list(rows[0]) if rows else [])
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(v) for k, v in row.items()})
    return buffer.getvalue()


def compare_frame(plans: Iterable[PlanOption]):
    """One row per (GPU type, provider): the cheapest configuration that holds the model."""
    import pandas as pd

    rows = [{"gpu": p.gpu, "provider": p.provider, "instance": p.instance, "region": p.region, "market": p.market,
             "price_kind": p.price_kind, "price_term": p.price_term, "gpus": p.gpus_per_replica, "tp": p.tp, "pp": p.pp, "precision": p.precision, "kv_dtype": p.kv_dtype,
             "usd_per_hour": p.usd_per_hour, "usd_per_gpu_hour": round(p.usd_per_hour / (p.instances * p.gpus_per_instance), 4),
             "headroom_gb": round(gb(p.headroom_bytes), 2), "price_as_of": p.price_as_of,
             "price_age_days": p.price_age.age_days, "price_stale": p.price_age.stale} for p in plans]
    columns = ["gpu", "provider", "instance", "region", "market", "price_kind", "price_term", "gpus", "tp", "pp", "precision", "kv_dtype",
               "usd_per_hour", "usd_per_gpu_hour", "headroom_gb", "price_as_of", "price_age_days", "price_stale"]
    return pd.DataFrame(rows, columns=columns)


def fleet_rows(plan: FleetPlan) -> list[dict[str, Any]]:
    """The assignments as flat rows (CSV), each with the price of the pool it runs on: as of, age, stale."""
    ages = {u.pool: u.price_age for u in plan.pools}
    return [assignment_row(a) | {"price_as_of": ages[a.pool].as_of, "price_age_days": ages[a.pool].age_days,
                                 "price_stale": ages[a.pool].stale} for a in plan.assignments]


def fit_record(f: EngineFit) -> dict[str, Any]:
    c, s, g = f.largest_context, f.most_sequences, f.fewest_gpus
    return {"engine": f.engine,
            "largest_context": {"tokens": c.context, "tp": c.split.tp, "pp": c.split.pp, "limit": c.limit},
            "most_sequences": {"sequences": s.sequences, "context": s.context, "tp": s.split.tp, "pp": s.split.pp},
            "fewest_gpus": {"gpus": g.split.gpus if g.split else None, "tp": g.split.tp if g.split else None,
                            "pp": g.split.pp if g.split else None, "context": g.context, "batch": g.batch,
                            "searched_up_to": g.max_gpus}}


def fit_json(fits: tuple[EngineFit, ...]) -> str:
    return json.dumps([fit_record(f) for f in fits], indent=2)
