"""The pod's deletion cost from a real sidecar process, against the
Kubernetes API stand-in (``tests.support.kube_api``; no kube-apiserver can be installed
here): the in-cluster environment and service-account files as a pod has them, the default
10 s between patches, and delivery untouched while the API fails or hangs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.helpers import journal_records, publish, total, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.kube_api import KubeApiStandIn
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = pytest.mark.local
PATCHES = "priority_pubsub_deletion_cost_patches_total"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeApiStandIn]:
    with KubeApiStandIn(tmp_path / "serviceaccount") as running:
        yield running


def start(directory: Path, app: RecordingApp, api: KubeApiStandIn) -> SidecarProcess:
    config = local_config(directory, app.url, queues=[{"name": "work"}],
                          kubernetes={"deletion_cost": True,
                                      "service_account_dir": str(api.service_account_dir)})
    write_config(directory, config, "publish.yaml")
    sidecar = SidecarProcess(directory, config, env=api.env)
    sidecar.wait_ready()
    return sidecar


def test_idle_is_0_busy_is_1000_at_most_one_patch_per_10_s(
    tmp_path: Path, api: KubeApiStandIn
) -> None:
    with RecordingApp(behaviour=lambda _: Reply(delay_s=2)) as app:
        sidecar = start(tmp_path, app, api)
        try:
            wait_until(lambda: api.requests, 10)
            publish(tmp_path / "publish.yaml", "work", json.dumps({"n": 1}))
            app.wait_for(1)
            wait_until(lambda: api.cost() == "1000", 5)
            wait_until(lambda: len(journal_records(tmp_path / "journal")) == 1, 10)
            wait_until(lambda: api.cost() == "0", 20)
            metrics = sidecar.metrics()
        finally:
            assert sidecar.stop() == 0
    busy, idle = api.patches()
    assert [r.method for r in api.requests] == ["GET", "PATCH", "PATCH"]
    assert (busy.cost, busy.status, idle.cost, idle.status) == ("1000", 200, "0", 200)
    # idle again 2 s after the busy patch, yet patched only once 10 s had passed
    assert idle.at - busy.at >= 10 - 0.2
    assert total(metrics, PATCHES, result="applied") == 2


@pytest.mark.parametrize("mode", ["error", "hang"])
def test_delivery_is_unaffected_while_the_api_fails_or_hangs(
    tmp_path: Path, api: KubeApiStandIn, mode: str
) -> None:
    api.mode = mode  # type: ignore[assignment]
    count = 20

    def behaviour(_: Received) -> Reply:
        return Reply(delay_s=0.05)

    with RecordingApp(behaviour=behaviour) as app:
        sidecar = start(tmp_path, app, api)
        try:
            published = time.monotonic()
            for n in range(count):
                publish(tmp_path / "publish.yaml", "work", json.dumps({"n": n}))
            wait_until(lambda: len(journal_records(tmp_path / "journal")) == count, 20)
            delivered_in = time.monotonic() - published
            assert sidecar.ready_status() == 200
            # the API's failure is counted (a hang after its 5 s request timeout)
            wait_until(lambda: total(sidecar.metrics(), PATCHES, result="failed") >= 1, 30)
        finally:
            assert sidecar.stop() == 0
    records = journal_records(tmp_path / "journal")
    assert sorted(r["outcome"] for r in records) == ["ack"] * count
    assert sorted(r.event["data"]["n"] for r in app.received) == list(range(count))
    assert delivered_in < 10
    assert api.cost() is None  # nothing reached the pod
    assert "patching this pod's deletion cost failed" in sidecar.logs()
