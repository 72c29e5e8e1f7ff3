"""Idle cost: broker calls per minute per queue with empty queues, idle CPU, pickup time.

local: the CLI sidecar (``priority-pubsub run``, three empty queues) as a subprocess; its
receive calls from ``priority_pubsub_receive_calls_total``, its CPU from /proc over the window.
In parallel, an in-process sidecar on its own queue file counts every SQLite job (receives and
the ``PRAGMA data_version`` polls that notice other processes' commits). Then a high-priority
message is published from this (another) process, several times, and the time until it
reaches the app is measured.

sqs (``--driver sqs``, ministack): an in-process sidecar with three empty queues; every
ReceiveMessage is counted by a botocore ``before-call`` hook on the driver's client; pickup is
timed from SendMessage (by this process) to the app.

redis (``--driver redis``, a redis-server of its own): the same, every command counted by the
server (``INFO commandstats``, including those a script runs inside Redis and the depth
refreshes, in ``calls_per_min_per_queue``); receive calls are the claim scripts
(``evalsha``) and the blocking waits (``xread``); pickup is timed from XADD to the app.

rabbitmq (``--driver rabbitmq``, a private rabbitmq-server): the CLI sidecar with three empty
queues, as for local; an idle wait is one consumer per queue per 20 s (basic.get, qos,
consume, cancel on a fresh channel), counted from ``priority_pubsub_receive_calls_total``.

outage (``--outage-s 60``, every driver): an in-process sidecar (concurrency 4, three
queues) whose app process stops while 20 messages wait on the high queue; every
``driver.receive`` call per queue is counted over the outage, with the messages handed back
(the app never saw them), and the time from the app's return to the last delivery.

    python -m bench.idle --window-s 30 [--driver sqs --sqs-window-s 60] [--driver redis]
        [--driver rabbitmq]
        [--outage-s 60]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

from bench.brokers import Broker, LocalBroker, RabbitBroker, RedisBroker, SqsBroker
from bench.common import (
    AppProcess,
    CliSidecar,
    emit,
    log,
    make_settings,
    median,
    proc_cpu_s,
    quiet_logging,
    raw_config,
    rounded,
    sample_body,
    temp_dir,
)
from priority_pubsub.drivers.base import Driver, DriverContext, Publisher
from priority_pubsub.drivers.local import LocalDriver, LocalOptions
from priority_pubsub.plugins import build_driver
from priority_pubsub.sidecar import Sidecar

QUEUES = ["high", "normal", "low"]


async def count_sqlite_jobs(directory: Path, app: AppProcess, window_s: float) -> float:
    """SQLite jobs per minute of an idle in-process sidecar (3 queues)."""
    broker = LocalBroker(directory / "inproc")
    (directory / "inproc").mkdir()
    settings = make_settings(directory / "inproc", broker.driver_config(), QUEUES,
                             app_url=app.url, concurrency=4)
    driver = build_driver(settings)
    assert isinstance(driver, LocalDriver)
    worker = driver._db
    submit = worker.submit
    jobs = {"n": 0}

    def counted(job: Any, *, write: bool) -> asyncio.Future[Any]:
        jobs["n"] += 1
        return submit(job, write=write)

    setattr(worker, "submit", counted)  # noqa: B010 - count at the driver's one entry point
    sidecar = Sidecar(settings, driver=driver)
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    await asyncio.sleep(2)
    before = jobs["n"]
    await asyncio.sleep(window_s)
    per_minute = (jobs["n"] - before) / window_s * 60
    sidecar.request_stop()
    await running
    return per_minute


async def pickup_times(app: AppProcess, publish: Any, trials: int) -> list[float]:
    """Seconds from publish (by this process) to the app seeing the message."""
    times = []
    for i in range(trials):
        await asyncio.sleep(1.5)
        app.stats()
        stamp = time.time_ns()
        message_id = await publish(i)
        deadline = time.monotonic() + 10
        seen: dict[str, int] = {}
        while time.monotonic() < deadline:
            seen.update(app.stats()["seen"])
            if message_id in seen:
                times.append((seen[message_id] - stamp) / 1e9)
                break
            await asyncio.sleep(0.01)
    return times


def summary(elapsed: float, receives: float, pickups: list[float],
            **cpu_percent: float) -> dict[str, Any]:
    """One driver's idle result: calls per minute per queue, CPU, pickup times."""
    return {
        "window_s": round(elapsed, 1),
        "receive_calls_per_min_per_queue": rounded(receives / elapsed * 60 / len(QUEUES), 2),
        **{key: rounded(value, 3) for key, value in cpu_percent.items()},
        "pickup_s": [rounded(p, 3) for p in pickups],
        "pickup_median_s": rounded(median(pickups), 3),
        "pickup_max_s": rounded(max(pickups) if pickups else None, 3),
    }


async def local_idle(args: argparse.Namespace) -> dict[str, Any]:
    with temp_dir("idle") as directory, AppProcess(record=True) as app:
        config = raw_config(directory, {"type": "local", "path": str(directory / "q.db")},
                            QUEUES, app_url=app.url, concurrency=4)
        sidecar = CliSidecar(directory, config)
        try:
            sidecar.wait_ready()
            await asyncio.sleep(2)
            calls = sidecar.metric_sum("priority_pubsub_receive_calls_total")
            cpu, started = proc_cpu_s(sidecar.pid), time.monotonic()
            jobs_per_min = await count_sqlite_jobs(directory, app, args.window_s)
            elapsed = time.monotonic() - started
            cpu_pct = (proc_cpu_s(sidecar.pid) - cpu) / elapsed * 100
            receives = (sidecar.metric_sum("priority_pubsub_receive_calls_total") - calls)
            driver = LocalDriver(LocalOptions(path=directory / "q.db"),
                                 DriverContext(queues=("high",)))
            await driver.start()
            try:
                async def publish(i: int) -> str:
                    return await driver.publish("high", sample_body(i))

                pickups = await pickup_times(app, publish, args.trials)
            finally:
                await driver.close()
        finally:
            sidecar.stop()
    return {
        "window_s": round(elapsed, 1),
        "receive_calls_per_min_per_queue": rounded(receives / elapsed * 60 / len(QUEUES), 2),
        "sqlite_jobs_per_min_in_process": rounded(jobs_per_min, 1),
        "idle_cpu_percent": rounded(cpu_pct, 3),
        "pickup_s": [rounded(p, 3) for p in pickups],
        "pickup_median_s": rounded(median(pickups), 3),
        "pickup_max_s": rounded(max(pickups, default=None) if pickups else None, 3),
    }


async def inprocess_idle(
    broker: Broker, directory: Path, app: AppProcess, window_s: float, trials: int,
    attach_counter: Callable[[Driver], Callable[[], Awaitable[dict[str, int]]]],
    publish: Callable[[int], Awaitable[str]], receive_calls: frozenset[str] | None = None,
) -> dict[str, Any]:
    """An in-process sidecar on three empty queues of ``broker``: broker calls counted by
    ``attach_counter`` over the window, this process's CPU, then pickup times (the caller
    creates the queues)."""
    settings = make_settings(directory, broker.driver_config(), QUEUES,
                             app_url=app.url, concurrency=4)
    driver = build_driver(settings)
    calls = attach_counter(driver)
    sidecar = Sidecar(settings, driver=driver)
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    await asyncio.sleep(3)
    before, cpu, started = await calls(), time.process_time(), time.monotonic()
    await asyncio.sleep(window_s)
    elapsed = time.monotonic() - started
    after = await calls()
    cpu_pct = (time.process_time() - cpu) / elapsed * 100
    pickups = await pickup_times(app, publish, trials)
    sidecar.request_stop()
    await running
    made = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    per_queue = 60 / elapsed / len(QUEUES)
    receives = sum(v for k, v in made.items() if receive_calls is None or k in receive_calls)
    return {
        **summary(elapsed, receives, pickups, process_cpu_percent_in_process=cpu_pct),
        "calls_per_min_per_queue": {k: rounded(v * per_queue, 2) for k, v in made.items() if v},
    }


async def rabbit_idle(args: argparse.Namespace) -> dict[str, Any]:
    with temp_dir("idle-rabbit") as directory, AppProcess(record=True) as app:
        broker = RabbitBroker(directory)
        try:
            await broker.create(QUEUES)
            config = raw_config(directory, broker.driver_config(), QUEUES, app_url=app.url,
                                concurrency=4)
            sidecar = CliSidecar(directory, config)
            try:
                sidecar.wait_ready()
                await asyncio.sleep(2)
                calls = sidecar.metric_sum("priority_pubsub_receive_calls_total")
                cpu, started = proc_cpu_s(sidecar.pid), time.monotonic()
                await asyncio.sleep(args.window_s)
                elapsed = time.monotonic() - started
                cpu_pct = (proc_cpu_s(sidecar.pid) - cpu) / elapsed * 100
                receives = sidecar.metric_sum("priority_pubsub_receive_calls_total") - calls
                settings = make_settings(directory, broker.driver_config(), ["high"],
                                         app_url=app.url, concurrency=1)
                publisher = build_driver(settings)
                await publisher.start()
                try:
                    assert isinstance(publisher, Publisher)

                    async def publish(i: int) -> str:
                        return await publisher.publish("high", sample_body(i))

                    pickups = await pickup_times(app, publish, args.trials)
                finally:
                    await publisher.close()
            finally:
                sidecar.stop()
        finally:
            await broker.close()
    return summary(elapsed, receives, pickups, idle_cpu_percent=cpu_pct)


async def sqs_idle(args: argparse.Namespace) -> dict[str, Any]:
    """Every ReceiveMessage counted by a botocore ``before-call`` hook on the driver's client."""
    with temp_dir("idle-sqs") as directory, AppProcess(record=True) as app:
        broker = SqsBroker(directory)
        try:
            counts = {"ReceiveMessage": 0}

            def attach(driver: Driver) -> Callable[[], Awaitable[dict[str, int]]]:
                def count(**_: Any) -> None:
                    counts["ReceiveMessage"] += 1

                client = driver._api.sqs  # type: ignore[attr-defined]
                client.meta.events.register("before-call.sqs.ReceiveMessage", count)

                async def now() -> dict[str, int]:
                    return dict(counts)

                return now

            await broker.create(QUEUES)
            url = broker.client.get_queue_url(QueueName="high")["QueueUrl"]

            async def publish(i: int) -> str:
                answer = await asyncio.to_thread(broker.client.send_message, QueueUrl=url,
                                                 MessageBody=sample_body(i).decode())
                return str(answer["MessageId"])

            return await inprocess_idle(broker, directory, app, args.sqs_window_s, args.trials,
                                        attach, publish)
        finally:
            await broker.close()


async def redis_idle(args: argparse.Namespace) -> dict[str, Any]:
    """Every command the sidecar sends, counted by the server itself (``INFO commandstats``
    of a redis-server of its own, less the commands this counting sends)."""
    with temp_dir("idle-redis") as directory, AppProcess(record=True) as app:
        broker = RedisBroker(directory)
        try:
            def attach(_: Driver) -> Callable[[], Awaitable[dict[str, int]]]:
                async def now() -> dict[str, int]:
                    stats = await broker.client.info("commandstats")
                    counted = {name.removeprefix("cmdstat_"): int(value["calls"])
                               for name, value in stats.items()}
                    counted["info"] = 0  # this counter's own calls
                    return counted

                return now

            await broker.create(QUEUES)

            async def publish(i: int) -> str:
                entry = await broker.client.xadd("high", {"data": sample_body(i)})
                return str(entry.decode())

            # receive calls = the claim script and the blocking wait (the commands a script
            # runs inside Redis are in the breakdown, as are the depth refreshes)
            return await inprocess_idle(broker, directory, app, args.window_s, args.trials,
                                        attach, publish, frozenset({"evalsha", "xread"}))
        finally:
            await broker.close()


OUTAGE_BACKLOG = 20


async def _until(predicate: Callable[[], bool], interval_s: float = 0.02) -> None:
    """Poll state owned by another process (or the sidecar's internals) until it holds."""
    while True:
        if predicate():
            return
        await asyncio.sleep(interval_s)


async def outage_cost(name: str, outage_s: float) -> dict[str, Any]:
    """Broker receive calls per queue while the app is down for ``outage_s``, a backlog
    waiting; messages handed back; seconds from the app's return to the last delivery."""
    with temp_dir(f"outage-{name}") as directory:
        brokers: dict[str, type[Broker]] = {
            "local": LocalBroker, "sqs": SqsBroker, "rabbitmq": RabbitBroker, "redis": RedisBroker}
        broker = brokers[name](directory)
        app = AppProcess()
        try:
            await broker.create(QUEUES)
            settings = make_settings(directory, broker.driver_config(), QUEUES,
                                     app_url=app.url, concurrency=4)
            driver = build_driver(settings)
            calls = dict.fromkeys(QUEUES, 0)
            receive = driver.receive

            async def counted(queue: str, max_messages: int, wait_s: float) -> Any:
                calls[queue] += 1
                return await receive(queue, max_messages, wait_s)

            setattr(driver, "receive", counted)  # noqa: B010 - count every broker receive
            sidecar = Sidecar(settings, driver=driver)
            running = asyncio.create_task(sidecar.run(handle_signals=False))
            await _until(lambda: sidecar.gate.health.up)
            app.stop()
            await broker.preload("high", OUTAGE_BACKLOG)
            await _until(lambda: not sidecar.gate.health.up)  # a delivery found it gone
            before = dict(calls)
            await asyncio.sleep(outage_s)
            during = {q: calls[q] - before[q] for q in QUEUES}
            returned = sidecar.metrics.registry.get_sample_value(
                "priority_pubsub_messages_settled_total",
                {"queue": "high", "priority": "0", "outcome": "release"}) or 0.0
            back = time.monotonic()
            app = AppProcess(port=app.port)
            await _until(lambda: app.stats()["requests"] > OUTAGE_BACKLOG)  # + this stats call
            recovery_s = time.monotonic() - back
            sidecar.request_stop()
            await running
        finally:
            app.stop()
            await broker.close()
    return {
        "outage_s": outage_s,
        "receive_calls_per_queue": during,
        "receive_calls_per_queue_max": max(during.values()),
        "messages_returned": int(returned),
        "app_back_to_backlog_delivered_s": rounded(recovery_s, 2),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runs = {"local": local_idle, "sqs": sqs_idle, "redis": redis_idle, "rabbitmq": rabbit_idle}
    out: dict[str, Any] = {}
    for name in args.driver:
        log(f"idle: {name} ...")
        out[name] = await runs[name](args)
        if args.outage_s:
            log(f"outage: {name}, {args.outage_s:g} s ...")
            out[name]["outage"] = await outage_cost(name, args.outage_s)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver", action="append",
                        choices=["local", "sqs", "redis", "rabbitmq"])
    parser.add_argument("--window-s", type=float, default=30)
    parser.add_argument("--sqs-window-s", type=float, default=60,
                        help="SQS long polls last 20 s: use a multiple of it")
    parser.add_argument("--trials", type=int, default=5, help="pickup measurements")
    parser.add_argument("--outage-s", type=float, default=0,
                        help="also measure an app outage of this length (0: skip)")
    args = parser.parse_args()
    args.driver = args.driver or ["local"]
    with temp_dir("logs") as directory:
        quiet_logging(directory / "sidecar.log")
        result = uvloop.run(main_async(args))
    rows = [[name, r["receive_calls_per_min_per_queue"],
             r.get("sqlite_jobs_per_min_in_process"),
             r.get("idle_cpu_percent", r.get("process_cpu_percent_in_process")),
             r["pickup_median_s"], r["pickup_max_s"],
             r["outage"]["receive_calls_per_queue_max"] if "outage" in r else None,
             r["outage"]["messages_returned"] if "outage" in r else None]
            for name, r in result.items()]
    emit("idle", {"drivers": result},
         ["driver", "receives/min/queue", "sqlite jobs/min", "idle CPU %", "pickup p50 s",
          "pickup max s", "outage receives/queue", "outage returns"], rows)


if __name__ == "__main__":
    main()
