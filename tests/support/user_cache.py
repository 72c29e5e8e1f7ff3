"""Where the tests keep what they build once and reuse: the user's cache directory.

Not the checkout: CI runs on a fresh clone every time, and the app venvs and ``node_modules``
kept under it were rebuilt by every run. Each entry is keyed by the content it was built
from (a requirements or lock file, the interpreter's version), so clones share them safely.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache(kind: str) -> Path:
    """``$XDG_CACHE_HOME/priority-pubsub/<kind>`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "priority-pubsub" / kind
