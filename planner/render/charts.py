"""Charts for the report, drawn with matplotlib at build time and inlined as SVG (the page works offline)."""

from __future__ import annotations

import io
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display: render to files only
import matplotlib.pyplot as plt  # noqa: E402

from planner.render.plain import controls_escaped  # noqa: E402 - a label is one line, as written

# keep SVG text as text (searchable, selectable); labels are names from files, drawn as written: never parsed as
# mathtext ($\frac{$ would raise, $x^2$ would be typeset)
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "text.parse_math": False})

SEGMENT_COLOURS = {"weights": "#4C72B0", "KV cache": "#DD8452", "overhead": "#8172B2", "headroom": "#CCCCCC"}


@dataclass(frozen=True)
class MemoryBar:
    label: str
    weights_gb: float
    kv_gb: float
    overhead_gb: float
    headroom_gb: float


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prologue: the SVG sits inside HTML


def memory_chart(bars: list[MemoryBar]) -> str:
    """Stacked per-GPU memory of each plan's fullest GPU: weights, KV, overhead, headroom."""
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(bars) + 1.2))
    labels = [controls_escaped(b.label) for b in bars]
    left = [0.0] * len(bars)
    for name, values in (("weights", [b.weights_gb for b in bars]), ("KV cache", [b.kv_gb for b in bars]),
                         ("overhead", [b.overhead_gb for b in bars]), ("headroom", [b.headroom_gb for b in bars])):
        ax.barh(labels, values, left=left, color=SEGMENT_COLOURS[name], label=name)
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("GB per GPU (decimal), fullest GPU of the replica")
    ax.legend(ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(bars) < 4 else -0.12), frameon=False)
    return _svg(fig)


def cost_curve(points: list[tuple[int, float | None]], xlabel: str, title: str) -> str:
    """$/hour of the cheapest plan as one workload dimension grows (gaps where nothing fits)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    fits = [(x, y) for x, y in points if y is not None]
    if fits:
        ax.plot([x for x, _ in fits], [y for _, y in fits], marker="o", color="#4C72B0")
        for x, y in fits:
            ax.annotate(f"${y:,.2f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    misses = [x for x, y in points if y is None]
    if misses:
        ax.scatter(misses, [0] * len(misses), marker="x", color="#C44E52", label="nothing fits")
        ax.legend(frameon=False)
    ax.set_xscale("log", base=2)
    ax.set_xticks([x for x, _ in points], [f"{x:,}" for x, _ in points], rotation=45)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("$ / hour")
    ax.set_title(controls_escaped(title))
    return _svg(fig)


def price_chart(rows: list[tuple[str, float]], title: str) -> str:
    """$/GPU-hour of every offer for one GPU type."""
    fig, ax = plt.subplots(figsize=(7.5, 0.3 * len(rows) + 1.0))
    ax.barh([controls_escaped(label) for label, _ in rows], [price for _, price in rows], color="#55A868")
    ax.invert_yaxis()
    ax.set_xlabel("$ per GPU-hour")
    ax.set_title(controls_escaped(title))
    return _svg(fig)
