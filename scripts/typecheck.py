"""Run mypy (settings from ``pyproject.toml``) over the package as it is installed:
``drivers/`` and ``transforms/`` are ``priority_pubsub.drivers`` / ``.transforms``.

mypy does not follow setuptools' ``package-dir`` mapping, and its command line cannot say
"this file is that module" (``explicit_package_bases`` / ``mypy_path`` derive module names
from directories, so ``drivers/sqs.py`` would be ``drivers.sqs``). Its build API can: each
``BuildSource`` names its module, and imports between listed sources resolve by those names.
So no symlink tree is needed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mypy import build
from mypy.config_parser import parse_config_file
from mypy.errors import CompileError
from mypy.modulefinder import BuildSource
from mypy.options import Options

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "priority_pubsub": ROOT / "priority_pubsub",
    "priority_pubsub.drivers": ROOT / "drivers",
    "priority_pubsub.transforms": ROOT / "transforms",
}


def module_name(package: str, directory: Path, path: Path) -> str:
    parts = list(path.relative_to(directory).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def sources() -> list[BuildSource]:
    return [
        BuildSource(str(path), module_name(package, directory, path))
        for package, directory in PACKAGES.items()
        for path in sorted(directory.rglob("*.py"))
        if "__pycache__" not in path.parts
    ]


def main() -> int:
    options = Options()
    parse_config_file(options, lambda: None, str(ROOT / "pyproject.toml"), sys.stdout,
                      sys.stderr)
    try:
        result = build.build(sources(), options)
    except CompileError as exc:  # syntax errors and the like stop the build
        print("\n".join(exc.messages), file=sys.stderr)
        return 2
    for line in result.errors:
        print(line)
    count = sum(": error:" in line for line in result.errors)
    verdict = f"Found {count} errors" if count else "Success: no issues found"
    print(f"{verdict} in {len(sources())} source files")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main())
