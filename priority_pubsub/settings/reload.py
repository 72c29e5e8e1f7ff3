"""What a live reload may change, declared once, and the pure diff that sorts a candidate's
changes into applied and restart-only (``reload_diff``): the running sidecar and ``check
--reload-safe`` ask the same function.

A reload may change what the running parts read through ``settings.live.LiveSettings``:
the queues (order, priorities, weights, reserves, limits, starvation bounds, SLOs, pauses,
timeouts, routes: every per-queue key), ``scheduling``, ``concurrency``, the retry policy,
the app's delivery timeout, the log level, and in Dapr mode ``dapr.priorities``. Every other
key is restart-only: the driver (type, connection, options), the servers (hosts, ports), the
journal, the app's address and protocol, the lease, transforms, tracing, the monitor's
tokens... A key added to the models later is restart-only until it is listed here and read
through the live settings. A queue added by a reload is restart-only too where the driver
cannot add one at run time (``drivers.base.QueueAdder``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from priority_pubsub.settings.config import Settings

RELOADABLE: tuple[str, ...] = (
    "queues", "scheduling", "concurrency", "retry", "app.timeout_s", "log.level",
    "dapr.priorities",
)
"""The keys a reload applies (a key, or every key under it); every other key is
restart-only. (``reload.watch`` itself is restart-only: it decides whether anything
watches.)"""
NOT_ADDABLE = "added: the driver takes no queue after start"


@dataclass(frozen=True, slots=True)
class ReloadDiff:
    """A candidate's changes against the settings in force, as dotted keys."""

    applied: tuple[str, ...] = ()
    """Changed keys a reload applies (``queues.NAME.reserve``, ``queues.NAME (added)``)."""
    refused: tuple[str, ...] = ()
    """Changed keys only a restart applies: any one refuses the whole reload."""
    added: tuple[str, ...] = ()
    """Queues the candidate adds (to add at the driver before it is in force)."""
    removed: tuple[str, ...] = ()

    @property
    def safe(self) -> bool:
        """Whether a reload would apply it."""
        return not self.refused


def reload_diff(old: Settings, new: Settings, *, can_add_queues: bool) -> ReloadDiff:
    """Sort ``new``'s changes against ``old``: applied, or restart-only (refused).

    Values are compared as validated (a secret by its value, not its mask), so an edited
    password is a change, restart-only as the connection it belongs to."""
    applied: list[str] = []
    refused: list[str] = []
    for key in _changed_keys(old.model_dump(exclude={"queues"}),
                             new.model_dump(exclude={"queues"})):
        (applied if _reloadable(key) else refused).append(key)
    before = {q.name: q for q in old.queues}
    after = {q.name: q for q in new.queues}
    added = tuple(name for name in after if name not in before)
    removed = tuple(name for name in before if name not in after)
    kept_order = [name for name in after if name in before]
    if kept_order != [name for name in before if name in after]:
        applied.append("queues (order)")
    for name in kept_order:
        applied += [f"queues.{name}.{key}" for key in _changed_keys(
            before[name].model_dump(), after[name].model_dump())]
    for name in added:
        (applied if can_add_queues else refused).append(
            f"queues.{name} ({'added' if can_add_queues else NOT_ADDABLE})")
    applied += [f"queues.{name} (removed)" for name in removed]
    return ReloadDiff(tuple(applied), tuple(refused), added, removed)


def _reloadable(key: str) -> bool:
    return any(key == allowed or key.startswith(f"{allowed}.") for allowed in RELOADABLE)


def _changed_keys(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = ""
                  ) -> list[str]:
    """The dotted keys whose values differ (a mapping compared key by key; anything else,
    lists included, as a whole)."""
    changed: list[str] = []
    for key in sorted(set(old) | set(new), key=str):
        before, after = old.get(key), new.get(key)
        path = f"{prefix}{key}"
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            changed += _changed_keys(before, after, f"{path}.")
        elif before != after or (key in old) != (key in new):
            changed.append(path)
    return changed
