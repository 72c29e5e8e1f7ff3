"""``python -m tests.support.moto_atomic_receive``: moto's server with SQS receives made
atomic. A test-support launcher around moto, not a change to it.

moto's ``SQSBackend.receive_message`` checks that a message is visible and marks it received
without a lock, so two ReceiveMessage requests served by two of its threads at one moment can
both take the same message — something real SQS does not do to a message inside its
visibility timeout. A test asserting that two consumers never share a leased message then
fails on the emulator, not on the driver (seen once in a CI run under load). Here each scan
of the queue runs alone (moto's own code, zero wait, under one lock) and a long poll waits
between scans outside the lock, so other requests are served meanwhile and a message that
arrives still ends the poll within ``SCAN_INTERVAL_S``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from moto.server import main
from moto.sqs.models import SQSBackend

SCAN_INTERVAL_S = 0.02

_scan = threading.Lock()
_receive = SQSBackend.receive_message


def _receive_atomically(
    self: SQSBackend, queue_name: str, count: int, wait_seconds_timeout: int,
    visibility_timeout: int, *args: Any, **kwargs: Any,
) -> Any:
    deadline = time.monotonic() + wait_seconds_timeout
    while True:
        with _scan:
            found = _receive(self, queue_name, count, 0, visibility_timeout, *args, **kwargs)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(SCAN_INTERVAL_S)


SQSBackend.receive_message = _receive_atomically  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
