"""What the journal costs: the shipped sidecar with the journal off, ``fsync: none`` and
``fsync: every_line``, side by side (not a test).

Every journal line is one unbuffered append when its attempt is settled (a
kill -9 loses no settled line); ``every_line`` also ``fdatasync``s it (survives power loss).
Two measures, each the median of the rounds, modes interleaved (their order rotates each
round) so they share the machine's noise:

* ``append_us``: one ``JournalWriter.append`` alone, µs per line (N lines in a loop);
* the sidecar (local driver, one queue, no-op app in its own process, concurrency C):
  msg/s and this process's CPU µs per message, and the ratio to the journal-off run.

    python -m bench.journal --messages 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from bench.harness.brokers import LocalBroker
from bench.harness.config import raw_config
from bench.harness.loops import run_sidecar
from bench.harness.output import emit, log, run_with_logs_aside
from bench.harness.processes import AppProcess
from bench.harness.stats import ratio, rounded
from bench.harness.system import temp_dir
from priority_pubsub.settings.config import validate_config
from priority_pubsub.telemetry.journal import JournalRecord, JournalWriter

MODES = ("off", "none", "every_line")


def _record(n: int) -> JournalRecord:
    return JournalRecord(
        message_id=f"{n:08d}-0000-0000-0000-000000000000", queue="bench", priority=0,
        driver="local", attempt=1, enqueued_ms=1, received_ms=2, forwarded_ms=3,
        settled_ms=4, outcome="ack", http_status=200, reason=None, bytes=200,
    )


async def append_us(directory: Path, mode: str, lines: int) -> float | None:
    if mode == "off":
        return None
    writer = JournalWriter(directory, rotate_mb=64, fsync=mode)  # type: ignore[arg-type]
    writer.start()
    records = [_record(n) for n in range(lines)]
    started = time.perf_counter()
    for record in records:
        writer.append(record)
    elapsed = time.perf_counter() - started
    await writer.close()
    return elapsed / lines * 1e6


async def sidecar_run(directory: Path, app: AppProcess, mode: str, count: int,
                      concurrency: int) -> tuple[float | None, float | None]:
    broker = LocalBroker(directory)
    await broker.preload("bench", count)
    raw = raw_config(directory, broker.driver_config(), ["bench"], app_url=app.url,
                     concurrency=concurrency, journal=mode != "off")
    if mode != "off":
        raw["journal"]["fsync"] = mode
    probe = await run_sidecar(validate_config(raw), count, timeout_s=300)
    return probe.result


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    appends: dict[str, list[float]] = {m: [] for m in MODES}
    with temp_dir("journal") as directory, AppProcess() as app:
        for round_no in range(args.rounds):
            order = MODES[round_no % 3:] + MODES[:round_no % 3]
            for mode in order:
                where = directory / f"r{round_no}-{mode}"
                where.mkdir()
                if (us := await append_us(where / "micro", mode, args.lines)) is not None:
                    appends[mode].append(us)
                rate, cpu_us = await sidecar_run(where, app, mode, args.messages,
                                                 args.concurrency)
                if rate is not None:
                    rates[mode].append(rate)
                if cpu_us is not None:
                    cpu[mode].append(cpu_us)
                log(f"round {round_no} {mode}: {rounded(rate)} msg/s, {rounded(cpu_us)} CPU "
                    f"us/msg, append {rounded(us, 2)} us")
    med = {m: statistics.median(rates[m]) if rates[m] else None for m in MODES}
    return {
        "messages": args.messages, "concurrency": args.concurrency, "rounds": args.rounds,
        "modes": {
            m: {
                "append_us_p50": rounded(statistics.median(appends[m]), 2)
                if appends[m] else None,
                "sidecar_msgs_s_p50": rounded(med[m]),
                "sidecar_cpu_us_per_msg_p50": rounded(statistics.median(cpu[m]))
                if cpu[m] else None,
                "msgs_s_over_off": ratio(med[m], med["off"]),
                "rounds_msgs_s": [rounded(v) for v in rates[m]],
            }
            for m in MODES
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--lines", type=int, default=2000, help="lines per append measure")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = run_with_logs_aside(main_async(args))
    rows = [[m, r["append_us_p50"], r["sidecar_msgs_s_p50"], r["sidecar_cpu_us_per_msg_p50"],
             r["msgs_s_over_off"]] for m, r in result["modes"].items()]
    emit("journal", result, ["journal", "append us/line", "sidecar msg/s", "CPU us/msg",
                             "msg/s vs off"], rows)


if __name__ == "__main__":
    main()
