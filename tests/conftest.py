"""Session-wide test settings: CI=true turns a missing test server into a failure."""

from __future__ import annotations

import os

import pytest

# The shared suites are imported by test modules, not collected: rewrite their asserts too,
# so a failure there shows the values (a bare AssertionError told nothing in CI).
pytest.register_assert_rewrite("tests.drivers.conformance", "tests.e2e.scenarios")

# Session fixtures for real servers, shared by driver and end-to-end tests (one each per run).
pytest_plugins = [
    "tests.support.app_deps",  # before pytest-timeout's clock: third-party apps' installs
    "tests.support.browser",
    "tests.support.gcp_pubsub_emulator",
    "tests.support.moto_server",
    "tests.support.object_stores",
    "tests.support.rabbitmq_server",
    "tests.support.redis_server",
    "tests.support.azure_servicebus.fixtures",
    "tests.support.topologies.fixtures",
    "tests.chaos.report",  # the accounting summary, printed by the xdist controller too
    "tests.support.durations",  # each file's seconds, when TESTS_RECORD_DURATIONS asks
]

# `priority-pubsub report` run as a command would keep a class archive of Spark (~190 MB) in
# the user's cache and spend ~10 s writing it on its first run: the tests that run it leave
# it off, but tests/spark/test_report_jvm.py, which gives each of its runs an archive
# directory of its own.
os.environ.setdefault("PRIORITY_PUBSUB_REPORT_CLASS_ARCHIVE", "off")
