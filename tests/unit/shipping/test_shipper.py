"""The uploader's parts alone: the key function, the payload, the spool's bound, and the
loop (verify, retry, idempotence, drop, stop) against an in-memory store that can lie about
what it holds. The real stores: tests/e2e/test_journal_upload_e2e.py."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.config import validate_config
from priority_pubsub.settings.upload import UploadConfig
from priority_pubsub.shipping import spool
from priority_pubsub.shipping.keys import object_key
from priority_pubsub.shipping.payload import prepare
from priority_pubsub.shipping.s3_store import md5_of_etag
from priority_pubsub.shipping.shipper import Shipper
from priority_pubsub.shipping.stores import StoredObject
from priority_pubsub.telemetry.journal import JournalRecord, JournalWriter

# 2026-11-28T14:05:00Z
SETTLED_MS = 1795874700000


def record(index: int, settled_ms: int = SETTLED_MS) -> JournalRecord:
    return JournalRecord(f"m{index}", "high", 0, "local", 1, settled_ms - 50, settled_ms - 40,
                         settled_ms - 30, settled_ms, "ack", 200, None, 10)


def closed_file(directory: Path, name: str, lines: int = 3, settled_ms: int = SETTLED_MS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("".join(record(i, settled_ms).to_json() + "\n" for i in range(lines)))
    return path


class MemoryStore:
    """An object store in a dict; ``corrupt`` flips a byte of the next puts (as a broken
    network would), ``down`` fails every call."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts = 0
        self.corrupt = 0
        self.down = False

    async def put(self, key: str, data: bytes) -> None:
        self._check()
        self.puts += 1
        if self.corrupt:
            self.corrupt -= 1
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        self.objects[key] = data

    async def stat(self, key: str) -> StoredObject | None:
        self._check()
        data = self.objects.get(key)
        return None if data is None else StoredObject(key, len(data), hashlib.md5(data).digest())

    async def list(self, prefix: str) -> list[StoredObject]:
        return [s for k in sorted(self.objects) if k.startswith(prefix)
                if (s := await self.stat(k)) is not None]

    async def get(self, key: str) -> bytes:
        return self.objects[key]

    async def close(self) -> None:
        pass

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("store unreachable")


def upload_config(**overrides: object) -> UploadConfig:
    return UploadConfig.model_validate({"url": "s3://bucket/fleet/journals",
                                        "retry_initial_s": 0.05, "retry_max_s": 0.1,
                                        "stop_timeout_s": 2, **overrides})


def shipper_for(tmp_path: Path, store: MemoryStore, **overrides: object) -> Shipper:
    writer = JournalWriter(tmp_path / "journal", rotate_mb=0.001, replica="pod-a")
    writer.start()
    return Shipper(upload_config(**overrides), writer, CollectorRegistry(),
                   store_factory=lambda _: store)


def sample(shipper: Shipper, name: str, labels: dict[str, str] | None = None) -> float:
    value = shipper.metrics.registry.get_sample_value(name, labels or {})
    return float(value or 0)


async def until(condition: object, timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


# ---- the key, the payload ------------------------------------------------------------------

def test_the_key_is_the_first_records_hour_and_the_files_name(tmp_path: Path) -> None:
    path = closed_file(tmp_path, "journal-pod_a-000007.jsonl")
    later = SETTLED_MS + 3 * 3600 * 1000
    with path.open("a") as handle:  # later records do not move the file
        handle.write(record(9, later).to_json() + "\n")
    key = "fleet/date=2026-11-28/hour=14/journal-pod_a-000007.jsonl.gz"
    assert object_key("fleet/", path, gzip=True) == key
    assert object_key("fleet", path, gzip=True) == key  # the same file, the same key
    assert object_key("", path, gzip=False) == "date=2026-11-28/hour=14/journal-pod_a-000007.jsonl"


def test_a_file_whose_first_line_is_torn_still_has_a_key(tmp_path: Path) -> None:
    path = tmp_path / "journal-x-000001.jsonl"
    path.write_text('{"v":3,"message_id":"m1","sett\n')
    assert object_key("p", path, gzip=True) == (
        "p/date=unknown/hour=unknown/journal-x-000001.jsonl.gz")


def test_the_payload_is_the_same_bytes_every_time_and_reads_back(tmp_path: Path) -> None:
    path = closed_file(tmp_path, "journal-x-000001.jsonl", lines=500)
    first, again = prepare(path, gzip=True), prepare(path, gzip=True)
    assert first.data == again.data  # deterministic gzip: a retry sends the same bytes
    assert first.md5 == hashlib.md5(first.data).digest()
    assert gzip.decompress(first.data) == path.read_bytes()
    assert first.source_bytes == path.stat().st_size
    assert len(first.data) < first.source_bytes / 3


def test_an_s3_etag_is_an_md5_only_for_a_single_part_upload() -> None:
    digest = hashlib.md5(b"x").digest()
    assert md5_of_etag(f'"{digest.hex()}"') == digest
    assert md5_of_etag(f'"{digest.hex()}-3"') is None  # multipart
    assert md5_of_etag(None) is None


def test_the_config_names_one_of_three_stores_and_keeps_its_secrets() -> None:
    with pytest.raises(ConfigError, match="s3://bucket/prefix"):
        validate_config({"queues": [{"name": "q"}],
                         "journal": {"upload": {"url": "ftp://host/x"}}})
    with pytest.raises(ConfigError, match="go together"):
        validate_config({"queues": [{"name": "q"}],
                         "journal": {"upload": {"url": "s3://b/p", "access_key_id": "AK"}}})
    settings = validate_config({"queues": [{"name": "q"}], "journal": {"upload": {
        "url": "az://journals/fleet/a", "account": "acct", "account_key": "c2VjcmV0a2V5"}}})
    upload = settings.journal.upload if settings.journal else None
    assert upload is not None
    assert (upload.kind, upload.bucket, upload.prefix) == ("azure", "journals", "fleet/a")
    assert "c2VjcmV0a2V5" not in repr(settings)


# ---- the writer keeps its sequence once files are gone -------------------------------------

async def test_a_start_after_every_file_was_uploaded_continues_the_sequence(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    shipper = shipper_for(tmp_path, store)
    await shipper.start()
    writer = JournalWriter(tmp_path / "journal", rotate_mb=0.001, replica="pod-a")
    writer.on_closed = shipper.file_closed
    writer.start()
    for index in range(12):  # ~200 bytes a line, 1 KB files: a few rotations
        writer.append(record(index))
    await writer.close()
    await shipper.stop()
    names = sorted(key.rsplit("/", 1)[1] for key in store.objects)
    assert names
    assert not list((tmp_path / "journal").glob("journal-*"))
    again = JournalWriter(tmp_path / "journal", rotate_mb=0.001, replica="pod-a")
    again.start()
    again.append(record(99))
    assert again.current_path is not None
    seq = int(again.current_path.name.split("-")[2].split(".")[0])
    assert seq == len(names) + 1  # never a name (and so a key) used before
    await again.close()


# ---- the loop ------------------------------------------------------------------------------

async def test_a_closed_file_is_uploaded_verified_then_removed(tmp_path: Path) -> None:
    store = MemoryStore()
    shipper = shipper_for(tmp_path, store)
    path = closed_file(tmp_path / "journal", "journal-pod_a-000001.jsonl")
    body = path.read_bytes()
    await shipper.start()
    await until(lambda: not path.exists())
    await shipper.stop()
    (key, data), = store.objects.items()
    assert key == "fleet/journals/date=2026-11-28/hour=14/journal-pod_a-000001.jsonl.gz"
    assert gzip.decompress(data) == body
    assert sample(shipper, "priority_pubsub_journal_uploaded_files_total") == 1
    assert sample(shipper, "priority_pubsub_journal_uploaded_bytes_total") == len(data)
    assert sample(shipper, "priority_pubsub_journal_files_left_at_stop") == 0


async def test_a_digest_that_differs_keeps_the_file_and_the_retry_lands_the_right_bytes(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    store.corrupt = 2  # the first two puts arrive with a flipped byte
    shipper = shipper_for(tmp_path, store)
    path = closed_file(tmp_path / "journal", "journal-pod_a-000001.jsonl")
    body = path.read_bytes()
    await shipper.start()
    await until(lambda: sample(shipper, "priority_pubsub_journal_upload_failures_total",
                               {"reason": "verify"}) >= 1)
    assert path.exists()  # never removed on a wrong digest
    await until(lambda: not path.exists())
    await shipper.stop()
    assert store.puts == 3
    assert sample(shipper, "priority_pubsub_journal_upload_failures_total",
                  {"reason": "verify"}) == 2
    (data,) = store.objects.values()
    assert gzip.decompress(data) == body


async def test_an_object_already_holding_the_bytes_is_not_sent_again(tmp_path: Path) -> None:
    """A crash between the put and the local delete: the next start finds the object."""
    store = MemoryStore()
    path = closed_file(tmp_path / "journal", "journal-pod_a-000001.jsonl")
    key = object_key("fleet/journals", path, gzip=True)
    store.objects[key] = prepare(path, gzip=True).data
    shipper = shipper_for(tmp_path, store)
    await shipper.start()
    await until(lambda: not path.exists())
    await shipper.stop()
    assert store.puts == 0
    assert list(store.objects) == [key]


async def test_an_outage_is_retried_until_the_store_is_back(tmp_path: Path) -> None:
    store = MemoryStore()
    store.down = True
    shipper = shipper_for(tmp_path, store)
    path = closed_file(tmp_path / "journal", "journal-pod_a-000001.jsonl")
    await shipper.start()
    await until(lambda: sample(shipper, "priority_pubsub_journal_upload_failures_total",
                               {"reason": "error"}) >= 3)
    assert path.exists()
    assert sample(shipper, "priority_pubsub_journal_spool_bytes") == path.stat().st_size
    assert sample(shipper, "priority_pubsub_journal_oldest_unuploaded_seconds") >= 0
    store.down = False
    await until(lambda: not path.exists())
    await shipper.stop()
    assert len(store.objects) == 1


async def test_past_the_bound_the_oldest_files_are_dropped_counted_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryStore()
    store.down = True
    directory = tmp_path / "journal"
    shipper = shipper_for(tmp_path, store, max_local_mb=0.005)  # ~5 KB: two of the files
    await shipper.start()
    paths = []
    for seq in range(1, 5):
        path = closed_file(directory, f"journal-pod_a-{seq:06d}.jsonl", lines=8)  # ~2.3 KB
        paths.append(path)
        shipper.file_closed(path)
        await asyncio.sleep(0.02)  # distinct mtimes
    assert [p.exists() for p in paths] == [False, False, True, True]  # the oldest went
    assert sample(shipper, "priority_pubsub_journal_dropped_files_total") == 2
    dropped_bytes = sample(shipper, "priority_pubsub_journal_dropped_bytes_total")
    assert dropped_bytes > 3000
    logged = capsys.readouterr().out
    for path in paths[:2]:
        assert sum(1 for line in logged.splitlines() if "dropped unsent" in line
                   and path.name in line) == 1
    store.down = False
    await until(lambda: not any(p.exists() for p in paths))
    await shipper.stop()
    assert sorted(k.rsplit("/", 1)[1] for k in store.objects) == [
        f"{p.name}.gz" for p in paths[2:]]


async def test_pause_delivery_says_full_then_clear_instead_of_dropping(tmp_path: Path) -> None:
    store = MemoryStore()
    store.down = True
    seen: list[bool] = []
    shipper = shipper_for(tmp_path, store, max_local_mb=0.002, when_full="pause_delivery")
    shipper.on_full = seen.append
    await shipper.start()
    for seq in (1, 2):
        shipper.file_closed(closed_file(tmp_path / "journal", f"journal-pod_a-{seq:06d}.jsonl",
                                        lines=8))
    assert seen == [True]
    assert len(spool.waiting(tmp_path / "journal")) == 2
    store.down = False
    await until(lambda: seen == [True, False])
    await shipper.stop()


async def test_kept_copies_are_the_newest_and_give_way_first(tmp_path: Path) -> None:
    store = MemoryStore()
    shipper = shipper_for(tmp_path, store, keep_local=1)
    directory = tmp_path / "journal"
    await shipper.start()
    for seq in (1, 2, 3):
        path = closed_file(directory, f"journal-pod_a-{seq:06d}.jsonl")
        shipper.file_closed(path)
        await until(lambda p=path: not p.exists())  # type: ignore[misc]
    await shipper.stop()
    assert [f.path.name for f in spool.kept(directory)] == ["journal-pod_a-000003.jsonl.uploaded"]
    assert len(store.objects) == 3


async def test_at_stop_what_could_not_be_sent_is_counted_and_named_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryStore()
    store.down = True
    shipper = shipper_for(tmp_path, store, stop_timeout_s=0.5)
    path = closed_file(tmp_path / "journal", "journal-pod_a-000001.jsonl")
    await shipper.start()
    started = asyncio.get_running_loop().time()
    await shipper.stop()
    assert asyncio.get_running_loop().time() - started < 3
    assert path.exists()
    assert sample(shipper, "priority_pubsub_journal_files_left_at_stop") == 1
    lines = [line for line in capsys.readouterr().out.splitlines()
             if "still local at stop" in line]
    assert len(lines) == 1
    assert path.name in lines[0]


def test_no_store_library_is_imported_unless_the_journal_is_uploaded(tmp_path: Path) -> None:
    """A sidecar with a journal but no journal.upload loads none of the three libraries;
    one uploading to S3 loads obstore only when its uploader starts."""
    libraries = ("obstore", "google.cloud.storage", "azure.storage.blob")
    code = (
        "import sys, asyncio\n"
        "from priority_pubsub.settings.config import validate_config\n"
        "from priority_pubsub.sidecar import Sidecar\n"
        "journal = {'path': sys.argv[1], 'upload': {'url': 's3://b/p'}} if sys.argv[2] == 'on'"
        " else {'path': sys.argv[1]}\n"
        "settings = validate_config({'queues': [{'name': 'q'}], 'driver': {'type': 'local', "
        "'path': sys.argv[1] + '/q.db'}, 'journal': journal})\n"
        "sidecar = Sidecar(settings)\n"
        f"print(sorted(m for m in sys.modules if m.startswith({libraries!r})))\n"
    )
    for mode in ("off", "on"):
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / mode), mode],
                             capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.strip() == "[]", (mode, out.stdout, out.stderr[-2000:])
