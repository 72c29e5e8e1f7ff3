"""One small async interface over the three object stores: put, stat, list, get.

Each cloud has its own module (``s3_store``, ``gcs_store``, ``azure_store``), imported by
``open_store`` only when a URL names its scheme, so a sidecar without ``journal.upload``
(and one that uploads to S3 only) never loads the others' libraries. Why these libraries:
docs/operations/journal.md, "Why these libraries".

``stat`` returns the digest the store itself computed over the bytes it holds (S3's ETag
of a single-part upload, GCS's ``md5Hash``, Azure's Content-MD5), read back after each put:
what the uploader compares with the MD5 of the bytes it sent.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.upload import UploadConfig

STORE_MODULES = {"s3": "s3_store", "gcs": "gcs_store", "azure": "azure_store"}
UPLOAD_EXTRA = "priority-pubsub[upload]"
CALL_TIMEOUT_S = 60.0
"""One store call's limit (connect included): an outage fails a call in this, never hangs it."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str
    size: int
    md5: bytes | None
    """The store's MD5 of what it holds; None when it keeps none this code can read (an S3
    multipart or SSE-KMS ETag, an Azure blob put in blocks)."""


class ObjectStore(Protocol):
    async def put(self, key: str, data: bytes) -> None:
        """Write ``data`` at ``key`` in one request (replacing what was there)."""

    async def stat(self, key: str) -> StoredObject | None:
        """The object at ``key``, None when there is none."""

    async def list(self, prefix: str) -> list[StoredObject]:
        """Every object whose key starts with ``prefix``."""

    async def get(self, key: str) -> bytes:
        """The object's bytes as stored."""

    async def close(self) -> None: ...


def open_store(config: UploadConfig) -> ObjectStore:
    """The store ``config.url`` names. Raises ``ConfigError`` (one line) when its library is
    not installed."""
    name = STORE_MODULES[config.kind]
    try:
        module = importlib.import_module(f"priority_pubsub.shipping.{name}")
        store: ObjectStore = module.open_store(config)
    except ImportError as exc:
        raise ConfigError(f"journal.upload.url {config.url}: its library cannot be imported "
                          f"({exc.name}): pip install '{UPLOAD_EXTRA}'") from None
    return store
