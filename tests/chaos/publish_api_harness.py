"""The publish API served in this process (HTTP and gRPC over real sockets, the local driver
behind it) for the fuzz runs: hundreds of requests, each judged by its answer and by what the
queue file holds afterwards, without a process start per example."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from grpc_status import rpc_status

from priority_pubsub.publish_api.server import serving
from priority_pubsub.settings.config import Settings, validate_config
from tests.support.quickstarts import publish_api
from tests.support.sidecar import local_config

QUEUES = ("high", "normal", "low")
MAX_MESSAGE_BYTES = 4096
"""The driver's limit, far below the API's: a bulk request then fails some entries only."""
MAX_BODY_BYTES = 256 * 1024


@dataclass
class FuzzCounts:
    """What the Must show asks for: inputs tried, errors returned, crashes, wrong enqueues."""

    door: str
    tried: int = 0
    errors: int = 0
    crashes: list[str] = field(default_factory=list)
    wrong_enqueues: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"fuzz {self.door:<22} inputs tried {self.tried:>5}  errors returned "
                f"{self.errors:>5}  crashes {len(self.crashes)}  wrong enqueues "
                f"{len(self.wrong_enqueues)}")


class PublishApiUnderTest:
    """``serving(settings)`` on a loop thread; sync HTTP and gRPC clients for the test."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.api = publish_api(max_body_bytes=MAX_BODY_BYTES)
        raw = local_config(directory, "http://127.0.0.1:9", publish_api=self.api)
        raw["driver"]["max_message_bytes"] = MAX_MESSAGE_BYTES
        self.settings: Settings = validate_config(raw)
        self.db = directory / "queues.db"
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.api['http_port']}",
                                 timeout=30)
        self._channel = grpc.insecure_channel(
            f"127.0.0.1:{self.api['grpc_port']}",
            options=[("grpc.max_send_message_length", 4 * MAX_BODY_BYTES)])
        self.grpc = dapr_pb2_grpc.DaprStub(self._channel)
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None

    @contextmanager
    def running(self) -> Iterator[PublishApiUnderTest]:
        started: Future[None] = Future()
        thread = threading.Thread(target=self._loop.run_until_complete,
                                  args=(self._serve(started),), daemon=True)
        thread.start()
        started.result(timeout=30)
        try:
            yield self
        finally:
            assert self._stop is not None
            self._loop.call_soon_threadsafe(self._stop.set)
            thread.join(timeout=30)
            self.http.close()
            self._channel.close()

    async def _serve(self, started: Future[None]) -> None:
        self._stop = asyncio.Event()
        try:
            async with serving(self.settings):
                started.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    def enqueued(self) -> int:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            count: int = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        finally:
            conn.close()
        return count

    def up(self) -> bool:
        return self.http.get("/v1.0/healthz").status_code == 204


def http_error_is_clear(response: httpx.Response) -> str | None:
    """None when the answer is daprd-shaped (JSON with errorCode and message), or a 4xx of
    the HTTP layer with its reason (a header aiohttp's parser refuses, a path no route
    matches: daprd's server refuses those too); else why it is not (aiohttp's own 500 page
    is a crash: an exception escaped the handler)."""
    if 400 <= response.status_code < 500 and response.text.strip():
        try:
            response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{response.status_code} not JSON: {response.text[:120]!r}"
    if response.status_code == 401:
        return None
    if not isinstance(body, dict) or not body.get("errorCode"):
        return f"{response.status_code} without errorCode: {response.text[:120]!r}"
    if "\n" in str(body.get("message", "")):
        return f"multi-line message: {body.get('message')!r}"
    return None


def grpc_error(exc: grpc.RpcError) -> tuple[str | None, dict[str, str]]:
    """(why the status is not a clear error or None, its ErrorInfo metadata)."""
    code = exc.code()  # type: ignore[attr-defined]
    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE):
        return f"{code.name}: {exc.details()}", {}  # type: ignore[attr-defined]
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    metadata: dict[str, str] = {}
    if status is not None:
        from google.rpc import error_details_pb2

        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                metadata = dict(info.metadata)
    return None, metadata


def failed_ids(value: Any) -> set[str]:
    return {str(entry.get("entryId")) for entry in value if isinstance(entry, dict)}
