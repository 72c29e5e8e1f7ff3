"""Config for the gRPC app channel and the publish API: one-line errors, daprd's flags."""

from __future__ import annotations

import pytest

from priority_pubsub.config import validate_config
from priority_pubsub.dapr.flags import DaprdFlags
from priority_pubsub.errors import ConfigError

QUEUES = [{"name": "a"}]


@pytest.mark.parametrize(("url", "problem"), [
    ("grpc://127.0.0.1", "must name host and port"),
    ("grpc://127.0.0.1:50051/tasks", "a grpc:// URL is host:port only"),
    ("grpc://127.0.0.1:99999", "the port must be a number"),
])
def test_bad_grpc_urls_are_one_line_errors(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"app.url: {problem}"):
        validate_config({"queues": QUEUES, "app": {"url": url}})


def test_grpc_url_and_publish_api_defaults() -> None:
    settings = validate_config({"queues": QUEUES, "app": {"url": "grpc://[::1]:50051"},
                                "publish_api": {}})
    assert settings.app.is_grpc
    assert settings.app.pubsub_name == "pubsub"
    api = settings.publish_api
    assert api is not None
    assert (api.host, api.http_port, api.grpc_port, api.max_body_bytes) == (
        "127.0.0.1", 3500, 50001, 4 * 1024 * 1024)
    assert validate_config({"queues": QUEUES}).publish_api is None  # off by default


def test_app_protocol_grpc_makes_a_grpc_app_url() -> None:
    raw: dict[str, object] = {}
    DaprdFlags(app_port=13551, app_protocol="grpc").apply(raw)
    assert raw["app"] == {"url": "grpc://127.0.0.1:13551"}
    with pytest.raises(ConfigError, match="only http and grpc"):
        DaprdFlags(app_port=1, app_protocol="https").apply({})
