"""daprd's metadata answer (``GET /v1.0/metadata``, gRPC ``GetMetadata``): which app this is,
what it loaded, what it subscribes to and how it reaches the app.

Shaped as daprd shapes it: dapr ``pkg/api/universal/metadata.go`` (``GetMetadata``: the
fields, ``extended.daprRuntimeVersion``, health durations as Go's ``Duration.String``, no
health check path for a gRPC app) and ``pkg/api/http/metadata.go`` (``metadataResponse``: the
JSON keys, ``omitempty`` where daprd omits, ``subscriptions[*].rules`` as a flat list, the
subscription type and actor runtime status as enum names). The SDKs poll this before their
first call (the JavaScript SDK's ``DaprServer.start()``/``DaprClient`` for up to 60 s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from priority_pubsub import __version__
from priority_pubsub.dapr.manifests import RegisteredComponent
from priority_pubsub.dapr.subscriptions import APP_SOURCE, Subscription
from priority_pubsub.settings.config import HealthConfig, Settings

if TYPE_CHECKING:
    from dapr.proto.runtime.v1.metadata_pb2 import GetMetadataResponse

    from priority_pubsub.app.channel.streams import StreamHub
    from priority_pubsub.dapr.plan import DaprPlan

SubscriptionType = Literal["DECLARATIVE", "PROGRAMMATIC", "STREAMING"]
DAPRD_CHANNEL_ADDRESS = "127.0.0.1"
"""daprd's ``--app-channel-address`` default (``runtime.DefaultChannelAddress``)."""
_LIST_SOURCE = "ListTopicSubscriptions"


@dataclass(frozen=True, slots=True)
class SubscriptionView:
    """One subscription as the metadata API lists it."""

    pubsub: str
    topic: str
    rules: tuple[tuple[str, str], ...]
    """(match, path) pairs; match "" for the default route."""
    dead_letter_topic: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    type: SubscriptionType = "DECLARATIVE"

    @classmethod
    def of(cls, subscription: Subscription, kind: SubscriptionType | None = None
           ) -> SubscriptionView:
        """A Dapr subscription; its type follows where it came from unless ``kind`` is given."""
        from_app = subscription.source.startswith((APP_SOURCE, _LIST_SOURCE))
        return cls(subscription.pubsub, subscription.topic,
                   tuple((rule.match, rule.path) for rule in subscription.rules),
                   subscription.dead_letter_topic or "", dict(subscription.metadata),
                   kind or ("PROGRAMMATIC" if from_app else "DECLARATIVE"))

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"pubsubname": self.pubsub, "topic": self.topic}
        if self.metadata:
            body["metadata"] = dict(self.metadata)
        rules = [{k: v for k, v in (("match", match), ("path", path)) if v}
                 for match, path in self.rules]
        if rules:
            body["rules"] = rules
        body["deadLetterTopic"] = self.dead_letter_topic
        body["type"] = self.type
        return body


@dataclass(frozen=True, slots=True)
class AppConnection:
    port: int
    protocol: str
    channel_address: str
    max_concurrency: int
    health: HealthConfig | None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {key: value for key, value in (
            ("port", self.port), ("protocol", self.protocol),
            ("channelAddress", self.channel_address),
            ("maxConcurrency", self.max_concurrency)) if value}
        if self.health is not None:
            body["health"] = {key: value for key, value in self._health().items() if value}
        return body

    def _health(self) -> dict[str, Any]:
        assert self.health is not None
        return {"healthCheckPath": (self.health.path or "") if self.protocol == "http" else "",
                "healthProbeInterval": go_duration(self.health.interval_s),
                "healthProbeTimeout": go_duration(self.health.timeout_s),
                "healthThreshold": self.health.threshold}


@dataclass(frozen=True, slots=True)
class SidecarMetadata:
    """What the metadata API answers, but the streaming subscriptions, which come and go
    (``streams`` lists the open ones at the time of the call)."""

    app_id: str
    components: tuple[RegisteredComponent, ...]
    subscriptions: tuple[SubscriptionView, ...]
    app: AppConnection
    streams: Callable[[], Sequence[SubscriptionView]] = lambda: ()
    extended: dict[str, str] = field(default_factory=dict)
    """What the app or the CLI set (``PUT /v1.0/metadata/{key}``, ``SetMetadata``: ``dapr
    run`` stores its ``appPID``/``appCommand``), kept in memory as daprd keeps it."""

    def set(self, key: str, value: str) -> None:
        if key:  # daprd: an empty key is a no-op
            self.extended[key] = value

    def all_subscriptions(self) -> list[SubscriptionView]:
        return [*self.subscriptions, *self.streams()]

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.app_id, "runtimeVersion": __version__}
        if self.components:
            body["components"] = [
                {k: v for k, v in (("name", c.name), ("type", c.type), ("version", c.version))
                 if v} for c in self.components]
        body["extended"] = self._extended()
        if subscriptions := self.all_subscriptions():
            body["subscriptions"] = [s.as_json() for s in subscriptions]
        body["appConnectionProperties"] = self.app.as_json()
        body["actorRuntime"] = {"runtimeStatus": "DISABLED", "hostReady": False}
        if not body["id"]:
            del body["id"]
        return body

    def _extended(self) -> dict[str, str]:
        return {**self.extended, "daprRuntimeVersion": __version__}

    def as_proto(self) -> GetMetadataResponse:
        from dapr.proto.runtime.v1 import metadata_pb2 as pb

        app = self.app
        health = None
        if app.health is not None:
            health = pb.AppConnectionHealthProperties(
                health_check_path=app._health()["healthCheckPath"],
                health_probe_interval=go_duration(app.health.interval_s),
                health_probe_timeout=go_duration(app.health.timeout_s),
                health_threshold=app.health.threshold)
        return pb.GetMetadataResponse(
            id=self.app_id, runtime_version=__version__,
            extended_metadata=self._extended(),
            registered_components=[pb.RegisteredComponents(name=c.name, type=c.type,
                                                           version=c.version)
                                   for c in self.components],
            subscriptions=[pb.PubsubSubscription(
                pubsub_name=s.pubsub, topic=s.topic, metadata=s.metadata,
                dead_letter_topic=s.dead_letter_topic,
                rules=pb.PubsubSubscriptionRules(rules=[
                    pb.PubsubSubscriptionRule(match=match, path=path)
                    for match, path in s.rules]),
                type=pb.PubsubSubscriptionType.Value(s.type))
                for s in self.all_subscriptions()],
            app_connection_properties=pb.AppConnectionProperties(
                port=app.port, protocol=app.protocol, channel_address=app.channel_address,
                max_concurrency=app.max_concurrency, health=health),
            actor_runtime=pb.ActorRuntime(runtime_status=pb.ActorRuntime.DISABLED))


def go_duration(seconds: float) -> str:
    """``seconds`` as Go's ``time.Duration.String`` writes it: ``5s``, ``500ms``, ``1m30s``,
    ``1.5s``, ``0s`` (what daprd shows for the health probe interval and timeout)."""
    nanos = int(Decimal(str(seconds)) * 10**9)
    if nanos == 0:
        return "0s"
    if nanos < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if nanos >= size:
                return _trimmed(Decimal(nanos) / size) + unit
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    text = _trimmed(Decimal(rest) / 10**9) + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def _trimmed(value: Decimal) -> str:
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def describe(settings: Settings, plan: DaprPlan | None, app_id: str,
             streams: StreamHub | None = None) -> SidecarMetadata:
    """The metadata of this sidecar: in Dapr mode the components and subscriptions read; in
    native mode one pub/sub component named ``app.pubsub_name`` whose topics are the queues."""
    if plan is not None:
        components = plan.registered
        subscriptions = tuple(SubscriptionView.of(plan.subscriptions[topic])
                              for queue in plan.queues for topic in queue.topics)
    else:
        pubsub = settings.app.pubsub_name
        components = (RegisteredComponent(pubsub, f"pubsub.{settings.driver.type}", "v1"),)
        subscriptions = tuple(
            SubscriptionView(pubsub, queue.name, (("", queue.route or "/"),))
            for queue in settings.queues) if settings.app.push else ()
    if streams is None:
        return SidecarMetadata(app_id, components, subscriptions, app_connection(settings))

    def open_streams() -> list[SubscriptionView]:
        return [SubscriptionView(streams.pubsub_name, stream.topic, (),
                                 stream.dead_letter_topic, {}, "STREAMING")
                for stream in streams.streams()]

    return SidecarMetadata(app_id, components, subscriptions, app_connection(settings),
                           open_streams)


def app_connection(settings: Settings) -> AppConnection:
    """How the sidecar reaches the app (daprd's ``appConnectionConfig``); no app (a
    publisher-only sidecar) shows daprd's defaults without a port, as daprd does."""
    app = settings.app
    if not app.push:
        return AppConnection(0, "http", DAPRD_CHANNEL_ADDRESS, settings.concurrency, None)
    parts = urlsplit(app.url.get_secret_value())
    protocol = "grpc" if app.is_grpc else parts.scheme
    default_port = {"http": 80, "https": 443}.get(parts.scheme, 0)
    return AppConnection(parts.port or default_port, protocol, parts.hostname or "",
                         settings.concurrency, app.health)
