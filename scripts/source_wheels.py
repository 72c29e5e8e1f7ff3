"""Build once, into a wheel directory kept outside the checkout, the dependencies published only
as source distributions (pyspark), so that ``make install`` on a fresh clone finds them built.

uv keeps the wheels it builds, but this machine's package registry answers every revalidation
as modified: uv downloaded and rebuilt pyspark (~40 s) on every fresh clone, every CI run. pip,
given the same requirement with that directory among its find-links, takes the wheel already
there (~1.5 s) and builds only when a newer release matches. The requirements are read from
``pyproject.toml``, so they never drift from what ``make install`` asks uv for.

Usage: ``python scripts/source_wheels.py WHEEL_DIR``
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ONLY = frozenset({"pyspark"})
"""Distributions with no wheel on the registry: the only ones worth keeping built."""


def source_only_requirements(pyproject: Path) -> list[str]:
    """The requirements of ``pyproject``'s extras that name a source-only distribution."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    found: list[str] = []
    for requirement in (r for group in extras.values() for r in group):
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        if name and name.group().lower() in SOURCE_ONLY and requirement not in found:
            found.append(requirement)
    return found


def main(wheels: Path) -> int:
    requirements = source_only_requirements(ROOT / "pyproject.toml")
    if not requirements:
        return 0
    wheels.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--find-links", str(wheels), "--wheel-dir", str(wheels), *requirements],
        check=False,
    ).returncode


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/source_wheels.py WHEEL_DIR")
    sys.exit(main(Path(sys.argv[1])))
