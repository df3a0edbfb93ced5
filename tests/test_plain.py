"""planner.render.plain writes what rich writes, byte for byte, to a pipe or a terminal, or refuses before writing
anything."""

import io
import random

import pytest
from rich.console import Console

from planner import api
from planner.estimator.engines import EngineSettings
from planner.render.plain import WIDTH, NotPlain, PlainConsole, PlainTable, print_plain, target
from planner.render.terminal import engine_table, estimate_table, fit_table, what_if_table

# where rich prints: a pipe, or a terminal of this environment (COLUMNS and LINES fix its size)
PIPE = None
TERMINALS = [
    {"TERM": "xterm-256color", "COLUMNS": "100", "LINES": "40"},
    {"TERM": "xterm", "COLUMNS": "150", "LINES": "50", "COLORTERM": "truecolor"},
    {"TERM": "xterm", "COLUMNS": "80", "LINES": "24", "NO_COLOR": "1"},
    {"TERM": "dumb", "COLUMNS": "90", "LINES": "30"},
    {"TERM": "screen", "COLUMNS": "60", "LINES": "20"},
]


class _Stream(io.StringIO):
    def __init__(self, tty, encoding="utf-8"):
        super().__init__()
        self.tty, self._encoding = tty, encoding

    @property
    def encoding(self):
        return self._encoding

    def isatty(self):
        return self.tty


@pytest.fixture(autouse=True)
def _no_forced_terminal(monkeypatch):
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS", "LINES", "TERM",
                 "COLORTERM"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=[PIPE, *TERMINALS], ids=lambda env: "pipe" if env is None else "-".join(env.values()))
def where(request, monkeypatch):
    """A new stream like the one rich would print to: a pipe, or a terminal of the parameter's environment."""
    for name, value in (request.param or {}).items():
        monkeypatch.setenv(name, value)
    return lambda: _Stream(tty=request.param is not None)


def by_rich(draw, stream):
    console = Console(file=stream, highlight=False)  # as planner.cli._console makes it
    if not console.is_terminal:
        console.width = WIDTH
    draw(console)
    return stream.getvalue()


def by_plain(draw, stream=None):
    console = PlainConsole(target(stream) if stream is not None else None)
    draw(console)
    return console.text()


def same_or_refused(draw, where=lambda: _Stream(tty=False)):
    """True: the plain console wrote rich's bytes; False: it refused (rich prints it)."""
    try:
        plain = by_plain(draw, where())
    except NotPlain:
        return False
    assert plain == by_rich(draw, where())
    return True


ESTIMATES = [
    dict(model="llama-3.1-8b"), dict(model="llama-3.1-8b", gpu="rtx-4090", context=131072, batch=8),
    dict(model="llama-3.1-70b", gpu="h100", tp=4, pp=2), dict(model="gemma-3-27b", gpu="h100", context=131072),
    dict(model="kimi-k2", gpu="h100", tp=8, pp=2, precision="int4"), dict(model="gemma-3n-e4b"),
    dict(model="qwen3-vl-8b", gpu="l4", precision="fp8"), dict(model="deepseek-v4-flash", gpu="b200", tp=8),
    dict(params="8e9", layers=32, kv_heads=8, head_dim=128, gpu_memory="24GB"), dict(model="llama-3.1-405b", gpu="l4", tp=2, pp=3),
]


@pytest.mark.parametrize("args", ESTIMATES, ids=str)
def test_an_estimate_table_is_the_bytes_rich_prints(args, catalog, where):
    est = api.estimate(**args, catalog=catalog)
    same_or_refused(lambda console: estimate_table(est, console), where)


@pytest.mark.parametrize("args", ESTIMATES, ids=str)
def test_an_estimate_table_to_a_pipe_is_written_plainly(args, catalog):
    est = api.estimate(**args, catalog=catalog)
    # DeepSeek-V4's notes make the table wider than the console: rich shrinks its columns
    assert same_or_refused(lambda console: estimate_table(est, console)) is not args.get("model", "").startswith("deepseek")


def test_an_estimate_table_in_a_wide_terminal_is_written_plainly(catalog, monkeypatch):
    for name, value in TERMINALS[1].items():
        monkeypatch.setenv(name, value)
    est = api.estimate("llama-3.1-70b", gpu="h100", tp=4, pp=2, catalog=catalog)
    assert same_or_refused(lambda console: estimate_table(est, console), lambda: _Stream(tty=True))
    assert "\x1b[1mllama-3.1-70b\x1b[0m" in by_plain(lambda console: estimate_table(est, console), _Stream(tty=True))


@pytest.mark.parametrize("engine,model,gpu,tp", [("vllm", "llama-3.1-8b", "l4", 1), ("sglang", "gpt-oss-120b", "h100", 1),
                                                 ("llamacpp", "llama-3.1-8b", "rtx-4090", 1),
                                                 ("vllm", "qwen3-next-80b-a3b", "h200", 2)])
def test_an_engine_table_is_the_bytes_rich_prints(engine, model, gpu, tp, catalog, where):
    both = api.engine_estimate(model, EngineSettings(engine), gpu=gpu, tp=tp, catalog=catalog)

    def draw(console):
        estimate_table(both.memory, console, show_fit=False)
        engine_table(both.engine, console)

    written = same_or_refused(draw, where)
    assert written or model == "qwen3-next-80b-a3b" or where().tty  # its layout notes make a wide table


def test_a_fit_table_is_the_bytes_rich_prints(catalog, where):
    fits = api.fit("llama-3.1-8b", EngineSettings("vllm"), gpu="h100", engines=("vllm", "sglang"), catalog=catalog)
    assert same_or_refused(lambda console: fit_table(fits, 8192, 1, console), where) or where().tty


LINES = [
    "[bold]llama[/bold] · weights bf16", "\n[bold red]No plan fits.[/bold red]", "a [1] b [2]", "[bold]open", "  lead and trail  ",
    "[yellow]warning:[/yellow] one: two", "", "a\n\nb", "x" * WIDTH, "word " * 30, ("ab " * 41) + "c" * 10,
    "[green]fits[/green] " + "y" * 115, "(61.23 GiB) " * 11, " " * 50 + "w " * 40, "z" + " " * 130, "→ ≥ × …",
]


@pytest.mark.parametrize("line", LINES)
def test_a_line_is_the_bytes_rich_prints(line, where):
    assert same_or_refused(lambda c: c.print(line), where) or len(line) > 60


def test_lines_broken_between_words_as_rich_breaks_them(where):
    rng = random.Random(14)
    for _ in range(200):
        words = [rng.choice(("abcdefgh", "[bold]x[/bold]", "[green]fits[/green] y", "[bold red]no[/bold red]"))
                 * rng.randint(1, 4) for _ in range(rng.randint(1, 40))]
        line = "".join(w + " " * rng.choice((1, 1, 2, 3)) for w in words)
        line = line if rng.random() < 0.5 else line.rstrip()
        assert same_or_refused(lambda c: c.print(line), where), line


def test_a_table_with_a_title_and_right_columns_is_the_bytes_rich_prints(where):
    def draw(console, title, cells):
        table = (PlainTable if isinstance(console, PlainConsole) else __import__("rich.table").table.Table)(
            title=title, show_header=True, header_style="bold")
        table.add_column("name")
        table.add_column("$/hour", justify="right")
        for row, style in cells:
            table.add_row(*row, style=style)
        console.print(table)

    for title, cells in (("t", [(("a", "1"), None)]), ("even title", [(("ab", "12,000.5"), "bold")]), ("odd", []),
                         ("a title as wide as it", [(("xxxxxxxxx", "yyyyyyyy"), None), (("z", "2"), "bold")])):
        assert same_or_refused(lambda c: draw(c, title, cells), where)


def test_a_what_if_table_is_the_bytes_rich_prints(where):
    from planner.plan.whatif import WhatIf

    rows = [WhatIf("as written", "OPTIMAL", 12.5, None), WhatIf("traffic x2", "OPTIMAL", 25.0, 12.5),
            WhatIf("context 32K", "INFEASIBLE", None, None)]
    assert same_or_refused(lambda console: what_if_table("8b", rows, console), where)


@pytest.mark.parametrize("text", [":smile:", "a :x:y", "[b]bold[/b]", "[x=2 and ]", "[/bold]", "[bold]a[/red]", "\\[bold]x",
                                  "[link=https://x]x[/link]", "tab\there", "bell\a", "wide 模型", "e\u0301",
                                  "x" * (WIDTH + 1), "ends\n"])
def test_what_rich_would_change_is_refused(text):
    with pytest.raises(NotPlain):
        PlainConsole().print(text)


@pytest.mark.parametrize("cells", [("x" * 60, "y" * 60), (" pad", "b"), ("two\nlines", "b"), ("", "")])
def test_a_table_rich_would_lay_out_otherwise_is_refused(cells):
    table = PlainTable(title="t", header_style="bold")
    table.add_column("")
    table.add_column("")
    with pytest.raises(NotPlain):
        table.add_row(*cells)
        PlainConsole().print(table)


def test_a_refused_drawing_writes_nothing():
    stream = io.StringIO()

    def draw(console):
        console.print("first line")
        console.print(":smile:")

    assert print_plain(draw, stream) is False and stream.getvalue() == ""
    assert print_plain(lambda c: c.print("first line"), stream) is True and stream.getvalue() == "first line\n"


@pytest.mark.parametrize("env,tty,encoding,terminal", [
    ({}, False, "utf-8", False), ({}, True, "utf-8", True), ({"FORCE_COLOR": "1"}, False, "utf-8", True),
    ({"FORCE_COLOR": ""}, True, "utf-8", False), ({"TTY_COMPATIBLE": "0"}, True, "utf-8", False),
    ({"TTY_COMPATIBLE": "1"}, False, "utf-8", True), ({"NO_COLOR": "1"}, False, "utf-8", False),
])
def test_the_target_is_a_terminal_where_rich_sees_one(env, tty, encoding, terminal, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stream = _Stream(tty, encoding)
    assert target(stream).styled is terminal is Console(file=stream, highlight=False).is_terminal


@pytest.mark.parametrize("env", TERMINALS, ids=lambda env: "-".join(env.values()))
def test_a_terminal_is_as_wide_as_rich_sees_it(env, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LINES")  # without it, the width is the terminal's own unless the terminal is dumb
    stream = _Stream(True)
    assert target(stream).width == Console(file=stream, highlight=False).width


def test_windows_notebooks_and_other_encodings_are_left_to_rich(monkeypatch):
    """rich draws other boxes for a legacy Windows console (a pipe on Windows counts as one), displays in a
    notebook, and draws ASCII boxes in an encoding other than UTF-8."""
    assert target(_Stream(False, "ascii")) is None
    monkeypatch.setitem(__import__("sys").modules, "IPython", object())
    assert target(_Stream(False)) is None
    monkeypatch.delitem(__import__("sys").modules, "IPython")
    monkeypatch.setattr("sys.platform", "win32")
    assert target(_Stream(False)) is None
