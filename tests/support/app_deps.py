"""Third-party apps' dependencies installed before a test's clock starts.

A test marked ``@pytest.mark.app_deps(directory, ...)`` runs apps from those directories: a
``requirements.txt`` is a venv (``app_venv.venv_python``), a ``package-lock.json`` is a
``node_modules`` (``node_apps.node_modules``). The first test to need one used to build it
inside its own ``timeout`` (pytest-timeout's 120 s), and ``pip install`` on a loaded machine
took longer than that: the test failed with a timeout while it had not started yet. This
plugin builds them in a ``pytest_runtest_protocol`` wrapper that runs before pytest-timeout's
(``tryfirst``), so each build is bounded by its own install timeout only; once built, they are
reused by every test and every run.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from tests.support.app_venv import venv_python
from tests.support.node_apps import node_modules


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "app_deps(*directories): third-party apps whose venv or node_modules are "
        "installed before the test's timeout starts")


def install_app_deps(directory: Path) -> None:
    """The venv and/or ``node_modules`` ``directory``'s apps run with (built on first use)."""
    if (directory / "requirements.txt").exists():
        venv_python(directory / "requirements.txt")
    if (directory / "package-lock.json").exists():
        node_modules(directory)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    directories = [Path(d) for marker in item.iter_markers("app_deps") for d in marker.args]
    try:
        for directory in directories:
            install_app_deps(directory)
    except (Exception, pytest.skip.Exception, pytest.fail.Exception):
        pass  # a registry out of reach: the test meets it again in its setup, skips or fails
    yield
