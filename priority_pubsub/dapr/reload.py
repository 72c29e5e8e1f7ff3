"""Dapr mode's live reload: the config file and the resources directories read again as at
start (``setup.load``), as daprd 1.18's hot reload reads its resources: a Subscription added,
changed or removed, a Component or Resiliency changed (docs/operations/reload.md).

The candidate goes through the same rules as native mode's (``settings.reload``): what the
resources imply reaches the settings (queues and their order and capacity from the
Subscriptions, retry and timeouts from a Resiliency, the driver's options from the
Component), and ``reload_diff`` sorts it. ``compare`` adds what the settings do not show: a
component replaced (another name or type), its credentials changed (what it puts in the
environment), a subscription's bulk delivery changed (the bulk channel is built at start).
A resource read again unchanged is a no-op: a component whose metadata is the same but for
values templated with ``{uuid}`` (new at every read) keeps the driver it started with. The
app's programmatic subscriptions are those it gave at start (daprd asks at start only).

Once applied, the request builder routes by the new plan (``DaprRequestBuilder.use_plan``);
a topic added gets its queue made first, as the component makes queues at start (unless
``disableEntityManagement``), then added at the driver by the reloader.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from priority_pubsub.dapr.components import Entities
from priority_pubsub.dapr.flags import DaprdFlags
from priority_pubsub.dapr.plan import DaprPlan
from priority_pubsub.dapr.request_builder import DaprRequestBuilder
from priority_pubsub.dapr.setup import Loaded, load, watched_paths
from priority_pubsub.dapr.subscriptions import Subscription
from priority_pubsub.dapr.templates import UUID
from priority_pubsub.delivery.reload import Candidate, ReloadSource
from priority_pubsub.settings.config import Settings
from priority_pubsub.telemetry.logs import get_logger

log = get_logger("priority_pubsub.dapr")


@dataclass(frozen=True)
class Compared:
    """A candidate as a reload compares it with the running resources."""

    settings: Settings
    """Its settings, to diff (a component unchanged: with the running driver)."""
    restart_only: tuple[str, ...] = ()
    """Restart-only changes the settings do not show (a component replaced, its
    credentials, a subscription's bulk delivery)."""
    changed: tuple[str, ...] = ()
    """Changes the settings do not show that a reload applies (a subscription's routes,
    rules, dead-letter topic, metadata)."""


def compare(running: Loaded, candidate: Loaded) -> Compared:
    """The candidate as a reload (and ``check --reload-safe``) compares it with the running
    resources: its settings go to ``reload_diff``, the rest is sorted here."""
    old, new = running.plan, candidate.plan
    if old is None or new is None:  # Dapr mode turned on or off: the diff refuses ``dapr``
        return Compared(candidate.settings)
    was, now = old.component, new.component
    if (was.name, was.type, was.topic_prefix) != (now.name, now.type, now.topic_prefix):
        return Compared(candidate.settings, (f"Component {was.name} ({was.type}) replaced by "
                                             f"{now.name} ({now.type})",))
    restart_only, changed = _bulk_changes(old, new), _subscription_changes(old, new)
    if not _component_changed(old, new):
        return Compared(candidate.settings.with_driver_of(running.settings), restart_only,
                        changed)
    if old.mapped.environment != new.mapped.environment:
        restart_only += (f"Component {now.name}: credentials",)
    return Compared(candidate.settings, restart_only, changed)


def _subscription_changes(old: DaprPlan, new: DaprPlan) -> tuple[str, ...]:
    """Subscriptions changed in what the request builder reads of them (added and removed ones
    show as their queues)."""
    def read(subscription: Subscription) -> Subscription:
        return dataclasses.replace(subscription, compiled_rules=(), source="")

    return tuple(f"Subscription {topic} (changed)" for topic, subscription
                 in new.subscriptions.items() if topic in old.subscriptions
                 and read(old.subscriptions[topic]) != read(subscription))


def _component_changed(old: DaprPlan, new: DaprPlan) -> bool:
    """Whether the component's metadata (secrets resolved, templated) changed, a value
    templated with ``{uuid}`` counted as unchanged while it is written the same."""
    written_before = old.source_component.metadata if old.source_component else ()
    fresh = {item.name for item in (new.source_component.metadata if new.source_component
                                    else ())
             if item.value is not None and UUID in item.value and item in written_before}
    return _without(old.component.metadata, fresh) != _without(new.component.metadata, fresh)


def _without(metadata: Mapping[str, str], keys: set[str]) -> dict[str, str]:
    return {key: value for key, value in metadata.items() if key not in keys}


def _bulk_changes(old: DaprPlan, new: DaprPlan) -> tuple[str, ...]:
    """Subscriptions kept or added whose bulk delivery differs (restart-only)."""
    def bulk(plan: DaprPlan, topic: str) -> tuple[bool, int, int] | None:
        found = plan.subscriptions.get(topic)
        if found is None or not found.bulk:
            return None
        return (True, found.bulk_max_messages, found.bulk_max_await_ms)

    return tuple(f"Subscription {topic}: bulkSubscribe" for topic in new.subscriptions
                 if bulk(old, topic) != bulk(new, topic)
                 and (topic in old.subscriptions or bulk(new, topic) is not None))


class DaprReload:
    """The reload source of a Dapr-mode sidecar, and what it puts in force with the settings
    (the request builder's plan)."""

    def __init__(self, config: Path | None, flags: DaprdFlags, running: Loaded,
                 request_builder: DaprRequestBuilder, entities: Entities | None) -> None:
        self._config = config
        self._flags = flags
        self._running = running
        self._request_builder = request_builder
        self._entities = entities

    def source(self) -> ReloadSource:
        return ReloadSource(self._candidate, watched_paths(self._config, self._flags,
                                                           self._running.settings))

    def _candidate(self) -> Candidate:
        """Read again (blocking: the reloader runs it off the loop)."""
        before = dict(os.environ)
        loaded = load(self._config, self._flags, reach_app=False,
                      from_app=self._running.from_app)
        if loaded.plan is not None:  # the running component's credentials stay (a change:
            _restore(before, loaded.plan.mapped.environment)  # refused by ``compare``)
        compared = compare(self._running, loaded)
        if loaded.plan is not None and not compared.restart_only:
            self._make_queues(loaded.plan)
        accepted = Loaded(compared.settings, loaded.plan, loaded.warnings, loaded.from_app)
        return Candidate(compared.settings, lambda: self._apply(accepted),
                         compared.restart_only, compared.changed)

    def _make_queues(self, plan: DaprPlan) -> None:
        """The queues of topics new to this plan, made as at start (``Entities.ensure``)."""
        running = self._running.plan
        known = {queue.name for queue in running.queues} if running else set()
        new = [(queue.name, queue.topics) for queue in plan.queues if queue.name not in known]
        if new and self._entities is not None:
            dead_letter = self._running.settings.dead_letter
            self._entities.ensure(new, dead_letter.queue if dead_letter else None)

    def _apply(self, loaded: Loaded) -> None:
        assert loaded.plan is not None
        shown = set(self._running.warnings)
        for warning in loaded.warnings:
            if warning not in shown:
                log.warning(warning)
        self._running = loaded
        self._request_builder.use_plan(loaded.plan)


def _restore(before: Mapping[str, str], changed: Mapping[str, str]) -> None:
    for key in changed:
        if key in before:
            os.environ[key] = before[key]
        else:
            os.environ.pop(key, None)
