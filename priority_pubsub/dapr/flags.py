"""daprd's command-line flags, so a daprd command line changes only its binary name.

Flags that mean something here are read under daprd's names into config keys; a flag that
only tunes what daprd does and this sidecar does not serve is ignored with one warning naming
it; a flag whose omission would weaken security or change delivery is an error. Names and
defaults from dapr ``cmd/daprd/options/options.go`` (docs/dapr/migration.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.source import add_to_section, section

IGNORED = frozenset({
    "--dapr-internal-grpc-port", "--dapr-internal-grpc-listen-address", "--dapr-public-port",
    "--dapr-public-listen-address", "--profile-port", "--enable-profiling",
    "--placement-host-address", "--scheduler-host-address", "--scheduler-job-streams",
    "--actors-service", "--reminders-service", "--control-plane-trust-domain",
    "--control-plane-namespace", "--sentry-request-jwt-audiences", "--allowed-origins",
    "--enable-api-logging", "--dapr-http-read-buffer-size", "--read-buffer-size",
    "--disable-builtin-k8s-secret-store", "--wait", "--app-health-port", "--version",
    "--build-info", "--metrics-push-enable", "--metrics-push-endpoint",
})
"""daprd flags that only tune what daprd does and this sidecar does not serve (actors,
placement, scheduler, profiling, its internal ports, API logging, read buffers, CORS): read
and ignored, one warning each naming the flag."""
REFUSED = {
    "--enable-mtls": "mTLS between sidecars is not offered here: traffic would go in clear",
    "--sentry-address": "no certificates come from Sentry here: traffic would go in clear",
    "--control-plane-address": "no control plane is contacted here (its Components, "
                               "Subscriptions and Configurations would be missed)",
    "--unix-domain-socket": "the API listens on TCP only; the app would not find it",
}
"""Flags whose silent omission would weaken security or change delivery: an error."""
BOOLEAN = frozenset({"--enable-mtls", "--log-as-json", "--enable-metrics", "--app-ssl",
                     "--enable-profiling", "--enable-api-logging", "--wait", "--version",
                     "--build-info", "--disable-builtin-k8s-secret-store",
                     "--metrics-push-enable"})
"""pflag booleans: ``--flag`` is true, ``--flag=false`` false; never take the next word."""
MAPPED = frozenset({"--components-path", "--log-as-json", "--metrics-port", "--enable-metrics",
                    "--metrics-listen-address", "--app-channel-address",
                    "--dapr-listen-addresses", "--dapr-block-shutdown-duration", "--mode",
                    "--app-ssl", "--dapr-http-max-request-size"})
"""daprd flags read from the extra arguments into ``DaprdFlags.extra``."""


@dataclass
class DaprdFlags:
    """The daprd flags given on the command line (None = not given)."""

    app_id: str | None = None
    app_port: int | None = None
    app_protocol: str | None = None
    resources_path: list[str] = field(default_factory=list)
    app_max_concurrency: int | None = None
    graceful_shutdown_s: float | None = None
    log_level: str | None = None
    disable_init_endpoints: list[str] = field(default_factory=list)
    health: dict[str, Any] = field(default_factory=dict)
    dapr_http_port: int | None = None
    dapr_grpc_port: int | None = None
    max_body_size: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    """The daprd flags of ``MAPPED`` given, by name (``parse_extra``)."""
    ignored: list[str] = field(default_factory=list)
    """Flags of ``IGNORED`` given: one warning each."""

    @property
    def given(self) -> bool:
        return bool(self.app_id or self.resources_path or self.app_port is not None
                    or self.extra.get("--components-path"))

    def _bool(self, name: str) -> bool | None:
        if name not in self.extra:
            return None
        return self.extra[name].strip().lower() not in ("false", "0", "f")

    def apply(self, raw: dict[str, Any]) -> list[str]:
        """Write the flags into the raw config (flags win: they are the most specific);
        return warnings for flags read but not honoured. A section the config wrote as
        anything but a mapping is left as written, for validation to name."""
        scheme = self._app_scheme()
        self._refuse_unsafe()
        dapr: dict[str, Any] = {}
        resources = [*self.resources_path, *filter(None, [self.extra.get("--components-path")])]
        if resources:
            dapr["resources_path"] = resources
        if self.app_id:
            dapr["app_id"] = self.app_id
        if "subscribe" in self.disable_init_endpoints:
            dapr["programmatic_subscriptions"] = False
        if dapr:
            add_to_section(raw, "dapr", dapr)
        host = self.extra.get("--app-channel-address") or "127.0.0.1"
        if self.app_port is not None:
            add_to_section(raw, "app", {"url": f"{scheme}://{host}:{self.app_port}"})
        elif self.given and not section(raw, "app").get("url"):
            add_to_section(raw, "app", {"push": False})  # daprd with no app
        self._apply_ops_and_logs(raw)
        # daprd's -1 (what `dapr run` and the injector pass by default) means no limit: the
        # configured concurrency stays; so do the defaults for the other negative values
        if self.app_max_concurrency is not None and self.app_max_concurrency > 0:
            raw["concurrency"] = self.app_max_concurrency
        if self.log_level is not None:
            add_to_section(raw, "log", {"level": self.log_level})
        if self.graceful_shutdown_s is not None and self.graceful_shutdown_s >= 0:
            add_to_section(raw, "shutdown", {"grace_s": self.graceful_shutdown_s})
        warnings = self._apply_publish_api(raw)
        warnings += [f"daprd flag {name} is ignored: it tunes what daprd does and "
                     "priority-pubsub does not serve" for name in self.ignored]
        if (health := self._app_health()) is not None:
            add_to_section(raw, "app", {"health": health})
            return warnings
        return warnings + [
            f"{name} has no effect without --enable-app-health-check (as in daprd)"
            for name in self.health if name != "--enable-app-health-check"]

    def _app_scheme(self) -> str:
        """The app URL's scheme: daprd's ``--app-protocol`` (http, https, grpc; h2c and grpcs
        are not offered) and the deprecated ``--app-ssl`` (https for an HTTP app)."""
        protocol = self.app_protocol or "http"
        if self._bool("--app-ssl"):
            if protocol not in ("http", "https"):
                raise ConfigError(f"--app-ssl with --app-protocol {protocol}: TLS to a gRPC app "
                                  "is not offered here (the app would be called in clear)")
            protocol = "https"
        if protocol not in ("http", "https", "grpc"):
            raise ConfigError(f"--app-protocol {protocol}: only http, https and grpc are "
                              "supported")
        return protocol

    def _refuse_unsafe(self) -> None:
        mode = self.extra.get("--mode", "standalone")
        if mode not in ("standalone", "kubernetes"):
            raise ConfigError(f"--mode {mode}: daprd's modes are standalone and kubernetes")
        if mode == "kubernetes" and not self.resources_path and not self.extra.get(
                "--components-path"):
            raise ConfigError("--mode kubernetes without --resources-path: the Components and "
                              "Subscriptions would come from the Kubernetes API, which this "
                              "sidecar does not read (mount them and give --resources-path)")

    def _apply_ops_and_logs(self, raw: dict[str, Any]) -> None:
        """``--metrics-port``/``--metrics-listen-address`` move the ops server (metrics and
        the sidecar's own health; daprd's ``/v1.0/healthz`` stays on the API port);
        ``--enable-metrics=false`` drops ``/metrics``; ``--log-as-json`` JSON logs, else
        text, as daprd (a ``log.format`` in the config file wins over the default);
        ``--dapr-block-shutdown-duration`` as ``shutdown.block_s``."""
        server: dict[str, Any] = {}
        if (port := self.extra.get("--metrics-port")) is not None:
            server["port"] = _int_flag("--metrics-port", port)
        if (address := self.extra.get("--metrics-listen-address")) is not None:
            server["host"] = address
        if self._bool("--enable-metrics") is False:
            server["metrics"] = False
        if server:
            add_to_section(raw, "server", server)
        as_json = self._bool("--log-as-json")
        if as_json is not None or (self.given and "format" not in section(raw, "log")):
            add_to_section(raw, "log", {"format": "json" if as_json else "console"})
        if (block := self.extra.get("--dapr-block-shutdown-duration")) is not None:
            from priority_pubsub.dapr.redis_kind import go_duration_s

            try:
                seconds = go_duration_s("--dapr-block-shutdown-duration", block)
            except ConfigError:
                raise ConfigError(f"--dapr-block-shutdown-duration {block}: not a duration "
                                  "(daprd's: 30s, 1m)") from None
            add_to_section(raw, "shutdown", {"block_s": seconds})

    def _app_health(self) -> dict[str, Any] | None:
        """daprd's app health flags as ``app.health``; daprd's units: the probe interval in
        seconds, the probe timeout in milliseconds; path ``/healthz`` unless given."""
        if not self.health.get("--enable-app-health-check"):
            return None
        health: dict[str, Any] = {"path": self.health.get("--app-health-check-path") or "/healthz"}
        if (interval := self.health.get("--app-health-probe-interval")) is not None:
            health["interval_s"] = interval
        if (timeout := self.health.get("--app-health-probe-timeout")) is not None:
            health["timeout_s"] = timeout / 1000
        if (threshold := self.health.get("--app-health-threshold")) is not None:
            health["threshold"] = threshold
        return health

    def _apply_publish_api(self, raw: dict[str, Any]) -> list[str]:
        """daprd's API flags onto ``publish_api``: a port flag turns the API on, as daprd
        always serves it (the other port keeps daprd's default); ``--max-body-size`` alone
        leaves it off, with a warning."""
        api: dict[str, Any] = {}
        warnings: list[str] = []
        if (addresses := self.extra.get("--dapr-listen-addresses")) is not None:
            hosts = [part.strip() for part in addresses.split(",") if part.strip()]
            api["host"] = hosts[0] if hosts else "127.0.0.1"
            if len(hosts) > 1:
                warnings.append(f"--dapr-listen-addresses {addresses}: the API listens on the "
                                f"first address only ({hosts[0]})")
        if self.max_body_size is None and "--dapr-http-max-request-size" in self.extra:
            megabytes = _int_flag("--dapr-http-max-request-size",
                                  self.extra["--dapr-http-max-request-size"])
            if megabytes > 0:
                self.max_body_size = f"{megabytes}Mi"
        if self.dapr_http_port is not None:
            api["http_port"] = self.dapr_http_port
        if self.dapr_grpc_port is not None:
            api["grpc_port"] = self.dapr_grpc_port
        publisher_only = section(raw, "app").get("push") is False
        enabled = bool(api) or raw.get("publish_api") is not None or publisher_only
        if self.max_body_size is not None:
            if not enabled:
                return [*warnings, "--max-body-size is read but not honoured: the publish API "
                        "is off (give --dapr-http-port or a publish_api: section)"]
            api["max_body_bytes"] = parse_quantity("--max-body-size", self.max_body_size)
        if enabled:  # daprd always serves its API; a publisher-only sidecar needs it
            add_to_section(raw, "publish_api", api)
        return warnings


_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_QUANTITY_FACTORS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                     "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                     "Pi": 2**50, "Ei": 2**60}


def parse_quantity(flag: str, text: str) -> int:
    """A size as daprd reads ``--max-body-size``: a Kubernetes quantity (``4Mi`` = 4 MiB,
    ``4M`` = 4,000,000, ``4194304`` bytes; k8s ``apimachinery`` ``resource.Quantity``),
    rounded up to whole bytes."""
    match = _QUANTITY.match(text.strip())
    try:
        if match is None:
            raise InvalidOperation
        value = Decimal(match.group(1)) * _QUANTITY_FACTORS[match.group(2)]
    except InvalidOperation:
        raise ConfigError(f"{flag} {text}: not a size (daprd's units: 4Mi, 512Ki, 4M or "
                          "bytes)") from None
    if value < 1:
        raise ConfigError(f"{flag} {text}: must be at least one byte")
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def _int_flag(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{flag} {text}: not a number") from None


def parse_extra(arguments: list[str]) -> tuple[dict[str, str], list[str]]:
    """The daprd flags the command does not declare itself, read as daprd's pflag reads them
    (``--flag value``, ``--flag=value``, a boolean alone is true; ``-flag`` as ``--flag``):
    the mapped ones by name, and the names of the ignored ones. A flag of ``REFUSED`` or an
    unknown argument is a ``ConfigError``."""
    mapped: dict[str, str] = {}
    ignored: list[str] = []
    words = iter(arguments)
    for word in words:
        name, has_value, value = word.partition("=")
        if name.startswith("-") and not name.startswith("--"):
            name = "-" + name
        if name not in MAPPED | IGNORED | REFUSED.keys():
            raise ConfigError(f"unknown option or argument: {word}")
        if not has_value:
            value = "true" if name in BOOLEAN else next(words, "")
        if name in REFUSED and (name not in BOOLEAN or value.lower() not in ("false", "0")):
            raise ConfigError(f"daprd flag {name} cannot be honoured: {REFUSED[name]}")
        if name in MAPPED:
            mapped[name] = value
        elif name in IGNORED and name not in ignored:
            ignored.append(name)
    return mapped, ignored
