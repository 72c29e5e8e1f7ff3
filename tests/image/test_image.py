"""The sidecar image built with buildah and run with podman, for real: part of ``make test``
(one more file on a worker rather than a serial step after the suite), alone ``make image-test``.

Built from the Dockerfile as users build it; where no registry is reachable the base is the
same Debian release made from Debian packages (``scripts/image/build.sh``, docs/deploy.md "Building
the image"). The container runs on the host network with the image's own config, a data
directory mounted at /data and an app on loopback.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from tests.e2e.helpers import queue_rows
from tests.support.app import RecordingApp, Reply
from tests.support.dapr_resources import dapr_event, subscription_v2, write_resources
from tests.support.redis_server import unique
from tests.support.servers import free_port, skip_or_fail

# The build alone may take minutes (a first run debootstraps the base).
pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TAG = "localhost/priority-pubsub:ci"
REPORT = ROOT / "build" / "image-report.json"
GRACE_S = 5
UID = 10001
MAX_SIZE_MB = 450  # sqs, gcp, azure and tracing SDKs on a slim Python: ~300 MB


def _run(
    *args: str, timeout_s: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def image() -> dict[str, str]:
    if os.geteuid() != 0:
        skip_or_fail("building and running images here needs root (buildah, podman)")
    for tool in ("buildah", "podman", "runc"):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} missing (apt-get install buildah podman runc debootstrap; "
                         "scripts/ci-prerequisites.sh does it as root)")
    result = _run(str(ROOT / "scripts" / "image" / "build.sh"), TAG, timeout_s=840)
    built = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert built["IMAGE"] == TAG
    return built


def _podman(
    *args: str, timeout_s: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    # runc + cgroupfs: crun refuses this host's hybrid cgroups and there is no systemd. The
    # limits are set at or below the host's: raising them needs CAP_SYS_RESOURCE.
    return _run("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", *args,
                timeout_s=timeout_s, check=check)


def _image_config(tag: str) -> dict[str, Any]:
    inspected = json.loads(_run("buildah", "inspect", "--type", "image", tag).stdout)
    config: dict[str, Any] = inspected["Docker"]["config"]
    return config


@dataclass
class Container:
    name: str
    port: int
    data: Path

    def exec(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _podman("exec", self.name, *args)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


_RUN_ARGS = ("--network", "host", "--read-only", "--tmpfs", "/tmp")
"""How every test runs the image: the host's network (apps and brokers on loopback), the root
filesystem read-only as Kubernetes runs it, /tmp a tmpfs."""


@pytest.fixture
def container(image: dict[str, str], tmp_path: Path, app: RecordingApp) -> Iterator[Container]:
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, UID, UID)
    port = free_port()
    name = f"pp-image-{port}"
    _podman(
        "run", "-d", "--name", name, *_RUN_ARGS, *_ulimits(),
        "-v", f"{data}:/data",
        "-e", f"PRIORITY_PUBSUB_SERVER__PORT={port}",
        "-e", f"PRIORITY_PUBSUB_APP__URL={app.url}/tasks",
        "-e", f"PRIORITY_PUBSUB_SHUTDOWN__GRACE_S={GRACE_S}",
        TAG,
    )
    running = Container(name, port, data)
    try:
        _wait_ready(running)
        yield running
    finally:
        logs = _podman("logs", name, check=False)
        _podman("rm", "-f", "-t", "0", name, check=False)
        print(logs.stdout[-3000:], logs.stderr[-3000:])


def _ulimits() -> list[str]:
    """Open files and processes limited at or below the host's hard limits (runc cannot raise
    them without CAP_SYS_RESOURCE)."""
    hard = [resource.getrlimit(kind)[1] for kind in (resource.RLIMIT_NOFILE,
                                                      resource.RLIMIT_NPROC)]
    limit = min(4096, *(h for h in hard if h != resource.RLIM_INFINITY))
    return ["--ulimit", f"nofile={limit}:{limit}", "--ulimit", f"nproc={limit}:{limit}"]


def _wait_ready(container: Container, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(container.url("/readyz"), timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    logs = _podman("logs", container.name, check=False)
    raise AssertionError(f"container not ready in {timeout_s}s:\n{logs.stdout}{logs.stderr}")


@pytest.fixture
def app() -> Iterator[RecordingApp]:
    with RecordingApp() as running:
        yield running


def test_image_metadata_non_root_healthcheck_and_size(image: dict[str, str]) -> None:
    config = _image_config(TAG)
    assert config["User"].split(":")[0] == str(UID)
    assert config["Entrypoint"] == ["priority-pubsub", "run"]
    health = config["Healthcheck"]["Test"]  # kept: built with --format docker
    assert health[0] == "CMD"
    assert health[1] == "python"
    assert "/healthz" in health[-1]
    size_mb = int(_run("podman", "image", "inspect", "--format", "{{.Size}}", TAG)
                  .stdout.strip()) / 1e6
    layers = _layers(TAG)
    packages = _largest_packages(TAG)
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps({"image": TAG, "base": image["BASE"],
                                  "size_mb": round(size_mb, 1), "layers": layers,
                                  "largest_packages_mb": packages}, indent=1) + "\n")
    print(f"image {TAG} on {image['BASE']}: {size_mb:.0f} MB")
    assert size_mb < MAX_SIZE_MB
    # built and kept out: the installer, and what only the report job (spark) would run
    assert not {"pip", "setuptools", "pyspark", "pyarrow", "dynaconf"} & set(packages)


def _layers(tag: str) -> list[dict[str, Any]]:
    """Each layer's size and the step that made it, base first (the image report)."""
    lines = _run("podman", "history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}",
                 tag).stdout.splitlines()
    layers = []
    for line in reversed(lines):
        size, _, created_by = line.partition("\t")
        layers.append({"size_mb": _megabytes(size), "created_by": created_by[:160]})
    return layers


_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def _megabytes(shown: str) -> float:
    """podman's sizes as it prints them ("128 MB", "0 B", "1.5 kB": decimal units, always
    human-readable in this version) in MB."""
    number, _, unit = shown.strip().partition(" ")
    return round(float(number) * _UNITS[unit] / 1e6, 1)


_SITE_PACKAGES_SIZES = """\
import json, os, sysconfig
site = sysconfig.get_paths()["purelib"]
sizes = {}
for entry in os.listdir(site):
    name = entry.split("-")[0].split(".")[0].lower()
    path = os.path.join(site, entry)
    total = os.path.getsize(path) if os.path.isfile(path) else sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    sizes[name] = sizes.get(name, 0) + total
print(json.dumps(sizes))
"""


def _largest_packages(tag: str, count: int = 25) -> dict[str, float]:
    """The image's site-packages by top-level name, largest first (MB, on disk)."""
    found = json.loads(_podman("run", "--rm", *_ulimits(), "--entrypoint", "python", tag,
                               "-c", _SITE_PACKAGES_SIZES).stdout)
    ranked = sorted(found.items(), key=lambda item: -item[1])[:count]
    return {name: round(size / 1e6, 1) for name, size in ranked}


def test_container_runs_as_non_root_and_answers_health_probes(container: Container) -> None:
    assert container.exec("id", "-u").stdout.strip() == str(UID)
    assert httpx.get(container.url("/healthz"), timeout=5).status_code == 200
    assert httpx.get(container.url("/readyz"), timeout=5).status_code == 200
    # The image's HEALTHCHECK command itself, run by podman inside the container.
    assert _podman("healthcheck", "run", container.name, check=False).returncode == 0
    # ... and the same command fails when nothing answers on the port it asks.
    command = _image_config(TAG)["Healthcheck"]["Test"][1:]
    wrong = _podman("exec", "-e", f"PRIORITY_PUBSUB_SERVER__PORT={free_port()}",
                    container.name, *command, check=False)
    assert wrong.returncode != 0


def test_a_message_reaches_the_app_and_sigterm_exits_0_within_the_grace(
    container: Container, app: RecordingApp
) -> None:
    app.behaviour = lambda r: Reply(200) if r.event["data"]["n"] == 1 else Reply(delay_s=60)
    container.exec("priority-pubsub", "publish", "tasks-high", "--data", '{"n": 1}')
    first = app.wait_for(1, timeout_s=20)[0]
    assert first.path == "/tasks"
    assert first.event["queue"] == "tasks-high"
    assert (container.data / "queues.db").is_file()  # the local driver's file is on /data
    container.exec("priority-pubsub", "publish", "tasks-low", "--data", '{"n": 2}')
    app.wait_for(2, timeout_s=20)  # in flight now: the app holds it for 60 s
    started = time.monotonic()
    _podman("kill", "--signal", "TERM", container.name)
    code = _podman("wait", container.name, timeout_s=GRACE_S + 30).stdout.strip()
    elapsed = time.monotonic() - started
    assert code == "0"
    assert GRACE_S - 1 <= elapsed <= GRACE_S + 10, elapsed  # drained for the grace, no more
    returned = queue_rows(container.data / "queues.db", "tasks-low")
    assert [(r["leased"], r["attempts"]) for r in returned] == [(False, 1)]  # back, not lost


def test_dapr_mode_delivers_from_a_redis_component(
    image: dict[str, str], tmp_path: Path, app: RecordingApp, redis_url: str
) -> None:
    """Dapr mode in the image (the ``dapr`` extra): daprd's command line after the entrypoint,
    a resources directory mounted read-only (a ``pubsub.redis`` Component and a Subscription),
    a Dapr-mode config file (no queues) named by ``PRIORITY_PUBSUB_CONFIG``, as the chart
    mounts them. An event written as daprd's ``pubsub.redis`` writes it reaches the
    subscription's route, unchanged."""
    topic, app_id = unique("image-orders"), unique("image-app")
    host_port = redis_url.removeprefix("redis://").split("/")[0]
    resources = write_resources(
        tmp_path / "resources",
        {"apiVersion": "dapr.io/v1alpha1", "kind": "Component", "metadata": {"name": "orderpubsub"},
         "spec": {"type": "pubsub.redis", "version": "v1",
                  "metadata": [{"name": "redisHost", "value": host_port}]}},
        subscription_v2("orders", "orderpubsub", topic, default="/orders"),
    )
    settings = tmp_path / "settings"
    settings.mkdir()
    port = free_port()
    (settings / "config.yaml").write_text(yaml.safe_dump({
        "dapr": {"priorities": [topic]}, "server": {"host": "127.0.0.1", "port": port},
        "shutdown": {"grace_s": GRACE_S}}))
    for path in (resources, settings, *resources.iterdir(), *settings.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)  # readable by the image's user
    name = f"pp-image-dapr-{port}"
    _podman(
        "run", "-d", "--name", name, *_RUN_ARGS, *_ulimits(),
        "-v", f"{resources}:/etc/dapr/resources:ro", "-v", f"{settings}:/etc/pp-dapr:ro",
        "-e", "PRIORITY_PUBSUB_CONFIG=/etc/pp-dapr/config.yaml",
        TAG, "--app-id", app_id, "--resources-path", "/etc/dapr/resources",
        "--app-port", str(app.port), "--disable-init-endpoints", "subscribe",
    )
    raw = redis.Redis.from_url(redis_url)
    try:
        _wait_ready(Container(name, port, tmp_path))
        body = dapr_event({"orderId": 7}, topic=topic, pubsub="orderpubsub")
        raw.xadd(topic, {"data": body})
        (delivered,) = app.wait_for(1, timeout_s=30)
        assert delivered.path == "/orders"
        assert delivered.event == json.loads(body)  # daprd's delivery: the event unchanged
        assert delivered.headers["pubsubname"] == "orderpubsub"
        _podman("kill", "--signal", "TERM", name)
        assert _podman("wait", name, timeout_s=GRACE_S + 30).stdout.strip() == "0"
        [group] = raw.xinfo_groups(topic)  # daprd's layout: the group is the app id
        assert (group["name"].decode(), group["pending"]) == (app_id, 0)
    finally:
        logs = _podman("logs", name, check=False)
        _podman("rm", "-f", "-t", "0", name, check=False)
        print(logs.stdout[-3000:], logs.stderr[-3000:])
        raw.delete(topic)
        raw.close()
