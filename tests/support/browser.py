"""One real Chromium for the browser tests (Debian's package), driven by Playwright.

``playwright install`` downloads its own browser; this machine and CI use the distribution's
``chromium`` instead (``executable_path``), installed by scripts/ci-prerequisites.sh. A
missing Chromium skips locally with its reason and fails in CI.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        if found := shutil.which(name):
            return found
    return None


@contextmanager
def launched_chromium() -> Iterator[Browser]:
    """Chromium under Playwright until the block ends (the bench uses it too)."""
    from playwright.sync_api import sync_playwright

    path = find_chromium()
    if path is None:
        raise FileNotFoundError("chromium not installed (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """Module-scoped: while Playwright's sync API runs, its event loop counts as running in
    the main thread, and pytest-asyncio cannot run an async test after it. The browser tests
    live in one module, so that is still one Chromium per session."""
    if find_chromium() is None:
        reason = "chromium not installed (apt-get install -y chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with launched_chromium() as browser:
        yield browser
