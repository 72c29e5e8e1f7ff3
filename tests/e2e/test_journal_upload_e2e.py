"""journal.upload end to end, on each store's test server (moto for S3,
gcp-storage-emulator for GCS, Azurite for Azure Blob): two replicas of the local driver
deliver 2,000 messages with a journal file rotated every ~220 records; every ack is in the
uploaded objects exactly once, under the key its file's first record names, and a clean
stop leaves no journal file on local disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.upload_support import Fleet, acks
from tests.support.app import RecordingApp
from tests.support.object_stores import KINDS, Kind, StoreServers
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.upload, pytest.mark.timeout(300)]
MESSAGES = 2000


@pytest.mark.parametrize("kind", KINDS)
def test_two_replicas_ship_every_ack_exactly_once(
    kind: Kind, store_servers: StoreServers, tmp_path: Path
) -> None:
    server = store_servers.get(kind)
    with RecordingApp() as app:
        fleet = Fleet(tmp_path, server, server.new_bucket(), app)
        published = fleet.publish(MESSAGES)
        replicas = [fleet.start(name) for name in ("pod-0", "pod-1")]
        for sidecar in replicas:
            sidecar.wait_ready()
        app.wait_for(MESSAGES, timeout_s=180)
        wait_until(lambda: sum(1 for r in app.received) >= MESSAGES)
        for sidecar in replicas:
            assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    assert fleet.local_files() == []  # every file uploaded and removed
    landed = fleet.landed()
    counted = acks(landed)
    assert sorted(counted) == sorted(published)
    assert set(counted.values()) == {1}
    replicas_seen = {key.rsplit("/", 1)[1].split("-")[1] for key in landed}
    assert replicas_seen == {"pod_0", "pod_1"}
    assert len(landed) >= 6  # rotated: several files per replica
    logs = "".join(s.logs() for s in fleet.sidecars.values())
    assert "journal upload failed" not in logs
