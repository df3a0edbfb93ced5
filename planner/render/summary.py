"""Sentences and column words every format shares: a solve's status, a plan's memory, a fleet's status, and the
words (with units) that tables print for a record's field names. JSON keeps the field names."""

from __future__ import annotations

from dataclasses import astuple
from typing import TYPE_CHECKING

from planner.plan.status import FEASIBLE, OPTIMAL
from planner.units import gb, gib

if TYPE_CHECKING:
    from planner.catalog.load import Offer
    from planner.catalog.prices import PriceAge
    from planner.estimator.layout import ParallelLayout
    from planner.plan.configuration import ConfiguredBy
    from planner.plan.fleet import Assignment, FleetPlan
    from planner.plan.loads import ReplicaLoads
    from planner.plan.profile import DayPlan
    from planner.plan.solver import PlanOption, SolveResult

# What a table header says for a record field: a word a reader knows, with its unit.
LABELS = {
    "gpu": "GPU", "display_name": "marketed as", "gpus": "GPUs", "tp": "TP", "pp": "PP", "precision": "weights",
    "kv_dtype": "KV cache", "usd_per_hour": "$/hour", "usd_per_gpu_hour": "$/GPU-hour", "headroom_gb": "headroom GB",
    "price_as_of": "price as of", "price_kind": "price kind", "memory_mib": "memory MiB", "memory_gb": "memory GB", "memory_gib": "memory GiB",
    "memory_bandwidth_gbps": "bandwidth GB/s", "bf16_dense_tflops": "BF16 dense TFLOPS",
    "fp8_dense_tflops": "FP8 dense TFLOPS", "interconnect": "GPU link", "gpus_per_node": "GPUs per node", "hf_id": "Hugging Face id",
    "params": "parameters", "params_b": "parameters (B)", "vllm": "vLLM runs it on", "sglang": "SGLang runs it on", "gpus_per_replica": "GPUs per replica",
    "context": "context (tokens)", "concurrency": "batch", "capacity_rps_per_replica": "planned req/s per replica",
    "ttft_s": "TTFT s", "tpot_s": "TPOT s", "price_age_days": "price age (days)", "price_stale": "price stale",
}


def column_label(field: str) -> str:
    return LABELS.get(field, field.replace("_", " "))


def status_line(result: SolveResult) -> str:
    if result.search_cut_short:
        verdict = (f"BEST FOUND, not proven (the {result.time_limit_s:g} s time limit cut the search short after "
                   f"{result.search_cut_short}; raise --time-limit to search the rest)")
    elif result.status == OPTIMAL:
        verdict = "OPTIMAL (proven cheapest)"
    elif result.status == FEASIBLE:
        verdict = f"FEASIBLE (time limit {result.time_limit_s:g} s reached; gap {result.gap:.1%} to the bound)"
    else:
        verdict = result.status
    return (f"{verdict} in {result.solve_seconds:.2f} s · {result.configurations_checked:,} configurations checked, "
            f"{result.candidates:,} fit, {result.variables:,} priced options (CP-SAT variables)")


def speed_line(p: PlanOption) -> str:
    """A plan's speed without traffic: its decode step with every request holding the whole context."""
    kernel = p.configuration.engine.moe_kernel
    return (f"speed at the full context: TPOT {p.full_context_step_s * 1000:,.1f} ms with {p.concurrency} x "
            f"{p.context:,} tokens held · {p.full_context_output_tokens_per_s:,.0f} output tokens/s · "
            f"${p.usd_per_million_output_tokens:,.2f} per million output tokens, busy all hour"
            + (f" · MoE on the {kernel} kernel (engine.moe_kernel)" if kernel else ""))


def speculative_lines(result: SolveResult) -> list[str]:
    """With search.speculative: the speculative setting the plan runs as the engine flags set it, where its acceptance
    length comes from, and the best plan with the other setting (its cost and speed)."""
    best, other = result.best, result.speculative_alternative
    if best is None or result.acceptance_source is None:
        return []
    spec = best.configuration.speculation
    lines = [f"speculative decoding: {spec.name if spec else 'none'}"
             + (f" ({result.acceptance_source})" if spec else "")]
    if not result.speculative_compared:
        return lines
    if other is None:
        lines.append("without MTP: no configuration searched fits" if spec else
                     f"with MTP (acceptance length {result.acceptance_source}): no configuration searched fits its "
                     "draft on one pipeline stage")
        return lines
    theirs = other.configuration.speculation
    lines.append(_next_best("with " + theirs.name if theirs else "without MTP", other))
    if not spec:
        lines[-1] += f" (acceptance length {result.acceptance_source})"
    return lines


def layout_lines(result: SolveResult) -> list[str]:
    """With search.layouts listing tp and dp_ep: the best plan in the other layout family (its cost and speed)."""
    best, other = result.best, result.layout_alternative
    if best is None or not result.layouts_compared:
        return []
    theirs = other_family(best.configuration.parallel)
    return [f"with {theirs}: no configuration searched fits" if other is None else _next_best(f"with {theirs}", other)]


def other_family(layout: ParallelLayout) -> str:
    """The layout family search.layouts offers beside `layout`'s."""
    return "TP x PP" if layout.expert_parallel else "data-parallel attention or expert parallelism"


def layout_comparison_lines(plan: FleetPlan) -> list[str]:
    """Each replica type of a workload searching tp and dp_ep, against the other family's best on the same GPUs."""
    lines = []
    for c in plan.layouts:
        where = f"{c.gpus} x {c.gpu}"
        theirs = (f"the best {other_family(c.layout)} layout of those GPUs, {c.other.name}, takes "
                  f"{c.other_capacity_rps:,.2f}" if c.other is not None and c.other_capacity_rps is not None else
                  f"no {other_family(c.layout)} layout of those GPUs holds the SLO")
        lines.append(f"{c.workload}{f' #{c.bucket}' if c.bucket else ''}: {c.layout.name} on {where} takes "
                     f"{c.capacity_rps:,.2f} req/s per replica at the SLO limit; {theirs}")
    return lines


def _next_best(label: str, other: PlanOption) -> str:
    return (f"next best {label}: ${other.usd_per_hour:,.2f}/hour, {other.gpus_per_replica * other.replicas} x "
            f"{other.gpu} ({other.layout}), context {other.context:,} x concurrency {other.concurrency}, TPOT "
            f"{other.full_context_step_s * 1000:,.1f} ms, {other.full_context_output_tokens_per_s:,.0f} output tokens/s, "
            f"${other.usd_per_million_output_tokens:,.2f} per million output tokens")


def memory_line(p: PlanOption) -> str:
    fullest = max(p.memory.per_gpu, key=lambda r: r.total_bytes)
    card = p.memory.gpu.memory_bytes if p.memory.gpu else 0
    share = p.headroom_bytes / card if card else 0
    return (f"per GPU: weights {gb(fullest.weights_bytes):.2f} + KV {gb(fullest.kv_cache_bytes):.2f} + overhead "
            f"{gb(fullest.overhead_bytes):.2f} = {gb(fullest.total_bytes):.2f} GB of {gb(card):.2f} GB "
            f"({gib(card):.2f} GiB); headroom {gb(p.headroom_bytes):.2f} GB ({share:.0%})")


def price_age_text(age: PriceAge) -> str:
    """A price's age as a table cell: "45 d", or "521 d, stale" past the plan's limit."""
    return f"{age.age_days:,} d" + (", stale" if age.stale else "")


def offer_rows(offers: tuple[tuple[Offer, str, PriceAge], ...]) -> list[tuple[Offer, str, float, PriceAge]]:
    """A review's prices as rows, cheapest per GPU-hour first: (offer, its label (offer_label), $ per GPU-hour,
    age)."""
    from planner.catalog.prices import offer_label

    rows = [(o, offer_label(o, market), o.price(market) / o.gpus, age)
            for o, market, age in offers]
    return sorted(rows, key=lambda r: (r[2], r[1]))


def fleet_price_warnings(plan: FleetPlan) -> list[str]:
    """The stale-price warning of each pool the fleet rents, and of each hosted-API price it compares with, whose
    price is past the limit."""
    return ([f"{u.pool.label}: {u.price_age.warning}" for u in plan.pools if u.price_age.warning]
            + [f"{h.workload}: {h.price_age.warning}" for h in plan.hosted if h.price_age.warning])


def spot_lines(plan: FleetPlan) -> list[str]:
    """Per spot pool the fleet rents: its interruption assumption, the capacity expected lost, and its on-demand
    fallback (planner.plan.failure)."""
    return [f"{u.pool.label}: {u.spot.line}" for u in plan.pools if u.spot]


def hosted_lines(plan: FleetPlan) -> list[str]:
    """One line per workload with hosted-API list prices (planner.plan.hosted): the fleet's cost for its traffic as
    a multiple of each provider's, cheapest provider first."""
    lines = []
    for workload in dict.fromkeys(h.workload for h in plan.hosted):
        rows = [h for h in plan.hosted if h.workload == workload]
        first = rows[0]
        each = ", ".join(f"{h.ratio:,.2f}x {h.price.label} (${h.usd_per_hour:,.2f}/h"
                         + (f", {price_age_text(h.price_age)})" if h.price_age.stale else ")") for h in rows)
        lines.append(f"Hosted API list prices for {first.price.model} at {workload}'s traffic "
                     f"({first.input_tokens_per_hour / 1e6:,.2f}M input + {first.output_tokens_per_hour / 1e6:,.2f}M "
                     f"output tokens/h): self-hosting (${first.fleet_usd_per_hour:,.2f}/h) costs {each}; "
                     f"as of {'/'.join(sorted({h.price.as_of for h in rows}))}, catalogs/hosted_prices.yaml")
    return lines


def fleet_cost_line(plan: FleetPlan) -> str:
    """The fleet's cost per hour and per million tokens at its planned load (TokenCosts), without markup."""
    line = f"Fleet: ${plan.usd_per_hour:,.2f}/hour"
    costs = plan.token_costs
    if costs is None:
        return line
    return (f"{line} · per million tokens: ${costs.usd_per_million_input_tokens:,.3f} input, "
            f"${costs.usd_per_million_output_tokens:,.3f} output, ${costs.usd_per_million_tokens:,.3f} blended "
            "at the demand's input/output mix")


HOSTED_HEADER = ["workload", "provider", "endpoint", "$/M input", "$/M output", "$/hour at this traffic",
                 "fleet / hosted", "as of", "age", "note", "source"]


def hosted_rows(plan: FleetPlan) -> list[list[str | float]]:
    """The report's table of the hosted-API prices a fleet compares with (HOSTED_HEADER's columns)."""
    return [[h.workload, h.price.label, h.price.endpoint, h.price.input_usd_per_million_tokens,
             h.price.output_usd_per_million_tokens, h.usd_per_hour, h.ratio, h.price.as_of,
             price_age_text(h.price_age), h.price.note or "", h.price.source] for h in plan.hosted]


def fleet_status(plan: FleetPlan) -> str:
    verdict = {OPTIMAL: "OPTIMAL (proven cheapest)", FEASIBLE: f"FEASIBLE (time limit; gap {plan.gap:.1%})"}.get(
        plan.status, plan.status)
    return (f"{verdict} in {plan.solve_seconds:.2f} s · {plan.configurations:,} serving configurations, "
            f"{plan.variables:,} CP-SAT variables")


DAY_COLUMNS = ("hour (UTC)", "demand req/s", "replicas", "instances started", "$/hour")


def day_lines(day: DayPlan) -> list[str]:
    """A day plan's costs: scaled hour by hour (base + what scales) against the peak fleet all day."""
    base = sum(day.base_replicas)
    share = day.saving_usd_per_day / day.peak_usd_per_day if day.peak_usd_per_day else 0.0
    return [f"Day, scaled hour by hour: ${day.usd_per_day:,.2f}/day = base ${day.base_usd_per_day:,.2f}/day "
            f"({base} replica{'s' * (base != 1)} up all day, ${day.base_usd_per_hour:,.2f}/hour) + scaled "
            f"${day.scaled_usd_per_day:,.2f}/day",
            f"Sized for the peak all day: ${day.peak_usd_per_day:,.2f}/day (the fleet above x 24); scaling saves "
            f"${day.saving_usd_per_day:,.2f}/day ({share:.0%})",
            f"replicas an hour adds start {day.scale_up_minutes:g} min before it (fleet.scale_up_minutes) and are paid "
            "from then; every replica pays its pool's price, and a pool priced by a commitment (pricing.terms) is paid "
            "every hour"]


def day_rows(day: DayPlan) -> list[tuple[str, ...]]:
    """The day's hours as table cells (DAY_COLUMNS)."""
    return [(f"{h.hour:02d}:00", f"{h.requests_per_s:,.2f}", str(h.replicas), f"+{h.instances_started}" if
             h.instances_started else "", f"{h.usd_per_hour:,.2f}") for h in day.hours]


def load_rows(loads: ReplicaLoads) -> list[tuple[str, float, float | None, float, float]]:
    """One replica at each load, labelled by its level (planner.plan.loads): (level, requests/s, requests running,
    TTFT s, TPOT s); the simulator's p50 and p99 at the expected load when it ran (running: None, a percentile of
    the simulator's latencies is not one of its running requests)."""
    s = loads.statistic
    rows = [(f"at the SLO limit ({s})", *astuple(loads.slo_limit)),
            (f"planned: {loads.utilisation:.0%} of the limit ({s})", *astuple(loads.planned)),
            (f"expected: the demand ({s})", *astuple(loads.expected))]
    sim = loads.simulated
    if sim is not None:
        rows += [(f"expected, simulated {p}", loads.expected.requests_per_s, None, getattr(sim.ttft_s, p),
                  getattr(sim.tpot_s, p)) for p in ("p50", "p99")]
    return rows


def running_text(running: float | None) -> str:
    """A load row's requests running as a cell ("-": not a figure of that row)."""
    return "-" if running is None else f"{running:,.1f}"


def layout_text(option: ConfiguredBy) -> str:
    """A plan's, rejection's, left-out option's or fleet replica's layout in a table: `8 x 1` (tp x pp), or with
    data-parallel attention or expert parallelism as the engines' flags set it (`tp 16 x dp 16 x ep 16 x pp 1`), and
    its speculative decoding (`, MTP 3 tokens, acceptance length 2.65`)."""
    configuration = option.configuration
    spec = configuration.speculation
    return (option.layout if configuration.parallel.expert_parallel else f"{option.tp} x {option.pp}") + (
        f", {spec.name}" if spec else "")


def replica_label(a: Assignment) -> str:
    """An assignment as a reader names it: its workload (and request bucket past the first) and replica (with its
    role in a disaggregated pair)."""
    c = a.config.candidate
    return f"{a.workload}{f' #{a.bucket}' if a.bucket else ''}: {_role(a)}{c.gpus} x {c.gpu.name}"


def replicas_text(a: Assignment) -> str:
    """An assignment's replicas x GPUs, with its role in a disaggregated pair: `prefill 2 x 1 x h200-sxm`."""
    c = a.config.candidate
    return f"{_role(a)}{a.replicas} x {c.gpus} x {c.gpu.name}"


def tpot_ms(a: Assignment, tpot_s: float) -> str:
    """A load level's TPOT in ms; none for a prefill replica, which makes each request's first token only."""
    return "-" if a.config.role == "prefill" else f"{tpot_s * 1000:.1f}"


def _role(a: Assignment) -> str:
    return "" if a.config.role == "both" else f"{a.config.role} "


def serving_lines(plan: FleetPlan) -> list[str]:
    """Per workload bucket whose search.serving is not the default: the mode the plan took, a disaggregated pair's
    pools, TTFT and KV transfer, and what the other mode would cost."""
    lines = []
    for s in plan.serving:
        mine = [a for a in plan.assignments if a.workload == s.workload and a.bucket == s.bucket]
        label = f"{s.workload}{f' #{s.bucket}' if s.bucket else ''}"
        if s.mode == "aggregated":
            line = f"{label}: aggregated"
        else:
            pools = " / ".join(f"{role} " + " + ".join(
                f"{a.replicas} x ({a.config.candidate.gpus} x {a.config.candidate.gpu.name})" for a in mine
                if a.config.role == role) for role in ("prefill", "decode"))
            line = (f"{label}: disaggregated, {pools}; TTFT at the SLO limits {s.ttft_s:.3f} s (prefill + KV "
                    f"transfer {s.transfer_s * 1000:.1f} ms of {s.transfer_bytes / 1e6:,.1f} MB per GPU + decode's "
                    f"first token)")
        if s.other_mode is not None:
            if s.other_usd_per_hour is None:
                line += f"; {s.other_mode}: {s.other_note}"
            else:
                change = s.other_usd_per_hour - (plan.usd_per_hour or 0)
                line += f"; {s.other_mode} would cost ${s.other_usd_per_hour:,.2f}/hour ({change:+,.2f})"
        lines.append(line)
    return lines


def speculative_choice_lines(plan: FleetPlan) -> list[str]:
    """Per workload whose search.speculative lists none and mtp: the setting its replicas run (with where the MTP
    acceptance length comes from) and the fleet's cost held to the other setting, as a single configuration's
    speculative_lines say it."""
    lines = []
    for s in plan.speculative:
        line = f"{s.workload}: speculative decoding {s.running}"
        if s.running not in ("none", "mixed") and s.acceptance_source:
            line += f" ({s.acceptance_source})"
        if s.other is not None:
            source = f" (acceptance length {s.acceptance_source})" if s.running == "none" and s.acceptance_source else ""
            if s.other_usd_per_hour is None:
                line += f"; {s.other}{source}: {s.other_note}"
            else:
                change = s.other_usd_per_hour - (plan.usd_per_hour or 0)
                line += f"; next best {s.other}{source}: ${s.other_usd_per_hour:,.2f}/hour ({change:+,.2f})"
                line += f", {s.other_replicas}" if s.other_replicas else ""
        if s.pairs_without_mtp:
            line += ("; disaggregated prefill/decode pairs are searched without MTP (a decode pool's MTP cycles beside "
                     "transferred prompts are not modelled)")
        lines.append(line)
    return lines


def prefix_lines(plan: FleetPlan) -> list[str]:
    """The prefix-cache assumption of each workload bucket with a shared prefix, once per replica type's block."""
    return list(dict.fromkeys(
        f"{a.workload}{f' #{a.bucket}' if a.bucket else ''}: the shared {a.config.shape.shared_prefix_tokens:,}-token "
        f"prompt prefix cached once per replica ({a.config.candidate.gpu.name}: {a.config.cached_prefill_tokens:,} "
        f"tokens in whole {a.config.scheduler.block_tokens}-token blocks); each request prefills "
        f"{a.config.shape.prompt_tokens - a.config.cached_prefill_tokens:,} of its {a.config.shape.prompt_tokens:,}"
        for a in plan.assignments if a.config.shape.shared_prefix_tokens))


def not_simulated_lines(plan: FleetPlan) -> list[str]:
    """The assignments whose expected load the plan did not simulate, and why."""
    return [f"{replica_label(a)}: expected load not simulated: {a.loads.not_simulated}" for a in plan.assignments
            if a.loads is not None and a.loads.simulated is None]


# The headline of a plan without a fleet (a search the time limit cut short raises OutOfTime instead: no plan)
NO_FLEET = "No fleet serves all the traffic."
