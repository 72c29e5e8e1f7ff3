"""This pod's deletion cost, kept to whether it is busy, so that a scale-in takes idle pods
first (``kubernetes.deletion_cost``).

A ReplicaSet that scales in deletes the pods with the lowest
``controller.kubernetes.io/pod-deletion-cost`` first. The sidecar keeps its own pod's at 0
while nothing is in flight and at 1000 while a delivery is, so KEDA's scale-in finishes
nothing early where an idle pod could go instead. Kubernetes honours the cost best-effort (a
pod not yet running or ready still goes first, and when all are busy one of them goes), and
warns that updating it often loads the API server: so it is patched only when
idle/busy changes, and never twice within ``min_interval_s`` (10 s). A state that flips
faster is caught up with at the next allowed patch.

``busy`` is polled every ``poll_s`` (a cheap read of the receiver), so nothing on the
delivery path waits for or knows about this; a patch that fails or does not answer within
``timeout_s`` is logged and counted (``priority_pubsub_deletion_cost_patches{result="failed"}``)
and tried again after the interval. At start the pod is read (``GET``): a pod that already
carries the right cost (none counts as 0) is not patched.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import Callable, Mapping

from prometheus_client import Counter

from priority_pubsub.core.pod import Pod
from priority_pubsub.kube.api import InCluster, KubeApiError, PodApi
from priority_pubsub.settings.config import KubernetesConfig
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)
ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
IDLE_COST = 0
BUSY_COST = 1000
MIN_INTERVAL_S = 10.0
"""The least time between two patches (a start of one to the start of the next)."""
POLL_S = 0.5
REQUEST_TIMEOUT_S = 5.0
"""A request unanswered this long is a failure: the next try comes after the interval."""


class DeletionCost:
    """A part of the sidecar: ``start`` reads the credentials and runs the loop in its own
    task; without credentials or a pod name it logs one line and does nothing (the cost is a
    hint, not worth a crash loop)."""

    def __init__(
        self,
        config: KubernetesConfig,
        busy: Callable[[], bool],
        patches: Counter,
        *,
        pod: Pod | None = None,
        environ: Mapping[str, str] = os.environ,
        min_interval_s: float = MIN_INTERVAL_S,
        poll_s: float = POLL_S,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        """``patches``: the ``priority_pubsub_deletion_cost_patches`` counter (a ``result``
        label); ``pod`` and ``environ``: where this process runs (``Pod.current()``, the
        process' environment)."""
        self._config = config
        self._busy = busy
        self._applied_count = patches.labels("applied")
        self._failed_count = patches.labels("failed")
        self._pod = pod
        self._environ = environ
        self._min_interval_s = min_interval_s
        self._poll_s = poll_s
        self._timeout_s = timeout_s
        self._api: PodApi | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        pod = self._pod or Pod.current()
        try:
            cluster = InCluster.load(self._config.service_account_dir, self._environ)
        except KubeApiError as exc:
            log.warning("kubernetes.deletion_cost is on but the API cannot be reached: off",
                        error=str(exc))
            return
        if not pod.name:
            log.warning("kubernetes.deletion_cost is on but POD_NAME is not set (the "
                        "downward API's metadata.name): off")
            return
        self._api = PodApi(cluster, pod.namespace, pod.name, self._timeout_s)
        await self._api.start()
        self._task = asyncio.create_task(self._run(self._api), name="deletion-cost")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def _run(self, api: PodApi) -> None:
        loop = asyncio.get_running_loop()
        carried = await self._read(api)
        """The cost the pod carries, as far as known (None: unknown, e.g. a patch failed)."""
        last_patch = -math.inf
        while True:
            wanted = BUSY_COST if self._busy() else IDLE_COST
            if wanted != carried and loop.time() - last_patch >= self._min_interval_s:
                last_patch = loop.time()
                carried = wanted if await self._patch(api, wanted) else None
            await asyncio.sleep(self._poll_s)

    async def _read(self, api: PodApi) -> int | None:
        try:
            value = (await api.annotations()).get(ANNOTATION)
        except KubeApiError as exc:
            log.warning("reading this pod's deletion cost failed", error=str(exc))
            return None
        if value is None:
            return IDLE_COST  # Kubernetes' default
        try:
            return int(value)
        except ValueError:
            return None

    async def _patch(self, api: PodApi, cost: int) -> bool:
        try:
            await api.patch_annotations({ANNOTATION: str(cost)})
        except KubeApiError as exc:
            self._failed_count.inc()
            log.warning("patching this pod's deletion cost failed (best-effort: delivery "
                        "carries on)", cost=cost, error=str(exc))
            return False
        self._applied_count.inc()
        log.debug("deletion cost set", cost=cost)
        return True
