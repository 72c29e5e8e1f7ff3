"""The app contract end to end (docs/app/contract.md): every row
of Dapr's response table, fatal codes, backoff timing, max attempts and transform errors,
through the real CLI and a real app."""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from tests.e2e.helpers import (
    journal_records,
    publish,
    queue_rows,
    serve_until_drained,
    stats,
    wait_until,
)
from tests.support.app import Received, RecordingApp, Reply
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = pytest.mark.local

# case -> (reply, expected final outcome, requests the app should see)
CASES: dict[str, tuple[Reply, str, int]] = {
    "empty-200": (Reply(200, b""), "ack", 1),
    "text-200": (Reply(200, "thanks"), "ack", 1),
    "success": (Reply(200, {"status": "SUCCESS"}), "ack", 1),
    "created-201": (Reply(201, {"id": 7}), "ack", 1),
    "retry": (Reply(200, {"status": "RETRY"}), "dead", 3),
    "unknown-status": (Reply(200, {"status": "MAYBE"}), "dead", 3),
    "drop": (Reply(200, {"status": "DROP"}), "drop", 1),
    "not-found": (Reply(404), "drop", 1),
    "fatal-400": (Reply(400), "dead", 1),
    "fatal-422": (Reply(422), "dead", 1),
    "server-error": (Reply(500), "dead", 3),
    "hangs": (Reply(200, delay_s=5), "dead", 3),
}


def _answer(received: Received) -> Reply:
    return CASES[received.event["data"]["case"]][0]


def test_dapr_response_table(tmp_path: Path, app: RecordingApp) -> None:
    app.behaviour = _answer
    config = local_config(tmp_path, app.url, concurrency=4,
                          app={"url": app.url, "timeout_s": 0.5, "fatal_codes": [400, 422]})
    config_path = write_config(tmp_path, config)
    ids = {case: publish(config_path, "normal", json.dumps({"case": case}))[0] for case in CASES}
    expected_requests = sum(count for _, _, count in CASES.values())
    serve_until_drained(tmp_path, config, app, expected_requests, "normal", timeout_s=40)

    seen: dict[str, list[Received]] = defaultdict(list)
    for request in app.received:
        seen[request.event["data"]["case"]].append(request)
    finals = _final_outcomes(journal_records(tmp_path / "journal"))
    for case, (_, outcome, requests) in CASES.items():
        assert len(seen[case]) == requests, case
        assert [r.event["attempt"] for r in seen[case]] == list(range(1, requests + 1)), case
        assert finals[ids[case]]["outcome"] == outcome, case

    dead = {row["id"]: row for row in queue_rows(tmp_path / "queues.db", "dead")}
    for case, (_, outcome, _) in CASES.items():
        if outcome in ("dead", "drop"):  # a dead-letter queue is configured: both land there
            assert ids[case] in dead, case
    assert "max attempts (3) reached" in dead[ids["server-error"]]["attributes"][
        "dead_letter_reason"]
    assert "fatal status 400" in dead[ids["fatal-400"]]["attributes"]["dead_letter_reason"]
    assert "did not answer within 0.5s" in finals[ids["hangs"]]["reason"]
    assert stats(config_path)["dead_letter"]["visible"] == len(dead)


def test_backoff_doubles_between_attempts(tmp_path: Path, app: RecordingApp) -> None:
    app.behaviour = lambda _: Reply(503)
    config = local_config(tmp_path, app.url,
                          retry={"max_attempts": 4, "initial_delay_s": 0.4, "max_delay_s": 1.0})
    publish(write_config(tmp_path, config), "high", '{"n": 1}')
    sidecar = SidecarProcess(tmp_path, config)
    try:
        received = app.wait_for(4, timeout_s=20)
    finally:
        assert sidecar.stop() == 0
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(received)]
    # 0.4, 0.8, then capped at 1.0 (each gap also holds up to one poll interval of slack)
    for gap, delay in zip(gaps, (0.4, 0.8, 1.0), strict=True):
        assert delay - 0.05 <= gap <= delay + 0.6, gaps


def test_app_unreachable_is_waited_for_never_dead_lettered(tmp_path: Path) -> None:
    """An app that never comes up costs nothing: the start gate takes no message,
    so the retry schedule (2 attempts, 0.1 s apart) cannot burn it; /readyz says why."""
    config = local_config(tmp_path, f"http://127.0.0.1:{free_port()}",
                          retry={"max_attempts": 2, "initial_delay_s": 0.1, "max_delay_s": 0.1})
    [message_id] = publish(write_config(tmp_path, config), "low", "plain text body")
    sidecar = SidecarProcess(tmp_path, config)
    try:
        wait_until(lambda: "app not reachable" in _readyz(sidecar), timeout_s=15)
        time.sleep(3)  # 15x the whole retry schedule
        assert "app not reachable" in _readyz(sidecar)
    finally:
        assert sidecar.stop() == 0
    assert queue_rows(tmp_path / "queues.db", "dead") == []
    [waiting] = queue_rows(tmp_path / "queues.db", "low")
    assert waiting["id"] == message_id
    assert waiting["attempts"] == 0
    assert not waiting["leased"]


def _readyz(sidecar: SidecarProcess) -> str:
    try:
        return httpx.get(f"{sidecar.ops_url}/readyz", timeout=2).text
    except httpx.HTTPError:
        return ""


def test_malformed_envelope_is_dead_lettered_with_reason_not_retried(
    tmp_path: Path, app: RecordingApp
) -> None:
    config = local_config(tmp_path, app.url, transforms=["sns_envelope"])
    config_path = write_config(tmp_path, config)
    bad_json = publish(config_path, "high", "{not json")[0]
    not_envelope = publish(config_path, "high", '{"hello": "world"}')[0]
    sidecar = SidecarProcess(tmp_path, config)
    try:
        wait_until(lambda: len(queue_rows(tmp_path / "queues.db", "dead")) == 2, timeout_s=15)
    finally:
        assert sidecar.stop() == 0
    assert app.received == []
    reasons = {row["id"]: row["attributes"]["dead_letter_reason"]
               for row in queue_rows(tmp_path / "queues.db", "dead")}
    assert "sns_envelope: body is not JSON" in reasons[bad_json]
    assert "neither an SNS Notification envelope nor a CloudEvent" in reasons[not_envelope]
    assert all(r["attempt"] == 1 for r in journal_records(tmp_path / "journal"))


def test_without_dead_letter_queue_dead_messages_are_deleted_but_journaled(
    tmp_path: Path, app: RecordingApp
) -> None:
    app.behaviour = lambda _: Reply(400)
    config = local_config(tmp_path, app.url, dead_letter=None)
    [message_id] = publish(write_config(tmp_path, config), "normal", "{}")
    sidecar = SidecarProcess(tmp_path, config)
    try:
        app.wait_for(1)
        wait_until(lambda: not queue_rows(tmp_path / "queues.db", "normal"))
        wait_until(lambda: journal_records(tmp_path / "journal"), timeout_s=5)
    finally:
        assert sidecar.stop() == 0
    [record] = journal_records(tmp_path / "journal")
    assert (record["message_id"], record["outcome"], record["http_status"]) == (
        message_id, "dead", 400)
    assert "fatal status 400" in sidecar.logs()


def _final_outcomes(records: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    final: dict[str, dict[str, object]] = {}
    for record in sorted(records, key=lambda r: (str(r["message_id"]), int(str(r["attempt"])))):
        final[str(record["message_id"])] = record
    return final
