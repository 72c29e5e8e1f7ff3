"""A stand-in for the Kubernetes API server's pod endpoint, over TLS (no kube-apiserver can be
installed here), holding one Pod and taking each request as the API server would:

- HTTPS only, with a certificate signed by the CA written to the service-account directory's
  ``ca.crt`` (a client trusting anything else fails the handshake);
- ``Authorization: Bearer`` the service-account ``token``, else 401 Unauthorized;
- ``GET`` / ``PATCH /api/v1/namespaces/{ns}/pods/{name}`` of its pod, else 404 NotFound;
- a ``PATCH`` body of ``application/merge-patch+json`` or
  ``application/strategic-merge-patch+json`` (for annotations, a map of strings, the two
  merge alike), else 415; applied to the Pod, and the result valid against the Kubernetes
  OpenAPI schema, strict (``tests.helm.manifests.validate_builtin``, the chart tests' check)
  and with ``controller.kubernetes.io/pod-deletion-cost`` a 32-bit integer (the API server's
  pod annotation validation), else 422 Invalid and the Pod unchanged.

``mode`` scripts its failures: ``ok``, ``error`` (every request answers 500) or ``hang``
(no answer until the client gives up). Every request is recorded (``requests``) with when it
arrived and what it got.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

from tests.helm.manifests import validate_builtin
from tests.support.loop_thread import LoopThread
from tests.support.tls import Tls, make_tls

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
_INT = re.compile(r"[+-]?[0-9]+")
Mode = Literal["ok", "error", "hang"]


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    at: float
    status: int
    body: Any = None

    @property
    def cost(self) -> str | None:
        """The deletion cost a PATCH asked for."""
        if not isinstance(self.body, dict):
            return None
        value = self.body.get("metadata", {}).get("annotations", {}).get(DELETION_COST)
        return None if value is None else str(value)


def pod_manifest(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": "6c1f0b1e-test",
                         "labels": {"app.kubernetes.io/name": "priority-pubsub"}},
            "spec": {"containers": [{"name": "app", "image": "registry.example.com/app:1"},
                                    {"name": "priority-pubsub", "image": "priority-pubsub:1"}]}}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def pod_problem(pod: dict[str, Any]) -> str | None:
    """Why the API server would refuse this Pod, or None."""
    try:
        validate_builtin(pod)
    except AssertionError as exc:
        return str(exc)
    cost = (pod["metadata"].get("annotations") or {}).get(DELETION_COST)
    if cost is not None and not (_INT.fullmatch(cost) and -2**31 <= int(cost) < 2**31):
        return f"metadata.annotations[{DELETION_COST}]: Invalid value: must be a 32bit integer"
    return None


def status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "message": message, "reason": reason, "code": code},
                             status=code)


@dataclass
class KubeApiStandIn:
    service_account_dir: Path
    namespace: str = "work"
    name: str = "demo-7d4b9c-x2x9q"
    token: str = "test-token-1"
    mode: Mode = "ok"
    requests: list[ApiRequest] = field(default_factory=list)
    port: int = 0
    tls: Tls | None = None
    pod: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: LoopThread | None = None
    _runner: web.AppRunner | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a pod's container finds in its environment (the downward API's too)."""
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port),
                "POD_NAME": self.name, "NAMESPACE": self.namespace}

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def cost(self) -> str | None:
        with self._lock:
            return (self.pod["metadata"].get("annotations") or {}).get(DELETION_COST)

    def patches(self) -> list[ApiRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == "PATCH"]

    def __enter__(self) -> KubeApiStandIn:
        directory = self.service_account_dir
        self.tls = make_tls(directory.parent / f"{directory.name}-tls")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "ca.crt").write_bytes(self.tls.ca.read_bytes())
        (directory / "token").write_text(self.token + "\n")
        (directory / "namespace").write_text(self.namespace)
        self.pod = pod_manifest(self.namespace, self.name)
        assert pod_problem(self.pod) is None
        self._server = LoopThread("kube-api")
        self._server.start(self._start())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.stop(self._stop())

    async def _start(self) -> None:
        assert self.tls is not None
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls.server_context())
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    async def _handle(self, request: web.Request) -> web.Response:
        body: Any = None
        raw = await request.read()
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
        arrived = time.monotonic()
        if self.mode == "hang":
            self._record(ApiRequest(request.method, request.path, arrived, 0, body))
            await asyncio.Event().wait()  # never answered (cancelled when the test ends)
        response = self._answer(request, body)
        self._record(ApiRequest(request.method, request.path, arrived, response.status, body))
        return response

    def _record(self, seen: ApiRequest) -> None:
        with self._lock:
            self.requests.append(seen)

    def _answer(self, request: web.Request, body: Any) -> web.Response:
        if self.mode == "error":
            return status(500, "InternalError", "etcdserver: request timed out")
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return status(401, "Unauthorized", "Unauthorized")
        if request.path != self.path:
            return status(404, "NotFound", f"pods {request.path.rsplit('/', 1)[-1]!r} not found")
        if request.method == "GET":
            with self._lock:
                return web.json_response(self.pod)
        if request.method != "PATCH":
            return status(405, "MethodNotAllowed", f"{request.method} is not allowed here")
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        if content_type not in PATCH_TYPES:
            return status(415, "UnsupportedMediaType",
                          f"the body of the request was in an unknown format - {content_type}")
        if not isinstance(body, dict):
            return status(400, "BadRequest", "the patch is not a JSON object")
        with self._lock:
            patched = merge_patch(copy.deepcopy(self.pod), body)
            problem = pod_problem(patched)
            if problem is None:
                self.pod = patched
        if problem is not None:
            return status(422, "Invalid", f'Pod "{self.name}" is invalid: {problem}')
        return web.json_response(patched)
