"""The loop watchdog notices a blocked event loop from its own thread."""

from __future__ import annotations

import asyncio
import time

from priority_pubsub.telemetry.watchdog import LoopWatchdog


async def test_blocked_loop_is_reported_and_recovers() -> None:
    reported: list[float] = []
    watchdog = LoopWatchdog(stall_after_s=0.3, tick_s=0.05,
                            on_stall=lambda: reported.append(time.monotonic()))
    await watchdog.start()
    try:
        await asyncio.sleep(0.2)
        assert not watchdog.stalled
        time.sleep(0.8)  # block the loop on purpose
        assert watchdog.stalled
        await asyncio.sleep(0.2)
        assert watchdog.stalls == 1
        assert len(reported) == 1  # once per stall: what the stalls metric counts
        await asyncio.sleep(1.0)  # three stall lengths after recovery
        assert not watchdog.stalled
    finally:
        await watchdog.stop()
