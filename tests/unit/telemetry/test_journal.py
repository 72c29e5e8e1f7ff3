"""The journal: schema published once, rotation, flush on close, torn lines tolerated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from priority_pubsub.telemetry.journal import (
    JOURNAL_FIELDS,
    SCHEMA_VERSION,
    FsyncPolicy,
    JournalRecord,
    JournalWriter,
    read_journal_lines,
    schema_markdown,
)

ROOT = Path(__file__).resolve().parents[3]


def record(n: int) -> JournalRecord:
    return JournalRecord(
        message_id=f"m{n}", queue="q", priority=0, driver="local", attempt=1, enqueued_ms=1,
        received_ms=2, forwarded_ms=3, settled_ms=4, outcome="ack", http_status=200,
        reason=None, bytes=10,
    )


def test_the_docs_publish_the_schema_from_code() -> None:
    assert schema_markdown() in (ROOT / "docs" / "operations" / "journal.md").read_text()


def test_record_fields_follow_the_schema_order() -> None:
    line = json.loads(record(1).to_json())
    assert list(line) == [f.name for f in JOURNAL_FIELDS]
    assert line["v"] == SCHEMA_VERSION == 4


@pytest.mark.parametrize("fsync", ["none", "every_line"])
async def test_rotation_and_every_line_on_disk_at_once(
    tmp_path: Path, fsync: FsyncPolicy
) -> None:
    writer = JournalWriter(tmp_path, rotate_mb=0.001, fsync=fsync)
    writer.start()
    for n in range(50):
        writer.append(record(n))
        # written when appended, not at close: read back by another file handle
        assert read_journal_lines(writer.current_path)[0][-1]["message_id"] == f"m{n}"
    await writer.close()
    files = sorted(tmp_path.glob("journal-*.jsonl"))
    assert len(files) > 1
    ids = [r["message_id"] for f in files for r in read_journal_lines(f)[0]]
    assert sorted(ids, key=lambda i: int(i[1:])) == [f"m{n}" for n in range(50)]


async def test_lone_surrogate_in_a_reason_is_written_as_its_escape(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, rotate_mb=1)
    writer.start()
    writer.append(_with_reason("bad \ud800"))
    await writer.close()
    [line] = read_journal_lines(next(tmp_path.glob("journal-*.jsonl")))[0]
    assert line["reason"] == "bad \ud800"


def _with_reason(reason: str) -> JournalRecord:
    value = record(1)
    value.reason = reason
    return value


async def test_write_failure_is_logged_not_raised(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path / "file", rotate_mb=1)
    (tmp_path / "file").write_text("not a directory")
    writer.append(record(1))  # must not raise: the message is already settled
    assert writer.records_written == 0


def test_torn_last_line_and_unknown_versions_are_counted_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "journal-1-1.jsonl"
    path.write_text(record(1).to_json() + "\n" + '{"v": 5, "x": 1}\n' + '{"v": 1, "message_')
    records, bad = read_journal_lines(path)
    assert [r["message_id"] for r in records] == ["m1"]
    assert bad == 2


async def test_a_file_is_open_while_written_and_closed_at_rotation_and_stop(
    tmp_path: Path,
) -> None:
    writer = JournalWriter(tmp_path, rotate_mb=0.0005, replica="pod-a")
    writer.start()
    writer.append(record(1))
    first = writer.current_path
    assert first is not None
    assert first.name == "journal-pod_a-000001.jsonl.open"
    while writer.current_path == first:
        writer.append(record(2))
    assert not first.exists()
    assert first.with_name("journal-pod_a-000001.jsonl").exists()
    assert writer.current_path.name == "journal-pod_a-000002.jsonl.open"  # type: ignore[union-attr]
    await writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "journal-pod_a-000001.jsonl", "journal-pod_a-000002.jsonl"]


async def test_the_next_start_closes_what_a_crash_left_open_and_continues_the_sequence(
    tmp_path: Path,
) -> None:
    crashed = JournalWriter(tmp_path, rotate_mb=1, replica="pod-a")
    crashed.start()
    crashed.append(record(1))  # never closed: as after a kill -9
    other = tmp_path / "journal-pod_b-000007.jsonl.open"  # another replica's: left alone
    other.write_text(record(9).to_json() + "\n")
    (tmp_path / "journal-pod_a-000002.jsonl.open").write_text("")  # empty: removed
    restarted = JournalWriter(tmp_path, rotate_mb=1, replica="pod-a")
    restarted.start()
    assert read_journal_lines(tmp_path / "journal-pod_a-000001.jsonl")[0][0]["message_id"] == "m1"
    restarted.append(record(3))
    assert restarted.current_path == tmp_path / "journal-pod_a-000002.jsonl.open"
    await restarted.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "journal-pod_a-000001.jsonl", "journal-pod_a-000002.jsonl",
        "journal-pod_b-000007.jsonl.open"]
