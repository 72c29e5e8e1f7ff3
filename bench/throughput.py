"""Throughput against its limits, per driver and concurrency, measured side by side.

For each driver and each concurrency, in one run and interleaved (the order of the modes
rotates every round), with M preloaded messages of ~200 bytes and the no-op app in its own
process:

  a  broker limit    the driver's receive + ack, batch 1 per worker, no app
  b  app limit       a plain aiohttp POST loop of the same CloudEvents, no broker
  c  naive forwarder receive, POST, ack (no leases, journal, metrics, priorities)
  d  the sidecar     priority_pubsub.sidecar.Sidecar as shipped: one queue, journal + metrics
                     on, info logs (JSON, to a file)
  d3 the sidecar     three queues, the backlog on the lowest: strict sweeps pass two empty
                     queues on every take (the cost of priorities)
  wrk                the native HTTP ceiling of the app, for context (when wrk is installed)

Reports the median of the rounds for each, d/min(a,b) and d/c (the median over rounds of
each round's ratio: the modes of one round ran side by side), and the CPU time this process
spent per message (median of the rounds): on a shared machine the CPU cost per message is the
steadier measure of the sidecar's own overhead, so ``cpu c/d`` (naive CPU / sidecar CPU per
message, >= 1.0 means the sidecar costs no more than the naive loop) is reported next to d/c.

    python -m bench.throughput --driver local --messages 2000 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import re
import shutil
from pathlib import Path
from typing import Any

from bench.harness.brokers import Broker, open_broker
from bench.harness.config import make_settings, sample_body
from bench.harness.loops import (
    Result,
    app_limit,
    broker_limit,
    fake_message,
    naive_forwarder,
    run_sidecar,
    to_request,
)
from bench.harness.output import emit, log, run_with_logs_aside
from bench.harness.processes import AppProcess
from bench.harness.rendering import Rendering, Rows, format_md, met
from bench.harness.stats import median_of, median_ratio, rounded
from bench.harness.system import temp_dir

MODES = ("a", "b", "c", "d", "d3")
DEFAULT_MESSAGES = {"local": 2000, "sqs": 300, "gcp_pubsub": 1000, "redis": 2000,
                    "rabbitmq": 1000}


async def run_mode(mode: str, broker: Broker, directory: Path, app: AppProcess,
                   concurrency: int, count: int, tag: str,
                   timeout_s: float, profile_dir: Path | None = None) -> Result:
    """msgs/s and CPU µs of this process per message. CPU per message is far steadier than
    the rate when other work shares the machine; for SQS and Pub/Sub it includes the SDK.

    ``profile_dir``: cProfile the run (event-loop thread only) into ``<dir>/<tag>.prof``;
    the profiler slows the run, so its rates are not comparable with unprofiled ones."""
    if mode != "b":
        queue = f"bench-{tag}"
        queues = [f"hi-{tag}", f"mid-{tag}", queue] if mode == "d3" else [queue]
        await broker.create(queues)
        await broker.preload(queue, count)
    if profile_dir is None:
        return await _measure(mode, broker, directory, app, concurrency, count, tag, timeout_s)
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return await _measure(mode, broker, directory, app, concurrency, count, tag, timeout_s)
    finally:
        profiler.disable()
        profile_dir.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(profile_dir / f"{tag}.prof")


async def _measure(mode: str, broker: Broker, directory: Path, app: AppProcess,
                   concurrency: int, count: int, tag: str, timeout_s: float) -> Result:
    if mode == "b":
        requests = [to_request(fake_message(i, sample_body(i))) for i in range(count)]
        return await app_limit(app.url, requests, concurrency, timeout_s)
    queue = f"bench-{tag}"
    queues = [f"hi-{tag}", f"mid-{tag}", queue] if mode == "d3" else [queue]
    settings = make_settings(directory / tag, broker.driver_config(), queues,
                             app_url=app.url, concurrency=concurrency)
    if mode == "a":
        return await broker_limit(settings, queue, count, concurrency, timeout_s)
    if mode == "c":
        return await naive_forwarder(settings, queue, count, concurrency, timeout_s)
    probe = await run_sidecar(settings, count, timeout_s)
    return probe.result


async def run_wrk(app: AppProcess, concurrency: int, duration_s: float) -> float | None:
    if shutil.which("wrk") is None:
        return None
    request = to_request(fake_message(0, sample_body(0)))
    with temp_dir("wrk") as directory:
        script = directory / "post.lua"
        body = request.body.decode().replace("\\", "\\\\").replace("'", "\\'")
        headers = "".join(f"wrk.headers['{k}'] = '{v}'\n" for k, v in request.headers.items())
        script.write_text(f"wrk.method = 'POST'\nwrk.body = '{body}'\n{headers}")
        process = await asyncio.create_subprocess_exec(
            "wrk", "-t1", f"-c{concurrency}", f"-d{duration_s:g}s", "-s", str(script), app.url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await process.communicate()
    match = re.search(rb"Requests/sec:\s+([\d.]+)", out)
    return float(match.group(1)) if match else None


async def bench_driver(name: str, concurrencies: list[int], count: int, rounds: int,
                       timeout_s: float, wrk_s: float,
                       modes: tuple[str, ...] = MODES,
                       profile_dir: Path | None = None) -> dict[str, Any]:
    with temp_dir(name) as directory:
        broker = open_broker(name, directory)
        try:
            with AppProcess() as app:
                samples: dict[int, dict[str, list[float | None]]] = {
                    c: {m: [] for m in MODES} for c in concurrencies
                }
                cpu: dict[int, dict[str, list[float | None]]] = {
                    c: {m: [] for m in MODES} for c in concurrencies
                }
                for round_no in range(rounds):
                    for c in concurrencies:
                        shift = (round_no + c) % len(modes)
                        for mode in modes[shift:] + modes[:shift]:
                            tag = f"r{round_no}-c{c}-{mode}"
                            rate, cpu_us = await run_mode(mode, broker, directory, app, c, count,
                                                          tag, timeout_s, profile_dir)
                            samples[c][mode].append(rate)
                            cpu[c][mode].append(cpu_us)  # None too: rounds stay aligned
                            log(f"{name} round {round_no} c={c} {mode}: {rounded(rate)} msg/s, "
                                f"{rounded(cpu_us)} CPU us/msg")
                wrk = {c: await run_wrk(app, c, wrk_s) for c in concurrencies} if wrk_s else {}
        finally:
            await broker.close()
    results = []
    for c in concurrencies:
        runs = samples[c]
        limits = [min((v for v in ab if v is not None), default=None)
                  for ab in zip(runs["a"], runs["b"], strict=False)]
        results.append({
            "concurrency": c,
            **{f"{m}_msgs_s": rounded(median_of(runs[m])) for m in MODES},
            "wrk_req_s": rounded(wrk.get(c)),
            "d_over_min_ab": median_ratio(runs["d"], limits),
            "d_over_c": median_ratio(runs["d"], runs["c"]),
            "d3_over_d": median_ratio(runs["d3"], runs["d"]),
            **{f"{m}_cpu_us_per_msg": rounded(median_of(cpu[c][m])) for m in MODES},
            "cpu_c_over_d": median_ratio(cpu[c]["c"], cpu[c]["d"]),
            "rounds": {m: [rounded(v) for v in runs[m]] for m in MODES},
            "cpu_rounds": {m: [rounded(v) for v in cpu[c][m]] for m in MODES},
        })
    return {"messages": count, "rounds": rounds, "statistic": "median", "results": results}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in args.driver:
        count = args.messages or DEFAULT_MESSAGES[name]
        out[name] = await bench_driver(name, args.concurrency, count, args.rounds,
                                       args.timeout_s, args.wrk_s, tuple(args.mode),
                                       args.profile)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver", action="append", choices=sorted(DEFAULT_MESSAGES))
    parser.add_argument("--concurrency", type=int, action="append")
    parser.add_argument("--messages", type=int, default=0,
                        help=f"M per run (default per driver: {DEFAULT_MESSAGES})")
    parser.add_argument("--mode", action="append", choices=MODES,
                        help="only these modes (default all; for profiling one of them)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--wrk-s", type=float, default=2, help="0 skips wrk")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="cProfile each run into DIR/<round-conc-mode>.prof (slows it: "
                             "for finding costs, not for rates); read with pstats")
    args = parser.parse_args()
    args.driver = args.driver or ["local"]
    args.concurrency = args.concurrency or [1, 4, 16, 64]
    args.mode = args.mode or list(MODES)
    drivers = run_with_logs_aside(main_async(args))
    rows = []
    for name, result in drivers.items():
        for r in result["results"]:
            rows.append([name, r["concurrency"], r["a_msgs_s"], r["b_msgs_s"], r["c_msgs_s"],
                         r["d_msgs_s"], r["d3_msgs_s"], r["wrk_req_s"], r["d_over_min_ab"],
                         r["d_over_c"], r["c_cpu_us_per_msg"], r["d_cpu_us_per_msg"],
                         r["cpu_c_over_d"]])
    emit("throughput", {"drivers": drivers},
         ["driver", "conc", "a broker", "b app", "c naive", "d sidecar", "d3 (3 queues)",
          "wrk", "d/min(a,b)", "d/c", "c CPU us/msg", "d CPU us/msg", "cpu c/d"], rows)


def section(result: dict[str, Any]) -> list[str]:
    rows = []
    for driver, data in result.get("drivers", {}).items():
        for r in data["results"]:
            rows.append([driver, r["concurrency"], r["a_msgs_s"], r["b_msgs_s"], r["c_msgs_s"],
                         r["d_msgs_s"], r["d3_msgs_s"], r["wrk_req_s"], r["d_over_min_ab"],
                         r["d_over_c"], r["c_cpu_us_per_msg"], r["d_cpu_us_per_msg"],
                         r["cpu_c_over_d"]])
    rounds = sorted({str(d["rounds"]) for d in result.get("drivers", {}).values()})
    statistic = next((d.get("statistic", "best") for d in result.get("drivers", {}).values()),
                     "best")
    return [f"{statistic} of {'/'.join(rounds)} rounds; the ratios are the {statistic} of each "
            "round's ratio", "",
            format_md(["driver", "conc", "a broker msg/s", "b app msg/s", "c naive msg/s",
                       "d sidecar msg/s", "d3 sidecar, 3 queues", "wrk req/s", "d/min(a,b)",
                       "d/c", "c CPU µs/msg", "d CPU µs/msg", "CPU c/d"], rows)]


def targets(result: dict[str, Any]) -> Rows:
    rows: Rows = []
    local = result.get("drivers", {}).get("local")
    if local is None:
        return rows
    n = local["rounds"]
    for r in local["results"]:
        c = r["concurrency"]
        rows.append([f"local c={c}: d/c >= 1.0 (median of {n} rounds)", r["d_over_c"],
                     met(r["d_over_c"], 1.0)])
    for r in local["results"]:
        if r["concurrency"] >= 16:
            c = r["concurrency"]
            rows.append([f"local c={c}: d/min(a,b) >= 0.8", r["d_over_min_ab"],
                         met(r["d_over_min_ab"], 0.8)])
            rows.append([f"local c={c}: CPU per msg, naive/sidecar >= 1.0",
                         r["cpu_c_over_d"], met(r["cpu_c_over_d"], 1.0)])
    return rows


def _no_json(_: dict[str, Any]) -> None:
    """The table shows every figure; each round's stays in results.json."""


LEGEND = (
    "- a: the driver's receive + ack, batch 1 per worker, no app (broker limit)",
    "- b: plain aiohttp POST loop of the same CloudEvents to the no-op app (app limit)",
    "- c: naive forwarder: receive, POST, ack; no leases, journal, metrics or priorities",
    "- d: the sidecar as shipped, in process: one queue, journal + metrics on, info logs",
    "- d3: the sidecar with three queues and the backlog on the lowest",
    "- wrk: the no-op app's native ceiling (wrk, 1 thread), for context",
    "- CPU µs/msg: CPU time of the benchmark process (all threads, app excluded) per "
    "message, first receive to last ack; steadier than msg/s on a busy machine",
)
RENDERING = Rendering(targets=targets, section=section, shown=_no_json, legend=LEGEND)


if __name__ == "__main__":
    main()
