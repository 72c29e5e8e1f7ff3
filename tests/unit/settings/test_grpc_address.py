"""``grpc://host:port`` as the target a gRPC channel dials: host and port only, IPv6 in
brackets, everything else refused in words that say what to write."""

from __future__ import annotations

import pytest

from priority_pubsub.settings.grpc_address import grpc_target


@pytest.mark.parametrize(("url", "target"), [
    ("grpc://127.0.0.1:50051", "127.0.0.1:50051"),
    ("grpc://127.0.0.1:50051/", "127.0.0.1:50051"),
    ("grpc://app.internal:1", "app.internal:1"),
    ("grpc://[::1]:50051", "[::1]:50051"),
])
def test_host_and_port_make_the_target(url: str, target: str) -> None:
    assert grpc_target(url) == target


@pytest.mark.parametrize(("url", "problem"), [
    ("http://127.0.0.1:50051", "must start with grpc://"),
    ("127.0.0.1:50051", "must start with grpc://"),
    ("grpc://127.0.0.1:50051/orders", "host:port only"),
    ("grpc://127.0.0.1:50051?x=1", "host:port only"),
    ("grpc://127.0.0.1:50051#top", "host:port only"),
    ("grpc://127.0.0.1:http", "a number from 1 to 65535"),
    ("grpc://127.0.0.1:70000", "a number from 1 to 65535"),
    ("grpc://127.0.0.1", "must name host and port"),
    ("grpc://:50051", "must name host and port"),
])
def test_anything_else_is_refused_saying_what_to_write(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        grpc_target(url)
