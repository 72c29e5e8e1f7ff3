"""Session-wide test settings: CI=true turns a missing test server into a failure."""

from __future__ import annotations

import pytest

# The shared suites are imported by test modules, not collected: rewrite their asserts too,
# so a failure there shows the values (a bare AssertionError told nothing in CI).
pytest.register_assert_rewrite("tests.drivers.conformance", "tests.e2e.scenarios")

# Session fixtures for real servers, shared by driver and end-to-end tests (one each per run).
pytest_plugins = [
    "tests.support.browser",
    "tests.support.pubsub_emulator",
    "tests.support.moto_server",
    "tests.support.rabbitmq_server",
    "tests.support.redis_server",
    "tests.support.servicebus.fixtures",
    "tests.support.topologies.fixtures",
    "tests.chaos.report",  # the accounting summary, printed by the xdist controller too
]
