"""Polling for a condition the tests cannot be told about (a log line, a queue count)."""

from __future__ import annotations

import time
from typing import Any


def wait_until(predicate: Any, timeout_s: float = 20, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"condition not met within {timeout_s}s")
