"""The JVM the report starts itself: the class archive's life and the JIT by input size."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from priority_pubsub.analytics.journal.files import local_new_bytes
from priority_pubsub.analytics.report import _new_input_bytes
from priority_pubsub.analytics.spark import jvm
from priority_pubsub.analytics.state.store import Manifest


def _runtime(tmp_path: Path) -> dict[str, str]:
    """A Java and a Spark home of a few bytes each (the key reads names and sizes only)."""
    (tmp_path / "java" / "bin").mkdir(parents=True)
    (tmp_path / "java" / "bin" / "java").write_text("java")
    (tmp_path / "spark" / "jars").mkdir(parents=True)
    (tmp_path / "spark" / "jars" / "spark-core.jar").write_text("classes")
    return {
        "JAVA_HOME": str(tmp_path / "java"),
        "SPARK_HOME": str(tmp_path / "spark"),
        jvm.ARCHIVE_ENV: str(tmp_path / "archives"),
    }


def test_a_small_new_input_gets_the_quick_jit_a_large_or_unsized_one_does_not() -> None:
    assert jvm.QUICK_JIT in jvm.java_options("-XX:+UseParallelGC", 25_000_000, None)
    assert jvm.QUICK_JIT not in jvm.java_options("-XX:+UseParallelGC", 275_000_000, None)
    assert jvm.QUICK_JIT not in jvm.java_options("-XX:+UseParallelGC", None, None)
    options = jvm.java_options("-XX:+UseParallelGC", None, None, Path("/out"))
    assert options.startswith("-XX:+UseParallelGC ")
    assert jvm.JVM_LOG in options  # the JVM's warnings on stderr, never on stdout
    assert "-XX:ErrorFile=/out/hs_err_pid%p.log" in options


def test_the_archive_is_written_under_its_own_name_and_used_only_when_whole(
    tmp_path: Path,
) -> None:
    archive = jvm.class_archive(_runtime(tmp_path))
    assert archive is not None
    assert archive.java_options() == [f"-XX:ArchiveClassesAtExit={archive.writing}"]
    assert archive.writing.parent.is_dir()
    assert archive.writing.name.endswith(".writing")

    torn = archive.directory / f"{archive.name}-1000.jsa"  # its name says 1000 bytes
    torn.write_bytes(b"x" * 10)
    assert archive.find() is None
    assert not torn.exists()  # deleted unread: a torn archive crashes the JVM mapping it

    whole = archive.directory / f"{archive.name}-10.jsa"
    whole.write_bytes(b"x" * 10)
    assert archive.java_options() == [f"-XX:SharedArchiveFile={whole}", "-Xshare:auto"]
    assert archive.used == whole
    assert archive.finish() is False  # nothing to write: the run used it
    archive.discard()
    assert not whole.exists()
    assert archive.used is None


def test_a_directory_that_cannot_be_made_means_no_archive_not_a_failed_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "read-only-home").write_text("a file where the directory would be")
    env = {**_runtime(tmp_path), jvm.ARCHIVE_ENV: str(tmp_path / "read-only-home" / "cache")}
    archive = jvm.class_archive(env)
    assert archive is not None
    assert archive.java_options() == []
    assert archive.writable is False
    assert archive.finish() is False


def test_a_write_left_by_a_run_that_died_is_removed_once_stale(tmp_path: Path) -> None:
    archive = jvm.class_archive(_runtime(tmp_path))
    assert archive is not None
    archive.directory.mkdir(parents=True)
    fresh = archive.directory / f"{archive.name}.111.writing"
    stale = archive.directory / f"{archive.name}.222.writing"
    fresh.write_bytes(b"x")
    stale.write_bytes(b"x")
    old = time.time() - jvm.STALE_S - 60
    os.utime(stale, (old, old))
    assert archive.find() is None
    assert fresh.exists()  # another run may still be writing `fresh`
    assert not stale.exists()


def test_another_java_or_spark_gets_another_archive_and_off_turns_it_off(tmp_path: Path) -> None:
    env = _runtime(tmp_path)
    first = jvm.class_archive(env)
    assert first is not None
    (tmp_path / "spark" / "jars" / "delta.jar").write_text("more classes")
    second = jvm.class_archive(env)
    (tmp_path / "java" / "bin" / "java").write_text("another java")
    third = jvm.class_archive(env)
    assert second is not None
    assert third is not None
    assert len({first.name, second.name, third.name}) == 3
    assert jvm.class_archive({**env, jvm.ARCHIVE_ENV: "off"}) is None
    cache = jvm.class_archive({**env, jvm.ARCHIVE_ENV: "", "XDG_CACHE_HOME": str(tmp_path / "c")})
    assert cache is not None
    assert cache.directory == tmp_path / "c" / "priority-pubsub"
    assert jvm.class_archive({**env, "SPARK_HOME": str(tmp_path / "nowhere")}) is None


def test_the_new_input_is_sized_before_spark_from_the_local_state(tmp_path: Path) -> None:
    journals = tmp_path / "journals"
    journals.mkdir()
    (journals / "journal-a-000001.jsonl").write_bytes(b"a" * 100)
    (journals / "journal-a-000002.jsonl").write_bytes(b"b" * 30)
    (journals / "journal-a-000003.jsonl.open").write_bytes(b"c" * 1000)  # still written
    read = {"journal-a-000001.jsonl": {"size": 100, "hash": "h", "path": "p", "run": "r"}}
    assert local_new_bytes(str(journals), read) == 30
    assert local_new_bytes(str(journals), {}) == 130
    assert local_new_bytes("s3a://bucket/journals", {}) is None

    state = tmp_path / "state"
    (state / "manifest").mkdir(parents=True)
    (state / "manifest" / "00000001.json").write_text(Manifest(seq=1, files=read).to_json())
    (state / "manifest" / "00000002.json").write_text("{torn")  # a run that died committing
    assert _new_input_bytes(str(journals), str(state), full=False) == 30
    assert _new_input_bytes(str(journals), str(state), full=True) == 130
    assert _new_input_bytes(str(journals), str(tmp_path / "new-state"), full=False) == 130
    assert _new_input_bytes(str(journals), "hdfs://nn/state", full=False) is None


def test_what_the_jvm_prints_while_it_starts_reaches_stderr_not_stdout(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with jvm.jvm_stdout_to_stderr():
        subprocess.run(["echo", "from the JVM"], check=True)  # inherits fd 1, as the JVM does
    print("summary")
    out, err = capfd.readouterr()
    assert out == "summary\n"
    assert err == "from the JVM\n"
