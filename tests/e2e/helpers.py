"""Small helpers shared by the local-driver end-to-end tests."""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from priority_pubsub.commands.ops import publish_messages
from priority_pubsub.delivery.settlement import LAST_ATTEMPT_KEPT
from priority_pubsub.settings.config import load_config
from tests.support.app import Received, RecordingApp
from tests.support.sidecar import SidecarProcess, cli, start_sidecar
from tests.support.waiting import wait_until


def publish(config: Path, queue: str, data: str, count: int = 1,
            attributes: dict[str, str] | None = None) -> list[str]:
    """Publish in-process through the same code as ``priority-pubsub publish`` (the CLI's
    own tests run the subprocess; here start-up time would dominate)."""
    settings = load_config(config)
    ids: list[str] = asyncio.run(
        publish_messages(settings, queue, data.encode(), attributes or {}, count, None)
    )
    return ids


def stats(config: Path) -> dict[str, Any]:
    result = cli("stats", "--json", config=config)
    assert result.returncode == 0, result.stderr
    value = json.loads(result.stdout)
    assert isinstance(value, dict)
    return value


def queue_rows(db: Path, queue: str) -> list[dict[str, Any]]:
    """Read a local queue straight from SQLite (read-only), without leasing anything."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT id, body, attributes, attempts, lease_token FROM messages WHERE queue = ? "
            "ORDER BY seq", (queue,),
        ).fetchall()
    finally:
        conn.close()
    return [{"id": r[0], "body": bytes(r[1]), "attributes": json.loads(r[2]), "attempts": r[3],
             "leased": r[4] is not None} for r in rows]


def journal_records(directory: Path, *, releases: bool = False) -> list[dict[str, Any]]:
    """The journal's delivery records; ``releases``: also the ``release`` records (messages
    handed back unseen, e.g. the surplus of a wake-up, which tests cannot schedule)."""
    records = []
    for path in sorted(directory.glob("journal-*.jsonl*")):  # the open file too
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                if releases or record.get("outcome") != "release":
                    records.append(record)
    return records


def assert_attempts_follow_the_stop_rule(history: list[dict[str, Any]], *,
                                        releases_counted: bool) -> None:
    """One message's journal records in order: a retry counts one attempt,
    except one the stop cut short at its last attempt (released: never counted past the
    limit); a release counts none. Where the broker counts releases (SQS, Pub/Sub, Service
    Bus) every return counts, and the broker may count more (its own hand-backs)."""
    for before, after in itertools.pairwise(history):
        counts = releases_counted or (before["outcome"] == "retry"
                                      and LAST_ATTEMPT_KEPT not in (before["reason"] or ""))
        expected = before["attempt"] + counts
        assert (after["attempt"] >= expected if releases_counted
                else after["attempt"] == expected), history


def samples(metrics_text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of ``name`` in Prometheus text, by its sorted labels."""
    found = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def total(metrics_text: str, name: str, **labels: str) -> float:
    """Sum of ``name`` over every sample whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(value for found, value in samples(metrics_text, name).items()
               if wanted <= set(found))


def assert_strict_with_a_late_high(received: list[Received], high: str, low: str) -> None:
    """Four high then six low were waiting; one more high ("late") was published after the
    sixth delivery: highs come first, and the late one overtakes the remaining lows at once."""
    order = [r.event["queue"] for r in received]
    assert order[:4] == [high] * 4
    late = next(i for i, r in enumerate(received) if r.event["data"] == "late")
    assert len(order[6:late]) <= 2, order  # at most the one in hand plus one in flight
    assert sorted(order) == sorted([high] * 5 + [low] * 6)
    assert all(r.event["attempt"] == 1 for r in received)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def serve_until_drained(directory: Path, config: dict[str, Any], app: RecordingApp,
                        requests: int, queue: str, timeout_s: float = 30) -> SidecarProcess:
    """Run a local-driver sidecar until the app saw ``requests`` requests and ``queue`` is
    empty, then stop it (exit 0 asserted); its logs stay readable."""
    sidecar = SidecarProcess(directory, config)
    try:
        app.wait_for(requests, timeout_s=timeout_s)
        wait_until(lambda: not queue_rows(directory / "queues.db", queue), timeout_s=20)
    finally:
        assert sidecar.stop() == 0
    return sidecar


def assert_each_order_once(received: list[int], app: Any, journal: Path, orders: int
                           ) -> list[dict[str, Any]]:
    """Orders 1..``orders`` arrived exactly once each and every attempt was acked."""
    assert sorted(received) == list(range(1, orders + 1)), app.output()
    records = journal_records(journal)
    assert [r["outcome"] for r in records] == ["ack"] * orders
    return records


def weighted_shares(directory: Path, app: RecordingApp, config: dict[str, Any],
                    names: list[str], deliveries: int, timeout_s: float) -> list[float]:
    """Run ``config`` with weights 6/3/1 on ``names`` (most urgent first) and return each
    queue's share of the first ``deliveries`` the app received."""
    config["queues"] = [{"name": n, "weight": w} for n, w in zip(names, (6, 3, 1), strict=True)]
    sidecar = start_sidecar(directory, config)
    try:
        received = app.wait_for(deliveries, timeout_s=timeout_s)
    finally:
        assert sidecar.stop() == 0
    served = Counter(r.event["queue"] for r in received[:deliveries])
    return [served[name] / deliveries for name in names]
