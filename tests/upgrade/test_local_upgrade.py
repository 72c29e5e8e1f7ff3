"""An upgrade over a live local queue: a queue file and a journal written by an earlier
release (the commit ``OLD_COMMIT``, run from its own source tree) are taken over by today's
sidecar, and every message is delivered whatever state the old release left it in; a queue
file from a newer release is refused with one line and left as it was."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import tomllib
from io import BytesIO
from pathlib import Path

import pytest

from priority_pubsub.drivers.local.schema import SCHEMA_VERSION
from priority_pubsub.telemetry.journal import read_journal_lines
from tests.chaos.ledger import journal_outcomes
from tests.e2e.helpers import queue_rows, wait_until
from tests.support.app import RecordingApp
from tests.support.servers import skip_or_fail
from tests.support.sidecar import SidecarProcess, cli, local_config, write_config

pytestmark = [pytest.mark.local]

OLD_COMMIT = "0a295aa"
"""0.1.0 as it stood before the journal's version 2 (2026-11-26, 'Driver kit and a release
verb'): its queue file has no recorded version and its journal lines are version 1."""
REPO = Path(__file__).resolve().parents[2]
LEASE_S = 3.0
DELAY_S = 3.0


def old_source_tree(target: Path) -> Path:
    """``git archive`` of the old commit (no worktree bookkeeping left in the repository),
    with its top-level drivers/ and transforms/ linked inside its priority_pubsub/ (where
    that release installed them)."""
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", OLD_COMMIT],
                                 capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        skip_or_fail(f"commit {OLD_COMMIT} not in this clone's history: {exc}")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    for package in ("drivers", "transforms"):
        (target / "priority_pubsub" / package).symlink_to(target / package)
    return target


def run_old_writer(tree: Path, out: Path) -> dict[str, list[str]]:
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("old_writer.py")), str(out),
         str(LEASE_S), str(DELAY_S)],
        capture_output=True, text=True, timeout=60, cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    assert result.returncode == 0, result.stderr
    written = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(written["module"]).resolve().is_relative_to(tree.resolve()), written["module"]
    ids: dict[str, list[str]] = written["ids"]
    return ids


def user_version(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    return version


def test_queue_and_journal_of_an_old_release_are_taken_over(tmp_path: Path) -> None:
    ids = run_old_writer(old_source_tree(tmp_path / "old"), tmp_path)
    db = tmp_path / "queues.db"
    assert user_version(db) == 0  # the old release recorded no version
    old_lines, bad = read_journal_lines(next((tmp_path / "journal").glob("*.jsonl")))
    assert bad == 0
    assert {line["v"] for line in old_lines} == {1}
    assert len(old_lines) == 3 * len(ids["acked"])  # ack, retry, dead per message
    held = {row["id"]: row for row in queue_rows(db, "normal")}
    assert all(held[i]["leased"] for i in ids["leased"])  # still under the old lease
    assert all(held[i]["attempts"] == 1 and not held[i]["leased"] for i in ids["delayed"])
    dead_rows = queue_rows(db, "dead")
    assert [row["id"] for row in dead_rows] == ids["dead"]
    assert {row["attributes"]["dead_letter_reason"] for row in dead_rows} == {
        "old release said no"}

    # by body: ``requeue`` gives a dead-lettered message a new id on its way back
    expected = {(state, n) for state, group in ids.items() if state != "acked"
                for n in range(len(group))}
    with RecordingApp() as app:
        config = local_config(tmp_path, app.url, lease={"duration_s": 30})
        moved = cli("requeue", "--from", "dead", "--to", "normal",
                    config=write_config(tmp_path, config))
        assert moved.returncode == 0, moved.stderr
        sidecar = SidecarProcess(tmp_path, config, name="upgraded")
        try:
            wait_until(lambda: len(app.received) >= len(expected), timeout_s=30)
        finally:
            assert sidecar.stop() == 0, sidecar.logs()

    seen = [(r.event["data"]["state"], r.event["data"]["n"]) for r in app.received]
    assert sorted(seen) == sorted(expected)  # once each, as the old release stored them
    assert all(not queue_rows(db, q) for q in ("high", "normal", "low", "dead"))
    assert user_version(db) == SCHEMA_VERSION
    outcomes = journal_outcomes(tmp_path / "journal")  # old v1 lines and new v2 lines
    delivered_ids = {r.event["id"] for r in app.received}
    assert all("ack" in outcomes[i] for i in delivered_ids)
    assert set(ids["leased"]) | set(ids["delayed"]) <= delivered_ids  # same ids as before
    assert all(outcomes[i] == ["ack"] for i in ids["acked"])


def test_a_queue_file_from_a_newer_release_is_refused_untouched(tmp_path: Path) -> None:
    config = write_config(tmp_path, local_config(tmp_path, "http://127.0.0.1:9"))
    assert cli("publish", "normal", "--data", "{}", config=config).returncode == 0
    db = tmp_path / "queues.db"
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = queue_rows(db, "normal")

    for command in (("run",), ("publish", "normal", "--data", "{}")):
        result = cli(*command, config=config, timeout_s=30)
        assert result.returncode == 1, (command, result.stderr)
        refusal = [line for line in result.stderr.splitlines() if "newer" in line]
        assert len(refusal) == 1, result.stderr
        assert f"schema version {SCHEMA_VERSION + 1}" in refusal[0]

    assert queue_rows(db, "normal") == before
    assert user_version(db) == SCHEMA_VERSION + 1


def test_version_comes_from_the_project_metadata() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    result = cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"priority-pubsub {declared}"
    assert f"## [{declared}]" in (REPO / "CHANGELOG.md").read_text()
