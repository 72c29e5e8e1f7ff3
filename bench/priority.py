"""Priority fidelity: high-priority wait behind a low-priority backlog, and weighted shares.

Strict: the sidecar (as shipped, in this process) is saturated by a low-priority backlog of
1k and of 10k messages against an app that holds each request ``--delay-ms``; high-priority
messages are injected at a steady rate; each one's wait is publish -> the driver handing it to
the sidecar. The goal is a wait independent of the backlog: ratio (10k / 1k) close to 1.

Weighted: three saturated queues with weights 6/3/1 (each preloaded with as many messages as
a round delivers, so none runs dry); the shares of the messages delivered (acked) are compared
with the configured weights. Each round delivers ``--weighted-messages`` (6,000 by default:
enough that the 95 % interval of the 10 % share is about +-0.008, under a tenth of it); the
result is the median share over the rounds with the Wilson 95 % interval of all rounds pooled.

    python -m bench.priority --backlog 1000 --backlog 10000 --high 200 --rate 20
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.harness.brokers import LocalBroker
from bench.harness.config import make_settings, sample_body
from bench.harness.loops import Probe, run_sidecar
from bench.harness.output import emit, log, run_with_logs_aside
from bench.harness.processes import AppProcess
from bench.harness.rendering import Rendering, Rows, met
from bench.harness.stats import percentile, ratio, rounded
from bench.harness.system import temp_dir
from priority_pubsub.drivers.local.driver import LocalDriver
from priority_pubsub.drivers.registry import build_driver
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


WEIGHTS = {"w-a": 6, "w-b": 3, "w-c": 1}


async def weighted_round(directory: Path, broker: LocalBroker, app: AppProcess,
                         args: argparse.Namespace, round_no: int) -> dict[str, int]:
    """Deliveries (acks) per queue in one saturated weighted run of --weighted-messages."""
    names = {f"{name}-{round_no}": weight for name, weight in WEIGHTS.items()}
    for name in names:
        await broker.preload(name, args.weighted_messages)
    settings = make_settings(directory / f"weighted-{round_no}", broker.driver_config(),
                             [{"name": n, "weight": w} for n, w in names.items()],
                             app_url=app.url, concurrency=args.concurrency,
                             scheduling="weighted")
    probe = await run_sidecar(settings, args.weighted_messages, 600)
    return {base: probe.acked_by_queue.get(f"{base}-{round_no}", 0) for base in WEIGHTS}


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (good near 0 and 1, unlike +-1.96 sigma)."""
    if n == 0:
        return (0.0, 1.0)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half, centre + half)


async def weighted_run(directory: Path, broker: LocalBroker, app: AppProcess,
                       args: argparse.Namespace) -> dict[str, Any]:
    rounds = [await weighted_round(directory, broker, app, args, r)
              for r in range(args.weighted_rounds)]
    total_weight = sum(WEIGHTS.values())
    pooled_n = sum(sum(r.values()) for r in rounds)
    result: dict[str, Any] = {}
    for name, weight in WEIGHTS.items():
        shares = [r[name] / sum(r.values()) for r in rounds]
        hits = sum(r[name] for r in rounds)
        low, high = wilson(hits, pooled_n)
        share = weight / total_weight
        median = statistics.median(shares)
        result[name] = {
            "weight_share": round(share, 3), "measured_share": round(median, 4),
            "round_shares": [round(s, 4) for s in shares], "delivered": hits,
            "ci95": [round(low, 4), round(high, 4)],
            # resolving 10 %: the interval's half width must be well inside the 10 % band
            "ci95_half_width_pct_of_share": round((high - low) / 2 / share * 100, 1),
            "within_10pct": abs(median - share) <= 0.1 * share,
        }
        log(f"weighted {name} (weight {weight}): median share {median:.4f} of "
            f"{pooled_n} deliveries, 95 % CI [{low:.4f}, {high:.4f}], target {share:.3f}")
    return result


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    waits: dict[int, list[float]] = {b: [] for b in args.backlog}
    with temp_dir("priority") as directory, AppProcess(delay_ms=args.delay_ms) as app:
        broker = LocalBroker(directory)
        for round_no in range(0 if args.only == "weighted" else args.rounds):
            order = args.backlog if round_no % 2 == 0 else list(reversed(args.backlog))
            for backlog in order:
                values = await strict_run(directory, broker, app, backlog, args,
                                          f"{backlog}-{round_no}")
                waits[backlog] += values
                log(f"round {round_no} backlog {backlog}: high wait p50 "
                    f"{rounded(percentile(values, 50), 2)} ms")
        weighted = {} if args.only == "strict" else await weighted_run(directory, broker, app,
                                                                       args)
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
    parser.add_argument("--weighted-messages", type=int, default=6000,
                        help="deliveries per weighted round (each queue preloads as many)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--weighted-rounds", type=int, default=3)
    parser.add_argument("--only", choices=("strict", "weighted"), help="run one part only")
    args = parser.parse_args()
    args.backlog = sorted(args.backlog or [1000, 10000])
    result = run_with_logs_aside(main_async(args))
    rows: list[list[object]] = [
        [f"strict, backlog {b}", s["samples"], s["p50_ms"], s["p99_ms"], ""]
        for b, s in result["strict"].items()
    ]
    rows += [[f"weighted {n} (w share {w['weight_share']})", w["delivered"], "", "",
              f"{w['measured_share']} [{w['ci95'][0]}, {w['ci95'][1]}]"]
             for n, w in result["weighted"].items()]
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    emit("priority", result, ["case", "n", "wait p50 ms", "wait p99 ms", "share [95% CI]"],
         rows)


def targets(result: dict[str, Any]) -> Rows:
    rows: Rows = []
    if result.get("strict"):
        backlogs = sorted(int(b) for b in result["strict"])
        sizes = f"{backlogs[-1]:,}/{backlogs[0]:,}"
        for q in ("p50", "p99"):
            value = result[f"{q}_ratio_big_over_small"]
            rows.append([f"high wait {q} ratio, low backlog {sizes} <= 1.1 (all rounds pooled)",
                         value, met(1.1, value)])
    for queue, w in result.get("weighted", {}).items():
        rows.append([f"weighted 6/3/1, {queue}: share within 10 % of {w['weight_share']} "
                     f"(median of {len(w['round_shares'])} rounds; 95 % CI {w['ci95']} over "
                     f"{w['delivered']} of its deliveries, +-"
                     f"{w.get('ci95_half_width_pct_of_share', '?')} % of the share)",
                     w["measured_share"], "met" if w["within_10pct"] else "NOT met"])
    return rows


RENDERING = Rendering(targets=targets)


if __name__ == "__main__":
    main()
