"""Long tasks: high-priority wait behind a saturated low backlog of long tasks, with
and without ``reserve``; low throughput with no high traffic; the live ``workers_needed``
gauge beside the report's figure on the same run.

The sidecar (as shipped, in this process, local driver) delivers to an app in the same
process that holds each request for the seconds its body names and stamps its arrival.

* ``high wait``: concurrency 4, a backlog of low tasks of ``--low-task-s`` (>= 6 s) saturates
  every worker it may use; ``--high`` high messages of 0.2 s are published one at a time,
  ``--high-gap-s`` apart (not in step with the low tasks); each one's wait is publish -> the
  app. Without ``reserve`` a high message waits for the rest of a low task; with
  ``reserve: 1`` it takes the worker kept for it (target: max <= 1 s).
* ``low throughput``: only low tasks (``--throughput-task-s``), ``--throughput-messages`` of
  them, without and with ``reserve: 1``; the ratio of their throughputs against
  ``(c - r) / c`` (target >= 0.95 of it: the reserved worker idles, nothing else is lost).
* ``gauge vs report``: Poisson arrivals on two queues with exponential task lengths for
  ``--steady-s``; ``priority_pubsub_workers_needed`` read from the running sidecar at the end
  beside ``priority-pubsub report``'s workers needed on the journal of the same run, for the
  same target wait (tolerance: within 20 %).

* ``--slots`` (instead of the above): a mix of heavy and light tasks under a trickle
  of high ones, concurrency 4 (slots): ``high`` (``reserve: 1``, 0.2 s tasks published one at
  a time), ``heavy`` (tasks of ``--heavy-task-s`` that take 2 of the app's slots,
  ``max_wait_s: --heavy-max-wait-s``) and ``light`` (``--light-task-s``, one slot), both
  backlogged; run with the heavy queue at ``slots: 1`` (the sidecar counts a heavy task as one)
  and at ``slots: 2``. Per run, from the app's own arrival and end stamps, each task weighed by
  the slots it really takes: the most slots the app held at once (above 4: overcommitted), its
  mean slot occupancy over the run (busy slot-seconds / (span x 4): above 1 is overcommitment,
  below it idle slots), the high waits, when the last heavy task started, and the seconds the
  sidecar held slots for the heavy queue (``priority_pubsub_slots_held_seconds_total``).

Each figure is the median of ``--rounds`` rounds, side by side.

    python -m bench.long_tasks --rounds 3
    python -m bench.long_tasks --slots --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.harness.brokers import LocalBroker
from bench.harness.config import make_settings
from bench.harness.output import emit, log
from bench.harness.output import run_with_logs_aside as run_quietly
from bench.harness.rendering import Rendering, Rows, met
from bench.harness.stats import median_of, percentile, ratio, rounded
from bench.harness.system import temp_dir
from priority_pubsub.drivers.local.driver import LocalDriver
from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.sidecar import Sidecar

CONCURRENCY = 4
HIGH_TASK_S = 0.2
HEAVY_APP_SLOTS = 2
"""What a heavy task really takes of the app (the ``--slots`` mix), whatever the config says."""


class TimedApp:
    """An app that holds each request ``data["s"]`` seconds and stamps arrivals by tag."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return f"http://127.0.0.1:{self.port}/tasks"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        data = (await request.json())["data"]
        self.arrived[data["tag"]] = time.time()
        await asyncio.sleep(float(data["s"]))
        self.finished[data["tag"]] = time.time()
        return web.Response(status=200)


def task(tag: str, seconds: float) -> bytes:
    return json.dumps({"tag": tag, "s": seconds}).encode()


async def with_sidecar(directory: Path, queues: list[dict[str, Any]],
                       concurrency: int, app: TimedApp, url: str) -> tuple[Sidecar, LocalDriver,
                                                                           asyncio.Task[int]]:
    settings = make_settings(directory, LocalBroker(directory).driver_config(), queues,
                             app_url=url, concurrency=concurrency)
    driver = build_driver(settings)
    assert isinstance(driver, LocalDriver)
    sidecar = Sidecar(settings, driver=driver)
    return sidecar, driver, asyncio.create_task(sidecar.run(handle_signals=False))


async def wait_until(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)


async def high_waits(directory: Path, reserve: int, args: argparse.Namespace) -> list[float]:
    """Waits (s) of high messages published while low long tasks hold every worker they may."""
    app = TimedApp()
    url = await app.start()
    broker = LocalBroker(directory)
    lows = CONCURRENCY * 3
    await broker.preload("low", lows, lambda i: task(f"lo-{i}", args.low_task_s))
    queues = [{"name": "high", "reserve": reserve}, {"name": "low"}]
    sidecar, driver, running = await with_sidecar(directory, queues, CONCURRENCY, app, url)
    published: dict[str, float] = {}
    try:
        await wait_until(lambda: len(app.arrived) >= CONCURRENCY - reserve, 30)
        for n in range(args.high):
            await asyncio.sleep(args.high_gap_s)
            published[f"hi-{n}"] = time.time()
            await driver.publish("high", task(f"hi-{n}", HIGH_TASK_S))
        await wait_until(lambda: set(published) <= set(app.arrived), args.low_task_s * 4)
    finally:
        sidecar.request_stop()
        await running
        await app.stop()
    return [app.arrived[tag] - at for tag, at in published.items() if tag in app.arrived]


async def low_throughput(directory: Path, reserve: int, args: argparse.Namespace) -> float:
    """Low tasks per second with no high traffic, from the first start to the last end."""
    app = TimedApp()
    url = await app.start()
    count = args.throughput_messages
    await LocalBroker(directory).preload(
        "low", count, lambda i: task(f"lo-{i}", args.throughput_task_s))
    queues = [{"name": "high", "reserve": reserve}, {"name": "low"}]
    sidecar, _, running = await with_sidecar(directory, queues, CONCURRENCY, app, url)
    try:
        await wait_until(lambda: len(app.finished) >= count,
                         count * args.throughput_task_s + 30)
    finally:
        sidecar.request_stop()
        await running
        await app.stop()
    span = max(app.finished.values()) - min(app.arrived.values())
    return len(app.finished) / span


async def gauge_run(directory: Path, args: argparse.Namespace, seed: int
                    ) -> tuple[list[int | None], Path]:
    """A steady run; the live workers_needed per queue at its end, and the journal's glob."""
    app = TimedApp()
    url = await app.start()
    slo = args.target_wait_s
    queues = [{"name": "high", "wait_slo_s": slo}, {"name": "low", "wait_slo_s": slo}]
    sidecar, driver, running = await with_sidecar(directory, queues, args.steady_concurrency,
                                                  app, url)
    rng = random.Random(seed)
    streams = (("high", args.high_rate, args.high_service_s),
               ("low", args.low_rate, args.low_service_s))

    async def feed(queue: str, rate: float, service_s: float) -> None:
        n, ends = 0, time.monotonic() + args.steady_s
        while time.monotonic() < ends:
            await asyncio.sleep(rng.expovariate(rate))
            await driver.publish(queue, task(f"{queue}-{n}", rng.expovariate(1 / service_s)))
            n += 1

    try:
        await wait_until(lambda: sidecar.connected, 30)  # the driver publishes once started
        await asyncio.gather(*(feed(*stream) for stream in streams))
        await asyncio.sleep(2 * max(args.high_service_s, args.low_service_s))  # in flight end
        live = sidecar.capacity.workers_needed()
    finally:
        sidecar.request_stop()
        await running
        await app.stop()
    return live, directory / "journal"


async def slot_mix(directory: Path, heavy_slots: int, args: argparse.Namespace
                   ) -> dict[str, Any]:
    """The ``--slots`` mix with the heavy queue at ``slots: heavy_slots``: what the app held
    (each task weighed by what it really takes), the high waits, the slots held for heavy."""
    app = TimedApp()
    url = await app.start()
    broker = LocalBroker(directory)
    await broker.preload("heavy", args.heavy, lambda i: task(f"hv-{i}", args.heavy_task_s))
    await broker.preload("light", args.light, lambda i: task(f"lt-{i}", args.light_task_s))
    queues = [{"name": "high", "reserve": 1},
              {"name": "heavy", "slots": heavy_slots, "max_wait_s": args.heavy_max_wait_s},
              {"name": "light"}]
    sidecar, driver, running = await with_sidecar(directory, queues, CONCURRENCY, app, url)
    published: dict[str, float] = {}
    tasks = args.heavy + args.light + args.high
    try:
        await wait_until(lambda: len(app.arrived) >= 1, 30)
        for n in range(args.high):
            await asyncio.sleep(args.high_gap_s)
            published[f"hi-{n}"] = time.time()
            await driver.publish("high", task(f"hi-{n}", HIGH_TASK_S))
        await wait_until(lambda: len(app.finished) >= tasks,
                         args.heavy * args.heavy_task_s + args.light * args.light_task_s + 60)
        held_s = sidecar.metrics.slots_held.labels("heavy")._value.get()
    finally:
        sidecar.request_stop()
        await running
        await app.stop()
    weight = {"hv": HEAVY_APP_SLOTS, "lt": 1, "hi": 1}
    spans = [(app.arrived[tag], end, weight[tag[:2]]) for tag, end in app.finished.items()]
    start, end = min(s for s, _, _ in spans), max(e for _, e, _ in spans)
    edges = sorted([(s, w) for s, _, w in spans] + [(e, -w) for _, e, w in spans])
    held = most = 0
    for _, step in edges:  # an end before a start at the same instant
        held += step
        most = max(most, held)
    return {
        "app_slots_max": most,
        "occupancy": sum((e - s) * w for s, e, w in spans) / ((end - start) * CONCURRENCY),
        "high_waits": [app.arrived[tag] - at for tag, at in published.items()],
        "last_heavy_start_s": max(at for tag, at in app.arrived.items()
                                  if tag.startswith("hv")) - start,
        "makespan_s": end - start,
        "held_s": held_s,
    }


async def slots_main(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for round_ in range(args.rounds):
        for slots in (1, 2):  # side by side in each round
            with temp_dir(f"long-slots-{round_}-{slots}") as directory:
                runs[slots].append(await slot_mix(directory, slots, args))
            run = runs[slots][-1]
            log(f"round {round_} heavy slots {slots}: app slots max {run['app_slots_max']}, "
                f"occupancy {run['occupancy']:.3f}, high wait max "
                f"{max(run['high_waits']):.3f} s, held {run['held_s']:.1f} s")
    result: dict[str, Any] = {"concurrency": CONCURRENCY, "rounds": args.rounds,
                              "heavy": [args.heavy, args.heavy_task_s, HEAVY_APP_SLOTS],
                              "light": [args.light, args.light_task_s], "high": args.high}
    for slots, name in ((1, "heavy_slots_1"), (2, "heavy_slots_2")):
        chosen = runs[slots]
        result[name] = {
            "app_slots_max": median_of([r["app_slots_max"] for r in chosen]),
            "occupancy": rounded(median_of([r["occupancy"] for r in chosen]), 3),
            "high_wait_p50_s": rounded(median_of([percentile(r["high_waits"], 50)
                                                  for r in chosen]), 3),
            "high_wait_max_s": rounded(median_of([max(r["high_waits"]) for r in chosen]), 3),
            "last_heavy_start_s": rounded(median_of([r["last_heavy_start_s"]
                                                     for r in chosen]), 2),
            "makespan_s": rounded(median_of([r["makespan_s"] for r in chosen]), 2),
            "slots_held_s": rounded(median_of([r["held_s"] for r in chosen]), 2),
        }
    return result


def report_workers(journal: Path, target_wait_s: float, spark: Any) -> list[int | None]:
    from priority_pubsub.analytics.report import run_report

    summary = run_report(str(journal / "journal-*.jsonl"), str(journal.parent / "report"),
                         target_wait_s=target_wait_s, spark=spark)
    return [row.workers_needed for row in summary.capacity]


def within(live: int | None, offline: int | None) -> float | None:
    """|live - report| / report."""
    if live is None or not offline:
        return None
    return round(abs(live - offline) / offline, 3)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    waits: dict[int, list[list[float]]] = {0: [], 1: []}
    throughput: dict[int, list[float]] = {0: [], 1: []}
    gauges: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for reserve in (0, 1):  # side by side in each round
            with temp_dir(f"long-{round_}-{reserve}") as directory:
                waits[reserve].append(await high_waits(directory, reserve, args))
            with temp_dir(f"long-tp-{round_}-{reserve}") as directory:
                throughput[reserve].append(await low_throughput(directory, reserve, args))
            log(f"round {round_} reserve {reserve}: high waits "
                f"{[round(w, 2) for w in waits[reserve][-1]]}, low throughput "
                f"{throughput[reserve][-1]:.3f}/s")
        if args.steady_s > 0:
            with temp_dir(f"long-gauge-{round_}") as directory:
                live, journal = await gauge_run(directory, args, seed=round_)
                offline = await asyncio.to_thread(report_workers, journal,
                                                  args.target_wait_s, args.spark)
            gauges.append({"live": live, "report": offline,
                           "off_by": [within(a, b) for a, b in zip(live, offline,
                                                                   strict=False)]})
            log(f"round {round_}: workers needed live {live}, report {offline}")
    result: dict[str, Any] = {"concurrency": CONCURRENCY, "rounds": args.rounds,
                              "low_task_s": args.low_task_s, "high": args.high}
    for reserve, name in ((0, "no_reserve"), (1, "reserve_1")):
        result[name] = {
            f"high_wait_{q}_s": rounded(median_of([percentile(w, p) for w in waits[reserve]]), 3)
            for q, p in (("p50", 50), ("p99", 99), ("max", 100))
        } | {"low_msgs_per_s": rounded(median_of(throughput[reserve]), 3)}
    expected = (CONCURRENCY - 1) / CONCURRENCY
    tops, bottoms = throughput[1], throughput[0]
    per_round = [t / b for t, b in zip(tops, bottoms, strict=True)]
    result["low_throughput_ratio"] = rounded(median_of(per_round), 3)
    result["low_throughput_ratio_over_expected"] = ratio(result["low_throughput_ratio"],
                                                         expected)
    result["gauge_vs_report"] = gauges
    lowest = [g["off_by"][-1] for g in gauges if g["off_by"] and g["off_by"][-1] is not None]
    result["gauge_off_by_median"] = rounded(median_of(lowest), 3)
    return result


SIZES: dict[str, int | float] = {
    "--rounds": 3, "--low-task-s": 6.0, "--high": 8, "--high-gap-s": 1.3,
    "--throughput-messages": 24, "--throughput-task-s": 1.0,
    "--steady-s": 60.0, "--steady-concurrency": 6, "--high-rate": 3.0, "--high-service-s": 0.4,
    "--low-rate": 1.5, "--low-service-s": 1.0, "--target-wait-s": 1.0,
    "--heavy": 6, "--heavy-task-s": 3.0, "--heavy-max-wait-s": 4.0,
    "--light": 40, "--light-task-s": 0.5,
}
"""The command line's sizes and their defaults (an int's flag takes ints, a float's floats);
``--slots`` runs the heavy/light mix with the last five."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for flag, default in SIZES.items():
        parser.add_argument(flag, type=type(default), default=default)
    parser.add_argument("--slots", action="store_true", help="run the heavy/light mix instead")
    args = parser.parse_args()
    if args.slots:
        slots = run_quietly(slots_main(args))
        emit("long_tasks", {"mode": "slots", **slots},
             ["heavy queue", "app slots max", "occupancy", "high wait p50 s", "max s",
              "last heavy start s", "slots held s"],
             [[name, *(slots[name][k] for k in ("app_slots_max", "occupancy",
                                                 "high_wait_p50_s", "high_wait_max_s",
                                                 "last_heavy_start_s", "slots_held_s"))]
              for name in ("heavy_slots_1", "heavy_slots_2")])
        return
    args.spark = None
    if args.steady_s > 0:
        from priority_pubsub.analytics.report import _start_session

        args.spark = _start_session("local[2]")
    try:
        result = run_quietly(main_async(args))
    finally:
        if args.spark is not None:
            args.spark.stop()
    rows = [[name, *(result[name][k] for k in ("high_wait_p50_s", "high_wait_p99_s",
                                               "high_wait_max_s", "low_msgs_per_s"))]
            for name in ("no_reserve", "reserve_1")]
    emit("long_tasks", result, ["mode", "high wait p50 s", "p99 s", "max s", "low msg/s"], rows)


def targets(result: dict[str, Any]) -> Rows:
    """A reserved worker serves high at once; it costs low only its own share."""
    reserved, rounds = result["reserve_1"], result["rounds"]
    baseline = result["no_reserve"]["high_wait_max_s"]
    ratio_ = result["low_throughput_ratio_over_expected"]
    rows: Rows = [
        [f"reserve 1: high wait max <= 1 s behind {result['low_task_s']:g} s low tasks (median "
         f"of {rounds} rounds; without reserve {baseline} s)", reserved["high_wait_max_s"],
         met(1.0, reserved["high_wait_max_s"])],
        [f"reserve 1, no high traffic: low throughput >= 0.95 x (c-r)/c of no reserve "
         f"(median of {rounds} rounds' ratios, over (c-r)/c)", ratio_, met(ratio_, 0.95)],
    ]
    off_by = result.get("gauge_off_by_median")
    if off_by is not None:
        rows.append(["live workers_needed within 20 % of the report's (lowest queue, median "
                     f"of {len(result['gauge_vs_report'])} runs)", off_by, met(0.2, off_by)])
    return rows


RENDERING = Rendering(targets=targets)


if __name__ == "__main__":
    main()
