"""The no-op app the benchmarks deliver to: raw ASGI under uvicorn with uvloop + httptools.

Runs in its own process so the app's cost never shares the sidecar's event loop. It answers
every POST with an empty 200 (an ack in Dapr's table). Options:

* ``--record``: remember, per CloudEvent id, the wall-clock ns at which the request reached the
  app; ``GET /_stats`` returns and clears them (used for latency and pickup measurements).
* ``--delay-ms``: hold each request that long before answering (a busy app, for priority runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_EMPTY_200 = {"type": "http.response.start", "status": 200,
              "headers": [(b"content-length", b"0")]}
_EMPTY_BODY = {"type": "http.response.body", "body": b""}


class NoopApp:
    def __init__(self, *, record: bool, delay_s: float) -> None:
        self._record = record
        self._delay_s = delay_s
        self._seen: dict[str, int] = {}
        self.requests = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        arrived_ns = time.time_ns()
        body = await _read_body(receive)
        self.requests += 1
        if scope["method"] == "GET" and scope["path"] == "/_stats":
            await _send_json(send, {"requests": self.requests, "seen": self._seen})
            self._seen = {}
            return
        if self._record:
            event_id = json.loads(body).get("id") if body else None
            if isinstance(event_id, str):
                self._seen[event_id] = arrived_ns
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        await send(_EMPTY_200)
        await send(_EMPTY_BODY)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_json(send: Send, value: object) -> None:
    body = json.dumps(value).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    app = NoopApp(record=args.record, delay_s=args.delay_ms / 1000)
    uvicorn.run(app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools",
                lifespan="off", access_log=False, log_level="warning", backlog=2048)


if __name__ == "__main__":
    main()
