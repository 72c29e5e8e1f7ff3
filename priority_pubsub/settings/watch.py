"""What the config is read from, as the reload's watch sees it: a cheap fingerprint to poll,
and a hash of the contents to show.

A Kubernetes ConfigMap volume changes a file without writing to it: the file is a symlink
into ``..data``, itself a symlink to a timestamped directory, and the kubelet swaps ``..data``
with a rename. ``fingerprint`` stats each path *following* the symlinks (device, inode, size,
mtime), so such a swap, an editor's write-and-rename and an in-place write all change it; a
directory (Dapr's resources) is fingerprinted by its YAML files, as ``dapr.manifests`` reads
them. Polling a few stats a second costs nothing and needs no inotify (which misses a swap of
a parent symlink, and is absent on some mounts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

Fingerprint = tuple[tuple[str, tuple[int, int, int, int] | None], ...]
RESOURCE_SUFFIXES = (".yaml", ".yml")


def watched_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Each path given, or for a directory its YAML files (sorted, as they are read)."""
    for path in paths:
        try:
            entries = sorted(path.iterdir()) if path.is_dir() else None
        except OSError:  # gone between the two calls: seen as missing
            entries = None
        if entries is None:
            yield path
        else:
            yield from (entry for entry in entries if entry.suffix in RESOURCE_SUFFIXES)


def fingerprint(paths: Iterable[Path]) -> Fingerprint:
    """Changes whenever any watched file's contents may have (None: a file is missing)."""
    found: list[tuple[str, tuple[int, int, int, int] | None]] = []
    for path in watched_files(paths):
        try:
            stat = path.stat()  # follows symlinks: a ConfigMap's ..data swap changes the inode
        except OSError:
            found.append((str(path), None))
            continue
        found.append((str(path), (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)))
    return tuple(found)


def content_hash(paths: Iterable[Path]) -> str:
    """A short hash of the watched files' contents (names left out: each pod mounts the same
    files, maybe elsewhere), to tell which replicas run which config."""
    digest = hashlib.sha256()
    for path in watched_files(paths):
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()[:12]
