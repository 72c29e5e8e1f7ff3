"""A Dapr ``Resiliency`` manifest's policy for delivering this app's events, as settings.

daprd applies to each pub/sub delivery (component to app) the policy of the component's
*inbound* target, ``spec.targets.components.<pubsub>.inbound`` (Dapr docs "Resiliency
policies", "inbound": pub/sub and bindings to the app). Its named policies map onto this
sidecar's settings, config.yaml winning over them (the caller merges config.yaml last):

- ``retry`` (``spec.policies.retries.<name>``): ``maxRetries`` N -> ``retry.max_attempts``
  N + 1 (the first attempt plus N retries; -1, "forever", keeps the default with a warning);
  ``policy: constant`` waits ``duration`` (default 5s) -> ``initial_delay_s`` = ``max_delay_s``;
  ``policy: exponential`` grows from daprd's 500ms to ``maxInterval`` (default 60s) ->
  ``initial_delay_s: 0.5``, ``max_delay_s``. daprd retries in-process with a 1.5 multiplier and
  jitter; here the broker redelivers, doubling — the same bounds.
- ``timeout`` (``spec.policies.timeouts.<name>``, a Go duration) -> ``app.timeout_s``.
- ``circuitBreaker`` (``spec.policies.circuitBreakers.<name>``): ``trip:
  consecutiveFailures >= N`` -> ``app.circuit_breaker.consecutive_failures`` N, ``timeout``
  (how long it stays open, default 60s) -> ``open_s``; ``maxRequests`` and ``interval`` are
  warned about (one message is let through half-open, and the count never resets by time).

A ``targets.apps.<app-id>`` entry is daprd's policy for *service invocation* of that app, not
for pub/sub delivery, so it is warned about and not applied; so is anything else the sidecar
does not do (actors, outbound, other components, ``matching``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.manifests import Manifest, string_list

DAPRD_EXPONENTIAL_INITIAL_S = 0.5
"""daprd's exponential retry starts at 500ms (dapr ``pkg/resiliency`` ``retry.DefaultConfig``)."""
_DEFAULT_CONSTANT_S = 5.0
_DEFAULT_MAX_INTERVAL_S = 60.0
_GO_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_RETRY_KEYS = frozenset({"policy", "duration", "maxInterval", "maxRetries"})
_BREAKER_KEYS = frozenset({"trip", "timeout"})
_BREAKER_TRIP = re.compile(r"consecutiveFailures\s*(>=|>)\s*([0-9]+)")
_DEFAULT_BREAKER_TIMEOUT_S = 60.0


@dataclass
class Resilience:
    """The settings the manifests imply and the warnings about what they hold besides."""

    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def resilience(manifests: Sequence[Manifest], component: str, app_id: str) -> Resilience:
    found = Resilience()
    for manifest in manifests:
        if manifest.kind != "Resiliency":
            continue
        where = f"{manifest.source}: Resiliency {manifest.name}"
        scopes = string_list(manifest.document.get("scopes"), f"{where}: scopes")
        if scopes and app_id not in scopes:
            continue
        _read(manifest.document, where, component, app_id, found)
    return found


def _read(document: Mapping[str, Any], where: str, component: str, app_id: str,
          found: Resilience) -> None:
    spec = _mapping(document.get("spec"), f"{where}: spec")
    policies = _mapping(spec.get("policies"), f"{where}: spec.policies")
    targets = _mapping(spec.get("targets"), f"{where}: spec.targets")
    for kind in targets:
        if kind not in ("apps", "components"):
            found.warnings.append(f"{where}: spec.targets.{kind} is read but not honoured")
    apps = _mapping(targets.get("apps"), f"{where}: spec.targets.apps")
    if app_id in apps:
        found.warnings.append(
            f"{where}: spec.targets.apps.{app_id} is daprd's service-invocation policy, not "
            f"pub/sub delivery's: not applied (use spec.targets.components.{component}.inbound)")
    components = _mapping(targets.get("components"), f"{where}: spec.targets.components")
    for name, target in components.items():
        path = f"spec.targets.components.{name}"
        if name != component:
            found.warnings.append(f"{where}: {path} is not this app's pub/sub: not used")
            continue
        entry = _mapping(target, f"{where}: {path}")
        if "outbound" in entry:
            found.warnings.append(f"{where}: {path}.outbound (publishing) is read but not "
                                  "honoured")
        inbound = _mapping(entry.get("inbound"), f"{where}: {path}.inbound")
        _apply(inbound, policies, f"{where}: {path}.inbound", found)


def _apply(target: Mapping[str, Any], policies: Mapping[str, Any], where: str,
           found: Resilience) -> None:
    for key in target:
        if key not in ("retry", "timeout", "circuitBreaker"):
            found.warnings.append(f"{where}.{key} is read but not honoured")
    if "timeout" in target:
        timeout = _policy(policies, "timeouts", target["timeout"], where)
        found.settings.setdefault("app", {})["timeout_s"] = go_duration_s(
            timeout, f"{where}: timeout {target['timeout']}")
    if "retry" in target:
        retry = _mapping(_policy(policies, "retries", target["retry"], where),
                         f"{where}: retry {target['retry']}")
        found.settings["retry"] = _retry(retry, f"{where}: retry {target['retry']}", found)
    if "circuitBreaker" in target:
        name = target["circuitBreaker"]
        breaker = _mapping(_policy(policies, "circuitBreakers", name, where),
                           f"{where}: circuitBreaker {name}")
        found.settings.setdefault("app", {})["circuit_breaker"] = _circuit_breaker(
            breaker, f"{where}: circuitBreaker {name}", found)


def _circuit_breaker(policy: Mapping[str, Any], where: str,
                     found: Resilience) -> dict[str, Any]:
    """daprd's breaker trips on its ``trip`` expression and stays open for ``timeout``
    (default 60s), then lets requests through half-open. Only the common trip
    ``consecutiveFailures >= N`` (or ``> N``) has a counterpart here:
    ``app.circuit_breaker.consecutive_failures``; ``timeout`` -> ``open_s``."""
    for key in policy:
        if key not in _BREAKER_KEYS:
            found.warnings.append(f"{where}: {key} is read but not honoured")
    trip = _BREAKER_TRIP.fullmatch(str(policy.get("trip", "consecutiveFailures >= 5")).strip())
    if trip is None:
        raise ConfigError(f"{where}: trip {policy.get('trip')!r}: only "
                          "'consecutiveFailures >= N' (or '> N') is supported here")
    failures = int(trip.group(2)) + (1 if trip.group(1) == ">" else 0)
    open_s = go_duration_s(policy["timeout"], f"{where}: timeout") \
        if "timeout" in policy else _DEFAULT_BREAKER_TIMEOUT_S
    return {"consecutive_failures": max(1, failures), "open_s": open_s}


def _retry(policy: Mapping[str, Any], where: str, found: Resilience) -> dict[str, Any]:
    for key in policy:
        if key not in _RETRY_KEYS:
            found.warnings.append(f"{where}: {key} is read but not honoured")
    kind = str(policy.get("policy") or "constant")
    if kind == "constant":
        delay = go_duration_s(policy.get("duration", "5s"), f"{where}: duration") \
            if "duration" in policy else _DEFAULT_CONSTANT_S
        settings: dict[str, Any] = {"initial_delay_s": delay, "max_delay_s": delay}
    elif kind == "exponential":
        cap = go_duration_s(policy["maxInterval"], f"{where}: maxInterval") \
            if "maxInterval" in policy else _DEFAULT_MAX_INTERVAL_S
        settings = {"initial_delay_s": min(DAPRD_EXPONENTIAL_INITIAL_S, cap), "max_delay_s": cap}
    else:
        raise ConfigError(f"{where}: policy: {kind!r} is not constant or exponential")
    retries = _integer(policy.get("maxRetries", -1), f"{where}: maxRetries")
    if retries < 0:
        found.warnings.append(f"{where}: maxRetries {retries} (retry forever) is not honoured: "
                              "retry.max_attempts keeps its value")
    else:
        settings["max_attempts"] = retries + 1
    return settings


def go_duration_s(value: object, where: str) -> float:
    """A Go ``time.ParseDuration`` string (``5s``, ``1m30s``, ``500ms``) in seconds."""
    text = str(value).strip()
    parts = _GO_DURATION_PART.findall(text)
    if not text or "".join(number + unit for number, unit in parts) != text:
        raise ConfigError(f"{where}: not a duration: {text!r} (e.g. 5s, 1m30s, 500ms)")
    return sum(float(number) * _GO_UNITS_S[unit] for number, unit in parts)


def _policy(policies: Mapping[str, Any], group: str, name: object, where: str) -> Any:
    named = _mapping(policies.get(group), f"{where}: spec.policies.{group}")
    if not isinstance(name, str) or name not in named:
        raise ConfigError(f"{where}: {name!r} is not in spec.policies.{group}")
    return named[name]


def _integer(value: object, where: str) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise ConfigError(f"{where}: not an integer: {value!r}") from None


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a mapping")
    return value
