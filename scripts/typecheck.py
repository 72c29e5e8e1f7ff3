"""Run mypy (settings from ``pyproject.toml``) over the package, its drivers and transforms.

Kept as a script (rather than a bare ``mypy priority_pubsub``) so CI, the Makefile and every
engineer run the same command with the same source list.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mypy import build
from mypy.config_parser import parse_config_file
from mypy.errors import CompileError
from mypy.modulefinder import BuildSource
from mypy.options import Options

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "priority_pubsub"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> list[BuildSource]:
    return [
        BuildSource(str(path), module_name(path))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "__pycache__" not in path.parts
    ]


def main() -> int:
    options = Options()
    parse_config_file(options, lambda: None, str(ROOT / "pyproject.toml"), sys.stdout,
                      sys.stderr)
    # mypy's own command line reads it; its API does not (the Makefile keeps one between clones)
    options.cache_dir = os.environ.get("MYPY_CACHE_DIR", options.cache_dir)
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
