"""The ``dapr:`` section of config.yaml (also set by daprd's flags on the command line)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DAPR_API_GROUP = "dapr.io/"
"""The API group of every Dapr manifest (``apiVersion: dapr.io/v1alpha1``)."""
CAPACITY_KEYS = ("reserve", "max_concurrency", "max_wait_s", "wait_slo_s", "timeout_s", "slots")
"""Per-topic capacity settings (docs/long-tasks.md): a ``dapr.priorities`` mapping entry or
a Subscription's metadata sets them as ``queues[]`` entries do."""


class TopicPriority(BaseModel):
    """A ``dapr.priorities`` entry with capacity settings:
    ``{topic: orders-high, reserve: 1, max_concurrency: 2, max_wait_s: 600, timeout_s: 30}``
    (``slots: 2`` for a topic of heavy tasks).
    The values are checked as ``queues[]`` entries are, once the topics are queues."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    topic: str = Field(min_length=1)
    """The topic, at this place in the order."""
    reserve: int | None = None
    """As ``queues[].reserve``, for the topic's queue."""
    max_concurrency: int | None = None
    """As ``queues[].max_concurrency``."""
    max_wait_s: float | None = None
    """As ``queues[].max_wait_s``."""
    wait_slo_s: float | None = None
    """As ``queues[].wait_slo_s``."""
    timeout_s: float | None = None
    """As ``queues[].timeout_s``: how long the app may take to answer one of the topic's
    deliveries."""
    slots: int | None = None
    """As ``queues[].slots``: slots of ``concurrency`` one of the topic's messages occupies."""

    def capacity(self) -> dict[str, float | int]:
        """The settings this entry gives (those left out are not given)."""
        return {key: value for key in CAPACITY_KEYS
                if (value := getattr(self, key)) is not None}


class DaprConfig(BaseModel):
    """Where the Dapr resources are and which app this sidecar serves.

    ``priorities`` lists topics highest first; topics not listed come after, in the order the
    subscriptions were found. An entry may be a mapping with the topic's capacity settings
    (``TopicPriority``). ``queue_layout``: ``per-topic`` gives each topic its own queue
    (what priorities need); ``shared`` keeps daprd's snssqs layout (one queue per app id,
    routed by the envelope's topic).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    resources_path: tuple[Path, ...] = Field(min_length=1)
    """Dapr resources directories (daprd's ``--resources-path``)."""
    app_id: str = Field(min_length=1)
    """The app id (daprd's ``--app-id``): scopes, consumer ids, the events' ``source``."""
    priorities: tuple[str | TopicPriority, ...] = ()
    """Topics, highest priority first; unlisted topics come after, in the order found."""
    queue_layout: Literal["per-topic", "shared"] = "per-topic"
    """``per-topic``: a queue per topic (priorities work); ``shared``: daprd's snssqs queue."""
    subscribe_timeout_s: float = Field(default=60, gt=0)
    """How long start-up waits for the app to answer ``GET /dapr/subscribe``."""
    programmatic_subscriptions: bool = True
    """False = daprd's ``--disable-init-endpoints subscribe``: only Subscription manifests."""

    @field_validator("resources_path", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str | Path) else value

    @field_validator("priorities", mode="before")
    @classmethod
    def _no_duplicates(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            seen = [str(item.get("topic")) if isinstance(item, dict) else str(item)
                    for item in value]
            duplicated = sorted({item for item in seen if seen.count(item) > 1})
            if duplicated:
                raise ValueError(f"topics listed twice: {duplicated}")
        return value

    @property
    def priority_topics(self) -> tuple[str, ...]:
        """``priorities``' topics, highest first."""
        return tuple(p if isinstance(p, str) else p.topic for p in self.priorities)

    def topic_capacity(self, topic: str) -> dict[str, float | int]:
        """The capacity settings ``priorities`` gives ``topic`` (none for a plain entry)."""
        for entry in self.priorities:
            if isinstance(entry, TopicPriority) and entry.topic == topic:
                return entry.capacity()
        return {}


def dapr_manifest_kind(path: Path) -> str | None:
    """The kind when ``path`` holds a Dapr manifest (e.g. given as ``-c`` by mistake)."""
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return None
    api_version = kind = None
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key == "apiVersion":
            api_version = value.strip().strip("'\"")
        elif key == "kind":
            kind = value.strip().strip("'\"")
    if api_version and api_version.startswith(DAPR_API_GROUP) and kind:
        return kind
    return None
