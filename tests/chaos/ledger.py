"""Full accounting of a chaos scenario: every published id, where it ended, how often it
was delivered. ``lost`` is what was published and neither delivered-and-settled nor still
waiting in a queue: it must be 0."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.settings.config import load_config
from priority_pubsub.telemetry.journal import read_journal_lines
from tests.chaos.report import HEADER
from tests.e2e.helpers import queue_rows
from tests.support.app import Received


@dataclass(frozen=True)
class Accounting:
    scenario: str
    published: int
    delivered: int
    """Distinct ids the app received."""
    acked: int
    """Distinct ids the broker no longer holds after an ack (the broker's truth)."""
    dead: int
    duplicated: int
    """Deliveries beyond the first per id (at-least-once: a crash costs duplicates)."""
    lost: int
    note: str = ""

    @staticmethod
    def header() -> str:
        return HEADER

    def line(self) -> str:
        return (f"{self.scenario:<34} {self.published:>9} {self.delivered:>9} {self.acked:>6} "
                f"{self.dead:>5} {self.duplicated:>10} {self.lost:>5}  {self.note}")


def deliveries(received: list[Received]) -> Counter[str]:
    """Deliveries per CloudEvent id (the broker message id for wrapped bodies)."""
    return Counter(r.event["id"] for r in received)


def local_accounting(scenario: str, published: list[str], received: list[Received],
                     directory: Path, *, dead_queue: str = "dead", note: str = "",
                     queues: tuple[str, ...] = ("high", "normal", "low")) -> Accounting:
    """For the local driver: what the queue file still holds is read straight from SQLite."""
    db = directory / "queues.db"
    waiting = {row["id"] for q in queues for row in queue_rows(db, q)}
    dead = {row["id"] for row in queue_rows(db, dead_queue)}
    return account(scenario, published, deliveries(received), waiting, dead, note)


def account(scenario: str, published: list[str], seen: Counter[str], waiting: set[str],
            dead: set[str], note: str = "") -> Accounting:
    ids = set(published)
    gone = ids - waiting - dead
    delivered = ids & set(seen)
    lost = ids - (delivered & gone) - waiting - dead
    return Accounting(
        scenario=scenario, published=len(ids), delivered=len(delivered),
        acked=len(gone & delivered), dead=len(ids & dead),
        duplicated=sum(seen[i] - 1 for i in delivered), lost=len(lost), note=note,
    )


def journal_by_message(directory: Path) -> dict[str, list[dict[str, object]]]:
    """Journal records per message id across every replica's journal in ``directory``, in
    the order each replica wrote them; a torn last line (a kill -9) is skipped, where
    ``tests.e2e.helpers.journal_records`` (a flat list) would fail on it."""
    records: dict[str, list[dict[str, object]]] = {}
    for path in sorted(directory.glob("journal-*.jsonl*")):  # open ones too (a kill -9)
        for record in read_journal_lines(path)[0]:
            records.setdefault(str(record["message_id"]), []).append(record)
    return records


def journal_outcomes(directory: Path) -> dict[str, list[str]]:
    """Outcomes per message id across every replica's journal in ``directory``."""
    return {message_id: [str(record["outcome"]) for record in found]
            for message_id, found in journal_by_message(directory).items()}


def drain_bodies(config: Path, queues: list[str], wait_s: float = 1.0) -> list[bytes]:
    """Receive and ack everything ``queues`` still hold, through the driver ``config`` names
    (any broker): what the ledger counts as waiting. Run after the sidecars stopped."""

    async def drain() -> list[bytes]:
        driver = build_driver(load_config(config))
        await driver.start()
        bodies: list[bytes] = []
        try:
            for queue in queues:
                while batch := await driver.receive(queue, 100, wait_s):
                    bodies += [message.body for message in batch]
                    for message in batch:
                        await driver.ack(message)
        finally:
            await driver.close()
        return bodies

    return asyncio.run(drain())
