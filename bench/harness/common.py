"""Shared pieces of the benchmarks: the no-op app process, settings, timing, output.

Every benchmark prints ONE JSON document on stdout (machine-readable, collected by
``bench.run_all``) and a short human table on stderr. Absolute numbers on a shared 2-core
machine are noisy, so each script measures the things it compares in the same run, interleaved,
and reports ratios.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from priority_pubsub.settings.config import Settings, validate_config
from tests.support.ports import free_port
from tests.support.processes import stop_process

Run = TypeVar("Run")
BODY_PAD = "x" * 160
"""Bodies of ~200 bytes: a task reference and a little payload, as a frontend publishes."""


def sample_body(index: int) -> bytes:
    return json.dumps({"task": index, "kind": "bench", "pad": BODY_PAD}).encode()


def wait_for_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


class AppProcess:
    """``bench.harness.noop_app`` in its own process (uvicorn raw ASGI, uvloop, httptools)."""

    def __init__(self, *, record: bool = False, delay_ms: float = 0.0,
                 port: int | None = None) -> None:
        self.port = port or free_port()  # a port: "the same app" back after an outage
        command = [sys.executable, "-m", "bench.harness.noop_app", "--port", str(self.port)]
        if record:
            command.append("--record")
        if delay_ms:
            command += ["--delay-ms", str(delay_ms)]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        try:
            wait_for_port(self.port)
        except RuntimeError:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/tasks"

    def stats(self) -> dict[str, Any]:
        """Requests seen and, in record mode, CloudEvent id -> arrival ns (then cleared)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_stats", timeout=10) as rsp:
            value: dict[str, Any] = json.loads(rsp.read())
            return value

    def stop(self) -> None:
        stop_process(self.process)

    def __enter__(self) -> AppProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def make_settings(directory: Path, driver: dict[str, Any], queues: Sequence[str | dict[str, Any]],
                  **options: Any) -> Settings:
    """``raw_config`` (its keyword options), validated: the settings an in-process sidecar
    runs with."""
    return validate_config(raw_config(directory, driver, queues, **options))


def raw_config(
    directory: Path,
    driver: dict[str, Any],
    queues: Sequence[str | dict[str, Any]],
    *,
    app_url: str,
    concurrency: int,
    scheduling: str = "strict",
    journal: bool = True,
    lease_s: float = 60,
    port: int = 0,
) -> dict[str, Any]:
    """The shipped defaults, plus what a benchmark must pin (queues, app, ports, paths)."""
    raw: dict[str, Any] = {
        "driver": driver,
        "queues": [q if isinstance(q, dict) else {"name": q} for q in queues],
        "scheduling": scheduling,
        "concurrency": concurrency,
        "app": {"url": app_url, "timeout_s": 60},
        "lease": {"duration_s": lease_s},
        "shutdown": {"grace_s": 5},
        "server": {"host": "127.0.0.1", "port": port},
        "log": {"level": "info", "format": "json"},
    }
    if journal:
        raw["journal"] = {"path": str(directory / "journal"), "rotate_mb": 64}
    return raw


class CliSidecar:
    """``priority-pubsub run`` as a subprocess (what users deploy), logs to a file."""

    def __init__(self, directory: Path, config: dict[str, Any], name: str = "sidecar",
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        """``cwd``: run there (with ``PYTHONPATH`` set to it in ``env``, another checkout's
        code, e.g. a ``git_worktree`` of main's)."""
        import yaml

        self.port = free_port()
        self.config = {**config, "server": {**config["server"], "port": self.port}}
        """The config it runs with (its ops port set): what a reload rewrites."""
        self.config_path = directory / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self._log = (directory / f"{name}.log").open("wb")
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "priority_pubsub", "run", "-c", str(self.config_path)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, cwd=cwd,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as rsp:
                return int(rsp.status), bytes(rsp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, b""

    def wait_ready(self, timeout_s: float = 30) -> float:
        """Seconds from process start to the first 200 on /readyz."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sidecar exited with {self.process.returncode}")
            with contextlib.suppress(OSError):
                if self.get("/readyz")[0] == 200:
                    return time.perf_counter() - self.started
            time.sleep(0.01)
        raise RuntimeError(f"sidecar not ready within {timeout_s}s")

    def metric_sum(self, name: str) -> float:
        """Sum of all samples of one metric family from /metrics."""
        _, body = self.get("/metrics")
        total = 0.0
        for line in body.decode().splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        stop_process(self.process, 30)
        self._log.close()


def quiet_logging(path: Path) -> None:
    """Configure the sidecar's logging as shipped (info, JSON), written to ``path`` instead of
    stderr so the table stays readable. The cost of every log line is still paid."""
    from priority_pubsub.telemetry.logs import configure_logging

    handle = path.open("a", encoding="utf-8")  # kept open for the life of the process
    with contextlib.redirect_stderr(handle):
        configure_logging("info", "json")


def run_with_logs_aside(main: Coroutine[Any, Any, Run]) -> Run:
    """Run a benchmark's ``main`` on uvloop with the sidecar's logs going to a temporary file
    (``quiet_logging``): what every in-process benchmark does around its event loop."""
    import uvloop

    with temp_dir("logs") as directory:
        quiet_logging(directory / "sidecar.log")
        return uvloop.run(main)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def median_run(runs: Sequence[Run], key: Callable[[Run], float]) -> Run | None:
    """The run whose ``key`` is the median (the lower middle one of an even count), so its
    other figures are shown beside that median; None without runs."""
    ordered = sorted(runs, key=key)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def median_of(values: Sequence[float | None]) -> float | None:
    """Median of the rounds that produced a value (None: none did)."""
    return median([v for v in values if v is not None])


def median_ratio(tops: Sequence[float | None], bottoms: Sequence[float | None]) -> float | None:
    """Median over rounds of top/bottom, each pair measured side by side in one round: the
    ratio the machine's drift between rounds disturbs least. A mode that did not run (an
    empty list) gives None."""
    ratios = [t / b for t, b in zip(tops, bottoms, strict=False) if t is not None and b]
    return round(statistics.median(ratios), 3) if ratios else None


def ratio(top: float | None, bottom: float | None) -> float | None:
    if top is None or not bottom:
        return None
    return round(top / bottom, 3)


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


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


def git_worktree(commit: str, tree: Path, stack: contextlib.ExitStack) -> Path | None:
    """A git worktree of ``commit`` at ``tree`` (this checkout's repository), removed when
    ``stack`` closes; None (said in the log) when none can be made (no git, or a clone
    without that commit). Run its code with ``cwd`` and ``PYTHONPATH`` set to it."""
    root = Path(__file__).resolve().parents[2]
    remove = ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)]
    if tree.exists():
        subprocess.run(remove, capture_output=True, check=False)
        shutil.rmtree(tree, ignore_errors=True)
    made = subprocess.run(
        ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        log(f"no worktree of {commit}: {made.stderr.strip()[:200]}")
        return None
    stack.callback(subprocess.run, remove, capture_output=True, check=False)
    return tree


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix=f"bench-{prefix}-") as path:
        yield Path(path)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
