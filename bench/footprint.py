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
driver with the publish API on (HTTP and gRPC; not Dapr mode).

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

from bench.brokers import Broker, LocalBroker, open_broker, sqs_broker
from bench.common import (
    AppProcess,
    CliSidecar,
    emit,
    free_port,
    log,
    median,
    proc_rss_mb,
    raw_config,
    rounded,
    temp_dir,
)

DRIVERS = ("local", "local+publish_api", "sqs", "gcp_pubsub", "azure_servicebus", "redis",
           "rabbitmq")
DEFAULT_MESSAGES = {"local": 5000, "local+publish_api": 5000, "sqs": 300, "gcp_pubsub": 1000,
                    "azure_servicebus": 500, "redis": 2000, "rabbitmq": 1000}
QUEUES = ["high", "normal", "low"]

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


def open_for(name: str, directory: Path) -> Broker:
    if name.startswith("local"):
        return LocalBroker(directory)
    return sqs_broker(directory) if name == "sqs" else open_broker(name, directory)


def sidecar_config(name: str, directory: Path, broker: Broker, app_url: str,
                   concurrency: int) -> dict[str, Any]:
    config = raw_config(directory, broker.driver_config(), QUEUES, app_url=app_url,
                        concurrency=concurrency)
    if name == "local+publish_api":
        config["publish_api"] = {"host": "127.0.0.1", "http_port": free_port(),
                                 "grpc_port": free_port()}
    return config


async def measure(name: str, directory: Path, app: AppProcess, args: argparse.Namespace,
                  ) -> dict[str, Any]:
    broker = open_for(name, directory)
    try:
        await broker.create(QUEUES)
        starts, cpu = [], []
        for i in range(args.starts):
            config = sidecar_config(name, directory, broker, app.url, args.concurrency)
            sidecar = CliSidecar(directory, config, name=f"{name}-start-{i}")
            try:
                starts.append(sidecar.wait_ready())
                cpu.append(proc_cpu_s(sidecar.pid))
            finally:
                sidecar.stop()
        config = sidecar_config(name, directory, broker, app.url, args.concurrency)
        messages = args.messages or DEFAULT_MESSAGES[name]
        sidecar = CliSidecar(directory, config, name=f"{name}-load")
        try:
            sidecar.wait_ready()
            await asyncio.sleep(2)
            idle = proc_rss_mb(sidecar.pid)
            peak = await _peak_while_delivering(sidecar, broker, messages, idle)
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
        "rss_idle_mb": rounded(idle, 1), "rss_peak_under_load_mb": rounded(peak, 1),
        "rss_after_load_mb": rounded(after, 1),
        "bare_sdk_client_rss_mb": rounded(bare, 1) if bare is not None else None,
        "above_bare_sdk_mb": rounded(idle - bare, 1) if bare is not None else None,
        "load_messages": messages, "concurrency": args.concurrency,
    }


async def _peak_while_delivering(sidecar: CliSidecar, broker: Broker, messages: int,
                                 idle: float) -> float:
    """The highest RSS while ``messages`` are published and delivered (at most 120 s)."""
    publishing = asyncio.create_task(broker.preload("low", messages))
    peak, started = idle, time.monotonic()
    try:
        while time.monotonic() - started < 120:
            peak = max(peak, proc_rss_mb(sidecar.pid))
            if sidecar.metric_sum("priority_pubsub_messages_settled_total") >= messages:
                break
            await asyncio.sleep(0.05)
    finally:
        await publishing
    return peak


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    drivers: dict[str, Any] = {}
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
    keys = ["startup_to_ready_median_s", "startup_cpu_median_s", "rss_idle_mb",
            "rss_peak_under_load_mb", "rss_after_load_mb", "bare_sdk_client_rss_mb",
            "above_bare_sdk_mb"]
    emit("footprint", result,
         ["driver", "ready s (median)", "CPU s to ready", "RSS idle MB", "RSS peak load MB",
          "RSS after MB", "bare SDK client MB", "idle - bare MB"],
         [[name, *(values.get(key) for key in keys)]
          for name, values in result["drivers"].items()])


if __name__ == "__main__":
    main()
