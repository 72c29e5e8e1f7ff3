"""The local files the uploader looks after: closed journal files waiting for their upload,
and kept copies of uploaded ones (``<name>.uploaded``, ``keep_local``).

The directory is the truth, not a list in memory: what a crashed run left (closed, or still
``.open`` and closed by the writer's next start) is found by listing it, and a file the
bound dropped is simply gone. Files of any replica are uploaded (a pod that kept the volume
under a new name still ships its predecessor's); the writer closes only its own replica's
open files.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from priority_pubsub.telemetry.journal import CLOSED_NAME, UPLOADED_SUFFIX


@dataclass(frozen=True, slots=True)
class LocalFile:
    path: Path
    size: int
    mtime: float


def _listed(directory: Path, suffix: str) -> list[LocalFile]:
    found = []
    for path in directory.glob(f"journal-*.jsonl{suffix}"):
        if not CLOSED_NAME.fullmatch(path.name.removesuffix(suffix)):
            continue
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            info = path.stat()
            found.append(LocalFile(path, info.st_size, info.st_mtime))
    return sorted(found, key=lambda f: (f.mtime, f.path.name))


def waiting(directory: Path) -> list[LocalFile]:
    """Closed files not yet uploaded, oldest first."""
    return _listed(directory, "")


def kept(directory: Path) -> list[LocalFile]:
    """Kept copies of uploaded files, oldest first."""
    return _listed(directory, UPLOADED_SUFFIX)


def over_bound(directory: Path, bound_bytes: int) -> tuple[list[LocalFile], list[LocalFile]]:
    """What must go for the spool (waiting files and kept copies) to fit ``bound_bytes``:
    kept copies first, then the oldest waiting files; (kept, waiting) to remove."""
    waiting_files, kept_files = waiting(directory), kept(directory)
    excess = sum(f.size for f in waiting_files) + sum(f.size for f in kept_files) - bound_bytes
    drop_kept: list[LocalFile] = []
    drop_waiting: list[LocalFile] = []
    for group, out in ((kept_files, drop_kept), (waiting_files, drop_waiting)):
        for local in group:
            if excess <= 0:
                break
            out.append(local)
            excess -= local.size
    return drop_kept, drop_waiting
