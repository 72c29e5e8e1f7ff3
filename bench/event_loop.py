"""What the ``event_loop`` setting buys and costs: asyncio's own loop against uvloop, side by
side in one process.

The sidecar runs on asyncio's own loop unless ``event_loop: uvloop`` is set. For each round
(the order of the loops alternates every round) and each concurrency, a fresh loop of each
kind runs the shipped ``Sidecar`` in-process on the local driver, delivering ``--messages``
preloaded messages of ~200 bytes to the no-op app (its own process): msgs/s and this
process's CPU µs per message, from the first message received to the last settled. Then, for
each loop, ``priority-pubsub run`` on the local driver is started as a pod runs it and its
resident set read from /proc once it has idled 2 s.

Reports the medians of the rounds and uvloop's figure over asyncio's (the median of each
round's ratio: the two loops of one round ran side by side).

    python -m bench.event_loop --rounds 3
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench.harness.brokers import LocalBroker
from bench.harness.config import make_settings, raw_config
from bench.harness.loops import Result, run_sidecar
from bench.harness.output import emit, log, quiet_logging
from bench.harness.processes import AppProcess, CliSidecar
from bench.harness.rendering import Rendering, Rows, format_md
from bench.harness.stats import median_of, median_ratio, rounded
from bench.harness.system import proc_rss_mb, temp_dir
from priority_pubsub.commands.run import run_loop

LOOPS = ("asyncio", "uvloop")
"""The ``event_loop`` settings, each started as the sidecar starts it (``run_loop``)."""
QUEUES = ["high", "normal", "low"]


async def deliver(directory: Path, app_url: str, concurrency: int, count: int,
                  timeout_s: float) -> Result:
    """The shipped sidecar on a fresh local queue file of ``count`` messages, on the running
    loop."""
    broker = LocalBroker(directory)
    try:
        await broker.create(["bench"])
        await broker.preload("bench", count)
        settings = make_settings(directory, broker.driver_config(), ["bench"], app_url=app_url,
                                 concurrency=concurrency)
        probe = await run_sidecar(settings, count, timeout_s)
        return probe.result
    finally:
        await broker.close()


def idle_rss_mb(directory: Path, app_url: str, event_loop: str) -> float:
    """``priority-pubsub run`` on the local driver with ``event_loop`` (16 workers, as
    ``bench.footprint``), 2 s after ready."""
    config = raw_config(directory, LocalBroker(directory).driver_config(), QUEUES,
                        app_url=app_url, concurrency=16)
    config["event_loop"] = event_loop
    sidecar = CliSidecar(directory, config, name=f"idle-{event_loop}")
    try:
        sidecar.wait_ready()
        time.sleep(2)
        return proc_rss_mb(sidecar.pid)
    finally:
        sidecar.stop()


def compare(concurrencies: list[int], count: int, rounds: int, timeout_s: float
            ) -> dict[str, Any]:
    rates: dict[int, dict[str, list[float | None]]] = {c: {n: [] for n in LOOPS}
                                                       for c in concurrencies}
    cpu: dict[int, dict[str, list[float | None]]] = {c: {n: [] for n in LOOPS}
                                                     for c in concurrencies}
    rss: dict[str, list[float | None]] = {n: [] for n in LOOPS}
    with temp_dir("event-loop") as directory, AppProcess() as app:
        quiet_logging(directory / "sidecar.log")
        for round_no in range(rounds):
            order = LOOPS[round_no % 2:] + LOOPS[:round_no % 2]
            for name in order:
                for c in concurrencies:
                    where = directory / f"r{round_no}-{name}-c{c}"
                    where.mkdir()
                    rate, cpu_us = run_loop(deliver(where, app.url, c, count, timeout_s), name)
                    rates[c][name].append(rate)
                    cpu[c][name].append(cpu_us)
                    log(f"round {round_no} {name} c={c}: {rounded(rate)} msg/s, "
                        f"{rounded(cpu_us)} CPU us/msg")
                idle = directory / f"r{round_no}-{name}-idle"
                idle.mkdir()
                rss[name].append(idle_rss_mb(idle, app.url, name))
                log(f"round {round_no} {name}: idle RSS {rounded(rss[name][-1])} MB")
    return {
        "messages": count, "rounds": rounds, "statistic": "median",
        "results": [{
            "concurrency": c,
            **{f"{n}_msgs_s": rounded(median_of(rates[c][n])) for n in LOOPS},
            **{f"{n}_cpu_us_per_msg": rounded(median_of(cpu[c][n])) for n in LOOPS},
            "uvloop_over_asyncio": median_ratio(rates[c]["uvloop"], rates[c]["asyncio"]),
            "rounds": {n: [rounded(v) for v in rates[c][n]] for n in LOOPS},
        } for c in concurrencies],
        "rss_idle_mb": {n: rounded(median_of(rss[n])) for n in LOOPS},
        "rss_rounds": {n: [rounded(v) for v in rss[n]] for n in LOOPS},
    }


def _rows(result: dict[str, Any]) -> Rows:
    return [[r["concurrency"], r["asyncio_msgs_s"], r["uvloop_msgs_s"],
             r["uvloop_over_asyncio"], r["asyncio_cpu_us_per_msg"], r["uvloop_cpu_us_per_msg"]]
            for r in result.get("results", [])]


HEADERS = ["workers", "asyncio msg/s", "uvloop msg/s", "uvloop/asyncio", "asyncio CPU us/msg",
           "uvloop CPU us/msg"]


def section(result: dict[str, Any]) -> list[str]:
    rss = result.get("rss_idle_mb", {})
    return [f"medians of {result.get('rounds')} rounds, the loops side by side in one process; "
            f"idle RSS of `priority-pubsub run` (local): asyncio {rss.get('asyncio')} MB, "
            f"uvloop {rss.get('uvloop')} MB.", "", format_md(HEADERS, _rows(result))]


RENDERING = Rendering(section=section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, action="append")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=120)
    args = parser.parse_args()
    result = compare(args.concurrency or [1, 4, 16, 64], args.messages, args.rounds,
                     args.timeout_s)
    rss = result["rss_idle_mb"]
    emit("event_loop", result, [*HEADERS, "idle RSS MB (asyncio / uvloop)"],
         [[*row, f"{rss['asyncio']} / {rss['uvloop']}"] for row in _rows(result)])


if __name__ == "__main__":
    main()
