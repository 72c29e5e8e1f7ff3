"""``priority-pubsub report`` run as a command starts its own JVM: the first run writes the
class archive, the next one starts from it, a torn one is dropped and the run goes on; the
summary is alone on stdout whatever the JVM prints (``analytics.jvm``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from priority_pubsub.analytics.spark import jvm
from tests.spark import journals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def _report(journal_dir: Path, out: Path, archives: Path) -> dict[str, Any]:
    """One run in a process of its own (its own JVM); the JSON summary, all of stdout."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", jvm.ARCHIVE_ENV: str(archives)}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    command = [sys.executable, "-m", "priority_pubsub", "report", str(journal_dir),
               "--out", str(out), "--master", "local[2]", "--json"]  # fmt: skip
    done = subprocess.run(command, cwd=out.parent, env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout)  # nothing but the summary on stdout
    return summary


def _hour(h: int, per_hour: int = 20) -> list[Any]:
    """The records of one hour, ``h`` hours after the journals' T0 (distinct per hour)."""
    records = journals.stats_journal(per_hour=per_hour, hours=h + 1)
    return [r for r in records if r.enqueued_ms >= journals.T0 + h * journals.HOUR_MS]


def test_the_class_archive_is_written_once_used_next_and_a_torn_one_dropped(
    spark: SparkSession, tmp_path: Path
) -> None:
    incoming, out, archives = tmp_path / "in", tmp_path / "out", tmp_path / "archives"
    journals.write(incoming / "journal-a-000001.jsonl", _hour(0))
    first = _report(incoming, out, archives)
    assert first["jvm"] == {"jit": "quick", "class_archive": "writing"}
    [saved] = list(archives.iterdir())  # written after the run, and only then named
    assert saved.name.endswith(f"-{saved.stat().st_size}.jsa")
    assert saved.stat().st_size > 10_000_000
    written_at = saved.stat().st_mtime_ns

    journals.write(incoming / "journal-a-000002.jsonl", _hour(1))
    second = _report(incoming, out, archives)
    assert second["jvm"] == {"jit": "quick", "class_archive": "used"}
    assert second["files"]["new"] == 1
    assert list(archives.iterdir()) == [saved]
    assert saved.stat().st_mtime_ns == written_at  # used as it was, not written again

    # an archive cut short though its name says it is whole (a disk that lost its tail): the
    # JVM dies mapping it (SIGBUS); the run starts a JVM without it and deletes it
    prefix = saved.name.rsplit("-", 1)[0]
    half = saved.read_bytes()[: saved.stat().st_size // 2]
    saved.unlink()
    torn = archives / f"{prefix}-{len(half)}.jsa"
    torn.write_bytes(half)
    journals.write(incoming / "journal-a-000003.jsonl", _hour(2))
    third = _report(incoming, out, archives)
    assert third["jvm"] == {"jit": "quick", "class_archive": "discarded"}
    assert third["files"]["new"] == 1
    assert third["deliveries"] > second["deliveries"] > first["deliveries"]
    assert not torn.exists()
    assert list(out.glob("hs_err_pid*.log"))  # the JVM's crash report, beside spark.log
    assert not list(tmp_path.glob("hs_err_pid*.log"))  # not in the working directory
