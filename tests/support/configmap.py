"""A Kubernetes ConfigMap volume as the kubelet writes it, for live reload tests.

``config.yaml`` is a symlink to ``..data/config.yaml``; ``..data`` a symlink to a timestamped
directory. An update writes a new timestamped directory, makes a ``..data_tmp`` symlink to
it and renames that over ``..data`` (atomic), then removes the old directory: the file the
sidecar was told about is never written to (the kubelet's ``AtomicWriter``)."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

NAME = "config.yaml"


class ConfigMapVolume:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._stamps = itertools.count(1)
        self._current: Path | None = None

    @property
    def path(self) -> Path:
        """What the sidecar is given (``-c``): the link through ``..data``."""
        return self.root / NAME

    def write(self, config: dict[str, Any]) -> Path:
        """Put ``config`` in the volume as the kubelet does; the path to read it from."""
        stamped = self.root / f"..2026_01_01_00_00_{next(self._stamps):02d}.000000001"
        stamped.mkdir()
        (stamped / NAME).write_text(yaml.safe_dump(config, sort_keys=False))
        (self.root / "..data_tmp").symlink_to(stamped.name)
        os.replace(self.root / "..data_tmp", self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(f"..data/{NAME}")
        if self._current is not None:
            shutil.rmtree(self._current)
        self._current = stamped
        return self.path
