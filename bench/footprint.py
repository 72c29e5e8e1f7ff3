"""Footprint of the CLI sidecar per driver: start-up time to ready, RSS idle, under load, after.

For each driver (its server started here, as bench.throughput does), ``priority-pubsub run``
is started ``--starts`` times: from spawning it to the first 200 on ``/readyz`` (Python start,
imports, config, driver, server, the app reached), wall time and the CPU time the process
spent to get there (steadier than wall time on a shared machine), medians. Then one sidecar
runs: RSS from /proc idle once ready, the peak while it delivers ``--messages`` (preloaded on
its lowest queue meanwhile, default per driver) to the no-op app at ``--concurrency``, and
after. Beside each cloud driver, the RSS of a bare Python process that only imports the SDK
and builds its client: what any process talking to that broker pays before doing anything
(issue 28's target: the sidecar within 35 MB above it). ``local+publish_api`` is the local
driver with the publish API on (HTTP and gRPC; native mode); ``dapr+publish_api`` is Dapr
mode with the publish API on: a ``pubsub.redis`` component on a redis-server of its own (the
component type served without a cloud), three declarative Subscriptions, daprd's flags'
keys under ``dapr:``.

Where the time to ready goes: for each start, the main thread's time on a CPU and waiting
for one (the run queue: other processes of a busy machine) from ``/proc/PID/schedstat``;
what remains of the wall time is time blocked (sleeping, reading files, waiting on a thread
or a socket, the 10 ms of this benchmark's polling). The package's bytecode is compiled
before the starts, as the image does (``compileall`` in the Dockerfile): where
``PYTHONDONTWRITEBYTECODE`` is set (this workplace sets it) every start would otherwise
compile the sidecar's own ~90 modules from source again.

    python -m bench.footprint --starts 3 --driver local --driver redis
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import uvloop
import yaml

from bench.harness.brokers import Broker, LocalBroker, open_broker, sqs_broker
from bench.harness.config import raw_config
from bench.harness.output import emit, log
from bench.harness.processes import AppProcess, CliSidecar
from bench.harness.rendering import Rendering, Rows, format_md, hand_measured, met
from bench.harness.stats import median, rounded
from bench.harness.system import proc_rss_mb, temp_dir
from tests.support.ports import free_port

DRIVERS = ("local", "local+publish_api", "dapr+publish_api", "sqs", "gcp_pubsub",
           "azure_servicebus", "redis", "rabbitmq")
DEFAULT_MESSAGES = {"local": 5000, "local+publish_api": 5000, "dapr+publish_api": 2000,
                    "sqs": 300, "gcp_pubsub": 1000, "azure_servicebus": 500, "redis": 2000,
                    "rabbitmq": 1000}
QUEUES = ["high", "normal", "low"]
DAPR_PUBSUB = "pubsub"

_RSS = "print([int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')][0])"
BARE_CLIENTS = {
    "sqs": "import boto3\nclient = boto3.client('sqs', endpoint_url={endpoint_url!r}, "
           "region_name='us-east-1')",
    "gcp_pubsub": "from google.pubsub_v1 import SubscriberAsyncClient\n"
                  "client = SubscriberAsyncClient()",
    "azure_servicebus": "from azure.servicebus.aio import ServiceBusClient\n"
                        "client = ServiceBusClient.from_connection_string("
                        "{connection_string!r})",
    "redis": "import redis.asyncio\nclient = redis.asyncio.Redis.from_url({url!r})",
    "rabbitmq": "import asyncio, aio_pika\n"
                "async def connected():\n"
                "    client = await aio_pika.connect({url!r})\n"
                "    " + _RSS + "\n"
                "    await client.close()\n"
                "asyncio.run(connected())",
}
"""Python that imports a driver's SDK and builds its client as the driver does, given the
broker's driver config; the RSS is printed after (in kB)."""


def bare_client_rss_mb(name: str, driver_config: dict[str, Any]) -> float | None:
    """RSS of a process that only imports ``name``'s SDK and builds its client."""
    template = BARE_CLIENTS.get(name)
    if template is None:
        return None
    source = template.format(**driver_config)
    if "asyncio.run" not in source:
        source += "\n" + _RSS
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=60, env=os.environ.copy(), check=True)
    return int(done.stdout.split()[-1]) / 1024


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main_thread_sched_s(pid: int) -> tuple[float, float]:
    """Seconds the process's main thread spent on a CPU and waiting in the run queue for
    one, so far (/proc/PID/schedstat)."""
    on_cpu_ns, run_queue_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(on_cpu_ns) / 1e9, int(run_queue_ns) / 1e9


def compile_bytecode() -> None:
    """The package's bytecode written beside its sources (``__pycache__``, ignored by git),
    as the image precompiles it: what a deployed sidecar loads at start."""
    package = Path(__file__).resolve().parent.parent / "priority_pubsub"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True,
                   stdout=subprocess.DEVNULL)


def open_for(name: str, directory: Path) -> Broker:
    if name.startswith("local"):
        return LocalBroker(directory)
    if name == "dapr+publish_api":
        return open_broker("redis", directory)
    return sqs_broker(directory) if name == "sqs" else open_broker(name, directory)


def sidecar_config(name: str, directory: Path, broker: Broker, app_url: str,
                   concurrency: int) -> dict[str, Any]:
    config = raw_config(directory, broker.driver_config(), QUEUES, app_url=app_url,
                        concurrency=concurrency)
    if name.endswith("+publish_api"):
        config["publish_api"] = {"host": "127.0.0.1", "http_port": free_port(),
                                 "grpc_port": free_port()}
    if name.startswith("dapr+"):
        del config["queues"]
        config["driver"] = {}  # the component says it
        config["dapr"] = {"resources_path": str(dapr_resources(directory, broker)),
                          "app_id": "footprint", "priorities": QUEUES,
                          "programmatic_subscriptions": False}
    return config


def dapr_resources(directory: Path, broker: Broker) -> Path:
    """A ``pubsub.redis`` component on the benchmark's redis-server and a declarative
    Subscription per topic (the no-op app serves no ``/dapr/subscribe``)."""
    resources = directory / "resources"
    resources.mkdir(exist_ok=True)
    host = str(broker.driver_config()["url"]).removeprefix("redis://").split("/")[0]
    documents: list[dict[str, Any]] = [{
        "apiVersion": "dapr.io/v1alpha1", "kind": "Component",
        "metadata": {"name": DAPR_PUBSUB},
        "spec": {"type": "pubsub.redis", "version": "v1",
                 "metadata": [{"name": "redisHost", "value": host}]},
    }]
    documents += [{
        "apiVersion": "dapr.io/v2alpha1", "kind": "Subscription",
        "metadata": {"name": f"footprint-{topic}"},
        "spec": {"pubsubname": DAPR_PUBSUB, "topic": topic, "routes": {"default": "/tasks"}},
    } for topic in QUEUES]
    (resources / "pubsub.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return resources


async def measure(name: str, directory: Path, app: AppProcess, args: argparse.Namespace,
                  ) -> dict[str, Any]:
    broker = open_for(name, directory)
    try:
        await broker.create(QUEUES)
        starts, cpu, run_queue, blocked = [], [], [], []
        for i in range(args.starts):
            config = sidecar_config(name, directory, broker, app.url, args.concurrency)
            sidecar = CliSidecar(directory, config, name=f"{name}-start-{i}")
            try:
                starts.append(sidecar.wait_ready())
                cpu.append(proc_cpu_s(sidecar.pid))
                on_cpu, waiting = main_thread_sched_s(sidecar.pid)
                run_queue.append(waiting)
                blocked.append(max(0.0, starts[-1] - on_cpu - waiting))
            finally:
                sidecar.stop()
        config = sidecar_config(name, directory, broker, app.url, args.concurrency)
        messages = args.messages or DEFAULT_MESSAGES[name]
        sidecar = CliSidecar(directory, config, name=f"{name}-load")
        try:
            sidecar.wait_ready()
            await asyncio.sleep(2)
            idle = proc_rss_mb(sidecar.pid)
            peak, settled = await _peak_while_delivering(sidecar, broker, messages, idle)
            after = proc_rss_mb(sidecar.pid)
        finally:
            sidecar.stop()
        bare = bare_client_rss_mb(name, broker.driver_config())
    finally:
        await broker.close()
    return {
        "startup_to_ready_s": [rounded(s, 3) for s in starts],
        "startup_to_ready_median_s": rounded(median(starts), 3),
        "startup_cpu_median_s": rounded(median(cpu), 3),
        "startup_run_queue_median_s": rounded(median(run_queue), 3),
        "startup_blocked_median_s": rounded(median(blocked), 3),
        "rss_idle_mb": rounded(idle, 1), "rss_peak_under_load_mb": rounded(peak, 1),
        "rss_after_load_mb": rounded(after, 1),
        "bare_sdk_client_rss_mb": rounded(bare, 1) if bare is not None else None,
        "above_bare_sdk_mb": rounded(idle - bare, 1) if bare is not None else None,
        "load_messages": messages, "load_settled": settled, "concurrency": args.concurrency,
    }


async def _peak_while_delivering(sidecar: CliSidecar, broker: Broker, messages: int,
                                 idle: float) -> tuple[float, int]:
    """The highest RSS while ``messages`` are published and delivered (at most 120 s), and
    how many were settled by then."""
    publishing = asyncio.create_task(broker.preload("low", messages))
    peak, started, settled = idle, time.monotonic(), 0.0
    try:
        while time.monotonic() - started < 120:
            peak = max(peak, proc_rss_mb(sidecar.pid))
            settled = sidecar.metric_sum("priority_pubsub_messages_settled_total")
            if settled >= messages:
                break
            await asyncio.sleep(0.05)
    finally:
        await publishing
    return peak, int(settled)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    drivers: dict[str, Any] = {}
    compile_bytecode()
    with AppProcess() as app:
        for name in args.driver or DRIVERS:
            with temp_dir(f"footprint-{name}") as directory:
                try:
                    drivers[name] = await measure(name, directory, app, args)
                except RuntimeError as exc:  # a server not installed here: said, not hidden
                    log(f"{name}: skipped: {exc}")
                    drivers[name] = {"skipped": str(exc)}
    return {"drivers": drivers, "starts": args.starts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver", action="append", choices=DRIVERS)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--messages", type=int, default=0, help="0: the driver's default")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    result = uvloop.run(main_async(args))
    keys = ["startup_to_ready_median_s", "startup_cpu_median_s", "startup_run_queue_median_s",
            "startup_blocked_median_s", "rss_idle_mb", "rss_peak_under_load_mb",
            "rss_after_load_mb", "bare_sdk_client_rss_mb", "above_bare_sdk_mb"]
    emit("footprint", result,
         ["driver", "ready s (median)", "CPU s to ready", "run queue s", "blocked s",
          "RSS idle MB", "RSS peak load MB", "RSS after MB", "bare SDK client MB",
          "idle - bare MB"],
         [[name, *(values.get(key) for key in keys)]
          for name, values in result["drivers"].items()])


def section(result: dict[str, Any]) -> list[str]:
    """One row per driver, then what the resident set is made of (measured by hand, kept in
    the docs)."""
    rows = [[driver, r.get("startup_to_ready_median_s"), r.get("startup_cpu_median_s"),
             r.get("startup_run_queue_median_s", "-"), r.get("startup_blocked_median_s", "-"),
             r.get("rss_idle_mb"), r.get("rss_peak_under_load_mb"), r.get("rss_after_load_mb"),
             r.get("bare_sdk_client_rss_mb"), r.get("above_bare_sdk_mb"),
             r.get("load_messages")]
            for driver, r in result.get("drivers", {}).items() if "skipped" not in r]
    return [f"medians of {result.get('starts')} starts; RSS from /proc. Of the time to ready, "
            "the main thread's wait for a CPU (run queue: the machine's other work) and the "
            "time it was blocked (sleeping, files, sockets, threads), from "
            "/proc/PID/schedstat; the rest is its time on a CPU. `dapr+publish_api`: Dapr "
            "mode on a `pubsub.redis` component with the publish API on.", "",
            format_md(["driver", "ready s", "CPU s to ready", "run queue s", "blocked s",
                       "RSS idle MB", "RSS peak load MB", "RSS after MB",
                       "bare SDK client MB", "idle - bare MB", "messages"], rows), "",
            *hand_measured("What the resident set is made of")]


def targets(result: dict[str, Any]) -> Rows:
    """RSS idle (local, above the bare SDK client, publish API), under load, and
    time to ready."""
    rows: Rows = []
    for driver, r in result.get("drivers", {}).items():
        if "skipped" in r:
            continue
        if driver == "local":
            rows += [["RSS idle, local <= 35 MB", r["rss_idle_mb"], met(35, r["rss_idle_mb"])],
                     [f"time to ready, local <= 0.5 s{_ready_breakdown(r)}",
                      r["startup_to_ready_median_s"], met(0.5, r["startup_to_ready_median_s"])]]
        elif driver == "dapr+publish_api":
            rows.append(["RSS idle, Dapr mode with the publish API (pubsub.redis) <= 55 MB",
                         r["rss_idle_mb"], met(55, r["rss_idle_mb"])])
        elif driver == "local+publish_api":
            rows.append(["RSS idle, local with the publish API (native mode) <= 55 MB",
                         r["rss_idle_mb"], met(55, r["rss_idle_mb"])])
        elif r.get("above_bare_sdk_mb") is not None:
            rows.append([f"RSS idle, {driver} <= 35 MB above its bare SDK client "
                         f"({r['bare_sdk_client_rss_mb']} MB)", r["above_bare_sdk_mb"],
                         met(35, r["above_bare_sdk_mb"])])
        growth = round(r["rss_peak_under_load_mb"] - r["rss_idle_mb"], 1)
        rows.append([f"RSS under load within 10 MB of idle, {driver}", growth, met(10, growth)])
    return rows


def _ready_breakdown(r: dict[str, Any]) -> str:
    """Where the time to ready went, when the run measured it."""
    if r.get("startup_run_queue_median_s") is None:
        return ""
    return (f" (medians: {r['startup_cpu_median_s']} s on a CPU, "
            f"{r['startup_run_queue_median_s']} s waiting for one, "
            f"{r['startup_blocked_median_s']} s blocked)")


RENDERING = Rendering(targets=targets, section=section)


if __name__ == "__main__":
    main()
