"""Lines and tables as rich prints them, written without importing rich.

rich.console and rich.table are about 25 ms of `planner estimate`'s 0.17 s (python -X importtime). What rich
prints of a line of markup or of a table with the default box (HEAVY_HEAD) is text this module writes byte for
byte: the markup's style tags as escape codes on a terminal (dropped anywhere else), a line longer than the
console broken between words, a table's columns as wide as their widest cell, headers and cells padded one
space each side and justified left or right, a title centred over the table. Anything rich would do more with
raises NotPlain before a byte is written, and rich prints it instead: a word or a table wider than the console
(rich folds, shrinks), an emoji code, a tag or an escape this module does not know, a tab or another control
character, a character whose width on the terminal is not one cell; and every stream on Windows, in a notebook
or in an encoding other than UTF-8.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Callable, TextIO

WIDTH = 120  # the width planner gives rich when the output is not a terminal (cli._console)
# rich.markup's tag pattern (RE_TAGS): backslashes, then [style] or [/style]
_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")
_WORD = re.compile(r"\s*\S+\s*")  # rich._wrap's word: the spaces before it and after it
_EMOJI = re.compile(r":\S*?:")  # rich.emoji's code pattern is narrower: whatever it could replace is refused
# The styles planner's lines and tables write and rich's codes for them (rich.style.Style._make_ansi_codes:
# attributes first, in this order, then the color; a standard color is the same code in every color system)
_ATTRIBUTES = {"bold": "1", "italic": "3"}
_COLORS = {"red": "31", "green": "32", "yellow": "33"}
_STYLES = frozenset({"bold", "italic", "red", "green", "yellow", "bold red"})
# characters besides printable ASCII planner's lines print, each one cell wide in rich.cells.cell_len
_ONE_CELL = frozenset("·×→≥≤…—–")
Runs = list[tuple[str, tuple[str, ...]]]  # text in pieces, each with the style tags open over it


def controls_escaped(value: object) -> str:
    """Text with every character that does not print (ESC starts a terminal's escape codes, a newline ends a line
    or a table row) shown as its escape: \\x1b, \\n."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(value))


def as_text(value: object) -> str:
    """Text from a file (a name, a path, a message quoting one) as it must print: literally. Control characters
    shown as their escapes, and markup escaped as rich.markup.escape escapes it ([bold] prints as [bold], [/x] no
    longer closes a tag). Backslashes at the end print as they are whatever follows: doubled before an empty tag
    (rich prints one of each two before a tag), where rich.markup.escape's extra one would print before text."""
    text = _ESCAPE.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", controls_escaped(value))
    trailing = len(text) - len(text.rstrip("\\"))
    return text + "\\" * trailing + "[bold][/bold]" if trailing else text


_ESCAPE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")  # rich.markup.escape's pattern


class NotPlain(Exception):
    """rich does more with this than write it as it is: let rich print it."""


class Target:
    """Where rich would print: the console's width, and whether it writes style codes, colors among them."""

    def __init__(self, width: int, styled: bool = False, colored: bool = False) -> None:
        self.width, self.styled, self.colored = width, styled, colored


def target(stream: TextIO) -> Target | None:
    """How rich.console.Console(highlight=False) prints to the stream (rich 15: Console.is_terminal, size and
    _detect_color_system, with planner's 120 columns off a terminal); None where this module leaves it to rich."""
    if sys.platform == "win32" or "IPython" in sys.modules:
        return None  # a legacy Windows console draws other boxes (a pipe counts as one); a notebook displays
    if not (getattr(stream, "encoding", None) or "utf-8").lower().startswith("utf"):
        return None  # rich draws ASCII boxes
    if not _is_terminal(stream):
        return Target(WIDTH)
    dumb = os.environ.get("TERM", "").lower() in ("dumb", "unknown")  # rich writes no codes there
    return Target(_terminal_width(dumb), styled=not dumb, colored=os.environ.get("NO_COLOR", "") == "")


def _is_terminal(stream: TextIO) -> bool:
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    try:
        return stream.isatty()
    except ValueError:  # a closed stream: rich says no terminal
        return False


def _terminal_width(dumb: bool) -> int:
    """rich.console.Console.size's width: $COLUMNS, else the first of stdin, stdout, stderr that is a terminal."""
    columns, lines = os.environ.get("COLUMNS", ""), os.environ.get("LINES", "")
    if columns.isdigit() and lines.isdigit():
        return int(columns)
    if dumb:
        return 80
    if columns.isdigit():
        return int(columns)
    for descriptor in (0, 1, 2):
        try:
            return os.get_terminal_size(descriptor).columns or 80
        except (AttributeError, ValueError, OSError):
            continue
    return 80


def _runs(markup: str, parse_markup: bool = True) -> Runs:
    """The text rich prints for a string, in runs of one style each; NotPlain for anything else rich would
    change."""
    if _EMOJI.search(markup) or any(ord(c) < 32 and c != "\n" or c == "\x7f" for c in markup):
        raise NotPlain
    if not parse_markup:
        return [(markup, ())]
    runs: Runs = []
    open_tags: list[str] = []
    start = 0
    for match in _TAG.finditer(markup):
        backslashes, tag = match.group(2), match.group(3)
        if backslashes:
            raise NotPlain
        runs.append((markup[start:match.start()], tuple(open_tags)))
        start = match.end()
        if tag.startswith("/"):
            if not open_tags or open_tags.pop() != tag[1:]:
                raise NotPlain  # rich refuses a closing tag that closes nothing, or closes another
        elif tag in _STYLES:
            open_tags.append(tag)
        else:
            raise NotPlain
    runs.append((markup[start:], tuple(open_tags)))
    return [(text, tags) for text, tags in runs if text]


def _styled(runs: Runs, to: Target) -> str:
    """The runs as rich writes them: each styled one between its codes and a reset."""
    out = []
    for text, tags in runs:
        words = [word for tag in tags for word in tag.split()] if to.styled else []
        codes = [code for name, code in _ATTRIBUTES.items() if name in words]
        colors = [_COLORS[word] for word in words if word in _COLORS]
        codes += colors[-1:] if to.colored else []
        out.append(f"\x1b[{';'.join(codes)}m{text}\x1b[0m" if codes else text)
    return "".join(out)


def _width(text: str) -> int:
    if not text.isascii() and any(not c.isascii() and c not in _ONE_CELL for c in text):
        raise NotPlain
    return len(text)


def _pieces(line: str, width: int) -> list[tuple[int, int]]:
    """Where rich.text.Text.wrap breaks a line to fit `width` cells (rich._wrap.divide_line): before a word that
    does not fit what is left of the line (a word takes the spaces after it along), whitespace past the width
    dropped from the end of each piece. A word longer than a line is rich's to fold."""
    breaks, used = [], 0
    for word in _WORD.finditer(line):
        start, length = word.start(), len(word.group().rstrip())
        if width - used >= length:
            used += len(word.group())
        elif length > width:
            raise NotPlain
        elif used and start:
            breaks.append(start)
            used = len(word.group())
    pieces = []
    for start, end in zip([0, *breaks], [*breaks, len(line)]):
        if end - start > width:
            end = start + max(len(line[start:end].rstrip()), width)
        pieces.append((start, end))
    return pieces


def _cut(runs: Runs, start: int, end: int) -> Runs:
    """The runs' characters from start to end."""
    out, at = [], 0
    for text, tags in runs:
        first, last = max(start, at), min(end, at + len(text))
        if first < last:
            out.append((text[first - at:last - at], tags))
        at += len(text)
    return out


def _cell(text: str) -> str:
    """A header or cell as rich lays it out unchanged: one line without markup, no space at either end, not
    empty unless another cell of its column is not."""
    if _TAG.search(text) or "\n" in text or text != text.strip():
        raise NotPlain
    return "".join(piece for piece, _ in _runs(text))


class PlainTable:
    """The part of rich.table.Table planner's tables use: columns (header, justify), rows (a style), a title."""

    def __init__(self, title: str | None = None, show_header: bool = True, header_style: str = "table.header") -> None:
        if not show_header or header_style != "bold":  # planner's tables head their columns in bold
            raise NotPlain
        self.title = title
        self.header_style = (header_style,)
        self.headers: list[str] = []
        self.right: list[bool] = []
        self.rows: list[tuple[tuple[str, ...], tuple[str, ...]]] = []  # cells, style

    def add_column(self, header: str = "", justify: str = "left", overflow: str = "ellipsis") -> None:
        if justify not in ("left", "right"):
            raise NotPlain
        self.headers.append(_cell(header))
        self.right.append(justify == "right")

    def add_row(self, *cells: str, style: str | None = None) -> None:
        if len(cells) != len(self.headers) or not all(isinstance(c, str) for c in cells):
            raise NotPlain
        if style is not None and style not in _STYLES:
            raise NotPlain
        self.rows.append((tuple(_cell(c) for c in cells), (style,) if style else ()))

    def lines(self, to: Target) -> list[str]:
        widths = [max(_width(c) for c in column) for column in zip(self.headers, *(row for row, _ in self.rows))]
        if not widths or not all(widths):
            raise NotPlain
        total = sum(widths) + 3 * len(widths) + 1
        if total > to.width:
            raise NotPlain  # rich would shrink the columns to fit
        lines = []
        if self.title is not None:
            title = "".join(text for text, _ in _runs(self.title))
            if _TAG.search(self.title) or "\n" in title or _width(title) > total:
                raise NotPlain  # rich would style its own markup, or wrap it over the table's width
            left = (total - len(title)) // 2
            lines.append(_styled([(" " * left + title + " " * (total - len(title) - left), ("italic",))], to))
        rule = ["━" * (w + 2) for w in widths]
        lines.append("┏" + "┳".join(rule) + "┓")
        lines.append(self._row("┃", self.headers, self.header_style, widths, to))
        lines.append("┡" + "╇".join(rule) + "┩")
        lines.extend(self._row("│", row, style, widths, to) for row, style in self.rows)
        lines.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
        return lines

    def _row(self, edge: str, cells: tuple[str, ...] | list[str], style: tuple[str, ...], widths: list[int],
             to: Target) -> str:
        """A row as rich writes it: the cell's style over its left padding, its text and its right padding,
        each written apart; the box's lines unstyled."""
        padded = (_styled([(" ", style), (f"{c:>{w}}" if right else f"{c:<{w}}", style), (" ", style)], to)
                  for c, w, right in zip(cells, widths, self.right))
        return edge + edge.join(padded) + edge


class PlainConsole:
    """The part of rich.console.Console planner's tables use (print), writing what rich writes to the target."""

    def __init__(self, to: Target | None = None) -> None:
        self.to = to or Target(WIDTH)
        self.width = self.to.width
        self.lines: list[str] = []

    def print(self, item: str | PlainTable, highlight: bool | None = None, markup: bool = True) -> None:
        if isinstance(item, PlainTable):
            self.lines.extend(item.lines(self.to))
            return
        if not isinstance(item, str):
            raise NotPlain
        runs = _runs(item, markup)
        text = "".join(piece for piece, _ in runs)
        if text.endswith("\n"):
            raise NotPlain
        start = 0
        for line in text.split("\n"):
            _width(line)
            self.lines.extend(_styled(_cut(runs, start + a, start + b), self.to) for a, b in _pieces(line, self.width))
            start += len(line) + 1

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def print_plain(draw: Callable[[PlainConsole], None], stream: TextIO) -> bool:
    """Draw on a plain console and write it to the stream as rich would; False, with nothing written, where
    rich has to print it."""
    to = target(stream)
    if to is None:
        return False
    console = PlainConsole(to)
    try:
        draw(console)
    except NotPlain:
        return False
    stream.write(console.text())
    stream.flush()
    return True
