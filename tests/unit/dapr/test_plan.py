"""Dapr mode without brokers: manifests, secrets, subscriptions and their merge, CEL rules,
names, flags, and the request daprd would send. Each expectation cites the Dapr source it
comes from."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from priority_pubsub.app.channel.http import classify
from priority_pubsub.app.request import Prepared
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.json_text import go_json
from priority_pubsub.core.message import Lease, Message
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.dapr.manifests import load_manifests
from priority_pubsub.dapr.naming import aws_sanitized
from priority_pubsub.dapr.plan import DaprPlan, build_plan
from priority_pubsub.dapr.request_builder import DaprRequestBuilder
from priority_pubsub.dapr.subscriptions import from_app, merge
from priority_pubsub.settings.config import AppConfig, validate_config
from priority_pubsub.settings.dapr import DaprConfig
from priority_pubsub.transforms.base import Payload
from tests.support.sidecar import cli

COMPONENT = {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
             "metadata": {"name": "orderpubsub"},
             "spec": {"type": "pubsub.aws.snssqs", "version": "v1", "metadata": [
                 {"name": "region", "value": "us-east-1"},
                 {"name": "messageVisibilityTimeout", "value": 5},
                 {"name": "fifo", "value": False}]}}


def resources(tmp_path: Path, *documents: dict[str, Any]) -> Path:
    directory = tmp_path / "resources"
    directory.mkdir(exist_ok=True)
    (directory / "all.yaml").write_text(yaml.safe_dump_all(documents))
    return directory


def plan_for(tmp_path: Path, *documents: dict[str, Any], app: object = (), **dapr: Any
             ) -> DaprPlan:
    config = DaprConfig(resources_path=resources(tmp_path, *documents), app_id="shop", **dapr)
    return build_plan(config, load_manifests(config.resources_path), from_app(list(app)))


def test_component_settings_map_as_daprd_applies_them(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, COMPONENT, app=[{"pubsubname": "orderpubsub", "topic": "orders",
                                              "route": "orders"}])
    settings = plan.settings()
    # snssqs metadata.go: consumerID defaults to the app id; per-topic queue {consumerID}-{topic}
    assert settings["queues"] == [{"name": "shop-orders", "weight": 1}]
    # validateMessage: deleted unprocessed at receive count == messageRetryLimit (10)
    assert settings["retry"]["max_attempts"] == 9
    assert settings["retry"]["initial_delay_s"] == settings["retry"]["max_delay_s"] == 5.0
    assert settings["app"]["fatal_codes"] == []
    assert settings["driver"] == {"type": "sqs", "region": "us-east-1"}
    assert any("metadata fifo is read but not honoured" in w for w in plan.warnings)


def test_non_pubsub_and_out_of_scope_components_are_skipped_with_a_note(tmp_path: Path) -> None:
    state = {"apiVersion": "dapr.io/v1alpha1", "kind": "Component", "metadata": {"name": "st"},
             "spec": {"type": "state.redis", "version": "v1", "metadata": []}}
    other = {**COMPONENT, "metadata": {"name": "elsewhere"}, "scopes": ["billing"]}
    plan = plan_for(tmp_path, COMPONENT, state, other,
                    app=[{"pubsubname": "orderpubsub", "topic": "orders", "route": "/o"}])
    assert any("Component st (state.redis) skipped: not a pub/sub component" in n
               for n in plan.notes)
    assert any("Component elsewhere skipped: scoped to ['billing']" in n for n in plan.notes)


def test_a_pubsub_type_without_a_driver_names_file_and_field(tmp_path: Path) -> None:
    kafka = {**COMPONENT, "spec": {"type": "pubsub.kafka", "version": "v1", "metadata": []}}
    with pytest.raises(ConfigError, match=r"all\.yaml: Component orderpubsub: spec\.type: "
                       r"pubsub\.kafka has no driver here"):
        plan_for(tmp_path, kafka, app=[{"pubsubname": "orderpubsub", "topic": "o",
                                        "route": "/o"}])


def test_a_bad_cel_rule_names_file_and_field(tmp_path: Path) -> None:
    subscription = {"apiVersion": "dapr.io/v2alpha1", "kind": "Subscription",
                    "metadata": {"name": "s"}, "spec": {
                        "pubsubname": "orderpubsub", "topic": "orders",
                        "routes": {"rules": [{"match": "event.type ==", "path": "/x"}]}}}
    with pytest.raises(ConfigError, match=r"Subscription s: routes\.rules\[0\]\.match: "
                       "invalid CEL"):
        plan_for(tmp_path, COMPONENT, subscription)


def test_secret_key_ref_through_local_env_and_local_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"aws": {"secret": "s3cr3t"}}))
    monkeypatch.setenv("ORDERS_KEY", "AKIAEXAMPLE")
    env_store = {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
                 "metadata": {"name": "envstore"},
                 "spec": {"type": "secretstores.local.env", "version": "v1", "metadata": []}}
    file_store = {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
                  "metadata": {"name": "filestore"},
                  "spec": {"type": "secretstores.local.file", "version": "v1", "metadata": [
                      {"name": "secretsFile", "value": str(secrets)}]}}
    component = {**COMPONENT, "auth": {"secretStore": "envstore"}, "spec": {
        **COMPONENT["spec"], "metadata": [
            {"name": "accessKey", "secretKeyRef": {"name": "ORDERS_KEY", "key": "ORDERS_KEY"}},
            {"name": "secretKey", "value": "plain"}]}}
    app = [{"pubsubname": "orderpubsub", "topic": "orders", "route": "/o"}]
    plan = plan_for(tmp_path, component, env_store, file_store, app=app)
    assert plan.mapped.environment["AWS_ACCESS_KEY_ID"] == "AKIAEXAMPLE"
    via_file = {**component, "auth": {"secretStore": "filestore"}, "spec": {
        **COMPONENT["spec"], "metadata": [
            {"name": "accessKey", "value": "a"},
            {"name": "secretKey", "secretKeyRef": {"name": "aws:secret", "key": "aws:secret"}}]}}
    plan = plan_for(tmp_path, via_file, env_store, file_store, app=app)
    assert plan.mapped.environment["AWS_SECRET_ACCESS_KEY"] == "s3cr3t"
    monkeypatch.delenv("ORDERS_KEY")
    with pytest.raises(ConfigError, match="environment variable ORDERS_KEY is not set") as err:
        plan_for(tmp_path, component, env_store, app=app)
    assert "AKIA" not in str(err.value)


def test_app_subscriptions_v1_and_v2_and_daprs_merge() -> None:
    # subscriptions.go GetSubscriptionsHTTP: rules, then routes.default, else route
    [v1, v2] = from_app([
        {"pubsubname": "p", "topic": "a", "route": "orders"},
        {"pubsubname": "p", "topic": "b", "route": "ignored",
         "routes": {"rules": [{"match": "event.type == 'x'", "path": "/x"}], "default": "/d"}},
    ])
    assert [(r.match, r.path) for r in v1.rules] == [("", "orders")]
    assert [(r.match, r.path) for r in v2.rules] == [("event.type == 'x'", "/x"), ("", "/d")]
    # compstore ListSubscriptionsAppByPubSub: declared first per topic, the app's replaces it
    declared = from_app([{"pubsubname": "p", "topic": "a", "route": "/declared"},
                         {"pubsubname": "p", "topic": "a", "route": "/second"},
                         {"pubsubname": "p", "topic": "c", "route": "/c"}])
    merged = merge(declared, [v1, v2])
    assert [(s.topic, s.rules[-1].path) for s in merged] == [
        ("a", "orders"), ("c", "/c"), ("b", "/d")]


def test_priorities_config_first_then_subscription_metadata(tmp_path: Path) -> None:
    app = [{"pubsubname": "orderpubsub", "topic": t, "route": "/o", "metadata": m}
           for t, m in (("low", {}), ("mid", {"priority": "1", "weight": "3"}),
                        ("top", {"priority": "0"}), ("urgent", {}))]
    plan = plan_for(tmp_path, COMPONENT, app=app, priorities=["urgent"])
    assert [q.topics[0] for q in plan.queues] == ["urgent", "top", "mid", "low"]
    assert [q.weight for q in plan.queues] == [1, 1, 3, 1]


def test_aws_names_sanitised_as_the_component_does() -> None:
    # snssqs.go nameToAWSSanitizedName
    assert aws_sanitized("orders.high/v1") == "ordershighv1"
    assert aws_sanitized("x" * 100) == "x" * 80
    assert aws_sanitized("q.fifo", fifo=True) == "q.fifo"


def _message(body: bytes, queue: str = "shop-orders") -> Message:
    return Message("m1", queue, 0, body, {}, 1, 0, Lease(None, 0))


def _prepare(tmp_path: Path, body: bytes, route: dict[str, Any]) -> Prepared | Outcome:
    plan = plan_for(tmp_path, COMPONENT, app=[{"pubsubname": "orderpubsub", "topic": "orders",
                                              **route}])
    envelope = json.dumps({"Type": "Notification", "Message": body.decode(),
                           "TopicArn": "arn:aws:sns:us-east-1:1:orders"}).encode()
    request_builder = DaprRequestBuilder(plan, AppConfig(url="http://app:3000"))
    return request_builder.prepare(_message(envelope), Payload(envelope))


def test_delivery_keeps_the_bytes_and_routes_by_cel(tmp_path: Path) -> None:
    body = b'{"specversion":"1.0","id":"1","source":"s","type":"big","data":{"n":5}}'
    prepared = _prepare(tmp_path, body, {"routes": {"rules": [
        {"match": "event.data.n > 3", "path": "big"}], "default": "/small"}})
    assert isinstance(prepared, Prepared)
    assert prepared.url == "http://app:3000/big"
    assert prepared.request.body == body
    assert prepared.request.headers == {"pubsubname": "orderpubsub",
                                        "Content-Type": "application/cloudevents+json"}


def test_delivery_restores_the_events_baggage_as_a_header(tmp_path: Path) -> None:
    """Beyond daprd up to 1.18 (dapr #10302): the event's ``baggage`` as the ``baggage``
    header, with or without a trace; the body stays the bytes published."""
    sent = "tenant=acme,user=J%C3%B6rg"
    body = json.dumps({"specversion": "1.0", "id": "1", "source": "s", "type": "t",
                       "traceparent": "00-a-b-01", "baggage": sent}).encode()
    prepared = _prepare(tmp_path, body, {"route": "/o"})
    assert isinstance(prepared, Prepared)
    assert prepared.request.body == body
    assert (prepared.request.headers["traceparent"], prepared.request.headers["baggage"]) == (
        "00-a-b-01", sent)
    untraced = _prepare(tmp_path, json.dumps({"baggage": sent}).encode(), {"route": "/o"})
    assert isinstance(untraced, Prepared)
    assert untraced.request.headers["baggage"] == sent
    assert "traceparent" not in untraced.request.headers


def test_no_route_drops_and_a_non_json_body_retries(tmp_path: Path) -> None:
    rules = {"routes": {"rules": [{"match": "event.type == 'x'", "path": "/x"}]}}
    dropped = _prepare(tmp_path, b'{"type": "y"}', rules)
    assert isinstance(dropped, Outcome)
    assert dropped.kind is Kind.DROP
    retried = _prepare(tmp_path, b"not json", {"route": "/o"})
    assert isinstance(retried, Outcome)
    assert retried.kind is Kind.RETRY


def test_raw_payload_as_from_raw_payload(tmp_path: Path) -> None:
    prepared = _prepare(tmp_path, b'{"a": "<&>"}', {"route": "/o",
                                                   "metadata": {"rawPayload": "true"}})
    assert isinstance(prepared, Prepared)
    event = json.loads(prepared.request.body)
    assert base64.b64decode(event["data_base64"]) == b'{"a": "<&>"}'
    assert list(event) == sorted(event)  # Go's map encoding: sorted keys
    assert go_json({"k": "<&>"}) == b'{"k":"\\u003c\\u0026\\u003e"}'


def test_status_strings_exact_in_dapr_mode() -> None:
    # postman/http/http.go: switch appResponse.Status { case "", SUCCESS, RETRY, DROP }
    assert classify(200, b'{"status": "success"}', (), exact_status=True).kind is Kind.RETRY
    assert classify(200, b'{"status": "DROP"}', (), exact_status=True).kind is Kind.DROP
    assert classify(200, b'{"status": "success"}', ()).kind is Kind.ACK  # native convenience


def test_a_dapr_manifest_as_config_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "pubsub.yaml"
    path.write_text(yaml.safe_dump(COMPONENT))
    result = cli("check", "--offline", config=path)
    assert result.returncode == 2
    assert "is a Dapr Component manifest" in result.stderr
    assert "--resources-path" in result.stderr


def test_manifest_error_is_one_line_with_exit_2(tmp_path: Path) -> None:
    broken = {**COMPONENT, "spec": {"version": "v1"}}
    directory = resources(tmp_path, broken)
    result = cli("check", "--offline", "--resources-path", str(directory), "--app-id", "shop")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "all.yaml: Component orderpubsub: spec.type: required" in result.stderr


def test_capacity_settings_per_topic_from_priorities_entries_and_metadata(
    tmp_path: Path,
) -> None:
    """A ``dapr.priorities`` entry may be a mapping with the topic's reserve,
    limit and bounds; a Subscription's metadata sets them as it sets priority and weight
    (the entry wins where both do)."""
    app = [{"pubsubname": "orderpubsub", "topic": t, "route": "/o", "metadata": m}
           for t, m in (("bulk", {"max_wait_s": "900", "wait_slo_s": "120"}),
                        ("orders-high", {"reserve": "2"}), ("orders", {"priority": "1"}))]
    priorities = [{"topic": "orders-high", "reserve": 1, "max_concurrency": 2,
                   "max_wait_s": 600}, "orders"]
    plan = plan_for(tmp_path, COMPONENT, app=app, priorities=priorities)
    assert plan.settings()["queues"] == [
        {"name": "shop-orders-high", "weight": 1, "reserve": 1, "max_concurrency": 2,
         "max_wait_s": 600},
        {"name": "shop-orders", "weight": 1},
        {"name": "shop-bulk", "weight": 1, "max_wait_s": 900.0, "wait_slo_s": 120.0},
    ]


def test_bad_capacity_metadata_is_one_line_naming_the_key(tmp_path: Path) -> None:
    app = [{"pubsubname": "orderpubsub", "topic": "a", "route": "/o",
            "metadata": {"reserve": "one"}}, {"pubsubname": "orderpubsub", "topic": "b",
                                              "route": "/o"}]
    with pytest.raises(ConfigError, match=r"metadata\.reserve: not an integer: 'one'$"):
        plan_for(tmp_path, COMPONENT, app=app)
    with pytest.raises(ValueError, match="topics listed twice"):
        DaprConfig(resources_path=tmp_path, app_id="shop",
                   priorities=[{"topic": "a", "reserve": 1}, "a"])  # type: ignore[list-item]


def test_a_topic_timeout_comes_as_its_reserve_does(tmp_path: Path) -> None:
    """``timeout_s`` per topic, from a Subscription's metadata or a
    ``dapr.priorities`` entry (which wins), becomes its queue's ``timeout_s``."""
    app = [{"pubsubname": "orderpubsub", "topic": t, "route": "/o", "metadata": m}
           for t, m in (("orders-high", {"timeout_s": "10", "reserve": "1"}),
                        ("bulk", {"timeout_s": "7200"}), ("orders", {}))]
    plan = plan_for(tmp_path, COMPONENT, app=app,
                    priorities=[{"topic": "orders-high", "timeout_s": 30}, "orders"])
    settings = validate_config({**plan.settings(), "app": {"timeout_s": 600}})
    assert [(q.name, q.timeout_s) for q in settings.queues] == [
        ("shop-orders-high", 30), ("shop-orders", None), ("shop-bulk", 7200)]
    bad = [{"pubsubname": "orderpubsub", "topic": "a", "route": "/o",
            "metadata": {"timeout_s": "soon"}}]
    with pytest.raises(ConfigError, match=r"metadata\.timeout_s: not a number: 'soon'$"):
        plan_for(tmp_path, COMPONENT, app=bad)
    shared = plan_for(tmp_path, COMPONENT, app=app, queue_layout="shared")
    assert any(w.endswith("topic orders-high: reserve, timeout_s need a queue per topic: not "
                          "honoured with queue_layout: shared") for w in shared.warnings), (
        shared.warnings)


def test_capacity_settings_in_the_shared_layout_are_warned_about(tmp_path: Path) -> None:
    app = [{"pubsubname": "orderpubsub", "topic": "a", "route": "/o"}]
    plan = plan_for(tmp_path, COMPONENT, app=app, queue_layout="shared",
                    priorities=[{"topic": "a", "reserve": 1}])
    assert any("not honoured with queue_layout: shared" in w for w in plan.warnings)
    assert "reserve" not in plan.settings()["queues"][0]
