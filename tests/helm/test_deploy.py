"""deploy/: the kustomize manifests, the KEDA examples and the Spark report job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helm.manifests import (
    ROOT,
    Doc,
    find,
    one,
    parse_docs,
    run,
    sidecar_container,
    unavailable,
    validate_all,
)
from tests.helm.test_config import load_as_sidecar
from tests.helm.tools import Tools

pytestmark = pytest.mark.helm

DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = [
    DEPLOY / "kustomize" / "base",
    DEPLOY / "kustomize" / "examples" / "existing-workload",
]


def kustomize(tools: Tools, path: Path) -> list[Doc]:
    result = run([tools.kubectl, "kustomize", path])
    assert result.returncode == 0, result.stderr
    return parse_docs(result.stdout)


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_kustomization_renders_valid_objects(
    tools: Tools, path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = kustomize(tools, path)
    validate_all(docs)
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    sidecar = sidecar_container(pod)
    # configMapGenerator adds a content hash to the name; the volume must follow it.
    configmap = one(docs, "ConfigMap")["metadata"]["name"]
    config_volumes = [v for v in pod["volumes"] if "configMap" in v]
    assert [v["configMap"]["name"] for v in config_volumes] == [configmap]
    assert len(pod["containers"]) == 2  # the app's container kept, the sidecar added
    settings = load_as_sidecar(docs, sidecar, tmp_path, monkeypatch)
    assert pod["terminationGracePeriodSeconds"] >= settings.shutdown.grace_s + 10
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert settings.server.host == "0.0.0.0"
    assert settings.server.port == ports["metrics"]


@pytest.mark.parametrize("path", sorted((DEPLOY / "keda").glob("*.yaml")), ids=lambda p: p.stem)
def test_keda_examples(tools: Tools, path: Path) -> None:
    docs = parse_docs(path.read_text())
    validate_all(docs)
    scaled = one(docs, "ScaledObject")
    base = kustomize(tools, DEPLOY / "kustomize" / "base")
    assert scaled["spec"]["scaleTargetRef"]["name"] == one(base, "Deployment")["metadata"]["name"]
    auth_names = {d["metadata"]["name"] for d in find(docs, "TriggerAuthentication")}
    for trigger in scaled["spec"]["triggers"]:
        if "authenticationRef" in trigger:
            assert trigger["authenticationRef"]["name"] in auth_names
    env_container = scaled["spec"]["scaleTargetRef"].get("envSourceContainerName")
    if env_container:
        containers = one(base, "Deployment")["spec"]["template"]["spec"]["containers"]
        assert env_container in {c["name"] for c in containers}


def test_spark_application_matches_the_report_cli() -> None:
    docs = parse_docs((DEPLOY / "spark" / "sparkapplication.yaml").read_text())
    validate_all(docs)
    app = one(docs, "SparkApplication")["spec"]
    assert app["mainApplicationFile"].endswith("/report_job.py")
    from typer.main import get_command

    from priority_pubsub.cli import app as cli

    report = get_command(cli).commands["report"]  # type: ignore[attr-defined]
    params = report.make_context("report", list(app["arguments"])).params
    out_mounts = [m["mountPath"] for m in app["driver"]["volumeMounts"]]
    assert any(params["out"].startswith(m) for m in out_mounts), "--out must be on a mounted volume"


def test_spark_submit_script_is_valid_bash() -> None:
    script = DEPLOY / "spark" / "spark-submit.sh"
    assert os.access(script, os.X_OK)
    result = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.spark
@pytest.mark.timeout(600)
@pytest.mark.skipif(
    os.environ.get("PRIORITY_PUBSUB_SPARK_SUBMIT_TEST") != "1"
    and os.environ.get("CI", "").lower() not in ("1", "true", "yes"),
    reason="runs in CI; locally opt-in (PRIORITY_PUBSUB_SPARK_SUBMIT_TEST=1): a fresh JVM and "
    "the whole report take ~1-3 min here; the report itself is covered by tests/spark",
)
def test_report_job_runs_under_spark_submit(tmp_path: Path) -> None:
    """The spark-submit entry really reports, on the master spark-submit was given."""
    spark_submit = Path(sys.executable).with_name("spark-submit")
    if not spark_submit.exists() or shutil.which("java") is None:
        unavailable("spark-submit or java missing (pip install -e '.[spark]', a JRE)")
    from tests.spark.journals import T0, record, write

    journal = write(tmp_path / "journal" / "journal-1.jsonl", [
        record(f"m{i}", i % 3, T0 + i * 1000, T0 + i * 1000 + 50, T0 + i * 1000 + 900)
        for i in range(30)
    ])
    out = tmp_path / "report"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.sql.shuffle.partitions=2",
         str(DEPLOY / "spark" / "report_job.py"), str(journal), "--out", str(out)],
        capture_output=True, text=True, timeout=540, check=False, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = yaml.safe_load(result.stdout.strip().splitlines()[-1])
    assert isinstance(summary, dict)
    assert (out / "report.html").stat().st_size > 1000
