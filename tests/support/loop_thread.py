"""An event loop of its own in a daemon thread, for the servers a synchronous test drives
(the recording app, the Kubernetes API stand-in, the TCP proxies): the test's code stays
plain calls while the server answers on its own loop, whatever the test blocks on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """``start(setup)`` runs the loop in a thread and waits for ``setup`` there; ``call`` runs
    a coroutine on it from the test's thread; ``stop(teardown)`` runs ``teardown`` on it, then
    ends the loop and the thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._name = name
        self._thread: threading.Thread | None = None

    def start(self, setup: Coroutine[Any, Any, None], timeout_s: float = 10) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(setup)
            except BaseException as exc:  # the test's thread raises it
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self.loop.run_forever()

        self._thread = threading.Thread(target=serve, name=self._name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise RuntimeError(f"{self._name} did not start within {timeout_s} s")
        if failure:
            raise failure[0]

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = 10) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def stop(self, teardown: Coroutine[Any, Any, None], timeout_s: float = 10) -> None:
        self.call(teardown, timeout_s)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.loop.close()
