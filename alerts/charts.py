"""The digest chart: daily spend stacked by category, idle GPU dollars highlighted.

Rendered with matplotlib's object API on an Agg canvas (no pyplot global state, no display), at a
fixed 1200x600 pixels so Slack previews look the same every day. Floats appear only here, for
drawing; every figure printed in text comes from the Decimals in `DigestData`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from alerts.digest import DigestData

__all__ = [
    "CHART_DPI",
    "CHART_SIZE_PX",
    "finish_daily_chart",
    "new_figure",
    "provisional_mark",
    "render_chart",
    "stack_bars",
]

CHART_SIZE_PX = (1200, 600)
CHART_DPI = 100
BAR_WIDTH = 0.8
FAINT_ALPHA = 0.45  # a provisional day's bars: rows are still arriving
_COLORS = ["#4C72B0", "#55A868", "#C44E52", "#8172B2", "#CCB974", "#64B5CD", "#8C8C8C", "#DD8452", "#937860"]


def _bottom_first(categories: list[str]) -> list[str]:
    """GPU spend at the bottom of each stack, so the idle-GPU overlay sits inside it."""
    for pref in ("compute.gpu", "compute"):
        if pref in categories:
            return [pref] + [c for c in categories if c != pref]
    return categories


def provisional_mark(d: DigestData, day: date) -> str:
    """The note above a provisional bar: how much of the latest day is billed, when known (its bar
    is short because rows are still arriving, not because spend dropped)."""
    if day not in d.provisional_days:
        return ""
    if day == d.day and d.provisional and d.billed_hours is not None:
        return f"provisional\n{d.billed_hours}/{d.day_hours} h billed"
    return "provisional"


def new_figure() -> Figure:
    """A blank chart on an Agg canvas. matplotlib is imported here, at the first chart drawn: it
    costs half a second of start-up to every command and daemon job that draws none."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(CHART_SIZE_PX[0] / CHART_DPI, CHART_SIZE_PX[1] / CHART_DPI), dpi=CHART_DPI)
    FigureCanvasAgg(fig)
    return fig


def stack_bars(
    ax: Any, x: Sequence[int], series: Sequence[tuple[str, Sequence[float], str]], faint: Sequence[bool]
) -> list[float]:
    """Stacked bars, one `(label, values, color)` series on another, the `faint` days' bars drawn
    lighter; returns the stacks' tops.

    Each series is one collection of rectangles, not `ax.bar`'s artist per bar: a digest draws two
    charts of 14 days by up to nine series, and the artists were a third of each chart's time
    (0.22 s a chart, 0.145 s as collections, 2026-12-07). Same rectangles, colours and margins."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgba

    half = BAR_WIDTH / 2
    bottom = [0.0] * len(x)
    for label, values, color in series:
        solid, light = to_rgba(color), to_rgba(color, FAINT_ALPHA)
        boxes = [
            [(xi - half, b), (xi - half, b + v), (xi + half, b + v), (xi + half, b)]
            for xi, b, v in zip(x, bottom, values, strict=True)
        ]
        colors = [light if f else solid for f in faint]
        ax.add_collection(
            PolyCollection(boxes, facecolors=colors, edgecolors="none", linewidths=0, label=label)
        )
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    return bottom


def render_chart(d: DigestData, path: str | Path) -> Path:
    """Write the PNG to `path` and return it."""
    days = sorted(d.daily_by_category)
    totals: dict[str, float] = {}
    for day in days:
        for cat, v in d.daily_by_category[day].items():
            totals[cat] = totals.get(cat, 0.0) + float(v)
    cats = _bottom_first(sorted(totals, key=lambda c: -totals[c]))
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    x = list(range(len(days)))
    series = [
        (cat, [float(d.daily_by_category[day].get(cat, 0)) for day in days], _COLORS[i % len(_COLORS)])
        for i, cat in enumerate(cats)
    ]
    bottom = stack_bars(ax, x, series, [day in d.provisional_days for day in days])
    idle = [float(d.idle_gpu_by_day.get(day, 0)) for day in days]
    # no $0 outline where the idle dollars are unknown
    hatched = [i for i, day in enumerate(days) if d.idle_unread.get(day) not in ("all", "none")]
    if any(idle):
        ax.bar(
            [x[i] for i in hatched],
            [idle[i] for i in hatched],
            width=BAR_WIDTH,
            facecolor="none",
            edgecolor="#D62728",
            hatch="///",
            linewidth=1.5,
            label="idle GPU $",
        )
    for xi, day in zip(x, days, strict=True):
        # a day whose GPUs' utilization was not read (or never reported) has no idle hatch, or too
        # small a one: said so at its foot, as the table says "not read" / "unknown" / "≥ $X"
        if unread := d.idle_unread.get(day):
            ax.annotate(
                {"all": "idle\nnot read", "none": "idle\nunknown"}.get(unread, "idle ≥"),
                (xi, idle[xi]),
                ha="center",
                va="bottom",
                fontsize=6,
                color="white",  # on the GPU bar it sits in
                fontweight="bold",
                xytext=(0, 2),
                textcoords="offset points",
            )
        if mark := provisional_mark(d, day):
            ax.annotate(
                mark,
                (xi, bottom[xi]),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 3),
                textcoords="offset points",
            )
    ax.set_ylim(0, max([*bottom, *idle, 1.0]) * 1.2)  # headroom for the legend and the marks
    title = f"Daily spend by category to {d.day.isoformat()} ({d.timezone})"
    return finish_daily_chart(fig, ax, x, days, d.currency, title, path)


def finish_daily_chart(
    fig: Figure, ax: Any, x: Sequence[int], days: Sequence[date], currency: str, title: str, path: str | Path
) -> Path:
    """The style every daily digest chart shares (day ticks, dollar axis, grid, legend, margins),
    then the PNG written to `path`."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xticks(x, [f"{day:%m-%d}" for day in days], rotation=45, ha="right", fontsize=8)
    cents = ax.get_ylim()[1] < 10  # small spend: whole-dollar ticks would read $0, $0, $1, $1
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"${v:,.2f}" if cents else f"${v:,.0f}"))
    ax.set_ylabel(f"Daily spend ({currency})")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8, ncols=2)
    else:  # nothing drawn: matplotlib would warn on stderr for an empty legend; the chart says it
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no spend in these days", transform=ax.transAxes, ha="center", va="center")
    fig.subplots_adjust(left=0.08, right=0.98, top=0.92, bottom=0.15)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=CHART_DPI)
    return out
