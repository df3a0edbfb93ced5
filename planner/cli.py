"""The `planner` command: parse, call the library, render. Bad input exits 2 with one line."""

from __future__ import annotations

import functools
import io
import json
import os
import sys
import time
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from planner import api
from planner.direct import Argument, Option, command_name
from planner.errors import PlannerInputError
from planner.estimator.engines.registry import engine_names, export_targets, profiled_engines, spoken_list, versions_help
from planner.estimator.layout import layout_name
from planner.files import SCENARIO, read_text, write_output
from planner.units import parse_tokens

# Each command imports the renderers it prints with (rich, the HTML page, pandas frames ...), so a command
# loads only what it uses: `planner estimate` starts without the solver's or the report's modules, and a plain
# command line without typer (planner.direct): typer builds the app (`app`) only to read any other.
if TYPE_CHECKING:
    import typer
    from rich.console import Console

    from planner.calibration.calibrate import Calibration, Coverage
    from planner.plan.deadline import CommandStart
    from planner.render.plain import PlainConsole

TIME_LIMIT_HELP = ("Seconds for the whole command: catalogs, candidates, serving configurations, CP-SAT and every "
                   "variant together (default: the scenario's solver.time_limit_s, 10).")
SCENARIO_CALIBRATION = Option(None, "--calibration", metavar="FILE", help="A `planner calibrate` file: a fleet's speed "
                              "on the GPU generation x engine it was fitted on (replaces the scenario's calibration:).")
MAX_PRICE_AGE_HELP = "Warn of a price older than this many days (default: the scenario's pricing.max_price_age_days, 90)."
ENGINE_VERSION_HELP = (f"The engine release whose profile sizes the KV pool ({versions_help()}; default: the current "
                       "release).")
# when main() began this command (time.perf_counter(), time.thread_time()): its time limit counts from there
_started: Optional[tuple[float, float]] = None
COMMANDS: dict[str, Callable[..., None]] = {}  # `planner NAME`, in the order `planner --help` lists them
PRICES_COMMANDS: dict[str, Callable[..., None]] = {}  # `planner prices NAME`


def command(name: Optional[str] = None, group: dict[str, Callable[..., None]] = COMMANDS) -> Callable[..., Any]:
    """Register a command function under its name (typer's: the function's, dashed)."""
    def register(function: Callable[..., None]) -> Callable[..., None]:
        group[name or command_name(function)] = function
        return function
    return register


@functools.cache
def _app() -> typer.Typer:
    """The typer app of every command: what reads a command line planner.direct leaves (help, errors, groups)."""
    import typer

    from planner.direct import typer_command

    app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                      pretty_exceptions_enable=False,
                      help="GPU fleet planning for LLM inference: does it fit, and what is the cheapest way to serve it.")
    for name, function in COMMANDS.items():
        app.command(name)(typer_command(function))
    prices_app = typer.Typer(no_args_is_help=True, help="The price catalog: rebuild rows from a maintained source.")
    for name, function in PRICES_COMMANDS.items():
        prices_app.command(name)(typer_command(function))
    app.add_typer(prices_app, name="prices")
    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # built on first use, then the same app
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _command_start() -> Optional[CommandStart]:
    """When main() began this command; None when it was run without main() (typer's test runner)."""
    if _started is None:
        return None
    from planner.plan.deadline import CommandStart

    return CommandStart(*_started)


def _echo(text: str, nl: bool = True, err: bool = False) -> None:
    """typer.echo (click's) without importing typer for plain text: click writes it as it is and flushes; text with
    an escape character or beyond ASCII goes through click itself (it strips ANSI codes off a pipe and mends an
    encoding that cannot write the text)."""
    if not text.isascii() or "\x1b" in text:
        import typer

        typer.echo(text, nl=nl, err=err)
        return
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n" if nl else text)
    stream.flush()


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


class ListFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


EngineName = Enum("EngineName", [(name, name) for name in engine_names()], type=str)  # the registry's, simple first


class PlanFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


class CatalogKind(str, Enum):
    gpus = "gpus"
    models = "models"
    precisions = "precisions"


def context_tokens(text: str) -> int:
    """--context as context lengths are quoted (8192, 8K, 128k), by the scenario files' own rule."""
    try:
        return parse_tokens(text)
    except ValueError as exc:
        raise PlannerInputError(f"--context: {exc}") from None


def _console() -> Console:
    from rich.console import Console

    console = Console(highlight=False, emoji=False)  # a name holding :smile: prints as it is written
    if not console.is_terminal:
        console.width = 120  # rich assumes 80 columns when piped; the tables need more
    return console


def _show(draw: Callable[[Console | PlainConsole], None]) -> None:
    """Tables and lines to the terminal: written plainly (planner.render.plain) where rich would print them without
    styles and nothing in them needs rich, else by rich."""
    from planner.render.plain import print_plain

    if not print_plain(draw, sys.stdout):
        draw(_console())


def _print_lines(lines: list[str]) -> None:
    """Lines of plain text (names from files in them print as text: no markup, control characters escaped)."""
    from planner.render.plain import as_text

    def draw(console: Console | PlainConsole) -> None:
        for line in lines:
            console.print(as_text(line))

    _show(draw)


@command()
def estimate(
    model: Optional[str] = Argument(None, help="Catalog name or HF id, a config.json path (or its directory); omit with --params."),
    precision: str = Option("auto", help="Weight precision from `planner catalog precisions`; auto = the checkpoint's own."),
    kv_dtype: str = Option("auto", "--kv-dtype", help="KV cache dtype: auto|fp32|fp16|bf16|fp8."),
    context: str = Option("8192", metavar="TOKENS", help="Tokens per sequence (prompt + output): 8192, 8K, 128K."),
    batch: int = Option(1, help="Sequences held in memory at once."),
    tp: int = Option(1, "--tp", help="Tensor-parallel GPUs."),
    pp: int = Option(1, "--pp", help="Pipeline-parallel stages."),
    dp: int = Option(1, "--dp", help="Data-parallel attention groups among the --tp GPUs (attention at TP = tp / dp)."),
    ep: int = Option(1, "--ep", help="Expert-parallel size: routed experts split over this many of the --tp GPUs."),
    all_to_all: Optional[str] = Option(None, "--all-to-all", help="The experts' all-to-all backend: deepep (SGLang "
                                       "--moe-a2a-backend deepep, --ep = --tp; its buffers counted); default none."),
    gpu: Optional[str] = Option(None, help="Check the fit on this catalog GPU (see `planner catalog gpus`)."),
    gpu_memory: Optional[str] = Option(None, "--gpu-memory", help="A custom card's memory: 24GB, 79.19GiB, 81559MiB."),
    overhead: Optional[float] = Option(None, help="Planning margin as a fraction of weights + KV (default 0.10)."),
    params: Optional[str] = Option(None, help="Parameter count (8e9, 8B) for a model not in the catalog."),
    layers: Optional[int] = Option(None, help="With --params: number of layers."),
    kv_heads: Optional[int] = Option(None, "--kv-heads", help="With --params: KV heads per layer."),
    head_dim: Optional[int] = Option(None, "--head-dim", help="With --params: dimension of one head."),
    heads: Optional[int] = Option(None, "--heads", help="With --params: attention heads (for the --tp check)."),
    engine: EngineName = Option(EngineName.simple, "--engine", help="simple (the seed's margin) or an engine's own budget."),
    engine_version: Optional[str] = Option(None, "--engine-version", help=ENGINE_VERSION_HELP),
    gpu_memory_utilization: Optional[float] = Option(None, "--gpu-memory-utilization", help="vLLM (default 0.9)."),
    kv_cache_memory_bytes: Optional[int] = Option(None, "--kv-cache-memory-bytes",
                                                  help="vLLM: the KV pool per GPU in bytes, in place of the utilization's budget."),
    max_num_batched_tokens: Optional[int] = Option(None, "--max-num-batched-tokens", help="vLLM (default per GPU)."),
    max_num_seqs: Optional[int] = Option(None, "--max-num-seqs", help="vLLM (default per GPU)."),
    block_size: Optional[int] = Option(None, "--block-size", help="vLLM KV block size (default: the release's, 64 tokens at v0.34.0, 16 at v0.19.0)."),
    enforce_eager: bool = Option(False, "--enforce-eager", help="vLLM: no CUDA graphs."),
    mem_fraction_static: Optional[float] = Option(None, "--mem-fraction-static", help="SGLang."),
    max_running_requests: Optional[int] = Option(None, "--max-running-requests",
                                                 help="SGLang: the requests the server runs at once (default: the "
                                                      "release's own limit, which follows the token pool)."),
    attention_backend: Optional[str] = Option(None, "--attention-backend",
                                              help="SGLang: the backend the server is told (on AMD it decides the "
                                                   "0.85 of the fraction above 8K; default: the one SGLang picks)."),
    n_gpu_layers: Optional[int] = Option(None, "--n-gpu-layers", help="llama.cpp: layers on the GPUs (default: as many as fit)."),
    cache_type: Optional[str] = Option(None, "--cache-type", help="llama.cpp KV cache type: f16, q8_0, q4_0 ..."),
    n_batch: Optional[int] = Option(None, "--n-batch", help="llama.cpp logical batch."),
    n_ubatch: Optional[int] = Option(None, "--n-ubatch", help="llama.cpp physical batch."),
    output_format: OutputFormat = Option(OutputFormat.table, "--format", help="table or json."),
) -> None:
    """How much GPU memory a model needs: weights, KV cache, overhead, per GPU, and whether it fits."""
    if engine is EngineName.simple:
        flags = {"version": engine_version, "attention_backend": attention_backend,
                 "max_running_requests": max_running_requests, "gpu_memory_utilization": gpu_memory_utilization,
                 "max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs,
                 "block_size": block_size, "mem_fraction_static": mem_fraction_static, "n_batch": n_batch,
                 "n_ubatch": n_ubatch, "n_gpu_layers": n_gpu_layers, "cache_type": cache_type,
                 "kv_cache_memory_bytes": kv_cache_memory_bytes}
        if any(value is not None for value in flags.values()):
            # the margin has no release, backend, scheduler or engine flag: each is refused, not ignored (the
            # engines load pydantic)
            from planner.estimator.engines import EngineSettings

            EngineSettings("simple", **flags).validate()
    else:
        from planner.estimator.engines import EngineSettings

        if (dp, ep) != (1, 1) or all_to_all:
            raise PlannerInputError(f"--dp/--ep/--all-to-all: the --engine {engine.value} budget has no data-parallel "
                                    "attention or expert parallelism yet; drop --engine (the simple estimate places them)")
        settings = EngineSettings(engine.value, gpu_memory_utilization, max_num_batched_tokens, max_num_seqs,
                                  block_size, enforce_eager, mem_fraction_static=mem_fraction_static,
                                  attention_backend=attention_backend, max_running_requests=max_running_requests,
                                  n_batch=n_batch, n_ubatch=n_ubatch, n_gpu_layers=n_gpu_layers, cache_type=cache_type,
                                  kv_cache_memory_bytes=kv_cache_memory_bytes, version=engine_version)
        both = api.engine_estimate(model, settings, context=context_tokens(context), batch=batch, tp=tp, pp=pp,
                                   precision=precision, kv_dtype=kv_dtype, gpu=gpu, gpu_memory=gpu_memory, params=params, layers=layers,
                                   kv_heads=kv_heads, head_dim=head_dim, heads=heads)
        if output_format is OutputFormat.json:
            from planner.render.records import engine_estimate_json

            _echo(engine_estimate_json(both.memory, both.engine))
        else:
            from planner.render.terminal import engine_table, estimate_table

            def both_tables(console: Console | PlainConsole) -> None:
                estimate_table(both.memory, console, show_fit=False)
                engine_table(both.engine, console)

            _show(both_tables)
        return
    result = api.estimate(model, context=context_tokens(context), batch=batch, tp=tp, pp=pp, dp=dp, ep=ep, all_to_all=all_to_all,
                          precision=precision,
                          kv_dtype=kv_dtype, gpu=gpu, gpu_memory=gpu_memory, overhead=overhead, params=params, layers=layers,
                          kv_heads=kv_heads, head_dim=head_dim, heads=heads)
    if output_format is OutputFormat.json:
        from planner.render.records import estimate_json

        _echo(estimate_json(result))
    else:
        from planner.render.terminal import estimate_table

        _show(lambda console: estimate_table(result, console))


@command("fit")
def fit_command(
    model: Optional[str] = Argument(None, help="Catalog name or HF id, or a config.json path."),
    gpu: Optional[str] = Option(None, help="The card (see `planner catalog gpus`)."),
    gpu_memory: Optional[str] = Option(None, "--gpu-memory", help="A custom card's memory: 24GB, 81559MiB."),
    gpus: Optional[int] = Option(None, "--gpus", min=1, help="GPUs to split over (default 1)."),
    context: str = Option("8192", metavar="TOKENS",
                          help="Tokens per sequence for 'most sequences' and 'fewest GPUs': 8192, 8K, 128K."),
    batch: int = Option(1, help="Sequences at once for 'fewest GPUs'."),
    precision: str = Option("auto", help="Weight precision."),
    kv_dtype: str = Option("auto", "--kv-dtype", help="KV cache dtype."),
    engine: Optional[list[EngineName]] = Option(None, "--engine", help="Engines to answer for (default: all of them)."),
    params: Optional[str] = Option(None, help="Parameter count for an architecture planner cannot count."),
    output_format: OutputFormat = Option(OutputFormat.table, "--format", help="table or json."),
) -> None:
    """Solving backwards, per engine: the largest context, the most sequences, the fewest GPUs that hold a load."""
    from planner.estimator.engines import ENGINE_NAMES, EngineSettings
    from planner.render.records import fit_json
    from planner.render.terminal import fit_table

    names = tuple(e.value for e in engine) if engine else ENGINE_NAMES
    tokens = context_tokens(context)
    fits = api.fit(model, EngineSettings(names[0]), gpu=gpu, gpu_memory=gpu_memory, gpus=gpus, context=tokens,
                   batch=batch, precision=precision, kv_dtype=kv_dtype, engines=names, params=params)
    if output_format is OutputFormat.json:
        _echo(fit_json(fits))
    else:
        _show(lambda console: fit_table(fits, tokens, batch, console))


@command()
def solve(
    scenario: str = Argument(..., help="A scenario YAML file (see scenarios/)."),
    output_format: PlanFormat = Option(PlanFormat.table, "--format", help="table, json, csv or markdown."),
    output: Optional[str] = Option(None, "--output", "-o", help="Write to this file instead of the terminal."),
    top: Optional[int] = Option(None, "--top", min=0, help="Alternatives to list (default: the scenario's, 5)."),
    time_limit: Optional[float] = Option(None, "--time-limit", min=0.01, help=TIME_LIMIT_HELP),
    what_if: bool = Option(False, "--what-if", help="Also solve traffic x2, context 32K, spot allowed, "
                           "the busiest GPU type removed: one comparison table."),
    max_price_age: Optional[int] = Option(None, "--max-price-age", min=0, metavar="DAYS", help=MAX_PRICE_AGE_HELP),
    calibration: Optional[str] = SCENARIO_CALIBRATION,
) -> None:
    """The cheapest configuration that fits and serves the scenario, with ranked alternatives;
    with traffic in the scenario, the cheapest fleet that serves it within its SLOs."""
    from planner.render.markdown import day_markdown, fleet_markdown, records_markdown, solve_markdown
    from planner.render.records import fleet_json, fleet_rows, rows_csv, solve_json
    from planner.render.terminal import day_table, fleet_table, solve_table, what_if_table

    loaded = api.load_scenario(scenario, max_price_age, calibration)
    if what_if:
        rows = api.what_if(loaded, time_limit_s=time_limit, started=_command_start())
        records = [asdict(r) for r in rows]
        _emit(output_format, output, lambda console: what_if_table(loaded.name or "scenario", rows, console), {
            PlanFormat.json: lambda: json.dumps(records, indent=2), PlanFormat.csv: lambda: rows_csv(records),
            PlanFormat.markdown: lambda: records_markdown(records)})
        return
    if loaded.is_fleet:
        if top is not None:
            raise PlannerInputError("--top: the alternatives it lists are a single configuration's; a fleet plan is "
                                    "one fleet (its left-out and layout lines say what else was weighed); drop --top")
        plan = api.plan_fleet(loaded, time_limit_s=time_limit, started=_command_start())
        name = loaded.name or "fleet"
        day = api.plan_day(loaded, plan)

        def table(console: Console | PlainConsole) -> None:
            fleet_table(name, plan, console)
            if day:
                day_table(day, console)

        _emit(output_format, output, table, {
            PlanFormat.json: lambda: fleet_json(plan, name, day),
            PlanFormat.markdown: lambda: fleet_markdown(name, plan) + (f"\n{day_markdown(day)}" if day else ""),
            PlanFormat.csv: lambda: rows_csv(fleet_rows(plan))})
        return
    result = api.solve(loaded, time_limit_s=time_limit, top=top, started=_command_start())
    _emit(output_format, output, lambda console: solve_table(result, console), {
        PlanFormat.json: lambda: solve_json(result), PlanFormat.markdown: lambda: solve_markdown(result),
        PlanFormat.csv: lambda: rows_csv(result.rows())})


def _emit(output_format: PlanFormat, output: Optional[str], table: Callable[[Console | PlainConsole], None],
          texts: dict[PlanFormat, Callable[[], str]]) -> None:
    """One result to the terminal or to -o: a table printed as is (or rendered 120 columns wide for a file), or
    the text of the other formats."""
    if output_format is PlanFormat.table:
        if output is None:
            _show(table)
            return
        from rich.console import Console

        buffer = io.StringIO()
        table(Console(file=buffer, width=120, highlight=False, no_color=True))
        text = buffer.getvalue()
    else:
        text = texts[output_format]()
    if output is None:
        _echo(text, nl=not text.endswith("\n"))
    else:
        write_output(output, text)


@command()
def compare(
    model: str = Argument(..., help="Catalog name, catalog HF id or config.json path."),
    context: str = Option("8192", metavar="TOKENS", help="Tokens per sequence: 8192, 8K, 128K."),
    concurrency: int = Option(1, help="Sequences held at once."),
    gpus: Optional[str] = Option(None, help="Comma-separated GPU names (default: every priced GPU)."),
    providers: Optional[str] = Option(None, help="Comma-separated providers (default: all)."),
    precisions: Optional[str] = Option(None, help="Comma-separated precisions (default: serving precisions, near-lossless or better)."),
    market: str = Option("on-demand", help="on-demand, spot or any."),
    max_gpus: int = Option(8, "--max-gpus", help="GPUs per replica at most."),
    time_limit: Optional[float] = Option(None, "--time-limit", min=0.01, help=TIME_LIMIT_HELP),
    output_format: PlanFormat = Option(PlanFormat.table, "--format", help="table, json, csv or markdown."),
    max_price_age: Optional[int] = Option(None, "--max-price-age", min=0, metavar="DAYS", help=MAX_PRICE_AGE_HELP),
) -> None:
    """The cheapest way to hold MODEL on each GPU type and provider, sorted by $/hour."""
    from planner.render.markdown import frame_markdown
    from planner.render.records import compare_frame, rows_csv
    from planner.render.terminal import COMPARE_TABLE_COLUMNS, frame_table

    def split(text: Optional[str]) -> Optional[list[str]]:
        return [part.strip() for part in text.split(",") if part.strip()] if text else None

    tokens = context_tokens(context)
    frame = compare_frame(api.compare(model, context=tokens, concurrency=concurrency, gpus=split(gpus),
                                      providers=split(providers), precisions=split(precisions), market=market,
                                      max_gpus=max_gpus, max_price_age_days=max_price_age, time_limit_s=time_limit,
                                      started=_command_start()))
    if output_format is PlanFormat.json:
        _echo(frame.to_json(orient="records", indent=2))
    elif output_format is PlanFormat.csv:
        _echo(rows_csv(frame.to_dict("records"), list(frame.columns)), nl=False)
    elif output_format is PlanFormat.markdown:
        _echo(frame_markdown(frame))
    else:
        title = f"{model}: context {tokens:,} x {concurrency}, cheapest per GPU type and provider"
        _show(lambda console: frame_table(frame, title, console, COMPARE_TABLE_COLUMNS))


@command()
def report(
    scenario: str = Argument(..., help="A scenario YAML file."),
    output: str = Option(..., "--output", "-o", help="report.html (a self-contained page) or report.md."),
    quiet: bool = Option(False, "--quiet", "-q", help="No progress bar."),
    time_limit: Optional[float] = Option(None, "--time-limit", min=0.01, help=TIME_LIMIT_HELP),
    max_price_age: Optional[int] = Option(None, "--max-price-age", min=0, metavar="DAYS", help=MAX_PRICE_AGE_HELP),
    calibration: Optional[str] = SCENARIO_CALIBRATION,
) -> None:
    """A review page: the plan, alternatives, memory charts, cost curves, provider prices and the inputs."""
    from planner.render.html import CHARTS_S, fleet_review_html, review_html
    from planner.render.markdown import fleet_review_markdown, review_markdown

    suffix = Path(output).suffix.lower()
    if suffix not in (".html", ".htm", ".md"):
        raise PlannerInputError(f"--output: {output!r} must end in .html or .md")
    started = _command_start()
    if started is not None and suffix != ".md":
        started = started.also_finishing(CHARTS_S)
    loaded = api.load_scenario(scenario, max_price_age, calibration)
    text = read_text(scenario, SCENARIO)
    if calibration is not None:  # the inputs as the plan was made: the file in place of calibration:
        text += f"\n# planner report --calibration {calibration} (in place of calibration:)\n"
    if loaded.is_fleet:
        fleet = api.review_fleet(loaded, time_limit_s=time_limit, started=started)
        name = loaded.name or "fleet"
        write_output(output, fleet_review_markdown(name, fleet, text) if suffix == ".md"
                     else fleet_review_html(name, fleet, text))
        _print_lines([f"speed: {line}" for line in fleet.plan.speed] + [f"wrote {output}"])
        return
    if quiet:
        review = api.review(loaded, time_limit_s=time_limit, started=started)
    else:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("solving the plan and its cost curves"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("report", total=None)
            review = api.review(loaded, progress=lambda done, total: bar.update(task, completed=done, total=total),
                                time_limit_s=time_limit, started=started)
    write_output(output, review_markdown(review, text) if suffix == ".md" else review_html(review, text))
    _echo(f"wrote {output}")


ExportTarget = Enum("ExportTarget", [(name, name) for name in export_targets()], type=str)


@command("export")
def export_command(
    plan: str = Argument(..., help="PLAN.json from `planner solve SCENARIO --format json -o PLAN.json`."),
    to: ExportTarget = Option(..., "--to", help=f"{spoken_list(export_targets())}."),
    plan_index: int = Option(0, "--plan", min=0, help="0 = the best plan, N = the N-th alternative."),
    assignment: Optional[int] = Option(None, "--assignment", min=0,
                                       help="A fleet plan: only assignment N (default: one launch per assignment)."),
    output: Optional[str] = Option(None, "--output", "-o", help="Write to this file instead of the terminal."),
    checkpoint: Optional[str] = Option(None, "--checkpoint", help="The pre-quantized repository (ORG/NAME) to load "
                                       "when the plan's precision needs one planner's catalog does not name."),
) -> None:
    """The launch command or deployment file for a solved plan (or each assignment of a fleet plan)."""
    from planner.render.export import export_all

    text = export_all(api.export_plans(plan, plan_index=plan_index, assignment=assignment), to.value, checkpoint)
    if output is None:
        _echo(text, nl=False)
    else:
        write_output(output, text)


@command("catalog")
def catalog_command(
    kind: CatalogKind = Argument(..., help="gpus, models or precisions."),
    output_format: ListFormat = Option(ListFormat.table, "--format", help="table, json or csv."),
) -> None:
    """List what planner knows: GPUs, models or precisions, with their sources."""
    from planner.render.records import catalog_rows, rows_csv
    from planner.render.terminal import rows_table

    rows = catalog_rows(api.load_catalog(), kind.value)
    if output_format is ListFormat.json:
        _echo(json.dumps(rows, indent=2))
    elif output_format is ListFormat.csv:
        _echo(rows_csv(rows), nl=False)
    else:
        _show(lambda console: rows_table(rows, kind.value, console))


@command("serve")
def serve_command(
    host: str = Option("127.0.0.1", help="Address to listen on (127.0.0.1: this machine only; any other prints a "
                       "warning: there is no authentication). Requests are answered under this name or a loopback one."),
    port: int = Option(8000, min=1, max=65535, help="TCP port."),
) -> None:
    """A local web calculator (memory per GPU, live) and planner (solve, report, exports); JSON API under /api."""
    try:
        from planner.serve.app import serve
    except ModuleNotFoundError as exc:
        raise PlannerInputError(f"serve: needs the web extra ({exc.name} is missing); pip install \"planner[web]\"") from None
    serve(host, port)


@command("update", PRICES_COMMANDS)
def prices_update(
    source: str = Option(..., "--from", help="skypilot-catalog: a local catalogs/v<N> folder or its raw URL "
                         "(https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v8)."),
    provider: Optional[list[str]] = Option(None, "--provider", help="Clouds to rebuild (default: all in catalogs/skypilot.yaml)."),
    as_of: Optional[str] = Option(None, "--as-of", help="The snapshot's date (default: its git commit date; today for a URL)."),
    prices_file: Optional[str] = Option(None, "--prices", help="The prices.yaml to rewrite (default: planner's own)."),
) -> None:
    """Rebuild the SkyPilot-catalog rows of prices.yaml from SkyPilot's vms.csv files."""
    done = api.update_prices(source, providers=tuple(provider or ()), prices_file=prices_file, as_of=as_of)
    _echo(f"{done.path}: {done.added} rows from {done.origin} (as of {done.as_of}) replace {done.replaced}; "
               f"{done.unknown_rows} GPU rows skipped (accelerators planner does not map)")


# The replica of `planner perf` and `planner bench`: one declaration each, read by both commands
REPLICA_MODEL = Argument(..., help="Catalog name or HF id, or a config.json path (as `planner estimate`).")
REPLICA_GPU = Option(..., "--gpu", help="Catalog GPU (see `planner catalog gpus`).")
REPLICA_GPUS = Option(None, "--gpus", help="GPUs of the replica (= tp x pp; default tp x pp).")
REPLICA_TP = Option(None, "--tp", help="Tensor-parallel GPUs (default --gpus / --pp).")
REPLICA_PP = Option(1, "--pp", help="Pipeline-parallel stages.")
REPLICA_PRECISION = Option("auto", help="Weight precision; auto = the checkpoint's own.")
REPLICA_KV_DTYPE = Option("auto", "--kv-dtype", help="KV cache dtype: auto|fp16|bf16|fp8.")
REPLICA_ENGINE = Option("vllm", "--engine", help=f"{spoken_list(profiled_engines())} (its fixed costs and scheduler).")
REPLICA_ENGINE_VERSION = Option(None, "--engine-version", help=ENGINE_VERSION_HELP)
MAX_RUNNING_REQUESTS = Option(None, "--max-running-requests", help="With --engine sglang: the requests the server "
                              "runs at once, as it was told (each --dp group its share; default: SGLang's own limit).")
MOE_KERNEL = Option(None, "--moe-kernel", help="The fused-MoE kernel the engine was told to run (SGLang "
                    "--moe-runner-backend triton / flashinfer_trtllm; vLLM's VLLM_USE_FLASHINFER_MOE_INT4=1 and "
                    "TensorRT-LLM's moe_config backend TRTLLM are flashinfer_trtllm), timed on its own table; default: "
                    "the kernel the release picks.")
# a benchmark run as `vllm bench serve` takes it: its defaults, and the cap planner.estimator.benchmark.MAX_PROMPTS (not
# imported: it loads the simulator, which a command line typer reads for --help does not need)
BENCH_NUM_PROMPTS = Option(1000, "--num-prompts", help="Requests in the run (at most 20,000).")
BENCH_REQUEST_RATE = Option("inf", "--request-rate", help="Requests/s (Poisson arrivals), or inf: all sent at t = 0.")
BENCH_MAX_CONCURRENCY = Option(None, "--max-concurrency", help="Requests in flight at most (default: no limit).")
BENCH_INPUT_LEN = Option(1024, "--input-len", help="Prompt tokens (vLLM's --random-input-len).")
BENCH_OUTPUT_LEN = Option(128, "--output-len", help="Output tokens (vLLM's --random-output-len).")
CALIBRATION_FILE = Option(None, "--calibration", help="A file from `planner calibrate`: its factors time the replica "
                          "when it is of this GPU generation x engine.")
BENCH_RANGE_RATIO = Option(0.0, "--random-range-ratio", help="Lengths uniform in [len x (1 - r), len x (1 + r)], 0 <= r < 1.")


@command("perf")
def perf_command(
    model: str = REPLICA_MODEL,
    gpu: str = REPLICA_GPU,
    gpus: Optional[int] = REPLICA_GPUS,
    tp: Optional[int] = REPLICA_TP,
    pp: int = REPLICA_PP,
    ep: int = Option(1, "--ep", help="Expert-parallel size: the routed experts dealt over this many of the --tp GPUs "
                     "(SGLang --ep-size; vLLM --enable-expert-parallel is --ep = --tp); attention stays tensor-parallel."),
    dp: int = Option(1, "--dp", help="Data-parallel attention groups among the --tp GPUs (SGLang --enable-dp-attention "
                     "--dp-size): each attends to its own requests at TP = tp / dp; timed at a --batch."),
    precision: str = REPLICA_PRECISION,
    kv_dtype: str = REPLICA_KV_DTYPE,
    engine: str = REPLICA_ENGINE,
    engine_version: Optional[str] = REPLICA_ENGINE_VERSION,
    batch: int = Option(1, "--batch", help="Requests running at once."),
    prompt_tokens: int = Option(1024, "--prompt-tokens", help="Tokens per prompt."),
    output_tokens: int = Option(256, "--output-tokens", help="Tokens generated per request."),
    rate: Optional[float] = Option(None, "--rate", help="Requests/s arriving: the steady state under continuous batching."),
    concurrency: Optional[int] = Option(None, "--concurrency", help="Clients each sending a request as soon as their "
                                        "last is answered (vllm bench serve --max-concurrency C): the closed loop."),
    varying_lengths: bool = Option(False, "--varying-lengths", help="With --concurrency: the requests' lengths "
                                   "scatter around --prompt-tokens / --output-tokens (random lengths, real traffic), "
                                   "so they finish at scattered steps; SGLang then runs each batch of arrivals as a "
                                   "prefill pass of its own."),
    scheduler_recv_interval: int = Option(1, "--scheduler-recv-interval", help="With --engine sglang --concurrency "
                                          "--varying-lengths: SGLang's --scheduler-recv-interval, the decode steps "
                                          "between its polls for new requests (their arrivals are prefilled together)."),
    prefill_delayer: bool = Option(False, "--prefill-delayer", help="With --engine sglang --dp D --concurrency "
                                   "--varying-lengths: SGLang's --enable-prefill-delayer, which holds a prefill back "
                                   "(up to 29 passes) until the DP groups fill, so their prompts run together."),
    moe_kernel: Optional[str] = MOE_KERNEL,
    max_running_requests: Optional[int] = MAX_RUNNING_REQUESTS,
    output_format: OutputFormat = Option(OutputFormat.table, "--format", help="table or json."),
    calibration: Optional[str] = CALIBRATION_FILE,
    speculative: Optional[str] = Option(None, "--speculative", help="Speculative decoding: mtp (the checkpoint's own "
                                        "multi-token-prediction module drafts; SGLang NEXTN/EAGLE, vLLM method mtp)."),
    speculative_tokens: int = Option(3, "--speculative-tokens", help="Draft tokens a cycle (SGLang "
                                     "--speculative-num-steps, vLLM num_speculative_tokens)."),
    acceptance_length: Optional[float] = Option(None, "--acceptance-length", help="Mean tokens a request gains a cycle, "
                                                "the bonus token included, as the engine logs it (SGLang 'accept len', "
                                                "vLLM 'Mean acceptance length'); required with --speculative."),
) -> None:
    """Speed of one replica: TTFT, TPOT, tokens/s, requests/s and what bounds the decode step."""
    result = api.perf(model, gpu=gpu, gpus=gpus, tp=tp, pp=pp, ep=ep, dp=dp, precision=precision, kv_dtype=kv_dtype, engine=engine,
                      batch=batch, prompt_tokens=prompt_tokens, output_tokens=output_tokens, rate=rate,
                      concurrency=concurrency, calibration=_calibration(calibration), engine_version=engine_version,
                      speculation=_speculation(speculative, speculative_tokens, acceptance_length),
                      varying_lengths=varying_lengths, scheduler_recv_interval=scheduler_recv_interval,
                      moe_kernel=moe_kernel, prefill_delayer=prefill_delayer, max_running_requests=max_running_requests)
    data = result.to_dict()
    if output_format is OutputFormat.json:
        _echo(json.dumps(data, indent=2, allow_nan=False))
        return
    lines = [f"{data['model']} on {data['tp'] * data['pp']} x {data['gpu']} ({layout_name(data['tp'], data['pp'], data['dp'], data['ep'])}, "
             f"{data['engine']}), batch {data['batch']}, {prompt_tokens:,} + {output_tokens:,} tokens",
             f"TTFT {data['ttft_s']:.3f} s · TPOT {data['tpot_ms']:.1f} ms · {data['output_tokens_per_s']:,.0f} "
             f"output tokens/s · {data['requests_per_s']:.2f} requests/s · decode {data['bound']}-bound"
             + (f" · MoE kernel {data['moe_kernel']}" if data["moe_kernel"] else "")
             + (f" · prefill launched eagerly (no CUDA graph: {data['eager_launches']:,} launches x "
                f"{data['eager_launch_us']:.2f} us at least)" if data["eager_prefill"] else "")]
    spec = data.get("speculative")
    if spec:
        lines.append(f"speculative {spec['method']}: {spec['draft_tokens']} draft tokens, acceptance length "
                     f"{spec['acceptance_length']:g} · a cycle {data['decode_step_ms']:.2f} ms (verify "
                     f"{spec['verify_ms']:.2f} + draft {spec['draft_ms']:.2f})")
    steady = data.get("steady_state")
    if steady and steady["keeps_up"]:
        lines.append(f"at {steady['requests_per_s']:g} req/s: keeps up; {steady['batch']:.1f} requests running, "
                     f"TTFT {steady['ttft_s']:.3f} s, TPOT {steady['tpot_ms']:.1f} ms, KV {steady['kv_tokens_mean']:,.0f} "
                     f"of {steady['pool_tokens']:,} tokens (peak {steady['kv_tokens_peak']:,})")
    elif steady:
        run = result.finite_run
        lines.append(f"at {steady['requests_per_s']:g} req/s: cannot keep up ({steady['limit']}); no steady state: "
                     "its queue grows while requests come")
        lines.append(f"  a simulated run of {run.completed:,} requests at that rate: {run.request_throughput:.2f} req/s "
                     f"served over {run.duration_s:.1f} s")
        lines.append(f"  TTFT mean {run.ttft.mean_ms / 1000:.3f} s, p99 {run.ttft.p99_ms / 1000:.3f} s · TPOT mean "
                     f"{run.tpot.mean_ms:.1f} ms · {run.preemptions:,} preemptions")
    loop = result.closed_loop
    if loop is not None:
        capped = f" ({loop.limit} caps it: {loop.concurrency - loop.running} queued)" if loop.limit else ""
        lines.append(f"{loop.concurrency} clients back to back: {loop.running} running{capped}, "
                     f"{loop.requests_per_s:.2f} req/s, {loop.output_tokens_per_s:,.0f} output tokens/s")
        lines.append(f"  TTFT {loop.ttft_s:.3f} s · TPOT {loop.tpot_s * 1000:.1f} ms · E2E {loop.e2e_s:.2f} s · "
                     f"KV peak {loop.kv_tokens_peak:,} of {loop.pool_tokens:,} tokens")
        if loop.prefill_batch_prompts:
            lines.append(f"  prefill delayer: each prefill batch held {loop.prefill_hold_steps:.1f} passes after its "
                         f"first arrival, then {loop.prefill_batch_prompts:.1f} prompts run together")
        run = result.closed_loop_run
        if run is not None:
            lines.append(f"  admitted past what the pool holds to the end, then preempted: a run of {run.completed:,} "
                         "requests sees")
            lines.append(f"  TTFT mean {run.ttft.mean_ms / 1000:.3f} s · TPOT mean {run.tpot.mean_ms:.1f} ms (median "
                         f"{run.tpot.median_ms:.1f}) · {run.output_throughput:,.0f} output tokens/s · "
                         f"{run.preemptions:,} preemptions")
    _print_lines(lines + _calibration_line(calibration, result.calibration))


def _speculation(method: Optional[str], tokens: int, acceptance: Optional[float]):
    """--speculative, --speculative-tokens and --acceptance-length as one setting (None without --speculative)."""
    if method is None:
        if acceptance is not None:
            raise PlannerInputError("--acceptance-length: only with --speculative mtp")
        return None
    if acceptance is None:
        raise PlannerInputError("--acceptance-length: required with --speculative (the mean tokens a request gains a "
                                "cycle, from the engine's log of a run like yours)")
    from planner.estimator.speculative import speculation

    return speculation(method, tokens, acceptance)


def _calibration(path: Optional[str]) -> Optional[Calibration]:
    if path is None:
        return None
    from planner.calibration.calibrate import load_calibration

    return load_calibration(path)


def _calibration_line(path: Optional[str], coverage: Optional[Coverage]) -> list[str]:
    """What --calibration did: nothing said without one."""
    if path is None or coverage is None:
        return []
    if not coverage.applied:
        return [f"not calibrated ({path} is of another GPU generation x engine: the kernel tables' constants)"]
    if coverage.differs:
        return [f"extrapolated ({path}, fitted on another configuration of {coverage.fitted_on}: "
                f"{'; '.join(coverage.differs)})"]
    return [f"calibrated ({path})"]


@command("calibrate")
def calibrate_command(
    results: list[str] = Argument(..., help="Benchmark results: vllm bench serve --save-result JSON, SGLang "
                                  "bench_serving JSONL, GuideLLM benchmarks.json or two /metrics scrapes (one or more)."),
    model: str = Option(..., "--model", help="The model the runs served (catalog name, HF id or config.json)."),
    gpu: str = REPLICA_GPU,
    gpus: Optional[int] = REPLICA_GPUS,
    tp: Optional[int] = REPLICA_TP,
    pp: int = REPLICA_PP,
    precision: str = REPLICA_PRECISION,
    kv_dtype: str = REPLICA_KV_DTYPE,
    engine: str = REPLICA_ENGINE,
    moe_kernel: Optional[str] = MOE_KERNEL,
    engine_version: Optional[str] = Option(None, "--engine-version", help="The engine release the runs' server ran, "
                                           "whose profile replays them (default: the one the results record, else "
                                           "the current release)."),
    max_running_requests: Optional[int] = MAX_RUNNING_REQUESTS,
    output: Optional[str] = Option(None, "--output", "-o", help="Write the calibration (YAML) to this file."),
) -> None:
    """Fit the speed model's named factors (memory, compute, fixed, communication) for this GPU generation x engine
    to your own benchmark runs, each replayed on the simulator; residuals before and after, and leave-one-out."""
    result = api.calibrate(results, model=model, gpu=gpu, gpus=gpus, tp=tp, pp=pp, precision=precision,
                           kv_dtype=kv_dtype, engine=engine, moe_kernel=moe_kernel, engine_version=engine_version,
                           max_running_requests=max_running_requests)
    on = result.fitted_on
    runs = len(result.prompts_per_replay)
    factors = " · ".join(f"{name} {value:.2f}" for name, value in result.factors.as_dict().items())
    uninformed = [name for name in result.factors.as_dict() if name not in (*result.informed, *result.past_bounds)]
    kernel = f", MoE kernel {on.moe_kernel}" if on.moe_kernel else ""
    release = f" {' / '.join(on.engine_versions)}" if on.engine_versions else ""
    lines = [f"{on.model} on {on.tp * on.pp} x {on.gpu} (tp {on.tp} x pp {on.pp}), {on.generation} x {on.engine}{release}{kernel}: "
             f"{runs} run{'s' if runs != 1 else ''} replayed",
             f"factors (x the time of their terms): {factors}"]
    if uninformed:
        lines.append(f"no run informs {', '.join(uninformed)} (no measured metric is dominated by its terms): "
                     "left at 1.00")
    if result.past_bounds:
        lines.append(f"the runs ask {', '.join(result.past_bounds)} past the bounds: not a calibration of those "
                     "terms (a wrong model, GPU or run): left at 1.00")
    lines += [f"{'run':<36} {'metric':<13} {'measured':>10} {'before':>16} {'after':>16} {'left out':>16}"]

    def shown(value: Optional[float], measured: float) -> str:
        return "-" if value is None else f"{value:,.2f} ({value / measured - 1:+.0%})"

    for r in result.residuals:
        lines.append(f"{r.result[:36]:<36} {r.metric:<13} {r.measured:>10,.2f} {shown(r.before, r.measured):>16} "
                     f"{shown(r.after, r.measured):>16} {shown(r.held_out, r.measured):>16}")
    e = result.errors
    held = "-" if e.held_out is None else f"{e.held_out:.3f}"
    lines.append(f"mean |log(predicted / measured)|: before {e.before:.3f}, after {e.after:.3f}, "
                 f"each run left out of the fit {held}")
    if output is not None:
        write_output(output, result.to_yaml())
        lines.append(f"wrote {output}")
    _print_lines(lines)


@command("check")
def check_command(
    plan: str = Argument(..., help="The deployed fleet plan (`planner solve SCENARIO --format json -o PLAN.json`)."),
    results: list[str] = Argument(..., help="Benchmark results of it: vllm bench serve --save-result JSON, SGLang "
                                  "bench_serving JSONL, GuideLLM benchmarks.json or two /metrics scrapes (one or more)."),
    output_format: OutputFormat = Option(OutputFormat.table, "--format", help="table or json."),
    replan: Optional[str] = Option(None, "--replan", metavar="SCENARIO", help="The scenario the plan was solved from: "
                                   "re-solve it with a calibration fitted on the runs and print what the fleet costs."),
    save_calibration: Optional[str] = Option(None, "--save-calibration", metavar="FILE", help="With --replan: write "
                                             "the fitted calibration (YAML) for `planner solve SCENARIO --calibration`."),
    time_limit: Optional[float] = Option(None, "--time-limit", min=0.01, help="With --replan: seconds for the re-solve "
                                         "(after the fit; default: the scenario's solver.time_limit_s, 10)."),
) -> None:
    """A deployed plan against what ran: each benchmark run replayed on the plan's replica, predicted against measured
    mean TTFT, mean TPOT and output throughput, held to the plan's SLO at the run's load; with --replan, the fleet
    re-planned with the measured speed."""
    if replan is None and (save_calibration is not None or time_limit is not None):
        raise PlannerInputError(f"{'--save-calibration' if save_calibration else '--time-limit'}: an option of "
                                "--replan SCENARIO; add it")
    rows = api.check(plan, results)
    again = None if replan is None else api.replan(plan, results, api.load_scenario(replan), time_limit_s=time_limit)
    if again is not None and save_calibration is not None:
        write_output(save_calibration, again.calibration.to_yaml())
    if output_format is OutputFormat.json:
        _echo(json.dumps({"runs": [r.to_dict() for r in rows], "replan": again.to_dict() if again else None},
                         indent=2, allow_nan=False))
        return
    names = {"ttft_ms": "mean TTFT ms", "tpot_ms": "mean TPOT ms", "output_tok_s": "output tok/s"}
    lines = [f"{'run':<36} {'replica':<28} {'metric':<13} {'measured':>10} {'predicted':>10} {'error':>7}"]
    for r in rows:
        replica = f"{r.workload}: {r.tp * r.pp} x {r.gpu} ({r.engine})"
        for metric, measured in r.measured.items():
            lines.append(f"{r.result[:36]:<36} {replica[:28]:<28} {names[metric]:<13} {measured:>10,.2f} "
                         f"{r.predicted[metric]:>10,.2f} {r.error(metric):>+7.0%}")
        lines += _check_verdict_lines(r)
    if again is not None:
        lines += _replan_lines(again)
        if save_calibration is not None:
            lines.append(f"wrote {save_calibration}")
    _print_lines(lines)


def _replan_lines(again: api.Replan) -> list[str]:
    """The fitted calibration, the re-planned fleet's speed lines and its cost against the plan's."""
    c = again.calibration
    on = c.fitted_on
    factors = " · ".join(f"{name} {value:.2f}" for name, value in c.factors.as_dict().items())
    held = "-" if c.errors.held_out is None else f"{c.errors.held_out:.3f}"
    runs = len(c.prompts_per_replay)
    lines = [f"re-planned {again.scenario} with a calibration fitted on {runs} run{'s' if runs != 1 else ''} of "
             f"{on.tp * on.pp} x {on.gpu} ({on.generation} x {on.engine})", f"  factors: {factors}",
             f"  mean |log(predicted / measured)|: before {c.errors.before:.3f}, after {c.errors.after:.3f}, each run "
             f"left out of the fit {held}"]
    lines += [f"speed: {line}" for line in again.plan.speed]
    planned = (f"the plan's {again.planned_replicas} replicas"
               + (f", ${again.planned_usd_per_hour:,.2f}/hour" if again.planned_usd_per_hour is not None else ""))
    fleet = again.plan
    if fleet.usd_per_hour is None:
        lines.append(f"with the measured speed {again.scenario} cannot be served against {planned}")
        lines += [f"  unmet: {line}" for line in fleet.unmet]
        return lines
    change = "" if again.change is None else f": {again.change:+.0%} on"
    lines.append(f"with the measured speed {again.scenario} needs {again.replicas} replicas, "
                 f"${fleet.usd_per_hour:,.2f}/hour{change or ', against'} {planned}")
    lines += [f"  {a.workload}: {a.replicas} x {a.config.candidate.gpus} x {a.config.candidate.gpu.name}, "
              f"{a.config.capacity_rps:,.2f} req/s each" for a in fleet.assignments]
    lines.append("  prices: the catalog's today; the plan's cost as it was solved")
    return lines


def _check_verdict_lines(r: api.CheckedRun) -> list[str]:
    """A checked run against the plan's SLO and its per-replica load."""
    if r.slo is None:
        lines = ["  SLO: the plan carries none (written before plan files recorded it); write the plan again with "
                 "`planner solve SCENARIO --format json -o PLAN.json`"]
    elif not r.verdicts:
        lines = ["  SLO: the scenario sets none"]
    else:
        lines = []
    for v in r.verdicts:
        target = f"  SLO: {v.metric[:4].upper()} {v.statistic} <= {v.limit_ms:,.2f} ms: "
        if v.decided_by is None:
            shown = ", ".join(f"{name} {value:,.2f}" for name, value in v.reported.items())
            lines.append(target + f"undetermined (the run reports {shown or 'none of it'} ms, not its {v.statistic})")
        else:
            value = v.reported[v.decided_by]
            lines.append(target + f"{'meets' if v.meets else 'misses'} ({v.decided_by} {value:,.2f} ms)")
    load = r.load
    if load.measured_rps is None:
        lines.append(f"  load: the run reports no throughput; the plan loads a replica with {load.planned_rps:,.2f} req/s")
    else:
        where = "at or below" if load.at_or_below_planned else "above"
        lines.append(f"  load: {load.measured_rps:,.2f} req/s, {where} the planned {load.planned_rps:,.2f} req/s per replica")
    return lines


def request_rate(text: str) -> float:
    """--request-rate as vllm bench serve takes it: requests/s, or inf."""
    try:
        return float(text)
    except ValueError:
        raise PlannerInputError(f"--request-rate: {text!r} is not a number; give requests/s (10, 2.5) or inf") from None


@command("bench")
def bench_command(
    model: str = REPLICA_MODEL,
    gpu: str = REPLICA_GPU,
    gpus: Optional[int] = REPLICA_GPUS,
    tp: Optional[int] = REPLICA_TP,
    pp: int = REPLICA_PP,
    precision: str = REPLICA_PRECISION,
    kv_dtype: str = REPLICA_KV_DTYPE,
    engine: str = REPLICA_ENGINE,
    engine_version: Optional[str] = REPLICA_ENGINE_VERSION,
    num_prompts: int = BENCH_NUM_PROMPTS,
    rate: str = BENCH_REQUEST_RATE,
    max_concurrency: Optional[int] = BENCH_MAX_CONCURRENCY,
    input_len: int = BENCH_INPUT_LEN,
    output_len: int = BENCH_OUTPUT_LEN,
    range_ratio: float = BENCH_RANGE_RATIO,
    seed: int = Option(0, "--seed", help="Seed of the lengths and arrivals."),
    output_format: OutputFormat = Option(OutputFormat.table, "--format", help="table, or json (vLLM's saved-result keys)."),
    calibration: Optional[str] = CALIBRATION_FILE,
    moe_kernel: Optional[str] = MOE_KERNEL,
    max_running_requests: Optional[int] = MAX_RUNNING_REQUESTS,
) -> None:
    """`vllm bench serve` on a simulated replica: its random dataset, request rate and max concurrency, its metrics
    (also `planner simulate --benchmark`)."""
    _benchmark(model, gpu, gpus, tp, pp, precision, kv_dtype, engine, num_prompts, rate, max_concurrency, input_len,
               output_len, range_ratio, seed, output_format, calibration, engine_version, moe_kernel,
               max_running_requests)


def _benchmark(model: str, gpu: str, gpus: Optional[int], tp: Optional[int], pp: int, precision: str, kv_dtype: str,
               engine: str, num_prompts: int, rate: str, max_concurrency: Optional[int], input_len: int, output_len: int,
               range_ratio: float, seed: int, output_format: OutputFormat, calibration: Optional[str],
               engine_version: Optional[str] = None, moe_kernel: Optional[str] = None,
               max_running_requests: Optional[int] = None) -> None:
    from planner.estimator.benchmark import BenchmarkRun

    run = BenchmarkRun(num_prompts=num_prompts, request_rate=request_rate(rate), max_concurrency=max_concurrency,
                       input_len=input_len, output_len=output_len, range_ratio=range_ratio, seed=seed)
    result = api.bench(model, run, gpu=gpu, gpus=gpus, tp=tp, pp=pp, precision=precision, kv_dtype=kv_dtype,
                       engine=engine, calibration=_calibration(calibration), engine_version=engine_version,
                       moe_kernel=moe_kernel, max_running_requests=max_running_requests)
    if output_format is OutputFormat.json:
        _echo(json.dumps(result.to_dict(), indent=2, allow_nan=False))
        return
    _print_lines(_bench_lines(result) + _calibration_line(calibration, result.calibration))


def _bench_lines(bench: api.BenchResult) -> list[str]:
    """The result block vllm bench serve prints (vllm/benchmarks/serve.py, v0.34.0), E2EL included."""
    x = bench.result

    def row(label: str, value: float | int | str) -> str:
        return f"{label:<40} {value if isinstance(value, (int, str)) else f'{value:.2f}'}"

    lines = [f"simulated: {bench.model} on {bench.tp * bench.pp} x {bench.gpu} (tp {bench.tp} x pp {bench.pp}, "
             f"{bench.engine}); {x.preemptions:,} preemptions, at most {x.peak_in_flight:,} requests in flight",
             "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             row("Successful requests:", x.completed), row("Failed requests:", 0)]
    if x.run.max_concurrency is not None:
        lines.append(row("Maximum request concurrency:", x.run.max_concurrency))
    if x.run.request_rate != float("inf"):
        lines.append(row("Request rate configured (RPS):", x.run.request_rate))
    lines += [row("Benchmark duration (s):", x.duration_s), row("Total input tokens:", x.total_input_tokens),
              row("Total generated tokens:", x.total_output_tokens),
              row("Request throughput (req/s):", x.request_throughput),
              row("Output token throughput (tok/s):", x.output_throughput),
              row("Total token throughput (tok/s):", x.total_token_throughput)]
    for stats, name, header in ((x.ttft, "TTFT", "Time to First Token"),
                                (x.tpot, "TPOT", "Time per Output Token (excl. 1st token)"),
                                (x.itl, "ITL", "Inter-token Latency"), (x.e2el, "E2EL", "End-to-end Latency")):
        lines += ["{s:{c}^{n}}".format(s=header, n=50, c="-"), row(f"Mean {name} (ms):", stats.mean_ms),
                  row(f"Median {name} (ms):", stats.median_ms), row(f"P99 {name} (ms):", stats.p99_ms)]
    lines.append("=" * 50)
    return lines


@command("simulate")
def simulate_command(
    source: str = Argument(..., help="A scenario with traffic (solved first) or PLAN.json; with --benchmark, a model."),
    duration: Optional[float] = Option(None, "--duration", help="Simulated seconds of arrivals (default 600)."),
    rate: Optional[float] = Option(None, "--rate", help="Requests/s at each replica (default: its share of the demand)."),
    arrivals: Optional[str] = Option(None, "--arrivals", help="poisson (the default), or a JSONL trace of {arrival_s, prompt_tokens, output_tokens}."),
    seed: int = Option(0, "--seed", help="Seed of the arrivals (and with --benchmark, of the lengths)."),
    output_format: OutputFormat = Option(OutputFormat.table, "--format", help="table or json (--benchmark: vLLM's saved-result keys)."),
    benchmark: bool = Option(False, "--benchmark", help="Replay a `vllm bench serve` run on one replica of MODEL (as `planner bench`)."),
    gpu: Optional[str] = Option(None, "--gpu", help="--benchmark: catalog GPU (see `planner catalog gpus`)."),
    gpus: Optional[int] = REPLICA_GPUS,
    tp: Optional[int] = REPLICA_TP,
    pp: int = REPLICA_PP,
    precision: str = REPLICA_PRECISION,
    kv_dtype: str = REPLICA_KV_DTYPE,
    engine: str = REPLICA_ENGINE,
    num_prompts: int = BENCH_NUM_PROMPTS,
    request_rate_text: str = BENCH_REQUEST_RATE,
    max_concurrency: Optional[int] = BENCH_MAX_CONCURRENCY,
    input_len: int = BENCH_INPUT_LEN,
    output_len: int = BENCH_OUTPUT_LEN,
    range_ratio: float = BENCH_RANGE_RATIO,
    calibration: Optional[str] = Option(None, "--calibration", metavar="FILE", help="A file from `planner calibrate`: "
                                        "a scenario's replicas (in place of its calibration:) or, with --benchmark, "
                                        "the replica, timed with it on the GPU generation x engine it was fitted on."),
    moe_kernel: Optional[str] = Option(None, "--moe-kernel", help="--benchmark: the fused-MoE kernel the engine was "
                                       "told to run (as `planner bench`)."),
    max_running_requests: Optional[int] = Option(None, "--max-running-requests", help="--benchmark, with --engine "
                                                 "sglang: the requests the server runs at once (as `planner bench`)."),
) -> None:
    """Discrete-event simulation of each replica under vLLM V1's scheduler: latency percentiles, preemptions, KV use;
    with --benchmark, a `vllm bench serve` run replayed on one replica of a model."""
    replica_given = {"--gpu": gpu, "--gpus": gpus, "--tp": tp, "--pp": pp != 1, "--precision": precision != "auto",
                     "--kv-dtype": kv_dtype != "auto", "--engine": engine != "vllm", "--num-prompts": num_prompts != 1000,
                     "--request-rate": request_rate_text != "inf", "--max-concurrency": max_concurrency,
                     "--input-len": input_len != 1024, "--output-len": output_len != 128,
                     "--random-range-ratio": range_ratio != 0.0, "--moe-kernel": moe_kernel,
                     "--max-running-requests": max_running_requests}
    if benchmark:
        fleet_only = next((flag for flag, value in (("--duration", duration), ("--rate", rate),
                                                    ("--arrivals", arrivals)) if value is not None), None)
        if fleet_only:
            raise PlannerInputError(f"{fleet_only}: a fleet simulation's option; --benchmark takes --request-rate, "
                                    "--num-prompts and --max-concurrency")
        if gpu is None:
            raise PlannerInputError("--gpu: --benchmark needs the replica's GPU (see `planner catalog gpus`)")
        _benchmark(source, gpu, gpus, tp, pp, precision, kv_dtype, engine, num_prompts, request_rate_text,
                   max_concurrency, input_len, output_len, range_ratio, seed, output_format, calibration,
                   moe_kernel=moe_kernel, max_running_requests=max_running_requests)
        return
    unused = next((flag for flag, value in replica_given.items() if value), None)
    if unused:
        raise PlannerInputError(f"{unused}: a benchmark replay's option; add --benchmark (SOURCE is then a model)")
    plan_file = Path(source).suffix.lower() == ".json"
    if plan_file and calibration is not None:
        raise PlannerInputError("--calibration: a plan file is simulated at the speed it was planned with; simulate "
                                "its scenario with --calibration FILE, or re-plan it: planner check PLAN.json RESULT... "
                                "--replan SCENARIO")
    runs = api.simulate(source if plan_file else api.load_scenario(source, calibration=calibration),
                        duration_s=duration, rate=rate, arrivals=arrivals or "poisson", seed=seed)
    if output_format is OutputFormat.json:
        _echo(json.dumps([asdict(r) for r in runs], indent=2))
        return
    lines: list[str] = []
    for r in runs:
        x = r.result
        requests = {"prefill": f"{r.prompt_tokens:,}-token prompts (each ends at its first token, its KV sent to the "
                               "decode pool)",
                    "decode": f"{r.prompt_tokens:,} + {r.output_tokens:,}-token requests (their prompts' KV computed by "
                              "the prefill pool)"}.get(r.role, f"{r.prompt_tokens:,} + {r.output_tokens:,}-token requests")
        lines.append(f"{r.workload or 'replica'}{'' if r.role == 'both' else ' ' + r.role}: {r.replicas} x "
                     f"({r.tp * r.pp} x {r.gpu}), {r.rate_per_replica:.2f} req/s per replica, {r.share:.0%} of its "
                     f"{requests}" + (f" (the first {r.shared_prefix_tokens:,} prompt tokens shared: prefix-cached)"
                                      if r.shared_prefix_tokens else ""))
        if r.speed is not None:
            lines.append(f"  speed: {r.speed}")
        latencies = (("TTFT", x.ttft_s, 1), ("TPOT", x.tpot_s, 1000), ("E2E", x.e2e_s, 1))
        for label, p, unit in latencies[:1] if r.role == "prefill" else latencies:
            suffix = "ms" if unit == 1000 else "s"
            lines.append(f"  {label:<5} p50 {p.p50 * unit:.3f} {suffix} · p90 {p.p90 * unit:.3f} {suffix} · "
                         f"p99 {p.p99 * unit:.3f} {suffix}")
        lines.append(f"  {x.completed:,} requests, {x.requests_per_s:.2f} req/s, {x.output_tokens_per_s:,.0f} output tokens/s, "
                     f"{x.preemptions} preemptions, mean batch {x.mean_batch:.1f}, KV peak {x.kv_peak_fraction:.0%} of the pool")
        marks = " ".join(f"{fraction:.0%}" for _, fraction in x.kv_timeline[:: max(1, len(x.kv_timeline) // 10)])
        lines.append(f"  KV use over time: {marks}")
    _print_lines(lines)


def main() -> None:
    """Console entry point: user errors become one line on stderr and exit code 2. Both ways of reading the command
    line (planner.direct's and typer's) run the command with its time limit counted from here."""
    global _started
    _started = time.perf_counter(), time.thread_time()  # before the catalogs load (planner.plan.deadline)
    from planner.direct import direct_call, run_standalone

    try:
        call = direct_call(COMMANDS, sys.argv[1:])  # a plain command line skips typer and its (pydantic) parsing
        if call is None:
            _app()()  # standalone: usage errors (unknown option, wrong type) already exit 2 with one message
        else:
            run_standalone(call)
    except PlannerInputError as exc:
        _echo(f"error: {exc}", err=True)
        sys.exit(2)
    finally:
        _started = None  # a command run without main() (typer's test runner) times itself from its call


def run() -> None:
    """The `planner` command: main(), then out of the process without tearing the interpreter down. Finalising
    the modules of OR-Tools, numpy and pandas after a command costs 0.1-0.15 s (measured: `planner solve
    scenarios/70b-chat.yaml` 1.46-1.51 s with the interpreter's exit, 1.33-1.36 s without, best of 5 each). Every
    output is written and closed before main() returns, and logging's flush is the one exit handler a run
    registers (when a library imported logging), so it is called here; an uncaught exception still takes the
    interpreter's own way out.

    pydantic looks up plugins (importlib.metadata over every installed distribution) when the first model class is
    built; the command validates its inputs with pydantic and wants no plugin, so it skips the lookup unless the
    user set PYDANTIC_DISABLE_PLUGINS (pydantic's documented switch) themselves."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    code: int = 0
    try:
        main()
    except SystemExit as exc:
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\n")
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that closed the pipe early, or a closed stream
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
