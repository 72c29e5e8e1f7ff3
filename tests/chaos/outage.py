"""One broker outage under a running sidecar, as the restart suites stage it: the broker killed,
the sidecar's readiness timed until it turns, the broker kept down for the outage's length
(the sidecar must live through it), then started again."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.e2e.helpers import wait_until
from tests.support.sidecar import SidecarProcess


def broker_outage(sidecar: SidecarProcess, kill: Callable[[], None], start: Callable[[], None],
                  down_s: float, *, turned: Callable[[int], bool] = lambda s: s == 503,
                  turn_timeout_s: float = 30) -> tuple[float, float]:
    """Kill the broker, wait until ``turned(readiness status)``, keep it down ``down_s`` in
    all, check the sidecar is still running, start the broker. Returns how long readiness
    took to turn and the ``time.monotonic()`` of the restart."""
    kill()
    killed = time.monotonic()
    wait_until(lambda: turned(sidecar.ready_status()), timeout_s=turn_timeout_s,
               interval_s=0.1)
    not_ready_after_s = time.monotonic() - killed
    time.sleep(max(0.0, down_s - not_ready_after_s))
    assert sidecar.process.poll() is None, sidecar.logs()[-3000:]
    start()
    return not_ready_after_s, time.monotonic()
