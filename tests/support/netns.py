"""Two network namespaces joined by a veth pair, for partition tests: the sidecar (and its
app) in one, the broker in the other, addresses in a private /30 that exists inside the two
namespaces only (nothing is added to the machine's own namespace, no traffic leaves it).

``black_hole()`` drops every packet on both ends (a ``pfifo`` queue of length 0 on each veth:
no RST, no ICMP, calls just hang — what a silently failing network does); ``heal()`` removes
it. Code runs inside a namespace in two ways: subprocesses through ``ip netns exec``, and
callables on a thread of this process that entered the namespace (``setns`` acts on the
calling thread only; threads it starts inherit it), so an in-process app or client can
live there too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from tests.support.servers import skip_or_fail

T = TypeVar("T")
CLONE_NEWNET = 0x40000000


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def _enter(namespace: str) -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns({namespace}): {os.strerror(error)}")
    finally:
        os.close(fd)


@dataclass
class Namespace:
    name: str
    address: str
    device: str
    _threads: ThreadPoolExecutor | None = field(default=None, repr=False)

    def command(self, *argv: str) -> list[str]:
        """``argv`` as a command run inside this namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def call(self, function: Callable[[], T], timeout_s: float = 120) -> T:
        """Run ``function`` on this namespace's own thread and return its result."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(1, thread_name_prefix=f"netns-{self.name}",
                                               initializer=_enter, initargs=(self.name,))
        return self._threads.submit(function).result(timeout_s)

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)


@dataclass
class Partition:
    """The sidecar's namespace, the broker's, and the link between them."""

    side: Namespace
    broker: Namespace

    def black_hole(self) -> None:
        for end in (self.side, self.broker):
            _ip("netns", "exec", end.name, "tc", "qdisc", "add", "dev", end.device, "root",
                "pfifo", "limit", "0")

    def heal(self) -> None:
        for end in (self.side, self.broker):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "exec", end.name, "tc", "qdisc", "del", "dev", end.device,
                    "root")


def _netns_supported() -> str | None:
    """Why partition tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "partition tests need root (ip netns)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "partition tests need iproute2 (ip, tc)"
    probe = f"pp-probe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"no network namespace support here: {exc}"
    _ip("netns", "del", probe)
    return None


@contextlib.contextmanager
def partition() -> Iterator[Partition]:
    """Fresh namespaces and veth, removed again afterwards (with whatever runs in them)."""
    reason = _netns_supported()
    if reason is not None:
        skip_or_fail(reason)
    tag = uuid.uuid4().hex[:6]
    subnet = f"10.{random.randint(64, 127)}.{random.randint(0, 255)}"
    side = Namespace(f"pp-side-{tag}", f"{subnet}.1", f"pps{tag}")
    broker = Namespace(f"pp-broker-{tag}", f"{subnet}.2", f"ppb{tag}")
    try:
        for ns in (side, broker):
            _ip("netns", "add", ns.name)
        _ip("link", "add", side.device, "type", "veth", "peer", "name", broker.device)
        for ns in (side, broker):
            _ip("link", "set", ns.device, "netns", ns.name)
            _ip("netns", "exec", ns.name, "ip", "addr", "add", f"{ns.address}/30", "dev",
                ns.device)
            _ip("netns", "exec", ns.name, "ip", "link", "set", ns.device, "up")
            _ip("netns", "exec", ns.name, "ip", "link", "set", "lo", "up")
        yield Partition(side, broker)
    finally:
        for ns in (side, broker):
            ns.close()
            # processes still inside would keep it alive: the tests stop theirs first
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", ns.name)
