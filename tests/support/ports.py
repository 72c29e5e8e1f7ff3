"""Free ports on 127.0.0.1 for the servers the tests and the benchmarks start.

Ports come from below Linux's ephemeral range (32768-60999), so no outgoing connection of any
process can take one between the caller picking it and the server binding it (a port from
bind(0) can, and did: "address already in use" under pytest-xdist). Each xdist worker owns
its own slice and walks it round, so a port comes back to a worker only after the ~1,500
others of its slice.
"""

from __future__ import annotations

import os
import random
import socket

_PORTS_FIRST, _PORTS_END = 20000, 32768
_SLICES = 8
_cursor: list[int] = []


def _worker_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    width = (_PORTS_END - _PORTS_FIRST) // _SLICES
    first = _PORTS_FIRST + (index % _SLICES) * width
    return range(first, first + width)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on and that no other test worker will pick."""
    ports = _worker_slice()
    if not _cursor:
        _cursor.append(random.randrange(len(ports)))
    for _ in range(len(ports)):
        port = ports[_cursor[0] % len(ports)]
        _cursor[0] += 1
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port left in {ports}")
