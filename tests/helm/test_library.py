"""Mode (b): a user's own chart adds the sidecar through the library templates.

``tests/helm/consumer`` is such a chart. It is copied to a temporary directory (helm writes
``charts/`` and ``Chart.lock`` next to it), its ``file://`` dependency is pointed at this
repository's chart, and ``helm dependency build`` packs it, all offline.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.helm.conftest import Helm
from tests.helm.manifests import CHART, Doc, one, run, sidecar_container, validate_all
from tests.helm.test_config import load_as_sidecar
from tests.helm.tools import Tools

pytestmark = pytest.mark.helm

CONSUMER = Path(__file__).parent / "consumer"


@pytest.fixture(scope="module")
def consumer_chart(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> Path:
    chart = tmp_path_factory.mktemp("consumer") / "legacy-worker"
    shutil.copytree(CONSUMER, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["dependencies"][0]["repository"] = f"file://{CHART}"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    result = run([tools.helm, "dependency", "build", chart])
    assert result.returncode == 0, result.stderr
    return chart


def _pod(docs: list[Doc]) -> Doc:
    spec: Doc = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("native", [False, True], ids=["classic", "native"])
def test_consumer_chart_gets_the_sidecar(helm: Helm, consumer_chart: Path, native: bool) -> None:
    docs = helm.render(sets=[f"priority-pubsub.sidecar.native={str(native).lower()}"],
                       chart=consumer_chart)
    validate_all(docs)
    # mode: sidecar renders no Deployment of its own: the only one is the user's.
    assert one(docs, "Deployment")["metadata"]["name"] == "demo-worker"
    pod = _pod(docs)
    sidecar = sidecar_container(pod)
    assert ("initContainers" in pod) == native
    expected = ["worker"] if native else ["worker", sidecar["name"]]
    assert [c["name"] for c in pod["containers"]] == expected
    # The names the library renders in the user's chart are those of the subchart's objects.
    configmap = one(docs, "ConfigMap")["metadata"]["name"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["priority-pubsub-config"]["configMap"]["name"] == configmap
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    assert pod["terminationGracePeriodSeconds"] == 45 + 15 + 20  # grace, margin, SQS long poll
    annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert len(annotations["checksum/priority-pubsub-config"]) == 64


def test_consumer_config_is_accepted(
    helm: Helm, consumer_chart: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = helm.render(chart=consumer_chart)
    settings = load_as_sidecar(docs, sidecar_container(_pod(docs)), tmp_path, monkeypatch)
    assert settings.queue_names == ("vip", "standard")
    assert settings.driver.options()["region"] == "eu-central-1"


@pytest.mark.parametrize("native", [False, True], ids=["classic", "native"])
def test_consumer_app_drains_first_in_finish_mode(
    helm: Helm, consumer_chart: Path, native: bool
) -> None:
    """``sidecar.appLifecycle``: the user's app container gets the sidecar's drain as its
    preStop hook (by port number) with ``shutdown.mode: finish``, nothing without it."""
    sets = [f"priority-pubsub.sidecar.native={str(native).lower()}"]
    worker = next(c for c in _pod(helm.render(sets=sets, chart=consumer_chart))["containers"]
                  if c["name"] == "worker")
    assert "lifecycle" not in worker
    docs = helm.render(sets=[*sets, "priority-pubsub.config.shutdown.mode=finish"],
                       chart=consumer_chart)
    validate_all(docs)
    pod = _pod(docs)
    worker = next(c for c in pod["containers"] if c["name"] == "worker")
    port = next(p["containerPort"] for p in sidecar_container(pod)["ports"]
                if p["name"] == "metrics")
    assert worker["lifecycle"] == {"preStop": {"httpGet": {"path": "/drain?wait=true",
                                                           "port": port}}}
    assert pod["terminationGracePeriodSeconds"] == 3600 + 15 + 20  # app.timeout_s, SQS poll
