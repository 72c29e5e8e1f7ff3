"""daprd's command-line flags, so a daprd command line changes only its binary name.

Flags that mean something here are read under daprd's names into config keys; a daprd flag
that means nothing to this sidecar (it serves no Dapr API, no actors, no mTLS...) is a clear
error naming it. Names from daprd's ``--help`` (dapr ``cmd/daprd/options/options.go``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from priority_pubsub.errors import ConfigError

DAPRD_ONLY = frozenset({
    "--dapr-http-port", "--dapr-grpc-port", "--dapr-internal-grpc-port", "--dapr-public-port",
    "--dapr-listen-addresses", "--dapr-public-listen-address", "--profile-port",
    "--enable-profiling", "--metrics-port", "--enable-metrics", "--metrics-listen-address",
    "--placement-host-address", "--scheduler-host-address", "--control-plane-address",
    "--sentry-address", "--enable-mtls", "--mode", "--kubernetes-namespace",
    "--components-path", "--log-as-json", "--enable-api-logging",
    "--app-ssl", "--app-channel-address", "--dapr-http-max-request-size",
    "--max-body-size", "--dapr-http-read-buffer-size", "--read-buffer-size",
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
        return [f"{name} is read but not honoured yet (the app's health does not gate delivery)"
                for name in self.health]


def reject_unknown(extra: list[str]) -> None:
    """Arguments the command did not declare: a daprd-only flag is named as such."""
    for argument in extra:
        name = argument.split("=", 1)[0]
        if name in DAPRD_ONLY:
            raise ConfigError(f"daprd flag {name} means nothing to priority-pubsub (it replaces "
                              "daprd's subscriber only): remove it")
        raise ConfigError(f"unknown option or argument: {argument}")
