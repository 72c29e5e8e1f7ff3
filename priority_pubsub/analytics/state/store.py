"""The report's state directory: a manifest written last, files through Hadoop, one run at once.

Why a manifest. Each run writes its new data under ``data/<run>/`` (paths no earlier run
used), and only then writes ``manifest/<seq>.json``: the list of journal files read and, for
every table, which run's files hold its current rows. A run killed before that write left
files no manifest names; the next run starts from the last manifest, ignores (and deletes)
them, and reads the same new journal files again. Nothing is ever renamed or overwritten in
place, so state can live on any Hadoop-compatible path (an object store has no atomic
rename); one ``create`` of a new object is the commit. A manifest that cannot be parsed (a
torn local write) counts as never written.

Structured Streaming's file source with ``trigger(availableNow=True)`` and a checkpoint was
measured as the alternative (43 small files, then one new file per run, ``local[2]`` on the
shared 2-core machine at load ~25): 4.2-5.0 s per run against 4.6-6.1 s for choosing the
files by this manifest and reading them, the same within the noise (both are the JSON
read). It was not chosen because its checkpoint knows only which files were read: a
``foreachBatch`` sink replays a batch after a crash, so the tables would need their own
idempotent commit anyway, plus the hours each file touched, the lifecycle's open messages
and the per-hour summaries, none of which the checkpoint holds; and it leaves offset and
commit logs per batch (26 files after 5 runs). One manifest does all of it in one write.

The lock: one run at a time per state directory. On a local path it is ``flock`` on
``<state>/lock`` (taken before Spark starts, so a second run exits at once; released by the
kernel when a run dies, even by kill -9). On another file system it is a ``lock`` object
created only if absent, naming its holder; a run that died leaves it behind, and the error
says which file to remove.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlparse

from priority_pubsub.analytics.journal.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STATE_FORMAT = 3
"""Version of the state's layout; a state of another format is rebuilt only with ``--full``.
2: the histograms kept by hour (``Manifest.summary_hours``) beside their totals, and the
starvation and in-flight sweeps folded by hour. 3: the records keep ``slots``, the in-flight
sweeps count slots and the capacity sums carry the slots and their busy time."""
MANIFESTS_KEPT = 3


class StateError(Exception):
    """The state cannot be used as it is (another run holds it, or it was built otherwise)."""


class LockedError(StateError):
    """Another run holds the state directory."""


@dataclass
class Manifest:
    """What the state holds after run ``seq`` (0: an empty state)."""

    seq: int = 0
    format: int = STATE_FORMAT
    journal_schema: int = SCHEMA_VERSION
    record_columns: list[str] = field(default_factory=list)
    bounds: list[int | None] = field(default_factory=lambda: [None, None])
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Journal files read: base name -> {hash, size, path, run}."""
    records: dict[str, list[str]] = field(default_factory=dict)
    """Settle hour (epoch hours, as text) -> the runs whose ``records`` hold its records."""
    lifecycle: dict[str, str] = field(default_factory=dict)
    """Enqueue hour -> the run whose ``lifecycle`` holds that hour's messages."""
    summaries: str | None = None
    """The run whose ``summaries/`` hold the per-hour and per-minute rows of every hour."""
    priorities: list[int] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)
    unpublished: list[int] = field(default_factory=list)
    """Enqueue hours whose lifecycle rows are not yet in the output's ``lifecycle/``."""
    schemas: dict[str, str] = field(default_factory=dict)
    """Summary table -> its Spark schema (JSON), as ``summaries`` wrote it: read back
    without a job to infer it (a state written before this field infers them)."""
    summary_hours: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per-hour summary (``stored.HOURLY``) -> hour -> the run whose ``hours/<name>``
    holds that hour's rows."""

    @property
    def hashes(self) -> set[str]:
        return {str(f["hash"]) for f in self.files.values()}

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("seq"), int):
            raise ValueError("not a manifest")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def newest_manifest(names: list[str], read: Callable[[str], str | None]) -> Manifest | None:
    """The newest of the manifests ``names`` (sorted by sequence) that ``read`` returns and
    that parses; an empty one when there are none, None when none of them can be read."""
    for name in reversed(names):
        text = read(name)
        if text is None:
            continue
        try:
            return Manifest.from_json(text)
        except (ValueError, TypeError):
            continue
    return None if names else Manifest()


def read_local_manifest(state_dir: str) -> Manifest | None:
    """``Store.load_manifest`` of a local state, read without Spark (to size a run before
    its JVM starts); None when no manifest there can be read."""
    directory = os.path.join(local_path(state_dir), "manifest")
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except OSError:
        names = []

    def read(name: str) -> str | None:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                return handle.read()
        except OSError:
            return None

    return newest_manifest(names, read)


def new_run_id(seq: int) -> str:
    """A name no other run used: the sequence it commits as, and a random part (a run that
    died and its rerun have the same sequence)."""
    return f"r{seq:08d}-{uuid.uuid4().hex[:8]}"


class Store:
    """Files of one directory tree through Hadoop's ``FileSystem`` (local, HDFS, s3a, gs...)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self._jvm = jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        path = jvm.org.apache.hadoop.fs.Path(root)
        self._fs = path.getFileSystem(self._conf)
        checksummed = jvm.java.lang.Class.forName("org.apache.hadoop.fs.ChecksumFileSystem")
        if checksummed.isInstance(self._fs):  # local disks: plain files, no .crc beside each
            self._fs = self._fs.getRawFileSystem()
        self.root = str(self._fs.makeQualified(path).toString()).rstrip("/")

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _path(self, rel: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self.path(rel))

    def exists(self, rel: str) -> bool:
        return bool(self._fs.exists(self._path(rel)))

    def read_text(self, rel: str) -> str | None:
        """The file's text, None when it is absent or unreadable."""
        try:
            stream = self._fs.open(self._path(rel))
        except Exception:
            return None
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        except Exception:
            return None
        finally:
            stream.close()

    def write_text(self, rel: str, text: str, overwrite: bool = True) -> None:
        stream = self._fs.create(self._path(rel), overwrite)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def names(self, rel: str) -> list[str]:
        """Names of the entries of a directory ([] when absent)."""
        path = self._path(rel)
        if not self._fs.exists(path):
            return []
        return sorted(str(s.getPath().getName()) for s in self._fs.listStatus(path))

    def delete(self, rel: str) -> None:
        self._fs.delete(self._path(rel), True)

    def load_manifest(self) -> Manifest:
        """The newest manifest that parses (a torn newest one: that run never committed);
        an empty one for a new state. Manifests none of which can be read are an error,
        never an empty state."""
        names = [n for n in self.names("manifest") if n.endswith(".json")]
        manifest = newest_manifest(names, lambda name: self.read_text(f"manifest/{name}"))
        if manifest is None:
            raise StateError(
                f"no manifest in {self.path('manifest')} can be read: rerun with --full to "
                "rebuild the state"
            )
        return manifest

    def commit(self, manifest: Manifest) -> None:
        """The run's last write: from here on its data is the state."""
        self.write_text(f"manifest/{manifest.seq:08d}.json", manifest.to_json())

    def collect_garbage(self, manifest: Manifest, previous: Manifest | None = None) -> None:
        """Delete what the manifest no longer names: older manifests, runs that died, and
        what ``previous`` (the manifest this run started from) named that this one replaced.
        A few calls per run, whatever the history (a listing of ``data/`` and one delete per
        replaced part)."""
        manifests = [n for n in self.names("manifest") if n.endswith(".json")]
        for name in manifests:
            seq = int(name.split(".")[0]) if name.split(".")[0].isdigit() else -1
            if seq > manifest.seq or name in manifests[:-MANIFESTS_KEPT]:
                self.delete(f"manifest/{name}")  # older ones, and any torn by a run that died
        live = referenced_runs(manifest)
        for run in self.names("data"):
            if run not in live:
                self.delete(f"data/{run}")
        if previous is None:
            return
        replaced = previous.summaries != manifest.summaries
        if previous.summaries and replaced and previous.summaries in live:
            self.delete(f"data/{previous.summaries}/summaries")
        for hour, run in previous.lifecycle.items():
            if manifest.lifecycle.get(hour) != run and run in live:
                self.delete(f"data/{run}/lifecycle/enq_hour={hour}")
        for name, held in previous.summary_hours.items():
            holding = set(manifest.summary_hours.get(name, {}).values())
            for run in set(held.values()) - holding:
                if run in live:
                    self.delete(f"data/{run}/hours/{name}")


def referenced_runs(manifest: Manifest) -> set[str]:
    runs = {r for runs in manifest.records.values() for r in runs}
    runs |= set(manifest.lifecycle.values())
    runs |= {run for held in manifest.summary_hours.values() for run in held.values()}
    if manifest.summaries:
        runs.add(manifest.summaries)
    return runs


def is_local(uri: str) -> bool:
    scheme = urlparse(uri).scheme
    return scheme in ("", "file")


def local_path(uri: str) -> str:
    return urlparse(uri).path if uri.startswith("file:") else uri


@contextlib.contextmanager
def local_lock(state_dir: str) -> Iterator[None]:
    """``flock`` on ``<state>/lock``: refused at once when held; freed when the run ends."""
    directory = local_path(state_dir)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "lock")
    handle: IO[str] = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held while inside)
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another run"
            raise LockedError(
                f"another report run is using the state directory {directory} ({holder}); "
                "wait for it to finish"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(_holder())
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)  # still ours: no holder named once it is free
    finally:
        handle.close()


@contextlib.contextmanager
def remote_lock(store: Store) -> Iterator[None]:
    """A ``lock`` object created only if absent (Hadoop ``create(overwrite=false)``)."""
    try:
        store.write_text("lock", _holder(), overwrite=False)
    except Exception:
        holder = store.read_text("lock") or "another run"
        raise LockedError(
            f"another report run is using the state directory {store.root} ({holder}); if "
            f"none is running, delete {store.path('lock')}"
        ) from None
    try:
        yield
    finally:
        store.delete("lock")


def _holder() -> str:
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"pid {os.getpid()} on {socket.gethostname()}, started {started}"
