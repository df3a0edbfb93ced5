"""Lines and tables as rich prints them where it prints no styles (a pipe or a file), without importing rich.

rich.console and rich.table are about 25 ms of `planner estimate`'s 0.17 s (python -X importtime). Where rich
would write no escape codes, what it prints of a line of markup or of a table with the default box (HEAVY_HEAD)
is plain text this module writes byte for byte: the markup's style tags dropped, a line longer than the
console broken between words, a table's columns as wide as their widest cell, headers and cells padded one
space each side and justified left or right, a title centred over the table. Anything rich would do more with
raises NotPlain before a byte is written, and rich prints it instead: a word or a table wider than the console
(rich folds, shrinks), an emoji code, a tag or an escape this module does not know, a tab or another control
character, a character whose width on the terminal is not one cell.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, TextIO

WIDTH = 120  # the width planner gives rich when the output is not a terminal (cli._console)
# rich.markup's tag pattern (RE_TAGS): backslashes, then [style] or [/style]
_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")
_WORD = re.compile(r"\s*\S+\s*")  # rich._wrap's word: the spaces before it and after it
_EMOJI = re.compile(r":\S*?:")  # rich.emoji's code pattern is narrower: whatever it could replace is refused
_STYLES = frozenset({"bold", "italic", "red", "green", "yellow", "bold red"})  # the tags planner's tables write
# characters besides printable ASCII planner's lines print, each one cell wide in rich.cells.cell_len
_ONE_CELL = frozenset("·×→≥≤…—–")


class NotPlain(Exception):
    """rich does more with this than write it as it is: let rich print it."""


def rich_styles(stream: TextIO) -> bool:
    """Whether rich would write escape codes or other boxes to the stream (rich.console.Console.is_terminal, its
    encoding check, Windows' legacy console boxes), or print through a notebook."""
    if sys.platform == "win32" or "IPython" in sys.modules:
        return True
    if not (getattr(stream, "encoding", None) or "utf-8").lower().startswith("utf"):
        return True
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


def _text(markup: str, parse_markup: bool = True) -> str:
    """The text rich prints for a string: style tags dropped; NotPlain for anything else rich would change."""
    if _EMOJI.search(markup) or any(ord(c) < 32 and c != "\n" or c == "\x7f" for c in markup):
        raise NotPlain
    if not parse_markup:
        return markup
    open_tags: list[str] = []
    for match in _TAG.finditer(markup):
        backslashes, tag = match.group(2), match.group(3)
        if backslashes:
            raise NotPlain
        if tag.startswith("/"):
            if not open_tags or open_tags.pop() != tag[1:]:
                raise NotPlain  # rich refuses a closing tag that closes nothing, or closes another
        elif tag in _STYLES:
            open_tags.append(tag)
        else:
            raise NotPlain
    return _TAG.sub("", markup)


def _width(text: str) -> int:
    if not text.isascii() and any(not c.isascii() and c not in _ONE_CELL for c in text):
        raise NotPlain
    return len(text)


def _cell(text: str) -> str:
    """A header or cell as rich lays it out unchanged: one line, no space at either end, not empty unless
    another cell of its column is not."""
    text = _text(text)
    if "\n" in text or text != text.strip():
        raise NotPlain
    return text


def _wrapped(line: str, width: int) -> list[str]:
    """A line broken into lines of at most `width` cells as rich.text.Text.wrap breaks it (rich._wrap.divide_line):
    before a word that does not fit what is left of the line (a word takes the spaces after it along), whitespace
    past the width dropped from the end of each line. A word longer than a line is rich's to fold."""
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
    lines = []
    for piece in (line[a:b] for a, b in zip([0, *breaks], [*breaks, len(line)])):
        if len(piece) > width:
            kept = piece.rstrip()
            piece = kept + piece[len(kept):width]
        lines.append(piece)
    return lines


class PlainTable:
    """The part of rich.table.Table planner's tables use: columns (header, justify), rows, a title."""

    def __init__(self, title: str | None = None, show_header: bool = True, header_style: str | None = None) -> None:
        if not show_header:
            raise NotPlain
        self.title = title
        self.headers: list[str] = []
        self.right: list[bool] = []
        self.rows: list[tuple[str, ...]] = []

    def add_column(self, header: str = "", justify: str = "left", overflow: str = "ellipsis") -> None:
        if justify not in ("left", "right"):
            raise NotPlain
        self.headers.append(_cell(header))
        self.right.append(justify == "right")

    def add_row(self, *cells: str, style: str | None = None) -> None:
        if len(cells) != len(self.headers) or not all(isinstance(c, str) for c in cells):
            raise NotPlain
        self.rows.append(tuple(_cell(c) for c in cells))

    def lines(self, width: int) -> list[str]:
        widths = [max(_width(c) for c in column) for column in zip(self.headers, *self.rows)]
        if not widths or not all(widths):
            raise NotPlain
        total = sum(widths) + 3 * len(widths) + 1
        if total > width:
            raise NotPlain  # rich would shrink the columns to fit
        lines = []
        if self.title is not None:
            title = _text(self.title)
            if "\n" in title or _width(title) > total:
                raise NotPlain  # rich would wrap it over the table's width
            left = (total - len(title)) // 2
            lines.append(" " * left + title + " " * (total - len(title) - left))
        rule = ["━" * (w + 2) for w in widths]
        lines.append("┏" + "┳".join(rule) + "┓")
        lines.append(self._row("┃", self.headers, widths))
        lines.append("┡" + "╇".join(rule) + "┩")
        lines.extend(self._row("│", row, widths) for row in self.rows)
        lines.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
        return lines

    def _row(self, edge: str, cells: Any, widths: list[int]) -> str:
        padded = (f" {c:>{w}} " if right else f" {c:<{w}} " for c, w, right in zip(cells, widths, self.right))
        return edge + edge.join(padded) + edge


class PlainConsole:
    """The part of rich.console.Console planner's tables use (print), writing what rich writes to a pipe."""

    width = WIDTH

    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, item: str | PlainTable, highlight: bool | None = None, markup: bool = True) -> None:
        if isinstance(item, PlainTable):
            self.lines.extend(item.lines(self.width))
            return
        if not isinstance(item, str):
            raise NotPlain
        text = _text(item, markup)
        if text.endswith("\n"):
            raise NotPlain
        for line in text.split("\n"):
            _width(line)
            self.lines.extend(_wrapped(line, self.width))

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def print_plain(draw: Callable[[PlainConsole], None], stream: TextIO) -> bool:
    """Draw into a plain console and write it to the stream as rich would; False, with nothing written, where
    rich has to print it."""
    if rich_styles(stream):
        return False
    console = PlainConsole()
    try:
        draw(console)
    except NotPlain:
        return False
    stream.write(console.text())
    stream.flush()
    return True
