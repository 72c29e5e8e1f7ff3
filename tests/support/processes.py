"""Child processes of the tests: a test server started and waited for until it answers, and
stopping a process politely, what every server and app helper does at its end."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path


def stop_process(process: subprocess.Popen[bytes], wait_s: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``wait_s``; reaped either way (a
    process that already exited is left as it is)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def answering_process(name: str, command: list[str], answers: Callable[[], bool], *,
                      timeout_s: float, unavailable: type[Exception],
                      env: Mapping[str, str] | None = None, cwd: Path | None = None,
                      new_session: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` until the block ends; the block starts once ``answers()`` holds.
    Raises ``unavailable``, naming the server (``name``) with the tail of its output, if it
    exits first or does not answer within ``timeout_s``."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   env=dict(env) if env is not None else None, cwd=cwd,
                                   start_new_session=new_session)
        try:
            deadline = time.monotonic() + timeout_s
            while not answers():
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read()[-2000:].decode("utf-8", "replace")
                    raise unavailable(f"{name} did not start: {tail}")
                time.sleep(0.1)
            yield process
        finally:
            stop_process(process)
