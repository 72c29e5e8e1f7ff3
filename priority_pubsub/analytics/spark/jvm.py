"""JVM options for the Spark session ``priority-pubsub report`` starts itself: a class
archive kept between runs, and a quick JIT when the new input is small.

Why. An hourly incremental run reads ~100 k new records; on 2 cores a fresh JVM spends most
of such a run loading classes and compiling, not working. Measured on the 1 M-record bench
history (``bench.report_incremental``'s journals, 100 k new, ``local[2]``):

- **Class archive** (AppCDS: the JVM's class data sharing, ``-XX:SharedArchiveFile``). Spark
  loads ~28,000 classes, each read out of a jar, parsed and verified; an archive of them,
  written by one run as its JVM exits (``-XX:ArchiveClassesAtExit``), is mapped by the next
  ones instead: a bare session starts in about half the time, and the first run pays a few
  seconds to write it, after its report is out (docs/performance.md). The archive is
  110-200 MB, kept in ``$XDG_CACHE_HOME/priority-pubsub`` (``~/.cache``), one per Java,
  Spark and jar set; ``PRIORITY_PUBSUB_REPORT_CLASS_ARCHIVE=off`` turns it off, a directory
  puts it there.
- **Quick JIT** (``-XX:TieredStopAtLevel=1``: the client compiler only). The optimizing
  compiler pays for itself on long runs only: with it off an incremental run is faster and a
  full rebuild slower (docs/performance.md). So it is
  used when the new input is at most ``QUICK_JIT_MAX_BYTES`` (one rotated journal file) and
  the input can be sized before the JVM starts (local journals and state).

A torn archive would crash the JVM as it maps it (SIGBUS, its report on stdout), so an
archive is only ever written under a name of its own and renamed into place, its size in
its name, once its JVM has exited with 0; a file whose size is not its name's is deleted
unread; and a session that fails to start with an archive anyway is started again without
it, and the archive deleted (``ClassArchive.discard``). A session given by the caller, or
one started by ``spark-submit``, keeps its own JVM options.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from priority_pubsub.settings.config import REPORT_CLASS_ARCHIVE_ENV

QUICK_JIT_MAX_BYTES = 64 * 1024 * 1024
QUICK_JIT = "-XX:TieredStopAtLevel=1"
JVM_LOG = "-Xlog:disable -Xlog:all=warning:stderr -Xlog:cds*=off:stderr"
"""The JVM's own warnings on stderr, never on stdout (``--json`` prints the summary there),
and none about classes an archive cannot hold (thousands of lines while one is written)."""
ARCHIVE_ENV = REPORT_CLASS_ARCHIVE_ENV
OFF = ("off", "0", "false", "no")
WRITE_TIMEOUT_S = 120.0
STALE_S = 600.0
"""A ``.writing`` file older than this was left by a run that died while writing it."""


@dataclass
class ClassArchive:
    """The archive for this Java and Spark in ``directory``: ``<name>-<bytes>.jsa``, used when
    its size is the one in its name (a file cut short is deleted, never mapped); else written
    by this run at ``<name>.<pid>.writing`` and moved into place by ``finish``."""

    directory: Path
    name: str
    used: Path | None = None
    writable: bool = True

    @property
    def writing(self) -> Path:
        return self.directory / f"{self.name}.{os.getpid()}.writing"

    def find(self) -> Path | None:
        """The complete archive, if there is one (torn ones and stale writes deleted)."""
        found = None
        with contextlib.suppress(OSError):
            for path in self.directory.glob(f"{self.name}*"):
                info = path.stat()
                if path.suffix == ".jsa" and path.stem.rsplit("-", 1)[-1] == str(info.st_size):
                    found = path
                elif path.suffix == ".jsa" or time.time() - info.st_mtime > STALE_S:
                    path.unlink()
        return found

    def java_options(self) -> list[str]:
        self.used = self.find()
        if self.used is not None:
            return [f"-XX:SharedArchiveFile={self.used}", "-Xshare:auto"]
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only home (a container): no archive, the run goes on
            self.writable = False
            return []
        return [f"-XX:ArchiveClassesAtExit={self.writing}"]

    def finish(self) -> bool:
        """After the session stopped: when this run writes the archive, end its JVM (the
        gateway exits when its stdin closes), wait for the archive to be written and move it
        into place. True when an archive was saved."""
        if self.used is not None or not self.writable:
            return False
        from pyspark import SparkContext

        proc = getattr(SparkContext._gateway, "proc", None)
        if proc is None or proc.stdin is None:
            return False
        try:
            proc.stdin.close()
            code = proc.wait(timeout=WRITE_TIMEOUT_S)
        except Exception:  # the JVM did not end in time: leave it, keep no archive
            code = None
        SparkContext._gateway = None
        SparkContext._jvm = None
        writing = self.writing
        with contextlib.suppress(OSError):
            size = writing.stat().st_size
            if code == 0 and size > 0:
                os.replace(writing, self.directory / f"{self.name}-{size}.jsa")
                return True
            writing.unlink()
        return False

    def discard(self) -> None:
        """Delete the archive used (a session failed to start with it)."""
        if self.used is not None:
            with contextlib.suppress(OSError):
                self.used.unlink()
            self.used = None


def class_archive(environ: Mapping[str, str] | None = None) -> ClassArchive | None:
    """The archive for the Java and Spark this process would start; None when turned off or
    when Java or Spark cannot be found."""
    env = os.environ if environ is None else environ
    setting = env.get(ARCHIVE_ENV, "").strip()
    if setting.lower() in OFF:
        return None
    key = _runtime_key(env)
    if key is None:
        return None
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "priority-pubsub"
    directory = Path(setting).expanduser() if setting else cache
    return ClassArchive(directory, f"spark-classes-{key}")


def _runtime_key(env: Mapping[str, str]) -> str | None:
    """A digest of what the archive depends on: the java binary and Spark's jars."""
    java_home = env.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    try:
        from pyspark.find_spark_home import _find_spark_home

        jars = Path(env.get("SPARK_HOME") or _find_spark_home()) / "jars"
        if java is None or not jars.is_dir():
            return None
        real = os.path.realpath(java)
        binary = os.stat(real)
        digest = hashlib.sha256(f"{real} {binary.st_size} {binary.st_mtime_ns}".encode())
        for jar in sorted(jars.iterdir()):
            digest.update(f"{jar.name} {jar.stat().st_size}\n".encode())
    except (ImportError, OSError, SystemExit):  # _find_spark_home exits when it finds none
        return None
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def jvm_stdout_to_stderr() -> Iterator[None]:
    """Start the JVM inside with this process's stderr as its stdout.

    The JVM inherits file descriptor 1, and some of what it prints cannot be sent elsewhere
    by an option (a fatal error's report, its launcher's warnings): on the report's stdout
    they would break the JSON summary scripts read there. Python's own ``sys.stdout`` is
    flushed first and its descriptor put back after."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def quick_jit(new_bytes: int | None) -> bool:
    """Whether a run reading ``new_bytes`` (None: not known before the JVM starts) gets the
    client compiler only."""
    return new_bytes is not None and new_bytes <= QUICK_JIT_MAX_BYTES


def java_options(
    base: str, new_bytes: int | None, archive: ClassArchive | None, crash_dir: Path | None = None
) -> str:
    """``base`` and the options this run adds: the archive's, the quick JIT for a small
    input (``new_bytes`` known and at most ``QUICK_JIT_MAX_BYTES``), ``JVM_LOG``, and the
    JVM's crash report (``hs_err_pid*.log``) in ``crash_dir`` (the output, beside
    ``spark.log``) rather than the working directory."""
    options = [base] if base else []
    if quick_jit(new_bytes):
        options.append(QUICK_JIT)
    if archive is not None:
        options += archive.java_options()
    options.append(JVM_LOG)
    if crash_dir is not None:
        options.append(f"-XX:ErrorFile={crash_dir / 'hs_err_pid%p.log'}")
    return " ".join(options)
