"""End-to-end fixtures: a recording app and helpers around the real CLI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.app import RecordingApp
from tests.support.dapr_resources import Sns
from tests.support.moto_server import MotoServer


@pytest.fixture
def app() -> Iterator[RecordingApp]:
    with RecordingApp() as running:
        yield running


@pytest.fixture
def sns(moto_server: MotoServer) -> Iterator[Sns]:
    """SNS/SQS on the session's moto server, as Dapr's snssqs component uses them."""
    client = Sns(moto_server)
    yield client
    client.close()
