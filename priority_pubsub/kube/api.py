"""This pod's object in the Kubernetes API, with the credentials every pod is given.

The address and the credentials are found as client-go's ``rest.InClusterConfig`` finds them:
``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``, and in the service-account
directory (``kubernetes.service_account_dir``, by default where Kubernetes mounts it) the
bearer ``token`` and the cluster's CA, ``ca.crt``, the only CA the connection trusts. The token
is read again for each request: a projected token is rewritten by the kubelet before it
expires (an hour by default), and one read at start would stop working.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

HOST_ENV = "KUBERNETES_SERVICE_HOST"
PORT_ENV = "KUBERNETES_SERVICE_PORT"
TOKEN_FILE = "token"
CA_FILE = "ca.crt"
MERGE_PATCH = "application/merge-patch+json"
"""RFC 7386: the body is the part of the object to change (``null`` deletes a key)."""


class KubeApiError(Exception):
    """A request that did not succeed, in one line (never the token)."""


@dataclass(frozen=True, slots=True)
class InCluster:
    """Where the API server is and how this pod proves who it is."""

    base_url: str
    token_path: Path
    ssl: ssl.SSLContext

    @classmethod
    def load(cls, directory: Path, environ: Mapping[str, str] = os.environ) -> InCluster:
        """Raises ``KubeApiError`` naming what is missing (not in a pod, no token mounted)."""
        host, port = environ.get(HOST_ENV, ""), environ.get(PORT_ENV, "")
        if not host or not port:
            raise KubeApiError(f"{HOST_ENV} and {PORT_ENV} are not set (not in a pod?)")
        token_path = directory / TOKEN_FILE
        if not token_path.is_file():
            raise KubeApiError(f"no service-account token at {token_path} (is one mounted "
                               "into this container?)")
        try:
            context = ssl.create_default_context(cafile=directory / CA_FILE)
        except (OSError, ssl.SSLError) as exc:
            raise KubeApiError(f"cannot load the cluster's CA {directory / CA_FILE}: "
                               f"{exc}") from None
        if ":" in host:  # an IPv6 address
            host = f"[{host}]"
        return cls(f"https://{host}:{port}", token_path, context)

    def token(self) -> str:
        try:
            return self.token_path.read_text().strip()
        except OSError as exc:
            raise KubeApiError(f"cannot read {self.token_path}: {exc.strerror}") from None


class PodApi:
    """Read and merge-patch one pod: ``GET`` / ``PATCH /api/v1/namespaces/{ns}/pods/{name}``
    (RBAC: ``get`` and ``patch`` on ``pods``)."""

    def __init__(self, cluster: InCluster, namespace: str, name: str, timeout_s: float) -> None:
        self._cluster = cluster
        self.url = (f"{cluster.base_url}/api/v1/namespaces/{quote(namespace, safe='')}"
                    f"/pods/{quote(name, safe='')}")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._cluster.ssl, limit=1),
            timeout=self._timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def annotations(self) -> dict[str, str]:
        """The pod's annotations now."""
        pod = await self._request("GET")
        found = pod.get("metadata", {}).get("annotations") or {}
        return {str(key): str(value) for key, value in found.items()}

    async def patch_annotations(self, annotations: Mapping[str, str]) -> None:
        """Set these annotations, leaving the others as they are."""
        await self._request("PATCH", {"metadata": {"annotations": dict(annotations)}})

    async def _request(self, method: str, body: Mapping[str, Any] | None = None
                       ) -> dict[str, Any]:
        assert self._session is not None, "start() first"
        headers = {"Authorization": f"Bearer {self._cluster.token()}",
                   "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = MERGE_PATCH
            data = json.dumps(body).encode()
        try:
            async with self._session.request(method, self.url, headers=headers,
                                             data=data) as response:
                text = await response.text()
                if response.status >= 300:
                    raise KubeApiError(f"{method} {self.url}: HTTP {response.status}"
                                       f"{_status_message(text)}")
        except aiohttp.ClientError as exc:
            raise KubeApiError(f"{method} {self.url}: {type(exc).__name__}: {exc}") from None
        except TimeoutError:
            raise KubeApiError(f"{method} {self.url}: no answer within "
                               f"{self._timeout.total:g} s") from None
        try:
            loaded = json.loads(text)
        except ValueError:
            raise KubeApiError(f"{method} {self.url}: the answer is not JSON") from None
        return loaded if isinstance(loaded, dict) else {}


def _status_message(text: str) -> str:
    """The API server's ``Status`` message, when the body is one (``: ...``), else nothing."""
    try:
        status = json.loads(text)
    except ValueError:
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return f": {str(message)[:300]}" if message else ""
