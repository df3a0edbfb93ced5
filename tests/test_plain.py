"""planner.render.plain writes what rich writes to a pipe, byte for byte, or refuses before writing anything."""

import io
import random

import pytest
from rich.console import Console

from planner import api
from planner.estimator.engines import EngineSettings
from planner.render.plain import WIDTH, NotPlain, PlainConsole, PlainTable, print_plain, rich_styles
from planner.render.terminal import engine_table, estimate_table, fit_table, what_if_table


@pytest.fixture(autouse=True)
def _no_forced_terminal(monkeypatch):
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def by_rich(draw):
    buffer = io.StringIO()
    draw(Console(file=buffer, width=WIDTH, highlight=False))
    return buffer.getvalue()


def by_plain(draw):
    console = PlainConsole()
    draw(console)
    return console.text()


def same_or_refused(draw):
    """True: the plain console wrote rich's bytes; False: it refused (rich prints it)."""
    try:
        plain = by_plain(draw)
    except NotPlain:
        return False
    assert plain == by_rich(draw)
    return True


ESTIMATES = [
    dict(model="llama-3.1-8b"), dict(model="llama-3.1-8b", gpu="rtx-4090", context=131072, batch=8),
    dict(model="llama-3.1-70b", gpu="h100", tp=4, pp=2), dict(model="gemma-3-27b", gpu="h100", context=131072),
    dict(model="kimi-k2", gpu="h100", tp=8, pp=2, precision="int4"), dict(model="gemma-3n-e4b"),
    dict(model="qwen3-vl-8b", gpu="l4", precision="fp8"), dict(model="deepseek-v4-flash", gpu="b200", tp=8),
    dict(params="8e9", layers=32, kv_heads=8, head_dim=128, gpu_memory="24GB"), dict(model="llama-3.1-405b", gpu="l4", tp=2, pp=3),
]


@pytest.mark.parametrize("args", ESTIMATES, ids=str)
def test_an_estimate_table_is_the_bytes_rich_prints(args, catalog):
    est = api.estimate(**args, catalog=catalog)
    # DeepSeek-V4's notes make the table wider than the console: rich shrinks its columns
    assert same_or_refused(lambda console: estimate_table(est, console)) is not args.get("model", "").startswith("deepseek")


@pytest.mark.parametrize("engine,model,gpu,tp", [("vllm", "llama-3.1-8b", "l4", 1), ("sglang", "gpt-oss-120b", "h100", 1),
                                                 ("llamacpp", "llama-3.1-8b", "rtx-4090", 1),
                                                 ("vllm", "qwen3-next-80b-a3b", "h200", 2)])
def test_an_engine_table_is_the_bytes_rich_prints(engine, model, gpu, tp, catalog):
    both = api.engine_estimate(model, EngineSettings(engine), gpu=gpu, tp=tp, catalog=catalog)

    def draw(console):
        estimate_table(both.memory, console, show_fit=False)
        engine_table(both.engine, console)

    assert same_or_refused(draw) is (model != "qwen3-next-80b-a3b")  # its layout notes make a wide table


def test_a_fit_table_is_the_bytes_rich_prints(catalog):
    fits = api.fit("llama-3.1-8b", EngineSettings("vllm"), gpu="h100", engines=("vllm", "sglang"), catalog=catalog)
    draw = lambda console: fit_table(fits, 8192, 1, console)  # noqa: E731
    assert by_plain(draw) == by_rich(draw)


LINES = [
    "[bold]llama[/bold] · weights bf16", "\n[bold red]No plan fits.[/bold red]", "a [1] b [2]", "[bold]open", "  lead and trail  ",
    "[yellow]warning:[/yellow] one: two", "", "a\n\nb", "x" * WIDTH, "word " * 30, ("ab " * 41) + "c" * 10,
    "[green]fits[/green] " + "y" * 115, "(61.23 GiB) " * 11, " " * 50 + "w " * 40, "z" + " " * 130, "→ ≥ × …",
]


@pytest.mark.parametrize("line", LINES)
def test_a_line_is_the_bytes_rich_prints(line):
    assert by_plain(lambda c: c.print(line)) == by_rich(lambda c: c.print(line))


def test_lines_broken_between_words_as_rich_breaks_them():
    rng = random.Random(14)
    for _ in range(300):
        words = [rng.choice("abcdefgh") * rng.randint(1, 30) for _ in range(rng.randint(1, 40))]
        line = "".join(w + " " * rng.choice((1, 1, 2, 3)) for w in words)
        line = line if rng.random() < 0.5 else line.rstrip()
        assert by_plain(lambda c: c.print(line)) == by_rich(lambda c: c.print(line)), line


def test_a_table_with_a_title_and_right_columns_is_the_bytes_rich_prints():
    def draw(console, title, cells):
        table = (PlainTable if isinstance(console, PlainConsole) else __import__("rich.table").table.Table)(
            title=title, show_header=True, header_style="bold")
        table.add_column("name")
        table.add_column("$/hour", justify="right")
        for row in cells:
            table.add_row(*row, style="bold")
        console.print(table)

    for title, cells in (("t", [("a", "1")]), ("even title", [("ab", "12,000.5")]), ("odd", []),
                         ("a title as wide as it", [("xxxxxxxxx", "yyyyyyyy")])):
        assert by_plain(lambda c: draw(c, title, cells)) == by_rich(lambda c: draw(c, title, cells))


def test_a_what_if_table_is_the_bytes_rich_prints():
    from planner.plan.whatif import WhatIf

    rows = [WhatIf("as written", "OPTIMAL", 12.5, None), WhatIf("traffic x2", "OPTIMAL", 25.0, 12.5),
            WhatIf("context 32K", "INFEASIBLE", None, None)]
    draw = lambda console: what_if_table("8b", rows, console)  # noqa: E731
    assert by_plain(draw) == by_rich(draw)


@pytest.mark.parametrize("text", [":smile:", "a :x:y", "[b]bold[/b]", "[x=2 and ]", "[/bold]", "[bold]a[/red]", "\\[bold]x",
                                  "[link=https://x]x[/link]", "tab\there", "bell\a", "wide 模型", "e\u0301",
                                  "x" * (WIDTH + 1), "ends\n"])
def test_what_rich_would_change_is_refused(text):
    with pytest.raises(NotPlain):
        PlainConsole().print(text)


@pytest.mark.parametrize("cells", [("x" * 60, "y" * 60), (" pad", "b"), ("two\nlines", "b"), ("", "")])
def test_a_table_rich_would_lay_out_otherwise_is_refused(cells):
    table = PlainTable(title="t")
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


class _Stream(io.StringIO):
    def __init__(self, tty, encoding="utf-8"):
        super().__init__()
        self.tty, self._encoding = tty, encoding

    @property
    def encoding(self):
        return self._encoding

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("env,tty,encoding,styled", [
    ({}, False, "utf-8", False), ({}, True, "utf-8", True), ({"FORCE_COLOR": "1"}, False, "utf-8", True),
    ({"FORCE_COLOR": ""}, True, "utf-8", False), ({"TTY_COMPATIBLE": "0"}, True, "utf-8", False),
    ({"TTY_COMPATIBLE": "1"}, False, "utf-8", True), ({}, False, "ascii", True), ({"NO_COLOR": "1"}, False, "utf-8", False),
])
def test_plain_where_rich_writes_no_styles(env, tty, encoding, styled, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stream = _Stream(tty, encoding)
    assert rich_styles(stream) is styled
    console = Console(file=stream, highlight=False)
    assert (console.is_terminal or console.encoding != "utf-8") is styled


def test_windows_is_left_to_rich(monkeypatch):
    """rich draws other boxes for a legacy Windows console, and a pipe on Windows counts as one."""
    monkeypatch.setattr("sys.platform", "win32")
    assert rich_styles(_Stream(False)) is True
