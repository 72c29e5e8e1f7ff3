"""One thread that owns a SQLite connection and runs queued jobs in batched transactions,
and a second connection on which short jobs run on the event loop itself when that is cheaper.

Why the thread: a thread hop per statement (``run_in_executor``) cuts SQLite throughput by
~3.5x here, and every commit in WAL mode costs a sync. Jobs submitted while the thread is busy
are run together in one ``BEGIN IMMEDIATE`` transaction (each inside its own savepoint, so one
failing job does not undo its neighbours) and their results are handed back to the event loop
in a single ``call_soon_threadsafe``.

Why the loop: even batched, each job waited ~390 us for the GIL on the hop against 25-50 us of
SQLite work (bench/sqlite_hops.py). *Short* jobs (a few rows by index) therefore
run on the loop's own connection, those submitted in one turn of the loop together in one
transaction right after it (a commit per job cost more than the hop at concurrency 64); more
than ``_LOOP_BATCH_MAX`` of them go to the thread together. They never wait on the loop: its
busy timeout is 0, so a write lock held elsewhere (another process, or this worker's thread)
answers SQLITE_BUSY at once and the jobs go to the thread, which waits with the configured
``busy_timeout``. What could block stays on the thread: lock waits, checkpoints (the loop's
connection never checkpoints; the thread checkpoints the WAL every ``_CHECKPOINT_EVERY`` loop
commits), every commit under ``synchronous: full`` (an fsync each) and jobs not marked short.
Submission order is kept: while the thread has jobs in hand, new ones queue behind them.

Stopping is two halves: ``close_on_loop`` on the loop's thread, the only thread that ever
touches the loop's connection, then ``join_thread`` off the loop (it may wait for the thread's
last batch). Closing the loop's connection from another thread while the loop ran a job on it
crashed the process inside libsqlite3 (a segfault, seen when publishes were still arriving
at a driver being closed). Jobs submitted once stopping began fail at once
(``sqlite3.OperationalError``), where they used to wait for a thread that had gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], Any]
_MAX_BATCH = 256
_LOOP_BATCH_MAX = 8
"""More short jobs than this in one turn go to the thread together: at high concurrency the
hop is paid once for many jobs, and the thread's SQLite work runs beside the loop's Python
(bench.throughput at concurrency 16 and 64: the sidecar's CPU per message was ~25% higher
with every batch on the loop)."""
_CHECKPOINT_EVERY = 500
"""Loop commits between two passive WAL checkpoints on the thread (SQLite's own automatic
checkpoint, at 1,000 pages, would run on the committing connection: the loop's)."""


@dataclass(slots=True)
class _Request:
    job: Job
    write: bool
    future: asyncio.Future[Any]


class SqliteWorker:
    """Serialises all database work of one driver onto one connection in one thread."""

    def __init__(self, path: Path, *, busy_timeout_s: float, synchronous: str) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self._synchronous = synchronous
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._open_error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_conn: sqlite3.Connection | None = None
        self._loop_writes = synchronous.upper() != "FULL"  # an fsync per commit: thread only
        self._queued = 0
        self._loop_batch: list[_Request] = []
        self._since_checkpoint = 0
        self._stopping = False
        self.commits = 0
        self.loop_jobs = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open the connection on a new thread; may be called again after it failed (the
        sidecar retries a start while the file cannot be opened)."""
        self._loop = loop
        self._stopping = False
        self._ready.clear()
        self._open_error = None
        self._thread = threading.Thread(target=self._run, name="sqlite-worker", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._open_error is not None:
            raise self._open_error

    def submit(self, job: Job, *, write: bool, short: bool = False) -> asyncio.Future[Any]:
        """The job's result as a future. ``short``: a few rows by index, worth running on the
        loop: with the short jobs submitted in the same turn of the loop, in one transaction,
        right after it (unless the file is locked or the thread has jobs in hand)."""
        assert self._loop is not None, "start() first"
        request = _Request(job, write, self._loop.create_future())
        if self._stopping:
            request.future.set_exception(_stopped_error())
            return request.future
        if (short and self._queued == 0 and self._loop_conn is not None
                and (self._loop_writes or not write)):
            self._loop_batch.append(request)
            if len(self._loop_batch) == 1:
                self._loop.call_soon(self._run_loop_batch)
        else:
            self._run_loop_batch()  # what came first runs first: submission order is kept
            self._to_thread([request])
        return request.future

    async def call(self, job: Callable[[sqlite3.Connection], T], *, write: bool,
                   short: bool = False) -> T:
        result: T = await self.submit(job, write=write, short=short)
        return result

    def close_on_loop(self) -> None:
        """The first half of stopping, on the loop's thread: the short jobs of this turn
        run (or go to the thread), the loop's connection closes, and later jobs are refused.
        """
        self._run_loop_batch()
        self._stopping = True
        if self._loop_conn is not None:
            self._loop_conn.close()
            self._loop_conn = None

    def join_thread(self) -> None:
        """The second half, blocking (off the loop): the thread runs the jobs it was given
        and closes its connection."""
        if self._thread is not None:
            self._requests.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def _to_thread(self, requests: list[_Request]) -> None:
        self._queued += len(requests)
        for request in requests:
            self._requests.put(request)

    def _run_loop_batch(self) -> None:
        """Run the pending short jobs on the loop's connection, as the thread runs a batch;
        a job that met a lock (rolled back: its savepoint, or the whole transaction when
        ``BEGIN IMMEDIATE`` or ``COMMIT`` met it) goes to the thread instead."""
        batch, self._loop_batch = self._loop_batch, []
        if not batch or self._loop_conn is None or len(batch) > _LOOP_BATCH_MAX:
            self._to_thread(batch)
            return
        commits = self.commits
        locked = []
        for request, value, error in self._execute(self._loop_conn, batch):
            if error is not None and _locked(error):
                locked.append(request)
            else:
                _settle(request.future, value, error)
        self.loop_jobs += len(batch) - len(locked)
        self._to_thread(locked)
        if self.commits > commits:
            self._count_loop_commit()

    def _count_loop_commit(self) -> None:
        self._since_checkpoint += 1
        if self._since_checkpoint >= _CHECKPOINT_EVERY:
            self._since_checkpoint = 0
            # queued as any job: the loop's writes wait behind it, so it can backfill the
            # whole WAL, which the next write then starts over (no writer may interleave)
            self.submit(_checkpoint, write=False).add_done_callback(_ignore_outcome)

    def _connect(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self._path, timeout=self._busy_timeout_s, isolation_level=None,
            check_same_thread=False,
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
        return conn

    def _connect_for_the_loop(self) -> sqlite3.Connection:
        """The loop's connection: never waits for a lock, never checkpoints."""
        conn = sqlite3.connect(self._path, timeout=0, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        return conn

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._open_error = exc
            self._ready.set()
            return
        try:  # opened after WAL mode is set (by the thread's connection, for the file)
            self._loop_conn = self._connect_for_the_loop()
        except sqlite3.Error:
            self._loop_conn = None  # every job on the thread, as before
        self._ready.set()
        try:
            while True:
                first = self._requests.get()
                if first is None:
                    return
                batch = [first]
                while len(batch) < _MAX_BATCH:
                    try:
                        item = self._requests.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        self._requests.put(None)
                        break
                    batch.append(item)
                self._deliver(self._execute(conn, batch))
        finally:
            conn.close()

    def _execute(
        self, conn: sqlite3.Connection, batch: list[_Request]
    ) -> list[tuple[_Request, Any, BaseException | None]]:
        writes = any(request.write for request in batch)
        try:
            if writes:
                conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            return [(request, None, exc) for request in batch]
        results = [self._run_one(conn, request, savepoint=writes) for request in batch]
        if writes:
            try:
                conn.execute("COMMIT")
                self.commits += 1
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                return [(request, None, exc) for request in batch]
        return results

    @staticmethod
    def _run_one(
        conn: sqlite3.Connection, request: _Request, *, savepoint: bool
    ) -> tuple[_Request, Any, BaseException | None]:
        if savepoint:
            conn.execute("SAVEPOINT job")
        try:
            value = request.job(conn)
        except Exception as exc:
            if savepoint:
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
            return request, None, exc
        if savepoint:
            conn.execute("RELEASE job")
        return request, value, None

    def _deliver(self, results: list[tuple[_Request, Any, BaseException | None]]) -> None:
        assert self._loop is not None
        # The loop may be closed during shutdown: nobody is waiting any more then.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._settle_futures, results)

    def _settle_futures(self, results: list[tuple[_Request, Any, BaseException | None]]
                        ) -> None:
        for request, value, error in results:
            self._queued -= 1
            _settle(request.future, value, error)


def _stopped_error() -> sqlite3.OperationalError:
    """What a job submitted to a stopping worker fails with."""
    return sqlite3.OperationalError("the queue file is closed: the driver is stopping")


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _locked(exc: BaseException) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (extended codes included): another connection holds
    the lock the job needs."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and code is not None and (
        code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED))


def _checkpoint(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def _ignore_outcome(future: asyncio.Future[Any]) -> None:
    """A checkpoint that failed (e.g. busy) is retried by the next one: nothing to report."""
    if not future.cancelled():
        future.exception()
