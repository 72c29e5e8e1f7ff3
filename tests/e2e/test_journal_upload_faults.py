"""journal.upload when the network and the process fail, on each store's test server behind
a proxy (tests/support/store_proxy.py): a flipped byte in an upload, the store down for 10 s,
the spool bound reached while it is down, and a kill -9 in the middle of an upload."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.helpers import total
from tests.e2e.upload_support import Fleet, acks
from tests.support.app import RecordingApp
from tests.support.object_stores import KINDS, Kind, StoreServers
from tests.support.sidecar import SidecarProcess, cli
from tests.support.store_proxy import StoreProxy, store_proxy
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.upload, pytest.mark.timeout(300)]
FAILURES = "priority_pubsub_journal_upload_failures_total"
UPLOADED = "priority_pubsub_journal_uploaded_files_total"
DROPPED = "priority_pubsub_journal_dropped_files_total"


@pytest.fixture
def app() -> Iterator[RecordingApp]:
    with RecordingApp() as running:
        yield running


@pytest.fixture
def proxied(request: pytest.FixtureRequest, store_servers: StoreServers,
            tmp_path: Path, app: RecordingApp) -> Iterator[tuple[Fleet, StoreProxy]]:
    kind: Kind = request.param
    server = store_servers.get(kind)
    with store_proxy(server.port) as proxy:
        fleet = Fleet(tmp_path, server, server.new_bucket(), app,
                      env=server.env_through(proxy.port))
        yield fleet, proxy
        for sidecar in fleet.sidecars.values():
            if sidecar.process.poll() is None:
                sidecar.kill()
                sidecar.wait()


def _start(fleet: Fleet, replica: str = "pod-0", **upload: object) -> SidecarProcess:
    sidecar = fleet.start(replica, **upload)
    sidecar.wait_ready()
    return sidecar


def _logged(sidecar_logs: str, event: str) -> list[dict[str, object]]:
    found = []
    for line in sidecar_logs.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event:
            found.append(record)
    return found


@pytest.mark.parametrize("proxied", KINDS, indirect=True)
def test_a_flipped_byte_keeps_the_file_and_the_retry_lands_it(
    proxied: tuple[Fleet, StoreProxy], app: RecordingApp,
) -> None:
    """S3 and Azure store what they got: the digest read back differs (``verify``). The GCS
    client also sends a CRC32C with the upload, so GCS refuses the body (``error``) before
    the read-back could."""
    fleet, proxy = proxied
    reason = "error" if fleet.server.kind == "gcs" else "verify"
    proxy.flip(2)  # the first two uploads reach the store with a byte inverted
    published = fleet.publish(600)
    sidecar = _start(fleet)
    app.wait_for(600, timeout_s=120)
    wait_until(lambda: total(sidecar.metrics(), FAILURES, reason=reason) >= 2, timeout_s=60)
    assert sidecar.stop() == 0
    assert proxy.flipped == 2
    failed = _logged(sidecar.logs(), "journal upload failed, retrying")
    assert [f["reason"] for f in failed] == [reason, reason]
    if reason == "error":
        assert all("CRC32C" in str(f["error"]) for f in failed)
    uploaded = {str(u["file"]) for u in _logged(sidecar.logs(), "journal file uploaded")}
    assert {str(f["file"]) for f in failed} <= uploaded  # kept, then landed on a retry
    assert fleet.local_files() == []
    counted = acks(fleet.landed())
    assert sorted(counted) == sorted(published)
    assert set(counted.values()) == {1}


@pytest.mark.parametrize("proxied", KINDS, indirect=True)
def test_the_store_down_for_10s_never_stops_delivery_and_every_file_arrives_after(
    proxied: tuple[Fleet, StoreProxy], app: RecordingApp,
) -> None:
    fleet, proxy = proxied
    published = fleet.publish(400)
    sidecar = _start(fleet)
    app.wait_for(400, timeout_s=120)
    wait_until(lambda: total(sidecar.metrics(), UPLOADED) >= 1, timeout_s=60)
    proxy.cut()
    down_from_ms = int(time.time() * 1000)
    published += fleet.publish(600)  # delivered while the store is down
    app.wait_for(1000, timeout_s=60)
    assert sidecar.ready_status() == 200
    wait_until(lambda: total(sidecar.metrics(), FAILURES, reason="error") >= 1, timeout_s=30)
    wait_until(lambda: total(sidecar.metrics(), "priority_pubsub_journal_spool_bytes") > 0,
               timeout_s=10)  # the spool's figures are read at most once a second
    time.sleep(max(0.0, down_from_ms / 1000 + 10 - time.time()))
    down_until_ms = int(time.time() * 1000)
    proxy.restore()
    assert sidecar.stop() == 0
    assert fleet.local_files() == []
    landed = fleet.landed()
    counted = acks(landed)
    assert sorted(counted) == sorted(published)
    assert set(counted.values()) == {1}
    during = [r for records in landed.values() for r in records
              if down_from_ms <= r["settled_ms"] < down_until_ms and r["outcome"] == "ack"]
    assert len(during) >= 500  # journaled throughout the outage, uploaded after it


@pytest.mark.parametrize("proxied", ["s3"], indirect=True)
def test_past_the_spool_bound_the_oldest_files_are_dropped_and_delivery_goes_on(
    proxied: tuple[Fleet, StoreProxy], app: RecordingApp,
) -> None:
    fleet, proxy = proxied
    proxy.cut()  # the store is down from the start
    fleet.publish(1500)
    sidecar = _start(fleet, max_local_mb=0.12, stop_timeout_s=1)  # ~2 files of ~50 KB
    app.wait_for(1500, timeout_s=120)  # delivery goes on
    wait_until(lambda: total(sidecar.metrics(), DROPPED) >= 3, timeout_s=30)
    metrics = sidecar.metrics()
    assert sidecar.stop() == 0
    dropped = [str(d["file"]) for d in _logged(sidecar.logs(), "journal file dropped unsent: "
                                               "the local spool is over "
                                               "journal.upload.max_local_mb")]
    assert len(dropped) == total(metrics, DROPPED)
    assert len(set(dropped)) == len(dropped)  # one line each
    left = [p.name for p in fleet.local_files()]
    assert left
    assert not set(left) & set(dropped)
    seq = re.compile(r"-(\d{6})\.jsonl")
    assert max(int(seq.search(d)[1]) for d in dropped) < min(  # type: ignore[index]
        int(seq.search(name)[1]) for name in left)  # type: ignore[index]  (oldest first)
    assert total(metrics, "priority_pubsub_journal_dropped_bytes_total") > 0


@pytest.mark.parametrize("proxied", KINDS, indirect=True)
def test_kill_9_mid_upload_then_a_restart_lands_every_file_exactly_once(
    proxied: tuple[Fleet, StoreProxy], app: RecordingApp,
) -> None:
    fleet, proxy = proxied
    proxy.cut()  # nothing lands while the messages are delivered: the closed files wait
    published = fleet.publish(1500)
    sidecar = _start(fleet, stop_timeout_s=1, retry_initial_s=0.2, retry_max_s=1)
    app.wait_for(1500, timeout_s=120)
    time.sleep(1)  # the last acks settled and journaled
    proxy.slow(0.05)  # ~0.4 s an upload: a backlog to be killed in the middle of
    proxy.restore()
    wait_until(lambda: proxy.uploading > 0, timeout_s=30, interval_s=0.005)
    sidecar.kill()
    sidecar.wait()
    proxy.slow(0)
    journal = fleet.journal("pod-0")
    closed_before = {p.name for p in journal.glob("journal-*.jsonl")}
    assert closed_before, "the kill came after every upload"
    restarted = _start(fleet)
    wait_until(lambda: not list(journal.glob("journal-*.jsonl")), timeout_s=60)
    assert restarted.stop() == 0
    assert fleet.local_files() == []
    landed = fleet.landed()
    names = [key.rsplit("/", 1)[1] for key in landed]
    assert len(names) == len(set(names))
    assert {f"{name}.gz" for name in closed_before} <= set(names)
    counted = acks(landed)
    assert sorted(counted) == sorted(published)
    assert set(counted.values()) == {1}
    if fleet.server.kind == "s3":  # and the report over the bucket counts each message once
        report = cli("report", fleet.url + "/", "--out", str(fleet.directory / "report"),
                     "--json", env=fleet.server.env, timeout_s=600)
        assert report.returncode == 0, report.stderr[-3000:]
        summary = json.loads(report.stdout)
        assert summary["messages"] == len(published)
        assert summary["files"]["new"] == len(landed)


@pytest.mark.parametrize("proxied", ["s3"], indirect=True)
def test_pause_delivery_holds_new_work_while_the_spool_is_full_and_resumes_after(
    proxied: tuple[Fleet, StoreProxy], app: RecordingApp,
) -> None:
    """``when_full: pause_delivery``, with the store's keys in the config (a secret never
    printed): the store down, the spool fills, this replica drains (``/readyz`` says why)
    and takes nothing new; back under the bound once the store is back, it delivers the
    rest, and every file lands."""
    fleet, proxy = proxied
    secret = "not-printed-secret-access-key"
    proxy.cut()
    published = fleet.publish(3000)
    sidecar = _start(fleet, max_local_mb=0.12, when_full="pause_delivery",
                     access_key_id="AKIDEXAMPLE", secret_access_key=secret)
    wait_until(lambda: sidecar.ready_status() == 503, timeout_s=60)
    assert "journal spool over journal.upload.max_local_mb" in httpx.get(
        f"{sidecar.ops_url}/readyz", timeout=5).text
    held = len(app.received)
    assert held < 3000
    time.sleep(2)
    assert len(app.received) <= held + 64  # what was in flight, no more
    assert total(sidecar.metrics(), DROPPED) == 0
    proxy.restore()
    app.wait_for(3000, timeout_s=120)
    wait_until(lambda: sidecar.ready_status() == 200, timeout_s=30)
    assert sidecar.stop() == 0
    assert secret not in sidecar.logs()
    counted = acks(fleet.landed())
    assert sorted(counted) == sorted(published)
    assert set(counted.values()) == {1}
