"""Added latency at low load: from the moment the driver hands a message over (receive
returns) to the moment the request reaches the app, p50/p99.

Messages are published one at a time at a steady low rate into an idle queue; the sidecar (as
shipped, in this process) and a naive forwarder (a worker blocked in a waiting receive, then
POST) take turns, interleaved. The app (own process, record mode) stamps each CloudEvent id on
arrival; the probe stamps each message id when receive returns; both use the wall clock of the
same machine, in nanoseconds. The sidecar's added latency is, per round, its p50 less the
naive forwarder's p50 of the same round (the HTTP POST both pay is not the sidecar's);
``added_p50_ms_median`` is the median over the rounds.

    python -m bench.latency --messages 200 --rate 50 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.harness.brokers import LocalBroker
from bench.harness.config import make_settings, sample_body
from bench.harness.loops import Probe, client_session, forward_and_ack
from bench.harness.output import emit, log, run_with_logs_aside
from bench.harness.processes import AppProcess
from bench.harness.rendering import Rendering, Rows, met
from bench.harness.stats import median, percentile, ratio, rounded
from bench.harness.system import temp_dir
from priority_pubsub.drivers.base import Driver
from priority_pubsub.drivers.local.driver import LocalDriver
from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.sidecar import Sidecar

Feed = Callable[[Driver], Awaitable[None]]


def feeder(queue: str, count: int, rate: float) -> Feed:
    async def feed(driver: Driver) -> None:
        assert isinstance(driver, LocalDriver)
        for i in range(count):
            await driver.publish(queue, sample_body(i))
            await asyncio.sleep(1 / rate)

    return feed


async def sidecar_run(settings: Any, feed: Feed, count: int) -> Probe:
    driver = build_driver(settings)
    probe = Probe(count, record_ids=True)
    probe.attach(driver)
    sidecar = Sidecar(settings, driver=driver)
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    while not sidecar.connected:  # noqa: ASYNC110 - the sidecar exposes a flag, no event
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # let it settle into its idle wait
    await feed(driver)
    await asyncio.wait_for(probe.done.wait(), 30)
    sidecar.request_stop()
    await running
    return probe


async def naive_run(settings: Any, feed: Feed, count: int) -> Probe:
    driver = build_driver(settings)
    probe = Probe(count, record_ids=True)
    probe.attach(driver)
    await driver.start()
    queue = settings.queue_names[0]
    try:
        async with client_session(settings.concurrency) as session:
            url = settings.app.url.get_secret_value()

            async def work() -> None:
                while probe.acked < count:
                    for message in await driver.receive(queue, 1, 1.0):
                        await forward_and_ack(session, url, driver, message)

            workers = [asyncio.create_task(work()) for _ in range(settings.concurrency)]
            await asyncio.sleep(0.2)
            await feed(driver)
            await asyncio.wait_for(probe.done.wait(), 30)
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
    finally:
        await driver.close()
    return probe


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    added: dict[str, list[float]] = {"naive": [], "sidecar": []}
    round_p50: dict[str, list[float | None]] = {"naive": [], "sidecar": []}
    with temp_dir("latency") as directory, AppProcess(record=True) as app:
        broker = LocalBroker(directory)
        for round_no in range(args.rounds):
            for name in (("naive", "sidecar") if round_no % 2 == 0 else ("sidecar", "naive")):
                queue = f"lat-{name}-{round_no}"
                settings = make_settings(directory / queue, broker.driver_config(), [queue],
                                         app_url=app.url, concurrency=args.concurrency)
                run = sidecar_run if name == "sidecar" else naive_run
                probe = await run(settings, feeder(queue, args.messages, args.rate),
                                  args.messages)
                seen: dict[str, int] = app.stats()["seen"]
                values = [(seen[i] - t) / 1e6 for i, t in probe.received_ns.items() if i in seen]
                added[name] += values
                round_p50[name].append(percentile(values, 50))
                log(f"round {round_no} {name}: p50 {rounded(percentile(values, 50), 3)} ms")
    out: dict[str, Any] = {"messages_per_run": args.messages, "rate_per_s": args.rate,
                           "concurrency": args.concurrency, "rounds": args.rounds}
    for name, values in added.items():
        out[name] = {"samples": len(values),
                     "p50_ms": rounded(percentile(values, 50), 3),
                     "p99_ms": rounded(percentile(values, 99), 3),
                     "max_ms": rounded(max(values, default=0), 3)}
    out["sidecar_minus_naive_p50_ms"] = rounded(
        (out["sidecar"]["p50_ms"] or 0) - (out["naive"]["p50_ms"] or 0), 3)
    out["sidecar_over_naive_p50"] = ratio(out["sidecar"]["p50_ms"], out["naive"]["p50_ms"])
    # added latency: each round's sidecar p50 less the naive p50 of the same round, median
    extra = [s - n for s, n in zip(round_p50["sidecar"], round_p50["naive"], strict=True)
             if s is not None and n is not None]
    out["round_p50_ms"] = {k: [rounded(v, 3) for v in vs] for k, vs in round_p50.items()}
    out["added_p50_ms_rounds"] = [rounded(v, 3) for v in extra]
    out["added_p50_ms_median"] = rounded(median(extra), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50, help="messages per second")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    started = time.monotonic()
    result = run_with_logs_aside(main_async(args))
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    rows = [[name, result[name]["samples"], result[name]["p50_ms"], result[name]["p99_ms"],
             result[name]["max_ms"]] for name in ("naive", "sidecar")]
    emit("latency", result, ["path", "samples", "p50 ms", "p99 ms", "max ms"], rows)


def targets(result: dict[str, Any]) -> Rows:
    added = result.get("added_p50_ms_median")
    if added is None:
        return []
    return [[f"added latency p50 <= 0.2 ms (sidecar less naive forwarder, receive -> app, "
             f"median of {result['rounds']} rounds; sidecar p50 {result['sidecar']['p50_ms']} "
             "ms)", added, met(0.2, added)]]


RENDERING = Rendering(targets=targets)


if __name__ == "__main__":
    main()
