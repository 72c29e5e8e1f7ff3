"""The one validated configuration model and its loader.

YAML is read with every key overridable from the environment as ``PRIORITY_PUBSUB_<KEY>``,
``__`` for nesting (``priority_pubsub.settings.source``), and validated by pydantic with
``extra="forbid"``. Any problem becomes one ``ConfigError`` line naming the key path; nothing
is silently dropped or "fixed".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from priority_pubsub.core.backoff import compute_backoff
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.redaction import CredentialUrl, SecretUrl, remember_secrets, secret_values
from priority_pubsub.settings.dapr import DaprConfig, dapr_manifest_kind
from priority_pubsub.settings.driver import DriverContext, DriverOptions
from priority_pubsub.settings.paths import anchor_relative_paths
from priority_pubsub.settings.plugins import driver_options_model, instantiate_transform
from priority_pubsub.settings.publish_api import PublishApiConfig
from priority_pubsub.settings.source import environment_overrides, merged, read_yaml_mapping
from priority_pubsub.settings.upload import UploadConfig

ENV_PREFIX = "PRIORITY_PUBSUB"
CONFIG_ENV = f"{ENV_PREFIX}_CONFIG"
REPORT_CLASS_ARCHIVE_ENV = f"{ENV_PREFIX}_REPORT_CLASS_ARCHIVE"
"""Not a key: the report's class archive (``analytics.spark.jvm``); the sidecar leaves it alone."""
DEFAULT_CONFIG_PATH = "config.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class RateConfig(_Strict):
    """``queues[].rate``: a token bucket per replica (docs/long-tasks.md#rate-per-queue). The
    queue is taken from only while the bucket holds a whole token, one per message, and a
    receive asks for at most the whole tokens it holds: nothing received is handed back for
    the rate, and the pick goes on to the next queue meanwhile."""

    per_s: float = Field(gt=0, le=1_000_000)
    """Messages per second this replica takes from the queue at most, on average (a fleet of
    N replicas: N times it)."""
    burst: int = Field(default=1, ge=1, le=1_000_000)
    """The bucket's size: how many messages it may take at once after a quiet spell."""


class QueueConfig(_Strict):
    name: str = Field(min_length=1)
    """The broker's name for it: an SQS queue, a Pub/Sub subscription, a Service Bus queue or
    ``topic/subscription``, a RabbitMQ queue (or topic), a Redis stream. Listed highest
    priority first: a queue's index is its priority (0 = highest)."""
    weight: int = Field(default=1, ge=1, le=10_000)
    """``scheduling: weighted``: the queue's share of free workers among non-empty queues."""
    route: str = ""
    """Appended to ``app.url`` for this queue's deliveries (``/low``)."""
    reserve: int = Field(default=0, ge=0, le=4096)
    """Workers kept for this queue: a lower queue may not take them while unused
    (docs/long-tasks.md)."""
    max_concurrency: int | None = Field(default=None, ge=1, le=4096)
    """At most this many of this queue's messages at the app at once; None: no own limit."""
    slots: int = Field(default=1, ge=1, le=4096)
    """Slots of ``concurrency`` one of this queue's messages occupies while it runs (a heavy
    task: 2 takes two of the app's places). It is taken only when that many are free; its
    ``reserve`` keeps ``reserve x slots``; ``max_concurrency`` still counts messages
    (docs/long-tasks.md)."""
    rate: RateConfig | None = None
    """At most ``per_s`` messages a second from this queue, ``burst`` at once, per replica
    (``{per_s: 2, burst: 1}``); None: no rate limit."""
    max_wait_s: float | None = Field(default=None, gt=0, le=31_536_000)
    """Starvation bound: untried this long, the queue gets one try ahead of higher ones."""
    wait_slo_s: float | None = Field(default=None, gt=0, le=86_400)
    """Target wait for ``priority_pubsub_workers_needed``; None: that gauge is off."""
    timeout_s: float | None = Field(default=None, gt=0)
    """How long the app may take to answer one of this queue's deliveries; None:
    ``app.timeout_s``. Past it the request is cancelled (the HTTP connection closed, the gRPC
    call cancelled), the worker is free at once and the message is retried with reason
    ``timeout`` (a counted attempt): a hung task holds its worker this long, not the global
    timeout (docs/long-tasks.md)."""
    paused: bool = False
    """True: no replica takes from this queue (what it holds finishes); set and cleared by a
    live reload, so one ConfigMap edit pauses it fleet-wide (docs/operations/reload.md). An
    operator's pause from the monitor is this replica's alone; either one holds the queue."""

    @model_validator(mode="after")
    def _limit_holds_the_reserve(self) -> QueueConfig:
        if self.max_concurrency is not None and self.max_concurrency < self.reserve:
            raise ValueError(f"queue {self.name!r}: max_concurrency {self.max_concurrency} "
                             f"is below its reserve {self.reserve}")
        return self

    @field_validator("route")
    @classmethod
    def _route_is_a_path(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value


class DriverConfig(BaseModel):
    """``type`` picks the driver; the other keys are validated by that driver's options model.

    After ``load_config`` / ``validate_config`` the extra keys hold the *validated* values
    (secrets as ``SecretStr``), so dumping the config prints no secret.
    """

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)

    type: str = "local"
    """The driver: ``local``, ``sqs``, ``gcp_pubsub``, ``azure_servicebus``, ``rabbitmq``, ``redis``
    or a plugin's entry-point name."""

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class HealthConfig(_Strict):
    """``app.health``: how the app's health is probed (as daprd's ``--app-health-*`` flags).

    Without ``path`` the probe is a TCP connect to ``app.url``'s host and port; with it, an
    HTTP GET of that path on the same host and port (not under ``app.url``'s path) that must
    answer 2xx. While the app is up the probe runs every ``interval_s``; ``threshold`` failures
    in a row mark it down. While it is down the probe runs every ``interval_s`` until it passes.
    """

    path: str | None = None
    """Probe with an HTTP GET of this path on the app's host and port (2xx = healthy); without
    it, a TCP connect."""
    interval_s: float = Field(default=5, gt=0, le=3600)
    """Seconds between probes."""
    timeout_s: float = Field(default=0.5, gt=0, le=60)
    """How long one probe may take."""
    threshold: int = Field(default=3, ge=1, le=1000)
    """Failed probes in a row that mark the app down (deliveries pause)."""

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value


TCP_GATE = HealthConfig(interval_s=0.5, timeout_s=0.5, threshold=1)
"""Without ``app.health``: a TCP connect, probed only while the app is down (before the first
delivery and after a delivery could not connect), every 0.5 s as daprd waits for the port."""


class CircuitBreakerConfig(_Strict):
    """``app.circuit_breaker``: after ``consecutive_failures`` retriable failures in a row
    (5xx, timeouts) deliveries stop for ``open_s``, then one message is let through."""

    consecutive_failures: int = Field(default=5, ge=1, le=100_000)
    """Retriable failures in a row (5xx, timeouts) that open the breaker."""
    open_s: float = Field(default=30, gt=0, le=86_400)
    """How long deliveries stop once it is open, before one message is let through."""


class TransformEntry(BaseModel):
    """A transform with options: ``{name: s3_claim_check, bucket: B, ...}``; the options are
    validated by the transform's own ``options_model``."""

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)

    name: str = Field(min_length=1)
    """The transform's entry-point name (``s3_claim_check``)."""

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


APP_URL_SCHEMES = ("http://", "https://", "grpc://")


class AppConfig(_Strict):
    url: CredentialUrl = SecretUrl("http://127.0.0.1:8000/tasks")
    """``http(s)://`` delivers CloudEvents over HTTP; ``grpc://host:port`` calls Dapr's
    ``AppCallback`` service (apps built with dapr-ext-grpc, ``--app-protocol grpc``). May carry
    ``user:password@`` (basic auth): printed with the password masked."""
    timeout_s: float = Field(default=3600, gt=0)
    """How long the app may take to answer one delivery (a queue's ``timeout_s`` overrides it);
    then the request is cancelled and the message retried with reason ``timeout`` (the lease is
    kept alive meanwhile)."""
    delivery: Literal["cloudevent", "raw"] = "cloudevent"
    """``cloudevent``: a structured CloudEvent 1.0 (as daprd); ``raw``: the transformed body as is,
    with its content type."""
    fatal_codes: tuple[int, ...] = (400, 422)
    """App status codes that dead-letter a message at once, never retried."""
    api_token: SecretStr = SecretStr("")
    """Sent as the ``dapr-api-token`` header when set (a secret)."""
    max_response_bytes: int = Field(default=65_536, ge=1024)
    """How much of the app's answer is read."""
    pubsub_name: str = Field(default="pubsub", min_length=1)
    """Native mode: the ``pubsubname`` the app sees (gRPC ``pubsub_name``) and the name the
    publish API answers to. Dapr mode uses the component's name."""
    health: HealthConfig | None = None
    """None: TCP connect gate only (see ``TCP_GATE``)."""
    circuit_breaker: CircuitBreakerConfig | None = None
    """None: no circuit breaker (daprd has none on the app channel unless configured)."""
    push: bool = True
    """False: there is no app to push to (daprd without ``--app-port``): the publish API,
    metadata and streaming subscriptions are served, nothing is delivered to ``url``."""

    @property
    def health_probe(self) -> HealthConfig:
        return self.health or TCP_GATE

    @model_validator(mode="after")
    def _health_path_is_http(self) -> AppConfig:
        if self.is_grpc and self.health is not None and self.health.path is not None:
            raise ValueError("app.health.path is for HTTP apps: a grpc:// app is probed with "
                             "AppCallbackHealthCheck (leave path out)")
        return self

    @field_validator("url")
    @classmethod
    def _app_url(cls, value: SecretUrl) -> SecretUrl:
        url = value.get_secret_value()
        if not url.startswith(APP_URL_SCHEMES):
            raise ValueError("must be an http://, https:// or grpc://host:port URL")
        if url.startswith("grpc://"):
            from priority_pubsub.settings.grpc_address import grpc_target

            grpc_target(url)  # raises ValueError naming what is wrong
            return value
        return SecretUrl(url.rstrip("/") if url.count("/") > 3 else url)

    @property
    def is_grpc(self) -> bool:
        return self.url.get_secret_value().startswith("grpc://")

    @field_validator("fatal_codes")
    @classmethod
    def _http_codes(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        bad = [code for code in value if not 100 <= code <= 599]
        if bad:
            raise ValueError(f"not HTTP status codes: {bad}")
        if any(200 <= code < 300 for code in value):
            raise ValueError("a 2xx code cannot be fatal")
        return value


class RetryConfig(_Strict):
    max_attempts: int = Field(default=10, ge=1)
    """Attempts (counted by the broker) after which a retry is dead-lettered instead."""
    initial_delay_s: float = Field(default=1, ge=0)
    """The first retry's delay; it doubles per attempt."""
    max_delay_s: float = Field(default=600, ge=0)
    """The longest retry delay."""
    max_uncounted_returns: int = Field(default=100, ge=0, le=1_000_000)
    """How often one message may be handed back uncounted (app unreachable, paused, busy)
    before such returns count toward ``retry.max_attempts``: no message cycles forever."""

    @model_validator(mode="after")
    def _ordered(self) -> RetryConfig:
        if self.max_delay_s < self.initial_delay_s:
            raise ValueError("max_delay_s must be >= initial_delay_s")
        return self

    def delay_for(self, attempt: int) -> float:
        """Exponential backoff: ``initial * 2**(attempt-1)``, capped at ``max_delay_s``."""
        return compute_backoff(attempt, initial_s=self.initial_delay_s, max_s=self.max_delay_s)


class DeadLetterConfig(_Strict):
    queue: str = Field(min_length=1)
    """Where dead letters go (a queue, or a topic / stream, as the driver names it); must not
    be one of ``queues``. Without ``dead_letter``, a dead message is deleted (logged and
    journaled)."""


class LeaseConfig(_Strict):
    duration_s: float = Field(default=60, ge=1, le=43_200)
    """The lease a receive takes; extended every third of it while the app works."""


class ShutdownConfig(_Strict):
    mode: Literal["return", "finish"] = "return"
    """What a stop (SIGTERM) does with the deliveries in flight, once nothing new is taken.
    ``return``: they may finish for ``grace_s``, the rest go back to their queues at once (a
    counted retry). ``finish``: every delivery runs to its end or its own timeout
    (``queues[].timeout_s``, else ``app.timeout_s``, from its start; past it a retry with
    reason ``timeout``), leases kept alive meanwhile, then exit 0; ``grace_s`` does not apply,
    and ``GET /drain?wait=true`` on the ops server starts the same stop (a preStop hook's) and
    answers once nothing is in flight (docs/operations/fleet.md)."""
    grace_s: float = Field(default=30, ge=0)
    """``mode: return``: on SIGTERM, how long in-flight deliveries may finish before the rest
    is returned."""
    block_s: float = Field(default=0, ge=0)
    """daprd's ``--dapr-block-shutdown-duration``: after SIGTERM keep running (delivering and
    serving the publish API) this long, or until the app's health probe fails, then drain."""


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    """Address of the ops HTTP server (``/healthz``, ``/readyz``, ``/metrics``); ``0.0.0.0`` in a
    container."""
    port: int = Field(default=9464, ge=0, le=65535)
    """Its port."""
    metrics: bool = True
    """False (daprd's ``--enable-metrics=false``): no ``/metrics``; health stays served."""
    depth_interval_s: float = Field(default=15, gt=0)
    """How often queue depth is refreshed for ``priority_pubsub_queue_depth``."""
    capacity_window_s: float = Field(default=600, gt=0, le=86_400)
    """The sliding window of ``priority_pubsub_workers_needed`` (queues[].wait_slo_s)."""
    stall_after_s: float = Field(default=10, gt=0)
    """Event-loop lag after which ``/healthz`` reports the loop as stuck."""


SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where Kubernetes mounts a pod's service-account credentials (token, ca.crt, namespace)."""


class KubernetesConfig(_Strict):
    """What the sidecar writes to its own pod through the Kubernetes API (in-cluster
    credentials: ``KUBERNETES_SERVICE_HOST``/``PORT`` and the service-account files; the pod's
    name and namespace from the downward API, ``POD_NAME`` and ``NAMESPACE``). Off by default:
    it needs a token that may patch pods (the chart's ``scaleIn.deletionCost``)."""

    deletion_cost: bool = False
    """Keep this pod's ``controller.kubernetes.io/pod-deletion-cost`` at 0 while idle and 1000
    while a delivery is in flight, so a scale-in removes idle pods first. Patched only when
    idle/busy changes, at most once per 10 s; best-effort (a failed patch is logged and
    counted, never touches delivery; Kubernetes itself treats the cost as a hint)."""
    service_account_dir: Path = SERVICE_ACCOUNT_DIR
    """Where the service-account ``token``, ``ca.crt`` and ``namespace`` are read (the
    standard mount path; the token is read again for every request: projected tokens
    rotate)."""


class MonitorConfig(_Strict):
    """The live monitor page and its JSON API on the ops server (docs/operations/monitor.md).

    On and read-only by default. ``read_token`` protects reads (HTTP Basic password or
    Bearer); actions (pause, drain, requeue, delete) exist only with ``admin_token``."""

    enabled: bool = True
    """False: no ``/monitor`` page and no monitor API."""
    read_token: SecretStr | None = None
    """When set, reads need it (HTTP Basic password or Bearer token); a secret."""
    admin_token: SecretStr | None = None
    """Actions (pause, drain, requeue, delete) exist only with it; a secret."""
    refresh_s: float = Field(default=2, ge=0.2, le=60)
    """How often an open page asks for fresh figures."""
    sample_s: float = Field(default=10, ge=0.1, le=60)
    """How often the rates' and sparklines' counters are sampled (15 minutes are kept)."""


class JournalConfig(_Strict):
    path: Path = Path("./data/journal")
    """Directory of the delivery journal's JSONL files."""
    rotate_mb: float = Field(default=64, gt=0)
    """A journal file is rotated at this size."""
    fsync: Literal["none", "every_line"] = "none"
    """none: a line is the kernel's once written (survives a crash of the sidecar);
    every_line: also synced to disk before the next settle (survives power loss)."""
    upload: UploadConfig | None = None
    """Ship each closed file to S3, GCS or Azure Blob Storage, verified, then remove it
    locally (docs/operations/journal.md); off when omitted."""


class TracingConfig(_Strict):
    """OpenTelemetry export of one span per delivery attempt (docs/operations/tracing.md).

    Unset keys fall back to the standard ``OTEL_EXPORTER_OTLP_*`` environment variables."""

    otlp_endpoint: str | None = None
    """grpc: ``host:port`` or ``http(s)://host:port``; http: a URL (``/v1/traces`` added)."""
    protocol: Literal["grpc", "http"] | None = None
    """Default: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
    grpc."""
    zipkin_endpoint: str | None = None
    """A Zipkin collector URL (``http://host:9411/api/v2/spans``): spans go there through
    OpenTelemetry's Zipkin exporter instead of OTLP (daprd's ``tracing.zipkin``)."""
    sample_ratio: float | None = Field(default=None, ge=0, le=1)
    """Share of new traces recorded (a sampled parent is always followed). Default:
    ``OTEL_TRACES_SAMPLER_ARG``, else 1."""


class LogConfig(_Strict):
    level: Literal["debug", "info", "warning", "error"] = "info"
    """Log level (any case)."""
    format: Literal["json", "console"] = "json"
    """``json`` lines, or ``console`` for humans."""

    @field_validator("level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


class ReloadConfig(_Strict):
    """Live reload (docs/operations/reload.md): SIGHUP always reloads the config file;
    ``watch`` also reloads it when it changes (a ConfigMap update included)."""

    watch: bool = True
    """Watch the config file (and in Dapr mode the resources directories) and reload within
    a few seconds of a change; False: only SIGHUP reloads."""


class Settings(_Strict):
    """The whole sidecar configuration (docs/configuration.md)."""

    driver: DriverConfig = DriverConfig()
    """The broker: ``type`` and that driver's own keys."""
    queues: tuple[QueueConfig, ...] = ()
    """The queues to consume, highest priority first: at least one, but for a publisher-only
    sidecar (``app.push: false``) and in Dapr mode (the queues come from the Dapr resources)."""
    scheduling: Literal["strict", "weighted"] = "strict"
    """``strict``: the highest non-empty queue always wins; ``weighted``: free workers are shared
    by ``weight`` among non-empty queues (nobody starves)."""
    concurrency: int = Field(default=4, ge=1, le=4096)
    """Messages delivered at once: the app's capacity."""
    transforms: tuple[str | TransformEntry, ...] = ()
    """Plain names, or entries with options (``TransformEntry``), applied in order."""
    app: AppConfig = AppConfig()
    """The app: where and how deliveries are sent, its health and circuit breaker."""
    retry: RetryConfig = RetryConfig()
    """Backoff of retried messages and when they are dead-lettered."""
    dead_letter: DeadLetterConfig | None = None
    """Where dead letters go; without it, a dead message is deleted (logged and journaled)."""
    lease: LeaseConfig = LeaseConfig()
    """How long a received message stays leased to this sidecar."""
    shutdown: ShutdownConfig = ShutdownConfig()
    """Graceful stop."""
    server: ServerConfig = ServerConfig()
    """The ops HTTP server: health, readiness, metrics."""
    monitor: MonitorConfig = MonitorConfig()
    """The live monitor page and its JSON API on the ops server: on, read-only, by default."""
    journal: JournalConfig | None = None
    """One JSON line per settled attempt (the delivery report reads them); off when omitted."""
    log: LogConfig = LogConfig()
    """Logging."""
    kubernetes: KubernetesConfig = KubernetesConfig()
    """The pod's own Kubernetes object: its deletion cost (off unless set)."""
    reload: ReloadConfig = ReloadConfig()
    """Live reload: on SIGHUP, and when the config file changes (``watch``)."""
    tracing: TracingConfig | None = None
    """Off unless set here or ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` is in the environment."""
    event_loop: Literal["asyncio", "uvloop"] = "asyncio"
    """The event loop the sidecar runs on: ``asyncio``'s own, or ``uvloop``. uvloop holds
    2.4 MB more of the pod's memory and four more threads; side by side on the local driver
    it delivered no faster at 1 to 64 workers (``bench.event_loop``, docs/performance.md).
    Restart-only."""
    _driver_options: DriverOptions | None = PrivateAttr(default=None)
    dapr: DaprConfig | None = None
    """Dapr mode: queues, driver and routes come from the Dapr resources (priority_pubsub.dapr)."""
    publish_api: PublishApiConfig | None = None
    """daprd's publish API (HTTP and gRPC) for apps that publish; off unless present."""

    @model_validator(mode="after")
    def _distinct_queues(self) -> Settings:
        if not self.queues and self.app.push:
            raise ValueError("queues: at least one queue to deliver from (none only with "
                             "app.push: false, a publisher-only sidecar)")
        names = [q.name for q in self.queues]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"queues: duplicate names {duplicates}")
        if self.dead_letter and self.dead_letter.queue in names:
            raise ValueError("dead_letter.queue: must not be one of the consumed queues")
        return self

    @model_validator(mode="after")
    def _reserves_fit(self) -> Settings:
        """Reserves and slot costs must leave every queue room: a reserve holds ``reserve x
        slots`` slots, their sum must stay below ``concurrency``, and a queue's ``slots``
        must fit in ``concurrency`` beside the reserves above it (else it never runs)."""
        reserved = [q for q in self.queues if q.reserve]
        if self.queues and self.queues[-1].reserve:  # no queues: a publisher-only sidecar
            raise ValueError(f"queues: a reserve on the lowest queue {self.queues[-1].name!r} "
                             "means nothing (no queue below it to keep out)")
        too_heavy = [q for q in self.queues if q.slots > self.concurrency]
        if too_heavy:
            names = ", ".join(f"{q.name} {q.slots}" for q in too_heavy)
            raise ValueError(f"queues: slots ({names}) above concurrency {self.concurrency}")
        if sum(q.reserve * q.slots for q in reserved) >= self.concurrency:
            names = ", ".join(f"{q.name} {q.reserve}" + (f" x {q.slots} slots" if q.slots > 1
                                                         else "") for q in reserved)
            raise ValueError(f"queues: reserves ({names}) must sum below concurrency "
                             f"{self.concurrency}")
        above = 0
        for queue in self.queues:
            if queue.slots > self.concurrency - above:
                raise ValueError(f"queues: {queue.name!r} needs {queue.slots} slots, but the "
                                 f"reserves above it leave {self.concurrency - above} of "
                                 f"concurrency {self.concurrency}")
            above += queue.reserve * queue.slots
        return self

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(q.name for q in self.queues)

    def with_driver_of(self, other: Settings) -> Settings:
        """These settings with ``other``'s driver, its validated options included (Dapr mode's
        live reload: a component read again unchanged keeps what its templates gave at start,
        a ``{uuid}`` included)."""
        copied = self.model_copy(update={"driver": other.driver})
        copied._driver_options = other._driver_options
        return copied

    @property
    def driver_context(self) -> DriverContext:
        """What the driver is told about the deployment (and what its options are checked
        against: lease limits, queue names)."""
        return DriverContext(
            queues=self.queue_names,
            dead_letter_queue=self.dead_letter.queue if self.dead_letter else None,
            lease_duration_s=self.lease.duration_s,
        )

    @property
    def driver_options(self) -> DriverOptions:
        """The driver's validated options model (set by ``validate_config``)."""
        if self._driver_options is None:
            raise ConfigError("driver options not validated: use load_config/validate_config")
        return self._driver_options


def resolve_config_path(path: str | Path | None) -> Path:
    """``-c`` wins, then ``PRIORITY_PUBSUB_CONFIG``, then ``./config.yaml``."""
    return Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def load_config(path: str | Path | None = None) -> Settings:
    """Read, override from the environment, validate. Raises ``ConfigError`` (one line)."""
    config_path = resolve_config_path(path)
    raw = read_config_file(config_path)
    return validate_config(raw)


def validate_config(raw: dict[str, Any]) -> Settings:
    """The whole config, driver options and transforms included; every secret in it is
    remembered so logs and CLI errors mask it (``priority_pubsub.core.redaction``)."""
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    settings = _with_driver_options(settings)
    _validate_transforms(settings)
    remember_secrets(secret_values(settings))
    return settings


def refuse_misshapen_sections(raw: dict[str, Any]) -> None:
    """Refuse a section, or a mapping nested in one, written as anything but a mapping (a
    string, a number, a list; null where its model has no "off"), in the words validation
    uses: one line naming it and the model it expects.

    The raw config is read before it is validated (the environment and daprd's flags add keys
    to its sections, Dapr mode reads ``dapr`` and ``app``): a mistyped section would be a
    traceback there, or filled in and gone. So the file's sections, and the environment's,
    are checked as read, before anything else sees them; only shape errors are raised here
    (a partial config is missing other keys), the rest waits for ``validate_config``."""
    try:
        Settings.model_validate(raw)
    except ValidationError as exc:
        misshapen = [InitErrorDetails(type=error["type"], loc=error["loc"],
                                      input=error["input"], ctx=error.get("ctx", {}))
                     for error in exc.errors() if error["type"] == "model_type"
                     and all(isinstance(part, str) for part in error["loc"])]
        if misshapen:  # not under a list (queues.0): validation's union wording stays
            shapes = ValidationError.from_exception_data(exc.title, misshapen)
            raise ConfigError(describe_validation_error(shapes)) from None


def describe_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line per error would scroll; the first error, key path first, is what users fix."""
    first = exc.errors()[0]
    parts = [*(prefix.split(".") if prefix else []), *first["loc"]]
    path = ".".join(str(part) for part in parts)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path or 'config'}: {message}{more}"


def read_config_file(config_path: Path) -> dict[str, Any]:
    """The config file as a dict, environment overrides applied, not yet validated (Dapr
    mode merges daprd's flags into it first)."""
    if not config_path.is_file():
        raise ConfigError(f"config file not found: {config_path}")
    _refuse_dapr_manifest(config_path)
    not_keys = (CONFIG_ENV, REPORT_CLASS_ARCHIVE_ENV)
    written = read_yaml_mapping(config_path)
    overrides = environment_overrides(ENV_PREFIX, not_keys)
    refuse_misshapen_sections(written)  # before the environment can fill one in
    refuse_misshapen_sections(overrides)
    settings = merged(written, overrides)
    _secrets_verbatim_from_env(settings)
    anchor_relative_paths(settings, config_path.parent.resolve(), ENV_PREFIX)  # beside the file
    return settings


def _refuse_dapr_manifest(config_path: Path) -> None:
    kind = dapr_manifest_kind(config_path)
    if kind is not None:
        raise ConfigError(
            f"{config_path} is a Dapr {kind} manifest, not a priority-pubsub config: pass its "
            "directory as --resources-path DIR (with --app-id ID), or set dapr.resources_path"
        )


# Secrets are text: an environment value is parsed as TOML ("1234" an int, "1e5" a float);
# secrets' environment values are taken verbatim instead.
SECRET_KEYS = (
    ("app", "api_token"), ("driver", "connection_string"), ("driver", "url"),
    ("driver", "password"), ("publish_api", "api_token"),
)


def _secrets_verbatim_from_env(settings: dict[str, Any]) -> None:
    for section, key in SECRET_KEYS:
        raw = os.environ.get(f"{ENV_PREFIX}_{section.upper()}__{key.upper()}")
        if raw is not None and isinstance(settings.get(section, {}), dict):
            settings.setdefault(section, {})[key] = raw


def _with_driver_options(settings: Settings) -> Settings:
    """Validate the driver's options against its model, with the deployment as validation
    context (cross-field checks such as lease limits live in the options model), and keep the
    validated model: ``settings.driver`` then holds validated values (secrets typed)."""
    model = driver_options_model(settings.driver.type)
    try:
        options = model.model_validate(
            settings.driver.options(), context=settings.driver_context
        )
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, prefix="driver")) from None
    values = {name: getattr(options, name) for name in type(options).model_fields}
    driver = DriverConfig.model_construct(type=settings.driver.type, **values)
    validated = settings.model_copy(update={"driver": driver})
    validated._driver_options = options
    return validated


def _validate_transforms(settings: Settings) -> None:
    for index, entry in enumerate(settings.transforms):
        try:
            if isinstance(entry, str):
                instantiate_transform(entry, {})
            else:
                instantiate_transform(entry.name, entry.options())
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(exc, prefix=f"transforms.{index}")
                              ) from None
        except ConfigError as exc:
            raise ConfigError(f"transforms.{index}: {exc}") from None
