"""The monitor's guards in the order a request meets them, on an in-process aiohttp server.

Reads: no ``read_token``, open; with one, it or the admin token (Bearer or a Basic password),
else 401 with a Basic challenge. Writes: no ``admin_token``, 405 whatever is presented; a
method but POST, 405; then a missing or wrong admin token, 401 (the read token is not enough,
nor the admin token as a Basic password); then a cross-site request, 403 even with the right
token; only then the action. The action here is a recorder, so a refusal that let the action
run would show."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from priority_pubsub.monitor.admin import AdminActions
from priority_pubsub.monitor.routes import Monitor
from priority_pubsub.monitor.state import MonitorSources
from priority_pubsub.settings.config import MonitorConfig

READ = "read-secret"
ADMIN = "admin-secret"
SCRIPT = "/monitor/static/monitor.js"
DRAIN = "/api/v1/drain"


class RecordingActions:
    """Stands in for AdminActions: records each drain it is asked for."""

    def __init__(self) -> None:
        self.drains: list[str] = []

    def drain(self, client: str) -> dict[str, Any]:
        self.drains.append(client)
        return {"action": "drain", "client": client}


Client = TestClient[web.Request, web.Application]
Start = Callable[..., Awaitable[tuple[Client, RecordingActions]]]


@pytest.fixture
async def monitor() -> AsyncIterator[Start]:
    clients: list[Client] = []

    async def start(read_token: str | None = None,
                    admin_token: str | None = None) -> tuple[Client, RecordingActions]:
        config = MonitorConfig(read_token=SecretStr(read_token) if read_token else None,
                               admin_token=SecretStr(admin_token) if admin_token else None)
        actions = RecordingActions()
        app = web.Application()
        Monitor(config, cast(MonitorSources, None), cast(AdminActions, actions)).add_routes(app)
        client: Client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client, actions

    yield start
    for client in clients:
        await client.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(password: str, user: str = "anyone") -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def test_reads_are_open_without_a_read_token(monitor: Start) -> None:
    client, _ = await monitor(admin_token=ADMIN)
    assert (await client.get(SCRIPT)).status == 200


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401),
    (bearer("wrong"), 401),
    (basic("wrong"), 401),
    ({"Authorization": "Basic not-base64!"}, 401),
    ({"Authorization": f"Token {READ}"}, 401),
    (bearer(READ), 200),
    (basic(READ), 200),
    (bearer(ADMIN), 200),
    (basic(ADMIN), 200),
])
async def test_with_a_read_token_a_read_needs_it_or_the_admin_token(
    monitor: Start, headers: dict[str, str], status: int,
) -> None:
    client, _ = await monitor(read_token=READ, admin_token=ADMIN)
    answer = await client.get(SCRIPT, headers=headers)
    assert answer.status == status
    if status == 401:
        assert answer.headers["WWW-Authenticate"] == 'Basic realm="priority-pubsub monitor"'
        assert READ not in await answer.text()


@pytest.mark.parametrize("headers", [{}, bearer(ADMIN), bearer(READ)])
async def test_without_an_admin_token_every_write_is_405_whatever_it_presents(
    monitor: Start, headers: dict[str, str],
) -> None:
    client, actions = await monitor(read_token=READ)
    answer = await client.post(DRAIN, headers=headers)
    assert answer.status == 405
    assert "read-only monitor" in (await answer.json())["error"]
    assert "Allow" not in answer.headers
    assert actions.drains == []


async def test_a_write_by_another_method_is_405_before_its_token_is_looked_at(
    monitor: Start,
) -> None:
    client, actions = await monitor(admin_token=ADMIN)
    for method in ("GET", "PUT", "DELETE"):
        answer = await client.request(method, DRAIN)
        assert answer.status == 405, method
        assert answer.headers["Allow"] == "POST"
    assert actions.drains == []


@pytest.mark.parametrize("headers", [
    {}, bearer("wrong"), bearer(READ), basic(ADMIN), bearer(ADMIN + "x"),
])
async def test_a_write_without_the_admin_token_as_bearer_is_401(
    monitor: Start, headers: dict[str, str],
) -> None:
    client, actions = await monitor(read_token=READ, admin_token=ADMIN)
    answer = await client.post(DRAIN, headers=headers)
    assert answer.status == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert ADMIN not in await answer.text()
    assert actions.drains == []


async def test_a_cross_site_write_without_the_token_is_401_not_403(monitor: Start) -> None:
    client, actions = await monitor(admin_token=ADMIN)
    answer = await client.post(DRAIN, headers={"Origin": "https://evil.example",
                                               "Sec-Fetch-Site": "cross-site"})
    assert answer.status == 401
    assert actions.drains == []


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Origin": "https://evil.example"},
])
async def test_a_cross_site_write_with_the_right_token_is_403(
    monitor: Start, headers: dict[str, str],
) -> None:
    client, actions = await monitor(admin_token=ADMIN)
    answer = await client.post(DRAIN, headers={**bearer(ADMIN), **headers})
    assert answer.status == 403
    assert actions.drains == []


async def test_a_same_origin_write_with_the_right_token_acts(monitor: Start) -> None:
    client, actions = await monitor(read_token=READ, admin_token=ADMIN)
    origin = str(client.make_url("/")).rstrip("/")
    answer = await client.post(DRAIN, headers={**bearer(ADMIN), "Origin": origin,
                                               "Sec-Fetch-Site": "same-origin"})
    assert answer.status == 200
    assert (await answer.json())["action"] == "drain"
    assert actions.drains == ["127.0.0.1"]


async def test_a_write_from_a_tool_without_browser_headers_acts(monitor: Start) -> None:
    client, actions = await monitor(admin_token=ADMIN)
    assert (await client.post(DRAIN, headers=bearer(ADMIN))).status == 200
    assert len(actions.drains) == 1
