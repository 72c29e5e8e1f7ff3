"""What journal.upload costs delivery: throughput with it on against off, and the
memory it adds, side by side in one run.

``priority-pubsub run`` (the local driver, one queue preloaded with ``--messages``, a no-op
app of its own in its own process, ``--concurrency``), its journal rotated at ``--rotate-mb``; with
``upload`` the closed files go to S3 (moto server, ``tests.support.object_stores``) as they
close. Each round runs both sidecars at the same time, each on its own queue file, so the
machine's other load (a shared 2-core machine) falls on both alike; run one after the other,
the same code measured 0.69-1.04 on/off from round to round at a load average of 14. A
sidecar's throughput is what it settled from the moment both were ready to the moment the
first of the two finished: one window for both. Reported: the median of the rounds' on/off ratios
(target >= 0.97), and CPU per message. RSS: each sidecar's resident set once it delivered
everything, after at least one upload with upload on (median of the rounds); the
difference is what the upload path adds (target <= 10 MB). Every upload is checked to have
landed, and no journal file is left after the clean stop.

    python -m bench.upload --messages 40000 --concurrency 16 --rotate-mb 1 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from bench.harness.brokers import LocalBroker
from bench.harness.config import raw_config
from bench.harness.output import emit, log
from bench.harness.processes import AppProcess, CliSidecar
from bench.harness.rendering import Rendering, Rows, met
from bench.harness.stats import median_of, median_ratio, rounded
from bench.harness.system import proc_cpu_s, proc_rss_mb, temp_dir

MODES = ("off", "on")
SETTLED = "priority_pubsub_messages_settled_total"
UPLOADED = "priority_pubsub_journal_uploaded_files_total"


class Run:
    """One sidecar of a round: its directory, its queue preloaded, and its upload setting."""

    def __init__(self, mode: str, directory: Path, app: AppProcess, store: Any, bucket: str,
                 args: argparse.Namespace) -> None:
        self.mode, self.directory, self.store, self.bucket = mode, directory, store, bucket
        broker = LocalBroker(directory)
        asyncio.run(broker.create(["work"]))
        asyncio.run(broker.preload("work", args.messages))
        config = raw_config(directory, broker.driver_config(), ["work"], app_url=app.url,
                            concurrency=args.concurrency)
        config["journal"] = {"path": str(directory / "journal"), "rotate_mb": args.rotate_mb}
        self.prefix = f"bench/{directory.name}"
        if mode == "on":
            config["journal"]["upload"] = {"url": store.url(bucket, self.prefix)}
        self.config = config
        self.sidecar: CliSidecar | None = None

    def start(self) -> None:
        self.sidecar = CliSidecar(self.directory, self.config, name=self.mode,
                                  env=self.store.env)

    def wait_ready(self) -> None:
        assert self.sidecar is not None
        self.sidecar.wait_ready(60)

    def settled(self) -> float:
        assert self.sidecar is not None
        return self.sidecar.metric_sum(SETTLED)

    def finish(self, messages: int) -> dict[str, Any]:
        """Wait for the last settle (and, uploading, one upload), read RSS and CPU, stop,
        check what landed."""
        sidecar = self.sidecar
        assert sidecar is not None
        try:
            while sidecar.metric_sum(SETTLED) < messages:
                time.sleep(0.02)
            cpu_s = proc_cpu_s(sidecar.pid)
            if self.mode == "on":
                deadline = time.monotonic() + 60
                while sidecar.metric_sum(UPLOADED) < 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert sidecar.metric_sum(UPLOADED) >= 1, "no upload in 60 s"
            rss_mb = proc_rss_mb(sidecar.pid)
        finally:
            sidecar.stop()
        landed = 0
        if self.mode == "on":
            landed = len(self.store.objects(self.bucket, self.prefix + "/"))
            left = list((self.directory / "journal").glob("journal-*"))
            assert not left, f"files left after a clean stop: {left}"
        return {"mode": self.mode, "cpu_s": cpu_s, "rss_mb": rss_mb, "objects": landed}


def one_round(index: int, base: Path, apps: dict[str, AppProcess], store: Any, bucket: str,
              args: argparse.Namespace) -> list[dict[str, Any]]:
    """Both sidecars at once, each on its own queue file: the machine's other load falls on
    both alike. Each one's rate is what it settled from the moment both were ready to the
    moment the first of them finished: one window, the same for both (neither starting up
    nor running alone in it)."""
    order = MODES if index % 2 == 0 else tuple(reversed(MODES))
    runs = {mode: Run(mode, base / f"r{index}-{mode}", apps[mode], store, bucket, args)
            for mode in order}
    for run in runs.values():
        run.start()
    for run in runs.values():
        run.wait_ready()
    started = time.perf_counter()
    before = {mode: run.settled() for mode, run in runs.items()}
    while all(run.settled() < args.messages for run in runs.values()):
        time.sleep(0.02)
    window_s = time.perf_counter() - started
    counts = {mode: run.settled() - before[mode] for mode, run in runs.items()}
    results = []
    for mode, run in runs.items():
        result = {"round": index, **run.finish(args.messages),
                  "msgs_per_s": counts[mode] / window_s}
        log(f"round {index} {mode}: {result['msgs_per_s']:.0f} msg/s, "
            f"rss {result['rss_mb']:.1f} MB, {result['objects']} objects")
        results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=40000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rotate-mb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from tests.support.object_stores import running_store

    runs: list[dict[str, Any]] = []
    with (running_store("s3") as store, AppProcess() as app_off, AppProcess() as app_on,
          temp_dir("upload") as base):
        bucket = store.new_bucket()
        apps = {"off": app_off, "on": app_on}  # each its own: no app favours one of them
        for round_index in range(args.rounds):
            for mode in MODES:
                (base / f"r{round_index}-{mode}").mkdir()
            runs += one_round(round_index, base, apps, store, bucket, args)

    def of(mode: str, key: str) -> list[float]:
        return [r[key] for r in runs if r["mode"] == mode]

    on_rate, off_rate = median_of(of("on", "msgs_per_s")), median_of(of("off", "msgs_per_s"))
    ratio = median_ratio(of("on", "msgs_per_s"), of("off", "msgs_per_s"))
    rss_on, rss_off = median_of(of("on", "rss_mb")), median_of(of("off", "rss_mb"))
    added = None if rss_on is None or rss_off is None else rss_on - rss_off
    cpu_per_msg = {mode: median_of([c / args.messages * 1e6 for c in of(mode, "cpu_s")])
                   for mode in MODES}
    result = {
        "messages": args.messages, "concurrency": args.concurrency,
        "rotate_mb": args.rotate_mb, "rounds": args.rounds, "runs": runs,
        "msgs_per_s": {"off": rounded(off_rate), "on": rounded(on_rate)},
        "on_over_off": rounded(ratio, 3), "target_ratio": 0.97,
        "rss_mb": {"off": rounded(rss_off), "on": rounded(rss_on)},
        "rss_added_mb": rounded(added), "target_rss_added_mb": 10.0,
        "cpu_us_per_msg": {m: rounded(v) for m, v in cpu_per_msg.items()},
    }
    headers = ["mode", "msg/s (median)", "on/off", "RSS MB (median)", "CPU µs/msg"]
    rows = [[m, rounded(median_of(of(m, "msgs_per_s"))), rounded(ratio, 3) if m == "on" else "",
             rounded(median_of(of(m, "rss_mb"))), rounded(cpu_per_msg[m])] for m in MODES]
    emit("upload", result, headers, rows)


def targets(result: dict[str, Any]) -> Rows:
    """journal.upload never in the way of delivery, and light."""
    n = result["rounds"]
    return [
        [f"journal.upload on/off throughput, local, c={result['concurrency']}, rotate_mb "
         f"{result['rotate_mb']:g} (median of {n} rounds' ratios) >= 0.97",
         result["on_over_off"], met(result["on_over_off"], 0.97)],
        ["RSS added by the upload path after at least one upload <= 10 MB (medians)",
         result["rss_added_mb"], met(10.0, result["rss_added_mb"])],
    ]


RENDERING = Rendering(targets=targets)


if __name__ == "__main__":
    main()
