"""Results as terminal tables (rich). Headers are words with units (summary.LABELS), never field names.

Each table draws on a console: rich's, or planner.render.plain's where rich would print no styles (its tables
then come from the plain console too, and rich is not imported)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from planner.estimator.memory import MemoryEstimate, RankMemory
from planner.render.plain import PlainConsole, PlainTable, as_text
from planner.render.summary import (layout_text, DAY_COLUMNS, column_label, day_lines, day_rows, fleet_cost_line,
                                    fleet_price_warnings, fleet_status, hosted_lines, memory_line, NO_FLEET, spot_lines,
                                    load_rows, not_simulated_lines, prefix_lines, replica_label, replicas_text,
                                    running_text, serving_lines, speculative_choice_lines, layout_comparison_lines, layout_lines, speculative_lines, tpot_ms, price_age_text, speed_line,
                                    status_line)
from planner.units import MiB, format_bytes, format_count, gb, gib

if TYPE_CHECKING:  # the solver (and OR-Tools) load only for `planner solve`
    from rich.console import Console
    from rich.table import Table

    from planner.estimator.engines import EngineBudget
    from planner.estimator.fit import EngineFit
    from planner.plan.fleet import FleetPlan
    from planner.plan.profile import DayPlan
    from planner.plan.solver import SolveResult


def _table(console: Console | PlainConsole, **options: Any) -> Table | PlainTable:
    """A table for the console to print: rich's, or the plain console's own."""
    if isinstance(console, PlainConsole):
        return PlainTable(**options)
    from rich.table import Table

    return Table(**options)


def _row(table: Table | PlainTable, *cells: str, style: str | None = None) -> None:
    """A row of text: every cell printed as it is (names from files hold brackets, escape characters ...)."""
    table.add_row(*(as_text(cell) for cell in cells), style=style)


def _bytes_row(label: str, n_bytes: int, note: str = "") -> list[str]:
    return [label, f"{n_bytes:,}", f"{gb(n_bytes):,.2f}", f"{gib(n_bytes):,.2f}", note]


def estimate_table(est: MemoryEstimate, console: Console | PlainConsole, show_fit: bool = True) -> None:
    """The breakdown; show_fit=False when an engine's own verdict follows (engine_table)."""
    gpus = est.tp * est.pp
    split = f" · {est.layout} = {gpus} GPUs" if gpus > 1 else " · 1 GPU"
    console.print(f"[bold]{as_text(est.model)}[/bold] · weights {est.precision} · KV {est.kv_dtype} · "
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

    table = _table(console, show_header=True, header_style="bold")
    for col, justify in (("", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right"), ("how", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    suffix = " (all GPUs)" if gpus > 1 else ""
    _row(table, *_bytes_row("weights" + suffix, est.weights_bytes, f"{est.precision}, {est.quality}"))
    kv_note = f"{est.kv_bytes_per_token:,} B/token x {est.context:,} x {est.batch} seq"
    if est.kv_sliding_bytes_per_token:
        windows = "/".join(f"{w:,}" for w in est.sliding_windows)
        kv_note += f" + sliding {est.kv_sliding_bytes_per_token:,} B/token x <={windows}"
    if est.kv_state_bytes_per_sequence:
        kv_note += f" + recurrent state {est.kv_state_bytes_per_sequence:,} B/seq"
    _row(table, *_bytes_row("KV cache" + suffix, est.kv_cache_bytes, kv_note))
    if est.buffers_bytes:
        _row(table, *_bytes_row("all-to-all buffers" + suffix, est.buffers_bytes,
                                  f"DeepEP normal + low-latency, {est.ep} EP ranks"))
    _row(table, *_bytes_row("overhead" + suffix, est.overhead_bytes,
                              f"{est.overhead_fraction:.0%} of weights+KV, >= {est.runtime_reserve_bytes // MiB:,} MiB/GPU"))
    _row(table, *_bytes_row("total" + suffix, est.total_bytes), style="bold")
    console.print(table)

    if gpus > 1:
        per = _table(console, title="per GPU", show_header=True, header_style="bold")
        buffers = ("buffers GB",) if est.buffers_bytes else ()
        for col in ("ranks", "pp stage", "layers", "weights GB", "KV GB", *buffers, "overhead GB", "total GB",
                    "total GiB"):
            per.add_column(col, justify="right")
        for group in _identical_ranks(est):
            r = group[0]
            ranks = str(r.rank) if len(group) == 1 else f"{r.rank}-{group[-1].rank}"
            buffer_cell = (f"{gb(r.buffers_bytes):,.2f}",) if est.buffers_bytes else ()
            _row(per, ranks, str(r.pp_stage), f"{r.first_layer}-{r.last_layer - 1}",
                        f"{gb(r.weights_bytes):,.2f}", f"{gb(r.kv_cache_bytes):,.2f}", *buffer_cell,
                        f"{gb(r.overhead_bytes):,.2f}", f"{gb(r.total_bytes):,.2f}", f"{gib(r.total_bytes):,.2f}")
        console.print(per)

    if est.gpu is not None and show_fit:
        fit = est.gpu
        verdict = "[green]fits[/green]" if fit.fits else "[red]does not fit[/red]"
        which = "the fullest GPU" if gpus > 1 else "it"
        console.print(f"GPU {fit.name}: {format_bytes(fit.memory_bytes)} as the runtime reports it "
                      f"({fit.memory_bytes // MiB:,} MiB) -> {verdict}; headroom on {which}: "
                      f"{format_bytes(fit.headroom_bytes)}")
    for warning in est.warnings:
        console.print(f"[yellow]warning:[/yellow] {as_text(warning)}")


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


_TABLE_COLUMNS = {
    "gpus": ("name", "display_name", "memory_mib", "memory_gb", "memory_gib", "memory_bandwidth_gbps",
             "bf16_dense_tflops", "fp8_dense_tflops", "interconnect", "gpus_per_node"),
    "models": ("name", "hf_id", "family", "params", "params_b"),
    "precisions": ("name", "bits", "scope", "scales", "quality", "vllm", "sglang"),
}


def rows_table(rows: Iterable[dict[str, Any]], kind: str, console: Console | PlainConsole) -> None:
    table = _table(console, show_header=True, header_style="bold")
    columns = _TABLE_COLUMNS[kind]
    for col in columns:
        _labelled_column(table, col)
    for row in rows:
        _row(table, *(_cell(row[c]) for c in columns))
    console.print(table)


def _labelled_column(table: Table | PlainTable, field: str, justify: str = "left") -> None:
    """A column headed by the field's words; a narrow terminal folds headers and cells, never cuts them short."""
    table.add_column(column_label(field), justify=justify, overflow="fold")  # type: ignore[arg-type]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def solve_table(result: SolveResult, console: Console | PlainConsole) -> None:
    console.print(f"[bold]{as_text(result.scenario)}[/bold] · {as_text(result.model)} · {as_text(status_line(result))}")
    for note in result.skipped:
        console.print(f"skipped {as_text(note)}")
    best = result.best
    if best is None:
        _infeasible(result, console)
        return
    console.print(f"\n[bold]Best plan: ${best.usd_per_hour:,.2f}/hour[/bold] ({best.price_terms}"
                  + (f", ${best.usd_per_replica_hour:,.2f} per replica" if best.replicas > 1 else "") + ")")
    console.print(f"  {best.replicas} replica(s) of {best.gpus_per_replica} x {best.gpu} ({as_text(best.gpu_display)}): "
                  f"{best.layout}, {best.nodes_per_replica} node(s) per replica")
    console.print(f"  weights {best.precision} ({best.memory.quality}) · KV {best.kv_dtype} · context {best.context:,} · "
                  f"concurrency {best.concurrency}")
    console.print(as_text(f"  rent: {best.instances} x {best.provider} {best.instance} ({best.gpus_per_instance} GPUs, "
                          f"{best.region}); {best.sharing}"))
    console.print(f"  {as_text(memory_line(best))} · re-checked by the estimator")
    console.print(f"  {as_text(speed_line(best))}")
    for line in layout_lines(result) + speculative_lines(result):
        console.print(f"  {as_text(line)}")
    console.print(as_text(f"  price as of {best.price_as_of}; source: {best.price_source}"))
    for warning in (*filter(None, [best.price_age.warning]), *best.memory.warnings):
        console.print(f"  [yellow]warning:[/yellow] {as_text(warning)}")

    if result.alternatives:
        table = _table(console, title="Alternatives: the best plan on each other GPU type", show_header=True,
                       header_style="bold")
        for col in ("#", "GPUs (tp x pp)", "weights/KV", "context x conc.", "rent", "$/hour", "price age", "headroom GB"):
            table.add_column(col, justify="right" if col in ("$/hour", "headroom GB") else "left")
        for i, p in enumerate(result.alternatives, start=1):
            _row(table, str(i), f"{p.gpus_per_replica * p.replicas} x {p.gpu} ({layout_text(p)})",
                          f"{p.precision}/{p.kv_dtype}", f"{p.context:,} x {p.concurrency}",
                          f"{p.instances} x {p.provider} {p.instance}" + (" (spot)" if p.market == "spot" else ""),
                          f"{p.usd_per_hour:,.2f}", price_age_text(p.price_age), f"{gb(p.headroom_bytes):.1f}")
        console.print(table)
    if result.rejected_cheaper:
        table = _table(console, title="Cheaper options the estimator rejected (closest miss per GPU type)",
                       show_header=True, header_style="bold")
        for col in ("GPUs (tp x pp)", "weights/KV", "context x conc.", "$/hour", "why not"):
            table.add_column(col)
        for r in result.rejected_cheaper:
            _row(table, f"{r.tp * r.pp} x {r.gpu} ({layout_text(r)})", f"{r.precision}/{r.kv_dtype}",
                          f"{r.context:,} x {r.concurrency}", f"{r.usd_per_hour:,.2f}",
                          f"needs {gb(r.needed_bytes):.1f} GB per GPU, card holds {gb(r.card_bytes):.1f} GB")
        console.print(table)
    if result.too_slow:
        table = _table(console, title="Options at most the plan's price left out below workload.min_tokens_per_s (fastest per GPU "
                       "type)",
                       show_header=True, header_style="bold")
        for col in ("GPUs (tp x pp)", "weights/KV", "context x conc.", "$/hour", "output tokens/s per replica"):
            table.add_column(col)
        for s in result.too_slow:
            _row(table, f"{s.tp * s.pp} x {s.gpu} ({layout_text(s)})", f"{s.precision}/{s.kv_dtype}",
                 f"{s.context:,} x {s.concurrency}", f"{s.usd_per_hour:,.2f}", f"{s.output_tokens_per_s:,.0f}")
        console.print(table)


def _infeasible(result: SolveResult, console: Console | PlainConsole) -> None:
    info = result.infeasible
    console.print("\n[bold red]No plan fits.[/bold red]")
    if info is None:
        return
    console.print(f"  {as_text(info.reason)}")
    if info.suggestions:
        console.print("  Changes that would make it fit (one at a time):")
        for suggestion in info.suggestions:
            console.print(f"   - {as_text(suggestion)}")


COMPARE_TABLE_COLUMNS = ["gpu", "provider", "instance", "price_kind", "gpus", "tp", "pp", "precision", "kv_dtype", "usd_per_hour",
                         "usd_per_gpu_hour", "headroom_gb"]


def frame_table(frame, title: str, console: Console | PlainConsole, columns: list[str] | None = None) -> None:
    """A DataFrame as a terminal table (the widest text columns left to JSON/CSV)."""
    frame = frame[columns] if columns else frame
    table = _table(console, title=as_text(title), show_header=True, header_style="bold")
    for col in frame.columns:
        _labelled_column(table, col, "right" if frame[col].dtype.kind in "if" else "left")
    for row in frame.itertuples(index=False):
        _row(table, *(f"{v:,.2f}" if isinstance(v, float) else str(v) for v in row))
    console.print(table if len(frame) else "no GPU and provider holds this model with these settings")


def day_table(day: DayPlan, console: Console | PlainConsole) -> None:
    """A day plan (planner.plan.profile): its costs against the peak fleet all day, then its hours."""
    first, second, note = day_lines(day)
    console.print(f"\n[bold]{as_text(first)}[/bold]\n[bold]{as_text(second)}[/bold]\n{as_text(note)}")
    table = _table(console, title="Hour by hour", show_header=True, header_style="bold")
    for col in DAY_COLUMNS:
        table.add_column(col, justify="left" if col == DAY_COLUMNS[0] else "right")
    for cells in day_rows(day):
        _row(table, *cells)
    console.print(table)


def fleet_table(name: str, plan: FleetPlan, console: Console | PlainConsole) -> None:
    console.print(f"[bold]{as_text(name)}[/bold] · fleet · {as_text(fleet_status(plan))}")
    if plan.usd_per_hour is None:
        console.print(f"\n[bold red]{as_text(NO_FLEET)}[/bold red]")
    else:
        console.print(f"\n[bold]{as_text(fleet_cost_line(plan))}[/bold]")
        for line in hosted_lines(plan):
            console.print(as_text(line))
    table = _table(console, title="Replicas", show_header=True, header_style="bold")
    for col in ("workload", "replicas x GPUs", "tp x pp", "weights/KV", "max-model-len", "pool"):
        table.add_column(col)
    for a in plan.assignments:
        c = a.config.candidate
        _row(table, a.workload + (f" #{a.bucket}" if a.bucket else ""), replicas_text(a),
             layout_text(c), f"{c.precision}/{c.kv_dtype}", f"{c.context:,}",
             f"{a.pool.offer.provider} {a.pool.offer.instance}" + (" (spot)" if a.pool.market == "spot" else ""))
    if plan.assignments:
        console.print(table)
    loads = _table(console, title="Load per replica", show_header=True, header_style="bold")
    for col in ("replica", "load", "req/s", "running", "TTFT s", "TPOT ms"):
        loads.add_column(col, justify="left" if col in ("replica", "load") else "right")
    for a in plan.assignments:
        for i, (level, rps, running, ttft, tpot) in enumerate(load_rows(a.loads) if a.loads else []):
            _row(loads, replica_label(a) if i == 0 else "", level, f"{rps:,.2f}", running_text(running), f"{ttft:.3f}",
                 tpot_ms(a, tpot))
    if any(a.loads for a in plan.assignments):
        console.print(loads)
    pools = _table(console, title="Rented", show_header=True, header_style="bold")
    for col in ("pool", "instances", "GPUs used / paid", "$/hour", "price as of", "price age"):
        pools.add_column(col)
    for u in plan.pools:
        _row(pools, u.pool.label, str(u.instances), f"{u.gpus_used} / {u.instances * u.pool.offer.gpus}",
                      f"{u.usd_per_hour:,.2f}", u.pool.offer.as_of, price_age_text(u.price_age))
    if plan.pools:
        console.print(pools)
    for line in spot_lines(plan):
        console.print(f"spot: {as_text(line)}")
    for warning in fleet_price_warnings(plan):
        console.print(f"[yellow]warning:[/yellow] {as_text(warning)}")
    for line in plan.unmet:
        console.print(f"[red]unmet:[/red] {as_text(line)}")
    for line in serving_lines(plan):
        console.print(f"serving: {as_text(line)}")
    for line in speculative_choice_lines(plan):
        console.print(f"speculative: {as_text(line)}")
    for line in layout_comparison_lines(plan):
        console.print(f"layout: {as_text(line)}")
    for line in plan.binding:
        console.print(f"binding: {as_text(line)}")
    for line in plan.left_out:
        console.print(f"left out: {as_text(line)}")
    for line in plan.speed:
        console.print(f"speed: {as_text(line)}")
    for line in prefix_lines(plan):
        console.print(f"prefix: {as_text(line)}")
    for line in not_simulated_lines(plan):
        console.print(f"note: {as_text(line)}")
    for line in dict.fromkeys(f"{a.workload}: {a.config.candidate.gpu.name}: {w}" for a in plan.assignments
                              for w in a.memory.warnings):
        console.print(f"note: {as_text(line)}")
    if plan.assignments:
        console.print("every replica's configuration was re-checked by the estimator")


def engine_table(e: EngineBudget, console: Console | PlainConsole) -> None:
    """What the engine does with the card, per its own start-up arithmetic (the limiting rank)."""
    console.print(f"\n[bold]{e.name}[/bold] ({e.release}) on this card, per GPU (the rank with the smallest pool):")
    table = _table(console, show_header=True, header_style="bold")
    for col, justify in (("", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    label = f"budget ({e.gpu_memory_utilization:.2f} x memory)" if e.gpu_memory_utilization else "budget"
    for name, value in ((label, e.budget_bytes), ("weights", e.weights_bytes), ("activation peak", e.activation_bytes),
                        ("non-torch (CUDA context, NCCL)", e.non_torch_bytes), ("CUDA graphs", e.cuda_graph_bytes),
                        ("KV pool", e.kv_pool_bytes)):
        _row(table, *_bytes_row(name, value)[:4])
    console.print(table)
    console.print(f"KV cache capacity {e.kv_cache_capacity_tokens:,} tokens · maximum concurrency for "
                  f"{e.context:,} tokens per request: {e.max_concurrency:,.2f}x")
    for line in _pool_layout_lines(e):
        console.print(as_text(line))
    if e.host_bytes:
        console.print(f"left in system RAM: {format_bytes(e.host_bytes)} ({e.gpu_layers} of {e.total_layers} layers on the GPUs)")
    verdict = "[green]fits[/green]" if e.fits else "[red]does not fit[/red]"
    console.print(f"{e.batch} request(s) of {e.context:,} tokens: {verdict}")
    if e.message:
        console.print(f"[red]{e.name} would say:[/red] {as_text(e.message)}")
    if e.max_context_that_fits is not None:
        console.print(f"largest context one request fits: {e.max_context_that_fits:,} tokens")
    for warning in e.warnings:
        console.print(f"[yellow]warning:[/yellow] {as_text(warning)}")


def _pool_layout_lines(e: EngineBudget) -> list[str]:
    """How a hybrid model's cache is laid out: the groups, their pages and the recurrent-state slots."""
    layout = e.layout
    if layout is None or (len(layout.groups) == 1 and not layout.state_bytes):
        return []
    if layout.notes:
        return list(layout.notes)
    kinds = ", ".join(f"{g.layers} {g.kind}" for g in layout.groups)
    if e.name == "sglang":
        pool = f"layers per rank: {kinds}; token pool of {layout.page_bytes:,} B per token (attention layers only)"
        if not layout.state_bytes:  # sliding and full attention layers, no recurrent state
            return [pool]
        admits = (f"it admits {layout.running_requests:,} running requests for them (the radix cache keeps the other "
                  "slots for cached prefixes)" if layout.running_limit == "state slots" else
                  f"SGLang's default max_running_requests, {layout.running_requests:,}, is below what they admit")
        scratch = (f", and {format_bytes(layout.state_scratch_bytes)} of intermediate states for the tokens a "
                   "speculative verify step checks" if layout.state_scratch_bytes else "")
        return [f"{pool}; separate state pool: {layout.state_slots:,} sequence slots of {layout.state_bytes:,} B per "
                f"recurrent layer ({format_bytes(layout.state_pool_bytes)}){scratch}; {admits}"]
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


def fit_table(fits: tuple[EngineFit, ...], context: int, batch: int,
              console: Console | PlainConsole) -> None:
    from planner.render.records import fit_record  # with csv: only this table reads a record

    table = _table(console, show_header=True, header_style="bold")
    for col in ("engine", "largest context (1 request)", f"most sequences of {context:,}", f"fewest GPUs for {batch} x {context:,}"):
        table.add_column(col)
    for f in fits:
        r = fit_record(f)
        longest = r["largest_context"]
        most = r["most_sequences"]
        fewest = r["fewest_gpus"]
        _row(table,
            f.engine,
            f"{longest['tokens']:,} (tp {longest['tp']} x pp {longest['pp']})" if longest["tokens"] else "none fits",
            f"{most['sequences']:,} (tp {most['tp']} x pp {most['pp']})",
            f"{fewest['gpus']} (tp {fewest['tp']} x pp {fewest['pp']})" if fewest["gpus"]
            else f"none up to {fewest['searched_up_to']}")
    console.print(table)


def what_if_table(name: str, rows, console: Console | PlainConsole) -> None:
    """The scenario and its variants side by side (api.what_if)."""
    table = _table(console, title=f"{as_text(name)}: what if", show_header=True, header_style="bold")
    for col, justify in (("variant", "left"), ("status", "left"), ("$/hour", "right"), ("change", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        _row(table, r.variant, r.status, "-" if r.usd_per_hour is None else f"{r.usd_per_hour:,.2f}",
                      "-" if r.change_usd_per_hour is None else f"{r.change_usd_per_hour:+,.2f}")
    console.print(table)
