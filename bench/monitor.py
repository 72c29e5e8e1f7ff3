"""What watching costs: delivery throughput with 5 monitor pages open vs none, side by side.

The sidecar runs as deployed (``priority-pubsub run``, local driver, concurrency 16, journal
and metrics on) with the no-op app in its own process. Each run pauses the queue through the
monitor's own API, preloads M messages, opens the pages (or not), resumes, and times until
every message is settled (``/metrics`` read every 50 ms in every mode). The pages are real
Chromium tabs (Debian's ``chromium`` under Playwright, one browser for the whole run) showing
``/monitor`` with ``monitor.refresh_s: 1``: each asks for the live fragment every second.
A third mode, ``polls``, fetches the same fragment every second from as many plain HTTP
clients: on a small shared machine the browser's own CPU competes with the sidecar, and this
mode shows what the sidecar itself pays. The order of the modes rotates every round; the
medians of the rounds and the median of the per-round ratios are reported (target: pages /
none >= 0.95), with the sidecar's own CPU per message, and the share of one core the sidecar
spends while the pages only watch (queue paused, ``--watch-s``): that cost is what the pages
can take from a sidecar whose delivery is bound by its one core, and CPU time is counted per
process, so it holds on a busy shared machine where the rates swing.

    python -m bench.monitor --messages 15000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.harness.brokers import LocalBroker
from bench.harness.config import raw_config
from bench.harness.output import emit, log
from bench.harness.processes import AppProcess, CliSidecar
from bench.harness.rendering import Rendering, Rows, met
from bench.harness.stats import median_of, median_ratio, rounded
from bench.harness.system import proc_cpu_s, temp_dir

if TYPE_CHECKING:
    from playwright.sync_api import Browser

QUEUE = "work"
TOKEN = "bench-admin-token"
MODES = ("none", "pages", "polls")
"""none: no page; pages: Chromium tabs; polls: as many plain HTTP clients fetching the live
fragment every second (the sidecar's share of the cost, without the browser's CPU)."""


def post(sidecar: CliSidecar, path: str) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{sidecar.port}{path}", method="POST",
                                     data=b"{}", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200


def poll_every_second(sidecar: CliSidecar, stop: threading.Event) -> None:
    while not stop.is_set():
        sidecar.get("/monitor/live")
        stop.wait(1.0)


def one_run(mode: str, directory: Path, app: AppProcess, browser: Browser, count: int,
            pages: int, concurrency: int, timeout_s: float,
            watch_s: float) -> tuple[float, float, float]:
    """Messages per second for one mode, the sidecar's CPU µs per message (steadier than the
    rate when other work shares the machine), and the share of one core the sidecar used
    over ``watch_s`` with the queue paused and the pages open (what watching alone costs)."""
    broker = LocalBroker(directory)
    config = raw_config(directory, broker.driver_config(), [QUEUE], app_url=app.url,
                        concurrency=concurrency)
    config["monitor"] = {"admin_token": TOKEN, "refresh_s": 1}
    sidecar = CliSidecar(directory, config)
    tabs = []
    try:
        sidecar.wait_ready()
        post(sidecar, f"/api/v1/queues/{QUEUE}/pause")
        with ThreadPoolExecutor(1) as thread:  # Playwright's loop runs in this thread
            thread.submit(asyncio.run, broker.preload(QUEUE, count)).result()
        if mode == "pages":
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            for _ in range(pages):
                tab = context.new_page()
                tab.goto(f"http://127.0.0.1:{sidecar.port}/monitor")
                tabs.append(tab)
        stop_polls = threading.Event()
        if mode == "polls":
            for _ in range(pages):
                threading.Thread(target=poll_every_second, args=(sidecar, stop_polls),
                                 daemon=True).start()
        watched_cpu = proc_cpu_s(sidecar.pid)
        time.sleep(watch_s)
        watch_share = (proc_cpu_s(sidecar.pid) - watched_cpu) / watch_s
        started, cpu_started = time.perf_counter(), proc_cpu_s(sidecar.pid)
        post(sidecar, f"/api/v1/queues/{QUEUE}/resume")
        deadline = started + timeout_s
        while sidecar.metric_sum("priority_pubsub_messages_settled_total") < count:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{mode}: not all {count} settled in {timeout_s}s")
            time.sleep(0.05)
        rate = count / (time.perf_counter() - started)
        cpu_us = (proc_cpu_s(sidecar.pid) - cpu_started) * 1e6 / count
        stop_polls.set()
        return rate, cpu_us, watch_share
    finally:
        if tabs:
            tabs[0].context.close()
        sidecar.stop()


def bench(count: int, rounds: int, pages: int, concurrency: int,
          timeout_s: float, watch_s: float) -> dict[str, Any]:
    from tests.support.browser import launched_chromium

    rates: dict[str, list[float | None]] = {m: [] for m in MODES}
    cpu: dict[str, list[float | None]] = {m: [] for m in MODES}
    watch: dict[str, list[float | None]] = {m: [] for m in MODES}
    with temp_dir("monitor") as directory, AppProcess() as app, launched_chromium() as browser:
        for round_no in range(rounds):
            shift = round_no % len(MODES)
            order = MODES[shift:] + MODES[:shift]
            for mode in order:
                run_dir = directory / f"r{round_no}-{mode}"
                run_dir.mkdir()
                rate, cpu_us, share = one_run(mode, run_dir, app, browser, count, pages,
                                              concurrency, timeout_s, watch_s)
                rates[mode].append(rate)
                cpu[mode].append(cpu_us)
                watch[mode].append(share * 100)
                log(f"round {round_no} {mode}: {rate:.0f} msg/s, sidecar {cpu_us:.0f} CPU "
                    f"us/msg; watching alone: {share:.2%} of a core")
    return {
        "messages": count, "rounds": rounds, "pages": pages, "concurrency": concurrency,
        "statistic": "median",
        "none_msgs_s": rounded(median_of(rates["none"])),
        "pages_msgs_s": rounded(median_of(rates["pages"])),
        "pages_over_none": median_ratio(rates["pages"], rates["none"]),
        "polls_msgs_s": rounded(median_of(rates["polls"])),
        "polls_over_none": median_ratio(rates["polls"], rates["none"]),
        "rounds_msgs_s": {m: [rounded(v) for v in rates[m]] for m in MODES},
        **{f"{m}_cpu_us_per_msg": rounded(median_of(cpu[m])) for m in MODES},
        "cpu_none_over_pages": median_ratio(cpu["none"], cpu["pages"]),
        "rounds_cpu_us_per_msg": {m: [rounded(v) for v in cpu[m]] for m in MODES},
        **{f"{m}_watch_cpu_pct": rounded(median_of(watch[m]), 2) for m in MODES},
        "pages_watch_cost_pct_of_core": rounded(
            median_of([p - n for p, n in zip(watch["pages"], watch["none"], strict=True)
                       if p is not None and n is not None]), 2),
        "rounds_watch_cpu_pct": {m: [rounded(v, 2) for v in watch[m]] for m in MODES},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout-s", type=float, default=300)
    parser.add_argument("--watch-s", type=float, default=10,
                        help="seconds of watching alone (queue paused) measured per run")
    args = parser.parse_args()
    result = bench(args.messages, args.rounds, args.pages, args.concurrency, args.timeout_s,
                   args.watch_s)
    emit("monitor", result, ["pages", "msgs/s none", "msgs/s Chromium pages", "pages/none",
                             "msgs/s HTTP polls", "polls/none", "CPU us/msg none / pages"],
         [[args.pages, result["none_msgs_s"], result["pages_msgs_s"], result["pages_over_none"],
           result["polls_msgs_s"], result["polls_over_none"],
           f"{result['none_cpu_us_per_msg']} / {result['pages_cpu_us_per_msg']}"]])


def targets(result: dict[str, Any]) -> Rows:
    pages, n = result["pages"], result["rounds"]
    return [
        [f"{pages} monitor pages (Chromium) refreshing every second: throughput pages/none "
         f">= 0.95 (median of {n} rounds)", result["pages_over_none"],
         met(result["pages_over_none"], 0.95)],
        [f"{pages} HTTP clients fetching the page's fragment every second: polls/none >= "
         f"0.95 (the sidecar's share, without the browser's CPU)", result["polls_over_none"],
         met(result["polls_over_none"], 0.95)],
        [f"{pages} pages: sidecar CPU per message, none/pages >= 0.95",
         result.get("cpu_none_over_pages"), met(result.get("cpu_none_over_pages"), 0.95)],
        [f"{pages} pages only watching (queue paused): the sidecar's added CPU <= 5 % of a core",
         result.get("pages_watch_cost_pct_of_core"),
         met(5.0, result.get("pages_watch_cost_pct_of_core"))],
    ]


RENDERING = Rendering(targets=targets)


if __name__ == "__main__":
    main()
