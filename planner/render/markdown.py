"""Results as Markdown (`--format markdown`, report.md)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from planner.render.plain import controls_escaped
from planner.render.summary import (layout_text, DAY_COLUMNS, HOSTED_HEADER, day_lines, day_rows, fleet_cost_line,
                                    fleet_price_warnings, fleet_status, hosted_lines, hosted_rows, load_rows, spot_lines,
                                    memory_line, not_simulated_lines, offer_rows, prefix_lines, price_age_text,
                                    replica_label, replicas_text, running_text, serving_lines, speculative_choice_lines, layout_comparison_lines, layout_lines, speculative_lines,
                                    speed_line, status_line, tpot_ms)
from planner.units import gb

if TYPE_CHECKING:
    from planner.plan.fleet import FleetPlan
    from planner.plan.profile import DayPlan
    from planner.plan.review import FleetReview, Review
    from planner.plan.solver import SolveResult

# What Markdown (CommonMark, GitHub's tables) would read as syntax inside a line: emphasis, links, code, raw HTML
# (<script>), entities, table cells; a backslash before ASCII punctuation prints it as it is. An underscore
# between two letters or digits (time_limit_s) starts no emphasis in CommonMark, and is left as written.
_INLINE = re.compile(r"([\\`*\[\]|~<>&]|(?<![^\W_])_|_(?![^\W_]))")
# ... and at the start of a line or cell: a heading, a list item, a quote, a setext underline
_LEADING = re.compile(r"^(\s*)([#+=>-])")


def md(value: object) -> str:
    """Text from a file (a name, a path, a message quoting one) as Markdown prints it: as written, on one line
    (control characters shown as their escapes)."""
    return _LEADING.sub(r"\1\\\2", _INLINE.sub(r"\\\1", controls_escaped(value)))


def _fenced(text: str, info: str) -> list[str]:
    """A code block holding `text` as it is: its fence longer than any run of backticks inside (CommonMark: a
    shorter or equal run, indented up to three spaces, would close it)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]


def solve_markdown(result: SolveResult) -> str:
    lines = [f"## {md(result.scenario)}: {md(result.model)}", "", md(status_line(result)), ""]
    if result.best is None:
        lines.append("**No plan fits.**")
        if result.infeasible:
            lines += ["", md(result.infeasible.reason), ""] + [f"- {md(s)}" for s in result.infeasible.suggestions]
        return "\n".join(lines) + "\n"
    best = result.best
    lines += [f"**Best plan: ${best.usd_per_hour:,.2f}/hour** ({best.price_terms}): {best.replicas} x "
              f"{best.gpus_per_replica} x {best.gpu}, tp {best.tp} x pp {best.pp}, {best.precision} weights, "
              f"{best.kv_dtype} KV, context {best.context:,}, concurrency {best.concurrency}; "
              f"{best.instances} x {md(best.provider)} {md(best.instance)} ({md(best.region)}); {md(best.sharing)}.", "",
              md(memory_line(best)) + ".", "", md(speed_line(best)) + ".", ""]
    lines += [line for text in layout_lines(result) + speculative_lines(result) for line in (md(text) + ".", "")]
    lines += [f"Warning: {md(best.price_age.warning)}.", ""] if best.price_age.warning else []
    header = ["#", "GPUs", "tp x pp", "weights", "KV", "context", "concurrency", "provider / instance", "price", "$/hour",
              "price age"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rank, p in [("best", best), *enumerate(result.alternatives, start=1)]:
        lines.append(f"| {rank} | {p.gpus_per_replica * p.replicas} x {p.gpu} | {layout_text(p)} | {p.precision} | "
                     f"{p.kv_dtype} | {p.context:,} | {p.concurrency} | {md(p.provider)} {md(p.instance)} | {p.price_terms} | "
                     f"{p.usd_per_hour:,.2f} | {price_age_text(p.price_age)} |")
    if result.rejected_cheaper:
        lines += ["", "Cheaper options rejected by the estimator:", ""]
        lines += [f"- {r.tp * r.pp} x {r.gpu} ({r.precision}, KV {r.kv_dtype}, {r.context:,} x {r.concurrency}) at "
                  f"${r.usd_per_hour:,.2f}/hour: needs {gb(r.needed_bytes):.1f} GB per GPU, card holds "
                  f"{gb(r.card_bytes):.1f} GB" for r in result.rejected_cheaper]
    if result.too_slow:
        lines += ["", "Options at most the plan's price left out below workload.min_tokens_per_s:", ""]
        lines += [f"- {s.tp * s.pp} x {s.gpu} ({s.precision}, KV {s.kv_dtype}, {s.context:,} x {s.concurrency}) at "
                  f"${s.usd_per_hour:,.2f}/hour: {s.output_tokens_per_s:,.0f} output tokens/s per replica at the full "
                  "context" for s in result.too_slow]
    return "\n".join(lines) + "\n"


def records_markdown(records: list[dict]) -> str:
    """Flat records as a Markdown table, one row each (columns: the first record's keys)."""
    import pandas as pd

    return frame_markdown(pd.DataFrame(records))


def frame_markdown(frame) -> str:
    lines = ["| " + " | ".join(md(c) for c in frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(f"{v:,.2f}" if isinstance(v, float) else md(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def review_markdown(review: Review, scenario_text: str) -> str:
    lines = [solve_markdown(review.result).rstrip(), "", "### Binding constraints", ""]
    lines += [f"- {md(b)}" for b in review.binding]
    lines += ["", "### Cost vs context", "", "| context | $/hour |", "|---|---|"]
    lines += [f"| {c:,} | {'no fit' if v is None else f'{v:,.2f}'} |" for c, v in review.context_costs]
    lines += ["", "### Cost vs concurrency", "", "| concurrency | $/hour |", "|---|---|"]
    lines += [f"| {c:,} | {'no fit' if v is None else f'{v:,.2f}'} |" for c, v in review.concurrency_costs]
    if review.cut_short:
        lines += ["", f"cut short: {md(review.cut_short)}"]
    lines += ["", "### Scenario", "", *_fenced(scenario_text.rstrip(), "yaml")]
    return "\n".join(lines) + "\n"


def fleet_markdown(name: str, plan: FleetPlan) -> str:
    lines = [f"## {md(name)}: fleet", "", md(fleet_status(plan)), ""]
    if plan.usd_per_hour is not None:
        lines += [f"**{md(fleet_cost_line(plan))}**", ""] + [x for line in hosted_lines(plan) for x in (md(line), "")]
    lines += ["| workload | replicas x GPUs | tp x pp | weights/KV | max-model-len | pool |", "|---|---|---|---|---|---|"]
    for a in plan.assignments:
        c = a.config.candidate
        lines.append(f"| {md(a.workload)} | {replicas_text(a)} | {layout_text(c)} | {c.precision}/{c.kv_dtype} "
                     f"| {c.context:,} | {md(a.pool.label)} |")
    if any(a.loads for a in plan.assignments):
        lines += ["", "### Load per replica", "", "| replica | load | req/s | running | TTFT s | TPOT ms |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {md(replica_label(a))} | {md(level)} | {rps:,.2f} | {running_text(running)} | {ttft:.3f} | {tpot_ms(a, tpot)} |"
                  for a in plan.assignments for level, rps, running, ttft, tpot in (load_rows(a.loads) if a.loads else [])]
    lines += [""] + [f"- unmet: {md(u)}" for u in plan.unmet] + [f"- serving: {md(x)}" for x in serving_lines(plan)]
    lines += [f"- layout: {md(x)}" for x in layout_comparison_lines(plan)]
    lines += [f"- speculative: {md(x)}" for x in speculative_choice_lines(plan)]
    lines += [f"- binding: {md(b)}" for b in plan.binding]
    lines += [f"- left out: {md(x)}" for x in plan.left_out] + [f"- speed: {md(x)}" for x in plan.speed]
    lines += [f"- spot: {md(x)}" for x in spot_lines(plan)]
    lines += [f"- warning: {md(w)}" for w in fleet_price_warnings(plan)]
    lines += [f"- prefix: {md(x)}" for x in prefix_lines(plan)]
    lines += [f"- note: {md(x)}" for x in not_simulated_lines(plan)]
    lines += [f"- note: {md(x)}" for x in dict.fromkeys(f"{a.workload}: {a.config.candidate.gpu.name}: {w}"
                                                    for a in plan.assignments for w in a.memory.warnings)]
    return "\n".join(lines) + "\n"


def day_markdown(day: DayPlan) -> str:
    """A day plan (planner.plan.profile) as a section after its fleet's."""
    first, second, note = day_lines(day)
    lines = ["### Day, hour by hour", "", f"**{md(first)}**", "", f"**{md(second)}**", "", md(note), "",
             "| " + " | ".join(DAY_COLUMNS) + " |", "|" + "---|" * len(DAY_COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in day_rows(day)]
    return "\n".join(lines) + "\n"


def fleet_review_markdown(name: str, review: FleetReview, scenario_text: str) -> str:
    """`planner report -o report.md` of a fleet: the plan, its cost against the demand, the prices of the GPU types it
    rents, the catalogs' sizes and the scenario."""
    lines = [fleet_markdown(name, review.plan).rstrip(), "", "### Cost vs traffic", "",
             "| x the demand | $/hour |", "|---|---|"]
    lines += [f"| {times:g} | {'no fleet' if cost is None else f'{cost:,.2f}'} |" for times, cost in review.traffic_costs]
    if review.cut_short:
        lines += ["", f"cut short: {md(review.cut_short)}"]
    if review.offers:
        gpus = sorted({o.gpu for o, _, _ in review.offers})
        lines += ["", f"### Provider prices for {', '.join(gpus)}", "",
                  "| GPU | offer | $ per GPU-hour | as of | age |", "|---|---|---|---|---|"]
        lines += [f"| {o.gpu} | {md(label)} | {usd:,.4f} | {md(age.as_of)} | {price_age_text(age)} |"
                  for o, label, usd, age in offer_rows(review.offers)]
    if review.plan.hosted:
        lines += ["", "### Hosted API list prices", "", f"| {' | '.join(HOSTED_HEADER)} |",
                  f"|{'---|' * len(HOSTED_HEADER)}"]
        lines += [f"| {' | '.join(md(f'{v:,g}' if isinstance(v, float) else v) for v in row)} |"
                  for row in hosted_rows(review.plan)]
    counts = ", ".join(f"{n} {kind}" for kind, n in review.catalog_counts.items())
    lines += ["", "### Inputs", "", f"Catalogs: {counts} (planner's shipped catalogs).", "",
              *_fenced(scenario_text.rstrip(), "yaml")]
    return "\n".join(lines) + "\n"
