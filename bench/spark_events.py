"""Where a report run's time went, from Spark's event log: per step, and its costliest stages.

    python -m bench.spark_events EVENT_LOG [--top 15]

The report describes every Spark job ``report: <step>`` (``analytics.tuning.Steps``), so a
run's event log (``spark.eventLog.enabled``; ``bench.report_incremental --event-log DIR``
keeps one per report process) can be read per step: the jobs' wall time, the tasks' run and
CPU time, garbage collection, bytes shuffled and spilled. The stages are listed costliest
first with their task count and records in and out. Prints one JSON document on stdout
(``summarize``) and a table on stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.harness.output import format_table

MB = 1e6


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of one application's log: a file, or Spark's rolling ``eventlog_v2_*``
    directory of ``events_<n>_*`` files; ``.zstd`` ones (Spark's default codec) through the
    ``zstd`` command."""
    files = [path]
    if path.is_dir():
        parts = [p for p in path.iterdir() if p.name.startswith("events_")]
        files = sorted(parts, key=lambda p: int(p.name.split("_")[1]))
    events = []
    for file in files:
        if file.suffix == ".zstd":
            text = subprocess.run(["zstd", "-dc", str(file)], capture_output=True, text=True,
                                  check=True).stdout  # fmt: skip
        else:
            text = file.read_text(encoding="utf-8")
        events += [json.loads(line) for line in text.splitlines() if line.strip()]
    return events


def summarize(events: list[dict[str, Any]], top: int = 15) -> dict[str, Any]:
    """Per step (job description): jobs, wall s, task run / CPU / GC s, shuffle and spill MB;
    and the ``top`` stages by task run time."""
    step_of_stage: dict[int, str] = {}
    job_step: dict[int, str] = {}
    job_start: dict[int, int] = {}
    job_wall: dict[str, float] = defaultdict(float)
    stage_info: dict[int, dict[str, Any]] = {}
    tasks: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in events:
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            step = str(props.get("spark.job.description") or "(no step)")
            job_step[e["Job ID"]] = step
            job_start[e["Job ID"]] = int(e.get("Submission Time") or 0)
            for stage in e.get("Stage IDs", []):
                step_of_stage.setdefault(stage, step)
        elif kind == "SparkListenerJobEnd":
            job = e["Job ID"]
            if job in job_start:
                job_wall[job_step[job]] += (int(e["Completion Time"]) - job_start[job]) / 1000
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            stage_info[info["Stage ID"]] = info
        elif kind == "SparkListenerTaskEnd":
            m = e.get("Task Metrics") or {}
            t = tasks[e["Stage ID"]]
            t["tasks"] += 1
            t["run_s"] += m.get("Executor Run Time", 0) / 1000
            t["cpu_s"] += m.get("Executor CPU Time", 0) / 1e9
            t["gc_s"] += m.get("JVM GC Time", 0) / 1000
            t["spill_mb"] += (m.get("Disk Bytes Spilled", 0)) / MB
            shuffle_w = m.get("Shuffle Write Metrics") or {}
            t["shuffle_write_mb"] += shuffle_w.get("Shuffle Bytes Written", 0) / MB
            t["records_out"] += shuffle_w.get("Shuffle Records Written", 0)
            t["records_out"] += (m.get("Output Metrics") or {}).get("Records Written", 0)
            t["records_in"] += (m.get("Input Metrics") or {}).get("Records Read", 0)
            t["records_in"] += (m.get("Shuffle Read Metrics") or {}).get(
                "Total Records Read", 0
            )
    steps: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for stage, t in tasks.items():
        s = steps[step_of_stage.get(stage, "(no step)")]
        s["stages"] += 1
        for key in ("tasks", "run_s", "cpu_s", "gc_s", "shuffle_write_mb", "spill_mb"):
            s[key] += t[key]
    for step, wall in job_wall.items():
        steps[step]["jobs_wall_s"] = wall
    stages = []
    for stage, t in sorted(tasks.items(), key=lambda kv: -kv[1]["run_s"])[:top]:
        info = stage_info.get(stage, {})
        stage_wall: float | None = None
        if info.get("Completion Time") and info.get("Submission Time"):
            stage_wall = (info["Completion Time"] - info["Submission Time"]) / 1000
        stages.append({
            "stage": stage, "step": step_of_stage.get(stage, "(no step)"),
            "name": info.get("Stage Name", "?"), "tasks": int(t["tasks"]),
            "wall_s": stage_wall, "run_s": round(t["run_s"], 2), "gc_s": round(t["gc_s"], 2),
            "records_in": int(t["records_in"]), "records_out": int(t["records_out"]),
            "shuffle_write_mb": round(t["shuffle_write_mb"], 1),
            "spill_mb": round(t["spill_mb"], 1),
        })  # fmt: skip
    rounded = {
        step: {k: round(v, 2) for k, v in values.items()}
        for step, values in sorted(steps.items(), key=lambda kv: -kv[1]["run_s"])
    }
    return {"steps": rounded, "stages": stages}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("event_log", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    result = summarize(read_events(args.event_log), args.top)
    print(json.dumps(result, indent=1))
    keys = ("jobs_wall_s", "stages", "tasks", "run_s", "cpu_s", "gc_s", "shuffle_write_mb",
            "spill_mb")  # fmt: skip
    rows = [[step, *(v.get(k) for k in keys)] for step, v in result["steps"].items()]
    print(format_table(["step", *keys], rows), file=sys.stderr)
    stage_keys = ("stage", "step", "tasks", "wall_s", "run_s", "gc_s", "records_in",
                  "records_out", "shuffle_write_mb", "spill_mb")  # fmt: skip
    print(format_table(list(stage_keys), [[s[k] for k in stage_keys] for s in result["stages"]]),
          file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
