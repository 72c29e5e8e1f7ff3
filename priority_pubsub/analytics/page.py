"""report.html: one self-contained page (inline CSS and SVG, no scripts, no network).

Written for someone who never saw the journal: every number says what it measures in words,
durations are human-readable, and a glossary closes the page. Input is plain Python data
(``PageData``) so the page renders, and can be tested, without Spark.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Any

from priority_pubsub.analytics.capacity import CapacityRow
from priority_pubsub.analytics.load import LineCounts
from priority_pubsub.analytics.schema import OUTCOMES
from priority_pubsub.analytics.starvation import StarvationRow
from priority_pubsub.analytics.svg import (
    OUTCOME_COLOURS,
    line_chart,
    priority_colour,
    stacked_bars,
)

Row = dict[str, Any]
CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1300px;color:#222;padding:0 16px}
h1{margin-bottom:4px}h2{margin-top:32px;border-bottom:2px solid #ddd;padding-bottom:4px}
.muted{color:#666}.tiles{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.tile{border:1px solid #ddd;border-radius:6px;padding:10px 16px;min-width:150px}
.tile b{display:block;font-size:22px}.charts{display:flex;flex-wrap:wrap;gap:16px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}th{background:#f4f4f4}
td.l{white-space:nowrap}
td.l,th.l{text-align:left}.bad{color:#b71c1c;font-weight:bold}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;word-break:break-all;font-size:12px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
"""


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


def duration(seconds: float | None) -> str:
    """1.2 s, 850 ms, 4.5 min, 2.0 h: a duration a person reads at a glance."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], left: int | Collection[int] = 1
) -> str:
    """An HTML table; text columns (the first ``left``, or those indexes) align left."""
    text = set(range(left)) if isinstance(left, int) else set(left)
    head = "".join(
        f'<th class="{"l" if i in text else ""}">{escape(h)}</th>' for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"l" if i in text else ""}">{escape(str(v))}</td>'
            for i, v in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render(data: PageData) -> str:
    sections = [
        _header(data),
        _waits(data),
        _throughput(data),
        _outcomes(data),
        _starvation(data),
        _capacity(data),
        _reasons(data),
        _attempts(data),
        _quality(data),
        _glossary(data),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>priority-pubsub delivery report</title>"
        f"<style>{CSS}</style></head><body>{''.join(sections)}</body></html>\n"
    )


def _label(priority: int, queues: str = "") -> str:
    return f"priority {priority}" + (f" ({queues})" if queues else "")


def _header(d: PageData) -> str:
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
    rng = f"{when(d.first_ms)} → {when(d.last_ms)}"
    limits = "".join(
        f" · {k} {escape(v)}" for k, v in (("since", d.since), ("until", d.until)) if v
    )
    return (
        "<h1>Delivery report</h1>"
        f'<p class="muted">Journal: <code>{escape(d.source)}</code> · deliveries settled '
        f"{escape(rng)}{limits} · generated {escape(when(d.generated_ms))}</p>"
        "<p>The sidecar takes messages from queues of different priorities (0 is the most "
        "urgent) and hands each to the app. This page shows whether urgent messages are "
        "really served first: how long messages waited in their queue, how the app answered, "
        "whether lower priorities were starved, and how many workers would keep waits short."
        '</p><div class="tiles">'
        + "".join(f'<div class="tile"><b>{escape(v)}</b>{escape(k)}</div>' for k, v in tiles)
        + "</div>"
    )


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


def _waits(d: PageData) -> str:
    charts = []
    for key, name in (("wait_p50_s", "median (p50)"), ("wait_p95_s", "p95"), ("wait_p99_s", "p99")):
        series, colours = _series(d, key)
        charts.append(line_chart(f"Queue wait, {name}, per hour", series, colours, duration))
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
    return (
        "<h2>How long messages waited</h2><p>Queue wait is the time from a message entering "
        "its queue to a worker taking it (first delivery). Processing is the app's time on "
        "one delivery. Time in system runs from entering the queue to the final outcome, "
        "retries included. p95 means 95% of messages did better than this value.</p>"
        f'<div class="charts">{"".join(charts)}</div>'
        + table(
            [
                "priority (queues)",
                "messages",
                "wait p50",
                "wait p95",
                "wait p99",
                "processing p50",
                "processing p95",
                "processing p99",
                "time in system p95",
            ],
            rows,
        )
    )


def _throughput(d: PageData) -> str:
    series, colours = _series(d, "completed")
    chart = line_chart("Messages completed per hour", series, colours, lambda v: f"{v:,.0f}")
    return (
        "<h2>Throughput</h2><p>Messages that reached a final outcome (delivered, "
        "dead-lettered or dropped) in each UTC hour.</p>" + chart
    )


def _outcomes(d: PageData) -> str:
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
    return (
        "<h2>Outcomes</h2><p><b>ack</b>: the app accepted it · <b>retry</b>: it goes back "
        "to the queue for another attempt · <b>dead</b>: given up, moved to the "
        "dead-letter queue · <b>drop</b>: discarded on purpose (e.g. the app answered 404) · "
        "<b>settle_failed</b>: the broker refused or failed the settle call, so it delivers "
        "the message again (not completed)."
        "</p>" + chart + table(["priority (queues)", "deliveries", *OUTCOMES], rows)
    )


def _starvation(d: PageData) -> str:
    if not d.starvation:
        return "<h2>Starvation</h2><p>Only one priority in range: nothing can starve it.</p>"
    rows = [
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
    return (
        "<h2>Starvation of lower priorities</h2><p>A starvation window is a stretch of time "
        "in which a priority had messages waiting, none of them was taken, and more urgent "
        "messages were served instead; its oldest waiting message aged by the whole window. "
        "Long windows are expected under strict scheduling when urgent traffic is heavy; "
        "weighted scheduling bounds them.</p>"
        + table(
            [
                "priority",
                "windows",
                "longest window",
                "from",
                "to",
                "more urgent deliveries meanwhile",
            ],
            rows,
        )
    )


def _capacity(d: PageData) -> str:
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
    need = d.capacity[-1].workers_needed if d.capacity else None
    verdict = (
        ""
        if need is None
        else f"<p><b>To keep 95% of every priority's waits under {duration(d.target_wait_s)}, "
        f"about {need} worker{'s' if need != 1 else ''} needed</b>; at most "
        f"{d.observed_peak} deliveries were in flight at once in this journal.</p>"
    )
    return (
        "<h2>Capacity</h2>"
        + verdict
        + "<p>Model: M/M/c (Erlang C). Deliveries arrive at random at the observed rate and "
        "take a random time with the observed mean; a priority competes with itself and all "
        "more urgent priorities, so its row sizes the workers for all of that traffic. Busy "
        "workers mean offered load (deliveries per second &times; mean time). Real traffic is "
        "burstier than the model, and the least urgent priority waits longer under strict "
        "scheduling than the model says: read the figures as lower bounds.</p>"
        + table(
            [
                "priority",
                "deliveries per hour",
                "mean time per delivery",
                "busy workers (this priority)",
                "busy workers (this and more urgent)",
                f"workers for p95 wait ≤ {duration(d.target_wait_s)}",
                "observed max in flight",
                "observed mean in flight",
            ],
            rows,
        )
    )


def _reasons(d: PageData) -> str:
    if not d.reasons:
        return "<h2>Dead letters and drops</h2><p>None in range.</p>"
    rows = [
        (_label(r["priority"]), r["queue"], r["outcome"], r["reason"], f"{r['messages']:,}")
        for r in d.reasons
    ]
    return (
        "<h2>Dead letters and drops</h2><p>Why messages were given up or discarded, "
        "most frequent first.</p>"
        + table(["priority", "queue", "outcome", "reason", "messages"], rows, left=4)
    )


def _attempts(d: PageData) -> str:
    if not d.attempts:
        return ""
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
    return (
        "<h2>Attempts until the final outcome</h2><p>How many deliveries each message "
        "needed; <i>in_progress</i> messages were still being retried when the journal "
        "ends.</p>" + table(["priority", "final outcome", *heads], rows, left=2)
    )


def _quality(d: PageData) -> str:
    c = d.counts
    rows = [
        ("valid, in range", f"{c.valid:,}", "aggregated on this page"),
        ("valid, outside --since/--until", f"{c.out_of_range:,}", "skipped"),
        ("released unseen", f"{c.released:,}",
         "surplus of a wake-up handed back before the app saw it: no delivery"),
        (
            "malformed",
            f"{c.malformed:,}",
            "not JSON of the journal's shape (e.g. a torn last line)",
        ),
        ("unknown schema version", f"{c.unknown_version:,}", "written by a newer sidecar"),
        ("invalid", f"{c.invalid:,}", "a required field missing or an unknown outcome"),
    ]
    samples = "".join(
        f"<p><b>{escape(k)}</b> examples:</p>" + "".join(f"<pre>{escape(s)}</pre>" for s in v)
        for k, v in sorted(c.samples.items())
    )
    cls = ' class="bad"' if c.bad else ""
    return (
        f"<h2>Journal lines</h2><p{cls}>{c.total:,} lines read, {c.bad:,} could not be "
        "used; they are counted here and otherwise ignored.</p>"
        + table(["kind", "lines", "meaning"], rows, left=(0, 2))
        + samples
    )


def _glossary(d: PageData) -> str:
    terms = [
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
    tables = table(["table", "Parquet path"], sorted(d.tables.items()), left=2)
    return (
        "<h2>Glossary</h2>"
        + table(["term", "meaning"], terms, left=2)
        + "<h2>Data tables</h2><p>Every figure comes from these Parquet tables.</p>"
        + tables
    )
