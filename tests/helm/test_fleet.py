"""The chart's side of operating a fleet with long tasks:
``config.shutdown.mode: finish`` (the grace period follows the longest task timeout, the
app's preStop hook is the sidecar's drain, by port number, in both layouts),
``scaleIn.deletionCost`` (a Role and a projected token for the sidecar alone, only when on),
the ScaledObject's conservative scale-down, and the config checksum that rolls the pods only
for a change a live reload cannot apply. Every manifest is validated against the Kubernetes
schemas, as the other chart tests do."""

from __future__ import annotations

import json
import math
import shutil
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml

from priority_pubsub.drivers.base import QueueAdder
from priority_pubsub.settings.reload import RELOADABLE
from tests.helm.conftest import Helm
from tests.helm.manifests import (
    CHART,
    Doc,
    config_of,
    find,
    one,
    run,
    sidecar_container,
    unavailable,
    validate_all,
    validate_builtin,
)
from tests.helm.test_config import load_as_sidecar

pytestmark = pytest.mark.helm

LAYOUTS = {"classic": "sidecar.native=false", "native": "sidecar.native=true"}
MARGIN_S = 15  # sidecar.terminationMarginSeconds' default
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def example(name: str) -> Path:
    return CHART / "ci" / f"{name}-values.yaml"


def values_file(directory: Path, values: dict[str, Any], name: str = "values") -> Path:
    """A values file (``--set`` would make a string of a float); renders are cached by the
    arguments, so each set of values gets its own ``name``."""
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def pod_spec(docs: list[Doc]) -> Doc:
    spec: Doc = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def app_container(pod: Doc) -> Doc:
    return next(c for c in pod["containers"] if c["name"] == "app")


def finish(**shutdown: Any) -> dict[str, Any]:
    return {"config": {"shutdown": {"mode": "finish", **shutdown}}}


def queues(*timeouts: float | None) -> list[dict[str, Any]]:
    return [{"name": f"q{n}", **({} if t is None else {"timeout_s": t})}
            for n, t in enumerate(timeouts)]


# (example, extra values, the longest task timeout the grace period must hold, block_s)
CASES: dict[str, tuple[str, dict[str, Any], int, int]] = {
    "app timeout": ("local", finish(), 3600, 0),
    "a queue longer than the app": (
        "local", {"config": {"queues": queues(30, 7200.5), "app": {"timeout_s": 60},
                             "shutdown": {"mode": "finish"}}}, 7201, 0),
    "every queue its own": (
        "local", {"config": {"queues": queues(30, 90), "shutdown": {"mode": "finish"}}}, 90, 0),
    "a queue without one takes the app's": (
        "local", {"config": {"queues": queues(30, None), "app": {"timeout_s": 600},
                             "shutdown": {"mode": "finish"}}}, 600, 0),
    "block_s first": ("local", finish(block_s=4.5), 3600, 5),
    "sqs long poll": ("sqs", finish(), 3600, 0),
    "dapr: the app's": ("dapr", finish(), 60, 0),
    "dapr: a topic's": (
        "dapr", {"config": {"shutdown": {"mode": "finish"},
                            "dapr": {"priorities": [{"topic": "orders-high", "timeout_s": 900},
                                                    "orders"]}}}, 900, 0),
}


def dapr_manifests_with(subscription_timeout: str, resiliency: dict[str, str]
                        ) -> dict[str, Any]:
    manifests = yaml.safe_load(example("dapr").read_text())["dapr"]["resources"]["manifests"]
    docs = list(yaml.safe_load_all(manifests["subscriptions.yaml"]))
    docs[0]["spec"]["metadata"] = {"timeout_s": subscription_timeout}
    manifests["subscriptions.yaml"] = yaml.safe_dump_all(docs)
    manifests["resiliency.yaml"] = {
        "apiVersion": "dapr.io/v1alpha1", "kind": "Resiliency", "metadata": {"name": "r"},
        "spec": {"policies": {"timeouts": resiliency},
                 "targets": {"components": {"orderpubsub": {"inbound": {"timeout": "long"}}}}}}
    return manifests


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_finish_mode_waits_for_the_longest_task_and_drains_before_the_app_stops(
    helm: Helm, tmp_path: Path, case: str, layout: str
) -> None:
    name, values, longest, block = CASES[case]
    docs = helm.render([example(name), values_file(tmp_path, values)], [LAYOUTS[layout]])
    validate_all(docs)
    pod = pod_spec(docs)
    config = config_of(docs)
    driver = config.get("driver") or {}
    poll = driver.get("wait_time_s", 20) if driver.get("type") == "sqs" else 0
    assert pod["terminationGracePeriodSeconds"] == longest + block + MARGIN_S + poll
    assert config["shutdown"]["mode"] == "finish"
    # the app's preStop is the sidecar's drain on its ops port, by number, in both layouts
    sidecar = sidecar_container(pod)
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    hook = app_container(pod)["lifecycle"]["preStop"]
    assert hook == {"httpGet": {"path": "/drain?wait=true", "port": ports["metrics"]}}
    assert isinstance(hook["httpGet"]["port"], int)
    assert config["server"]["port"] == ports["metrics"]
    assert config["server"]["host"] == "0.0.0.0"  # the kubelet calls the pod IP


@pytest.mark.parametrize("example_name", ["local", "sqs"])
def test_the_grace_period_holds_the_longest_timeout_the_sidecar_applies(
    helm: Helm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example_name: str
) -> None:
    """The chart's longest timeout is the sidecar's own: each queue's ``timeout_s``, else
    ``app.timeout_s``, as ``settings.config`` reads them."""
    values = {"config": {"queues": queues(45.2, None, 1200), "app": {"timeout_s": 300},
                         "shutdown": {"mode": "finish", "block_s": 2}}}
    docs = helm.render([example(example_name), values_file(tmp_path, values)])
    pod = pod_spec(docs)
    settings = load_as_sidecar(docs, sidecar_container(pod), tmp_path, monkeypatch)
    longest = max(q.timeout_s or settings.app.timeout_s for q in settings.queues)
    driver = config_of(docs)["driver"]
    poll = driver.get("wait_time_s", 20) if driver["type"] == "sqs" else 0
    assert pod["terminationGracePeriodSeconds"] == (
        math.ceil(longest) + math.ceil(settings.shutdown.block_s) + MARGIN_S + poll)
    assert settings.shutdown.mode == "finish"


def test_dapr_manifests_timeouts_count(helm: Helm, tmp_path: Path) -> None:
    """A Subscription's metadata ``timeout_s``; with ``app.timeout_s`` null, the Resiliency's
    (a Go duration, the longest of them)."""
    manifests = dapr_manifests_with("1200", {"long": "1h30m0.5s", "short": "250ms"})
    values = {"config": {"shutdown": {"mode": "finish"}, "app": {"timeout_s": None}},
              "dapr": {"resources": {"manifests": manifests}}}
    docs = helm.render([example("dapr"), values_file(tmp_path, values)])
    validate_all(docs)
    assert pod_spec(docs)["terminationGracePeriodSeconds"] == 5401 + MARGIN_S
    values["dapr"]["resources"]["manifests"] = dapr_manifests_with("7000", {"long": "10m"})
    docs = helm.render([example("dapr"), values_file(tmp_path, values, "longer")])
    assert pod_spec(docs)["terminationGracePeriodSeconds"] == 7000 + MARGIN_S


def test_dapr_with_an_existing_configmap_needs_the_grace_period_set(helm: Helm) -> None:
    sets = ["config.shutdown.mode=finish", "dapr.resources.manifests=null",
            "dapr.resources.existingConfigMap=my-dapr"]
    refused = helm.render_error([example("dapr")], sets)
    [line] = [line for line in refused.splitlines() if "existingConfigMap" in line]
    assert "set terminationGracePeriodSeconds" in line
    docs = helm.render([example("dapr")], [*sets, "terminationGracePeriodSeconds=4000"])
    assert pod_spec(docs)["terminationGracePeriodSeconds"] == 4000


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_return_mode_keeps_todays_hooks(helm: Helm, layout: str) -> None:
    pod = pod_spec(helm.render([example("local")], [LAYOUTS[layout]]))
    lifecycle = app_container(pod).get("lifecycle")
    if layout == "native":
        assert lifecycle is None
    else:
        assert lifecycle == {"preStop": {"sleep": {"seconds": 120}}}  # ceil(grace_s)


def kube_api_volume(pod: Doc) -> Doc | None:
    return next((v for v in pod["volumes"] if v["name"] == "priority-pubsub-kube-api"), None)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_deletion_cost_gets_a_role_and_a_token_for_the_sidecar_alone(
    helm: Helm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    docs = helm.render([example("sqs")], ["scaleIn.deletionCost=true", LAYOUTS[layout]])
    validate_all(docs)
    pod = pod_spec(docs)
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    role, binding = one(docs, "Role"), one(docs, "RoleBinding")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": "work"}]
    assert pod["serviceAccountName"] == account
    # no token for the app: the pod's automount stays off, the projected one is the sidecar's
    assert pod["automountServiceAccountToken"] is False
    volume = kube_api_volume(pod)
    assert volume is not None
    assert volume["projected"]["sources"] == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt",
                                                             "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]
    sidecar = sidecar_container(pod)
    mounts = {m["name"]: m for m in sidecar["volumeMounts"]}
    assert mounts["priority-pubsub-kube-api"] == {
        "name": "priority-pubsub-kube-api", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}
    others = [c for c in pod["containers"] + pod.get("initContainers", []) if c is not sidecar]
    assert others
    assert all(m["name"] != "priority-pubsub-kube-api"
               for c in others for m in c.get("volumeMounts", []))
    # the sidecar is told, and reads the files where they are mounted
    settings = load_as_sidecar(docs, sidecar, tmp_path, monkeypatch)
    assert settings.kubernetes.deletion_cost
    assert str(settings.kubernetes.service_account_dir) == SERVICE_ACCOUNT_DIR
    env = {e["name"]: e.get("valueFrom") for e in sidecar["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_no_rbac_and_no_token_without_deletion_cost(helm: Helm, layout: str) -> None:
    docs = helm.render([example("sqs")], [LAYOUTS[layout]])
    assert find(docs, "Role") == []
    assert find(docs, "RoleBinding") == []
    pod = pod_spec(docs)
    assert kube_api_volume(pod) is None
    assert all(m["name"] != "priority-pubsub-kube-api"
               for m in sidecar_container(pod)["volumeMounts"])
    assert "kubernetes" not in config_of(docs)


def test_the_sidecars_option_alone_is_refused(helm: Helm) -> None:
    refused = helm.render_error([example("local")], ["config.kubernetes.deletion_cost=true"])
    assert "set scaleIn.deletionCost instead" in refused


def test_keda_scales_in_one_pod_at_a_time_after_a_window(helm: Helm) -> None:
    scaled = one(helm.render([example("sqs")]), "ScaledObject")["spec"]
    behavior = scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior == {"scaleDown": {"stabilizationWindowSeconds": 600, "policies": [
        {"type": "Pods", "value": 1, "periodSeconds": 300}]}}
    # KEDA hands it to the HPA it makes: valid as an autoscaling/v2 HorizontalPodAutoscaler's
    validate_builtin({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "keda-hpa"},
        "spec": {"scaleTargetRef": scaled["scaleTargetRef"], "maxReplicas": 10,
                 "behavior": behavior}})
    default = one(helm.render([example("sqs")], ["keda.scaleDown=null"]), "ScaledObject")
    assert "advanced" not in default["spec"]


@pytest.fixture(scope="module")
def probed_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart with one more template that renders two of its lists as JSON."""
    chart = tmp_path_factory.mktemp("chart") / "priority-pubsub"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "probe.yaml").write_text(
        'reloadable: {{ include "priority-pubsub.reloadableKeys" . | quote }}\n'
        'adders: {{ include "priority-pubsub.queueAddingDrivers" . | quote }}\n')
    return chart


def chart_list(helm: Helm, chart: Path, key: str) -> list[str]:
    result = run([*helm.template_args([example("local")], chart=chart), "--show-only",
                  "templates/probe.yaml"])
    assert result.returncode == 0, result.stderr
    value: list[str] = json.loads(yaml.safe_load(result.stdout)[key])
    return value


def test_the_charts_reloadable_keys_are_the_sidecars(helm: Helm, probed_chart: Path) -> None:
    assert chart_list(helm, probed_chart, "reloadable") == list(RELOADABLE)


def test_the_charts_queue_adding_drivers_are_the_sidecars(
    helm: Helm, probed_chart: Path
) -> None:
    adders = set()
    for point in entry_points(group="priority_pubsub.drivers"):
        try:
            driver = point.load()
        except ImportError as exc:
            unavailable(f"driver {point.name} cannot be imported here: {exc}")
        if issubclass(driver, QueueAdder):
            adders.add(point.name)
    assert sorted(chart_list(helm, probed_chart, "adders")) == sorted(adders)


def config_checksum(helm: Helm, directory: Path, name: str, values: dict[str, Any],
                    label: str) -> str:
    docs = helm.render([example(name), values_file(directory, values, label)])
    template = one(docs, "Deployment")["spec"]["template"]
    value: str = template["metadata"]["annotations"]["checksum/priority-pubsub-config"]
    return value


def with_queues(name: str, change: dict[str, Any] | None = None, extra: bool = False
                ) -> dict[str, Any]:
    """The example's queues, the first one changed and one added when asked."""
    found = yaml.safe_load(example(name).read_text())["config"]["queues"]
    found = [{**found[0], **(change or {})}, *found[1:]]
    return {"config": {"queues": found + ([{"name": "extra"}] if extra else [])}}


CHANGES: dict[str, tuple[dict[str, Any], bool]] = {
    "concurrency": ({"config": {"concurrency": 9}}, False),
    "scheduling": ({"config": {"scheduling": "strict"}}, False),
    "retry": ({"config": {"retry": {"max_attempts": 4}}}, False),
    "app.timeout_s": ({"config": {"app": {"timeout_s": 120}}}, False),
    "log.level": ({"config": {"log": {"level": "debug"}}}, False),
    "a queue's reserve": (with_queues("local", {"reserve": 1}), False),
    "a queue added (local adds it at run time)": (with_queues("local", extra=True), False),
    "lease": ({"config": {"lease": {"duration_s": 90}}}, True),
    "app.url": ({"config": {"app": {"url": "http://127.0.0.1:8001/tasks"}}}, True),
    "server.port": ({"config": {"server": {"port": 9500}}}, True),
    "reload.watch off": ({"config": {"reload": {"watch": False}, "concurrency": 9}}, True),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_only_a_restart_only_change_rolls_the_pods(
    helm: Helm, tmp_path: Path, change: str
) -> None:
    values, rolls = CHANGES[change]
    before = config_checksum(helm, tmp_path, "local", {}, "before")
    assert (config_checksum(helm, tmp_path, "local", values, "after") != before) == rolls


def test_a_queue_added_rolls_the_pods_where_the_driver_cannot_add_one(
    helm: Helm, tmp_path: Path
) -> None:
    before = config_checksum(helm, tmp_path, "rabbitmq", {}, "before")
    added = config_checksum(helm, tmp_path, "rabbitmq", with_queues("rabbitmq", extra=True),
                            "added")
    weighted = config_checksum(helm, tmp_path, "rabbitmq",
                               with_queues("rabbitmq", {"weight": 7}), "weighted")
    assert added != before  # RabbitMQ takes no queue after start: a restart adds it
    assert weighted == before
