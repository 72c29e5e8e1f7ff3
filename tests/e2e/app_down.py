"""The app-down scenario, run on every broker (issue 13): the app goes away for longer than
the whole retry schedule while messages wait; nothing may be dead-lettered or deleted, and
every message is delivered once it is back. A broker's e2e module subclasses
``AppDownScenario`` and supplies its topology through the three hooks."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.helpers import journal_records, wait_until
from tests.support.app import RecordingApp
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, start_sidecar

# The whole schedule (0.5 s, then 1 s) is over within ~2 s: any app-down time longer than
# that would dead-letter every message if unreachable deliveries counted as attempts.
RETRY = {"max_attempts": 3, "initial_delay_s": 0.5, "max_delay_s": 1}


def scrape(sidecar: SidecarProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    samples = {}
    for family in text_string_to_metric_families(sidecar.metrics()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    """Sum of ``name`` over every label set that includes ``labels``."""
    wanted = set(labels.items())
    return sum(value for (sample, found), value in samples.items()
               if sample == name and wanted <= set(found))


class AppDownScenario:
    """Subclass per broker; set ``messages``/``down_s`` and implement the hooks."""

    messages: ClassVar[int] = 10
    down_s: ClassVar[float] = 10.0
    concurrency: ClassVar[int] = 4
    delivered_timeout_s: ClassVar[float] = 90.0
    ready_timeout_s: ClassVar[float] = 20.0

    def scenario_config(self, directory: Path, app_url: str, **overrides: Any) -> dict[str, Any]:
        """A sidecar config with one consumed queue (``self.scenario_queue``) and a DLQ."""
        raise NotImplementedError

    def scenario_publish(self, bodies: list[str]) -> None:
        """Publish each body (JSON text) to the consumed queue."""
        raise NotImplementedError

    def scenario_dead_letters(self) -> int:
        """How many messages reached the dead-letter destination."""
        raise NotImplementedError

    def test_app_down_longer_than_the_retry_schedule_loses_nothing(self, tmp_path: Path) -> None:
        port = free_port()
        run = uuid.uuid4().hex[:6]
        config = self.scenario_config(tmp_path, f"http://127.0.0.1:{port}", retry=RETRY,
                                      concurrency=self.concurrency)
        with RecordingApp(port=port) as app:
            sidecar = start_sidecar(tmp_path, config, self.ready_timeout_s)
            self.scenario_publish([f'{{"n": "warm-{run}"}}'])
            app.wait_for(1)
        try:
            bodies = [f'{{"n": "{run}-{i}"}}' for i in range(self.messages)]
            self.scenario_publish(bodies)
            went_down = time.monotonic()
            wait_until(lambda: total(scrape(sidecar), "priority_pubsub_app_up") == 0, 30)
            time.sleep(max(0.0, self.down_s - (time.monotonic() - went_down)))
            assert self.scenario_dead_letters() == 0
            with RecordingApp(port=port) as app:
                wait_until(lambda: total(scrape(sidecar), "priority_pubsub_messages_settled_total",
                                         outcome="ack") >= self.messages + 1,
                           self.delivered_timeout_s)
                seen = Counter(e["data"]["n"] for e in app.events())
                samples = scrape(sidecar)
        finally:
            sidecar.stop()
        self._assert_nothing_lost(tmp_path, run, seen, samples)

    def _assert_nothing_lost(self, directory: Path, run: str, seen: Counter[str],
                             samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> None:
        assert set(seen) == {f"{run}-{i}" for i in range(self.messages)}  # every one delivered
        assert self.scenario_dead_letters() == 0
        records = journal_records(directory / "journal")
        outcomes = Counter(r["outcome"] for r in records)
        assert outcomes["dead"] == outcomes["drop"] == 0, outcomes
        acked = Counter(r["message_id"] for r in records if r["outcome"] == "ack")
        assert len(acked) == self.messages + 1
        assert set(acked.values()) == {1}
        released = [r for r in records if r["outcome"] == "release"]
        assert released, "the outage was never noticed"
        assert all(r["reason"].startswith("app not reachable") for r in released), released
        assert all(r["forwarded_ms"] is None or r["http_status"] is None for r in released)
        # The pause bounds the cost: at most the messages in hand per outage.
        pauses = total(samples, "priority_pubsub_app_pauses_total", cause="unreachable")
        assert pauses >= 1
        assert len(released) <= self.concurrency * pauses
        for outcome, count in outcomes.items():  # journal and metrics agree
            assert total(samples, "priority_pubsub_messages_settled_total",
                         outcome=outcome) == count, outcome
        assert total(samples, "priority_pubsub_app_up") == 1
