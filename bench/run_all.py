"""Run every benchmark and regenerate ``bench/RESULTS.md`` from their JSON (never by hand).

    python -m bench.run_all            # ~10 minutes on a 2-core machine
    python -m bench.run_all --big      # larger sizes and more rounds
    python -m bench.run_all --no-cloud # local driver only (no ministack / Pub/Sub emulator)

Each benchmark runs as its own process; its JSON document (stdout) is kept in
``bench/results.json`` and rendered, with the exact commands, the date and the machine, into
``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.brokers import EMULATOR, MINISTACK, RabbitBroker, RedisBroker
from bench.common import format_table, machine_info

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def plan(big: bool, cloud: bool) -> list[tuple[str, list[str]]]:
    local_m, rounds = ("6000", "3") if big else ("2000", "2")
    runs = [("throughput", ["--driver", "local", "--messages", local_m, "--rounds", rounds])]
    if cloud and MINISTACK.exists():
        runs.append(("throughput", ["--driver", "sqs", "--messages", "1000" if big else "300",
                                    "--rounds", "1", "--wrk-s", "0"]))
    if cloud and EMULATOR.exists():
        runs.append(("throughput", ["--driver", "gcp_pubsub", "--messages",
                                    "3000" if big else "600", "--rounds", "1", "--wrk-s", "0"]))
    if RedisBroker.available():
        runs.append(("throughput", ["--driver", "redis", "--messages", "4000" if big else "2000",
                                    "--rounds", rounds, "--wrk-s", "0"]))
    if RabbitBroker.available():
        runs.append(("throughput", ["--driver", "rabbitmq", "--messages",
                                    "3000" if big else "1000", "--rounds", "1", "--wrk-s", "0"]))
    runs += [
        ("latency", ["--messages", "500" if big else "200", "--rounds", rounds]),
        ("priority", ["--high", "300" if big else "150", "--rounds", rounds,
                      "--weighted-rounds", "3"]),
        ("calls", ["--driver", "sqs", *(["--driver", "gcp_pubsub"] if cloud else []),
                   "--messages", "600" if big else "400", "--concurrency", "16",
                   "--rounds", "3"]),
        ("idle", ["--window-s", "60" if big else "30", "--outage-s", "60",
                  *_idle_drivers(big, cloud)]),
        ("footprint", ["--messages", "10000" if big else "5000"]),
        ("journal", ["--messages", "3000" if big else "1500", "--rounds", "3"]),
        ("publish_api", ["--messages", "4000" if big else "2000", "--concurrency", "16",
                         "--rounds", rounds if big else "3"]),
    ]
    return runs


def _idle_drivers(big: bool, cloud: bool) -> list[str]:
    drivers = ["local"]
    extra: list[str] = []
    if cloud and MINISTACK.exists():
        drivers.append("sqs")
        extra = ["--sqs-window-s", "120" if big else "60"]
    if RedisBroker.available():
        drivers.append("redis")
    if RabbitBroker.available():
        drivers.append("rabbitmq")
    if drivers == ["local"]:
        return []  # bench.idle's default
    return [arg for driver in drivers for arg in ("--driver", driver)] + extra


def run(name: str, args: list[str]) -> tuple[str, dict[str, Any]]:
    command = [sys.executable, "-m", f"bench.{name}", *args]
    shown = " ".join([".venv/bin/python", "-m", f"bench.{name}", *args])
    print(f"\n$ {shown}", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, check=False)
    if done.returncode != 0:
        return shown, {"error": f"exit {done.returncode}"}
    result: dict[str, Any] = json.loads(done.stdout)
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    return shown, result


def throughput_section(result: dict[str, Any]) -> list[str]:
    rows = []
    for driver, data in result.get("drivers", {}).items():
        for r in data["results"]:
            rows.append([driver, r["concurrency"], r["a_msgs_s"], r["b_msgs_s"], r["c_msgs_s"],
                         r["d_msgs_s"], r["d3_msgs_s"], r["wrk_req_s"], r["d_over_min_ab"],
                         r["d_over_c"], r["c_cpu_us_per_msg"], r["d_cpu_us_per_msg"],
                         r["cpu_c_over_d"]])
    return [format_md(["driver", "conc", "a broker msg/s", "b app msg/s", "c naive msg/s",
                       "d sidecar msg/s", "d3 sidecar, 3 queues", "wrk req/s", "d/min(a,b)",
                       "d/c", "c CPU µs/msg", "d CPU µs/msg", "CPU c/d"], rows)]


def format_md(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join("-" if c is None else str(c) for c in row) + " |"
              for row in rows]
    return "\n".join(lines)


def targets(results: list[tuple[str, str, dict[str, Any]]]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for name, _, result in results:
        if name == "throughput" and "local" in result.get("drivers", {}):
            for r in result["drivers"]["local"]["results"]:
                if r["concurrency"] >= 16:
                    c = r["concurrency"]
                    rows.append([f"local c={c}: d/min(a,b) >= 0.8", r["d_over_min_ab"],
                                 _ok(r["d_over_min_ab"], 0.8)])
                    rows.append([f"local c={c}: d/c >= 1.0", r["d_over_c"],
                                 _ok(r["d_over_c"], 1.0)])
                    rows.append([f"local c={c}: CPU per msg, naive/sidecar >= 1.0",
                                 r["cpu_c_over_d"], _ok(r["cpu_c_over_d"], 1.0)])
        if name == "latency" and "sidecar" in result:
            p50 = result["sidecar"]["p50_ms"]
            rows.append(["added latency p50 <= 1 ms (receive -> app)", p50,
                         _ok(1.0, p50)])
        if name == "priority" and "strict" in result:
            value = result["p50_ratio_big_over_small"]
            rows.append(["high wait p50 ratio 10k/1k <= 1.1", value, _ok(1.1, value)])
            value = result["p99_ratio_big_over_small"]
            rows.append(["high wait p99 ratio 10k/1k <= 1.1", value, _ok(1.1, value)])
        if name == "priority":
            for queue, w in result.get("weighted", {}).items():
                rows.append([f"weighted {queue}: share within 10 % of {w['weight_share']} "
                             f"(95 % CI {w['ci95']})", w["measured_share"],
                             "met" if w["within_10pct"] else "NOT met"])
        if name == "calls" and "sqs" in result.get("drivers", {}):
            value = result["drivers"]["sqs"]["batched_calls_per_message"]
            rows.append(["SQS c=16 saturated <= 1.3 API calls per delivered message", value,
                         _ok(1.3, value)])
        if name == "idle":
            for driver, r in result.get("drivers", {}).items():
                if driver == "sqs":
                    value = r["receive_calls_per_min_per_queue"]
                    rows.append(["SQS idle <= 3 calls/min/queue", value, _ok(3, value)])
                rows.append([f"{driver}: idle pickup of a high message <= 1 s (max)",
                             r["pickup_max_s"], _ok(1.0, r["pickup_max_s"])])
                if "idle_cpu_percent" in r:
                    rows.append([f"{driver}: idle CPU < 1 %", r["idle_cpu_percent"],
                                 _ok(1.0, r["idle_cpu_percent"])])
                if "outage" in r:
                    value = r["outage"]["receive_calls_per_queue_max"]
                    rows.append([f"{driver}: receive calls per queue in a 60 s app outage "
                                 "<= 1", value, _ok(1, value)])
    return rows


def _ok(big: float | None, small: float | None) -> str:
    if big is None or small is None:
        return "n/a"
    return "met" if big >= small else "NOT met"


def render(results: list[tuple[str, str, dict[str, Any]]], started: str) -> str:
    machine = machine_info()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()
    out = [
        "# Benchmark results",
        "",
        "Generated by `python -m bench.run_all` — do not edit by hand; rerun it.",
        "",
        f"- date (UTC): {started}",
        f"- commit: {commit or 'unknown'}",
        f"- machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"Linux {machine['kernel']}, load average at start {machine['loadavg_1m_at_start']}",
        "- the machine is shared (other test suites run at the same time): compare the ratios "
        "measured side by side in one run, not lone absolute numbers.",
        "",
        "## Targets",
        "",
        format_md(["target", "measured", "status"], targets(results)),
        "",
    ]
    for name, command, result in results:
        out += [f"## {name}", "", f"`{command}` ({result.get('elapsed_s', '?')} s)", ""]
        if "error" in result:
            out += [f"failed: {result['error']}", ""]
            continue
        if name == "throughput":
            out += throughput_section(result)
        else:
            body = {k: v for k, v in result.items()
                    if k not in ("benchmark", "when", "command", "machine", "elapsed_s")}
            out += ["```json", json.dumps(body, indent=1), "```"]
        out.append("")
    out += [
        "## Legend",
        "",
        "- a: the driver's receive + ack, batch 1 per worker, no app (broker limit)",
        "- b: plain aiohttp POST loop of the same CloudEvents to the no-op app (app limit)",
        "- c: naive forwarder: receive, POST, ack; no leases, journal, metrics or priorities",
        "- d: the sidecar as shipped, in process: one queue, journal + metrics on, info logs",
        "- d3: the sidecar with three queues and the backlog on the lowest",
        "- wrk: the no-op app's native ceiling (wrk, 1 thread), for context",
        "- CPU µs/msg: CPU time of the benchmark process (all threads, app excluded) per "
        "message, first receive to last ack; steadier than msg/s on a busy machine",
        "",
    ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", action="store_true", help="bigger sizes, more rounds")
    parser.add_argument("--no-cloud", action="store_true", help="local driver only")
    parser.add_argument("--only", action="append", help="run only these benchmarks")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    results = []
    for name, extra in plan(args.big, not args.no_cloud):
        if args.only and name not in args.only:
            continue
        command, result = run(name, extra)
        results.append((name, command, result))
    (HERE / "results.json").write_text(json.dumps(
        [{"command": c, "result": r} for _, c, r in results], indent=1) + "\n")
    (HERE / "RESULTS.md").write_text(render(results, started))
    print(format_table(["target", "measured", "status"], targets(results)), file=sys.stderr)
    print(f"wrote {HERE / 'RESULTS.md'}", file=sys.stderr)
    os.sync()


if __name__ == "__main__":
    main()
