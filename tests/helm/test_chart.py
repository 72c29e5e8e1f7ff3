"""The Helm chart: lint, render every mode and driver example, validate what Kubernetes gets."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.conftest import Helm
from tests.helm.manifests import (
    CHART,
    EXAMPLES,
    SIDECAR,
    Doc,
    config_map,
    config_of,
    one,
    run,
    sidecar_container,
    validate_all,
)
from tests.helm.schema import SCHEMA_PATH, updated_schema
from tests.helm.tools import Tools

pytestmark = pytest.mark.helm

# Each example rendered as written and switched into each mode.
VARIANTS: dict[str, list[str]] = {
    "classic": ["sidecar.native=false"],
    "native": ["sidecar.native=true"],
    "sidecar-mode": [
        "mode=sidecar",
        "keda.scaleTargetRef.name=legacy-worker",
        "metrics.service.podSelector.app=legacy-worker",
    ],
}
EXAMPLE_IDS = [path.name.removesuffix("-values.yaml") for path in EXAMPLES]


def _example(name: str) -> Path:
    return CHART / "ci" / f"{name}-values.yaml"


def _pod_spec(docs: list[Doc]) -> Doc:
    spec: Doc = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def test_every_driver_has_an_example() -> None:
    assert {"local", "sqs", "gcp_pubsub", "azure_servicebus", "redis"} <= set(EXAMPLE_IDS)


@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_lint_strict(tools: Tools, example: Path) -> None:
    result = run([tools.helm, "lint", "--strict", CHART, "--values", example])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout
    assert "[ERROR]" not in result.stdout


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_render_validates(helm: Helm, example: Path, variant: str) -> None:
    docs = helm.render([example], VARIANTS[variant])
    validate_all(docs)
    kinds = {doc["kind"] for doc in docs}
    assert "ConfigMap" in kinds
    mode = yaml.safe_load(example.read_text()).get("mode", "deployment")
    assert ("Deployment" in kinds) == (variant != "sidecar-mode" and mode == "deployment")


@pytest.mark.parametrize(
    "example",
    [p for p in EXAMPLES if "existing-workload" not in p.name],
    ids=lambda p: p.name.removesuffix("-values.yaml"),
)
def test_sidecar_wiring(helm: Helm, example: Path) -> None:
    docs = helm.render([example], VARIANTS["classic"])
    config = config_of(docs)
    pod = _pod_spec(docs)
    sidecar = sidecar_container(pod)
    env = {item["name"]: item for item in sidecar["env"]}
    mounts = {m["name"]: m for m in sidecar["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}

    config_mount = mounts["priority-pubsub-config"]["mountPath"]
    assert env["PRIORITY_PUBSUB_CONFIG"]["value"] == f"{config_mount}/config.yaml"
    # where daprd reads them: Dapr's {podName} / {namespace} templates, the journal's replica
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    configmap = config_map(docs)["metadata"]["name"]
    assert volumes["priority-pubsub-config"]["configMap"]["name"] == configmap
    assert set(mounts) <= set(volumes)
    assert mounts["priority-pubsub-data"]["mountPath"] == "/data"

    # Probes hit the port the sidecar's server listens on, on all interfaces.
    assert config["server"]["host"] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert ports["metrics"] == config["server"]["port"]
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}

    security = sidecar["securityContext"]
    assert security["runAsNonRoot"]
    assert security["readOnlyRootFilesystem"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]

    grace = math.ceil(config["shutdown"]["grace_s"])
    # SQS: the driver waits on close for a long poll it cannot interrupt.
    driver = config.get("driver") or {}  # Dapr mode: the driver comes from the resources
    long_poll = driver.get("wait_time_s", 20) if driver.get("type") == "sqs" else 0
    assert pod["terminationGracePeriodSeconds"] == grace + 15 + long_poll
    app = next(c for c in pod["containers"] if c["name"] == "app")
    assert app["lifecycle"]["preStop"]["sleep"]["seconds"] == grace

    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()


def test_native_sidecar_is_an_always_restarting_init_container(helm: Helm) -> None:
    docs = helm.render([_example("gcp_pubsub")])
    pod = _pod_spec(docs)
    assert [c["name"] for c in pod["containers"]] == ["app"]
    (init,) = pod["initContainers"]
    assert init["name"] == SIDECAR
    assert init["restartPolicy"] == "Always"
    # The app is stopped first and the sidecar outlives it: no preStop delay on the app.
    assert "lifecycle" not in pod["containers"][0]


def test_secrets_come_from_the_existing_secret(helm: Helm) -> None:
    docs = helm.render([_example("azure_servicebus")])
    pod = _pod_spec(docs)
    sidecar_env = {e["name"]: e for e in sidecar_container(pod)["env"]}
    conn = sidecar_env["PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING"]["valueFrom"]["secretKeyRef"]
    token = sidecar_env["PRIORITY_PUBSUB_APP__API_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert conn == {"name": "priority-pubsub", "key": "servicebus-connection-string"}
    assert token == {"name": "priority-pubsub", "key": "app-api-token"}
    app = next(c for c in pod["containers"] if c["name"] == "app")
    app_env = {e["name"]: e for e in app["env"]}
    assert app_env["APP_API_TOKEN"]["valueFrom"]["secretKeyRef"] == token
    # Nothing secret is rendered into the ConfigMap.
    text = one(docs, "ConfigMap")["data"]["config.yaml"]
    assert "connection_string" not in text
    assert "api_token" not in text


def test_config_change_rolls_the_pods(helm: Helm) -> None:
    def checksum(*sets: str) -> str:
        docs = helm.render([_example("local")], sets)
        value: str = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/priority-pubsub-config"
        ]
        return value

    assert checksum() != checksum("config.lease.duration_s=90")  # restart-only
    # a key a live reload applies rolls nothing (tests/helm/test_fleet.py: which ones)
    assert checksum() == checksum("config.concurrency=3")


@pytest.mark.parametrize(
    ("example", "trigger_type", "expected"),
    [
        ("sqs", "aws-sqs-queue",
         {"queueURL": "tasks-high", "queueLength": "4", "awsRegion": "eu-west-1",
          "identityOwner": "operator"}),
        ("gcp_pubsub", "gcp-pubsub",
         {"subscriptionName": "projects/my-project/subscriptions/tasks-high-sub",
          "mode": "SubscriptionSize", "value": "8"}),
        ("azure_servicebus", "azure-servicebus",
         {"queueName": "tasks-high", "messageCount": "4",
          "connectionFromEnv": "PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING"}),
        ("redis", "redis-streams",
         {"address": "redis-master.data.svc.cluster.local:6380", "stream": "tasks-high",
          "consumerGroup": "big-server", "lagCount": "4", "databaseIndex": "0",
          "enableTLS": "true", "passwordFromEnv": "PRIORITY_PUBSUB_DRIVER__PASSWORD"}),
    ],
)
def test_keda_scales_on_the_highest_priority_queue(
    helm: Helm, example: str, trigger_type: str, expected: dict[str, str]
) -> None:
    docs = helm.render([_example(example)])
    scaled = one(docs, "ScaledObject")["spec"]
    assert scaled["scaleTargetRef"]["name"] == one(docs, "Deployment")["metadata"]["name"]
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == trigger_type
    assert trigger["metadata"] == expected
    # KEDA owns the replica count.
    assert "replicas" not in one(docs, "Deployment")["spec"]
    from_env = expected.get("connectionFromEnv") or expected.get("passwordFromEnv")
    if from_env:
        container = scaled["scaleTargetRef"]["envSourceContainerName"]
        env = {e["name"] for e in sidecar_container(_pod_spec(docs))["env"]}
        assert container == SIDECAR
        assert from_env in env


def test_keda_sqs_uses_the_configured_queue_url(helm: Helm) -> None:
    url = "https://sqs.eu-west-1.amazonaws.com/123456789012/tasks-high"
    docs = helm.render([_example("sqs")], [f"config.driver.queue_urls.tasks-high={url}"])
    (trigger,) = one(docs, "ScaledObject")["spec"]["triggers"]
    assert trigger["metadata"]["queueURL"] == url


def test_keda_topic_subscription_and_several_queues(helm: Helm) -> None:
    docs = helm.render(
        [_example("azure_servicebus")],
        ["keda.queues={tasks-high,tasks/low-sub}", "keda.authenticationRef.name=sb-auth"],
    )
    triggers = one(docs, "ScaledObject")["spec"]["triggers"]
    assert [t["metadata"].get("queueName") for t in triggers] == ["tasks-high", None]
    assert triggers[1]["metadata"]["topicName"] == "tasks"
    assert triggers[1]["metadata"]["subscriptionName"] == "low-sub"
    assert all(t["authenticationRef"] == {"name": "sb-auth"} for t in triggers)
    assert all("connectionFromEnv" not in t["metadata"] for t in triggers)


def test_service_monitor_finds_the_metrics_port(helm: Helm) -> None:
    docs = helm.render([_example("sqs")])
    monitor = one(docs, "ServiceMonitor")["spec"]
    service = one(docs, "Service")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["endpoints"]} <= port_names
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    sidecar_ports = {p["name"] for p in sidecar_container(_pod_spec(docs))["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= sidecar_ports


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["config.server.host=127.0.0.1"], "use 0.0.0.0"),
        (["config.app.api_token=abc"], "keep secrets out of values"),
        (["config.driver.connection_string=Endpoint=x"], "keep secrets out of values"),
        (["config.driver.password=pw"], "keep secrets out of values"),
        (["config.driver.url=redis://:pw@redis:6379/0"], "the URL has a password"),
        (["secrets.apiTokenKey=token"], "secrets.existingSecret is required"),
        (["keda.enabled=true"], "no KEDA scaler for driver"),
        (["mode=sidecar", "keda.enabled=true", "config.driver.type=sqs",
          "config.driver.region=x"], "keda.scaleTargetRef.name is required"),
        (["config.driver.type=gcp_pubsub", "keda.enabled=true"], "keda.authenticationRef"),
        (["replicas=3"], "additional properties 'replicas' not allowed"),
        (["config.concurency=3"], "additional properties 'concurency' not allowed"),
        (["config.scheduling=fair"], "/config/scheduling"),
        (["config.queues=null"], "queues"),
        (["dapr.enabled=true", "dapr.resources.existingConfigMap=x"], "dapr.appId is required"),
        (["dapr.enabled=true", "dapr.appId=a"], "existingConfigMap or manifests is required"),
    ],
)
def test_bad_values_are_refused(helm: Helm, sets: list[str], message: str) -> None:
    stderr = helm.render_error([_example("local")], sets)
    assert message in stderr


def test_default_values_ask_for_the_app_image(helm: Helm) -> None:
    assert "app.image.repository is required" in helm.render_error()
    docs = helm.render(sets=["app.image.repository=registry.example.com/app"])
    validate_all(docs)


def test_schema_config_section_matches_the_settings_model() -> None:
    current = json.loads(SCHEMA_PATH.read_text())
    assert current == updated_schema(current), (
        "values.schema.json is stale: run python -m tests.helm.schema --write"
    )


def test_values_yaml_documents_every_schema_key() -> None:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads(SCHEMA_PATH.read_text())
    assert set(values) == set(schema["properties"]) - {"global"}


@pytest.mark.parametrize(("sets", "expected"), [
    ([], {"metrics": 9464}),
    (["config.publish_api.host=127.0.0.1"], {"metrics": 9464, "dapr-http": 3500,
                                             "dapr-grpc": 50001}),
    (["config.publish_api.http_port=3600", "config.publish_api.grpc_port=null"],
     {"metrics": 9464, "dapr-http": 3600}),
])
def test_publish_api_ports_exposed_when_enabled(
    helm: Helm, sets: list[str], expected: dict[str, int]
) -> None:
    docs = helm.render([_example("local")], sets)
    sidecar = sidecar_container(_pod_spec(docs))
    assert {p["name"]: p["containerPort"] for p in sidecar["ports"]} == expected


def test_dapr_mode_mounts_the_resources_and_passes_daprds_flags(helm: Helm) -> None:
    values = yaml.safe_load(_example("dapr").read_text())
    docs = helm.render([_example("dapr")])
    pod = _pod_spec(docs)
    sidecar = sidecar_container(pod)
    assert sidecar["args"] == ["--resources-path", "/etc/dapr/resources",
                               "--app-id", "order-processor"]
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["priority-pubsub-dapr-resources"] == "/etc/dapr/resources"
    assert mounts["priority-pubsub-dapr-secrets"] == "/etc/dapr/secrets"
    assert volumes["priority-pubsub-dapr-secrets"]["secret"]["secretName"] == (
        "order-processor-dapr-secrets")
    name = volumes["priority-pubsub-dapr-resources"]["configMap"]["name"]
    (resources,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    manifests = values["dapr"]["resources"]["manifests"]
    assert set(resources["data"]) == set(manifests)
    assert yaml.safe_load(resources["data"]["pubsub.yaml"]) == manifests["pubsub.yaml"]
    assert len(list(yaml.safe_load_all(resources["data"]["subscriptions.yaml"]))) == 2
    config = config_of(docs)  # queues and driver come from the resources
    assert "queues" not in config
    assert "driver" not in config
    assert config["dapr"] == {"priorities": ["orders-high", "orders"]}


def test_dapr_mode_uses_an_existing_configmap_and_rolls_on_change(helm: Helm) -> None:
    docs = helm.render([_example("dapr")], ["dapr.resources.manifests=null",
                                            "dapr.resources.existingConfigMap=my-dapr"])
    volumes = {v["name"]: v for v in _pod_spec(docs)["volumes"]}
    assert volumes["priority-pubsub-dapr-resources"]["configMap"]["name"] == "my-dapr"
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"} == {
        volumes["priority-pubsub-config"]["configMap"]["name"]}  # no resources ConfigMap

    def checksum(*sets: str) -> str:
        annotations = one(helm.render([_example("dapr")], list(sets)), "Deployment")[
            "spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/priority-pubsub-dapr-resources"])

    assert checksum() != checksum("dapr.resources.manifests.extra\\.yaml=kind: Resiliency")


def test_keda_can_also_scale_on_the_live_workers_needed_gauge(helm: Helm) -> None:
    """A Prometheus trigger on priority_pubsub_workers_needed, summed over the
    replicas (each replica counts its own deliveries), one replica per concurrency workers."""
    docs = helm.render([_example("sqs")], [
        "keda.workersNeeded.enabled=true",
        "keda.workersNeeded.serverAddress=http://prometheus.monitoring.svc:9090",
        "config.concurrency=8",
    ])
    backlog, capacity = one(docs, "ScaledObject")["spec"]["triggers"]
    assert backlog["type"] == "aws-sqs-queue"
    assert capacity == {"type": "prometheus", "metadata": {
        "serverAddress": "http://prometheus.monitoring.svc:9090",
        "query": 'max(sum by (queue) (priority_pubsub_workers_needed{namespace="work"}))',
        "threshold": "8"}}
    refused = helm.render_error([_example("sqs")], ["keda.workersNeeded.enabled=true"])
    assert "keda.workersNeeded.serverAddress is required" in refused


def test_monitor_tokens_come_from_the_secret_as_config_overrides(helm: Helm) -> None:
    docs = helm.render([_example("local")], [
        "secrets.existingSecret=ops", "secrets.monitorReadTokenKey=read",
        "secrets.monitorAdminTokenKey=admin"])
    env = {e["name"]: e.get("valueFrom") for e in sidecar_container(_pod_spec(docs))["env"]}
    assert env["PRIORITY_PUBSUB_MONITOR__READ_TOKEN"] == {
        "secretKeyRef": {"name": "ops", "key": "read"}}
    assert env["PRIORITY_PUBSUB_MONITOR__ADMIN_TOKEN"] == {
        "secretKeyRef": {"name": "ops", "key": "admin"}}
