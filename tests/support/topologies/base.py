"""What every broker topology offers the tests: queues, publishing, dead letters, config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from tests.support.sidecar import sidecar_config


@dataclass(frozen=True)
class DeadLetter:
    """A message read back from a dead-letter destination."""

    body: bytes
    attributes: dict[str, str]
    reason: str | None


class Topology(Protocol):
    """Fresh resources on one broker for one test.

    ``queue(suffix, lease_s)`` creates a uniquely named queue (``lease_s`` is the lock a
    broker fixes at creation, e.g. Service Bus; others ignore it). ``publish`` writes through
    the broker's own API. ``dead_letters()`` reads and removes everything dead-lettered from
    any queue this topology made. ``driver_options()`` is the ``driver:`` config section and
    ``dead_letter_config()`` the ``dead_letter:`` section (None where the broker dead-letters
    natively). ``close()`` releases clients.
    """

    driver_type: ClassVar[str]

    def queue(self, suffix: str, lease_s: float = 2.0) -> str: ...

    def publish(self, queue: str, body: bytes,
                attributes: Mapping[str, str] | None = None) -> None: ...

    def dead_letters(self) -> list[DeadLetter]: ...

    def driver_options(self) -> dict[str, Any]: ...

    def dead_letter_config(self) -> dict[str, Any] | None: ...

    def close(self) -> None: ...


def topology_config(topology: Topology, directory: Path, app_url: str, queues: list[str],
                    **overrides: Any) -> dict[str, Any]:
    """A sidecar config for ``queues`` on ``topology`` (see ``sidecar_config`` for defaults);
    keyword overrides replace top-level keys."""
    defaults: dict[str, Any] = {}
    dead_letter = topology.dead_letter_config()
    if dead_letter is not None:
        defaults["dead_letter"] = dead_letter
    return sidecar_config(directory, app_url, topology.driver_options(), queues,
                          **{**defaults, **overrides})
