"""Broker API calls per delivered message under saturation, per driver, counted at the broker.

The shipped sidecar (one queue, ``--concurrency`` workers, the no-op app) drains a preloaded
queue of ``--messages``; the broker's API calls over the run (receives, settles, everything
else the driver sent) are divided by the messages delivered (acked). Where each driver's count
comes from is in ``bench.harness.counting`` and in each result's ``counted_at``: SQS at moto server
(its request recorder), Redis at the server (MONITOR, INFO commandstats as cross-check), the
Pub/Sub emulator by the driver's own RPC counts, RabbitMQ by the AMQP methods the client sent.

Drivers that group settles (SQS, Pub/Sub: ``drivers/batching.py``) also run ``unbatched``
(every settle sent alone, batch size 1: the cost before batching), interleaved with the
shipped mode, the same number of messages each round. Reports the median of the rounds.
Pure counting, so the machine's load does not change the answer much (it changes how many
settles overlap). Idle cost: ``bench.idle`` (an idle sidecar settles nothing).

    python -m bench.calls [--driver sqs --driver gcp_pubsub --driver redis --driver rabbitmq]
                          [--messages 400] [--concurrency 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.brokers import (
    EMULATOR,
    Broker,
    GcpBroker,
    MotoSqsBroker,
    RabbitBroker,
    RedisBroker,
)
from bench.harness.config import make_settings
from bench.harness.counting import WHERE, agreement, counter_for
from bench.harness.loops import run_sidecar
from bench.harness.output import emit, log, run_with_logs_aside
from bench.harness.processes import AppProcess
from bench.harness.rendering import Rendering, Rows, format_md, met
from bench.harness.system import temp_dir
from priority_pubsub.drivers.base import Driver
from priority_pubsub.drivers.batching import MicroBatcher
from priority_pubsub.drivers.gcp_pubsub.driver import PubSubDriver
from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.drivers.sqs.driver import SqsDriver

BROKERS = {"sqs": "moto server", "gcp_pubsub": "Google's Pub/Sub emulator",
           "redis": "redis-server (own)", "rabbitmq": "rabbitmq-server (private)"}
BATCHING = ("sqs", "gcp_pubsub")
"""Drivers whose settles are grouped: these also run unbatched, for the comparison."""


def open_counting_broker(name: str, directory: Path) -> Broker:
    brokers: dict[str, Callable[[Path], Broker]] = {"sqs": MotoSqsBroker, "gcp_pubsub": GcpBroker,
                                        "redis": RedisBroker, "rabbitmq": RabbitBroker}
    return brokers[name](directory)


def unbatch(driver: Driver) -> None:
    """Every settle sent alone, as before batching."""
    if isinstance(driver, SqsDriver):
        driver._deletes = MicroBatcher(driver._send_deletes, 1)
        driver._visibility = MicroBatcher(driver._send_visibility, 1)
    elif isinstance(driver, PubSubDriver):
        driver._acks = MicroBatcher(driver._send_acks, 1)
        driver._modacks = MicroBatcher(driver._send_modacks, 1)


async def one_run(name: str, directory: Path, broker: Broker, app: AppProcess, mode: str,
                  args: argparse.Namespace) -> dict[str, Any]:
    queue = f"calls-{uuid.uuid4().hex[:8]}"
    await broker.create([queue])
    await broker.preload(queue, args.messages)
    settings = make_settings(directory / queue, broker.driver_config(), [queue],
                             app_url=app.url, concurrency=args.concurrency)
    driver = build_driver(settings)
    if mode == "unbatched":
        unbatch(driver)
    counter = counter_for(name, broker, driver)
    await counter.start()
    delivered = (await run_sidecar(settings, args.messages, 300, driver=driver)).acked
    counted = await counter.stop()
    total = sum(counted["requests"].values())
    return {"mode": mode, "delivered": delivered, **counted, "cross_check": agreement(counted),
            "calls_per_message": round(total / delivered, 3) if delivered else None}


async def one_driver(name: str, args: argparse.Namespace) -> dict[str, Any]:
    modes = ("shipped", "unbatched") if name in BATCHING else ("shipped",)
    runs: list[dict[str, Any]] = []
    with temp_dir(f"calls-{name}") as directory, AppProcess() as app:
        broker = open_counting_broker(name, directory)
        try:
            for round_no in range(args.rounds):
                for mode in modes if round_no % 2 == 0 else tuple(reversed(modes)):
                    runs.append(await one_run(name, directory, broker, app, mode, args))
                    log(f"{name} round {round_no} {mode}: "
                        f"{runs[-1]['calls_per_message']} calls/msg")
        finally:
            await broker.close()
    result: dict[str, Any] = {"broker": BROKERS[name], "counted_at": WHERE[name]}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode and r["calls_per_message"] is not None]
        result[f"{mode}_calls_per_message"] = (
            statistics.median(r["calls_per_message"] for r in mine) if mine else None)
        if mine:  # the breakdown of the median run, per delivered message
            middle = sorted(mine, key=lambda r: r["calls_per_message"])[len(mine) // 2]
            result[f"{mode}_per_message_by_operation"] = {
                op: round(n / middle["delivered"], 3)
                for op, n in sorted(middle["requests"].items())}
            result[f"{mode}_cross_check"] = middle["cross_check"]
    if result.get("unbatched_calls_per_message"):
        result["ratio_shipped_over_unbatched"] = round(
            (result["shipped_calls_per_message"] or 0) / result["unbatched_calls_per_message"], 3)
    result["runs"] = runs
    return result


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    drivers = {}
    for name in args.driver:
        if name == "gcp_pubsub" and not EMULATOR.exists():
            log("the Pub/Sub emulator is not installed: gcp_pubsub skipped")
            continue
        if (name == "redis" and not RedisBroker.available()) or (
                name == "rabbitmq" and not RabbitBroker.available()):
            log(f"no {BROKERS[name]} on this machine: {name} skipped")
            continue
        drivers[name] = await one_driver(name, args)
    return {"concurrency": args.concurrency, "messages": args.messages, "rounds": args.rounds,
            "drivers": drivers, "load_average": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver", action="append", choices=sorted(BROKERS))
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.driver = args.driver or ["sqs"]
    result = run_with_logs_aside(main_async(args))
    rows = [[name, r["shipped_calls_per_message"], r.get("unbatched_calls_per_message"),
             r["counted_at"]] for name, r in result["drivers"].items()]
    emit("calls", result, ["driver", "calls/msg", "unbatched calls/msg", "counted at"], rows)


def section(result: dict[str, Any]) -> list[str]:
    """API calls per delivered message, one row per driver (local: no broker API)."""
    rows: list[list[Any]] = [["local", "SQLite file", "n/a (no broker API)", "n/a", "-", "-",
                              "-"]]
    for driver, r in result.get("drivers", {}).items():
        by_operation = ", ".join(f"{op} {n}" for op, n in
                                 r.get("shipped_per_message_by_operation", {}).items())
        rows.append([driver, r["broker"], r["counted_at"], r["shipped_calls_per_message"],
                     r.get("unbatched_calls_per_message"), by_operation,
                     r.get("shipped_cross_check")])
    return [f"saturated, concurrency {result.get('concurrency')}, {result.get('messages')} "
            f"messages a run, median of {result.get('rounds')} rounds; unbatched: every "
            "settle sent alone (the cost before batching), for the drivers that batch", "",
            format_md(["driver", "broker", "counted at", "API calls / delivered msg",
                       "unbatched", "per delivered msg, by operation (median run)",
                       "cross-check (median run)"], rows)]


def targets(result: dict[str, Any]) -> Rows:
    sqs = result.get("drivers", {}).get("sqs")
    if sqs is None:
        return []
    value = sqs["shipped_calls_per_message"]
    return [[f"SQS c={result['concurrency']} saturated <= 1.3 API calls per delivered message "
             f"(receive + settle included; {sqs['broker']})", value, met(1.3, value)]]


def _without_runs(body: dict[str, Any]) -> dict[str, Any]:
    """Every run's counts stay in results.json."""
    drivers = {d: {k: v for k, v in r.items() if k != "runs"}
               for d, r in body.get("drivers", {}).items()}
    return {**body, "drivers": drivers}


LEGEND = (
    "- API calls: counted at the broker where it can count (moto server's request "
    "recorder; Redis MONITOR, cross-checked with INFO commandstats); the Pub/Sub "
    "emulator counts nothing (the driver's own RPC counts) and RabbitMQ's counters count "
    "messages (the AMQP methods the client sent)",
)
RENDERING = Rendering(targets=targets, section=section, shown=_without_runs, legend=LEGEND)


if __name__ == "__main__":
    main()
