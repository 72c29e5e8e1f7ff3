"""daprd's command-line flags, so a daprd command line changes only its binary name.

Flags that mean something here are read under daprd's names into config keys; a daprd flag
that means nothing to this sidecar (it serves no Dapr API, no actors, no mTLS...) is a clear
error naming it. Names from daprd's ``--help`` (dapr ``cmd/daprd/options/options.go``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from priority_pubsub.core.errors import ConfigError

DAPRD_ONLY = frozenset({
    "--dapr-internal-grpc-port", "--dapr-public-port",
    "--dapr-listen-addresses", "--dapr-public-listen-address", "--profile-port",
    "--enable-profiling", "--metrics-port", "--enable-metrics", "--metrics-listen-address",
    "--placement-host-address", "--scheduler-host-address", "--control-plane-address",
    "--sentry-address", "--enable-mtls", "--mode", "--kubernetes-namespace",
    "--components-path", "--log-as-json", "--enable-api-logging",
    "--app-ssl", "--app-channel-address", "--dapr-http-max-request-size",
    "--dapr-http-read-buffer-size", "--read-buffer-size",
    "--unix-domain-socket", "--disable-builtin-k8s-secret-store", "--dapr-block-shutdown-duration",
    "--app-max-concurrency-per-topic", "--max-concurrency", "--allowed-origins",
    "--trust-anchors-file", "--trust-domain", "--wait",
})
"""Flags daprd has and this sidecar does not: each would silently do nothing here."""


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

    @property
    def given(self) -> bool:
        return bool(self.app_id or self.resources_path or self.app_port is not None)

    def apply(self, raw: dict[str, Any]) -> list[str]:
        """Write the flags into the raw config (flags win: they are the most specific);
        return warnings for flags read but not honoured."""
        if self.app_protocol not in (None, "http", "grpc"):
            raise ConfigError(f"--app-protocol {self.app_protocol}: only http and grpc are "
                              "supported")
        dapr = dict(raw.get("dapr") or {})
        if self.resources_path:
            dapr["resources_path"] = list(self.resources_path)
        if self.app_id:
            dapr["app_id"] = self.app_id
        if "subscribe" in self.disable_init_endpoints:
            dapr["programmatic_subscriptions"] = False
        if dapr:
            raw["dapr"] = dapr
        if self.app_port is not None:
            scheme = "grpc" if self.app_protocol == "grpc" else "http"
            raw["app"] = {**(raw.get("app") or {}),
                          "url": f"{scheme}://127.0.0.1:{self.app_port}"}
        if self.app_max_concurrency is not None:
            raw["concurrency"] = self.app_max_concurrency
        if self.log_level is not None:
            raw["log"] = {**(raw.get("log") or {}), "level": self.log_level}
        if self.graceful_shutdown_s is not None:
            raw["shutdown"] = {**(raw.get("shutdown") or {}), "grace_s": self.graceful_shutdown_s}
        warnings = self._apply_publish_api(raw)
        if (health := self._app_health()) is not None:
            raw["app"] = {**(raw.get("app") or {}), "health": health}
            return warnings
        return warnings + [
            f"{name} has no effect without --enable-app-health-check (as in daprd)"
            for name in self.health if name != "--enable-app-health-check"]

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
        if self.dapr_http_port is not None:
            api["http_port"] = self.dapr_http_port
        if self.dapr_grpc_port is not None:
            api["grpc_port"] = self.dapr_grpc_port
        enabled = bool(api) or raw.get("publish_api") is not None
        if self.max_body_size is not None:
            if not enabled:
                return ["--max-body-size is read but not honoured: the publish API is off "
                        "(give --dapr-http-port or a publish_api: section)"]
            api["max_body_bytes"] = parse_quantity("--max-body-size", self.max_body_size)
        if api:
            raw["publish_api"] = {**(raw.get("publish_api") or {}), **api}
        return []


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


def reject_unknown(extra: list[str]) -> None:
    """Arguments the command did not declare: a daprd-only flag is named as such."""
    for argument in extra:
        name = argument.split("=", 1)[0]
        if name in DAPRD_ONLY:
            raise ConfigError(f"daprd flag {name} means nothing to priority-pubsub (it replaces "
                              "daprd's subscriber only): remove it")
        raise ConfigError(f"unknown option or argument: {argument}")
