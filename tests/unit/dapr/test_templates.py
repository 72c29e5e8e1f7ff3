"""Component metadata templates and namespace-scoped components, without brokers.

The rules are daprd's, the same in 1.16.x, 1.17.x and 1.18.x: dapr ``pkg/runtime/meta/meta.go``
(``convertItemsToProps``: ``{uuid}`` one new UUID per occurrence, then ``{podName}`` or the
component fails, then ``{namespace}`` = ``NAMESPACE.appID``, then ``{appID}``;
``ContainsNamespace``), ``pkg/security/security.go`` (``CurrentNamespace``: ``default`` when
``NAMESPACE`` is unset), ``pkg/runtime/pubsub/publisher/publisher.go`` and
``pkg/runtime/subscription/subscription.go`` (a namespace-scoped component's topics are
``namespace + topic`` on the broker).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.pod import Pod
from priority_pubsub.dapr.manifests import Component, MetadataItem, load_manifests
from priority_pubsub.dapr.plan import DaprPlan, build_plan
from priority_pubsub.dapr.subscriptions import from_app
from priority_pubsub.dapr.templates import MetadataTemplates
from priority_pubsub.settings.dapr import DaprConfig
from tests.support.dapr_resources import subscription_v2, write_resources
from tests.support.sidecar import cli, write_config

TEAM_A = Pod("orders-0", "team-a")
UUID4 = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"


def _apply(value: str, pod: Pod = TEAM_A) -> str:
    return MetadataTemplates("shop", pod).apply(value, "pubsub.yaml: Component p: metadata x")


@pytest.mark.parametrize(("value", "expected"), [
    ("orders", "orders"),                                   # none: unchanged
    ("", ""),
    ("{appID}", "shop"),
    ("{podName}", "orders-0"),
    ("{namespace}", "team-a.shop"),                         # NAMESPACE + "." + app id
    ("{namespace}-{namespace}", "team-a.shop-team-a.shop"),  # every occurrence
    ("{podName}/{podName}", "orders-0/orders-0"),
    ("{appID}.{podName}@{namespace}", "shop.orders-0@team-a.shop"),  # several in one
    ("{AppID} {podname} {Namespace} {UUID}", "{AppID} {podname} {Namespace} {UUID}"),  # exact
    ("{appID", "{appID"),
])
def test_templates_as_daprd_applies_them(value: str, expected: str) -> None:
    assert _apply(value) == expected


def test_each_uuid_is_a_new_random_uuid() -> None:
    first = _apply("{uuid}:{uuid}")
    second = _apply("{uuid}:{uuid}")
    a, b = first.split(":")
    c, d = second.split(":")
    assert all(re.fullmatch(UUID4, part) for part in (a, b, c, d)), (first, second)
    assert len({a, b, c, d}) == 4


def test_the_order_is_daprds() -> None:
    """uuid, podName, namespace, appID: a pod name's ``{appID}`` is expanded, its ``{uuid}``
    is not (the UUIDs were made before the pod name came in)."""
    assert _apply("{podName}", Pod("{appID}-{uuid}-0", "ns")) == "shop-{uuid}-0"
    assert _apply("{namespace}", Pod("p", "{appID}")) == "shop.shop"


def test_pod_name_missing_fails_naming_component_and_field() -> None:
    for pod in (Pod("", "team-a"), Pod("", "")):
        with pytest.raises(ConfigError, match=r"^pubsub\.yaml: Component p: metadata x: refers "
                           r"to \{podName\} but POD_NAME is not set"):
            _apply("group-{podName}", pod)
    assert _apply("{appID}", Pod("", "team-a")) == "shop"  # only a value naming it fails


@pytest.mark.parametrize(("environment", "namespace"), [
    ({"POD_NAME": "orders-1", "NAMESPACE": "team-b"}, "team-b"),
    ({"POD_NAME": "orders-1"}, "default"),                 # NAMESPACE unset: daprd's default
    ({"POD_NAME": "orders-1", "NAMESPACE": ""}, ""),       # set but empty: empty
])
def test_pod_comes_from_the_variables_daprd_reads(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], namespace: str
) -> None:
    for name in ("POD_NAME", "NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    pod = Pod.current()
    assert pod == Pod("orders-1", namespace)
    assert pod.replica == "orders-1"  # the journal's and the monitor's replica name
    assert _apply("{namespace}", pod) == f"{namespace}.shop"


# --- namespace-scoped components in a plan -----------------------------------------------

def _snssqs(**metadata: Any) -> dict[str, Any]:
    items = [{"name": "region", "value": "us-east-1"}]
    for name, value in metadata.items():
        items.append({"name": name, **(value if isinstance(value, dict) else {"value": value})})
    return {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
            "metadata": {"name": "orderpubsub"}, "auth": {"secretStore": "env"},
            "spec": {"type": "pubsub.aws.snssqs", "version": "v1", "metadata": items}}


ENV_STORE = {"apiVersion": "dapr.io/v1alpha1", "kind": "Component", "metadata": {"name": "env"},
             "spec": {"type": "secretstores.local.env", "version": "v1", "metadata": []}}


def _plan(tmp_path: Path, *documents: dict[str, Any], pod: Pod = TEAM_A, **dapr: Any
          ) -> DaprPlan:
    resources = write_resources(tmp_path / "resources", ENV_STORE, *documents,
                                subscription_v2("orders", "orderpubsub", "orders",
                                                default="/orders"))
    config = DaprConfig(resources_path=(resources,), app_id="shop", **dapr)
    return build_plan(config, load_manifests(config.resources_path), from_app([]), pod=pod)


def test_namespace_in_consumer_id_scopes_the_component_per_topic(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _snssqs(consumerID="{namespace}"))
    assert plan.component.consumer_id == "team-a.shop"
    assert plan.component.broker_topic("orders") == "team-aorders"  # no separator
    # snssqs' sanitising drops the dot: {consumerID}-{namespace + topic}
    assert [(q.name, q.topics) for q in plan.queues] == [("team-ashop-team-aorders",
                                                          ("orders",))]
    assert list(plan.subscriptions) == ["orders"]  # the app's topic, unprefixed


def test_namespace_scoped_shared_queue_finds_the_topic_by_the_brokers_name(
    tmp_path: Path
) -> None:
    plan = _plan(tmp_path, _snssqs(consumerID="{namespace}"), queue_layout="shared")
    [queue] = plan.queues
    assert (queue.name, queue.topics) == ("team-ashop", ("orders",))
    # the SNS envelope's TopicArn names the broker's topic; the app gets its own name
    assert plan.topic_of("team-ashop", "team-aorders") == "orders"
    assert plan.topic_of("team-ashop", "orders") is None


def test_namespace_anywhere_in_the_metadata_scopes_the_component(tmp_path: Path) -> None:
    """``ContainsNamespace`` looks at every value, a secret's included; ``consumerID`` is
    then the app id, the topics still prefixed."""
    plan = _plan(tmp_path, _snssqs(sqsDeadLettersQueueName="dead-{namespace}"))
    assert (plan.component.topic_prefix, plan.component.consumer_id) == ("team-a", "shop")
    assert plan.queues[0].name == "shop-team-aorders"
    assert plan.settings()["dead_letter"] == {"queue": "dead-team-ashop"}


def test_a_secrets_value_is_templated_and_can_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUP", "{namespace}")
    plan = _plan(tmp_path, _snssqs(consumerID={"secretKeyRef": {"name": "GROUP",
                                                                 "key": "GROUP"}}))
    assert (plan.component.consumer_id, plan.component.topic_prefix) == ("team-a.shop",
                                                                         "team-a")


def test_without_namespace_nothing_is_prefixed(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _snssqs(consumerID="{podName}"))
    assert plan.component.topic_prefix == ""
    assert plan.queues[0].name == "orders-0-orders"
    assert plan.topic_of(plan.queues[0].name, None) == "orders"


def test_namespace_unset_prefixes_daprds_default(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _snssqs(consumerID="{namespace}"), pod=Pod("p", "default"))
    assert plan.queues[0].name == "defaultshop-defaultorders"


STATE = {"apiVersion": "dapr.io/v1alpha1", "kind": "Component", "metadata": {"name": "state"},
         "spec": {"type": "state.redis", "version": "v1", "metadata": [
             {"name": "keyPrefix", "value": "{podName}"}]}}


def test_pod_name_missing_fails_any_component_in_scope(tmp_path: Path) -> None:
    """daprd fails its start on any component it cannot template; one out of scope is not
    loaded, so it cannot fail it."""
    with pytest.raises(ConfigError, match=r"Component state: metadata keyPrefix: refers to "
                       r"\{podName\}"):
        _plan(tmp_path / "a", _snssqs(), STATE, pod=Pod("", "team-a"))
    elsewhere = {**STATE, "scopes": ["billing"]}
    plan = _plan(tmp_path / "b", _snssqs(), elsewhere, pod=Pod("", "team-a"))
    assert [c.name for c in plan.templated] == ["env", "orderpubsub"]


def test_check_prints_every_components_metadata_templated_secrets_masked(
    tmp_path: Path
) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    component = _snssqs(consumerID="{namespace}", accessKey="AKIA-{appID}",
                        secretKey={"secretKeyRef": {"name": "AWS_SECRET", "key": "AWS_SECRET"}},
                        sessionToken="plain-token-value")
    resources = write_resources(tmp_path / "resources", ENV_STORE, component, STATE,
                                subscription_v2("orders", "orderpubsub", "orders",
                                                default="/orders"))
    config = write_config(tmp_path, {"dapr": {"resources_path": str(resources),
                                              "app_id": "shop"},
                                     "app": {"url": "http://127.0.0.1:1"}})
    result = cli("check", "--offline", config=config, env={
        "NAMESPACE": "team-a", "POD_NAME": "orders-0", "AWS_SECRET": secret})
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    start = lines.index(next(line for line in lines if line.startswith(
        "component orderpubsub (pubsub.aws.snssqs, ")))
    assert lines[start + 1:start + 6] == [
        "  region: us-east-1", "  consumerID: team-a.shop", "  accessKey: ***",
        "  secretKey: ***", "  sessionToken: ***"]
    assert "  keyPrefix: orders-0" in lines  # the state store's, templated too
    assert ("component orderpubsub is namespace-scoped ({namespace} in its metadata): topics "
            "on the broker are 'team-a' + topic: orders -> team-aorders") in lines
    assert secret not in result.stderr + result.stdout
    assert "plain-token-value" not in result.stderr + result.stdout
    settings = json.loads(result.stdout)
    assert [q["name"] for q in settings["queues"]] == ["team-ashop-team-aorders"]


def test_check_without_pod_name_is_one_line_exit_2(tmp_path: Path) -> None:
    resources = write_resources(tmp_path / "resources", _snssqs(consumerID="{podName}"),
                                subscription_v2("orders", "orderpubsub", "orders",
                                                default="/orders"))
    config = write_config(tmp_path, {"dapr": {"resources_path": str(resources),
                                              "app_id": "shop"}})
    result = cli("check", "--offline", config=config, env={"POD_NAME": ""})
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert re.search(r"Component orderpubsub: metadata consumerID: refers to \{podName\} but "
                     r"POD_NAME is not set", line), line


def test_a_component_has_its_plain_values_templated_and_its_secret_refs_kept() -> None:
    ref = MetadataItem("redisPassword", None, "{appID}", "{appID}")
    component = Component("p", "pubsub.redis", (MetadataItem("consumerID", "{podName}"), ref),
                          "env", (), "f.yaml")
    templated = MetadataTemplates("shop", TEAM_A).component(component)
    assert templated.metadata == (MetadataItem("consumerID", "orders-0"), ref)
