"""daprd's whole command line (dapr ``cmd/daprd/options/options.go``): the flags that mean
something here are mapped, the ones that only tune daprd warn once each, the ones whose
omission would weaken security or change delivery are refused; ``--config FILE`` naming a
Dapr Configuration sets ``tracing:`` (dapr ``pkg/config/configuration.go`` ``TracingSpec``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.configuration import read_configuration
from priority_pubsub.dapr.flags import DaprdFlags, parse_extra

DAPR_RUN_EXTRA = [
    "--metrics-port", "9091", "--placement-host-address", "localhost:50005",
    "--scheduler-host-address", "localhost:50006", "--components-path", "/res",
    "--log-as-json", "--enable-metrics=false", "--app-channel-address", "10.0.0.7",
    "--dapr-listen-addresses", "0.0.0.0", "--dapr-block-shutdown-duration", "1m30s",
    "--enable-api-logging", "--profile-port", "7777", "--allowed-origins", "*",
    "-dapr-internal-grpc-port", "50002", "--read-buffer-size=8Ki",
]


def _applied(extra: list[str], **given: Any) -> tuple[dict[str, Any], list[str]]:
    mapped, ignored = parse_extra(extra)
    raw: dict[str, Any] = {}
    warnings = DaprdFlags(**given, extra=mapped, ignored=ignored).apply(raw)
    return raw, warnings


def test_a_dapr_run_line_maps_what_means_something_and_warns_once_per_other_flag() -> None:
    raw, warnings = _applied(DAPR_RUN_EXTRA, app_id="shop", app_port=5001, dapr_http_port=3501)
    assert raw["dapr"] == {"resources_path": ["/res"], "app_id": "shop"}
    assert raw["app"]["url"] == "http://10.0.0.7:5001"
    assert raw["server"] == {"port": 9091, "metrics": False}
    assert raw["log"] == {"format": "json"}
    assert raw["shutdown"] == {"block_s": 90.0}
    assert raw["publish_api"] == {"host": "0.0.0.0", "http_port": 3501}
    named = [w.split()[2] for w in warnings]
    assert named == ["--placement-host-address", "--scheduler-host-address",
                     "--enable-api-logging", "--profile-port", "--allowed-origins",
                     "--dapr-internal-grpc-port", "--read-buffer-size"]


def test_without_log_as_json_logs_are_text_as_daprd_unless_the_config_says() -> None:
    raw, _ = _applied([], app_id="shop", app_port=5001)
    assert raw["log"] == {"format": "console"}
    mapped, ignored = parse_extra([])
    kept: dict[str, Any] = {"log": {"format": "json"}}
    DaprdFlags(app_id="shop", extra=mapped, ignored=ignored).apply(kept)
    assert kept["log"] == {"format": "json"}


@pytest.mark.parametrize(("extra", "expected"), [
    (["--enable-mtls"], "--enable-mtls cannot be honoured"),
    (["--sentry-address", "sentry:443"], "--sentry-address cannot be honoured"),
    (["--control-plane-address", "op:443"], "--control-plane-address cannot be honoured"),
    (["--unix-domain-socket", "/tmp"], "--unix-domain-socket cannot be honoured"),
    (["--shiny-new-flag", "1"], "unknown option or argument: --shiny-new-flag"),
])
def test_flags_that_would_weaken_security_or_delivery_are_refused(
    extra: list[str], expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected):
        parse_extra(extra)


def test_mtls_switched_off_explicitly_is_no_error() -> None:
    assert parse_extra(["--enable-mtls=false"]) == ({}, [])


@pytest.mark.parametrize(("extra", "given", "expected"), [
    (["--mode", "kubernetes"], {"app_id": "a", "app_port": 1}, "--mode kubernetes without"),
    (["--app-ssl"], {"app_id": "a", "app_port": 1, "app_protocol": "grpc"},
     "--app-ssl with --app-protocol grpc"),
    ([], {"app_id": "a", "app_port": 1, "app_protocol": "h2c"}, "--app-protocol h2c"),
])
def test_mode_and_app_tls_are_refused_where_they_would_change_behaviour(
    extra: list[str], given: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected):
        _applied(extra, **given)


def test_app_ssl_maps_to_an_https_app_and_kubernetes_mode_with_resources_runs() -> None:
    raw, _ = _applied(["--app-ssl", "--mode", "kubernetes"], app_id="a", app_port=8443,
                      resources_path=["/res"])
    assert raw["app"]["url"] == "https://127.0.0.1:8443"


def test_no_app_port_is_a_publisher_only_sidecar_with_daprds_api_on() -> None:
    raw, _ = _applied([], app_id="pub", resources_path=["/res"])
    assert raw["app"] == {"push": False}
    assert raw["publish_api"] == {}


DAPR_INIT_CONFIGURATION = """\
apiVersion: dapr.io/v1alpha1
kind: Configuration
metadata:
  name: daprConfig
spec:
  tracing:
    samplingRate: "1"
    zipkin:
      endpointAddress: http://localhost:9411/api/v2/spans
  metric:
    enabled: true
"""


def test_dapr_inits_configuration_sends_spans_to_zipkin_and_warns_for_the_rest(
    tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(DAPR_INIT_CONFIGURATION)
    keys, warnings = read_configuration(path)
    assert keys == {"tracing": {"zipkin_endpoint": "http://localhost:9411/api/v2/spans",
                                "sample_ratio": 1.0}}
    assert len(warnings) == 1
    assert "spec.metric is ignored" in warnings[0]


@pytest.mark.parametrize(("otel", "expected"), [
    ({"endpointAddress": "collector:4317", "isSecure": False, "protocol": "grpc"},
     {"otlp_endpoint": "http://collector:4317", "protocol": "grpc"}),
    ({"endpointAddress": "collector:4318", "isSecure": True, "protocol": "http"},
     {"otlp_endpoint": "https://collector:4318", "protocol": "http"}),
])
def test_otel_endpoint_protocol_and_is_secure_map_onto_tracing(
    tmp_path: Path, otel: dict[str, Any], expected: dict[str, Any]
) -> None:
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"kind": "Configuration", "spec": {"tracing": {
        "samplingRate": "0.25", "otel": otel, "stdout": True}}}))
    keys, warnings = read_configuration(path)
    assert keys == {"tracing": {**expected, "sample_ratio": 0.25}}
    assert warnings == [f"{path}: Configuration: spec.tracing.stdout is ignored"]


def test_a_zero_sampling_rate_records_nothing_as_daprd(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(DAPR_INIT_CONFIGURATION.replace('"1"', '"0"'))
    keys, warnings = read_configuration(path)
    assert keys == {}
    assert any("samplingRate is 0" in w for w in warnings)


def test_daprd_flags_leave_a_misshapen_section_as_written() -> None:
    """Called on a raw config directly (a reload would): every flag that writes a section
    leaves one written with the wrong type for validation to name, and does not crash."""
    sections = ("app", "dapr", "server", "log", "shutdown", "publish_api")
    raw: dict[str, Any] = dict.fromkeys(sections, "x")
    flags = DaprdFlags(
        app_id="shop", app_port=5001, resources_path=["r"], log_level="debug",
        graceful_shutdown_s=3, dapr_http_port=3599, max_body_size="1Mi",
        health={"--enable-app-health-check": True},
        extra={"--metrics-port": "9000", "--log-as-json": "true",
               "--dapr-block-shutdown-duration": "5s"})
    flags.apply(raw)
    assert raw == dict.fromkeys(sections, "x")
