"""What the machine and its processes say about themselves (``/proc``), and scratch
directories.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process in seconds, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def machine_info() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_1m_at_start": round(load[0], 2),
    }


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix=f"bench-{prefix}-") as path:
        yield Path(path)
