"""Priority fidelity: high-priority wait behind a low-priority backlog, and weighted shares.

Strict: the sidecar (as shipped, in this process) is saturated by a low-priority backlog of
1k and of 10k messages against an app that holds each request ``--delay-ms``; high-priority
messages are injected at a steady rate; each one's wait is publish -> the driver handing it to
the sidecar. The goal is a wait independent of the backlog: ratio (10k / 1k) close to 1.

Weighted: three saturated queues with weights 6/3/1; the shares of the messages received are
compared with the configured weights.

    python -m bench.priority --backlog 1000 --backlog 10000 --high 200 --rate 20
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import uvloop

from bench.brokers import LocalBroker
from bench.common import (
    AppProcess,
    emit,
    log,
    make_settings,
    percentile,
    quiet_logging,
    ratio,
    rounded,
    sample_body,
    temp_dir,
)
from bench.loops import Probe
from priority_pubsub.drivers.local import LocalDriver
from priority_pubsub.plugins import build_driver
from priority_pubsub.sidecar import Sidecar


async def strict_run(directory: Path, broker: LocalBroker, app: AppProcess, backlog: int,
                     args: argparse.Namespace, tag: str) -> list[float]:
    high, low = f"high-{tag}", f"low-{tag}"
    await broker.preload(low, backlog)
    settings = make_settings(directory / tag, broker.driver_config(), [high, low],
                             app_url=app.url, concurrency=args.concurrency)
    driver = build_driver(settings)
    probe = Probe(10**9, record_ids=True)
    probe.attach(driver)
    sidecar = Sidecar(settings, driver=driver)
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    published: dict[str, int] = {}
    try:
        while probe.received < args.concurrency * 3:  # noqa: ASYNC110 - saturated first
            await asyncio.sleep(0.01)
        assert isinstance(driver, LocalDriver)
        for i in range(args.high):
            stamp = time.time_ns()
            published[await driver.publish(high, sample_body(i))] = stamp
            await asyncio.sleep(1 / args.rate)
        deadline = time.monotonic() + 30
        while (not set(published) <= set(probe.received_ns)  # noqa: ASYNC110
               and time.monotonic() < deadline):
            await asyncio.sleep(0.01)
        low_left = backlog - probe.by_queue.get(low, 0)
    finally:
        sidecar.request_stop()
        await running
    log(f"backlog {backlog}: low messages still queued at the end: {low_left}")
    return [(probe.received_ns[i] - t) / 1e6 for i, t in published.items()
            if i in probe.received_ns]


async def weighted_run(directory: Path, broker: LocalBroker, app: AppProcess,
                       args: argparse.Namespace) -> dict[str, Any]:
    weights = {"w-a": 6, "w-b": 3, "w-c": 1}
    for name in weights:
        await broker.preload(name, args.weighted_messages)
    settings = make_settings(directory / "weighted", broker.driver_config(),
                             [{"name": n, "weight": w} for n, w in weights.items()],
                             app_url=app.url, concurrency=args.concurrency,
                             scheduling="weighted")
    driver = build_driver(settings)
    target = args.weighted_messages  # a third of the total: no queue runs dry
    probe = Probe(target)
    probe.attach(driver)
    sidecar = Sidecar(settings, driver=driver)
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    try:
        await asyncio.wait_for(probe.done.wait(), 120)
    finally:
        sidecar.request_stop()
        await running
    total = sum(probe.by_queue.values())
    total_weight = sum(weights.values())
    return {
        name: {"weight_share": round(w / total_weight, 3),
               "measured_share": round(probe.by_queue.get(name, 0) / total, 3),
               "received": probe.by_queue.get(name, 0)}
        for name, w in weights.items()
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    waits: dict[int, list[float]] = {b: [] for b in args.backlog}
    with temp_dir("priority") as directory, AppProcess(delay_ms=args.delay_ms) as app:
        broker = LocalBroker(directory)
        for round_no in range(args.rounds):
            order = args.backlog if round_no % 2 == 0 else list(reversed(args.backlog))
            for backlog in order:
                values = await strict_run(directory, broker, app, backlog, args,
                                          f"{backlog}-{round_no}")
                waits[backlog] += values
                log(f"round {round_no} backlog {backlog}: high wait p50 "
                    f"{rounded(percentile(values, 50), 2)} ms")
        weighted = await weighted_run(directory, broker, app, args)
    strict = {str(b): {"samples": len(v), "p50_ms": rounded(percentile(v, 50), 2),
                       "p99_ms": rounded(percentile(v, 99), 2)} for b, v in waits.items()}
    small, big = str(min(args.backlog)), str(max(args.backlog))
    return {
        "concurrency": args.concurrency, "app_delay_ms": args.delay_ms,
        "high_messages_per_run": args.high, "high_rate_per_s": args.rate, "rounds": args.rounds,
        "strict": strict,
        "p50_ratio_big_over_small": ratio(strict[big]["p50_ms"], strict[small]["p50_ms"]),
        "p99_ratio_big_over_small": ratio(strict[big]["p99_ms"], strict[small]["p99_ms"]),
        "weighted": weighted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, action="append")
    parser.add_argument("--high", type=int, default=150, help="high messages per run")
    parser.add_argument("--rate", type=float, default=25, help="high messages per second")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--delay-ms", type=float, default=20, help="app time per request")
    parser.add_argument("--weighted-messages", type=int, default=600,
                        help="preloaded per weighted queue; a third of the total is consumed")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.backlog = sorted(args.backlog or [1000, 10000])
    with temp_dir("logs") as directory:
        quiet_logging(directory / "sidecar.log")
        result = uvloop.run(main_async(args))
    rows: list[list[object]] = [
        [f"strict, backlog {b}", s["samples"], s["p50_ms"], s["p99_ms"], ""]
        for b, s in result["strict"].items()
    ]
    rows += [[f"weighted {n} (w share {w['weight_share']})", w["received"], "", "",
              w["measured_share"]] for n, w in result["weighted"].items()]
    emit("priority", result, ["case", "n", "wait p50 ms", "wait p99 ms", "share"], rows)


if __name__ == "__main__":
    main()
