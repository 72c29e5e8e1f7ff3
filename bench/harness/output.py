"""What a benchmark prints: ONE JSON document on stdout (collected by ``bench.run_all``) and a
short human table on stderr; the sidecar's own logs go to a file, so the table stays
readable.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bench.harness.system import machine_info, temp_dir

Returned = TypeVar("Returned")


def emit(name: str, result: dict[str, Any], headers: Sequence[str],
         rows: Sequence[Sequence[object]]) -> None:
    """Print the JSON document on stdout and a short table on stderr."""
    document = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "command": " ".join([Path(sys.executable).name, "-m", f"bench.{name}",
                                     *sys.argv[1:]]),
                "machine": machine_info(), **result}
    print(json.dumps(document, indent=1, default=str))
    sys.stdout.flush()
    print(format_table(headers, rows), file=sys.stderr)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r]
                                           for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def quiet_logging(path: Path) -> None:
    """Configure the sidecar's logging as shipped (info, JSON), written to ``path`` instead of
    stderr so the table stays readable. The cost of every log line is still paid."""
    from priority_pubsub.telemetry.logs import configure_logging

    handle = path.open("a", encoding="utf-8")  # kept open for the life of the process
    with contextlib.redirect_stderr(handle):
        configure_logging("info", "json")


def run_with_logs_aside(main: Coroutine[Any, Any, Returned]) -> Returned:
    """Run a benchmark's ``main`` on the loop the sidecar runs on by default (``run_loop``) with
    the sidecar's logs going to a temporary file (``quiet_logging``): what every in-process
    benchmark does around its event loop. ``bench.event_loop`` compares the loops."""
    from priority_pubsub.commands.run import run_loop

    with temp_dir("logs") as directory:
        quiet_logging(directory / "sidecar.log")
        return run_loop(main)
