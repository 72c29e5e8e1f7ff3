"""The monitor page, rendered on the server from the state document (``state.snapshot``).

Imported on the first page request only (the sidecar stays small when nobody looks). Every
value goes through ``html.escape`` on its way into the page (``_e``); the page's script only
swaps in the ``#live`` fragment this module renders, so there is one place that escapes.
"""

from __future__ import annotations

import html
import urllib.parse
from string import Template
from typing import Any

from priority_pubsub.core.human import duration, when
from priority_pubsub.monitor import STATIC
from priority_pubsub.monitor.history import SERIES

_SHELL = Template((STATIC / "page.html").read_text(encoding="utf-8"))


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _since_s(doc: dict[str, Any], hold: dict[str, Any]) -> float:
    return max(0.0, (doc["generated_ms"] - hold["since_ms"]) / 1000)


def _num(value: float | int | None) -> str:
    return "unknown" if value is None else f"{value:g}"


def render_page(doc: dict[str, Any], *, writable: bool, refresh_s: float) -> str:
    replica = doc["replica"]
    return _SHELL.substitute(
        title=_e(f"priority-pubsub monitor · {replica['host']}"),
        host=_e(replica["host"]), pid=_e(replica["pid"]), driver=_e(replica["driver"]),
        scheduling=_e(replica["scheduling"]), runtime_only=_e(doc["runtime_only"]),
        refresh_ms=int(refresh_s * 1000), writable="true" if writable else "false",
        token_box=_TOKEN_BOX if writable else "",
        filter_form=_filter_form(doc), live=render_live(doc, writable=writable),
    )


_TOKEN_BOX = ('<form id="token-form" class="token"><label>admin token '
              '<input type="password" id="admin-token" autocomplete="off"></label>'
              '<button type="submit">use</button><span id="token-state"></span></form>')


def _filter_form(doc: dict[str, Any]) -> str:
    chosen = doc["dead_letters"]["filter"]
    fields = "".join(f'<label>{k} <input name="{k}" value="{_e(chosen[k])}"></label>'
                     for k in ("reason", "queue", "id"))
    return (f'<form method="get" action="/monitor" class="filter">{fields}'
            '<button type="submit">filter</button> <a href="/monitor">clear</a></form>')


def render_live(doc: dict[str, Any], *, writable: bool) -> str:
    return "".join((_overview(doc, writable), _queues(doc, writable), _waiting(doc, writable),
                    _in_flight(doc, writable),
                    _dead_letters(doc, writable),
                    f'<p class="stamp">as of {_e(when(doc["generated_ms"]))}</p>'))


def _button(action: str, label: str, **data: str) -> str:
    attributes = "".join(f' data-{k}="{_e(v)}"' for k, v in data.items())
    return f'<button class="act" data-action="{action}"{attributes}>{_e(label)}</button>'


def _overview(doc: dict[str, Any], writable: bool) -> str:
    view = doc["overview"]
    app, workers, drain = view["app"], view["workers"], view["drain"]
    app_text = app["state"] + (f" ({app['reason']})" if app["reason"] else "")
    drain_text = "no" if drain is None else f"{drain['state']} for {duration(_since_s(doc, drain))}"
    cells = [
        ("app", f'<span class="state {_e(app["state"])}">{_e(app_text)}</span> '
                f'for {_e(duration(app["for_s"]))}'),
        ("slots in use", f'<span id="slots-in-use">{_e(workers["slots_in_use"])}</span> / '
                         f'{_e(workers["concurrency"])} (messages at the app: '
                         f'<span id="busy">{_e(workers["busy"])}</span>; now allowed '
                         f'{_e(workers["effective_concurrency"])}; held, settles included: '
                         f'{_e(workers["in_flight"])})'),
        ("reserve plan", _reserve_plan(view["reserve"])),
        ("oldest in flight", _e(duration(view["oldest_in_flight_s"]))),
        ("driver", "connected" if view["driver_connected"] else
                   '<span class="state down">not connected</span>'),
        ("draining", f'<span id="drain-state">{_e(drain_text)}</span>'),
        ("config", _config(doc)),
    ]
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in cells)
    actions = ""
    if writable:
        actions = (_button("drain-end", "end drain") if drain is not None
                   else _button("drain", "drain (stop taking from all queues)"))
    return f'<section id="overview"><h2>This replica</h2><table>{rows}</table>{actions}</section>'


def _config(doc: dict[str, Any]) -> str:
    """The config in force (its hash: compare replicas) and the last refused reload."""
    config = doc["config"]
    text = (f'<span id="config-hash">{_e(config["hash"] or "not from a file")}</span>, '
            f'loaded {_e(when(config["loaded_ms"]))}')
    refused = config["last_refused"]
    if refused is not None:
        text += (f'<br><span class="state down">last reload refused</span> '
                 f'{_e(when(refused["at_ms"]))}: <span id="config-refused">'
                 f'{_e(refused["reason"])}</span>')
    return text


def _taking(doc: dict[str, Any], q: dict[str, Any]) -> str:
    """Whether the queue is taken from, and if not who holds it: the config (every replica
    reading it) or an operator (this replica only)."""
    held = []
    if q.get("paused_by_config"):
        held.append('<span class="state paused">paused by the config</span> (every replica)')
    if q["paused"] is not None:
        held.append(f'<span class="state paused">paused on this replica only</span> for '
                    f'{_e(duration(_since_s(doc, q["paused"])))}')
    return "<br>".join(held) or "taking"


def _reserve_plan(plan: list[dict[str, Any]] | None) -> str:
    if plan is None:
        return ('<span class="muted">none (no queue has reserve, max_concurrency or '
                'slots)</span>')
    parts = []
    for entry in plan:
        limits = []
        if entry["reserve"]:
            limits.append(f"{entry['reserve']} reserved")
        if entry["max_concurrency"] is not None:
            limits.append(f"at most {entry['max_concurrency']}")
        if entry["slots"] > 1:
            limits.append(f"{entry['slots']} slots each")
        parts.append(f"{_e(entry['queue'])}: {_e(entry['in_flight'])} in flight"
                     + (f" ({_e(', '.join(limits))})" if limits else ""))
    return "<br>".join(parts)


def _spark(values: list[float]) -> str:
    if len(values) < 2:
        return '<span class="muted">collecting</span>'
    top = max(values) or 1.0
    step = 120 / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{20 - 18 * v / top:.1f}" for i, v in enumerate(values))
    return (f'<svg class="spark" width="120" height="22" viewBox="0 0 120 22">'
            f'<polyline points="{points}"/></svg>')


def _queues(doc: dict[str, Any], writable: bool) -> str:
    head = ("<tr><th>queue</th><th>prio</th><th>waiting (broker)</th>"
            "<th>oldest waiting (broker)</th><th>delivered/min</th><th>acked/min</th>"
            "<th>retried/min</th><th>dead/min</th><th>since start: delivered / acked / retried / "
            "dead</th><th>last delivery</th><th>starved</th>"
            "<th>last 15 min</th><th>taking</th></tr>")
    rows = []
    for q in doc["queues"]:
        broker, rate, total = q["broker"], q["per_minute"], q["since_start"]
        waiting = "unknown" if broker is None else _num(broker["visible"])
        oldest = "unknown" if broker is None else duration(broker["oldest_age_s"])
        starved = {None: "-", True: '<span class="state down">STARVED</span>',
                   False: "no"}[q["starved"]]
        taking = _taking(doc, q)
        if writable:
            verb = ("resume", "resume") if q["paused"] else ("pause", "pause")
            taking += " " + _button(verb[0], verb[1], queue=q["name"])
        listed = ""
        if doc["waiting"]["why_not"] is None and q["priority"] > 0:
            listed = (f' <a class="waiting-link" href="/monitor?waiting='
                      f'{_e(urllib.parse.quote(q["name"]))}">waiting</a>')
        rows.append(
            f'<tr data-queue="{_e(q["name"])}"><td>{_e(q["name"])}{listed}</td>'
            f'<td>{q["priority"]}</td>'
            f'<td class="n">{_e(waiting)}</td><td class="n">{_e(oldest)}</td>'
            + "".join(f'<td class="n rate-{k}">{_e(rate[k])}</td>'
                      for k in SERIES)
            + f'<td class="n totals">{_e(" / ".join(_num(total[k]) for k in SERIES))}</td>'
            f'<td class="n">{_e(duration(q["last_delivery_s_ago"]))}</td><td>{starved}</td>'
            f'<td>{_spark(q["sparkline"])}</td><td>{taking}</td></tr>')
    return (f'<section id="queues"><h2>Queues, highest priority first</h2>'
            f'<p class="muted">"broker": the broker\'s own figures, as last read by this '
            f'replica; the rest is this replica\'s.</p>'
            f'<table>{head}{"".join(rows)}</table></section>')


def _waiting(doc: dict[str, Any], writable: bool) -> str:
    """The first messages waiting in the queue the page asked about (``?waiting=QUEUE``),
    each with a promote button per queue above it; or why this broker cannot."""
    waiting = doc["waiting"]
    if waiting["queue"] is None:
        return ""
    queue = waiting["queue"]
    if waiting["why_not"] is not None:
        body = f'<p class="muted">Cannot list or promote here: {_e(waiting["why_not"])}.</p>'
        return f'<section id="waiting"><h2>Waiting in {_e(queue)}</h2>{body}</section>'
    rows = []
    for m in waiting["items"]:
        promote = ""
        if writable:
            promote = " ".join(_button("promote", f"promote to {target}", id=m["id"],
                                       queue=queue, to=target)
                               for target in waiting["targets"])
        rows.append(f'<tr class="waiting" data-id="{_e(m["id"])}"><td>{_e(m["id"])}</td>'
                    f'<td>{_e(when(m["enqueued_ms"]))}</td>'
                    f'<td class="n">{_e(_num(m["attempts"]))}</td><td>{promote}</td></tr>')
    if not rows:
        rows.append('<tr><td colspan="4" class="muted">nothing waiting</td></tr>')
    return (f'<section id="waiting"><h2>Waiting in {_e(queue)} (first '
            f'{len(waiting["items"])})</h2><p class="muted">Promote publishes the message to '
            'the higher queue, then takes it out of this one; one a worker took meanwhile '
            'is left alone (never in both). <a href="/monitor">close</a></p><table>'
            '<tr><th>message id</th><th>enqueued</th><th>attempts</th><th>promote</th></tr>'
            f'{"".join(rows)}</table></section>')


CANCEL_CHOICES = (("retry", "retry later"), ("dead_letter", "dead-letter"), ("drop", "drop"))
"""The operator's cancel of a running delivery: how its message is settled, and the label."""


def _in_flight(doc: dict[str, Any], writable: bool) -> str:
    items = doc["in_flight"]
    if not items:
        body = '<tr><td colspan="7" class="muted">nothing in flight</td></tr>'
    else:
        body = "".join(
            f'<tr class="held" data-id="{_e(m["id"])}"><td>{_e(m["id"])}</td>'
            f'<td>{_e(m["queue"])}</td>'
            f'<td class="n">{_e(m["attempt"])}</td><td class="n">{_e(m["slots"])}</td>'
            f'<td class="n">{_e(duration(m["elapsed_s"]))}</td>'
            f'<td class="n">{_e(duration(m["lease_renewed_s_ago"]))}'
            f'{" ago" if m["lease_renewed_s_ago"] is not None else ""}</td>'
            f'<td>{_cancel_buttons(m) if writable and m["at_app"] else ""}</td></tr>'
            for m in items)
    return (f'<section id="in-flight"><h2>In flight ({len(items)})</h2>'
            '<p class="muted">Cancel aborts the request at the app (the connection closed, '
            'the gRPC call cancelled) and settles the message as chosen; an app that does '
            'not notice may go on working on it.</p><table>'
            '<tr><th>message id</th><th>queue</th><th>attempt</th><th>slots</th><th>elapsed</th>'
            f'<th>lease renewed</th><th>cancel</th></tr>{body}</table></section>')


def _cancel_buttons(message: dict[str, Any]) -> str:
    return " ".join(_button("cancel", label, id=message["id"], queue=message["queue"],
                            settle=settle) for settle, label in CANCEL_CHOICES)


def _dead_letters(doc: dict[str, Any], writable: bool) -> str:
    dead = doc["dead_letters"]
    items, acts = dead["items"], writable and dead["actions"]
    if dead["source"] == "broker":
        several = ", " in (dead["queue"] or "")  # Service Bus: each queue has its own
        queues, held = ("queues", "them") if several else ("queue", "it")
        origin = (f'Listed from the dead-letter {queues} <code>{_e(dead["queue"])}</code> as '
                  f"the broker holds {held} (every replica's dead letters)."
                  + ("" if dead["actions"] else " This driver cannot take chosen ones out of "
                     f"{held}: requeue with <code>priority-pubsub requeue</code>."))
    else:
        origin = ("This replica's own record of what it dead-lettered since it started: this "
                  "broker cannot list its dead-letter queue without receiving from it. Requeue "
                  "with <code>priority-pubsub requeue</code>.")
    bulk = ""
    if acts:
        bulk = (_button("requeue-filtered", "requeue all shown") + " "
                + _button("delete-filtered", "delete all shown"))
    rows = []
    for d in items:
        row_acts = ""
        if acts:
            row_acts = (_button("requeue", "requeue", id=d["id"]) + " "
                        + _button("delete", "delete", id=d["id"]))
        rows.append(
            f'<tr class="dead" data-id="{_e(d["id"])}"><td>{_e(d["id"])}</td>'
            f'<td>{_e(d["source"])}</td><td>{_e(d["reason"])}</td>'
            f'<td class="n">{_e(_num(d["attempts"]))}</td><td>{_e(when(d["first_seen_ms"]))}'
            f'</td><td>{_e(when(d["last_seen_ms"]))}</td><td>{row_acts}</td></tr>')
    if not rows:
        rows.append('<tr><td colspan="7" class="muted">no dead letters</td></tr>')
    return (f'<section id="dead-letters"><h2>Dead letters ({len(items)} shown)</h2>'
            f'<p class="muted">{origin}</p>{bulk}<table><tr><th>message id</th><th>source '
            'queue</th><th>reason</th><th>attempts</th><th>first seen</th><th>dead-lettered'
            f'</th><th></th></tr>{"".join(rows)}</table></section>')
