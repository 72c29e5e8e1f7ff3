"""daprd's ``--config FILE``: a Dapr ``Configuration`` (``dapr run`` always passes
``~/.dapr/config.yaml``). Its ``spec.tracing`` becomes ``tracing:``; every other field is
named in one warning, never an error: it tunes something daprd does and this sidecar does not.

Fields from dapr ``pkg/config/configuration.go`` (``TracingSpec``: ``samplingRate`` a string,
``zipkin.endpointAddress``, ``otel.endpointAddress``/``protocol``/``isSecure``). As in daprd a
sampling rate of 0, or none, records no spans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from priority_pubsub.core.errors import ConfigError

_TRACING_KEYS = ("samplingRate", "zipkin", "otel")


def read_configuration(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The config keys the Configuration at ``path`` implies, and the warnings."""
    where = f"{path}: Configuration"
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read: {' '.join(str(exc).split())}") from None
    spec = document.get("spec") if isinstance(document, dict) else None
    if spec is None:
        return {}, []
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: spec: must be a mapping")
    warnings = [f"{where}: spec.{key} is ignored (priority-pubsub reads only spec.tracing)"
                for key in spec if key != "tracing"]
    tracing = spec.get("tracing")
    if tracing is None:
        return {}, warnings
    if not isinstance(tracing, dict):
        raise ConfigError(f"{where}: spec.tracing: must be a mapping")
    warnings += [f"{where}: spec.tracing.{key} is ignored" for key in tracing
                 if key not in _TRACING_KEYS]
    section = _tracing(tracing, where, warnings)
    return ({"tracing": section} if section else {}), warnings


def _tracing(tracing: dict[str, Any], where: str, warnings: list[str]) -> dict[str, Any]:
    rate = _sampling_rate(tracing.get("samplingRate"), where)
    otel, zipkin = tracing.get("otel") or {}, tracing.get("zipkin") or {}
    if not isinstance(otel, dict) or not isinstance(zipkin, dict):
        raise ConfigError(f"{where}: spec.tracing.otel and .zipkin: must be mappings")
    section: dict[str, Any] = {}
    if otel.get("endpointAddress"):
        section.update(_otel(otel, where))
    elif zipkin.get("endpointAddress"):
        section["zipkin_endpoint"] = str(zipkin["endpointAddress"])
    if otel.get("endpointAddress") and zipkin.get("endpointAddress"):
        warnings.append(f"{where}: spec.tracing.zipkin is ignored: spans go to otel (one "
                        "exporter here)")
    if not section:
        return {}
    if rate == 0:
        warnings.append(f"{where}: spec.tracing.samplingRate is 0 or unset: no spans are "
                        "recorded, as in daprd")
        return {}
    section["sample_ratio"] = rate
    return section


def _otel(otel: dict[str, Any], where: str) -> dict[str, Any]:
    protocol = str(otel.get("protocol") or "grpc").lower()
    if protocol not in ("grpc", "http"):
        raise ConfigError(f"{where}: spec.tracing.otel.protocol: {protocol}: grpc or http")
    address = str(otel["endpointAddress"])
    if "://" not in address:
        secure = str(otel.get("isSecure", False)).lower() in ("true", "1")
        address = f"{'https' if secure else 'http'}://{address}"
    return {"otlp_endpoint": address, "protocol": protocol}


def _sampling_rate(value: Any, where: str) -> float:
    if value is None or str(value).strip() == "":
        return 0.0
    try:
        rate = float(str(value))
    except ValueError:
        raise ConfigError(f"{where}: spec.tracing.samplingRate: not a number: {value!r}"
                          ) from None
    if not 0 <= rate <= 1:
        raise ConfigError(f"{where}: spec.tracing.samplingRate: {value}: from 0 to 1")
    return rate
