"""Hostile but legal input through the real CLI, a real sidecar and a real app.

A message a broker accepts must reach the app or be decided at once: control characters in
attributes or in a traceparent, and valid JSON that Python's parser cannot represent, used to
take the internal-error path (retried with a traceback each time, then dead-lettered).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from tests.e2e.helpers import journal_records, publish, queue_rows, serve_until_drained
from tests.support.app import RecordingApp
from tests.support.sidecar import cli, local_config, write_config

pytestmark = pytest.mark.local

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _cloudevent(event_id: str, **extra: object) -> str:
    return json.dumps({"specversion": "1.0", "id": event_id, "source": "test",
                       "type": "t", "datacontenttype": "application/json",
                       "data": {"ok": True}, **extra})


def _run_until_settled(tmp_path: Path, app: RecordingApp, expected: int) -> str:
    """Start a sidecar on the published messages; return its log once all are settled."""
    config = local_config(tmp_path, app.url)
    return serve_until_drained(tmp_path, config, app, expected, "high").logs()


def _assert_all_acked_first_time(tmp_path: Path, app: RecordingApp, expected: int,
                                 logs: str) -> None:
    assert len(app.received) == expected
    assert all(r.event["attempt"] == 1 for r in app.received)
    outcomes = [r["outcome"] for r in journal_records(tmp_path / "journal")]
    assert outcomes == ["ack"] * expected
    assert not queue_rows(tmp_path / "queues.db", "dead")
    assert "internal error" not in logs
    assert "Traceback" not in logs


def test_control_characters_in_attributes_and_traceparent_are_delivered(
    tmp_path: Path, app: RecordingApp
) -> None:
    config = write_config(tmp_path, local_config(tmp_path, app.url))
    body = '{"ok": true}'
    # DEL, ESC and CR/LF through the real CLI (argv cannot carry NUL: that one goes through
    # the same publish code in-process).
    for value in ("a\x7fb", "a\x1bb", "a\r\nb"):
        result = cli("publish", "high", "--data", body, "--attr", f"note={value}",
                     config=config)
        assert result.returncode == 0, result.stderr
    publish(config, "high", body, attributes={"note": "a\x00b"})
    for bad in ("\r\n", "\x7f"):
        trace = TRACEPARENT + bad + "injected: 1"
        result = cli("publish", "high", "--data", _cloudevent(f"ev{ord(bad[0])}",
                     traceparent=trace), config=config)
        assert result.returncode == 0, result.stderr

    logs = _run_until_settled(tmp_path, app, 6)

    _assert_all_acked_first_time(tmp_path, app, 6, logs)
    notes = sorted(r.headers["metadata.note"] for r in app.received[:4])
    assert notes == ["a%00b", "a%0D%0Ab", "a%1Bb", "a%7Fb"]  # made safe, never dropped
    traced = [r for r in app.received if "id" in r.event and r.event["id"].startswith("ev")]
    assert len(traced) == 2
    for request in traced:
        assert "traceparent" not in request.headers  # not a valid W3C value: left out ...
        assert "injected" not in request.headers
        assert request.event["traceparent"].startswith(TRACEPARENT)  # ... the event keeps it
    warnings = [json.loads(line) for line in logs.splitlines()
                if "headers made safe or left out" in line]
    assert len(warnings) == 6  # once per message
    assert sorted(w["headers"][0] for w in warnings) == ["metadata.note"] * 4 + [
        "traceparent"] * 2


def test_json_python_cannot_represent_is_delivered_at_once_without_loss(
    tmp_path: Path, app: RecordingApp
) -> None:
    config = write_config(tmp_path, local_config(tmp_path, app.url))
    deep = "[" * 5000 + "]" * 5000
    big_int = '{"n": ' + "9" * 5000 + "}"
    surrogate = _cloudevent("lone", data="X").replace('"X"', r'"\ud800 and \udfff"')
    deep_event = '{"specversion": "1.0", "id": "deep", "source": "s", "type": "t", "data": ' \
        + deep + "}"
    bodies = [deep, big_int, surrogate, deep_event]
    for text in bodies:
        result = cli("publish", "high", "--data", text, config=config)
        assert result.returncode == 0, result.stderr

    logs = _run_until_settled(tmp_path, app, len(bodies))

    _assert_all_acked_first_time(tmp_path, app, len(bodies), logs)
    by_body = {}
    for request in app.received:
        event = request.event  # every body the app gets is JSON it can parse
        if "data_base64" in event:
            by_body[base64.b64decode(event["data_base64"]).decode()] = event
        else:
            by_body[event["id"]] = event
    # Beyond the parser: the exact bytes, as data_base64 (the app loses nothing).
    for text in (deep, big_int, deep_event):
        assert text in by_body
    # A lone surrogate escape parses: forwarded as a CloudEvent with the escape kept.
    assert by_body["lone"]["data"] == "\ud800 and \udfff"


def test_publish_file_errors_are_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, local_config(tmp_path, "http://127.0.0.1:1"))
    for path in (tmp_path / "missing.bin", tmp_path):
        result = cli("publish", "high", "--file", str(path), config=config)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"priority-pubsub: --file {path}: ")
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "queues.db").exists()  # failed before reaching the driver


def test_publish_data_that_is_not_utf8_publishes_the_bytes(tmp_path: Path) -> None:
    config = write_config(tmp_path, local_config(tmp_path, "http://127.0.0.1:1"))
    raw = b"caf\xe9 \xff\xfe"  # Latin-1, not UTF-8
    result = cli("publish", "high", "--data", os.fsdecode(raw), config=config)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert [row["body"] for row in queue_rows(tmp_path / "queues.db", "high")] == [raw]
