"""Render the chart and check Kubernetes objects: helpers shared by the chart tests.

kubernetes-validate checks built-in kinds against the OpenAPI schemas it ships (offline).
It has no schemas for custom resources (ServiceMonitor, PrometheusRule, ScaledObject,
SparkApplication), so those get a shape check of the fields their operators require, see
``check_custom_resource``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from tests.support.servers import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "priority-pubsub"
EXAMPLES = sorted(CHART.glob("ci/*-values.yaml"))
# The chart's minimum (kubeVersion >= 1.30: preStop sleep) and a current release.
K8S_VERSIONS = ("1.30.0", "1.35.0")
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"),
}
SIDECAR = "priority-pubsub"
Doc = dict[str, Any]


unavailable = skip_or_fail  # the helm tests' name for it


def run(args: Sequence[str | Path], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=60, check=False, cwd=cwd
    )


def parse_docs(text: str) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def validate_builtin(doc: Doc) -> None:
    """Strict OpenAPI validation (unknown fields are errors) for every version we support."""
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            raise AssertionError(
                f"{doc['kind']}/{doc['metadata']['name']} invalid for k8s {version} at {path}: "
                f"{exc.message}"
            ) from None


def check_custom_resource(doc: Doc) -> None:
    meta = doc["metadata"]
    assert meta.get("name"), doc
    spec = doc["spec"]
    kind = doc["kind"]
    if kind == "ScaledObject":
        assert spec["scaleTargetRef"]["name"]
        assert spec["minReplicaCount"] <= spec["maxReplicaCount"]
        assert spec["triggers"], "a ScaledObject needs at least one trigger"
        for trigger in spec["triggers"]:
            assert trigger["type"] in {"aws-sqs-queue", "gcp-pubsub", "azure-servicebus",
                                       "redis-streams", "rabbitmq"}
            # KEDA rejects non-string metadata values.
            bad = {k: v for k, v in trigger["metadata"].items() if not isinstance(v, str)}
            assert not bad, f"non-string KEDA metadata: {bad}"
    elif kind == "ServiceMonitor":
        assert spec["selector"]["matchLabels"]
        for endpoint in spec["endpoints"]:
            assert endpoint["port"]
            assert endpoint["path"] == "/metrics"
    elif kind == "PrometheusRule":  # promtool checks the rules themselves (test_monitoring)
        for group in spec["groups"]:
            assert group["name"]
            assert group["rules"]
            for rule in group["rules"]:
                assert rule["alert"]
                assert rule["expr"]
                assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
    elif kind == "TriggerAuthentication":
        assert spec.get("podIdentity", {}).get("provider") or spec.get("secretTargetRef"), spec
    elif kind == "SparkApplication":
        assert spec["type"] == "Python"
        assert spec["mainApplicationFile"]
        assert spec["driver"]["serviceAccount"]
        assert spec["executor"]["instances"] >= 1


def validate_all(docs: Iterable[Doc]) -> None:
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            check_custom_resource(doc)
        else:
            validate_builtin(doc)


def find(docs: Iterable[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def one(docs: Iterable[Doc], kind: str) -> Doc:
    found = find(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def sidecar_container(pod_spec: Doc) -> Doc:
    """The sidecar, wherever it runs: a container, or a native sidecar init container."""
    containers: list[Doc] = pod_spec.get("containers", []) + pod_spec.get("initContainers", [])
    candidates = [c for c in containers if c["name"] == SIDECAR]
    assert len(candidates) == 1, "exactly one priority-pubsub container expected"
    return candidates[0]


def config_map(docs: Iterable[Doc]) -> Doc:
    """The sidecar's config ConfigMap (Dapr mode renders a second one: the resources)."""
    found = [d for d in find(docs, "ConfigMap") if "config.yaml" in d.get("data", {})]
    assert len(found) == 1, f"expected one config ConfigMap, got {len(found)}"
    return found[0]


def config_of(docs: Iterable[Doc]) -> dict[str, Any]:
    configmap = config_map(docs)
    loaded: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    assert isinstance(loaded, dict)
    return loaded
