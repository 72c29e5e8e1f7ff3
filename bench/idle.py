"""Idle cost: broker calls per minute per queue with empty queues, idle CPU, pickup time.

local: the CLI sidecar (``priority-pubsub run``, three empty queues) as a subprocess; its
receive calls from ``priority_pubsub_receive_calls_total``, its CPU from /proc over the window.
In parallel, an in-process sidecar on its own queue file counts every SQLite job (receives and
the ``PRAGMA data_version`` polls that notice other processes' commits). Then a high-priority
message is published from this (another) process, several times, and the time until it
reaches the app is measured.

sqs (``--driver sqs``; ministack when installed, else moto server: the queues are empty):
an in-process sidecar with three empty queues; every request counted by ``bench.harness.counting``
(moto's request recorder, at the broker; on ministack the client's ``before-send`` hook),
all operations in ``calls_per_min_per_queue_total`` (now that settles are batched, an idle
sidecar still settles nothing); pickup is timed from SendMessage (by this process) to the app.

gcp_pubsub (``--driver gcp_pubsub``, Google's emulator): an in-process sidecar with three
empty queues; its pull RPCs counted by the driver itself (the emulator counts nothing), over
``--sqs-window-s`` (waiting pulls last 20 s, as SQS long polls); pickup, from publish to the
app, is the wake-up latency of a high message while the sidecar waits on every queue.

redis (``--driver redis``, a redis-server of its own): the same, every command counted by the
server (``MONITOR``: those clients sent in ``calls_per_min_per_queue``, those a script runs
inside Redis in ``inside_scripts_per_min_per_queue``); receive calls are the claim scripts
(``evalsha``) and the blocking waits (``xread``); pickup is timed from XADD to the app.

rabbitmq (``--driver rabbitmq``, a private rabbitmq-server): the CLI sidecar with three empty
queues, as for local; an idle wait is one consumer per queue per 20 s (basic.get, qos,
consume, cancel on a fresh channel), counted from ``priority_pubsub_receive_calls_total``.

Every driver's pickup message is published by a publisher driver of this process (the
driver's own ``publish``), so one path measures them all (``driver_idle``).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.brokers import (
    Broker,
    GcpBroker,
    LocalBroker,
    RabbitBroker,
    RedisBroker,
    sqs_broker,
)
from bench.harness.config import make_settings, raw_config, sample_body
from bench.harness.counting import WHERE, counter_for
from bench.harness.output import emit, log, run_with_logs_aside
from bench.harness.processes import AppProcess, CliSidecar
from bench.harness.rendering import Rendering, Rows, met
from bench.harness.stats import median, rounded
from bench.harness.system import proc_cpu_s, temp_dir
from priority_pubsub.drivers.base import Publisher
from priority_pubsub.drivers.local.driver import LocalDriver
from priority_pubsub.drivers.registry import build_driver
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


@dataclass(frozen=True)
class IdleWay:
    """How one driver's idle cost is measured. ``cli``: the CLI sidecar as a subprocess, its
    receive calls from its own metrics and its CPU from /proc; else an in-process sidecar
    whose broker calls ``bench.harness.counting`` counts (``receives`` names the receive calls among
    them). ``during``: more to measure in the window (it must last ``window_s``)."""

    broker: Callable[[Path], Broker]
    cli: bool
    receives: frozenset[str] = frozenset()
    during: Callable[[Path, AppProcess, float], Awaitable[dict[str, Any]]] | None = None


async def sqlite_jobs(directory: Path, app: AppProcess, window_s: float) -> dict[str, Any]:
    return {"sqlite_jobs_per_min_in_process":
            rounded(await count_sqlite_jobs(directory, app, window_s), 1)}


WAYS = {
    "local": IdleWay(LocalBroker, cli=True, during=sqlite_jobs),
    "rabbitmq": IdleWay(RabbitBroker, cli=True),
    "sqs": IdleWay(sqs_broker, cli=False, receives=frozenset({"ReceiveMessage"})),
    "gcp_pubsub": IdleWay(GcpBroker, cli=False, receives=frozenset({"pull"})),
    # the claim script and the blocking wait; what scripts run inside Redis is apart
    "redis": IdleWay(RedisBroker, cli=False, receives=frozenset({"evalsha", "xread"})),
}


LONG_POLLS = frozenset({"sqs", "gcp_pubsub"})
"""Drivers whose idle wait is one 20 s call: measured over ``--sqs-window-s``."""


async def driver_idle(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One driver's idle cost: three empty queues for the window, then pickup times of
    high-priority messages published by this process (a publisher driver of its own)."""
    way = WAYS[name]
    window_s = args.sqs_window_s if name in LONG_POLLS else args.window_s
    with temp_dir(f"idle-{name}") as directory, AppProcess(record=True) as app:
        broker = way.broker(directory)
        try:
            await broker.create(QUEUES)
            publisher = build_driver(make_settings(directory / "publisher",
                                                   broker.driver_config(), ["high"],
                                                   app_url=app.url, concurrency=1))
            assert isinstance(publisher, Publisher)
            await publisher.start()
            try:
                async def publish(i: int) -> str:
                    return await publisher.publish("high", sample_body(i))

                measure = cli_idle if way.cli else inprocess_idle
                return await measure(name, way, broker, directory, app, window_s, publish,
                                     args.trials)
            finally:
                await publisher.close()
        finally:
            await broker.close()


Publish = Callable[[int], Awaitable[str]]


async def cli_idle(name: str, way: IdleWay, broker: Broker, directory: Path, app: AppProcess,
                   window_s: float, publish: Publish, trials: int) -> dict[str, Any]:
    """``priority-pubsub run`` on three empty queues: receive calls from its metrics, CPU."""
    config = raw_config(directory, broker.driver_config(), QUEUES, app_url=app.url,
                        concurrency=4)
    sidecar = CliSidecar(directory, config)
    try:
        sidecar.wait_ready()
        await asyncio.sleep(2)
        calls = sidecar.metric_sum("priority_pubsub_receive_calls_total")
        cpu, started = proc_cpu_s(sidecar.pid), time.monotonic()
        if way.during is None:
            extra: dict[str, Any] = {}
            await asyncio.sleep(window_s)
        else:
            extra = await way.during(directory, app, window_s)
        elapsed = time.monotonic() - started
        cpu_pct = (proc_cpu_s(sidecar.pid) - cpu) / elapsed * 100
        receives = sidecar.metric_sum("priority_pubsub_receive_calls_total") - calls
        pickups = await pickup_times(app, publish, trials)
    finally:
        sidecar.stop()
    return {**summary(elapsed, receives, pickups, idle_cpu_percent=cpu_pct),
            "counted_at": "the sidecar's priority_pubsub_receive_calls_total", **extra}


async def inprocess_idle(name: str, way: IdleWay, broker: Broker, directory: Path,
                         app: AppProcess, window_s: float, publish: Publish,
                         trials: int) -> dict[str, Any]:
    """An in-process sidecar on three empty queues: its broker calls counted over the window
    (``bench.harness.counting``, at the broker where it can), this process's CPU, pickup times."""
    settings = make_settings(directory, broker.driver_config(), QUEUES,
                             app_url=app.url, concurrency=4)
    driver = build_driver(settings)
    counter = counter_for(name, broker, driver)
    sidecar = Sidecar(settings, driver=driver)
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    await asyncio.sleep(3)
    await counter.start()
    cpu, started = time.process_time(), time.monotonic()
    await asyncio.sleep(window_s)
    elapsed = time.monotonic() - started
    counted = await counter.stop()
    cpu_pct = (time.process_time() - cpu) / elapsed * 100
    pickups = await pickup_times(app, publish, trials)
    sidecar.request_stop()
    await running
    made: dict[str, int] = counted["requests"]
    per_queue = 60 / elapsed / len(QUEUES)
    receives = sum(v for k, v in made.items() if k in way.receives)
    result = {
        **summary(elapsed, receives, pickups, process_cpu_percent_in_process=cpu_pct),
        "calls_per_min_per_queue_total": rounded(sum(made.values()) * per_queue, 2),
        "calls_per_min_per_queue": {k: rounded(v * per_queue, 2) for k, v in made.items() if v},
        "counted_at": WHERE[name],
    }
    if "inside_scripts" in counted:
        result["inside_scripts_per_min_per_queue"] = {
            k: rounded(v * per_queue, 2) for k, v in counted["inside_scripts"].items() if v}
    return result


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
        broker = WAYS[name].broker(directory)
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
    out: dict[str, Any] = {}
    for name in args.driver:
        log(f"idle: {name} ...")
        out[name] = await driver_idle(name, args)
        if args.outage_s:
            log(f"outage: {name}, {args.outage_s:g} s ...")
            out[name]["outage"] = await outage_cost(name, args.outage_s)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver", action="append",
                        choices=["local", "sqs", "gcp_pubsub", "redis", "rabbitmq"])
    parser.add_argument("--window-s", type=float, default=30)
    parser.add_argument("--sqs-window-s", type=float, default=60,
                        help="SQS long polls and Pub/Sub waiting pulls last 20 s: use a "
                             "multiple of it")
    parser.add_argument("--trials", type=int, default=5, help="pickup measurements")
    parser.add_argument("--outage-s", type=float, default=0,
                        help="also measure an app outage of this length (0: skip)")
    args = parser.parse_args()
    args.driver = args.driver or ["local"]
    result = run_with_logs_aside(main_async(args))
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


def targets(result: dict[str, Any]) -> Rows:
    rows: Rows = []
    for driver, r in result.get("drivers", {}).items():
        if driver == "sqs":  # receives alone, then every call the broker saw
            value = r["receive_calls_per_min_per_queue"]
            rows.append(["SQS idle <= 3 ReceiveMessage/min/queue", value, met(3, value)])
            value = r.get("calls_per_min_per_queue_total")
            other = {k: v for k, v in r.get("calls_per_min_per_queue", {}).items()
                     if k != "ReceiveMessage"}
            rows.append([f"SQS idle <= 3 calls/min/queue, every operation, settles batched "
                         f"(besides receives: {other or 'none'}; {r.get('counted_at', '')})",
                         value, met(3, value)])
        rows.append([f"{driver}: idle pickup of a high message <= 1 s (max)",
                     r["pickup_max_s"], met(1.0, r["pickup_max_s"])])
        if "idle_cpu_percent" in r:
            rows.append([f"{driver}: idle CPU < 1 %", r["idle_cpu_percent"],
                         met(1.0, r["idle_cpu_percent"])])
        if "outage" in r:
            value = r["outage"]["receive_calls_per_queue_max"]
            rows.append([f"{driver}: receive calls per queue in a {r['outage']['outage_s']:g} s "
                         "app outage <= 1", value, met(1, value)])
    return rows


RENDERING = Rendering(targets=targets)


if __name__ == "__main__":
    main()
