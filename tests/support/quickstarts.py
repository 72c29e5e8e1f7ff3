"""Dapr's pub/sub quickstart (``tests/thirdparty/quickstarts``, see the README there): its
pinned apps and the steps the end-to-end tests share: a checkout publisher run through the
sidecar's publish API, and the order-processor's log of the orders it received."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from tests.support.app_venv import AppProcess, running_app
from tests.support.servers import free_port
from tests.support.sidecar import start_sidecar
from tests.support.waiting import wait_until

QUICKSTARTS = Path(__file__).resolve().parents[1] / "thirdparty" / "quickstarts"
ORDERS = 9  # each checkout publishes orderId 1..9, a second apart
CHECKOUTS = ["http-checkout", "sdk-checkout"]
FLASK = ["{python}", "app.py"]
UVICORN = ["{python}", "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", "{port}"]


def publish_api(**overrides: Any) -> dict[str, Any]:
    """A ``publish_api:`` config section on free ports."""
    return {"host": "127.0.0.1", "http_port": free_port(), "grpc_port": free_port(),
            **overrides}


def run_checkout(tmp_path: Path, checkout: str, api: dict[str, Any]) -> str:
    """Run the ``checkout`` publisher to its end against the publish API; its output."""
    env = {"DAPR_HTTP_PORT": str(api["http_port"]), "DAPR_GRPC_PORT": str(api["grpc_port"])}
    with running_app(QUICKSTARTS / checkout, ["{python}", "app.py"], tmp_path / "checkout.log",
                     env=env, wait="none") as publisher:
        assert publisher.wait_exit(60) == 0, publisher.output()
        return publisher.output()


def orders_received(app: AppProcess, count: int, timeout_s: float = 30) -> list[int]:
    """The quickstart order-processors' "Subscriber received : N" lines, once ``count`` have
    arrived and a second more has passed (a duplicate would show up in it)."""
    pattern = r"Subscriber received : (\d+)"
    wait_until(lambda: len(re.findall(pattern, app.output())) >= count, timeout_s)
    time.sleep(1)
    return [int(n) for n in re.findall(pattern, app.output())]


def checkout_to_subscriber(tmp_path: Path, config: dict[str, Any], checkout: str,
                           api: dict[str, Any], app: AppProcess,
                           ready_timeout_s: float = 20) -> tuple[str, list[int]]:
    """The sidecar on ``config`` (its publish API ``api``, its app the order-processor
    ``app``) while ``checkout`` publishes every order; the checkout's output and the orders
    the app received. The sidecar must stop cleanly (exit 0)."""
    sidecar = start_sidecar(tmp_path, config, ready_timeout_s=ready_timeout_s)
    try:
        output = run_checkout(tmp_path, checkout, api)
        received = orders_received(app, ORDERS)
    finally:
        assert sidecar.stop() == 0
    return output, received
