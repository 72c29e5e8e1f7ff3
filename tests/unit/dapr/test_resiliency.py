"""A Dapr ``Resiliency`` manifest in the resources directory: the pub/sub component's inbound
policy (what daprd applies to delivering an event to the app — Dapr docs "Resiliency targets",
components ``inbound``) onto ``retry.*`` and ``app.timeout_s``, config.yaml winning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.resiliency import go_duration_s
from priority_pubsub.dapr.setup import load
from priority_pubsub.settings.config import validate_config
from tests.unit.dapr.test_plan import COMPONENT, plan_for, resources

APP = [{"pubsubname": "orderpubsub", "topic": "orders", "route": "/orders"}]
SUBSCRIPTION = {"apiVersion": "dapr.io/v2alpha1", "kind": "Subscription",
                "metadata": {"name": "orders"},
                "spec": {"pubsubname": "orderpubsub", "topic": "orders",
                         "routes": {"default": "/orders"}}}


def resiliency(inbound: dict[str, Any], *, scopes: list[str] | None = None,
               **targets: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "apiVersion": "dapr.io/v1alpha1", "kind": "Resiliency", "metadata": {"name": "res"},
        "spec": {
            "policies": {
                "timeouts": {"general": "1m30s", "quick": "500ms"},
                "retries": {
                    "steady": {"policy": "constant", "duration": "7s", "maxRetries": 4},
                    "growing": {"policy": "exponential", "maxInterval": "2m",
                                "maxRetries": 9},
                    "forever": {"policy": "constant", "maxRetries": -1,
                                "matching": {"httpStatusCodes": "500-599"}},
                },
                "circuitBreakers": {"cb": {"maxRequests": 1, "timeout": "30s",
                                           "trip": "consecutiveFailures >= 5"}},
            },
            "targets": {"components": {"orderpubsub": {"inbound": inbound}}, **targets},
        },
    }
    if scopes is not None:
        document["scopes"] = scopes
    return document


def test_constant_retry_and_timeout_map_onto_retry_and_app(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, COMPONENT, resiliency({"retry": "steady", "timeout": "general"}),
                    app=APP)
    settings = plan.settings()
    assert settings["retry"] == {"max_attempts": 5, "initial_delay_s": 7.0, "max_delay_s": 7.0}
    assert settings["app"] == {"fatal_codes": [], "timeout_s": 90.0}


def test_exponential_retry_grows_from_daprds_500ms_to_max_interval(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, COMPONENT, resiliency({"retry": "growing", "timeout": "quick"}),
                    app=APP)
    settings = plan.settings()
    assert settings["retry"] == {"max_attempts": 10, "initial_delay_s": 0.5,
                                 "max_delay_s": 120.0}
    assert settings["app"]["timeout_s"] == 0.5


def test_what_is_not_honoured_is_warned_by_name(tmp_path: Path) -> None:
    plan = plan_for(
        tmp_path, COMPONENT,
        resiliency({"retry": "forever", "circuitBreaker": "cb"},
                   apps={"shop": {"retry": "steady"}}, actors={"a": {}}), app=APP)
    warnings = "\n".join(plan.warnings)
    assert "circuitBreaker cb: maxRequests is read but not honoured" in warnings
    assert "maxRetries -1 (retry forever) is not honoured" in warnings
    assert "matching is read but not honoured" in warnings
    assert "spec.targets.apps.shop is daprd's service-invocation policy" in warnings
    assert "spec.targets.actors is read but not honoured" in warnings
    # the component's own retry settings stay (snssqs messageVisibilityTimeout: 5s)
    assert plan.settings()["retry"]["initial_delay_s"] == 5.0


def test_a_resiliency_scoped_to_another_app_is_not_applied(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, COMPONENT, resiliency({"retry": "steady"}, scopes=["billing"]),
                    app=APP)
    assert plan.settings()["retry"]["max_attempts"] == 9  # the component's (snssqs default)


@pytest.mark.parametrize(("inbound", "problem"), [
    ({"retry": "missing"}, "'missing' is not in spec.policies.retries"),
    ({"timeout": "nope"}, "'nope' is not in spec.policies.timeouts"),
])
def test_a_reference_to_no_policy_names_file_and_field(
    tmp_path: Path, inbound: dict[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=r"all\.yaml: Resiliency res: spec\.targets\."
                       r"components\.orderpubsub\.inbound: " + problem):
        plan_for(tmp_path, COMPONENT, resiliency(inbound), app=APP)


def test_config_yaml_wins_over_the_manifest(tmp_path: Path) -> None:
    directory = resources(tmp_path, COMPONENT, SUBSCRIPTION,
                          resiliency({"retry": "steady", "timeout": "general"}))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "dapr": {"resources_path": str(directory), "app_id": "shop"},
        "retry": {"max_attempts": 2}, "app": {"url": "http://127.0.0.1:1", "timeout_s": 3}}))
    settings = load(config, reach_app=False).settings
    assert settings.retry.max_attempts == 2  # config.yaml
    assert settings.retry.initial_delay_s == 7.0  # the manifest
    assert settings.app.timeout_s == 3


@pytest.mark.parametrize(("text", "seconds"), [
    ("5s", 5.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("1.5s", 1.5)])
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration_s(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5", "five", "5sec", "", "-1s"])
def test_bad_go_durations_are_named(text: str) -> None:
    with pytest.raises(ConfigError, match="not a duration"):
        go_duration_s(text, "x")


def test_circuit_breaker_maps_onto_the_app_circuit_breaker(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, COMPONENT, resiliency({"circuitBreaker": "cb"}), app=APP)
    assert plan.settings()["app"]["circuit_breaker"] == {"consecutive_failures": 5,
                                                         "open_s": 30.0}
    settings = validate_config({**plan.settings(), "queues": [{"name": "q"}]})
    assert settings.app.circuit_breaker is not None
    assert settings.app.circuit_breaker.consecutive_failures == 5


def test_an_unsupported_breaker_trip_is_one_config_error(tmp_path: Path) -> None:
    document = resiliency({"circuitBreaker": "cb"})
    document["spec"]["policies"]["circuitBreakers"]["cb"]["trip"] = "requests > 3"
    with pytest.raises(ConfigError, match=r"trip 'requests > 3': only"):
        plan_for(tmp_path, COMPONENT, document, app=APP)
