"""Pub/Sub end to end (Google's emulator): the shared scenarios, plus a Dapr
``pubsub.pubsub_topology.pubsub`` event and its attributes reaching the app unchanged."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import ClassVar

import pytest

from tests.e2e.helpers import journal_records, wait_until
from tests.e2e.scenarios import SidecarScenarios
from tests.support.app import RecordingApp
from tests.support.sidecar import start_sidecar
from tests.support.topologies.base import topology_config
from tests.support.topologies.gcp_pubsub import PubSubTopology

pytestmark = pytest.mark.gcp_pubsub

DAPR_EVENT = {
    "id": "5929aaac-a5e2-4ca1-859c-edfe73f11565", "specversion": "1.0",
    "datacontenttype": "application/json", "source": "frontend", "type": "com.dapr.event.sent",
    "topic": "tasks-high", "pubsubname": "tasks",
    "traceid": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "", "data": {"job": "render-report", "customer": 42},
}


class TestPubSubScenarios(SidecarScenarios):
    # The emulator's modify_ack_deadline is honoured to the second: a 1 s lease extended every
    # 1/3 s leaves no margin on a busy machine.
    short_lease_s: ClassVar[float] = 2.0

    @pytest.fixture
    def topology(self, gcp_pubsub_topology: PubSubTopology) -> PubSubTopology:
        return gcp_pubsub_topology

    def test_issue_32_six_hundred_published_while_waiting_all_arrive(
        self, tmp_path: Path, app: RecordingApp, topology: PubSubTopology
    ) -> None:
        """The issue's reproduction as filed: one sidecar at concurrency 16 on two
        subscriptions, 600 messages in 12 batches of 50 while it waits (before the fix 17 to
        31 never arrived: handed to a pull the driver cancelled, never redelivered)."""
        run = self.run_batches_while_waiting(tmp_path, app, topology, replicas=1,
                                             concurrency=16, batches=12, batch_size=50)
        assert run.missing == [], f"{len(run.missing)} of {run.published} never arrived"
        assert run.unacked == []
        assert run.duplicated <= 16, run.duplicated  # at most what the sidecar held


def test_dapr_event_and_attributes_reach_the_app_unchanged(
    tmp_path: Path, app: RecordingApp, gcp_pubsub_topology: PubSubTopology
) -> None:
    high = gcp_pubsub_topology.queue("high")
    published = json.dumps({**DAPR_EVENT, "id": str(uuid.uuid4()), "topic": high,
                            "data": {"job": "render-report"}}).encode()
    gcp_pubsub_topology.publish(high, published, {"customer-tier": "gold"})
    config = topology_config(gcp_pubsub_topology, tmp_path, app.url, [high])
    sidecar = start_sidecar(tmp_path, config)
    try:
        [request] = app.wait_for(1)
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=10)
    finally:
        assert sidecar.stop() == 0
    original = json.loads(published)
    assert {k: request.event[k] for k in original} == original
    assert (request.event["queue"], request.event["attempt"]) == (high, 1)
    assert request.headers["metadata.customer-tier"] == "gold"
    [record] = journal_records(tmp_path / "journal")
    assert (record["outcome"], record["driver"]) == ("ack", "gcp_pubsub")
    assert gcp_pubsub_topology.pull(high, wait_s=1) == []  # acked
