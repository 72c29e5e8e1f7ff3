"""The sidecar leaves its start-up objects out of garbage collection while it runs
(``gc.freeze``) and gives them back at stop: an in-process sidecar on the local driver."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from tests.support.in_process_sidecar import local_sidecar


async def _frozen() -> None:
    """Wait for the start's freeze (nothing to be told by: it is polled, up to 20 s)."""
    for _ in range(400):
        if gc.get_freeze_count() > 0:
            break
        await asyncio.sleep(0.05)
    assert gc.get_freeze_count() > 1000


async def test_start_up_objects_are_frozen_while_running_and_released_at_stop(
    tmp_path: Path,
) -> None:
    sidecar = local_sidecar(tmp_path)
    gc.unfreeze()
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    try:
        await _frozen()
        assert sidecar.connected
    finally:
        sidecar.request_stop()
        await running
    assert gc.get_freeze_count() == 0


async def test_the_start_walks_no_full_collection_on_its_way_to_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full collection before the freeze found ~20 unreachable objects and cost ~35 ms of
    CPU before ``/readyz`` could answer (the time to ready): the start freezes
    without one."""
    sidecar = local_sidecar(tmp_path)
    collections: list[int] = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(1) or real_collect(*args))
    gc.unfreeze()
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    try:
        await _frozen()
    finally:
        sidecar.request_stop()
        await running
    assert collections == []
