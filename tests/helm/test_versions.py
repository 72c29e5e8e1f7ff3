"""One version everywhere: the package's (``pyproject.toml``, what ``priority-pubsub
--version`` prints), the chart's ``version`` and ``appVersion`` (the sidecar image's default
tag), the chart the test consumer chart depends on, every priority-pubsub image tag in
``deploy/`` and ``charts/``, and a CHANGELOG section. A release bumps them together."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import priority_pubsub
from tests.helm.manifests import CHART, ROOT

IMAGE_REF = re.compile(r"\bpriority-pubsub(?:-report)?:(?P<tag>[A-Za-z0-9_.-]+)")
"""An image reference to one of the project's images with a tag (``localhost/...:ci`` builds
of the image tests are not under deploy/ or charts/)."""
SCANNED = ("*.yaml", "*.yml", "*.sh", "*.tpl", "*.md", "*.txt", "Dockerfile")


def package_version() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def image_tags() -> dict[str, list[str]]:
    """Every tag given to a priority-pubsub image under deploy/ and charts/, by file: image
    references (``priority-pubsub:TAG``) and kustomize ``images:`` entries."""
    found: dict[str, list[str]] = {}
    for top in (ROOT / "deploy", ROOT / "charts"):
        for pattern in SCANNED:
            for path in sorted(top.rglob(pattern)):
                text = path.read_text()
                tags = [m["tag"] for m in IMAGE_REF.finditer(text)]
                if path.name == "kustomization.yaml":
                    document = yaml.safe_load(text) or {}
                    tags += [str(image["newTag"]) for image in document.get("images", [])
                             if str(image.get("name", "")).startswith("priority-pubsub")
                             and "newTag" in image]
                if tags:
                    found[str(path.relative_to(ROOT))] = tags
    return found


def test_the_cli_prints_the_package_version() -> None:
    printed = subprocess.run([sys.executable, "-m", "priority_pubsub", "--version"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    assert package_version() in printed.split()
    assert priority_pubsub.__version__ == package_version()  # reinstall after a bump


def test_chart_version_and_app_version_are_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (package_version(), package_version())


def test_the_consumer_chart_depends_on_this_chart_version() -> None:
    consumer = yaml.safe_load((ROOT / "tests" / "helm" / "consumer" / "Chart.yaml").read_text())
    wanted = [d["version"] for d in consumer["dependencies"] if d["name"] == "priority-pubsub"]
    assert wanted == [package_version()]


def test_every_image_tag_in_deploy_and_charts_is_the_package_version() -> None:
    found = image_tags()
    # the places that name a tag today: a tag moved elsewhere must still be found
    for path in ("deploy/kustomize/base/kustomization.yaml",
                 "deploy/kustomize/components/sidecar/sidecar.yaml",
                 "deploy/spark/sparkapplication.yaml", "deploy/spark/spark-submit.sh"):
        assert path in found, f"no priority-pubsub image tag found in {path}"
    wrong = {path: tags for path, tags in found.items()
             if any(tag != package_version() for tag in tags)}
    assert not wrong, f"image tags that are not {package_version()}: {wrong}"


def test_the_changelog_has_a_section_for_the_package_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(package_version())}\]", changelog, re.MULTILINE)


def test_a_wrong_tag_is_found(tmp_path: Path) -> None:
    """The scan sees the forms the files use (so the check above can fail)."""
    text = ('image: registry.example.com/priority-pubsub-report:0.0.9\n'
            'IMAGE="${IMAGE:-priority-pubsub:0.0.8}"\n')
    assert [m["tag"] for m in IMAGE_REF.finditer(text)] == ["0.0.9", "0.0.8"]
