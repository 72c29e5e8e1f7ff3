"""Hostile bodies and attributes, all legal for a broker: each is delivered at its first
attempt (or, for an expired CloudEvent, dropped to the dead-letter queue as Dapr does) and
never takes the internal-error path. Accounted from the journal (a CloudEvent body keeps its
own id, so the app's view cannot name the broker message)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from priority_pubsub.drivers.local.driver import LocalDriver
from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.settings.config import load_config
from tests.chaos.ledger import Accounting, account
from tests.e2e.helpers import journal_records, queue_rows, wait_until
from tests.support.app import RecordingApp
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = [pytest.mark.chaos, pytest.mark.local]

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _ce(**fields: object) -> bytes:
    event = {"specversion": "1.0", "id": "ce", "source": "chaos", "type": "t", **fields}
    return json.dumps(event).encode()


# label -> (body, attributes, content type, expected final outcome)
CASES: dict[str, tuple[bytes, dict[str, str], str | None, str]] = {
    "empty": (b"", {}, None, "ack"),
    "binary": (bytes(range(256)), {}, None, "ack"),
    "latin-1 text": (b"caf\xe9", {}, "text/plain", "ack"),
    "broken json": (b'{"a": ', {}, None, "ack"),
    "json array": (b"[1, 2, 3]", {}, None, "ack"),
    "json null": (b"null", {}, None, "ack"),
    "json string": (b'"just a string"', {}, None, "ack"),
    "utf-8 bom": (b'\xef\xbb\xbf{"a": 1}', {}, None, "ack"),
    "nesting 100k": (b"[" * 100_000 + b"]" * 100_000, {}, None, "ack"),
    "object nesting 5k": (b'{"a":' * 5000 + b"1" + b"}" * 5000, {}, None, "ack"),
    "integer 10k digits": (b'{"n": ' + b"7" * 10_000 + b"}", {}, None, "ack"),
    "lone surrogates": (_ce(data="X").replace(b'"X"', rb'"\ud800\udfff\udc00"'), {}, None,
                        "ack"),
    "ce id not a string": (_ce(id=7), {}, None, "ack"),
    "ce missing source": (json.dumps({"specversion": "1.0", "id": "x", "type": "t"}).encode(),
                          {}, None, "ack"),
    "ce deep data": (_ce(data="X").replace(b'"X"', b"[" * 3000 + b"]" * 3000), {}, None,
                     "ack"),
    "ce traceparent crlf": (_ce(traceparent=TRACE + "\r\nx-injected: 1"), {}, None, "ack"),
    "ce traceparent del": (_ce(traceparent=TRACE + "\x7f"), {}, None, "ack"),
    "ce tracestate nul": (_ce(traceparent=TRACE, tracestate="a=b\x00"), {}, None, "ack"),
    "ce expiration garbage": (_ce(expiration="not a time"), {}, None, "ack"),
    "ce expired": (_ce(expiration="2001-01-01T00:00:00Z"), {}, None, "drop"),
    "ce bad data_base64": (_ce(data_base64="%%%"), {}, None, "ack"),
    "unicode": ("{\"s\": \"\u202eevil \U0001f600 \u0000\"}".encode(), {}, None, "ack"),
    "attr control chars": (b"{}", {"a": "x\x00\x01\x1b\x7fy", "b": "line\r\nbreak"}, None,
                           "ack"),
    "attr bad names": (b"{}", {"bad name": "1", "": "2", "ok\nno": "3", "é": "4"}, None,
                       "ack"),
    "attr unicode value": (b"{}", {"u": "\u00e9\u4e2d\U0001f600"}, None, "ack"),
    "attr lone surrogate": (b"{}", {"s": "a\ud800b"}, None, "ack"),
    "content type garbage": (b"{}", {}, "\x00/\x7f", "ack"),
    # (the test app, aiohttp, answers 413 past 1 MiB: that is the app's limit, not ours)
    "half a MiB": (b'{"x": "' + b"a" * 524_288 + b'"}', {}, None, "ack"),
}


async def _publish_all(config: Path) -> dict[str, str]:
    driver = build_driver(load_config(config))
    assert isinstance(driver, LocalDriver)
    await driver.start()
    try:
        return {label: await driver.publish("high", body, attributes, content_type)
                for label, (body, attributes, content_type, _) in CASES.items()}
    finally:
        await driver.close()


def test_hostile_bodies_are_delivered_or_decided_at_once(
    tmp_path: Path, app: RecordingApp, report: list[Accounting]
) -> None:
    config = local_config(tmp_path, app.url, concurrency=4)
    ids = asyncio.run(_publish_all(write_config(tmp_path, config)))
    sidecar = SidecarProcess(tmp_path, config)
    try:
        wait_until(lambda: not queue_rows(tmp_path / "queues.db", "high"), timeout_s=60)
    finally:
        assert sidecar.stop() == 0
    logs = sidecar.logs()

    records = journal_records(tmp_path / "journal")
    seen = Counter(str(r["message_id"]) for r in records if r["forwarded_ms"] is not None)
    dead = {row["id"] for row in queue_rows(tmp_path / "queues.db", "dead")}
    result = account("hostile bodies + attributes", list(ids.values()), seen, set(), dead,
                     note=f"{len(CASES)} kinds, 1 expired (dropped)")
    report.append(result)
    final = {str(r["message_id"]): r for r in records}
    wrong = {label: final.get(ids[label], {}).get("outcome")
             for label, case in CASES.items() if final.get(ids[label], {}).get("outcome")
             != case[3]}
    assert not wrong, wrong
    assert all(r["attempt"] == 1 for r in records)  # nothing was retried
    assert len(records) == len(CASES)
    assert len(app.received) == len(CASES) - 1  # the expired one is not delivered
    assert result.lost == 0
    assert result.dead == 1
    assert "internal error" not in logs
    assert "Traceback" not in logs
