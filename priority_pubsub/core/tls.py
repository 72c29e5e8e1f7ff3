"""aiohttp's default TLS contexts with the CA store loaded on first use instead of at import.

``aiohttp.connector`` builds two client contexts when it is imported, verified and
unverified, and loads the system's CA store into both: ~2 MB of every pod's resident set
and ~50 ms of CPU at start, whether the sidecar ever opens a TLS connection or not (the app
is usually reached over plain HTTP on localhost). Here the verified one is a context that
loads the CA store when it first wraps a connection, and the unverified one (it verifies
nothing, so it has no use for CAs) loads none. The price: the first TLS connection through
aiohttp's default context reads the CA store then, on the event loop, once.

``defer_ca_loading`` must run before ``aiohttp.connector`` is imported (the package's
``__init__`` calls it); where aiohttp was imported first, aiohttp keeps its own contexts.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import ssl
import sys
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

_AIOHTTP_CONNECTOR = "aiohttp.connector"


class CaOnFirstUse(ssl.SSLContext):
    """A verifying client context (as ``ssl.create_default_context()``) whose CA store is
    loaded when it first wraps a socket or a BIO: what asyncio and uvloop call to start TLS."""

    _ca_loaded = False
    _ca_lock = threading.Lock()

    def _load_ca(self) -> None:
        with self._ca_lock:
            if not self._ca_loaded:
                self.load_default_certs(ssl.Purpose.SERVER_AUTH)
                self._ca_loaded = True

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self._load_ca()
        return super().wrap_socket(*args, **kwargs)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self._load_ca()
        return super().wrap_bio(*args, **kwargs)


def verified_client_context() -> CaOnFirstUse:
    """What ``ssl.create_default_context()`` returns for a client, CA store not yet loaded:
    host name checked, certificate required, Python 3.13's stricter chain checks where the
    running Python has them, the key log file ``SSLKEYLOGFILE`` names."""
    context = CaOnFirstUse(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname, CERT_REQUIRED
    if sys.version_info >= (3, 13):
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | ssl.VERIFY_X509_STRICT
    keylog = os.environ.get("SSLKEYLOGFILE")
    if keylog and not sys.flags.ignore_environment:
        context.keylog_filename = keylog
    return context


@contextlib.contextmanager
def _contexts_without_ca() -> Iterator[None]:
    """While aiohttp's connector module runs: its verified context is a ``CaOnFirstUse`` and
    its unverified one (``CERT_NONE``) skips loading the CA store."""
    create_default_context = ssl.create_default_context
    set_default_verify_paths = ssl.SSLContext.set_default_verify_paths

    def default_context(purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH, *args: Any,
                        **kwargs: Any) -> ssl.SSLContext:
        if purpose is ssl.Purpose.SERVER_AUTH and not args and not kwargs:
            return verified_client_context()
        return create_default_context(purpose, *args, **kwargs)

    def verify_paths(context: ssl.SSLContext) -> None:
        if context.verify_mode != ssl.CERT_NONE:
            set_default_verify_paths(context)

    ssl.create_default_context = default_context
    ssl.SSLContext.set_default_verify_paths = verify_paths  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        ssl.create_default_context = create_default_context
        ssl.SSLContext.set_default_verify_paths = (  # type: ignore[method-assign]
            set_default_verify_paths)


class _DeferOnImport(importlib.abc.MetaPathFinder):
    """Finds ``aiohttp.connector`` as the other finders do and runs it inside
    ``_contexts_without_ca``; removes itself at that first import."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != _AIOHTTP_CONNECTOR:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = next((found for finder in sys.meta_path
                     if (found := finder.find_spec(fullname, path, target)) is not None), None)
        if spec is None:
            return None
        loader = spec.loader
        if loader is not None and hasattr(loader, "exec_module"):
            run_module = loader.exec_module

            def exec_module(module: ModuleType) -> None:
                with _contexts_without_ca():
                    run_module(module)

            loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def defer_ca_loading() -> None:
    """Make aiohttp's default contexts load the CA store on first use, if aiohttp's
    connector is not imported yet (idempotent)."""
    if _AIOHTTP_CONNECTOR in sys.modules:
        return
    if not any(isinstance(finder, _DeferOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeferOnImport())
