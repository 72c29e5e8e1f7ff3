"""Where the local driver's receive time goes: naive loop (c) and sidecar (d) side by side.

Not a test. The local driver runs every SQLite job on its own thread (``SqliteWorker``); a job
waits in that thread's queue, runs, and its result goes back to the event loop. This script
times each of the three parts for every claim (receive) and settle (ack) job, in the naive
forwarder and in the sidecar as shipped, interleaved over the rounds (order rotating), and
reports the medians (median over rounds of each run's median):

* ``wait``: from ``submit`` until the job starts on the SQLite thread. That thread needs the
  GIL to start it: a long wait means the event loop held the GIL meanwhile (its busy stretch);
* ``run``: the job itself (its SQL, inside a transaction shared with the jobs queued with it);
* ``back``: from the job's end until its future is done on the event loop.

A short job that ran on the event loop itself has no hop: its ``wait`` is ~0 and
its ``back`` only the loop's turn to run the done callback; ``on_loop_share`` is the share of
claim and settle jobs that ran there.

Also: claim jobs per delivered message, and jobs per transaction. Used to explain the
sidecar's d/c below 1.0 at concurrency 4 (bench/RESULTS.md).

    python -m bench.sqlite_hops --concurrency 4 --messages 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness.brokers import LocalBroker
from bench.harness.config import make_settings
from bench.harness.loops import naive_forwarder, run_sidecar
from bench.harness.output import emit, log, run_with_logs_aside
from bench.harness.processes import AppProcess
from bench.harness.stats import median_of, rounded
from bench.harness.system import temp_dir
from priority_pubsub.drivers.local.sqlite_worker import SqliteWorker

MODES = ("c", "d")
PARTS = ("wait", "run", "back")
KINDS = {"claim": "claim", "run": "settle"}
"""The local driver's job functions by name: ``_claim``'s ``claim``, ``_settle``'s ``run``."""


class Hops:
    """Per job kind and part, the times of one run (seconds); jobs per transaction."""

    def __init__(self) -> None:
        self.times: dict[str, dict[str, list[float]]] = {
            kind: {part: [] for part in PARTS} for kind in KINDS.values()}
        self.batches: list[int] = []
        self.on_loop = 0
        self.jobs = 0


@contextlib.contextmanager
def timed_jobs(hops: Hops) -> Iterator[None]:
    """Wrap ``SqliteWorker.submit`` and ``_execute`` (class-wide, put back on exit)."""
    submit, execute = SqliteWorker.submit, SqliteWorker._execute

    def timed_submit(self: SqliteWorker, job: Any, *, write: bool, short: bool = False) -> Any:
        kind = KINDS.get(getattr(job, "__name__", ""))
        if kind is None:
            return submit(self, job, write=write, short=short)
        marks = {"submitted": time.perf_counter()}

        def marked(conn: Any) -> Any:
            marks["started"] = time.perf_counter()
            try:
                return job(conn)
            finally:
                marks["ended"] = time.perf_counter()

        def done(_: object) -> None:
            if "ended" in marks:
                parts = hops.times[kind]
                parts["wait"].append(marks["started"] - marks["submitted"])
                parts["run"].append(marks["ended"] - marks["started"])
                parts["back"].append(time.perf_counter() - marks["ended"])

        future = submit(self, marked, write=write, short=short)
        hops.jobs += 1
        hops.on_loop += future.done()  # done at once: it ran on the event loop, no hop
        future.add_done_callback(done)
        return future

    def counted_execute(self: SqliteWorker, conn: Any, batch: Any) -> Any:
        hops.batches.append(len(batch))
        return execute(self, conn, batch)

    SqliteWorker.submit = timed_submit  # type: ignore[method-assign]
    SqliteWorker._execute = counted_execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        SqliteWorker.submit = submit  # type: ignore[method-assign]
        SqliteWorker._execute = execute  # type: ignore[method-assign]


async def run_mode(mode: str, broker: LocalBroker, directory: Path, app: AppProcess,
                   concurrency: int, count: int, tag: str) -> dict[str, Any]:
    queue = f"bench-{tag}"
    await broker.create([queue])
    await broker.preload(queue, count)
    settings = make_settings(directory / tag, broker.driver_config(), [queue],
                             app_url=app.url, concurrency=concurrency)
    hops = Hops()
    with timed_jobs(hops):
        if mode == "c":
            rate = (await naive_forwarder(settings, queue, count, concurrency, 120)).rate
        else:
            rate = (await run_sidecar(settings, count, 120)).result.rate
    run: dict[str, Any] = {
        "rate": rate,
        "claims_per_msg": len(hops.times["claim"]["wait"]) / count,
        "jobs_per_txn": statistics.mean(hops.batches) if hops.batches else None,
        "on_loop_share": hops.on_loop / hops.jobs if hops.jobs else None,
    }
    for kind, parts in hops.times.items():
        for part, values in parts.items():
            run[f"{kind}_{part}_us"] = statistics.median(values) * 1e6 if values else None
    return run


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with temp_dir("hops") as directory:
        broker = LocalBroker(directory)
        try:
            with AppProcess() as app:
                for round_no in range(args.rounds):
                    order = MODES[round_no % 2:] + MODES[:round_no % 2]
                    for mode in order:
                        run = await run_mode(mode, broker, directory, app, args.concurrency,
                                             args.messages, f"r{round_no}-{mode}")
                        runs[mode].append(run)
                        log(f"round {round_no} {mode}: {rounded(run['rate'])} msg/s, claim "
                            f"wait {rounded(run['claim_wait_us'])} us")
        finally:
            await broker.close()
    medians = {mode: {key: rounded(median_of([r[key] for r in rows]), 2) for key in rows[0]}
               for mode, rows in runs.items()}
    return {"concurrency": args.concurrency, "messages": args.messages, "rounds": args.rounds,
            "statistic": "median of the rounds (each run: median over its jobs)",
            "modes": medians, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = run_with_logs_aside(main_async(args))
    keys = ["rate", "claims_per_msg", "jobs_per_txn", "on_loop_share",
            *(f"{kind}_{part}_us" for kind in KINDS.values() for part in PARTS)]
    rows = [[mode, *(values[key] for key in keys)] for mode, values in result["modes"].items()]
    emit("sqlite_hops", result, ["mode", *keys], rows)


if __name__ == "__main__":
    main()
