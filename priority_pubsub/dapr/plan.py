"""Everything Dapr says about this app, combined: which component, which topics in which
order, which queue each is read from, which subscription routes it, and the settings the
component's metadata implies (config.yaml wins over each of them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.pod import Pod
from priority_pubsub.dapr.components import (
    BrokerTopics,
    ComponentContext,
    ComponentKind,
    Entities,
    Mapped,
)
from priority_pubsub.dapr.kinds import kind_for, supported_types
from priority_pubsub.dapr.manifests import (
    Component,
    Manifest,
    RegisteredComponent,
    parse_component,
)
from priority_pubsub.dapr.resiliency import resilience
from priority_pubsub.dapr.secrets import SECRET_STORE_PREFIX, resolve_metadata
from priority_pubsub.dapr.subscriptions import Subscription, from_manifest, merge
from priority_pubsub.dapr.templates import MetadataTemplates, TemplatedComponent
from priority_pubsub.settings.dapr import CAPACITY_KEYS, DaprConfig

PRIORITY_KEY = "priority"
WEIGHT_KEY = "weight"
_IGNORED_KINDS = ("Configuration", "HTTPEndpoint", "MCPServer", "WorkflowAccessPolicy")


@dataclass(frozen=True)
class PlannedQueue:
    name: str
    topics: tuple[str, ...]
    weight: int = 1
    capacity: Mapping[str, float | int] = field(default_factory=dict)
    """``reserve``, ``max_concurrency``, ``max_wait_s``, ``wait_slo_s``, ``timeout_s`` where
    set (by a ``dapr.priorities`` mapping entry, else the Subscription's metadata)."""


@dataclass(frozen=True)
class DaprPlan:
    app_id: str
    component: ComponentContext
    kind: ComponentKind
    subscriptions: Mapping[str, Subscription]
    """Topic -> its subscription (one component, so the topic is the key)."""
    queues: tuple[PlannedQueue, ...]
    mapped: Mapped
    notes: tuple[str, ...] = ()
    """Info lines: what was skipped and why."""
    warnings: tuple[str, ...] = ()
    """Settings read but not honoured, and other things the user should look at."""
    resilience: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Sections a ``Resiliency`` manifest implies (``retry``, ``app``), over the component's."""
    registered: tuple[RegisteredComponent, ...] = ()
    """The components loaded for this app (in scope), as the metadata API lists them."""
    templated: tuple[TemplatedComponent, ...] = ()
    """The metadata of every component in scope as templated (``check`` prints it)."""
    source_component: Component | None = None
    """The component as written (before secrets and templates): what a live reload compares
    to tell a changed component from one read again (``{uuid}`` is new at every read)."""

    def topic_of(self, queue: str, topic_key: str | None) -> str | None:
        """The topic of a message on ``queue`` (``topic_key`` as the broker names it)."""
        for planned in self.queues:
            if planned.name != queue:
                continue
            if topic_key is None:
                return planned.topics[0] if len(planned.topics) == 1 else None
            for topic in planned.topics:
                if self.kind.topic_key(self.component.broker_topic(topic)) == topic_key:
                    return topic
        return None

    def queue_of(self, topic: str) -> str:
        """The queue ``topic`` is read from in the per-topic layout."""
        return _topic_queue(self.kind, self.component, topic)

    def entities(self, driver: Mapping[str, Any]) -> Entities | None:
        """The component's entities, if its kind has them, taking the app's topic names."""
        found = self.kind.entities(self.component, driver)
        return None if found is None else BrokerTopics(found, self.component)

    def settings(self) -> dict[str, Any]:
        """The settings this plan implies, for config.yaml to be merged over."""
        settings: dict[str, Any] = {
            "driver": dict(self.mapped.driver),
            "queues": [{"name": q.name, "weight": q.weight, **q.capacity} for q in self.queues],
            "app": {"fatal_codes": []},  # daprd has none: only 404 drops, the rest retries
            **self.mapped.settings,
        }
        for section, values in self.resilience.items():
            settings[section] = {**(settings.get(section) or {}), **values}
        return settings


def build_plan(dapr: DaprConfig, manifests: Sequence[Manifest],
               from_app: Sequence[Subscription], *, publisher_only: bool = False,
               pod: Pod | None = None) -> DaprPlan:
    """``publisher_only`` (no app to push to): no subscription is needed; the component is
    the one pub/sub component in scope when no subscription names one. ``pod``: what the
    metadata templates name (default: this process's, ``Pod.current``)."""
    notes: list[str] = []
    warnings: list[str] = []
    component_manifests = [m for m in manifests if m.kind == "Component"]
    components = [parse_component(m) for m in component_manifests]
    declared = _declared(manifests, dapr.app_id, notes)
    subscriptions = merge(declared, from_app)
    if not subscriptions and not publisher_only:
        raise ConfigError("dapr: no subscriptions for app "
                          f"{dapr.app_id!r}: neither Subscription manifests in "
                          f"{', '.join(map(str, dapr.resources_path))} nor GET /dapr/subscribe")
    component, kind = _the_component(components, subscriptions, dapr.app_id, notes)
    templates = MetadataTemplates(dapr.app_id, pod or Pod.current())
    stores = {c.name: templates.component(c) for c in components
              if c.type.startswith(SECRET_STORE_PREFIX)}
    resolved = resolve_metadata(component, stores)
    context = ComponentContext(component.name, component.type,
                               templates.metadata(component, resolved), dapr.app_id,
                               component.source, templates.topic_prefix(resolved.values()))
    mapped = kind.map(context)
    warnings += [f"{component.source}: Component {component.name}: metadata {key} is read but "
                 "not honoured by priority-pubsub" for key in context.metadata
                 if key not in mapped.honoured]
    warnings += mapped.warnings
    warnings += _other_warnings(manifests, subscriptions, dapr)
    by_topic = {s.topic: s for s in subscriptions}
    topics = ordered_topics(subscriptions, dapr.priority_topics)
    queues = _queues(dapr, kind, context, topics, by_topic)
    resilient = resilience(manifests, component.name, dapr.app_id)
    warnings += resilient.warnings
    registered = tuple(RegisteredComponent(m.name, c.type, _version(m))
                       for m, c in zip(component_manifests, components, strict=True)
                       if c.in_scope(dapr.app_id))
    return DaprPlan(dapr.app_id, context, kind, by_topic, queues, mapped, tuple(notes),
                    tuple(warnings), resilient.settings, registered,
                    _templated(components, context, stores, templates), component)


def _templated(components: Sequence[Component], chosen: ComponentContext,
               stores: Mapping[str, Component], templates: MetadataTemplates
               ) -> tuple[TemplatedComponent, ...]:
    """Every component in scope, templated once: the pub/sub one as its kind got it, the
    secret stores as they were looked up in, the others now (a ``{podName}`` without
    ``POD_NAME`` fails any of them, as it fails daprd's start)."""
    shown = []
    for component in components:
        if not component.in_scope(chosen.app_id):
            continue
        if component.name == chosen.name and component.source == chosen.source:
            shown.append(TemplatedComponent.of(component, chosen.metadata))
            continue
        store = stores.get(component.name) if component.type.startswith(
            SECRET_STORE_PREFIX) else None
        shown.append(TemplatedComponent.of(store or templates.component(component)))
    return tuple(shown)


def _version(manifest: Manifest) -> str:
    spec = manifest.document.get("spec")
    return str(spec.get("version") or "") if isinstance(spec, dict) else ""


def _declared(manifests: Sequence[Manifest], app_id: str, notes: list[str]
              ) -> list[Subscription]:
    declared = []
    for manifest in manifests:
        if manifest.kind != "Subscription":
            continue
        subscription = from_manifest(manifest)
        if subscription.in_scope(app_id):
            declared.append(subscription)
        else:
            notes.append(f"{manifest.source}: Subscription {manifest.name} skipped: scoped "
                         f"to {list(subscription.scopes)}")
    return declared


def _the_component(components: Sequence[Component], subscriptions: Sequence[Subscription],
                   app_id: str, notes: list[str]) -> tuple[Component, ComponentKind]:
    used = list(dict.fromkeys(s.pubsub for s in subscriptions)) or _only_pubsub(
        components, app_id)
    if len(used) > 1:
        raise ConfigError(f"dapr: the subscriptions use the pub/sub components {used}; one "
                          "priority-pubsub sidecar serves one component")
    chosen: Component | None = None
    for component in components:
        if component.name == used[0] and component.in_scope(app_id):
            chosen = component
        elif component.type.startswith(SECRET_STORE_PREFIX):
            continue  # reported only when referenced
        elif not component.in_scope(app_id):
            notes.append(f"{component.source}: Component {component.name} skipped: scoped to "
                         f"{list(component.scopes)}")
        else:
            why = "not used by this app's subscriptions" if component.type.startswith(
                "pubsub.") else "not a pub/sub component"
            notes.append(f"{component.source}: Component {component.name} ({component.type}) "
                         f"skipped: {why}")
    if chosen is None:
        source = next(s.source for s in subscriptions if s.pubsub == used[0])
        raise ConfigError(f"{source}: pubsubname: {used[0]!r} is not a Component in the "
                          "resources path for this app")
    kind = kind_for(chosen.type)
    if kind is None:
        raise ConfigError(f"{chosen.source}: Component {chosen.name}: spec.type: {chosen.type} "
                          f"has no driver here (supported: {', '.join(supported_types())})")
    return chosen, kind


def _only_pubsub(components: Sequence[Component], app_id: str) -> list[str]:
    """A publisher-only sidecar without subscriptions publishes through the one pub/sub
    component in scope (the publish API serves one component)."""
    found = [c.name for c in components if c.type.startswith("pubsub.") and c.in_scope(app_id)]
    if len(found) != 1:
        raise ConfigError(f"dapr: a publisher-only sidecar serves one pub/sub component; "
                          f"found {found or 'none'} in scope for app {app_id!r}")
    return found


def ordered_topics(subscriptions: Sequence[Subscription], priorities: Sequence[str]
                   ) -> list[str]:
    """``dapr.priorities`` first, in its order; then topics whose subscription metadata sets
    ``priority`` (lower first); then the rest in the order found."""
    found = [s.topic for s in subscriptions]
    listed = [topic for topic in priorities if topic in found]
    rest = [s for s in subscriptions if s.topic not in listed]
    ranked = sorted((s for s in rest if PRIORITY_KEY in s.metadata),
                    key=lambda s: _int(s, PRIORITY_KEY))
    unranked = [s.topic for s in rest if PRIORITY_KEY not in s.metadata]
    return [*listed, *(s.topic for s in ranked), *unranked]


def _queues(dapr: DaprConfig, kind: ComponentKind, context: ComponentContext,
            topics: list[str], by_topic: Mapping[str, Subscription]) -> tuple[PlannedQueue, ...]:
    if dapr.queue_layout == "shared":
        shared = kind.shared_queue(context)
        if shared is None:
            raise ConfigError(f"dapr.queue_layout: shared: {kind.type} has no shared queue "
                              "(each topic has its own)")
        return (PlannedQueue(shared, tuple(topics)),)
    return tuple(PlannedQueue(_topic_queue(kind, context, topic), (topic,),
                              _int(by_topic[topic], WEIGHT_KEY, default=1),
                              _capacity(dapr, by_topic[topic]))
                 for topic in topics)


def _topic_queue(kind: ComponentKind, component: ComponentContext, topic: str) -> str:
    return kind.queue_for(component, component.broker_topic(topic))


def _capacity(dapr: DaprConfig, subscription: Subscription) -> dict[str, float | int]:
    """A topic's capacity settings: its ``dapr.priorities`` mapping entry over its
    Subscription's metadata (validated with the rest of the config, as ``queues[]``)."""
    found: dict[str, float | int] = {}
    for key in CAPACITY_KEYS:
        text = subscription.metadata.get(key)
        if text is None:
            continue
        try:
            found[key] = float(text) if key.endswith("_s") else int(text)
        except ValueError:
            kind = "a number" if key.endswith("_s") else "an integer"
            raise ConfigError(f"{subscription.source}: metadata.{key}: not {kind}: {text!r}"
                              ) from None
    return {**found, **dapr.topic_capacity(subscription.topic)}


def _int(subscription: Subscription, key: str, default: int = 0) -> int:
    text = subscription.metadata.get(key)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{subscription.source}: metadata.{key}: not an integer: {text!r}"
                          ) from None


def _other_warnings(manifests: Sequence[Manifest], subscriptions: Sequence[Subscription],
                    dapr: DaprConfig) -> list[str]:
    warnings = [f"{m.source}: {m.kind} {m.name} skipped (not used by priority-pubsub)"
                 for m in manifests if m.kind in _IGNORED_KINDS]
    found = {s.topic for s in subscriptions}
    warnings += [f"dapr.priorities: topic {topic!r} has no subscription"
                 for topic in dapr.priority_topics if topic not in found]
    if dapr.queue_layout == "shared":
        warnings += [f"{s.source}: topic {s.topic}: {', '.join(given)} need a queue per "
                     "topic: not honoured with queue_layout: shared"
                     for s in subscriptions if (given := _capacity(dapr, s))]
    return warnings
