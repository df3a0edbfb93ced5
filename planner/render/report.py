"""Rendering typed results as terminal tables, JSON and CSV. No estimation happens here."""

from __future__ import annotations

import csv
import html
import io
import json

from typing import TYPE_CHECKING, Any, Iterable

from rich.console import Console
from rich.table import Table

from planner.catalog.load import Catalog
from planner.estimator.memory import MemoryEstimate, RankMemory
from planner.render.records import assignment_row
from planner.units import GiB, MiB, format_bytes, format_count, gb, gib

if TYPE_CHECKING:  # the solver (and OR-Tools) load only for `planner solve`
    from planner.estimator.engines import EngineBudget
    from planner.estimator.fit import EngineFit
    from planner.plan.fleet import FleetPlan
    from planner.plan.review import Review
    from planner.plan.solver import PlanOption, SolveResult


def _bytes_row(label: str, n_bytes: int, note: str = "") -> list[str]:
    return [label, f"{n_bytes:,}", f"{gb(n_bytes):,.2f}", f"{gib(n_bytes):,.2f}", note]


def estimate_table(est: MemoryEstimate, console: Console, show_fit: bool = True) -> None:
    """The breakdown; show_fit=False when an engine's own verdict follows (engine_table)."""
    gpus = est.tp * est.pp
    split = f" · tp {est.tp} x pp {est.pp} = {gpus} GPUs" if gpus > 1 else " · 1 GPU"
    console.print(f"[bold]{est.model}[/bold] · weights {est.precision} · KV {est.kv_dtype} · "
                  f"context {est.context:,} · batch {est.batch}{split}")
    if est.exact:
        parts = f"language model {format_count(est.language_params)}"
        if est.multimodal_params:
            parts += f" + vision tower/projector {format_count(est.multimodal_params)}"
        if est.checkpoint_params != est.language_params + est.multimodal_params:
            skipped = est.checkpoint_params - est.language_params - est.multimodal_params
            parts += f"; {format_count(skipped)} more in the checkpoint not loaded for serving (e.g. MTP)"
        console.print(f"parameters {est.params:,} ({format_count(est.params)}), counted tensor by tensor: {parts}")
    else:
        console.print(f"parameters {est.params:,} ({format_count(est.params)}), as given (weights = params x bytes per param)")

    table = Table(show_header=True, header_style="bold")
    for col, justify in (("", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right"), ("how", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    suffix = " (all GPUs)" if gpus > 1 else ""
    table.add_row(*_bytes_row("weights" + suffix, est.weights_bytes, f"{est.precision}, {est.quality}"))
    kv_note = f"{est.kv_bytes_per_token:,} B/token x {est.context:,} x {est.batch} seq"
    if est.kv_sliding_bytes_per_token:
        windows = "/".join(f"{w:,}" for w in est.sliding_windows)
        kv_note += f" + sliding {est.kv_sliding_bytes_per_token:,} B/token x <={windows}"
    if est.kv_state_bytes_per_sequence:
        kv_note += f" + recurrent state {est.kv_state_bytes_per_sequence:,} B/seq"
    table.add_row(*_bytes_row("KV cache" + suffix, est.kv_cache_bytes, kv_note))
    table.add_row(*_bytes_row("overhead" + suffix, est.overhead_bytes,
                              f"{est.overhead_fraction:.0%} of weights+KV, >= {est.runtime_reserve_bytes // MiB:,} MiB/GPU"))
    table.add_row(*_bytes_row("total" + suffix, est.total_bytes), style="bold")
    console.print(table)

    if gpus > 1:
        per = Table(title="per GPU", show_header=True, header_style="bold")
        for col in ("ranks", "pp stage", "layers", "weights GB", "KV GB", "overhead GB", "total GB", "total GiB"):
            per.add_column(col, justify="right")
        for group in _identical_ranks(est):
            r = group[0]
            ranks = str(r.rank) if len(group) == 1 else f"{r.rank}-{group[-1].rank}"
            per.add_row(ranks, str(r.pp_stage), f"{r.first_layer}-{r.last_layer - 1}",
                        f"{gb(r.weights_bytes):,.2f}", f"{gb(r.kv_cache_bytes):,.2f}", f"{gb(r.overhead_bytes):,.2f}",
                        f"{gb(r.total_bytes):,.2f}", f"{gib(r.total_bytes):,.2f}")
        console.print(per)

    if est.gpu is not None and show_fit:
        fit = est.gpu
        verdict = "[green]fits[/green]" if fit.fits else "[red]does not fit[/red]"
        which = "the fullest GPU" if gpus > 1 else "it"
        console.print(f"GPU {fit.name}: {format_bytes(fit.memory_bytes)} as the runtime reports it "
                      f"({fit.memory_bytes // MiB:,} MiB) -> {verdict}; headroom on {which}: "
                      f"{format_bytes(fit.headroom_bytes)}")
    for warning in est.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def _identical_ranks(est: MemoryEstimate) -> list[list[RankMemory]]:
    """Consecutive ranks with the same stage and bytes, shown as one row."""
    groups: list[list[RankMemory]] = []
    for r in est.per_gpu:
        key = (r.pp_stage, r.weights_bytes, r.kv_cache_bytes, r.overhead_bytes)
        if groups and (groups[-1][0].pp_stage, groups[-1][0].weights_bytes, groups[-1][0].kv_cache_bytes,
                       groups[-1][0].overhead_bytes) == key:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def estimate_json(est: MemoryEstimate) -> str:
    return json.dumps(est.to_dict(), indent=2)


# --------------------------------------------------------------------------------------------
# Catalog listings


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
             "quality": p.quality, "native": list(p.native), "aliases": list(p.aliases), "source": p.source}
            for p in catalog.precisions]


_TABLE_COLUMNS = {
    "gpus": ("name", "display_name", "memory_mib", "memory_gb", "memory_gib", "memory_bandwidth_gbps",
             "bf16_dense_tflops", "fp8_dense_tflops", "interconnect", "gpus_per_node"),
    "models": ("name", "hf_id", "family", "params", "params_b"),
    "precisions": ("name", "bits", "scope", "scales", "quality", "native"),
}


def rows_table(rows: Iterable[dict[str, Any]], kind: str, console: Console) -> None:
    table = Table(show_header=True, header_style="bold")
    columns = _TABLE_COLUMNS[kind]
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(_cell(row[c]) for c in columns))
    console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def rows_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else [])
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ";".join(map(str, v)) if isinstance(v, list) else v for k, v in row.items()})
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------
# planner solve


def _status_line(result: SolveResult) -> str:
    if result.status == "OPTIMAL":
        verdict = "OPTIMAL (proven cheapest)"
    elif result.status == "FEASIBLE":
        verdict = f"FEASIBLE (time limit {result.time_limit_s:g} s reached; gap {result.gap:.1%} to the bound)"
    else:
        verdict = result.status
    return (f"{verdict} in {result.solve_seconds:.2f} s · {result.configurations_checked:,} configurations checked, "
            f"{result.candidates:,} fit, {result.variables:,} priced options (CP-SAT variables)")


def _memory_line(p: PlanOption) -> str:
    fullest = max(p.memory.per_gpu, key=lambda r: r.total_bytes)
    card = p.memory.gpu.memory_bytes if p.memory.gpu else 0
    share = p.headroom_bytes / card if card else 0
    return (f"per GPU: weights {gb(fullest.weights_bytes):.2f} + KV {gb(fullest.kv_cache_bytes):.2f} + overhead "
            f"{gb(fullest.overhead_bytes):.2f} = {gb(fullest.total_bytes):.2f} GB of {gb(card):.2f} GB "
            f"({gib(card):.2f} GiB); headroom {gb(p.headroom_bytes):.2f} GB ({share:.0%})")


def solve_table(result: SolveResult, console: Console) -> None:
    console.print(f"[bold]{result.scenario}[/bold] · {result.model} · {_status_line(result)}")
    for note in result.skipped:
        console.print(f"skipped {note}")
    best = result.best
    if best is None:
        _infeasible(result, console)
        return
    console.print(f"\n[bold]Best plan: ${best.usd_per_hour:,.2f}/hour[/bold] ({best.market}"
                  + (f", ${best.usd_per_replica_hour:,.2f} per replica" if best.replicas > 1 else "") + ")")
    console.print(f"  {best.replicas} replica(s) of {best.gpus_per_replica} x {best.gpu} ({best.gpu_display}): "
                  f"tp {best.tp} x pp {best.pp}, {best.nodes_per_replica} node(s) per replica")
    console.print(f"  weights {best.precision} ({best.memory.quality}) · KV {best.kv_dtype} · context {best.context:,} · "
                  f"concurrency {best.concurrency}")
    console.print(f"  rent: {best.instances} x {best.provider} {best.instance} ({best.gpus_per_instance} GPUs, "
                  f"{best.region}); {best.sharing}")
    console.print(f"  {_memory_line(best)} · re-checked by the estimator")
    console.print(f"  price as of {best.price_as_of}; source: {best.price_source}")
    for warning in (*best.price_warnings, *best.memory.warnings):
        console.print(f"  [yellow]warning:[/yellow] {warning}")

    if result.alternatives:
        table = Table(title="Alternatives: the best plan on each other GPU type", show_header=True, header_style="bold")
        for col in ("#", "GPUs (tp x pp)", "weights/KV", "context x conc.", "rent", "$/hour", "headroom GB"):
            table.add_column(col, justify="right" if col in ("$/hour", "headroom GB") else "left")
        for i, p in enumerate(result.alternatives, start=1):
            table.add_row(str(i), f"{p.gpus_per_replica * p.replicas} x {p.gpu} ({p.tp} x {p.pp})",
                          f"{p.precision}/{p.kv_dtype}", f"{p.context:,} x {p.concurrency}",
                          f"{p.instances} x {p.provider} {p.instance}" + (" (spot)" if p.market == "spot" else ""),
                          f"{p.usd_per_hour:,.2f}", f"{gb(p.headroom_bytes):.1f}")
        console.print(table)
    if result.rejected_cheaper:
        table = Table(title="Cheaper options the estimator rejected (closest miss per GPU type)", show_header=True,
                      header_style="bold")
        for col in ("GPUs (tp x pp)", "weights/KV", "context x conc.", "$/hour", "why not"):
            table.add_column(col)
        for r in result.rejected_cheaper:
            table.add_row(f"{r.tp * r.pp} x {r.gpu} ({r.tp} x {r.pp})", f"{r.precision}/{r.kv_dtype}",
                          f"{r.context:,} x {r.concurrency}", f"{r.usd_per_hour:,.2f}",
                          f"needs {gb(r.needed_bytes):.1f} GB per GPU, card holds {gb(r.card_bytes):.1f} GB")
        console.print(table)


def _infeasible(result: SolveResult, console: Console) -> None:
    info = result.infeasible
    console.print("\n[bold red]No plan fits.[/bold red]")
    if info is None:
        return
    console.print(f"  {info.reason}")
    if info.suggestions:
        console.print("  Changes that would make it fit (one at a time):")
        for suggestion in info.suggestions:
            console.print(f"   - {suggestion}")


def solve_markdown(result: SolveResult) -> str:
    lines = [f"## {result.scenario}: {result.model}", "", _status_line(result), ""]
    if result.best is None:
        lines.append("**No plan fits.**")
        if result.infeasible:
            lines += ["", result.infeasible.reason, ""] + [f"- {s}" for s in result.infeasible.suggestions]
        return "\n".join(lines) + "\n"
    best = result.best
    lines += [f"**Best plan: ${best.usd_per_hour:,.2f}/hour** ({best.market}): {best.replicas} x "
              f"{best.gpus_per_replica} x {best.gpu}, tp {best.tp} x pp {best.pp}, {best.precision} weights, "
              f"{best.kv_dtype} KV, context {best.context:,}, concurrency {best.concurrency}; "
              f"{best.instances} x {best.provider} {best.instance} ({best.region}); {best.sharing}.", "",
              _memory_line(best) + ".", ""]
    lines += [f"Warning: {w}." for w in best.price_warnings] + ([""] if best.price_warnings else [])
    header = ["#", "GPUs", "tp x pp", "weights", "KV", "context", "concurrency", "provider / instance", "market", "$/hour"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rank, p in [("best", best), *enumerate(result.alternatives, start=1)]:
        lines.append(f"| {rank} | {p.gpus_per_replica * p.replicas} x {p.gpu} | {p.tp} x {p.pp} | {p.precision} | "
                     f"{p.kv_dtype} | {p.context:,} | {p.concurrency} | {p.provider} {p.instance} | {p.market} | "
                     f"{p.usd_per_hour:,.2f} |")
    if result.rejected_cheaper:
        lines += ["", "Cheaper options rejected by the estimator:", ""]
        lines += [f"- {r.tp * r.pp} x {r.gpu} ({r.precision}, KV {r.kv_dtype}, {r.context:,} x {r.concurrency}) at "
                  f"${r.usd_per_hour:,.2f}/hour: needs {gb(r.needed_bytes):.1f} GB per GPU, card holds "
                  f"{gb(r.card_bytes):.1f} GB" for r in result.rejected_cheaper]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# planner compare


def compare_frame(plans: Iterable[PlanOption]):
    """One row per (GPU type, provider): the cheapest configuration that holds the model."""
    import pandas as pd

    rows = [{"gpu": p.gpu, "provider": p.provider, "instance": p.instance, "region": p.region, "market": p.market,
             "gpus": p.gpus_per_replica, "tp": p.tp, "pp": p.pp, "precision": p.precision, "kv_dtype": p.kv_dtype,
             "usd_per_hour": p.usd_per_hour, "usd_per_gpu_hour": round(p.usd_per_hour / (p.instances * p.gpus_per_instance), 4),
             "headroom_gb": round(gb(p.headroom_bytes), 2), "price_as_of": p.price_as_of} for p in plans]
    columns = ["gpu", "provider", "instance", "region", "market", "gpus", "tp", "pp", "precision", "kv_dtype",
               "usd_per_hour", "usd_per_gpu_hour", "headroom_gb", "price_as_of"]
    return pd.DataFrame(rows, columns=columns)


COMPARE_TABLE_COLUMNS = ["gpu", "provider", "instance", "gpus", "tp", "pp", "precision", "kv_dtype", "usd_per_hour",
                         "usd_per_gpu_hour", "headroom_gb"]


def frame_table(frame, title: str, console: Console, columns: list[str] | None = None) -> None:
    """A DataFrame as a terminal table (the widest text columns left to JSON/CSV)."""
    frame = frame[columns] if columns else frame
    table = Table(title=title, show_header=True, header_style="bold")
    for col in frame.columns:
        table.add_column(col, justify="right" if frame[col].dtype.kind in "if" else "left")
    for row in frame.itertuples(index=False):
        table.add_row(*(f"{v:,.2f}" if isinstance(v, float) else str(v) for v in row))
    console.print(table if len(frame) else "no GPU and provider holds this model with these settings")


def frame_markdown(frame) -> str:
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(f"{v:,.2f}" if isinstance(v, float) else str(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# planner report: a page for a capacity-planning review


_PAGE_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:70rem;color:#222;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}
th{background:#f3f3f3}td.num{text-align:right}.best{font-size:1.05rem;background:#f5f9ff;padding:.75rem;border-left:4px solid #4C72B0}
.charts{display:flex;flex-wrap:wrap;gap:1rem}pre{background:#f6f6f6;padding:.75rem;font-size:.8rem;overflow-x:auto}
.warn{color:#8a5a00}
"""


def _html_table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(
        f'<td class="num">{html.escape(_num(v))}</td>' if isinstance(v, (int, float)) else f"<td>{html.escape(str(v))}</td>"
        for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _num(value: float | int) -> str:
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"


_PLAN_HEADER = ["#", "GPUs", "tp x pp", "weights", "KV", "context", "concurrency", "provider / instance", "market",
                "$/hour", "headroom GB"]


def _plan_cells(rank: Any, p: PlanOption) -> list[Any]:
    return [rank, f"{p.gpus_per_replica * p.replicas} x {p.gpu}", f"{p.tp} x {p.pp}", p.precision, p.kv_dtype,
            p.context, p.concurrency, f"{p.instances} x {p.provider} {p.instance}", p.market, p.usd_per_hour,
            round(gb(p.headroom_bytes), 2)]


def _memory_bar(label: str, p: PlanOption):
    from planner.render.charts import MemoryBar

    fullest = max(p.memory.per_gpu, key=lambda r: r.total_bytes)
    return MemoryBar(label, gb(fullest.weights_bytes), gb(fullest.kv_cache_bytes), gb(fullest.overhead_bytes),
                     gb(max(0, p.headroom_bytes)))


def review_html(review: Review, scenario_text: str) -> str:
    from planner.render import charts

    result = review.result
    parts = [f"<h1>{html.escape(result.scenario)}: {html.escape(result.model)}</h1>",
             f"<p>{html.escape(_status_line(result))}</p>"]
    best = result.best
    if best is None:
        info = result.infeasible
        parts.append("<p class='best'><b>No plan fits.</b> " + html.escape(info.reason if info else "") + "</p>")
        if info and info.suggestions:
            parts.append("<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in info.suggestions) + "</ul>")
    else:
        parts.append(
            f"<div class='best'><b>Best plan: ${best.usd_per_hour:,.2f}/hour</b> ({html.escape(best.market)}) — "
            f"{best.replicas} x {best.gpus_per_replica} x {html.escape(best.gpu_display)}, tp {best.tp} x pp {best.pp}, "
            f"{html.escape(best.precision)} weights, {html.escape(best.kv_dtype)} KV, context {best.context:,}, "
            f"concurrency {best.concurrency}; {best.instances} x {html.escape(best.provider)} "
            f"{html.escape(best.instance)} ({html.escape(best.region)}). {html.escape(best.sharing)}.<br>"
            f"{html.escape(_memory_line(best))} · re-checked by the estimator</div>")
        parts += [f"<p class='warn'>warning: {html.escape(w)}</p>" for w in (*best.price_warnings, *best.memory.warnings)]
        parts += ["<h2>Plan and alternatives</h2>", _html_table(
            _PLAN_HEADER, [_plan_cells("best", best)] + [_plan_cells(i, p) for i, p in enumerate(result.alternatives, 1)])]
        bars = [_memory_bar(f"best: {best.gpus_per_replica} x {best.gpu}", best)]
        bars += [_memory_bar(f"#{i}: {p.gpus_per_replica} x {p.gpu}", p) for i, p in enumerate(result.alternatives, 1)]
        parts += ["<h2>Memory per GPU</h2>", charts.memory_chart(bars)]
    if result.rejected_cheaper:
        parts += ["<h2>Cheaper options the estimator rejected</h2>", _html_table(
            ["GPUs", "tp x pp", "weights/KV", "context x concurrency", "$/hour", "needs per GPU (GB)", "card (GB)"],
            [[f"{r.tp * r.pp} x {r.gpu}", f"{r.tp} x {r.pp}", f"{r.precision}/{r.kv_dtype}",
              f"{r.context:,} x {r.concurrency}", r.usd_per_hour, round(gb(r.needed_bytes), 2), round(gb(r.card_bytes), 2)]
             for r in result.rejected_cheaper])]
    parts += ["<h2>Binding constraints</h2>", "<ul>" + "".join(f"<li>{html.escape(b)}</li>" for b in review.binding) + "</ul>"]
    parts += ["<h2>How the cost moves</h2><div class='charts'>",
              charts.cost_curve(list(review.context_costs), "context (tokens per sequence)", "cost vs context"),
              charts.cost_curve(list(review.concurrency_costs), "concurrent sequences per replica",
                                "cost vs traffic (sequences held at once)"), "</div>",
              _html_table(["context", "$/hour"], [[c, "no fit" if v is None else v] for c, v in review.context_costs]),
              _html_table(["concurrency", "$/hour"], [[c, "no fit" if v is None else v] for c, v in review.concurrency_costs])]
    if review.offers and best is not None:
        rows = sorted(((f"{o.provider} {o.instance} ({o.region}, {market})", price / o.gpus, o.as_of)
                       for o in review.offers for market in ("on-demand", "spot") if (price := o.price(market))),
                      key=lambda r: r[1])
        parts += [f"<h2>Provider prices for {html.escape(best.gpu)}</h2>",
                  charts.price_chart([(label, price) for label, price, _ in rows], f"{best.gpu}: $ per GPU-hour"),
                  _html_table(["offer", "$ per GPU-hour", "as of"], [[a, round(b, 4), c] for a, b, c in rows])]
    counts = ", ".join(f"{n} {k}" for k, n in review.catalog_counts.items())
    parts += ["<h2>Inputs</h2>", f"<p>Catalogs: {html.escape(counts)} (planner's shipped catalogs). "
              + (f"Price of the plan as of {html.escape(best.price_as_of)}; source: {html.escape(best.price_source)}."
                 if best else "") + "</p>", f"<pre>{html.escape(scenario_text)}</pre>"]
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>planner report: {html.escape(result.scenario)}</title><style>{_PAGE_STYLE}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")


def review_markdown(review: Review, scenario_text: str) -> str:
    lines = [solve_markdown(review.result).rstrip(), "", "### Binding constraints", ""]
    lines += [f"- {b}" for b in review.binding]
    lines += ["", "### Cost vs context", "", "| context | $/hour |", "|---|---|"]
    lines += [f"| {c:,} | {'no fit' if v is None else f'{v:,.2f}'} |" for c, v in review.context_costs]
    lines += ["", "### Cost vs concurrency", "", "| concurrency | $/hour |", "|---|---|"]
    lines += [f"| {c:,} | {'no fit' if v is None else f'{v:,.2f}'} |" for c, v in review.concurrency_costs]
    lines += ["", "### Scenario", "", "```yaml", scenario_text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Fleets (scenarios with traffic)


def fleet_rows(plan: FleetPlan) -> list[dict[str, Any]]:
    return [assignment_row(a) for a in plan.assignments]


def _fleet_status(plan: FleetPlan) -> str:
    verdict = {"OPTIMAL": "OPTIMAL (proven cheapest)", "FEASIBLE": f"FEASIBLE (time limit; gap {plan.gap:.1%})"}.get(
        plan.status, plan.status)
    return (f"{verdict} in {plan.solve_seconds:.2f} s · {plan.configurations:,} serving configurations, "
            f"{plan.variables:,} CP-SAT variables")


def fleet_table(name: str, plan: FleetPlan, console: Console) -> None:
    console.print(f"[bold]{name}[/bold] · fleet · {_fleet_status(plan)}")
    if plan.usd_per_hour is None:
        console.print("\n[bold red]No fleet serves all the traffic.[/bold red]")
    else:
        per_m = (f" · ${plan.usd_per_million_output_tokens:,.3f} per million output tokens"
                 if plan.usd_per_million_output_tokens is not None else "")
        console.print(f"\n[bold]Fleet: ${plan.usd_per_hour:,.2f}/hour[/bold]{per_m}")
    table = Table(title="Replicas", show_header=True, header_style="bold")
    for col in ("workload", "replicas x GPUs", "tp x pp", "weights/KV", "context x batch", "req/s each", "TTFT s",
                "TPOT ms", "pool"):
        table.add_column(col, justify="right" if col in ("req/s each", "TTFT s", "TPOT ms") else "left")
    for a in plan.assignments:
        c, perf = a.config.candidate, a.config.performance
        table.add_row(a.workload + (f" #{a.bucket}" if a.bucket else ""), f"{a.replicas} x {c.gpus} x {c.gpu.name}",
                      f"{c.tp} x {c.pp}", f"{c.precision}/{c.kv_dtype}", f"{c.context:,} x {c.concurrency}",
                      f"{a.config.capacity_rps:,.2f}", f"{perf.ttft_s:.3f}", f"{perf.tpot_s * 1000:.1f}",
                      f"{a.pool.offer.provider} {a.pool.offer.instance}" + (" (spot)" if a.pool.market == "spot" else ""))
    if plan.assignments:
        console.print(table)
    pools = Table(title="Rented", show_header=True, header_style="bold")
    for col in ("pool", "instances", "GPUs used / paid", "$/hour", "price as of"):
        pools.add_column(col)
    for u in plan.pools:
        pools.add_row(u.pool.label, str(u.instances), f"{u.gpus_used} / {u.instances * u.pool.offer.gpus}",
                      f"{u.usd_per_hour:,.2f}", u.pool.offer.as_of)
    if plan.pools:
        console.print(pools)
    for line in plan.unmet:
        console.print(f"[red]unmet:[/red] {line}")
    for line in plan.binding:
        console.print(f"binding: {line}")
    if plan.assignments:
        console.print("every replica's configuration was re-checked by the estimator")


def fleet_markdown(name: str, plan: FleetPlan) -> str:
    lines = [f"## {name}: fleet", "", _fleet_status(plan), ""]
    if plan.usd_per_hour is not None:
        lines += [f"**Fleet: ${plan.usd_per_hour:,.2f}/hour**"
                  + (f", ${plan.usd_per_million_output_tokens:,.3f} per million output tokens"
                     if plan.usd_per_million_output_tokens is not None else ""), ""]
    lines += ["| workload | replicas x GPUs | tp x pp | weights/KV | context x batch | req/s each | pool |",
              "|---|---|---|---|---|---|---|"]
    for a in plan.assignments:
        c = a.config.candidate
        lines.append(f"| {a.workload} | {a.replicas} x {c.gpus} x {c.gpu.name} | {c.tp} x {c.pp} | {c.precision}/{c.kv_dtype} "
                     f"| {c.context:,} x {c.concurrency} | {a.config.capacity_rps:,.2f} | {a.pool.label} |")
    lines += [""] + [f"- unmet: {u}" for u in plan.unmet] + [f"- binding: {b}" for b in plan.binding]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Engine budgets and `planner fit`


def engine_table(e: EngineBudget, console: Console) -> None:
    """What the engine does with the card, per its own start-up arithmetic (the limiting rank)."""
    console.print(f"\n[bold]{e.name}[/bold] ({e.release}) on this card, per GPU (the rank with the smallest pool):")
    table = Table(show_header=True, header_style="bold")
    for col, justify in (("", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    label = f"budget ({e.gpu_memory_utilization:.2f} x memory)" if e.gpu_memory_utilization else "budget"
    for name, value in ((label, e.budget_bytes), ("weights", e.weights_bytes), ("activation peak", e.activation_bytes),
                        ("non-torch (CUDA context, NCCL)", e.non_torch_bytes), ("CUDA graphs", e.cuda_graph_bytes),
                        ("KV pool", e.kv_pool_bytes)):
        table.add_row(*_bytes_row(name, value)[:4])
    console.print(table)
    console.print(f"KV cache capacity {e.kv_cache_capacity_tokens:,} tokens · maximum concurrency for "
                  f"{e.context:,} tokens per request: {e.max_concurrency:,.2f}x")
    for line in _pool_layout_lines(e):
        console.print(line)
    if e.host_bytes:
        console.print(f"left in system RAM: {format_bytes(e.host_bytes)} ({e.gpu_layers} of {e.total_layers} layers on the GPUs)")
    verdict = "[green]fits[/green]" if e.fits else "[red]does not fit[/red]"
    console.print(f"{e.batch} request(s) of {e.context:,} tokens: {verdict}")
    if e.message:
        console.print(f"[red]{e.name} would say:[/red] {e.message}")
    if e.max_context_that_fits is not None:
        console.print(f"largest context one request fits: {e.max_context_that_fits:,} tokens")
    for warning in e.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def _pool_layout_lines(e: EngineBudget) -> list[str]:
    """How a hybrid model's cache is laid out: the groups, their pages and the recurrent-state slots."""
    layout = e.layout
    if layout is None or (len(layout.groups) == 1 and not layout.state_bytes):
        return []
    kinds = ", ".join(f"{g.layers} {g.kind}" for g in layout.groups)
    if e.name == "sglang":
        return [f"layers per rank: {kinds}; token pool of {layout.page_bytes:,} B per token (attention layers "
                f"only); separate state pool: {layout.state_slots:,} sequence slots of {layout.state_bytes:,} B per "
                f"recurrent layer ({format_bytes(layout.state_pool_bytes)}); it admits {layout.running_requests:,} "
                "running requests for them (the radix cache keeps the other slots for cached prefixes)"]
    groups = ", ".join(f"{g.groups} {g.kind} group(s) x {g.blocks_per_request} block(s)" for g in layout.groups)
    lines = [f"one pool, one page size: blocks of {layout.block_size:,} tokens, {layout.page_bytes:,} B per "
             f"layer; layers per rank: {kinds}, in groups of {layout.layers_per_group}; one request of "
             f"{e.context:,} tokens takes {groups}"]
    if layout.state_bytes:
        lines.append(f"a recurrent state is {layout.state_bytes:,} B per layer, padded to the page; "
                     f"the pool holds the states of {layout.state_slots:,} sequences at most (max_num_seqs caps it)")
    if layout.block_size_reason:
        lines.append(f"block size {layout.block_size:,}: {layout.block_size_reason}")
    return lines


def _fit_record(f: EngineFit) -> dict[str, Any]:
    c, s, g = f.largest_context, f.most_sequences, f.fewest_gpus
    return {"engine": f.engine,
            "largest_context": {"tokens": c.context, "tp": c.split.tp, "pp": c.split.pp, "limit": c.limit},
            "most_sequences": {"sequences": s.sequences, "context": s.context, "tp": s.split.tp, "pp": s.split.pp},
            "fewest_gpus": {"gpus": g.split.gpus if g.split else None, "tp": g.split.tp if g.split else None,
                            "pp": g.split.pp if g.split else None, "context": g.context, "batch": g.batch,
                            "searched_up_to": g.max_gpus}}


def fit_json(fits: tuple[EngineFit, ...]) -> str:
    return json.dumps([_fit_record(f) for f in fits], indent=2)


def fit_table(fits: tuple[EngineFit, ...], context: int, batch: int, console: Console) -> None:
    table = Table(show_header=True, header_style="bold")
    for col in ("engine", "largest context (1 request)", f"most sequences of {context:,}", f"fewest GPUs for {batch} x {context:,}"):
        table.add_column(col)
    for f in fits:
        r = _fit_record(f)
        longest = r["largest_context"]
        most = r["most_sequences"]
        fewest = r["fewest_gpus"]
        table.add_row(
            f.engine,
            f"{longest['tokens']:,} (tp {longest['tp']} x pp {longest['pp']})" if longest["tokens"] else "none fits",
            f"{most['sequences']:,} (tp {most['tp']} x pp {most['pp']})",
            f"{fewest['gpus']} (tp {fewest['tp']} x pp {fewest['pp']})" if fewest["gpus"]
            else f"none up to {fewest['searched_up_to']}")
    console.print(table)


def fleet_html(name: str, plan: FleetPlan, scenario_text: str) -> str:
    """A review page for a fleet: cost, replicas, rented pools, memory per replica, binding limits, inputs."""
    from planner.render import charts

    parts = [f"<h1>{html.escape(name)}: fleet</h1>", f"<p>{html.escape(_fleet_status(plan))}</p>"]
    if plan.usd_per_hour is None:
        parts.append("<p class='best'><b>No fleet serves all the traffic.</b></p>")
    else:
        per_m = (f" · ${plan.usd_per_million_output_tokens:,.3f} per million output tokens"
                 if plan.usd_per_million_output_tokens is not None else "")
        parts.append(f"<div class='best'><b>Fleet: ${plan.usd_per_hour:,.2f}/hour</b>{per_m} · every replica's "
                     "configuration re-checked by the estimator</div>")
    rows = fleet_rows(plan)
    if rows:
        header = ["workload", "bucket", "replicas", "gpu", "gpus_per_replica", "tp", "pp", "precision", "kv_dtype",
                  "context", "concurrency", "capacity_rps_per_replica", "ttft_s", "tpot_s", "provider", "instance", "market"]
        parts += ["<h2>Replicas</h2>", _html_table(header, [[r[h] for h in header] for r in rows])]
        bars = []
        for a in plan.assignments:
            fullest = max(a.memory.per_gpu, key=lambda r: r.total_bytes)
            headroom = a.memory.gpu.headroom_bytes if a.memory.gpu else 0
            bars.append(charts.MemoryBar(f"{a.workload}: {a.config.candidate.gpus} x {a.config.candidate.gpu.name}",
                                         gb(fullest.weights_bytes), gb(fullest.kv_cache_bytes),
                                         gb(fullest.overhead_bytes), gb(max(0, headroom))))
        parts += ["<h2>Memory per GPU</h2>", charts.memory_chart(bars)]
    if plan.pools:
        parts += ["<h2>Rented</h2>", _html_table(
            ["pool", "instances", "GPUs used", "GPUs paid", "$/hour", "price as of", "source"],
            [[u.pool.label, u.instances, u.gpus_used, u.instances * u.pool.offer.gpus, u.usd_per_hour,
              u.pool.offer.as_of, u.pool.offer.source] for u in plan.pools])]
    if plan.unmet:
        parts += ["<h2>Unmet demand</h2>", "<ul>" + "".join(f"<li>{html.escape(u)}</li>" for u in plan.unmet) + "</ul>"]
    parts += ["<h2>Binding constraints</h2>",
              "<ul>" + "".join(f"<li>{html.escape(b)}</li>" for b in plan.binding) + "</ul>",
              "<h2>Inputs</h2>", f"<pre>{html.escape(scenario_text)}</pre>"]
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>planner report: {html.escape(name)}</title><style>{_PAGE_STYLE}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")


def what_if_table(name: str, rows, console: Console) -> None:
    """The scenario and its variants side by side (api.what_if)."""
    table = Table(title=f"{name}: what if", show_header=True, header_style="bold")
    for col, justify in (("variant", "left"), ("status", "left"), ("$/hour", "right"), ("change", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(r.variant, r.status, "-" if r.usd_per_hour is None else f"{r.usd_per_hour:,.2f}",
                      "-" if r.change_usd_per_hour is None else f"{r.change_usd_per_hour:+,.2f}")
    console.print(table)
