"""Subscriptions as daprd knows them: ``Subscription`` manifests (dapr.io/v1alpha1 and
v2alpha1) and the app's ``GET /dapr/subscribe`` answer (v1 ``route`` and v2 ``routes``),
merged as daprd merges them.

Sources read: dapr ``pkg/runtime/pubsub/subscriptions.go`` (``GetSubscriptionsHTTP``: rules,
then ``routes.default``, else ``route``; subscriptions without any route are removed) and
``pkg/runtime/compstore/subscriptions.go`` (``ListSubscriptionsAppByPubSub``: manifests in
load order, the first per topic kept; an app subscription to the same pubsub and topic
replaces it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.manifests import Manifest, string_list
from priority_pubsub.dapr.routing import CompiledRule, Rule

APP_SOURCE = "GET /dapr/subscribe"
_TRUE = {"1", "t", "true", "y", "yes", "on"}
_FALSE = {"", "0", "f", "false", "n", "no", "off"}


@dataclass(frozen=True)
class Subscription:
    pubsub: str
    topic: str
    rules: tuple[Rule, ...]
    dead_letter_topic: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    scopes: tuple[str, ...] = ()
    source: str = APP_SOURCE
    bulk: bool = False
    bulk_max_messages: int = 100
    bulk_max_await_ms: int = 1000
    """``bulkSubscribe.maxMessagesCount`` / ``maxAwaitDurationMs`` (daprd's defaults)."""
    compiled_rules: tuple[CompiledRule, ...] = ()

    @property
    def raw_payload(self) -> bool:
        """``metadata.rawPayload`` read as Dapr's ``IsRawPayload`` reads it (a boolean)."""
        return parse_bool(self.metadata.get("rawPayload", ""), f"{self.source}: rawPayload")

    def in_scope(self, app_id: str) -> bool:
        return not self.scopes or app_id in self.scopes


STREAMING_SOURCE = "SubscribeTopicEventsAlpha1"


def streaming(pubsub: str, topic: str) -> Subscription:
    """The subscription of a topic known only from a stream (no manifest, not the app's
    ``/dapr/subscribe``): every event to the stream; its dead-letter topic is the stream's
    (``StreamHub.dead_letter_topic``)."""
    rule = Rule("", "/")
    return Subscription(pubsub, topic, (rule,), source=STREAMING_SOURCE,
                        compiled_rules=(rule.compiled(),))


def parse_bool(text: str, where: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{where}: not a boolean: {text!r}")


def from_manifest(manifest: Manifest) -> Subscription:
    """A Subscription manifest; v1alpha1's ``route`` becomes the default route."""
    where = f"{manifest.source}: Subscription {manifest.name}"
    spec = manifest.document.get("spec")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: spec: must be a mapping")
    rules: list[Rule] = []
    if manifest.api_version.endswith("/v1alpha1"):
        route = spec.get("route")
        if route:
            rules.append(Rule("", str(route)))
    else:
        rules.extend(_routes(spec.get("routes"), f"{where}: spec.routes"))
    return _build(spec, rules, where, scopes=string_list(
        manifest.document.get("scopes"), f"{where}: scopes"))


def from_app(items: object) -> list[Subscription]:
    """The app's ``/dapr/subscribe`` answer: a JSON list of v1 (``route``) or v2 (``routes``)
    subscriptions; ``routes`` wins over ``route`` as in daprd."""
    if not isinstance(items, list):
        raise ConfigError(f"{APP_SOURCE}: the app answered {type(items).__name__}, not a list")
    subscriptions = []
    for index, item in enumerate(items):
        where = f"{APP_SOURCE}: [{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: not an object")
        routes = item.get("routes")
        rules = _routes(routes, f"{where}.routes")
        has_default = isinstance(routes, dict) and bool(routes.get("default"))
        if not has_default and item.get("route"):
            rules.append(Rule("", str(item["route"])))
        subscriptions.append(_build(item, rules, where, scopes=()))
    return subscriptions


def _routes(routes: object, where: str) -> list[Rule]:
    if routes is None:
        return []
    if not isinstance(routes, dict):
        raise ConfigError(f"{where}: must be a mapping")
    rules = []
    listed = routes.get("rules") or []
    if not isinstance(listed, list):
        raise ConfigError(f"{where}.rules: must be a list")
    for index, rule in enumerate(listed):
        if not isinstance(rule, dict) or not rule.get("path"):
            raise ConfigError(f"{where}.rules[{index}].path: required")
        rules.append(Rule(str(rule.get("match") or "").strip(), str(rule["path"])))
    if routes.get("default"):
        rules.append(Rule("", str(routes["default"])))
    return rules


def _build(spec: Mapping[str, Any], rules: list[Rule], where: str,
           scopes: tuple[str, ...]) -> Subscription:
    pubsub, topic = spec.get("pubsubname"), spec.get("topic")
    if not isinstance(pubsub, str) or not pubsub:
        raise ConfigError(f"{where}: pubsubname: required")
    if not isinstance(topic, str) or not topic:
        raise ConfigError(f"{where}: topic: required")
    metadata = spec.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ConfigError(f"{where}: metadata: must be a mapping")
    compiled = []
    for index, rule in enumerate(rules):
        try:
            compiled.append(rule.compiled())
        except ValueError as exc:
            raise ConfigError(f"{where}: routes.rules[{index}].match: {exc}") from None
    bulk = spec.get("bulkSubscribe")
    bulk = bulk if isinstance(bulk, dict) else {}
    subscription = Subscription(
        pubsub=pubsub, topic=topic, rules=tuple(rules),
        dead_letter_topic=str(spec.get("deadLetterTopic") or "") or None,
        metadata={str(k): str(v) for k, v in metadata.items()}, scopes=scopes,
        source=where, bulk=bool(bulk.get("enabled")),
        bulk_max_messages=_positive(bulk, "maxMessagesCount", 100, where),
        bulk_max_await_ms=_positive(bulk, "maxAwaitDurationMs", 1000, where),
        compiled_rules=tuple(compiled),
    )
    subscription.raw_payload  # noqa: B018 - a bad rawPayload is an error at load, not later
    return subscription


def _positive(bulk: Mapping[str, Any], key: str, default: int, where: str) -> int:
    value = bulk.get(key)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: bulkSubscribe.{key}: not a number: {value!r}") from None
    if number < 1:
        raise ConfigError(f"{where}: bulkSubscribe.{key}: must be at least 1")
    return number


def merge(declared: Iterable[Subscription], from_app_: Iterable[Subscription]
          ) -> list[Subscription]:
    """daprd's merge: manifests in order, first per (pubsub, topic) kept; an app subscription
    for the same pubsub and topic replaces it in place; subscriptions with no route dropped."""
    merged: list[Subscription] = []
    position: dict[tuple[str, str], int] = {}
    for subscription in declared:
        key = (subscription.pubsub, subscription.topic)
        if key not in position:
            position[key] = len(merged)
            merged.append(subscription)
    for subscription in from_app_:
        key = (subscription.pubsub, subscription.topic)
        if key in position:
            merged[position[key]] = subscription
        else:
            position[key] = len(merged)
            merged.append(subscription)
    return [subscription for subscription in merged if subscription.rules]
