"""A test server run as a child process: started, waited for until it answers, stopped
afterwards (terminated, killed if it will not go), its output kept for the error when it
never answers. moto and the object-store emulators start this way."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path


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
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
