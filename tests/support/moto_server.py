"""moto in server mode (``moto[server]``) as a subprocess on 127.0.0.1 and a free port.

The SQS tests talk to it over real HTTP through boto3's ``endpoint_url`` — never moto's
in-process ``mock_aws`` — so the driver's threads, sockets and long polls are the real ones.
``moto_server`` is the session fixture; a missing moto skips the tests locally (with the
reason) and fails them when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import answering_process
from tests.support.servers import free_port, skip_or_fail

REGION = "us-east-1"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}
"""Fake credentials for the standard AWS chain: moto accepts any, and none are real."""


@dataclass(frozen=True)
class MotoServer:
    endpoint_url: str
    region: str = REGION
    pid: int = 0


class MotoUnavailable(RuntimeError):
    """moto cannot be started here; the message says why."""


def _ready(endpoint_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint_url}/moto-api/", timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def running_moto_server(timeout_s: float = 30, port: int | None = None) -> Iterator[MotoServer]:
    """Start moto's server (``tests.support.moto_atomic_receive``: receives made atomic, see
    there), wait until it answers, stop it afterwards. A test
    that starts it late (or restarts it) passes the ``port`` its clients already use."""
    if importlib.util.find_spec("moto.server") is None:
        raise MotoUnavailable("moto[server] is not installed (pip install 'moto[server]')")
    port = port or free_port()
    endpoint_url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tests.support.moto_atomic_receive", "-H", "127.0.0.1",
               "-p", str(port)]
    with answering_process(f"moto_server on {endpoint_url}", command,
                           lambda: _ready(endpoint_url), timeout_s=timeout_s,
                           unavailable=MotoUnavailable, env={**os.environ, **CREDENTIALS},
                           cwd=Path(__file__).resolve().parents[2]) as process:
        yield MotoServer(endpoint_url, REGION, process.pid)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One moto server for the whole session, with fake credentials in the environment."""
    try:
        with pytest.MonkeyPatch.context() as patch, running_moto_server() as server:
            for name, value in CREDENTIALS.items():
                patch.setenv(name, value)
            for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
                patch.delenv(name, raising=False)
            patch.setenv("AWS_CONFIG_FILE", str(Path(os.devnull)))
            patch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(Path(os.devnull)))
            yield server
    except MotoUnavailable as exc:
        skip_or_fail(f"moto server unavailable: {exc}")
