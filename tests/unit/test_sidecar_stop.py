"""The sidecar's exit does not wait on a part whose stop hangs (a driver closing on a
connection the broker's restart left half-open): it gives the part ``PART_STOP_BOUND_S``,
says so, and stops the parts after it."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from priority_pubsub import sidecar as sidecar_module
from tests.support.in_process_sidecar import local_sidecar


async def _hang() -> None:
    await asyncio.Event().wait()


async def test_a_hanging_driver_close_is_given_up_and_the_later_parts_still_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sidecar_module, "PART_STOP_BOUND_S", 0.2)
    sidecar = local_sidecar(tmp_path)
    for index, part in enumerate(sidecar._parts):
        if part.name == "driver":
            sidecar._parts[index] = sidecar_module.Part("driver", part.start, _hang)
    server_stopped = asyncio.Event()
    real_server_stop = sidecar.server.stop

    async def server_stop() -> None:
        await real_server_stop()
        server_stopped.set()

    monkeypatch.setattr(sidecar.server, "stop", server_stop)
    logs = await _run_until_connected_then_stop(sidecar)
    await sidecar.driver.close()
    assert server_stopped.is_set()
    assert {"event": "part did not stop in time; going on without it", "part": "driver",
            "within_s": 0.2, "log_level": "warning"} in logs


async def _run_until_connected_then_stop(
    sidecar: sidecar_module.Sidecar,
) -> list[MutableMapping[str, Any]]:
    """Run it until its driver connected (polled: nothing else tells), then stop it; the
    stop's logs, the stop itself bounded by 10 s."""
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    try:
        for _ in range(1000):
            if sidecar.connected:
                break
            await asyncio.sleep(0.02)
        assert sidecar.connected
    finally:
        sidecar.request_stop()
        with structlog.testing.capture_logs() as logs:
            await asyncio.wait_for(running, 10)
    return logs


async def test_the_receiver_stop_is_not_cut_by_the_part_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receiver's stop is bounded by ``shutdown.grace_s`` (or runs to the end with
    ``mode: finish``), never by the part bound."""
    monkeypatch.setattr(sidecar_module, "PART_STOP_BOUND_S", 0.05)
    sidecar = local_sidecar(tmp_path)
    finished = asyncio.Event()
    real_stop = sidecar.receiver.stop

    async def slow_stop() -> None:
        await asyncio.sleep(0.3)
        await real_stop()
        finished.set()

    monkeypatch.setattr(sidecar.receiver, "stop", slow_stop)
    await _run_until_connected_then_stop(sidecar)
    assert finished.is_set()
