"""Publish API throughput next to the raw broker publish, in one run, interleaved.

The sidecar runs as shipped (``priority-pubsub run``, local driver, journal on) with
``publish_api`` enabled, delivering to the no-op app in its own process meanwhile; each round
publishes N messages of ~200 bytes with C concurrent publishers through:

  raw    the local driver's ``publish`` in this process (the broker's own limit)
  http   ``POST /v1.0/publish/pubsub/bench`` (daprd's HTTP publish API: CloudEvent built,
         committed to SQLite before the 204)
  grpc   ``Dapr.PublishEvent`` over gRPC (what ``DaprClient().publish_event`` calls)

The order of the modes rotates every round; the median of the rounds is reported, with
http/raw and grpc/raw.

    python -m bench.publish_api --messages 2000 --concurrency 16 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from dapr.proto.runtime.v1.pubsub_pb2 import PublishEventRequest

from bench.harness.config import raw_config, sample_body
from bench.harness.output import emit, log
from bench.harness.processes import AppProcess, CliSidecar, wait_for_port
from bench.harness.stats import median, ratio, rounded
from bench.harness.system import temp_dir
from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.local.driver import LocalDriver, LocalOptions
from tests.support.ports import free_port

QUEUE = "bench"
Publish = Callable[[int], Awaitable[None]]


async def _timed(count: int, concurrency: int, publish: Publish) -> float:
    """Messages per second for ``count`` publishes by ``concurrency`` workers."""
    next_index = iter(range(count))

    async def worker() -> None:
        for index in next_index:
            await publish(index)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.perf_counter() - started)


async def _rounds(db: Path, http_port: int, grpc_port: int, args: argparse.Namespace
                  ) -> dict[str, list[float]]:
    driver = LocalDriver(LocalOptions(path=db), DriverContext(queues=(QUEUE,)))
    await driver.start()
    url = f"http://127.0.0.1:{http_port}/v1.0/publish/pubsub/{QUEUE}"
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = dapr_pb2_grpc.DaprStub(channel)

    async def raw(index: int) -> None:
        await driver.publish(QUEUE, sample_body(index), None, "application/json")

    async with aiohttp.ClientSession(connector=connector) as session:
        async def http(index: int) -> None:
            async with session.post(url, data=sample_body(index), headers=headers) as answer:
                if answer.status != 204:
                    raise RuntimeError(f"publish API answered {answer.status}")

        async def grpc_publish(index: int) -> None:
            await stub.PublishEvent(PublishEventRequest(
                pubsub_name="pubsub", topic=QUEUE, data=sample_body(index),
                data_content_type="application/json"))

        modes: dict[str, Publish] = {"raw": raw, "http": http, "grpc": grpc_publish}
        results: dict[str, list[float]] = {name: [] for name in modes}
        names = list(modes)
        for round_index in range(args.rounds):
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for name in order:
                rate = await _timed(args.messages, args.concurrency, modes[name])
                results[name].append(rate)
                log(f"round {round_index + 1} {name}: {rate:,.0f} msg/s")
    await channel.close()
    await driver.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with temp_dir("bench-publish-api-") as directory, AppProcess() as app:
        http_port, grpc_port = free_port(), free_port()
        config = raw_config(directory, {"type": "local", "path": str(directory / "q.db")},
                            [QUEUE], app_url=app.url, concurrency=4)
        config["publish_api"] = {"host": "127.0.0.1", "http_port": http_port,
                                 "grpc_port": grpc_port}
        sidecar = CliSidecar(directory, config)
        try:
            sidecar.wait_ready()
            wait_for_port(http_port)
            results = asyncio.run(_rounds(directory / "q.db", http_port, grpc_port, args))
        finally:
            sidecar.stop()
    medians = {name: median(rates) for name, rates in results.items()}
    result: dict[str, Any] = {
        "driver": "local", "messages": args.messages, "concurrency": args.concurrency,
        "rounds": args.rounds,
        "msg_per_s": {name: rounded(value, 0) for name, value in medians.items()},
        "all_rounds": {name: [round(r) for r in rates] for name, rates in results.items()},
        "http_over_raw": rounded(ratio(medians["http"], medians["raw"]), 2),
        "grpc_over_raw": rounded(ratio(medians["grpc"], medians["raw"]), 2),
    }
    rows = [[name, rounded(medians[name], 0), rounded(ratio(medians[name], medians["raw"]), 2)]
            for name in ("raw", "http", "grpc")]
    emit("publish_api", result, ["mode", "msg/s (median)", "/raw"], rows)


if __name__ == "__main__":
    main()
