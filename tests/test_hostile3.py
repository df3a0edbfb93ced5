"""Hostile input, round 3: files written that were not asked for, price sources that hang or break later
commands, exports that launch what was not checked, names that reach a terminal, page, chart, Markdown or CSV
as something other than text.

Each test is a reproducer from the issue that failed before its fix.
"""

import html
import io
import json
import os
import re
import shlex
import shutil
import socketserver
import threading
import time
from pathlib import Path

import pytest
import yaml

from test_hostile import cli_error, fuzz, one_line_error


from planner.catalog import price_update
from planner.catalog.load import catalog_dir, load_catalog
from planner.catalog.price_update import update_prices
from planner.errors import PlannerInputError
from planner.catalog.skypilot import load_skypilot
from planner.files import SKYPILOT_CSV
from planner.render.plain import NotPlain

REPO = Path(__file__).resolve().parent.parent
SKYPILOT_FIXTURE = REPO / "tests" / "data" / "skypilot-catalog"
CATALOG = load_catalog()
SKYPILOT = load_skypilot()
VAST_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region\n"
H200_INFO = "\"{'Gpus': [{'Name': 'H200', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 143771}}], 'TotalGpuMemoryInMiB': 143771}\""


def vast_row(instance="1x-H200-32-65536", count="1", info=H200_INFO, price="2.65", spot="0.00", region="France",
             name="H200") -> str:
    return f"{instance},{name},{count},32,64.0,{info},{price},{spot},{region}\n"


@pytest.fixture
def prices_copy(tmp_path):
    path = tmp_path / "prices.yaml"
    shutil.copy(catalog_dir() / "prices.yaml", path)
    return path


def vast_catalog(tmp_path, *rows: str) -> Path:
    folder = tmp_path / "catalog-v8"
    (folder / "vast").mkdir(parents=True)
    (folder / "vast" / "vms.csv").write_text(VAST_HEADER + "".join(rows))
    return folder


def update(source, prices, **options):
    return update_prices(str(source), ("vast",), CATALOG, SKYPILOT, prices, options.pop("as_of", "2026-11-30"), **options)


# --- finding 1: every file planner writes goes through its one output writer ---------------------

def test_prices_update_does_not_follow_a_link_planted_at_a_temporary_name(prices_copy, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / ".prices.yaml.tmp").symlink_to(victim)
    update(SKYPILOT_FIXTURE, prices_copy)
    assert victim.read_text() == "keep me\n"
    assert "1x-H200-32-65536" in prices_copy.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".prices.yaml.tmp", "prices.yaml", "victim.txt"]


def test_prices_update_through_a_link_keeps_the_link(prices_copy, tmp_path):
    link = tmp_path / "link.yaml"
    link.symlink_to(prices_copy)
    update(SKYPILOT_FIXTURE, link)
    assert link.is_symlink() and "1x-H200-32-65536" in prices_copy.read_text()


# --- finding 3: every reader has a size cap, network reads an overall deadline ---------------------

def test_prices_that_are_a_fifo_or_a_device_are_refused(prices_copy, tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        one_line_error(lambda: update(SKYPILOT_FIXTURE, path), "--prices", str(path))


def test_a_vms_csv_past_the_cap_is_refused_before_it_is_read(prices_copy, tmp_path):
    folder = vast_catalog(tmp_path)
    with open(folder / "vast" / "vms.csv", "r+b") as handle:
        handle.truncate(SKYPILOT_CSV.max_bytes + 1)  # sparse: no disk used
    one_line_error(lambda: update(folder, prices_copy), "--from", "vms.csv")


def test_a_vms_csv_fifo_is_refused(prices_copy, tmp_path):
    folder = vast_catalog(tmp_path)
    (folder / "vast" / "vms.csv").unlink()
    os.mkfifo(folder / "vast" / "vms.csv")
    one_line_error(lambda: update(folder, prices_copy), "--from", "FIFO")


@pytest.mark.parametrize("instances", [100, None])
def test_a_large_vms_csv_is_read_within_the_limits(prices_copy, tmp_path, instances):
    # 40 MB (a third larger than AWS's, the largest real one): was 25 s and 1.4 GB. As AWS's: 100 instance types
    # in many zones, read; each row a new instance type: more rows than a prices.yaml planner reads, refused
    rows = 40 * 2**20 // len(vast_row(instance="1x-H200-100000", region="r10"))
    folder = vast_catalog(tmp_path, *(vast_row(instance=f"1x-H200-{i % (instances or rows)}", region=f"r{i % 50}")
                                      for i in range(rows)))
    started = time.perf_counter()
    if instances:
        assert update(folder, prices_copy).added == instances
    else:
        one_line_error(lambda: update(folder, prices_copy), "--from", "instance types", "more rows than a prices.yaml")
    assert time.perf_counter() - started < 10


class _Silent(socketserver.BaseRequestHandler):
    def handle(self):
        time.sleep(3)


class _Dripping(socketserver.BaseRequestHandler):
    def handle(self):
        for byte in b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + VAST_HEADER.encode():
            try:
                self.request.sendall(bytes([byte]))
            except OSError:
                return
            time.sleep(0.05)


@pytest.mark.parametrize("handler", [_Silent, _Dripping])
def test_a_url_that_never_finishes_stops_at_the_deadline(prices_copy, monkeypatch, handler):
    monkeypatch.setattr(price_update, "DOWNLOAD_DEADLINE_S", 1.0)
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/catalogs/v8"
        started = time.perf_counter()
        one_line_error(lambda: update(url, prices_copy), "--from", "1 s")
        assert time.perf_counter() - started < 2.5
    finally:
        server.shutdown()
        server.server_close()


# --- finding 4: rows are validated as the catalog loader validates them, before anything is written -

@pytest.mark.parametrize("row, named", [
    (vast_row(count="1e18"), "gpus"),
    (vast_row(price="inf"), "on_demand_usd_per_hour"),
    (vast_row(price="1e308"), "on_demand_usd_per_hour"),
    (vast_row(spot="nan"), "spot_usd_per_hour"),
    (vast_row(instance="[/x]"), "instance"),
    (vast_row(region="$x^$"), "region"),
    (vast_row(instance="=HYPERLINK(1)"), "instance"),
    (vast_row(price="two dollars"), "Price"),
    # finding 5: these were tracebacks
    (vast_row(count="inf"), "AcceleratorCount"),
    (vast_row(instance="1x-A100_SXM4-32-65536", name="A100",  # vast's A100s are told apart by their memory
              info="\"{'Gpus': [{'Name': 'A100', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 1e999}}]}\""), "GpuInfo"),
    (vast_row(info='"' + "x" * 200_000 + '"'), "field"),
])
def test_a_bad_price_row_is_refused_with_its_line_and_nothing_is_written(prices_copy, tmp_path, row, named):
    before = prices_copy.read_bytes()
    folder = vast_catalog(tmp_path, vast_row(instance="1x-H200-ok"), row)
    message = one_line_error(lambda: update(folder, prices_copy), "line 3", named)
    assert "vms.csv" in message
    assert prices_copy.read_bytes() == before


def test_an_impossible_as_of_is_refused(prices_copy):
    one_line_error(lambda: update(SKYPILOT_FIXTURE, prices_copy, as_of="2026-13-45"), "--as-of", "2026-13-45")


def test_the_catalog_loader_refuses_the_same_rows(tmp_path):
    folder = tmp_path / "catalog"
    shutil.copytree(catalog_dir(), folder, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    data = yaml.safe_load((folder / "prices.yaml").read_text())
    data["prices"][0]["gpus"] = 10**18
    (folder / "prices.yaml").write_text(yaml.safe_dump(data))
    one_line_error(lambda: load_catalog(str(folder)).offers, "prices[0]", "gpus")


# --- finding 5: tracebacks ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["estimate", "llama-3.1-8b", "--batch", "1" * 4400],
    ["solve", "scenarios/8b-budget.yaml", "--top", "9" * 5000],
])
def test_an_integer_past_pythons_digit_limit_is_a_usage_error(argv):
    from fuzz import invoke_cli

    outcome = invoke_cli(argv)
    assert outcome.code == 2 and "Traceback" not in outcome.stderr and "integer" in outcome.stderr, outcome.stderr[-500:]


@pytest.mark.parametrize("make", ["missing", "folder"])
def test_prices_missing_or_a_folder_is_one_line(tmp_path, make):
    path = tmp_path / "prices.yaml"
    if make == "folder":
        path.mkdir()
    cli_error(["prices", "update", "--from", SKYPILOT_FIXTURE, "--provider", "vast", "--as-of", "2026-11-30",
               "--prices", path], "--prices", str(path))


# --- finding 2: exports launch only what was checked ---------------------------------------------------

@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    from planner import solve
    from planner.render.records import solve_json

    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(solve_json(solve({"name": "chat", "model": "llama-3.1-8b", "workload": {"context": 8192, "concurrency": 4},
                                      "search": {"gpus": ["l40s"], "precisions": ["bf16"]}})))
    return path


def edited_plan(plan_json, tmp_path, **fields) -> Path:
    data = json.loads(plan_json.read_text())
    data["best"].update(fields)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("model_id", ["--trust-remote-code", "meta-llama/Llama-3.1-405B-Instruct", "-h", "."])
@pytest.mark.parametrize("target", ["vllm", "sglang", "kubernetes", "skypilot", "llamacpp"])
def test_a_plan_whose_model_id_is_not_the_checked_model_is_refused(plan_json, tmp_path, model_id, target):
    path = edited_plan(plan_json, tmp_path, model_id=model_id)
    cli_error(["export", path, "--to", target], "model_id", repr(model_id))


@pytest.mark.parametrize("checkpoint", ["--trust-remote-code", "-h", ".", "../x", "org/", "meta-llama/Llama-3.1-405B-Instruct"])
def test_a_checkpoint_that_is_not_a_repository_of_the_checked_model_is_refused(plan_json, checkpoint):
    cli_error(["export", plan_json, "--to", "vllm", f"--checkpoint={checkpoint}"], "--checkpoint", repr(checkpoint))


def test_every_repository_in_a_command_is_an_argument(plan_json):
    from fuzz import invoke_cli

    for checkpoint in (None, "my-org/Llama-3.1-8B-Instruct-w8a8", "meta-llama/Llama-3.1-8B"):
        argv = ["export", str(plan_json), "--to", "vllm"] + ([f"--checkpoint={checkpoint}"] if checkpoint else [])
        outcome = invoke_cli(argv)
        assert outcome.code == 0, outcome.stderr
        [line] = [line for line in outcome.stdout.splitlines() if line.startswith("vllm serve ")]
        assert shlex.split(line)[2] == (checkpoint or "meta-llama/Llama-3.1-8B-Instruct")


def test_a_plan_of_a_config_file_needs_the_repository_to_load(tmp_path):
    from planner import solve
    from planner.render.records import solve_json

    config = REPO / "tests" / "data" / "configs" / "llama-3.1-8b-instruct" / "config.json"
    path = tmp_path / "plan.json"
    path.write_text(solve_json(solve({"model": str(config), "workload": {"context": 8192, "concurrency": 4},
                                      "search": {"gpus": ["l40s"], "precisions": ["bf16"]}})))
    cli_error(["export", path, "--to", "vllm"], "model_id", "--checkpoint ORG/NAME")
    cli_error(["export", path, "--to", "vllm", "--checkpoint", "meta-llama/Llama-3.1-70B-Instruct"], "--checkpoint", "llama-3.1-70b")
    from fuzz import invoke_cli

    outcome = invoke_cli(["export", str(path), "--to", "vllm", "--checkpoint", "meta-llama/Llama-3.1-8B-Instruct"])
    assert outcome.code == 0 and "vllm serve meta-llama/Llama-3.1-8B-Instruct " in outcome.stdout, outcome.stderr


@pytest.mark.parametrize("checkpoint", ["--trust-remote-code", "-h", "."])
def test_the_web_export_refuses_the_same_checkpoints(checkpoint):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from planner.serve.app import create_app

    text = (REPO / "scenarios" / "8b-budget.yaml").read_text()
    answer = TestClient(create_app()).post("/api/export", json={"scenario": text, "target": "vllm", "checkpoint": checkpoint})
    assert answer.status_code == 400 and answer.json()["error"].startswith("checkpoint:") and checkpoint in answer.json()["error"]


@pytest.fixture(scope="module")
def fleet():
    """multi-model-fleet solved once (its names are replaced per case): a loaded machine cuts no search short."""
    from planner import api

    plan = api.plan_fleet(REPO / "scenarios" / "multi-model-fleet.yaml", time_limit_s=60)
    assert len(plan.assignments) > 1
    return plan


def renamed(plan, name: str):
    from dataclasses import replace

    return replace(plan, assignments=tuple(replace(a, workload=name) for a in plan.assignments))


# --- finding 6: names reach the terminal as text ----------------------------------------------------------

HOSTILE_NAMES = ["[/x]", "[bold]x[/bold]", "a\x1b[31mred\x1b[0m", "x\\", ":smile: [link=file:///etc]y[/link]"]


def scenario_named(tmp_path, name: str, source: str = "8b-budget.yaml") -> Path:
    data = yaml.safe_load((REPO / "scenarios" / source).read_text())
    data["name"] = name
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def shown(name: str) -> str:
    """How a name prints: as written, control characters as their escapes."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in name)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
@pytest.mark.parametrize("source", ["8b-budget.yaml", "multi-model-fleet.yaml"])
def test_a_scenario_name_prints_as_written(tmp_path, name, source):
    from fuzz import invoke_cli

    outcome = invoke_cli(["solve", str(scenario_named(tmp_path, name, source)), "--time-limit", "5"])
    assert outcome.code == 0, outcome.stderr[-2000:]
    first = outcome.stdout.splitlines()[0]
    assert first.startswith(shown(name) + " · ") and "\x1b" not in outcome.stdout, first


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_workload_name_prints_as_written(fleet, name):
    from rich.console import Console

    from planner.render.plain import PlainConsole, Target
    from planner.render.terminal import fleet_table

    for console in (Console(file=io.StringIO(), width=300, highlight=False, emoji=False), PlainConsole(Target(300))):
        try:
            fleet_table("fleet", renamed(fleet, name), console)
        except NotPlain:  # the plain console leaves to rich what rich draws (escaped markup)
            continue
        text = console.file.getvalue() if isinstance(console, Console) else console.text()
        assert shown(name) + " " in text and "\x1b" not in text, text


def test_a_model_path_prints_as_written(tmp_path):
    from fuzz import invoke_cli

    folder = tmp_path / "[bold]m[" / "x]"  # the path holds [bold] and [/x]
    for model in (folder, tmp_path / "[bold]m"):
        model.mkdir(parents=True)
        shutil.copy(REPO / "tests" / "data" / "configs" / "llama-3.1-8b-instruct" / "config.json", model)
    for argv, printed in ((["estimate", str(tmp_path / "[bold]m")], "[bold]m ·"),
                          (["compare", str(folder), "--gpus", "l40s", "--time-limit", "5"], str(folder))):
        outcome = invoke_cli(argv)
        assert outcome.code == 0 and printed in outcome.stdout, outcome.stderr[-2000:]


def test_as_text_escapes_as_rich_escapes():
    from rich.console import Console
    from rich.markup import escape

    from planner.render.plain import as_text

    for name in HOSTILE_NAMES + ["\\[b]", "ok", "é", "\ud800"]:
        if name.isprintable() and not name.endswith("\\"):  # rich's escape adds a backslash that prints before text
            assert as_text(name) == escape(name)
        console = Console(width=200, emoji=False, highlight=False, color_system=None)
        for template in ("[bold]{}[/bold]", "{}", "{} and text"):
            with console.capture() as captured:
                console.print(template.format(as_text(name)))
            assert captured.get().rstrip("\n") == template.replace("[bold]", "").replace("[/bold]", "").format(shown(name))


# --- finding 7: chart labels are plain text ------------------------------------------------------------

@pytest.mark.parametrize("name", ["$\\frac{$", "$x^2$", "a\x1bb"])
def test_a_workload_named_as_math_is_drawn_as_written(fleet, name):
    from planner.render.html import fleet_html

    page = fleet_html("fleet", renamed(fleet, name), "")
    assert html.escape(name.replace("\x1b", "\\x1b"), quote=False) + ": " in page  # the chart's label, as written


def test_chart_labels_are_not_mathtext():
    from planner.render.charts import MemoryBar, memory_chart

    svg = memory_chart([MemoryBar("$\\frac{$", 1, 1, 1, 1), MemoryBar("$x^2$", 1, 1, 1, 1)])
    assert "$\\frac{$" in svg and "$x^2$" in svg


# --- finding 9: Kubernetes names are unique and valid --------------------------------------------------

DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize("name", ["x" * 80, "Fleet " * 20, "-" * 70 + "a", "ü" * 70, "a" * 61 + "--b"])
def test_kubernetes_names_of_a_fleet_stay_distinct_and_valid(tmp_path, fleet, name):
    from fuzz import invoke_cli

    from planner.render.records import fleet_json

    plan = tmp_path / "fleet.json"
    plan.write_text(fleet_json(fleet, name))
    outcome = invoke_cli(["export", str(plan), "--to", "kubernetes"])
    assert outcome.code == 0, outcome.stderr[-2000:]
    names = [doc["metadata"]["name"] for doc in yaml.safe_load_all(outcome.stdout)]
    assert len(names) == len(fleet.assignments) > 1
    assert len(set(names)) == len(names), names
    for n in names:
        assert len(n) <= 63 and DNS_1123_LABEL.fullmatch(n), n


# --- finding 10: Markdown and CSV hold names as text ---------------------------------------------------

@pytest.mark.parametrize("name", ["<script>alert(1)</script>", "a | b", "**x**", "# h", "[l](javascript:x)"])
def test_markdown_names_are_text_not_markup_or_html(tmp_path, fleet, name):
    from fuzz import invoke_cli
    from markdown_it import MarkdownIt

    from planner.render.markdown import fleet_markdown

    outcome = invoke_cli(["solve", str(scenario_named(tmp_path, name)), "--format", "markdown", "--time-limit", "8"])
    assert outcome.code == 0, outcome.stderr[-2000:]
    for text in (outcome.stdout, fleet_markdown(name, renamed(fleet, name))):
        rendered = MarkdownIt("commonmark").enable("table").render(text)
        assert "<script>" not in rendered and "<strong>x" not in rendered and "<h1>" not in rendered
        assert "<a " not in rendered and html.escape(name, quote=False) in rendered, rendered[:3000]


def test_a_description_cannot_close_the_reports_code_fence(tmp_path):
    from fuzz import invoke_cli
    from markdown_it import MarkdownIt

    scenario = tmp_path / "fenced.yaml"
    text = (REPO / "scenarios" / "8b-budget.yaml").read_text()
    scenario.write_text(re.sub(r"(?m)^description: .*$", "description: |\n  closes the fence:\n  ```\n  <script>x</script>\n"
                               "  # after", text, count=1))
    report = tmp_path / "report.md"
    outcome = invoke_cli(["report", str(scenario), "-o", str(report), "--quiet", "--time-limit", "8"])
    assert outcome.code == 0, outcome.stderr[-2000:]
    rendered = MarkdownIt("commonmark").enable("table").render(report.read_text())
    assert "<script>" not in rendered and "<h1>after" not in rendered


@pytest.mark.parametrize("name", ["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2+3", "@SUM(A1)"])
def test_csv_names_never_start_a_formula(fleet, name):
    import csv

    from planner.render.records import fleet_rows, rows_csv

    cells = [cell for row in csv.reader(io.StringIO(rows_csv(fleet_rows(renamed(fleet, name))))) for cell in row]
    assert "'" + name in cells
    assert not any(cell.startswith(("=", "+", "@")) for cell in cells)


def test_csv_cells_and_chart_labels_hold_no_control_characters():
    # found by bench/fuzz.py's text surface: an ESC in a name reached the terminal a CSV was printed on
    from planner.render.charts import MemoryBar, memory_chart
    from planner.render.records import rows_csv

    assert rows_csv([{"name": "a\x1b[31mb\nc", "n": -1}]) == "name,n\r\na\\x1b[31mb\\nc,-1\r\n"
    svg = memory_chart([MemoryBar("x\ny\r", 1, 1, 1, 1)])
    assert "x\\ny\\r" in svg


# --- finding 3 (simulator bounds) and 8 (no wrong figure printed as a result): simulate and perf ----------------

CHAT = str(Path(__file__).resolve().parents[1] / "scenarios" / "70b-chat.yaml")


@pytest.mark.parametrize("flags, names", [
    (["--duration", "inf"], ["--duration"]), (["--duration", "nan"], ["--duration"]),
    (["--duration", "1e9"], ["--duration / --rate", "20,000 requests"]), (["--rate", "inf"], ["--rate"]),
    (["--rate", "1e12"], ["--duration / --rate"]), (["--duration", "0.001"], ["no request arrives"])])
def test_a_simulation_is_bounded_and_never_prints_an_empty_run(flags, names):
    cli_error(["simulate", CHAT, *flags], *names)


def test_a_trace_is_read_as_a_bounded_regular_file(tmp_path):
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    cli_error(["simulate", CHAT, "--arrivals", fifo], "--arrivals", "FIFO")
    many = tmp_path / "many.jsonl"
    many.write_text('{"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 1}\n' * 20_001)
    cli_error(["simulate", CHAT, "--arrivals", many], "--arrivals", "20,000 requests")


def test_a_burst_is_served_at_the_rate_the_engine_finishes_it(tmp_path):
    """Every request sent at t = 0: the throughput is completed / the run's time (vllm bench serve's), not over a zero
    arrival window (was 3e9 req/s)."""
    burst = tmp_path / "burst.jsonl"
    burst.write_text('{"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 50}\n' * 20)
    from fuzz import invoke_cli

    outcome = invoke_cli(["simulate", CHAT, "--arrivals", str(burst), "--format", "json"])
    assert outcome.code == 0, outcome.stderr
    result = json.loads(outcome.stdout)[0]["result"]
    assert result["completed"] == 20
    assert result["requests_per_s"] == pytest.approx(20 / result["duration_s"])


def test_perf_times_only_what_could_run():
    cli_error(["perf", "llama-3.1-8b", "--gpu", "h100", "--prompt-tokens", "10000000"], "--prompt-tokens", "131,072")
    cli_error(["perf", "llama-3.1-8b", "--gpu", "l4", "--batch", "4096", "--prompt-tokens", "8000"], "--batch", "GB per GPU")


def test_perf_and_bench_print_names_from_files_as_text(tmp_path):
    """finding 6 for the commands that print lines (perf, bench, simulate, calibrate, check): a model folder named
    like markup prints as written, not as styles."""
    from fuzz import invoke_cli

    folder = tmp_path / "[bold]z[red]"
    folder.mkdir()
    source = Path(__file__).parent / "data" / "configs" / "llama-3.1-8b-instruct" / "config.json"
    (folder / "config.json").write_text(source.read_text())
    outcome = invoke_cli(["perf", str(folder / "config.json"), "--gpu", "h100"])
    assert outcome.code == 0, outcome.stderr
    assert outcome.stdout.startswith("[bold]z[red] on 1 x h100-sxm")


def test_a_deeply_nested_trace_line_is_one_line_refused(tmp_path):
    from planner.estimator.simulate import read_trace

    trace = tmp_path / "trace.jsonl"
    trace.write_text("[" * 100_000 + "\n")
    with pytest.raises(PlannerInputError, match=r"line 1: nested too deep"):
        read_trace(trace)


def test_a_trace_of_one_token_replies_reports_tpot_zero_as_vllm_does(tmp_path):
    """No request generates a second token: TPOT 0, as vllm bench serve reports it (np.mean(tpots or 0)), not NaN."""
    from planner.api import _replica
    from planner.catalog.load import load_catalog
    from planner.estimator.simulate import read_trace, simulate

    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.1, "prompt_tokens": 100, "output_tokens": 1}) + "\n"
                             for i in range(5)))
    replica = _replica("llama-3.1-8b", "h100-sxm", None, 1, 1, "auto", "auto", "vllm", 4096, load_catalog(), sized=True)
    result = simulate(replica.timer, replica.scheduler, read_trace(trace), warmup_s=0.0)
    assert result.completed == 5
    assert (result.tpot_s.mean, result.tpot_s.p50, result.tpot_s.p99) == (0.0, 0.0, 0.0)
    assert result.ttft_s.p50 > 0


def test_a_card_no_larger_than_the_drivers_reserve_shows_cuda_none():
    """`--gpu-memory 23e-8\\nTB` (230 kB, bench/fuzz.py --surface cli --seed 17) left vLLM's card below the driver's
    reserve: a negative total no batch-default tier matched (StopIteration). CUDA reports no memory of such a card;
    every engine says it does not fit."""
    for engine in ("vllm", "sglang", "trtllm"):
        with fuzz.deadline(10):
            outcome = fuzz.invoke_cli(["estimate", "qwen2.5-7b", "--engine", engine, "--gpu-memory", "23e-8\nTB"])
        assert outcome.code == 0 and "Traceback" not in outcome.stderr, outcome.stderr[-2000:]
        assert "does not fit" in outcome.stdout
