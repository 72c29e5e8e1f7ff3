"""The sidecar's configuration as a benchmark runs it: the shipped defaults plus what a
benchmark must pin (queues, app, ports, paths), and the bodies it publishes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from priority_pubsub.settings.config import Settings, validate_config

BODY_PAD = "x" * 160
"""Bodies of ~200 bytes: a task reference and a little payload, as a frontend publishes."""


def sample_body(index: int) -> bytes:
    return json.dumps({"task": index, "kind": "bench", "pad": BODY_PAD}).encode()


def make_settings(directory: Path, driver: dict[str, Any], queues: Sequence[str | dict[str, Any]],
                  **options: Any) -> Settings:
    """``raw_config`` (its keyword options), validated: the settings an in-process sidecar
    runs with."""
    return validate_config(raw_config(directory, driver, queues, **options))


def raw_config(
    directory: Path,
    driver: dict[str, Any],
    queues: Sequence[str | dict[str, Any]],
    *,
    app_url: str,
    concurrency: int,
    scheduling: str = "strict",
    journal: bool = True,
    lease_s: float = 60,
    port: int = 0,
) -> dict[str, Any]:
    """The shipped defaults, plus what a benchmark must pin (queues, app, ports, paths)."""
    raw: dict[str, Any] = {
        "driver": driver,
        "queues": [q if isinstance(q, dict) else {"name": q} for q in queues],
        "scheduling": scheduling,
        "concurrency": concurrency,
        "app": {"url": app_url, "timeout_s": 60},
        "lease": {"duration_s": lease_s},
        "shutdown": {"grace_s": 5},
        "server": {"host": "127.0.0.1", "port": port},
        "log": {"level": "info", "format": "json"},
    }
    if journal:
        raw["journal"] = {"path": str(directory / "journal"), "rotate_mb": 64}
    return raw
