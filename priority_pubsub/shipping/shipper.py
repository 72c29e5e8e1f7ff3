"""The uploader: each closed journal file to the store, verified, then removed locally.

One file at a time, oldest first, in a task of its own: reading and compressing a file run
in a worker thread and the store calls are asynchronous, so neither delivery nor readiness
ever waits on the store. A failed attempt (the store down, an error, a digest that differs)
keeps the file, is counted and logged, and is retried after a growing pause
(``retry_initial_s`` doubling to ``retry_max_s``), cut short at stop. Past
``max_local_mb`` the spool sheds kept copies, then the oldest waiting files (each named in
one error line and counted), or pauses delivery (``when_full``).

Idempotent by construction: the key is a pure function of the file (``keys``), the bytes
are deterministic (``payload``), and the store's digest is read before a put: an object
already holding these bytes (a crash between the put and the local delete) is not sent
again. At stop the writer has closed its file; the final uploads get ``stop_timeout_s``,
then whatever is still local is named in one line and counted, and the next start sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from priority_pubsub.core.backoff import Backoff
from priority_pubsub.settings.upload import UploadConfig
from priority_pubsub.shipping import spool
from priority_pubsub.shipping.keys import object_key
from priority_pubsub.shipping.metrics import UploadMetrics
from priority_pubsub.shipping.payload import Payload, prepare
from priority_pubsub.shipping.stores import CALL_TIMEOUT_S, ObjectStore, open_store
from priority_pubsub.telemetry.journal import (
    CLOSED_NAME,
    UPLOADED_SUFFIX,
    JournalWriter,
    remember_last_seq,
)
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)
MB = 1024 * 1024
STOP_RETRY_S = 0.5
FIGURES_TTL_S = 1.0
"""At stop, a failed upload is tried again this soon (within ``stop_timeout_s``)."""


class VerifyFailed(Exception):
    """The store holds other bytes than those sent (or no digest to compare)."""


class Shipper:
    def __init__(
        self,
        config: UploadConfig,
        writer: JournalWriter,
        registry: CollectorRegistry,
        store_factory: Callable[[UploadConfig], ObjectStore] = open_store,
    ) -> None:
        self.config = config
        self.directory = writer.directory
        self.metrics = UploadMetrics(registry)
        self.metrics.spool_bytes.set_function(self._spool_bytes)
        self.metrics.oldest_age.set_function(self._oldest_age_s)
        self.on_full: Callable[[bool], None] | None = None
        """Told when the spool goes over its bound and back (``when_full: pause_delivery``)."""
        self.full = False
        self._store_factory = store_factory
        self._store: ObjectStore | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._backoff = Backoff(config.retry_initial_s, config.retry_max_s)
        self._figures: tuple[float, float, float | None] | None = None
        writer.on_closed = self.file_closed

    async def start(self) -> None:
        """Open the store (its library imported now) and ship what is waiting, a crashed
        run's files included."""
        self._store = self._store_factory(self.config)
        self._bound()
        self._task = asyncio.create_task(self._run(), name="journal-upload")
        log.info("journal upload on", url=self.config.url,
                 waiting=len(spool.waiting(self.directory)))

    def file_closed(self, path: Path) -> None:
        """The writer closed ``path``: keep the spool in its bound and wake the loop."""
        self._bound()
        self._wake.set()

    async def stop(self) -> None:
        """After the writer closed its last file: give the uploads ``stop_timeout_s``."""
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), self.config.stop_timeout_s)
            except TimeoutError:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        left = spool.waiting(self.directory)
        self.metrics.left_at_stop.set(len(left))
        if left:
            log.warning("journal files still local at stop: the next start uploads them",
                        count=len(left), files=[f.path.name for f in left])
        if self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.close()

    async def _run(self) -> None:
        while True:
            waiting = spool.waiting(self.directory)
            if not waiting:
                if self._stopping:
                    return
                await self._pause(None)
                continue
            local = waiting[0]
            try:
                async with asyncio.timeout(4 * CALL_TIMEOUT_S):
                    await self._ship(local.path)
            except FileNotFoundError:  # dropped by the bound meanwhile
                continue
            except Exception as exc:  # every failure is retried: the file stays
                reason = "verify" if isinstance(exc, VerifyFailed) else "error"
                self.metrics.failures.labels(reason).inc()
                pause = self._backoff.failed()
                log.warning("journal upload failed, retrying", file=local.path.name,
                            reason=reason, error=_first_line(exc), retry_in_s=round(pause, 1))
                self._bound()
                await self._pause(pause)
                continue
            self._backoff.reset()

    async def _pause(self, seconds: float | None) -> None:
        """None: wait for a closed file (or the stop). A retry's pause: ``seconds``, cut
        short by the stop, after which retries come every ``STOP_RETRY_S``."""
        if seconds is None:
            await self._wake.wait()
            self._wake.clear()
            return
        if self._stopping:
            await asyncio.sleep(min(seconds, STOP_RETRY_S))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), seconds)

    async def _ship(self, path: Path) -> None:
        store = self._store
        assert store is not None
        key, payload = await asyncio.to_thread(self._prepare, path)
        stored = await store.stat(key)
        if stored is None or stored.md5 != payload.md5:  # not there yet, or other bytes
            await store.put(key, payload.data)
            stored = await store.stat(key)
            if stored is None or stored.md5 != payload.md5:
                found = "no object" if stored is None else (
                    "no digest" if stored.md5 is None else f"md5 {stored.md5.hex()}")
                raise VerifyFailed(f"{key}: the store holds {found}, sent md5 "
                                   f"{payload.md5.hex()}")
        self._uploaded(path, key, payload)

    def _prepare(self, path: Path) -> tuple[str, Payload]:
        return object_key(self.config.prefix, path, self.config.gzip), prepare(
            path, self.config.gzip)

    def _uploaded(self, path: Path, key: str, payload: Payload) -> None:
        if (name := CLOSED_NAME.fullmatch(path.name)) is not None:
            remember_last_seq(self.directory, name["replica"], int(name["seq"]))
        if self.config.keep_local:
            path.rename(path.with_name(path.name + UPLOADED_SUFFIX))
            for old in spool.kept(self.directory)[:-self.config.keep_local]:
                old.path.unlink(missing_ok=True)
        else:
            path.unlink()
        self.metrics.files.inc()
        self.metrics.bytes.inc(len(payload.data))
        log.info("journal file uploaded", file=path.name, key=key, bytes=len(payload.data))
        self._bound()

    def _bound(self) -> None:
        """Keep the spool within ``max_local_mb``: kept copies go first, then the oldest
        waiting files (``drop_oldest``), or delivery pauses until it fits
        (``pause_delivery``)."""
        limit = int(self.config.max_local_mb * MB)
        drop_kept, drop_waiting = spool.over_bound(self.directory, limit)
        for local in drop_kept:
            local.path.unlink(missing_ok=True)
        if self.config.when_full == "pause_delivery":
            self._set_full(bool(drop_waiting))
            return
        for local in drop_waiting:
            with contextlib.suppress(FileNotFoundError):
                local.path.unlink()
                self.metrics.dropped_files.inc()
                self.metrics.dropped_bytes.inc(local.size)
                log.error("journal file dropped unsent: the local spool is over "
                          "journal.upload.max_local_mb", file=local.path.name, bytes=local.size,
                          max_local_mb=self.config.max_local_mb)

    def _set_full(self, full: bool) -> None:
        if full == self.full:
            return
        self.full = full
        if full:
            log.error("journal spool over journal.upload.max_local_mb: delivery paused until "
                      "uploads catch up", max_local_mb=self.config.max_local_mb)
        else:
            log.info("journal spool back under its bound: delivery resumes")
        if self.on_full is not None:
            self.on_full(full)

    def _spool_figures(self) -> tuple[float, float | None]:
        """(bytes of waiting files and kept copies, mtime of the oldest waiting file), read
        from the directory at most once per ``FIGURES_TTL_S``: a scrape lists nothing more
        often (a benchmark scraping every 20 ms paid ~15 µs per delivered message for it)."""
        now = time.monotonic()
        if self._figures is None or now - self._figures[0] >= FIGURES_TTL_S:
            waiting, kept = spool.waiting(self.directory), spool.kept(self.directory)
            size = float(sum(f.size for f in waiting) + sum(f.size for f in kept))
            self._figures = (now, size, waiting[0].mtime if waiting else None)
        return self._figures[1], self._figures[2]

    def _spool_bytes(self) -> float:
        return self._spool_figures()[0]

    def _oldest_age_s(self) -> float:
        oldest = self._spool_figures()[1]
        return 0.0 if oldest is None else max(0.0, time.time() - oldest)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
