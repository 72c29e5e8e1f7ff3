"""report.html: one self-contained page (inline CSS and SVG, no scripts, no network).

Written for someone who never saw the journal: every number says what it measures in words,
durations are human-readable, and a glossary closes the page. Input is plain Python data
(``PageData``) so the page renders, and can be tested, without Spark. The markup lives in
``templates/report.html.j2`` (jinja2, autoescaped); this module only turns the data into the
text the template shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from priority_pubsub.analytics.journal.load import LineCounts
from priority_pubsub.analytics.journal.schema import OUTCOMES
from priority_pubsub.analytics.model.capacity import CapacityRow
from priority_pubsub.analytics.model.starvation import StarvationRow
from priority_pubsub.analytics.render.svg import (
    OUTCOME_COLOURS,
    line_chart,
    priority_colour,
    stacked_bars,
)
from priority_pubsub.core.human import duration, when

Row = dict[str, Any]
Cells = list[tuple[str, ...]]
TEMPLATES = Environment(
    loader=PackageLoader("priority_pubsub.analytics.render", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


@dataclass
class PageData:
    """Everything the page shows, already collected from Spark."""

    source: str
    generated_ms: int
    target_wait_s: float
    counts: LineCounts
    first_ms: int | None = None
    last_ms: int | None = None
    since: str | None = None
    until: str | None = None
    summary: list[Row] = field(default_factory=list)
    hourly: list[Row] = field(default_factory=list)
    in_system: list[Row] = field(default_factory=list)
    starvation: list[StarvationRow] = field(default_factory=list)
    capacity: list[CapacityRow] = field(default_factory=list)
    observed_peak: int = 0
    reasons: list[Row] = field(default_factory=list)
    attempts: list[Row] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)


def render(data: PageData) -> str:
    """The whole page: each part of the context comes from one helper below."""
    context: dict[str, Any] = {
        **_header(data),
        **_waits(data),
        "throughput_chart": _throughput(data),
        **_outcomes(data),
        "starvation_rows": _starvation(data),
        **_capacity(data),
        "reason_rows": _reasons(data),
        **_attempts(data),
        **_quality(data),
        "glossary": GLOSSARY,
        "tables": sorted(data.tables.items()),
    }
    return TEMPLATES.get_template("report.html.j2").render(context)


def _label(priority: int, queues: str = "") -> str:
    return f"priority {priority}" + (f" ({queues})" if queues else "")


def _header(d: PageData) -> dict[str, Any]:
    done = sum(int(r["completed"]) for r in d.summary)
    deliveries = sum(int(r["attempts"]) for r in d.summary)
    tiles = [
        ("messages completed", f"{done:,}"),
        ("deliveries (attempts)", f"{deliveries:,}"),
        ("bad journal lines", f"{d.counts.bad:,}"),
    ]
    if d.summary:
        top, low = d.summary[0], d.summary[-1]
        tiles.append(
            (f"95% of priority {top['priority']} waited under", duration(top["wait_p95_s"]))
        )
        if low is not top:
            tiles.append(
                (f"95% of priority {low['priority']} waited under", duration(low["wait_p95_s"]))
            )
    return {
        "source": d.source,
        "range_text": f"{when(d.first_ms)} → {when(d.last_ms)}",
        "limits": [(k, v) for k, v in (("since", d.since), ("until", d.until)) if v],
        "generated": when(d.generated_ms),
        "tiles": tiles,
    }


def _series(d: PageData, key: str) -> tuple[dict[str, list[tuple[float, float]]], dict[str, str]]:
    series: dict[str, list[tuple[float, float]]] = {}
    colours: dict[str, str] = {}
    for r in d.hourly:
        if r[key] is None:
            continue
        label = _label(int(r["priority"]))
        series.setdefault(label, []).append((float(r["hour_ms"]), float(r[key])))
        colours[label] = priority_colour(int(r["priority"]))
    return series, colours


def _waits(d: PageData) -> dict[str, Any]:
    charts = []
    for key, name in (("wait_p50_s", "median (p50)"), ("wait_p95_s", "p95"), ("wait_p99_s", "p99")):
        series, colours = _series(d, key)
        chart = line_chart(f"Queue wait, {name}, per hour", series, colours, duration)
        charts.append(Markup(chart))
    in_system = {int(r["priority"]): r for r in d.in_system}
    rows = [
        (
            _label(r["priority"], r["queues"]),
            f"{r['first_deliveries']:,}",
            duration(r["wait_p50_s"]),
            duration(r["wait_p95_s"]),
            duration(r["wait_p99_s"]),
            duration(r["proc_p50_s"]),
            duration(r["proc_p95_s"]),
            duration(r["proc_p99_s"]),
            duration(in_system.get(int(r["priority"]), {}).get("in_system_p95_s")),
        )
        for r in d.summary
    ]
    return {"wait_charts": charts, "wait_rows": rows}


def _throughput(d: PageData) -> Markup:
    series, colours = _series(d, "completed")
    return Markup(line_chart("Messages completed per hour", series, colours, lambda v: f"{v:,.0f}"))


def _outcomes(d: PageData) -> dict[str, Any]:
    bars = [(_label(int(r["priority"])), {o: float(r[o]) for o in OUTCOMES}) for r in d.summary]
    chart = stacked_bars("How the app answered each delivery", bars, OUTCOME_COLOURS)
    rows = [
        (
            _label(r["priority"], r["queues"]),
            f"{r['attempts']:,}",
            *(f"{r[o]:,} ({r[o + '_rate']:.1%})" for o in OUTCOMES),
        )
        for r in d.summary
    ]
    return {"outcome_chart": Markup(chart), "outcomes": list(OUTCOMES), "outcome_rows": rows}


def _starvation(d: PageData) -> Cells:
    return [
        (
            _label(s.priority),
            f"{s.windows:,}",
            duration(s.duration_s),
            when(s.window_start_ms),
            when(s.window_end_ms),
            f"{s.higher_priority_deliveries:,}",
        )
        for s in d.starvation
    ]


def _capacity(d: PageData) -> dict[str, Any]:
    rows = [
        (
            _label(c.priority),
            f"{c.arrival_rate_per_s * 3600:,.1f}",
            duration(c.mean_service_s),
            f"{c.offered_load:.2f}",
            f"{c.cumulative_load:.2f}",
            "-" if c.workers_needed is None else str(c.workers_needed),
            str(c.observed_max_in_flight),
            f"{c.observed_mean_in_flight:.2f}",
        )
        for c in d.capacity
    ]
    return {
        "capacity_rows": rows,
        "workers_needed": d.capacity[-1].workers_needed if d.capacity else None,
        "target_wait": duration(d.target_wait_s),
        "observed_peak": d.observed_peak,
    }


def _reasons(d: PageData) -> Cells:
    return [
        (_label(r["priority"]), r["queue"], r["outcome"], r["reason"], f"{r['messages']:,}")
        for r in d.reasons
    ]


def _attempts(d: PageData) -> dict[str, Any]:
    if not d.attempts:
        return {"attempt_rows": [], "attempt_heads": []}
    top = max(int(r["attempts"]) for r in d.attempts)
    cols = list(range(1, min(top, 10) + 1))
    grid: dict[tuple[int, str], dict[int, int]] = {}
    for r in d.attempts:
        cell = grid.setdefault((int(r["priority"]), str(r["final_outcome"])), {})
        col = min(int(r["attempts"]), cols[-1])
        cell[col] = cell.get(col, 0) + int(r["messages"])
    rows = [
        (_label(p), outcome, *(f"{cell.get(c, 0):,}" for c in cols))
        for (p, outcome), cell in sorted(grid.items())
    ]
    heads = [f"{c} deliver{'y' if c == 1 else 'ies'}" for c in cols]
    if top > 10:
        heads[-1] = "10+ deliveries"
    return {"attempt_rows": rows, "attempt_heads": heads}


def _quality(d: PageData) -> dict[str, Any]:
    c = d.counts
    rows = [
        ("valid, in range", f"{c.valid:,}", "aggregated on this page"),
        ("valid, outside --since/--until", f"{c.out_of_range:,}", "skipped"),
        (
            "released unseen",
            f"{c.released:,}",
            "surplus of a wake-up handed back before the app saw it: no delivery",
        ),
        (
            "malformed",
            f"{c.malformed:,}",
            "not JSON of the journal's shape (e.g. a torn last line)",
        ),
        ("unknown schema version", f"{c.unknown_version:,}", "written by a newer sidecar"),
        ("invalid", f"{c.invalid:,}", "a required field missing or an unknown outcome"),
    ]
    return {
        "total_lines": f"{c.total:,}",
        "bad_lines": c.bad,
        "bad_lines_text": f"{c.bad:,}",
        "quality_rows": rows,
        "samples": sorted(c.samples.items()),
    }


GLOSSARY = [
    ("priority", "0 is the most urgent; each queue has one priority."),
    (
        "delivery / attempt",
        "one hand-over of a message to the app; a retried message is delivered again.",
    ),
    ("queue wait", "from entering the queue to the first delivery (received - enqueued)."),
    ("processing", "from the request to the app to the settled outcome (settled - forwarded)."),
    ("time in system", "from entering the queue to its final outcome."),
    (
        "p50 / p95 / p99",
        "the value 50 / 95 / 99 % of messages stayed under (approximate "
        "percentiles, rank error below 0.01 %).",
    ),
    ("hours", "UTC hours of the moment each delivery was settled."),
]
