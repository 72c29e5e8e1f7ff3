"""Importing a library without the optional packages it would pull in by itself.

Some libraries import an optional package at their own import whenever it is installed, for
a feature the sidecar never uses: structlog imports rich and pygments (coloured tracebacks),
redis-py imports OpenTelemetry's metrics SDK (its own observability). Installed for other
reasons (the CLI's tables, ``tracing``), they would sit in every pod's resident set: measured
in issue 28 (bench/RESULTS.md, "What the resident set is made of").
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def without(*packages: str) -> Iterator[None]:
    """Imports in the block see ``packages`` as not installed, unless one is already
    imported (then it stays as it is: whoever imported it uses it).

    A ``None`` entry in ``sys.modules`` makes ``import name`` (and of its submodules) raise
    ImportError, which these libraries take as "not installed"; the entries go right after
    the block, so a later ``import`` of the package works as usual."""
    hidden = [name for name in packages if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]
