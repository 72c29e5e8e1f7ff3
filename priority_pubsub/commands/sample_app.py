"""The bundled sample app ("Big Server" stand-in) used by ``demo`` and the tests.

It accepts CloudEvents on any path, works for ``task_ms`` and answers 200; it records what it
saw so the demo can show which priority is being served.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Seen:
    events: list[dict[str, Any]] = field(default_factory=list)
    working: Counter[str] = field(default_factory=Counter)


def make_app(task_ms: int, seen: Seen) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        event = json.loads(await request.read() or b"{}")
        queue = str(event.get("queue"))
        seen.working[queue] += 1
        try:
            await asyncio.sleep(task_ms / 1000)
        finally:
            seen.working[queue] -= 1
        event["_done_at"] = time.monotonic()
        seen.events.append(event)
        return web.json_response({"status": "SUCCESS"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def start_app(task_ms: int, seen: Seen, host: str = "127.0.0.1") -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(make_app(task_ms, seen), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    return runner, int(runner.addresses[0][1])


def main(argv: list[str] | None = None) -> None:
    """``python -m priority_pubsub.commands.sample_app``: the sample app alone, on the port the
    repo's ``config.yaml`` delivers to, for running the sidecar by hand next to it."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--task-ms", type=int, default=500, help="how long each task takes")
    args = parser.parse_args(argv)
    print(f"sample app on http://{args.host}:{args.port} ({args.task_ms} ms a task)", flush=True)
    web.run_app(make_app(args.task_ms, Seen()), host=args.host, port=args.port,
                print=None, access_log=None)


if __name__ == "__main__":
    main()
