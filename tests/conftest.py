"""Session-wide test settings: CI=true turns a missing test server into a failure."""

from __future__ import annotations

import os

import pytest

# Session fixtures for real servers, shared by driver and end-to-end tests (one each per run).
pytest_plugins = ["tests.support.pubsub_emulator", "tests.support.moto_server"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_or_fail(reason: str) -> None:
    """A missing server skips locally (with the reason) and fails the run in CI."""
    if IN_CI:
        pytest.fail(f"required test server missing in CI: {reason}")
    pytest.skip(reason)
