"""Footprint of the CLI sidecar (local driver): start-up time to ready, RSS idle and under load.

Start-up: from spawning ``priority-pubsub run`` to the first 200 on ``/readyz`` (Python
start, imports, config, driver, server), median of ``--starts``. RSS from /proc: idle once
ready, and the peak while it delivers ``--messages`` published by this process at
``--concurrency``.

    python -m bench.footprint --starts 3 --messages 5000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import uvloop

from bench.common import (
    AppProcess,
    CliSidecar,
    emit,
    median,
    proc_rss_mb,
    raw_config,
    rounded,
    sample_body,
    temp_dir,
)
from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.local.driver import LocalDriver, LocalOptions


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    starts: list[float] = []
    with temp_dir("footprint") as directory, AppProcess() as app:
        db = directory / "q.db"
        config = raw_config(directory, {"type": "local", "path": str(db)},
                            ["high", "normal", "low"], app_url=app.url,
                            concurrency=args.concurrency)
        for i in range(args.starts):
            sidecar = CliSidecar(directory, config, name=f"start-{i}")
            try:
                starts.append(sidecar.wait_ready())
            finally:
                sidecar.stop()
        sidecar = CliSidecar(directory, config, name="load")
        try:
            sidecar.wait_ready()
            await asyncio.sleep(2)
            idle_rss = proc_rss_mb(sidecar.pid)
            driver = LocalDriver(LocalOptions(path=db), DriverContext(queues=("low",)))
            await driver.start()
            try:
                await asyncio.gather(*(driver.publish("low", sample_body(i))
                                       for i in range(args.messages)))
            finally:
                await driver.close()
            peak, started = idle_rss, time.monotonic()
            while time.monotonic() - started < 120:
                peak = max(peak, proc_rss_mb(sidecar.pid))
                if sidecar.metric_sum("priority_pubsub_messages_settled_total") >= args.messages:
                    break
                await asyncio.sleep(0.05)
            after_rss = proc_rss_mb(sidecar.pid)
        finally:
            sidecar.stop()
    return {
        "startup_to_ready_s": [rounded(s, 3) for s in starts],
        "startup_to_ready_median_s": rounded(median(starts), 3),
        "rss_idle_mb": rounded(idle_rss, 1),
        "rss_peak_under_load_mb": rounded(peak, 1),
        "rss_after_load_mb": rounded(after_rss, 1),
        "load_messages": args.messages, "concurrency": args.concurrency,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    result = uvloop.run(main_async(args))
    emit("footprint", result,
         ["start-up to ready (median s)", "RSS idle MB", "RSS peak under load MB"],
         [[result["startup_to_ready_median_s"], result["rss_idle_mb"],
           result["rss_peak_under_load_mb"]]])


if __name__ == "__main__":
    main()
