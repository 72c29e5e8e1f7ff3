"""Run every benchmark and regenerate ``bench/RESULTS.md`` from their JSON (never by hand).

    python -m bench.run_all            # ~36 minutes on a 2-core machine (~12 of them idle waits)
    python -m bench.run_all --big      # larger sizes (~1.5 h)
    python -m bench.run_all --no-cloud # no SQS / Pub/Sub emulator (local, Redis, RabbitMQ)
    python -m bench.run_all --quick    # tiny sizes, to check it all runs (writes elsewhere)
    python -m bench.run_all --render   # runs nothing: RESULTS.md again from results.json

Each benchmark runs as its own process; its JSON document (stdout) is kept in
``results.json`` and rendered, with the exact commands, the date and the machine, into
``RESULTS.md`` (both in ``bench/``, or ``--out``). Where the targets ask for it the
benchmarks run 3 rounds and report medians. This script only plans, runs and collects: each
benchmark renders its own targets and section (its ``RENDERING``, ``bench.harness.rendering``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import (
    bench_report,
    calls,
    event_loop,
    footprint,
    idle,
    latency,
    long_tasks,
    monitor,
    operations,
    priority,
    report_incremental,
    soak,
    throughput,
    upload,
    versus,
)
from bench.harness.brokers import EMULATOR, MINISTACK, RabbitBroker, RedisBroker
from bench.harness.output import format_table
from bench.harness.rendering import Rendering, Rows, format_md
from bench.harness.system import machine_info

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ROUNDS = "3"
"""Rounds wherever a target asks for the median of 3 rounds."""


def plan(big: bool, cloud: bool, quick: bool = False) -> list[tuple[str, list[str]]]:
    """The benchmarks and their arguments: ``size(default, big, quick)`` picks the size."""

    def size(default: int, big_size: int, quick_size: int) -> str:
        return str(quick_size if quick else big_size if big else default)

    runs = [("throughput", ["--driver", "local", "--messages", size(2000, 6000, 100),
                            "--rounds", ROUNDS, *(["--wrk-s", "0"] if quick else [])])]
    brokers = [("sqs", cloud and MINISTACK.exists(), size(300, 1000, 40)),
               ("gcp_pubsub", cloud and EMULATOR.exists(), size(600, 3000, 60)),
               ("redis", RedisBroker.available(), size(2000, 4000, 100)),
               ("rabbitmq", RabbitBroker.available(), size(1000, 3000, 60))]
    for driver, present, messages in brokers:
        if present:
            rounds = size(2, 3, 1) if driver == "redis" else "1"  # redis is fast enough
            runs.append(("throughput", ["--driver", driver, "--messages", messages,
                                        "--rounds", rounds, "--wrk-s", "0"]))
    calls = [d for d, present in (("sqs", cloud), ("gcp_pubsub", cloud and EMULATOR.exists()),
                                  ("redis", RedisBroker.available()),
                                  ("rabbitmq", RabbitBroker.available())) if present]
    runs += [
        ("latency", ["--messages", size(200, 500, 30), "--rounds", ROUNDS]),
        ("priority", ["--high", size(150, 300, 20), "--rounds", ROUNDS,
                      "--weighted-rounds", ROUNDS,
                      "--weighted-messages", size(6000, 10000, 300),
                      *(["--backlog", "100", "--backlog", "1000"] if quick else [])]),
    ]
    if calls:
        runs.append(("calls", [*(a for d in calls for a in ("--driver", d)),
                               "--messages", size(400, 600, 60), "--concurrency", "16",
                               "--rounds", ROUNDS]))
    runs += [
        ("idle", ["--window-s", size(30, 60, 5), "--outage-s", size(60, 60, 3),
                  *(["--trials", "2"] if quick else []), *_idle_drivers(big, cloud, quick)]),
        ("footprint", [*_footprint_drivers(cloud),
                       *(["--starts", "1", "--messages", "300"] if quick else [])]),
        ("event_loop", ["--messages", size(2000, 4000, 200), "--rounds", ROUNDS,
                        *(["--concurrency", "4"] if quick else [])]),
        ("journal", ["--messages", size(1500, 3000, 200), "--rounds", ROUNDS,
                     *(["--lines", "200"] if quick else [])]),
        ("publish_api", ["--messages", size(2000, 4000, 100), "--concurrency", "16",
                         "--rounds", ROUNDS]),
        # journal.upload to S3 (moto) on against off; and the libraries it was chosen from
        ("upload", ["--messages", size(40000, 80000, 8000), "--concurrency", "16",
                    "--rotate-mb", "1", "--rounds", "1" if quick else ROUNDS]),
        ("upload_library", ["--uploads", "3" if quick else "20", "--mb", "1"]),
        ("monitor", ["--messages", size(15000, 30000, 300), "--rounds", ROUNDS]),
        ("bench_report", ["--sizes", "20000" if quick else "1000000,10000000"]),
        # ~6 minutes at 1 M on 2 cores; --big adds the 10 M history (~25 minutes more)
        ("report_incremental", ["--history", "20000" if quick else
                                "1000000,10000000" if big else "1000000",
                                "--new", "2000" if quick else "100000",
                                "--rounds", "1" if quick else ROUNDS,
                                "--full-rounds", "1" if quick else "2"]),
        ("long_tasks", ["--rounds", "1" if quick else ROUNDS,
                        *(["--high", "2", "--steady-s", "10", "--throughput-messages", "6",
                           "--low-task-s", "2"] if quick else [])]),
        # ~17 minutes: tasks of 20-60 s, three operations, today's code (a worktree) and HEAD
        ("operations", ["--rounds", "1" if quick else ROUNDS,
                        *(["--task-s", "3,6", "--op-after-s", "1,2", "--grace-s", "2"]
                          if quick else [])]),
        # ~20-25 minutes on a 2-core machine: the leak figure wants a long run
        ("soak", ["--messages", size(1_000_000, 1_000_000, 5000)]),
    ]
    return runs


def _footprint_drivers(cloud: bool) -> list[str]:
    drivers = ["local", "local+publish_api", "azure_servicebus"]  # the last: a dev dependency
    drivers += [name for name, present in (
        ("dapr+publish_api", RedisBroker.available()),  # Dapr mode on a pubsub.redis component
        ("sqs", cloud), ("gcp_pubsub", cloud and EMULATOR.exists()),
        ("redis", RedisBroker.available()), ("rabbitmq", RabbitBroker.available()))
        if present]
    return [arg for driver in drivers for arg in ("--driver", driver)]


def _idle_drivers(big: bool, cloud: bool, quick: bool) -> list[str]:
    drivers = ["local"]
    extra: list[str] = []
    if cloud:  # ministack when installed, else moto: the queues are empty, either will do
        drivers.append("sqs")
        extra = ["--sqs-window-s", "5" if quick else "120" if big else "60"]
    if cloud and EMULATOR.exists():  # waiting pulls last 20 s, as SQS long polls
        drivers.append("gcp_pubsub")
    if RedisBroker.available():
        drivers.append("redis")
    if RabbitBroker.available():
        drivers.append("rabbitmq")
    return [arg for driver in drivers for arg in ("--driver", driver)] + extra


def shown_command(name: str, args: list[str]) -> str:
    """The command line as RESULTS.md shows it (and ``--rerun`` finds earlier results by)."""
    return " ".join([".venv/bin/python", "-m", f"bench.{name}", *args])


def run(name: str, args: list[str]) -> tuple[str, dict[str, Any]]:
    command = [sys.executable, "-m", f"bench.{name}", *args]
    shown = shown_command(name, args)
    print(f"\n$ {shown}", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, check=False)
    if done.returncode != 0:
        return shown, {"error": f"exit {done.returncode}"}
    result: dict[str, Any] = json.loads(done.stdout)
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    return shown, result


RENDERINGS: dict[str, Rendering] = {
    "throughput": throughput.RENDERING, "monitor": monitor.RENDERING,
    "upload": upload.RENDERING, "latency": latency.RENDERING, "priority": priority.RENDERING,
    "calls": calls.RENDERING, "idle": idle.RENDERING, "bench_report": bench_report.RENDERING,
    "long_tasks": long_tasks.RENDERING, "report_incremental": report_incremental.RENDERING,
    "footprint": footprint.RENDERING, "operations": operations.RENDERING,
    "soak": soak.RENDERING, "event_loop": event_loop.RENDERING,
}
"""What each benchmark adds to RESULTS.md, by name (the others: their JSON alone); the
targets table lists the rows in the order of the results, the legend in this order."""
BOOKKEEPING = ("benchmark", "when", "command", "machine", "elapsed_s", "rerun_at", "samples")
"""Left out of every JSON shown (the header says it; every sample stays in results.json)."""


def targets(results: list[tuple[str, str, dict[str, Any]]]) -> Rows:
    rows: Rows = []
    for name, _, result in results:
        rendering = RENDERINGS.get(name)
        if rendering is not None and rendering.targets is not None and "error" not in result:
            rows += rendering.targets(result)
    return rows


def section(name: str, result: dict[str, Any]) -> list[str]:
    """A benchmark's lines under its heading: its own section, then its JSON."""
    rendering = RENDERINGS.get(name, Rendering())
    out = [*rendering.section(result), ""] if rendering.section is not None else []
    shown = rendering.shown({k: v for k, v in result.items() if k not in BOOKKEEPING})
    if shown is not None:
        out += ["```json", json.dumps(shown, indent=1), "```"]
    return out


def _previous(path: Path) -> dict[str, dict[str, Any]]:
    """The results of an earlier run, by command line (``--rerun`` keeps them)."""
    if not path.exists():
        return {}
    return {entry["command"]: entry["result"] for entry in json.loads(path.read_text())}


def benchmark_of(command: str) -> str:
    """``latency`` for ``.venv/bin/python -m bench.latency --rounds 3``."""
    return command.split(" -m bench.", 1)[1].split()[0]


def merged_rerun(kept: dict[str, dict[str, Any]], fresh: list[tuple[str, str, dict[str, Any]]],
                 ) -> list[tuple[str, str, dict[str, Any]]]:
    """The earlier results in their order, each benchmark run again standing where its
    earlier results stood (new ones at the end). Every other result is kept with the command
    line it was run with, even where ``plan`` would now run it otherwise (a server installed
    since, changed sizes): ``--rerun`` runs only what it names."""
    again: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for entry in fresh:
        again.setdefault(entry[0], []).append(entry)
    results: list[tuple[str, str, dict[str, Any]]] = []
    for command, result in kept.items():
        name = benchmark_of(command)
        if name not in again:
            results.append((name, command, result))
        elif all(entry[0] != name for entry in results):
            results += again[name]
    placed = {entry[0] for entry in results}
    return results + [entry for entry in fresh if entry[0] not in placed]


def render(results: list[tuple[str, str, dict[str, Any]]], started: str, flags: str) -> str:
    machine = machine_info()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()
    out = [
        "# Benchmark results",
        "",
        f"Generated by `python -m bench.run_all{flags}` — do not edit by hand; rerun it.",
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
        rerun = f"; re-run at {result['rerun_at']} UTC" if "rerun_at" in result else ""
        out += [f"## {name}", "", f"`{command}` ({result.get('elapsed_s', '?')} s{rerun})", ""]
        if "error" in result:
            out += [f"failed: {result['error']}", ""]
            continue
        out += [*section(name, result), ""]
    out += versus.sections(HERE / "versus")
    legend = [line for rendering in RENDERINGS.values() for line in rendering.legend]
    return "\n".join([*out, "## Legend", "", *legend, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", action="store_true", help="bigger sizes, Spark at 10 M too")
    parser.add_argument("--no-cloud", action="store_true",
                        help="no SQS (ministack, moto) or Pub/Sub emulator")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: checks that everything runs, measures nothing")
    parser.add_argument("--only", action="append", help="run only these benchmarks")
    parser.add_argument("--rerun", action="append",
                        help="run only these benchmarks again and keep every other result "
                             "of the existing results.json (marked as re-run in RESULTS.md)")
    parser.add_argument("--render", action="store_true",
                        help="run nothing: rewrite RESULTS.md from results.json and the "
                             "bench.versus documents in bench/versus/")
    parser.add_argument("--out", type=Path,
                        help="directory for RESULTS.md and results.json (default bench/; "
                             "with --quick a temporary one)")
    args = parser.parse_args()
    out = args.out or (Path(tempfile.mkdtemp(prefix="bench-quick-")) if args.quick else HERE)
    flags = "".join(f" {f}" for f, on in (("--big", args.big), ("--no-cloud", args.no_cloud),
                                          ("--quick", args.quick)) if on)
    flags += "".join(f" --rerun {name}" for name in args.rerun or [])
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    if args.render:
        previous = _previous(out / "results.json")
        results = [(benchmark_of(command), command, r) for command, r in previous.items()]
        (out / "RESULTS.md").write_text(render(results, started, " --render"))
        print(f"wrote {out / 'RESULTS.md'}", file=sys.stderr)
        return
    kept = _previous(out / "results.json") if args.rerun else {}
    results = []
    for name, extra in plan(args.big, not args.no_cloud, args.quick):
        if args.only and name not in args.only:
            continue
        if args.rerun and name not in args.rerun:
            continue  # kept below, as it was run
        command, result = run(name, extra)
        if args.rerun:
            result["rerun_at"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        results.append((name, command, result))
    if args.rerun:
        results = merged_rerun(kept, results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        [{"command": c, "result": r} for _, c, r in results], indent=1) + "\n")
    (out / "RESULTS.md").write_text(render(results, started, flags))
    print(format_table(["target", "measured", "status"], targets(results)), file=sys.stderr)
    print(f"wrote {out / 'RESULTS.md'}", file=sys.stderr)
    os.sync()


if __name__ == "__main__":
    main()
