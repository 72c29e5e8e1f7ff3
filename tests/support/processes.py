"""Stopping a child process politely: what every server and app helper does at its end."""

from __future__ import annotations

import subprocess


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
