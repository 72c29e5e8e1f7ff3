"""``priority-pubsub run`` imports only what the configured sidecar runs: on the local driver
with the default config, once ready, none of the modules kept off its path is imported and
aiohttp's TLS contexts hold no CA store (``bench.footprint`` measures what that saves). The
event loop the ``event_loop`` setting chooses. The plain command line that skips the CLI's
parser, and what it leaves to the CLI."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from priority_pubsub.commands.run import PlainRun, plain_run, run_loop
from priority_pubsub.core.errors import ConfigError

KEPT_OFF = ("typer", "click", "rich", "pygments", "colorama", "greenlet", "better_exceptions",
            "priority_pubsub.cli", "priority_pubsub.publish_api", "priority_pubsub.dapr.runtime",
            "priority_pubsub.provision", "priority_pubsub.analytics", "opentelemetry", "grpc",
            "boto3", "botocore", "google", "azure", "redis", "aio_pika", "uvloop")
"""Top-level names (and their submodules) the local run must not import."""

_HARNESS = """\
import json, os, sys, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class App(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    do_GET = do_OPTIONS = do_POST
    def log_message(self, *args): pass

threading.Thread(target=ThreadingHTTPServer(("127.0.0.1", {app_port}), App).serve_forever,
                 daemon=True).start()

def when_ready():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen("http://127.0.0.1:{ops_port}/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        time.sleep(0.1)
    connector = sys.modules.get("aiohttp.connector")
    print(json.dumps({{"modules": sorted(sys.modules),
                      "cas": connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"]}}),
          flush=True)
    os._exit(0)

threading.Thread(target=when_ready, daemon=True).start()
sys.argv = ["priority-pubsub", "run", "-c", {config!r}]
from priority_pubsub.__main__ import main
main()
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.timeout(120)
def test_the_local_run_imports_none_of_the_modules_kept_off_its_path(tmp_path: Path) -> None:
    app_port, ops_port = _free_port(), _free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        f"driver: {{type: local, path: {tmp_path / 'queues.db'}}}\n"
        "queues: [{name: high}, {name: low}]\n"
        f"app: {{url: 'http://127.0.0.1:{app_port}/tasks'}}\n"
        f"server: {{host: 127.0.0.1, port: {ops_port}}}\n"
        f"journal: {{path: {tmp_path / 'journal'}}}\n")
    harness = _HARNESS.format(app_port=app_port, ops_port=ops_port, config=str(config))
    done = subprocess.run([sys.executable, "-c", harness], capture_output=True, text=True,
                          timeout=100, cwd=tmp_path)
    assert done.stdout, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    imported = set(seen["modules"])
    assert "priority_pubsub.sidecar" in imported  # it did run
    assert sorted(name for name in imported if name.split(".")[0] in KEPT_OFF
                  or any(name.startswith(kept + ".") or name == kept for kept in KEPT_OFF)) == []
    assert seen["cas"] == 0


@pytest.mark.parametrize(("arguments", "plain"), [
    (["run"], PlainRun()),
    (["run", "-c", "c.yaml"], PlainRun(Path("c.yaml"))),
    (["run", "--config", "c.yaml", "--provision"], PlainRun(Path("c.yaml"), provision=True)),
    (["run", "--provision", "--config=c.yaml"], PlainRun(Path("c.yaml"), provision=True)),
])
def test_a_plain_run_is_read_without_the_cli(arguments: list[str], plain: PlainRun) -> None:
    assert plain_run(arguments) == plain


@pytest.mark.parametrize("arguments", [
    [], ["check"], ["run", "--help"], ["run", "--app-id", "a"], ["run", "-c"],
    ["run", "-c", "a.yaml", "-c", "b.yaml"], ["run", "-c", "--provision"],
    ["run", "--provision", "--provision"], ["run", "-c=a.yaml"], ["run", "extra"],
    ["run", "--config="],
])
def test_anything_else_is_left_to_the_cli(arguments: list[str]) -> None:
    assert plain_run(arguments) is None


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_sidecar_runs_on_asyncios_own_loop_unless_uvloop_is_chosen() -> None:
    assert run_loop(_loop_module()).startswith("asyncio")
    assert run_loop(_loop_module(), "asyncio").startswith("asyncio")
    assert run_loop(_loop_module(), "uvloop").startswith("uvloop")


def test_uvloop_chosen_but_not_installed_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an import of a missing one sees
    with pytest.raises(ConfigError, match="event_loop: uvloop is not installed"):
        run_loop(_loop_module(), "uvloop")
