"""Where this process runs, as Kubernetes' downward API tells it: the pod's name and namespace
in the variables daprd reads (dapr ``pkg/runtime/runtime.go``: ``POD_NAME``;
``pkg/security/security.go`` ``CurrentNamespace``: ``NAMESPACE``, ``default`` when unset).

Read here and nowhere else, so Dapr's metadata templates (``{podName}``, ``{namespace}``) and
everything else that names this replica (the journal's files, the monitor) agree on who it is.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

POD_NAME_ENV = "POD_NAME"
NAMESPACE_ENV = "NAMESPACE"
DEFAULT_NAMESPACE = "default"
"""daprd's namespace when ``NAMESPACE`` is not set at all (set but empty stays empty)."""


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    """``POD_NAME``; empty when unset (daprd treats both alike)."""
    namespace: str

    @classmethod
    def current(cls) -> Pod:
        return cls(os.environ.get(POD_NAME_ENV, ""),
                   os.environ.get(NAMESPACE_ENV, DEFAULT_NAMESPACE))

    @property
    def replica(self) -> str:
        """This replica's name: the pod's, else the host's (outside Kubernetes, or a pod
        spec without the downward API; with ``hostNetwork`` the host name is the node's,
        shared by every pod on it, which is why the pod's name comes first)."""
        return self.name or socket.gethostname()
