"""How long a process has had the chance to run: the time passed less the time it waited,
runnable, for a CPU (Linux's ``/proc/PID/schedstat``).

A start-up deadline in wall-clock seconds measures the machine's load as much as the process:
at load 20 on two cores a sidecar that is ready in 3 s on a quiet machine took over 20 s of
wall clock. Counted in its own time the same deadline means the same on both, and a process
that hangs (waiting on a socket, not for a CPU) still runs out of it at the usual pace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def run_queue_wait_s(pid: int) -> float:
    """Seconds the process's main thread spent runnable but not running (0 where the kernel
    does not say, so the deadline falls back to the wall clock)."""
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text().split()
        return int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class OwnClock:
    """Seconds since it was made, less the time ``pid`` waited for a CPU meanwhile."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = time.monotonic()
        self._waited_before = run_queue_wait_s(pid)

    def wall_s(self) -> float:
        return time.monotonic() - self.started

    def elapsed_s(self) -> float:
        return self.wall_s() - (run_queue_wait_s(self.pid) - self._waited_before)


def wait_in_own_time(pid: int, predicate: Callable[[], bool], timeout_s: float,
                     interval_s: float = 0.05) -> None:
    """Until ``predicate()``, for ``timeout_s`` of ``pid``'s own time; ``TimeoutError``
    saying both clocks after that."""
    clock = OwnClock(pid)
    while clock.elapsed_s() < timeout_s:
        if predicate():
            return
        time.sleep(interval_s)
    raise TimeoutError(f"not in {timeout_s}s of its own time ({clock.wall_s():.0f} s on the clock)")
