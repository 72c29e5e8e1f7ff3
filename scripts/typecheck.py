"""Run mypy over the package as it is installed (``drivers/`` and ``transforms/`` mapped
under ``priority_pubsub``). mypy does not follow setuptools' package-dir mapping, so we lay
out a tree of symlinks with the installed shape and check that."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"drivers": ROOT / "drivers", "transforms": ROOT / "transforms"}


def main() -> int:
    tree = ROOT / "build" / "typecheck"
    shutil.rmtree(tree, ignore_errors=True)
    package = tree / "priority_pubsub"
    package.mkdir(parents=True)
    for entry in (ROOT / "priority_pubsub").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, target in MAPPED.items():
        (package / name).symlink_to(target)
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "-p", "priority_pubsub"]
    return subprocess.call(command, cwd=tree)


if __name__ == "__main__":
    sys.exit(main())
