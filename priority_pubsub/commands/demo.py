"""``priority-pubsub demo``: the newcomer's tour on the embedded default.

Starts the bundled sample app, publishes a mixed-priority burst to three local queues, runs
the sidecar in-process and shows live, per priority, how many messages were served, are
being worked on and are still waiting: high drains first, then normal, then low.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from priority_pubsub.commands.sample_app import Seen, start_app
from priority_pubsub.drivers.base import Publisher
from priority_pubsub.settings.config import validate_config
from priority_pubsub.sidecar import Sidecar
from priority_pubsub.telemetry.logs import configure_logging

QUEUES = ("tasks-high", "tasks-normal", "tasks-low")


def _table(published: Counter[str], seen: Seen, sidecar: Sidecar, elapsed_s: float) -> Table:
    served = Counter(event.get("queue") for event in seen.events)
    table = Table(title=f"priority-pubsub demo: strict priority, "
                        f"{sidecar.settings.concurrency} workers, {elapsed_s:.1f}s")
    for column in ("priority", "queue", "served", "in service", "waiting", ""):
        table.add_column(column, justify="right" if column not in ("queue", "") else "left")
    for priority, queue in enumerate(QUEUES):
        done, working = served[queue], seen.working[queue]
        waiting = published[queue] - done - working
        bar = "#" * round(12 * done / max(1, published[queue]))
        table.add_row(str(priority), queue, str(done), str(working), str(max(0, waiting)), bar)
    table.caption = f"workers busy: {sidecar.in_flight} of {sidecar.settings.concurrency}"
    return table


async def run_demo(messages: int = 60, task_ms: int = 150, concurrency: int = 4) -> None:
    configure_logging("error", "console")
    seen = Seen()
    runner, port = await start_app(task_ms, seen)
    with tempfile.TemporaryDirectory(prefix="priority-pubsub-demo-") as workdir:
        settings = validate_config({
            "driver": {"type": "local", "path": str(Path(workdir) / "queues.db")},
            "queues": [{"name": name} for name in QUEUES],
            "concurrency": concurrency,
            "app": {"url": f"http://127.0.0.1:{port}/tasks"},
            "server": {"port": 0},
            "shutdown": {"grace_s": 5},
        })
        sidecar = Sidecar(settings)
        published = await _publish_burst(sidecar, messages)
        console = Console()
        console.print(f"Published a mixed burst: {dict(published)}; "
                      f"sample app works {task_ms} ms per task.")
        running = asyncio.create_task(sidecar.run(handle_signals=False))
        loop = asyncio.get_running_loop()
        started = loop.time()
        with Live(console=console, refresh_per_second=8) as live:
            while len(seen.events) < messages and not running.done():
                live.update(_table(published, seen, sidecar, loop.time() - started))
                await asyncio.sleep(0.1)
            live.update(_table(published, seen, sidecar, loop.time() - started))
        sidecar.request_stop()
        await running
        order = [event.get("priority") for event in seen.events]
        console.print(f"\nService order by priority (0 = high): {''.join(map(str, order))}")
    await runner.cleanup()


async def _publish_burst(sidecar: Sidecar, messages: int) -> Counter[str]:
    driver = sidecar.driver
    assert isinstance(driver, Publisher)
    await driver.start()
    rng = random.Random(7)
    picks = [QUEUES[i % 3] for i in range(messages)]
    rng.shuffle(picks)
    for n, queue in enumerate(picks):
        await driver.publish(queue, f'{{"task": {n}}}'.encode(), {"demo": "yes"})
    await driver.close()
    return Counter(picks)
