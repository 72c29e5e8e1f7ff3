"""The sidecar leaves its start-up objects out of garbage collection while it runs
(``gc.freeze``) and gives them back at stop: an in-process sidecar on the local driver."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from priority_pubsub.settings.config import validate_config
from priority_pubsub.sidecar import Sidecar
from tests.support.servers import free_port


async def test_start_up_objects_are_frozen_while_running_and_released_at_stop(
    tmp_path: Path,
) -> None:
    settings = validate_config({
        "driver": {"type": "local", "path": str(tmp_path / "queues.db")},
        "queues": [{"name": "q"}],
        "app": {"url": f"http://127.0.0.1:{free_port()}"},
        "server": {"host": "127.0.0.1", "port": free_port()},
        "journal": None,
    })
    sidecar = Sidecar(settings)
    gc.unfreeze()
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    try:
        for _ in range(400):  # up to 20 s: nothing to be told by, the start is polled
            if gc.get_freeze_count() > 0:
                break
            await asyncio.sleep(0.05)
        assert gc.get_freeze_count() > 1000
        assert sidecar.connected
    finally:
        sidecar.request_stop()
        await running
    assert gc.get_freeze_count() == 0
