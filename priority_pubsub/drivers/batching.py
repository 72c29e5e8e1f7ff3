"""Settle calls grouped into a broker's batch calls, without making any settle wait for a batch.

Why. Cloud brokers bill per request, and under load a sidecar settles many messages within a
few milliseconds of each other: SQS takes up to ten deletes (or visibility changes) in one
``DeleteMessageBatch``, Pub/Sub many acknowledge ids in one request. Waiting a fixed time to
collect a batch (a linger) would add that time to every settle, also when nothing else is
coming, so there is none: a settle for a key with no call in flight is sent at once, alone.
Only settles that arrive *while* a call for the same key is in flight are held, and they go
together as soon as it returns (or at once, when ``max_batch`` of them are waiting). An idle
sidecar thus makes exactly the calls it made before; a saturated one makes one call per
round trip per key, carrying everything that arrived meanwhile.

Each entry has its own result: ``send`` answers one ``BaseException | None`` per entry, so a
batch that partly fails reports each failure to its own caller (e.g. ``LeaseLost`` for a
stale receipt) and the rest succeed; an exception from ``send`` itself fails every entry of
that batch, never another batch's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
E = TypeVar("E")

Send = Callable[[K, Sequence[E]], Awaitable[Sequence[BaseException | None]]]
"""Sends one batch for a key; one result per entry, in order (None: done)."""


@dataclass
class _Lane(Generic[E]):
    """One key's waiting entries and how many of its calls are in flight."""

    waiting: list[tuple[E, asyncio.Future[None]]] = field(default_factory=list)
    flying: int = 0


class MicroBatcher(Generic[K, E]):
    """Groups entries per key into calls of at most ``max_batch`` (see the module docstring)."""

    def __init__(self, send: Send[K, E], max_batch: int = 10) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._send = send
        self._max = max_batch
        self._lanes: dict[K, _Lane[E]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0
        """Batch calls made (each carries 1 to ``max_batch`` entries)."""
        self.entries = 0

    async def submit(self, key: K, entry: E) -> None:
        """Send ``entry`` (at once if nothing for ``key`` is in flight); raise its own error.

        Once submitted, an entry is sent even if the caller is cancelled meanwhile."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane = self._lanes.setdefault(key, _Lane())
        lane.waiting.append((entry, future))
        if lane.flying == 0 or len(lane.waiting) >= self._max:
            self._launch(key, lane)
        await asyncio.shield(future)

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait for the calls in flight (and what they will still send) to finish."""
        while self._tasks:
            done, _ = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            if not done:
                return

    def _launch(self, key: K, lane: _Lane[E]) -> None:
        batch, lane.waiting = lane.waiting[: self._max], lane.waiting[self._max :]
        lane.flying += 1
        self.calls += 1
        self.entries += len(batch)
        task = asyncio.get_running_loop().create_task(self._fly(key, lane, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fly(
        self, key: K, lane: _Lane[E], batch: list[tuple[E, asyncio.Future[None]]]
    ) -> None:
        try:
            results: Sequence[BaseException | None] = await self._send(key, [e for e, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"batch send answered {len(results)} results for {len(batch)}")
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # every caller of this batch gets it
            results = [exc] * len(batch)
        finally:
            lane.flying -= 1
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if result is None:
                future.set_result(None)
            else:
                future.set_exception(result)
        if lane.waiting:
            self._launch(key, lane)
        elif lane.flying == 0:
            self._lanes.pop(key, None)
