"""Live reload: a new config put in force without a restart, on SIGHUP or when its files
change (docs/operations/reload.md).

One path: ``ReloadSource.load`` is the loading the process started with (the composition
root passes ``dapr.setup.load``'s, so the same guards apply), run off the loop;
``settings.reload.reload_diff`` sorts the candidate's changes. An invalid file, or any
restart-only change, refuses the whole reload: the settings in force stay, one warning line
names the error or the keys, ``priority_pubsub_config_reloads_total{result="refused"}``
counts it, and the process goes on. Otherwise the queues the candidate adds are added at
the driver first (a ``QueueAdder``; an add that fails refuses the reload as well), then the
live settings are replaced and every part follows at once (``settings.live``). Messages in
flight are untouched: no lease, release, redelivery or attempt changes for a reload.

``watch`` polls the files' fingerprint (``settings.watch``) every ``WATCH_INTERVAL_S`` and
reloads once a change has held for one poll (an editor's write is not read half done), so a
change is in force within about two intervals; SIGHUP (``request``) reloads at once.
Reloads run one at a time; a request during one runs after it, once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from priority_pubsub.core.errors import ConfigError, DriverError, PriorityPubsubError
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.settings.reload import reload_diff
from priority_pubsub.settings.watch import Fingerprint, content_hash, fingerprint
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.telemetry.metrics import Metrics

log = get_logger("priority_pubsub.reload")
WATCH_INTERVAL_S = 1.0
"""How often the watched files are statted (a change is applied within two of these)."""


def _nothing() -> None:
    """What a candidate puts in force besides its settings, by default."""


@dataclass(frozen=True)
class Candidate:
    """A config read for a reload, not yet in force."""

    settings: Settings
    apply: Callable[[], None] = _nothing
    """Put in force with the settings (Dapr mode: the new plan's routes)."""
    restart_only: tuple[str, ...] = ()
    """Restart-only changes the loader itself found (Dapr mode: a component's connection)."""
    changed: tuple[str, ...] = ()
    """Changes the loader itself found that ``apply`` puts in force (Dapr mode: a
    subscription's routes), beside the settings'."""


@dataclass(frozen=True)
class ReloadSource:
    """Where the config comes from: how to read it again, and what to watch."""

    load: Callable[[], Candidate]
    """Read and validate the config as at start (blocking); raises ``ConfigError``."""
    paths: tuple[Path, ...] = field(default=())
    """The config file and, in Dapr mode, the resources directories."""


@dataclass(frozen=True, slots=True)
class Result:
    """What one reload did: applied (``changed`` the keys, maybe none), or refused (why)."""

    applied: bool
    changed: tuple[str, ...] = ()
    refused: str | None = None


class Reloader:
    def __init__(self, live: LiveSettings, source: ReloadSource, metrics: Metrics, *,
                 add_queue: Callable[[str], Awaitable[None]] | None,
                 interval_s: float = WATCH_INTERVAL_S) -> None:
        """``add_queue``: the driver's (a ``QueueAdder``), or None when it cannot add one."""
        self._live = live
        self._source = source
        self._metrics = metrics
        self._add_queue = add_queue
        self._interval_s = interval_s
        self._lock = asyncio.Lock()
        self._seen: Fingerprint = fingerprint(source.paths)
        """The files as the settings in force (or the last refused) were read from them."""
        self._pending: str | None = None
        self._runner: asyncio.Task[None] | None = None

    async def reload(self, trigger: str) -> Result:
        """Read the config again and put it in force, or refuse it; never raises for the
        config (an invalid one is refused)."""
        async with self._lock:
            self._seen = fingerprint(self._source.paths)
            try:
                candidate = await asyncio.to_thread(self._source.load)
                source_hash = await asyncio.to_thread(content_hash, self._source.paths)
            except ConfigError as exc:
                return self._refuse(trigger, f"invalid config: {exc}")
            except PriorityPubsubError as exc:  # Dapr mode: the app did not answer
                return self._refuse(trigger, str(exc))
            diff = reload_diff(self._live.settings, candidate.settings,
                               can_add_queues=self._add_queue is not None)
            restart_only = (*diff.refused, *candidate.restart_only)
            if restart_only:
                return self._refuse(trigger, "restart-only: " + ", ".join(restart_only),
                                    restart_only=list(restart_only))
            for queue in diff.added:
                assert self._add_queue is not None  # else the diff refused it
                try:
                    await self._add_queue(queue)
                except DriverError as exc:
                    return self._refuse(trigger, f"queues.{queue}: {exc}")
            self._live.replace(candidate.settings, source_hash)
            candidate.apply()
            self._metrics.config_reloads.labels("applied").inc()
            changed = (*diff.applied, *candidate.changed)
            log.info("config reloaded", trigger=trigger, changed=list(changed),
                     config_hash=source_hash)
            return Result(True, changed)

    def _refuse(self, trigger: str, reason: str, **fields: object) -> Result:
        self._live.refused(reason)
        self._metrics.config_reloads.labels("refused").inc()
        log.warning("config reload refused: the config in force stays", trigger=trigger,
                    reason=reason, **fields)
        return Result(False, refused=reason)

    def request(self, trigger: str) -> None:
        """Reload soon (SIGHUP): after the one under way, if any; requests meanwhile are
        one."""
        self._pending = trigger
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run_requests(), name="config-reload")

    async def _run_requests(self) -> None:
        while self._pending is not None:
            trigger, self._pending = self._pending, None
            await self._reload_logged(trigger)

    async def _reload_logged(self, trigger: str) -> None:
        """``reload``, a bug in a part that follows the settings logged, never raised: the
        process must not go down for a reload."""
        try:
            await self.reload(trigger)
        except Exception:
            log.exception("config reload failed", trigger=trigger)

    async def watch(self) -> None:
        """Reload when a watched file changed and then held still for one poll."""
        changed: Fingerprint | None = None
        while True:
            await asyncio.sleep(self._interval_s)
            now = fingerprint(self._source.paths)
            if now == self._seen:
                changed = None
            elif now == changed:  # the same change as one poll ago: written, not writing
                await self._reload_logged("file changed")
                changed = None
            else:
                changed = now

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
