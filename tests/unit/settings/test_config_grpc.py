"""Config for the gRPC app channel and the publish API: one-line errors, daprd's flags."""

from __future__ import annotations

import pytest

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.flags import DaprdFlags
from priority_pubsub.settings.config import validate_config

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
    with pytest.raises(ConfigError, match="only http, https and grpc"):
        DaprdFlags(app_port=1, app_protocol="grpcs").apply({})


def test_daprd_port_flags_turn_the_publish_api_on_as_daprd_serves_it() -> None:
    raw: dict[str, object] = {"queues": QUEUES}
    assert DaprdFlags(dapr_http_port=3600, max_body_size="1Ki").apply(raw) == []
    api = validate_config(raw).publish_api
    assert api is not None
    assert (api.http_port, api.grpc_port, api.max_body_bytes) == (3600, 50001, 1024)
    raw = {"queues": QUEUES, "publish_api": {"http_port": 1, "api_token": "t"}}
    DaprdFlags(dapr_grpc_port=50009, max_body_size="4M").apply(raw)  # flags win, rest kept
    api = validate_config(raw).publish_api
    assert api is not None
    assert (api.http_port, api.grpc_port, api.max_body_bytes) == (1, 50009, 4_000_000)
    assert api.api_token.get_secret_value() == "t"


def test_max_body_size_alone_is_read_not_honoured_and_bad_sizes_are_named() -> None:
    raw: dict[str, object] = {"queues": QUEUES}
    warnings = DaprdFlags(max_body_size="4Mi").apply(raw)
    assert "publish_api" not in raw
    assert warnings
    assert "--max-body-size is read but not honoured" in warnings[0]
    for bad in ("4MB", "-1", "lots", "0"):
        with pytest.raises(ConfigError, match=f"--max-body-size {bad}: "):
            DaprdFlags(dapr_http_port=1, max_body_size=bad).apply({})


@pytest.mark.parametrize(("text", "size"), [
    ("4Mi", 4 * 2**20), ("512Ki", 512 * 1024), ("4M", 4_000_000), ("4194304", 4194304),
    ("1.5Ki", 1536), ("1Gi", 2**30), ("2k", 2000),
])
def test_max_body_size_units_are_kubernetes_quantities(text: str, size: int) -> None:
    from priority_pubsub.dapr.flags import parse_quantity

    assert parse_quantity("--max-body-size", text) == size
