"""The session's Service Bus test broker, shared by the broker's own tests, the driver tests
and the end-to-end scenarios (registered in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.azure_servicebus.broker import ServiceBusBroker
from tests.support.servers import skip_or_fail


@pytest.fixture(scope="session")
def azure_servicebus_broker() -> Iterator[ServiceBusBroker]:
    """Started once per session on a free port; a broker loop failure fails the session."""
    try:
        broker = ServiceBusBroker().start()
    except Exception as exc:  # pragma: no cover - only when proton cannot listen
        skip_or_fail(f"Service Bus test broker cannot start: {exc}")
        raise
    yield broker
    broker.stop()
    assert broker.error is None, broker.error
