"""What every test server fixture shares: free ports on 127.0.0.1 (``ports``),
and the rule that a missing server skips locally (with the reason) but fails the run when
``CI=true``."""

from __future__ import annotations

import os

import pytest

from tests.support.ports import free_port

__all__ = ["free_port", "in_ci", "skip_or_fail"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_or_fail(reason: str) -> None:
    """A missing server or tool must not turn CI green: fail there, skip locally."""
    if in_ci():
        pytest.fail(f"required by the test suite but missing (CI=true): {reason}")
    pytest.skip(reason)
