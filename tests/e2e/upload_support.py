"""What the journal-upload end-to-end tests share: a fleet of local-driver sidecars whose
journals go to one bucket, and the accounting of what landed there."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.helpers import publish
from tests.support.app import RecordingApp
from tests.support.object_stores import StoreServer
from tests.support.sidecar import SidecarProcess, local_config, write_config

KEY = re.compile(r"(?P<prefix>.+)/date=(?P<date>\d{4}-\d\d-\d\d)/hour=(?P<hour>\d\d)/"
                 r"(?P<name>journal-(?P<replica>[A-Za-z0-9._]+)-\d{6}\.jsonl\.gz)")
QUEUES = ("high", "normal", "low")


@dataclass
class Fleet:
    """Replicas ``pod-0``... of one sidecar config, each with its own journal directory,
    uploading to ``url``."""

    directory: Path
    server: StoreServer
    bucket: str
    app: RecordingApp
    prefix: str = "fleet/journals"
    rotate_mb: float = 0.05
    """~50 KB: a file every ~220 records."""
    upload: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] | None = None
    """How the sidecars reach the store (default: the server's own ``env``; a proxy's)."""
    sidecars: dict[str, SidecarProcess] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url(self.bucket, self.prefix)

    def config(self, replica: str, **upload: Any) -> dict[str, Any]:
        settings = {"url": self.url, "retry_initial_s": 0.2, "retry_max_s": 1,
                    "stop_timeout_s": 30, **self.upload, **upload}
        return local_config(self.directory, self.app.url, concurrency=4,
                            journal={"path": str(self.journal(replica)),
                                     "rotate_mb": self.rotate_mb, "upload": settings})

    def journal(self, replica: str) -> Path:
        return self.directory / f"journal-{replica}"

    def publish(self, count: int) -> list[str]:
        path = write_config(self.directory, self.config("publisher"), "publish.yaml")
        ids: list[str] = []
        for index, queue in enumerate(QUEUES):
            share = count // len(QUEUES) + (1 if index < count % len(QUEUES) else 0)
            ids += publish(path, queue, json.dumps({"queue": queue}), count=share)
        return ids

    def start(self, replica: str, env: dict[str, str] | None = None,
              **upload: Any) -> SidecarProcess:
        sidecar = SidecarProcess(self.directory, self.config(replica, **upload), name=replica,
                                 env={"POD_NAME": replica, **(self.env or self.server.env),
                                      **(env or {})})
        self.sidecars[replica] = sidecar
        return sidecar

    def local_files(self) -> list[Path]:
        return sorted(p for replica in self.sidecars
                      for p in self.journal(replica).glob("journal-*"))

    def landed(self) -> dict[str, list[dict[str, Any]]]:
        """Object key -> its records, every key checked against the layout."""
        out = {}
        for key, data in self.server.objects(self.bucket, self.prefix + "/").items():
            match = KEY.fullmatch(key)
            assert match is not None, f"unexpected key {key}"
            assert match["prefix"] == self.prefix
            lines = gzip.decompress(data).decode().splitlines()
            records = [json.loads(line) for line in lines if line.strip()]
            first = records[0]["settled_ms"] // 1000
            assert key.split("/")[2:4] == [
                f"date={_utc(first, '%Y-%m-%d')}", f"hour={_utc(first, '%H')}"], key
            out[key] = records
        return out


def acks(landed: dict[str, list[dict[str, Any]]]) -> Counter[str]:
    """How many times each message's ack is in the uploaded objects."""
    return Counter(r["message_id"] for records in landed.values() for r in records
                   if r["outcome"] == "ack")


def _utc(epoch_s: int, fmt: str) -> str:
    import time

    return time.strftime(fmt, time.gmtime(epoch_s))
