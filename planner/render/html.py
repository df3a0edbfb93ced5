"""Review pages (`planner report -o report.html`): self-contained HTML with inline SVG charts."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from planner.render.records import fleet_rows
from planner.render.summary import (layout_text, HOSTED_HEADER, column_label, fleet_cost_line, fleet_price_warnings, fleet_status,
                                    memory_line, NO_FLEET, hosted_lines, hosted_rows, load_rows, not_simulated_lines,
                                    offer_rows, prefix_lines, price_age_text, replica_label, running_text, serving_lines,
                                    layout_comparison_lines, layout_lines, speculative_choice_lines, speculative_lines, spot_lines, status_line, tpot_ms)
from planner.units import gb

if TYPE_CHECKING:
    from planner.plan.fleet import FleetPlan
    from planner.catalog.load import Offer
    from planner.catalog.prices import PriceAge
    from planner.plan.review import FleetReview, Review
    from planner.plan.solver import PlanOption

# What a page's charts add to a command after its searches end (planner.plan.deadline.CommandStart), with a whole
# CPU: bench/fuzz.py --large measures `report -o page.html` of its wide-context scenario at 1.38-2.20 s outside its
# searches at a CPU share of 0.92-1.00, 0.8-1.7 s more than the commands that print text (matplotlib's import and
# four charts: 0.84-1.04 s of CPU from the search's stop to the exit). Rounded up.
CHARTS_S = 1.5


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


_PLAN_HEADER = ["#", "GPUs", "tp x pp", "weights", "KV", "context", "concurrency", "provider / instance", "price",
                "$/hour", "price age", "headroom GB"]


def _plan_cells(rank: Any, p: PlanOption) -> list[Any]:
    return [rank, f"{p.gpus_per_replica * p.replicas} x {p.gpu}", layout_text(p), p.precision, p.kv_dtype,
            p.context, p.concurrency, f"{p.instances} x {p.provider} {p.instance}", p.price_terms, p.usd_per_hour,
            price_age_text(p.price_age), round(gb(p.headroom_bytes), 2)]


def _memory_bar(label: str, p: PlanOption):
    from planner.render.charts import MemoryBar

    fullest = max(p.memory.per_gpu, key=lambda r: r.total_bytes)
    return MemoryBar(label, gb(fullest.weights_bytes), gb(fullest.kv_cache_bytes), gb(fullest.overhead_bytes),
                     gb(max(0, p.headroom_bytes)))


def review_html(review: Review, scenario_text: str) -> str:
    from planner.render import charts

    result = review.result
    parts = [f"<h1>{html.escape(result.scenario)}: {html.escape(result.model)}</h1>",
             f"<p>{html.escape(status_line(result))}</p>"]
    best = result.best
    if best is None:
        info = result.infeasible
        parts.append("<p class='best'><b>No plan fits.</b> " + html.escape(info.reason if info else "") + "</p>")
        if info and info.suggestions:
            parts.append("<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in info.suggestions) + "</ul>")
    else:
        parts.append(
            f"<div class='best'><b>Best plan: ${best.usd_per_hour:,.2f}/hour</b> ({html.escape(best.price_terms)}) — "
            f"{best.replicas} x {best.gpus_per_replica} x {html.escape(best.gpu_display)}, tp {best.tp} x pp {best.pp}, "
            f"{html.escape(best.precision)} weights, {html.escape(best.kv_dtype)} KV, context {best.context:,}, "
            f"concurrency {best.concurrency}; {best.instances} x {html.escape(best.provider)} "
            f"{html.escape(best.instance)} ({html.escape(best.region)}). {html.escape(best.sharing)}.<br>"
            f"{html.escape(memory_line(best))} · re-checked by the estimator"
            + "".join(f"<br>{html.escape(line)}" for line in layout_lines(result) + speculative_lines(result)) + "</div>")
        parts += [f"<p class='warn'>warning: {html.escape(w)}</p>"
                  for w in (*filter(None, [best.price_age.warning]), *best.memory.warnings)]
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
    if review.cut_short:
        parts.append(f"<p class='warn'>cut short: {html.escape(review.cut_short)}</p>")
    if best is not None:
        parts += _prices(review.offers)
    price = (f"Price of the plan as of {html.escape(best.price_as_of)}; source: {html.escape(best.price_source)}."
             if best else "")
    return _page(result.scenario, parts + _inputs(review.catalog_counts, price, scenario_text))


def _page(title: str, parts: list[str]) -> str:
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>planner report: {html.escape(title)}</title><style>{_PAGE_STYLE}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")


def _prices(offers: tuple[tuple[Offer, str, PriceAge], ...]) -> list[str]:
    """Every price of the GPU types a plan rents: a chart and a table per type, cheapest per GPU-hour first."""
    from planner.render import charts

    parts = []
    rows = offer_rows(offers)
    for gpu in dict.fromkeys(o.gpu for o, *_ in rows):
        mine = [(label, usd, age) for o, label, usd, age in rows if o.gpu == gpu]
        parts += [f"<h2>Provider prices for {html.escape(gpu)}</h2>",
                  charts.price_chart([(label, usd) for label, usd, _ in mine], f"{gpu}: $ per GPU-hour"),
                  _html_table(["offer", "$ per GPU-hour", "as of", "age"],
                              [[label, round(usd, 4), age.as_of, price_age_text(age)] for label, usd, age in mine])]
    return parts


def _inputs(counts: dict[str, int], price: str, scenario_text: str) -> list[str]:
    """The catalogs' sizes, a note on the plan's price, and the scenario as written."""
    sizes = ", ".join(f"{n} {k}" for k, n in counts.items())
    return ["<h2>Inputs</h2>", f"<p>Catalogs: {html.escape(sizes)} (planner's shipped catalogs). {price}</p>",
            f"<pre>{html.escape(scenario_text)}</pre>"]


def fleet_html(name: str, plan: FleetPlan, scenario_text: str) -> str:
    """A page for a fleet plan: cost, replicas, loads, rented pools, memory per replica, binding limits, inputs."""
    return _page(name, _fleet_parts(name, plan) + ["<h2>Inputs</h2>", f"<pre>{html.escape(scenario_text)}</pre>"])


def fleet_review_html(name: str, review: FleetReview, scenario_text: str) -> str:
    """`planner report -o report.html` of a fleet: the fleet's page with its cost against the demand, the prices of
    the GPU types it rents and the catalogs' sizes."""
    from planner.render import charts

    curve = [(times, cost) for times, cost in review.traffic_costs]
    parts = _fleet_parts(name, review.plan) + [
        "<h2>How the cost moves</h2><div class='charts'>",
        charts.cost_curve(curve, "x the demand (every workload's requests/s)", "cost vs traffic"), "</div>",
        _html_table(["x the demand", "$/hour"], [[times, "no fleet" if v is None else v] for times, v in curve])]
    if review.cut_short:
        parts.append(f"<p class='warn'>cut short: {html.escape(review.cut_short)}</p>")
    parts += _prices(review.offers)
    if review.plan.hosted:
        parts += ["<h2>Hosted API list prices</h2>", _html_table(HOSTED_HEADER, hosted_rows(review.plan))]
    return _page(name, parts + _inputs(review.catalog_counts, "", scenario_text))


def _fleet_parts(name: str, plan: FleetPlan) -> list[str]:
    from planner.render import charts

    parts = [f"<h1>{html.escape(name)}: fleet</h1>", f"<p>{html.escape(fleet_status(plan))}</p>"]
    if plan.usd_per_hour is None:
        parts.append(f"<p class='best'><b>{html.escape(NO_FLEET)}</b></p>")
    else:
        parts.append(f"<div class='best'><b>{html.escape(fleet_cost_line(plan))}</b> · every replica's "
                     "configuration re-checked by the estimator</div>")
        parts += [f"<p>{html.escape(line)}</p>" for line in hosted_lines(plan)]
    rows = fleet_rows(plan)
    if rows:
        header = ["workload", "bucket", "replicas", "gpu", "gpus_per_replica", "tp", "pp", "precision", "kv_dtype",
                  "context", "provider", "instance", "market", "price_kind"]
        parts += ["<h2>Replicas</h2>",
                  _html_table([column_label(h) for h in header], [[r[h] for h in header] for r in rows]),
                  "<h2>Load per replica</h2>",
                  _html_table(["replica", "load", "req/s", "running", "TTFT s", "TPOT ms"],
                              [[replica_label(a), level, round(rps, 2), running_text(running), round(ttft, 3),
                                tpot_ms(a, tpot)]
                               for a in plan.assignments for level, rps, running, ttft, tpot in
                               (load_rows(a.loads) if a.loads else [])])]
        parts += [f"<p>prefix: {html.escape(x)}</p>" for x in prefix_lines(plan)]
        parts += [f"<p>serving: {html.escape(x)}</p>" for x in serving_lines(plan)]
        parts += [f"<p>layout: {html.escape(x)}</p>" for x in layout_comparison_lines(plan)]
        parts += [f"<p>speculative: {html.escape(x)}</p>" for x in speculative_choice_lines(plan)]
        parts += [f"<p>note: {html.escape(x)}</p>" for x in not_simulated_lines(plan)]
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
            ["pool", "instances", "GPUs used", "GPUs paid", "$/hour", "price as of", "price age", "source"],
            [[u.pool.label, u.instances, u.gpus_used, u.instances * u.pool.offer.gpus, u.usd_per_hour,
              u.pool.offer.as_of, price_age_text(u.price_age), u.pool.offer.source] for u in plan.pools])]
        parts += [f"<p>spot: {html.escape(x)}</p>" for x in spot_lines(plan)]
        parts += [f"<p class='warn'>warning: {html.escape(w)}</p>" for w in fleet_price_warnings(plan)]
    if plan.unmet:
        parts += ["<h2>Unmet demand</h2>", "<ul>" + "".join(f"<li>{html.escape(u)}</li>" for u in plan.unmet) + "</ul>"]
    parts += ["<h2>Binding constraints</h2>",
              "<ul>" + "".join(f"<li>{html.escape(b)}</li>" for b in plan.binding) + "</ul>"]
    if plan.left_out:
        parts += ["<h2>Cheaper GPUs left out</h2>",
                  "<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in plan.left_out) + "</ul>"]
    if plan.speed:
        parts += ["<h2>Speed</h2>", "<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in plan.speed) + "</ul>"]
    return parts
