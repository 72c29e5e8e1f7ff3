"""A sidecar built in the test's own process, for what a subprocess cannot show (its
garbage collector, a part made to hang)."""

from __future__ import annotations

from pathlib import Path

from priority_pubsub.settings.config import validate_config
from priority_pubsub.sidecar import Sidecar
from tests.support.servers import free_port


def local_sidecar(tmp_path: Path) -> Sidecar:
    """On the local driver, its app and ops ports free, no journal."""
    return Sidecar(validate_config({
        "driver": {"type": "local", "path": str(tmp_path / "queues.db")},
        "queues": [{"name": "q"}],
        "app": {"url": f"http://127.0.0.1:{free_port()}"},
        "server": {"host": "127.0.0.1", "port": free_port()},
        "journal": None,
    }))
