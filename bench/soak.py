"""Soak: the CLI sidecar (local driver, journal on) through many messages, watched for leaks.

daprd users report memory that only grows over hours (dapr/dapr #6581). This runs
``priority-pubsub run`` against the no-op app while this process keeps a bounded backlog
published (``--backlog``), and every ``--sample-every`` settled messages samples from outside
the sidecar: RSS and open fds (/proc), asyncio tasks alive
(``priority_pubsub_event_loop_tasks``) and the journal's size on disk. It reports the RSS
slope over the second half of the run (MB per 100 k messages, one allocator step taken out:
``bench.rss_growth``; the first half is the allocator and caches warming up) and how fds and
tasks moved between the halves.

    python -m bench.soak --messages 1000000 --concurrency 16       # the figure in RESULTS.md
    python -m bench.soak --messages 120000 --check                  # what CI asserts

``--check`` exits 1 when RSS grows more than ``--max-rss-slope-mb`` per 100 k messages over
the second half (a single step is not growth), or the sidecar idle after the run holds more
open fds or asyncio tasks than idle before it (after 1,000 warm-up messages; under load the
counts vary with the requests under way at a scrape, idle they are exact).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.harness.config import raw_config, sample_body
from bench.harness.output import emit, log
from bench.harness.processes import AppProcess, CliSidecar
from bench.harness.rendering import Rendering, format_md
from bench.harness.stats import rounded
from bench.harness.system import proc_rss_mb, temp_dir
from bench.rss_growth import LIMIT_MB, rss_growth
from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.local.driver import LocalDriver, LocalOptions

QUEUES = ("high", "normal", "low")


@dataclass(frozen=True)
class Sample:
    settled: int
    elapsed_s: float
    rss_mb: float
    open_fds: int
    tasks: int
    journal_mb: float


@dataclass(frozen=True)
class Verdict:
    rss_slope_mb_per_100k: float
    """Slope of RSS against messages settled over the second half, the best single level
    shift taken out (``bench.rss_growth``): what the check judges."""
    rss_step_mb: float
    """That level shift (information: an allocator step is ~0.3-1.5 MB)."""
    rss_step_at: int
    """Messages settled at the first sample past the shift."""
    rss_plain_slope_mb_per_100k: float
    """The least-squares slope, no shift allowed: the check before (one step came near the
    bound on healthy runs)."""
    fds_growth: float
    """Median fd count of the second half minus the first half's (information: under load
    a scrape meets a varying number of requests under way)."""
    tasks_growth: float
    samples_second_half: int
    idle_fds_growth: int = 0
    """Open fds idle after the run minus idle before it (> 0: a leak). Idle, the count is
    exact: no request under way, every receiver waiting."""
    idle_tasks_growth: int = 0

    def problems(self, max_rss_slope_mb: float) -> list[str]:
        found = []
        if self.rss_slope_mb_per_100k > max_rss_slope_mb:
            found.append(f"RSS grows {self.rss_slope_mb_per_100k:.2f} MB per 100 k messages "
                         f"over the second half, beside a step of {self.rss_step_mb} MB at "
                         f"{self.rss_step_at} (limit {max_rss_slope_mb})")
        if self.idle_fds_growth > 0:
            found.append(f"open fds idle grew by {self.idle_fds_growth} over the run")
        if self.idle_tasks_growth > 0:
            found.append(f"asyncio tasks idle grew by {self.idle_tasks_growth} over the run")
        return found


def verdict(samples: list[Sample], idle_before: tuple[int, int],
            idle_after: tuple[int, int]) -> Verdict:
    """Judge a run by its halves (by messages settled, not by time)."""
    middle = samples[-1].settled / 2
    first = [s for s in samples if s.settled <= middle]
    second = [s for s in samples if s.settled >= middle]
    if len(first) < 2 or len(second) < 3:
        raise ValueError(f"too few samples to judge ({len(samples)}): lower --sample-every")
    rss = rss_growth([(s.settled, s.rss_mb) for s in samples])
    return Verdict(
        rss_slope_mb_per_100k=rss.slope_mb_per_100k,
        rss_step_mb=rss.step_mb,
        rss_step_at=rss.step_at,
        rss_plain_slope_mb_per_100k=rss.plain_slope_mb_per_100k,
        fds_growth=_median_growth([s.open_fds for s in first], [s.open_fds for s in second]),
        tasks_growth=_median_growth([s.tasks for s in first], [s.tasks for s in second]),
        samples_second_half=len(second),
        idle_fds_growth=idle_after[0] - idle_before[0],
        idle_tasks_growth=idle_after[1] - idle_before[1],
    )


def _median_growth(first: list[int], second: list[int]) -> float:
    return float(statistics.median(second) - statistics.median(first))


def _acked(sidecar: CliSidecar) -> int:
    """Messages acked (releases of surplus are settles too, but no message's end)."""
    _, body = sidecar.get("/metrics")
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
                   if line.startswith("priority_pubsub_messages_settled_total{")
                   and 'outcome="ack"' in line))


async def _idle(sidecar: CliSidecar) -> tuple[int, int]:
    """(open fds, asyncio tasks) of the idle sidecar: the least of a few scrapes 0.3 s apart,
    after 2 s without work (the receivers back to waiting)."""
    await asyncio.sleep(2)
    seen = []
    for _ in range(5):
        seen.append((_open_fds(sidecar.pid),
                     int(sidecar.metric_sum("priority_pubsub_event_loop_tasks"))))
        await asyncio.sleep(0.3)
    return min(fds for fds, _ in seen), min(tasks for _, tasks in seen)


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _journal_mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.glob("journal-*")) / 1e6


def _sample(sidecar: CliSidecar, settled: int, started: float, journal: Path) -> Sample:
    return Sample(
        settled=settled, elapsed_s=round(time.monotonic() - started, 2),
        rss_mb=round(proc_rss_mb(sidecar.pid), 2), open_fds=_open_fds(sidecar.pid),
        tasks=int(sidecar.metric_sum("priority_pubsub_event_loop_tasks")),
        journal_mb=round(_journal_mb(journal), 2),
    )


async def _publish(driver: LocalDriver, start: int, count: int) -> None:
    """``count`` messages spread over the three queues, 256 at a time (one transaction)."""
    for chunk in range(start, start + count, 256):
        await asyncio.gather(*(driver.publish(QUEUES[i % 3], sample_body(i))
                               for i in range(chunk, min(chunk + 256, start + count))))


async def soak(messages: int, concurrency: int, backlog: int, sample_every: int,
               directory: Path, app_url: str, timeout_s: float
               ) -> tuple[list[Sample], tuple[int, int], tuple[int, int]]:
    db = directory / "q.db"
    config = raw_config(directory, {"type": "local", "path": str(db)}, list(QUEUES),
                        app_url=app_url, concurrency=concurrency)
    driver = LocalDriver(LocalOptions(path=db), DriverContext(queues=QUEUES))
    await driver.start()
    sidecar = CliSidecar(directory, config, name="soak")
    samples: list[Sample] = []
    try:
        sidecar.wait_ready()
        await _publish(driver, 0, 1000)  # warm: every code path once, then idle
        published = settled = 1000
        for _ in range(600):  # at most a minute
            if _acked(sidecar) >= 1000:
                break
            await asyncio.sleep(0.1)
        idle_before = await _idle(sidecar)
        started = time.monotonic()
        next_sample = 0
        while settled < messages:
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"soak timed out after {timeout_s}s at {settled} settled")
            if published < messages and published - settled < backlog // 2:
                count = min(backlog - (published - settled), messages - published)
                await _publish(driver, published, count)
                published += count
            settled = _acked(sidecar)
            if settled >= next_sample:
                samples.append(_sample(sidecar, settled, started, directory / "journal"))
                next_sample = settled + sample_every
                if len(samples) % 10 == 0:
                    log(f"soak: {asdict(samples[-1])}")
            await asyncio.sleep(0.2)
        samples.append(_sample(sidecar, settled, started, directory / "journal"))
        idle_after = await _idle(sidecar)
    finally:
        sidecar.stop()
        await driver.close()
    return samples, idle_before, idle_after


def run(args: argparse.Namespace) -> dict[str, Any]:
    import uvloop

    with temp_dir("soak") as directory, AppProcess() as app:
        samples, idle_before, idle_after = uvloop.run(soak(
            args.messages + 1000, args.concurrency, args.backlog, args.sample_every,
            directory, app.url, args.timeout_s))
    judged = verdict(samples, idle_before, idle_after)
    elapsed = samples[-1].elapsed_s
    return {
        "messages": samples[-1].settled, "concurrency": args.concurrency,
        "elapsed_s": elapsed, "messages_per_s": rounded(samples[-1].settled / elapsed, 0),
        "rss_first_mb": samples[0].rss_mb, "rss_last_mb": samples[-1].rss_mb,
        "rss_max_mb": max(s.rss_mb for s in samples),
        "journal_mb": samples[-1].journal_mb,
        "idle_fds_before_after": [idle_before[0], idle_after[0]],
        "idle_tasks_before_after": [idle_before[1], idle_after[1]],
        **asdict(judged),
        "problems": judged.problems(args.max_rss_slope_mb),
        "samples": [asdict(s) for s in samples],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--backlog", type=int, default=20_000,
                        help="published but not yet settled, kept below this")
    parser.add_argument("--sample-every", type=int, default=None,
                        help="messages between samples (default: messages / 100)")
    parser.add_argument("--max-rss-slope-mb", type=float, default=LIMIT_MB)
    parser.add_argument("--timeout-s", type=float, default=6 * 3600)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when RSS, fds or tasks grow beyond the limits")
    args = parser.parse_args()
    args.sample_every = args.sample_every or max(1, args.messages // 100)
    result = run(args)
    emit("soak", result,
         ["messages", "msg/s", "RSS first/last/max MB", "RSS slope 2nd half MB/100k (line)",
          "step MB", "idle fds before/after", "idle tasks before/after", "journal MB"],
         [[result["messages"], result["messages_per_s"],
           f"{result['rss_first_mb']}/{result['rss_last_mb']}/{result['rss_max_mb']}",
           f"{result['rss_slope_mb_per_100k']} ({result['rss_plain_slope_mb_per_100k']})",
           result["rss_step_mb"], result["idle_fds_before_after"],
           result["idle_tasks_before_after"], result["journal_mb"]]])
    for problem in result["problems"]:
        log(f"LEAK: {problem}")
    if args.check and result["problems"]:
        sys.exit(1)


def section(result: dict[str, Any]) -> list[str]:
    headers = ["messages", "msg/s", "RSS first / last / max MB",
               "RSS slope, 2nd half, one step out (line) (MB per 100 k)", "the step MB",
               "idle fds before / after", "idle tasks before / after", "journal MB"]
    row = [result["messages"], result["messages_per_s"],
           f"{result['rss_first_mb']} / {result['rss_last_mb']} / {result['rss_max_mb']}",
           f"{result['rss_slope_mb_per_100k']} ({result['rss_plain_slope_mb_per_100k']})",
           f"{result['rss_step_mb']} at {result['rss_step_at']}",
           " / ".join(map(str, result.get("idle_fds_before_after", ["-", "-"]))),
           " / ".join(map(str, result.get("idle_tasks_before_after", ["-", "-"]))),
           result["journal_mb"]]
    return [format_md(headers, [row]), "",
            "RSS, open fds and asyncio tasks of the CLI sidecar (local driver, c=16, journal "
            "on) sampled every 1 % of the run; the CI leak check (`tests/chaos/test_soak.py`, "
            "100 k messages) fails above 2 MB per 100 k, the best single level shift taken "
            "out (`bench.rss_growth`: an allocator step is not growth), or on any idle fd or "
            "task more."]


RENDERING = Rendering(section=section)


if __name__ == "__main__":
    main()
