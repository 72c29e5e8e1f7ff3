"""The wheel a user gets (``pip wheel .``, as the Dockerfile's ``pip install .``) installs the
whole package: built here, installed into a fresh virtualenv (not editable), every module
imported and the commands that once failed from a wheel run from it.

Speed: the fresh venv gets the wheel alone (``--no-deps``); the dependencies come from this
test environment's site-packages through a ``.pth`` line. A path line in a ``.pth`` file
does not run that directory's own ``.pth`` files, so the editable install of the working tree
is *not* active in the fresh venv; the test asserts the package is imported from the venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support.dapr_resources import snssqs_component, subscription_v2, write_resources
from tests.support.moto_server import MotoServer

ROOT = Path(__file__).resolve().parents[2]

# Modules whose import needs an optional SDK: skipped only when that SDK is absent here.
OPTIONAL_SDKS = {
    "priority_pubsub.analytics": "pyspark",
    "priority_pubsub.drivers.azure_servicebus": "azure.servicebus",
    "priority_pubsub.drivers.gcp_pubsub": "google.cloud.pubsub_v1",
    "priority_pubsub.drivers.rabbitmq": "aio_pika",
    "priority_pubsub.drivers.redis": "redis",
    "priority_pubsub.drivers.sqs": "boto3",
    "priority_pubsub.publish_api.grpc": "grpc",
}

IMPORT_ALL = """
import importlib, importlib.util, json, pkgutil, sys
import priority_pubsub
optional = json.loads(sys.argv[1])
imported, skipped = [], []
for info in pkgutil.walk_packages(priority_pubsub.__path__, "priority_pubsub."):
    if info.name.endswith(".__main__"):
        continue  # importing it runs the CLI
    sdk = next((s for prefix, s in optional.items()
                if info.name == prefix or info.name.startswith(prefix + ".")), None)
    if sdk is not None and importlib.util.find_spec(sdk.split(".")[0]) is None:
        skipped.append(info.name)
        continue
    importlib.import_module(info.name)
    imported.append(info.name)
print(json.dumps({"file": priority_pubsub.__file__, "imported": imported, "skipped": skipped}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from this tree; returns its ``bin`` directory."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(work / "dist"), str(ROOT)],
        check=True, capture_output=True, cwd=work, timeout=300,
    )
    [wheel] = (work / "dist").glob("priority_pubsub-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)],
        check=True, capture_output=True, timeout=300,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def run(bin_dir: Path, *args: str, cwd: Path,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",
                                                                   "VIRTUAL_ENV")}
    return subprocess.run([*args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**environment, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                               **(env or {})})


def test_every_module_imports_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    result = run(installed, str(installed / "python"), "-c", IMPORT_ALL,
                 json.dumps(OPTIONAL_SDKS), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert found["file"].startswith(str(installed.parent)), found["file"]  # not the tree
    imported = set(found["imported"])
    assert {"priority_pubsub.provision", "priority_pubsub.provision.aws",
            "priority_pubsub.dapr.snssqs", "priority_pubsub.drivers.local.driver",
            "priority_pubsub.transforms.sns_envelope", "priority_pubsub.cli"} <= imported
    # every module of the tree is in the wheel (imported, or skipped for an absent SDK)
    tree = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            for p in (ROOT / "priority_pubsub").rglob("*.py")}
    assert tree - {"priority_pubsub", "priority_pubsub.__main__"} == imported | set(
        found["skipped"])


def test_provision_dry_run_from_the_wheel(installed: Path, tmp_path: Path,
                                          moto_server: MotoServer) -> None:
    queue = f"wheel-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "driver": {"type": "sqs", "endpoint_url": moto_server.endpoint_url,
                   "region": moto_server.region},
        "queues": [{"name": queue}],
        "app": {"url": "http://127.0.0.1:1"},
    }))
    result = run(installed, str(installed / "priority-pubsub"), "provision", "--dry-run",
                 "--json", "-c", str(config), cwd=tmp_path)
    assert result.returncode == 3, result.stderr[-3000:]  # 3: something would be created
    actions = json.loads(result.stdout)["actions"]
    assert any(a["resource"].endswith(queue) and a["action"] == "create" for a in actions)


def test_report_help_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    result = run(installed, str(installed / "priority-pubsub"), "report", "--help",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "journal" in result.stdout.lower()


def test_dapr_mode_check_offline_from_the_wheel(installed: Path, tmp_path: Path,
                                                moto_server: MotoServer) -> None:
    resources = write_resources(
        tmp_path / "resources", snssqs_component("shop", moto_server),
        subscription_v2("orders", "shop", "orders", default="/orders"))
    result = run(installed, str(installed / "priority-pubsub"), "check", "--offline",
                 "--resources-path", str(resources), "--app-id", "wheel-app",
                 "--app-port", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK: config valid (offline" in result.stderr
    assert json.loads(result.stdout)["driver"]["type"] == "sqs"

