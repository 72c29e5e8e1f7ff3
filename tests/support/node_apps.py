"""JavaScript apps run with their own ``node_modules``, installed from their own
``package-lock.json`` (``npm ci``: exactly the locked versions).

As ``app_venv`` does for venvs: installed once per lock file content (and Node version) under
``~/.cache/priority-pubsub/node/<hash>`` (``tests.support.user_cache``) and reused, a file lock
keeping two test processes from installing the same one at once. Installing needs the npm
registry and ``node``: without them the tests skip locally with the reason and fail in CI.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

from tests.support.servers import skip_or_fail
from tests.support.user_cache import user_cache


def node() -> str:
    found = shutil.which("node")
    if found is None or shutil.which("npm") is None:
        skip_or_fail("node and npm are needed for the JavaScript SDK apps")
    assert found is not None
    return found


def node_modules(app_dir: Path) -> Path:
    """The ``node_modules`` of ``app_dir``'s locked dependencies (installed on first use)."""
    version = subprocess.run([node(), "--version"], capture_output=True, text=True,
                             check=True).stdout
    lock_file = app_dir / "package-lock.json"
    key = hashlib.sha256(lock_file.read_bytes() + version.encode()).hexdigest()[:16]
    target = user_cache("node") / key
    if (target / ".ready").exists():
        return target / "node_modules"
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".ready").exists():
            _install(target, app_dir)
    return target / "node_modules"


def _install(target: Path, app_dir: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(app_dir / name, target / name)
    result = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                            cwd=target, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        skip_or_fail(f"cannot install {app_dir / 'package-lock.json'}: {result.stderr[-800:]}")
    (target / ".ready").touch()
