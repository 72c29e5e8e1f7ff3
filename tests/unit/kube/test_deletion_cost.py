"""The pod's deletion cost against a stand-in for the Kubernetes API server
(``tests.support.kube_api``: TLS with the service account's CA, its bearer token, the pod's
path, a merge patch applied and the Pod validated against the Kubernetes schema).

The 10 s between patches is ``min_interval_s`` here (1 s), so the rate under churn is
measured in seconds; the sidecar runs with the default (``tests/e2e/test_deletion_cost_e2e.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from priority_pubsub.core.pod import Pod
from priority_pubsub.kube.deletion_cost import MIN_INTERVAL_S, DeletionCost
from priority_pubsub.settings.config import KubernetesConfig
from priority_pubsub.telemetry.metrics import Metrics
from tests.e2e.helpers import total
from tests.support.kube_api import DELETION_COST, KubeApiStandIn

INTERVAL_S = 1.0
POLL_S = 0.02


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeApiStandIn]:
    with KubeApiStandIn(tmp_path / "serviceaccount") as running:
        yield running


class Busy:
    """What the receiver says: something in flight or not."""

    def __init__(self) -> None:
        self.now = False

    def __call__(self) -> bool:
        return self.now


def cost_keeper(api: KubeApiStandIn, busy: Busy, metrics: Metrics, *,
                timeout_s: float = 5.0) -> DeletionCost:
    return DeletionCost(KubernetesConfig(deletion_cost=True,
                                         service_account_dir=api.service_account_dir),
                        busy, metrics.deletion_cost_patches, pod=Pod(api.name, api.namespace),
                        environ=api.env, min_interval_s=INTERVAL_S, poll_s=POLL_S,
                        timeout_s=timeout_s)


async def until(predicate: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def patches(metrics: Metrics, result: str) -> float:
    return total(metrics.render().decode(), "priority_pubsub_deletion_cost_patches_total",
                 result=result)


def test_the_default_interval_is_ten_seconds() -> None:
    assert MIN_INTERVAL_S == 10.0


async def test_idle_is_0_and_busy_is_1000_as_the_api_server_takes_it(
    api: KubeApiStandIn,
) -> None:
    busy, metrics = Busy(), Metrics()
    keeper = cost_keeper(api, busy, metrics)
    await keeper.start()
    try:
        await until(lambda: api.requests)
        await asyncio.sleep(0.3)
        # idle, and no annotation is a cost of 0: read, not patched
        assert [(r.method, r.path, r.status) for r in api.requests] == [("GET", api.path, 200)]
        busy.now = True
        await until(lambda: api.cost() == "1000")
        busy.now = False
        await until(lambda: patches(metrics, "applied") == 2, timeout_s=INTERVAL_S + 5)
    finally:
        await keeper.stop()
    assert api.cost() == "0"
    first, second = api.patches()
    assert (first.cost, first.status, second.cost, second.status) == ("1000", 200, "0", 200)
    assert second.at - first.at >= INTERVAL_S - 0.1  # the client's clock starts earlier
    assert patches(metrics, "applied") == 2
    assert patches(metrics, "failed") == 0


async def test_at_most_one_patch_per_interval_under_churn(api: KubeApiStandIn) -> None:
    busy, metrics = Busy(), Metrics()
    keeper = cost_keeper(api, busy, metrics)
    await keeper.start()
    churn_s = 4 * INTERVAL_S
    try:
        started = time.monotonic()
        while time.monotonic() - started < churn_s:  # busy/idle every 30-60 ms
            busy.now = not busy.now
            await asyncio.sleep(0.03 if busy.now else 0.06)
        churned = time.monotonic() - started
        busy.now = False
        await until(lambda: api.cost() == "0", timeout_s=INTERVAL_S + 5)
        await asyncio.sleep(INTERVAL_S + 0.5)  # settled: nothing more to patch
    finally:
        await keeper.stop()
    sent = api.patches()
    assert all(r.status == 200 for r in sent)
    assert len(sent) >= 3  # the churn did ask for patches again and again
    # one per interval at most: the first at once, then one per full interval of churn, and
    # the last (back to idle) at most one interval after the churn ended
    assert len(sent) <= churned / INTERVAL_S + 2
    gaps = [b.at - a.at for a, b in itertools.pairwise(sent)]
    assert min(gaps) >= INTERVAL_S - 0.1, gaps
    assert [r.cost for r in sent][-1] == "0"
    assert all(a.cost != b.cost for a, b in itertools.pairwise(sent))  # changes only


@pytest.mark.parametrize("mode", ["error", "hang"])
async def test_a_failing_or_hanging_api_is_counted_and_tried_again(
    api: KubeApiStandIn, mode: str,
) -> None:
    busy, metrics = Busy(), Metrics()
    api.mode = mode  # type: ignore[assignment]
    busy.now = True
    # The patch's own timeout ends a hanging call; it must also fit a TLS handshake and a
    # patch on a loaded machine (0.3 s did not at load 18), and the waits below follow from
    # it: an attempt every interval, each ending within the timeout.
    timeout_s = 2.0
    keeper = cost_keeper(api, busy, metrics, timeout_s=timeout_s)
    await keeper.start()
    try:
        await until(lambda: patches(metrics, "failed") >= 2,
                    timeout_s=3 * (INTERVAL_S + timeout_s) + 5)
        assert api.cost() is None
        api.mode = "ok"
        await until(lambda: patches(metrics, "applied") == 1,
                    timeout_s=2 * (INTERVAL_S + timeout_s) + 5)
    finally:
        await keeper.stop()
    assert api.cost() == "1000"
    tried = api.patches()
    gaps = [b.at - a.at for a, b in itertools.pairwise(tried)]
    assert min(gaps) >= INTERVAL_S - 0.1, gaps  # failures are not retried faster
    assert patches(metrics, "applied") == 1


async def test_without_credentials_it_stays_off(tmp_path: Path) -> None:
    metrics = Metrics()
    keeper = DeletionCost(KubernetesConfig(deletion_cost=True,
                                           service_account_dir=tmp_path / "none"),
                          Busy(), metrics.deletion_cost_patches, pod=Pod("p", "work"),
                          environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                                   "KUBERNETES_SERVICE_PORT": "1"})
    await keeper.start()  # one warning, no exception, no task
    await keeper.stop()
    assert patches(metrics, "failed") == 0


async def test_the_stand_in_refuses_what_the_api_server_refuses(api: KubeApiStandIn) -> None:
    """So that the tests above could fail: a wrong token, path, content type or a cost that
    is not a 32-bit integer is refused, and plain HTTP or another CA never reaches it."""
    context = ssl.create_default_context(cafile=api.service_account_dir / "ca.crt")
    base = f"https://127.0.0.1:{api.port}"
    good = {"Authorization": f"Bearer {api.token}",
            "Content-Type": "application/merge-patch+json"}

    def cost(value: str) -> dict[str, object]:
        return {"metadata": {"annotations": {DELETION_COST: value}}}

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        async def patch(body: object, path: str = api.path, **headers: str) -> int:
            async with session.patch(base + path, json=body, headers={**good, **headers}) as r:
                return r.status

        assert await patch(cost("5")) == 200
        assert await patch(cost("-2147483648")) == 200
        assert await patch(cost("2147483648")) == 422
        assert await patch(cost("1e3")) == 422
        assert await patch(cost("busy")) == 422
        assert await patch({"metadata": {"annotations": {DELETION_COST: 1000}}}) == 422
        assert await patch({"spec": {"containers": "none"}}) == 422  # the schema, strict
        assert await patch(cost("7"), Authorization="Bearer wrong") == 401
        assert await patch(cost("7"), path="/api/v1/namespaces/work/pods/other") == 404
        assert await patch(cost("7"), **{"Content-Type": "application/json"}) == 415
    assert api.cost() == "-2147483648"
    async with aiohttp.ClientSession() as session:  # the system's CAs: not this cluster's
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(base + api.path)
