"""Tiny inline-SVG charts for the self-contained report page (no JS, no network).

Only what the page needs: a time-series line chart and a 100 % stacked bar chart. Values
are plain Python numbers; every label is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape

WIDTH, HEIGHT = 620, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 44, 28, 44
PRIORITY_COLOURS = ("#c0392b", "#e67e22", "#2471a3", "#229954", "#7d3c98", "#5d6d7e")
OUTCOME_COLOURS = {"ack": "#2e7d32", "retry": "#f9a825", "dead": "#b71c1c", "drop": "#757575",
                   "settle_failed": "#6a1b9a"}

Series = dict[str, list[tuple[float, float]]]


def priority_colour(priority: int) -> str:
    return PRIORITY_COLOURS[priority % len(PRIORITY_COLOURS)]


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 x 10^k) up to at least ``high``."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    base = 10 ** math.floor(math.log10(raw))
    step = next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw)
    return [i * step for i in range(math.ceil(high / step - 1e-9) + 1)]


def _hour_label(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000.0, tz=UTC).strftime("%m-%d %H:00")


def line_chart(
    title: str,
    series: Series,
    colours: dict[str, str],
    fmt: Callable[[float], str],
) -> str:
    """Lines over UTC hours (x = epoch ms); one dot per point so a single hour still shows."""
    points = [p for pts in series.values() for p in pts]
    if not points:
        return _empty(title)
    x_lo, x_hi = min(p[0] for p in points), max(p[0] for p in points)
    ticks = nice_ticks(max(p[1] for p in points))
    y_hi = ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (plot_w / 2 if x_hi == x_lo else (x - x_lo) / (x_hi - x_lo) * plot_w)

    def sy(y: float) -> float:
        return TOP + plot_h - (y / y_hi * plot_h if y_hi else 0)

    parts = [_frame(title)]
    for tick in ticks:
        y = sy(tick)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e5e5e5"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(tick))}</text>'
        )
    for x in _x_ticks(x_lo, x_hi):
        parts.append(
            f'<text x="{sx(x):.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">'
            f"{escape(_hour_label(x))}</text>"
        )
    for label, pts in series.items():
        colour = colours.get(label, "#333")
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(pts))
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>'
        )
        parts.extend(
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}">'
            f"<title>{escape(label)} {escape(_hour_label(x))}: {escape(fmt(y))}"
            "</title></circle>"
            for x, y in pts
        )
    parts.append(_legend(list(series), colours))
    parts.append("</svg>")
    return "".join(parts)


def _x_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi == lo:
        return [lo]
    hour = 3_600_000.0
    step = max(hour, math.ceil((hi - lo) / count / hour) * hour)
    ticks, x = [], lo
    while x <= hi + 1:
        ticks.append(x)
        x += step
    return ticks


def stacked_bars(
    title: str, rows: Sequence[tuple[str, dict[str, float]]], colours: dict[str, str]
) -> str:
    """One horizontal 100 % bar per row label, segments in ``colours`` order."""
    if not rows:
        return _empty(title)
    bar_h, gap = 26, 12
    height = TOP + len(rows) * (bar_h + gap) + 40
    plot_w = WIDTH - 130 - RIGHT
    parts = [_frame(title, height)]
    for i, (label, values) in enumerate(rows):
        y = TOP + 8 + i * (bar_h + gap)
        total = sum(values.values()) or 1.0
        parts.append(
            f'<text x="122" y="{y + bar_h / 2 + 4}" text-anchor="end">{escape(label)}</text>'
        )
        x = 130.0
        for key, colour in colours.items():
            share = values.get(key, 0.0) / total
            if share <= 0:
                continue
            w = share * plot_w
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                f'fill="{colour}"><title>{escape(label)} {escape(key)}: '
                f"{share:.1%}</title></rect>"
            )
            if w > 38:
                parts.append(
                    f'<text x="{x + w / 2:.1f}" y="{y + bar_h / 2 + 4}" '
                    f'text-anchor="middle" fill="#fff">{share:.0%}</text>'
                )
            x += w
    parts.append(_legend(list(colours), colours, y=height - 14))
    parts.append("</svg>")
    return "".join(parts)


def _frame(title: str, height: int = HEIGHT) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11" '
        f'role="img" aria-label="{escape(title)}">'
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>'
    )


def _legend(labels: list[str], colours: dict[str, str], y: int = HEIGHT - 6) -> str:
    parts, x = [], LEFT
    for label in labels:
        parts.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" '
            f'fill="{colours.get(label, "#333")}"/>'
            f'<text x="{x + 14}" y="{y}">{escape(label)}</text>'
        )
        x += 24 + 7 * len(label)
    return "".join(parts)


def _empty(title: str) -> str:
    return _frame(title, 80) + f'<text x="{LEFT}" y="50" fill="#777">no data in range</text></svg>'
