"""The manual: the site builds with ``--strict`` (a broken link or anchor, or a page left out
of the nav, fails), and the README stays an entrance whose links all land."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=110, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    for page in ("reference/config/index.html", "reference/cli/index.html",
                 "config.schema.json", "brokers/sqs/index.html", "dapr/migration/index.html"):
        assert (tmp_path / page).is_file(), page


def test_the_readme_is_an_entrance() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo" in text
    assert "make test" in text


def test_contributing_lays_out_every_layer() -> None:
    """CONTRIBUTING.md's layout names each layer of the import contract, in its order."""
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"][0]["layers"]
    block = (ROOT / "CONTRIBUTING.md").read_text().split("## The layout", 1)[1].split("```")[1]
    named = [line.split("  ")[0].strip() for line in block.splitlines() if line[:1].isalpha()]
    assert named == layers


def test_every_readme_link_lands() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) > 10  # the site's pages are linked
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []
