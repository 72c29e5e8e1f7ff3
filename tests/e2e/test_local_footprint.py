"""The local driver's ``run`` imports only what it runs (issue 28: memory per pod).

A sidecar is paid for once per pod: a module imported for a driver, API, tracer or CLI
feature that is not configured holds megabytes of every pod's resident set. The real
``priority-pubsub run`` starts, delivers and stops; a ``sitecustomize`` on its PYTHONPATH
writes ``sys.modules`` at exit: every module the run imported, however it was imported
(``-X importtime`` misses ``importlib.import_module``, which loads entry points).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.helpers import publish
from tests.support.app import RecordingApp
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = pytest.mark.local

NOT_ON_THE_LOCAL_PATH = (
    "grpc", "google", "boto3", "botocore", "azure", "aio_pika", "aiormq", "redis",
    "opentelemetry", "pyspark", "rich", "pygments", "cloudevents", "dapr", "jinja2",
    "flask",
)
"""Top-level packages of drivers, channels, tracing, the report and CLI output that a local
sidecar with its defaults does not configure."""
OWN_NOT_ON_THE_LOCAL_PATH = (
    "priority_pubsub.dapr.runtime", "priority_pubsub.dapr.plan", "priority_pubsub.dapr.kinds",
    "priority_pubsub.publish_api",
)
"""The sidecar's own modules of Dapr mode and the publish API (0.7 MB and 14 ms of CPU at
start for Dapr mode's alone, when ``run`` reported a start's notes through them)."""

_DUMP_AT_EXIT = """\
import atexit, json, sys
atexit.register(lambda: open({out!r}, "w").write(json.dumps(sorted(sys.modules))))
"""


@pytest.mark.parametrize("event_loop", [None, "uvloop"])
def test_local_run_imports_no_unconfigured_feature(tmp_path: Path, app: RecordingApp,
                                                   event_loop: str | None) -> None:
    """With the default loop uvloop is not imported; chosen, the sidecar runs on it."""
    config = local_config(tmp_path, app.url)
    if event_loop is not None:
        config["event_loop"] = event_loop
    [message_id] = publish(write_config(tmp_path, config), "high", "{}")
    hook, dump = tmp_path / "hook", tmp_path / "modules.json"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_DUMP_AT_EXIT.format(out=str(dump)))
    sidecar = SidecarProcess(tmp_path, config, env={"PYTHONPATH": str(hook)})
    try:
        sidecar.wait_ready()
        [received] = app.wait_for(1)
    finally:
        assert sidecar.stop() == 0
    assert received.event["id"] == message_id
    imported = set(json.loads(dump.read_text()))
    assert "priority_pubsub.drivers.local.driver" in imported
    top_level = {name.split(".")[0] for name in imported}
    assert sorted(top_level.intersection(NOT_ON_THE_LOCAL_PATH)) == []
    assert ("uvloop" in top_level) == (event_loop == "uvloop")
    assert sorted(imported.intersection(OWN_NOT_ON_THE_LOCAL_PATH)) == []
