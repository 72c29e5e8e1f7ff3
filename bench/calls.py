"""Broker API calls per delivered message under saturation, batched vs not, per driver.

The shipped sidecar (one queue, ``--concurrency`` workers, the no-op app) drains a preloaded
queue. SQS (moto server): every HTTP request its client sends to the broker is counted (a
botocore ``before-send`` hook: one per request on the wire, retries included), by operation.
Pub/Sub (Google's emulator, when installed): the driver's own count of pull, acknowledge and
modify_ack_deadline RPCs (gRPC has no hook as simple; the emulator counts nothing). Two
modes, interleaved, the same number of messages each round:

  batched    as shipped: settles grouped while one is in flight (``drivers/batching.py``)
  unbatched  the same driver with every settle sent alone (batch size 1): the old cost

Reports calls per delivered (acked) message, median of the rounds, and the ratio. Pure
counting, so the machine's load does not change the answer much (it changes how many settles
overlap). Idle cost is unchanged by construction: an idle sidecar settles nothing (see
``bench.idle --driver sqs`` for receives per minute per queue).

    python -m bench.calls [--driver sqs --driver gcp_pubsub] [--messages 600]
                          [--concurrency 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import uvloop

from bench.brokers import EMULATOR, Broker, GcpBroker, MotoSqsBroker
from bench.common import AppProcess, emit, log, make_settings, quiet_logging, temp_dir
from bench.loops import run_sidecar
from priority_pubsub.drivers.batching import MicroBatcher
from priority_pubsub.drivers.gcp_pubsub import PubSubDriver
from priority_pubsub.drivers.sqs import SqsDriver
from priority_pubsub.plugins import build_driver

MODES = ("batched", "unbatched")
BROKERS = {"sqs": "moto server", "gcp_pubsub": "Google's Pub/Sub emulator"}


async def one_run(directory: Path, broker: Broker, app: AppProcess, mode: str,
                  args: argparse.Namespace) -> dict[str, Any]:
    queue = f"calls-{uuid.uuid4().hex[:8]}"
    await broker.create([queue])
    await broker.preload(queue, args.messages)
    settings = make_settings(directory / queue, broker.driver_config(), [queue],
                             app_url=app.url, concurrency=args.concurrency)
    driver = build_driver(settings)
    sent: Counter[str] = Counter()
    if isinstance(driver, SqsDriver):
        if mode == "unbatched":  # every settle alone, as before batching
            driver._deletes = MicroBatcher(driver._send_deletes, 1)
            driver._visibility = MicroBatcher(driver._send_visibility, 1)

        def count(event_name: str, **_: Any) -> None:
            sent[event_name.rsplit(".", 1)[-1]] += 1

        driver._api.sqs.meta.events.register("before-send.sqs", count)
        delivered = (await run_sidecar(settings, args.messages, 300, driver=driver)).acked
    else:
        assert isinstance(driver, PubSubDriver)
        if mode == "unbatched":
            driver._acks = MicroBatcher(driver._send_acks, 1)
            driver._modacks = MicroBatcher(driver._send_modacks, 1)
        delivered = (await run_sidecar(settings, args.messages, 300, driver=driver)).acked
        sent.update(driver.calls)
        sent["pull"] = driver.pull_calls
    total = sum(sent.values())
    return {"mode": mode, "delivered": delivered, "requests": dict(sent),
            "calls_per_message": round(total / delivered, 3) if delivered else None}


async def one_driver(name: str, args: argparse.Namespace) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    with temp_dir(f"calls-{name}") as directory, AppProcess() as app:
        broker: Broker = MotoSqsBroker(directory) if name == "sqs" else GcpBroker(directory)
        try:
            for round_no in range(args.rounds):
                order = MODES if round_no % 2 == 0 else tuple(reversed(MODES))
                for mode in order:
                    runs.append(await one_run(directory, broker, app, mode, args))
                    log(f"{name} round {round_no} {mode}: "
                        f"{runs[-1]['calls_per_message']} calls/msg")
        finally:
            await broker.close()
    result: dict[str, Any] = {"broker": BROKERS[name], "runs": runs}
    for mode in MODES:
        values = [r["calls_per_message"] for r in runs if r["mode"] == mode]
        result[f"{mode}_calls_per_message"] = statistics.median(values)
    result["ratio_batched_over_unbatched"] = round(
        result["batched_calls_per_message"] / result["unbatched_calls_per_message"], 3
    )
    return result


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    drivers = {}
    for name in args.driver:
        if name == "gcp_pubsub" and not EMULATOR.exists():
            log("the Pub/Sub emulator is not installed: gcp_pubsub skipped")
            continue
        drivers[name] = await one_driver(name, args)
    return {"concurrency": args.concurrency, "messages": args.messages, "rounds": args.rounds,
            "drivers": drivers, "load_average": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver", action="append", choices=sorted(BROKERS))
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.driver = args.driver or ["sqs"]
    with temp_dir("logs") as directory:
        quiet_logging(directory / "sidecar.log")
        result = uvloop.run(main_async(args))
    rows = [[name, *(r[f"{mode}_calls_per_message"] for mode in MODES)]
            for name, r in result["drivers"].items()]
    emit("calls", result, ["driver", *(f"{m} calls/msg" for m in MODES)], rows)


if __name__ == "__main__":
    main()
