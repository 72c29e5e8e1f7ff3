"""S3 (and S3-compatible servers) through obstore: the lightest and fastest of the measured
candidates (docs/operations/journal.md). Credentials: ``access_key_id`` /
``secret_access_key`` when set, else obstore's AWS chain (environment, IRSA's web identity
token, ECS and instance metadata). Every upload is one PUT (up to S3's 5 GiB), so the ETag
S3 returns is the MD5 of the bytes it stored.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import obstore
from obstore.store import S3Store

from priority_pubsub.settings.upload import UploadConfig
from priority_pubsub.shipping.stores import CALL_TIMEOUT_S, StoredObject

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig

_MD5_ETAG = re.compile(r"[0-9a-f]{32}")


def open_store(config: UploadConfig) -> S3:
    options: dict[str, Any] = {}
    endpoint = config.endpoint or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint"] = endpoint
    if config.region:
        options["region"] = config.region
    if config.access_key_id is not None and config.secret_access_key is not None:
        options["access_key_id"] = config.access_key_id.get_secret_value()
        options["secret_access_key"] = config.secret_access_key.get_secret_value()
    client: ClientConfig = {"timeout": f"{CALL_TIMEOUT_S:g}s", "connect_timeout": "5s",
                            "allow_http": bool(endpoint and endpoint.startswith("http://"))}
    # the uploader retries with its own backoff; obstore's own (10 tries over 3 minutes)
    # would hide an outage inside one call
    retry: RetryConfig = {"max_retries": 1, "retry_timeout": timedelta(seconds=CALL_TIMEOUT_S)}
    store = S3Store(config.bucket, client_options=client, retry_config=retry, **options)
    return S3(store)


def md5_of_etag(etag: str | None) -> bytes | None:
    """A single-part upload's ETag is the hex MD5 of the object (quoted); anything else
    (``<md5>-<parts>``, an SSE-KMS ETag) is not."""
    text = (etag or "").strip('"').lower()
    return bytes.fromhex(text) if _MD5_ETAG.fullmatch(text) else None


class S3:
    def __init__(self, store: S3Store) -> None:
        self._store = store

    async def put(self, key: str, data: bytes) -> None:
        await obstore.put_async(self._store, key, data, use_multipart=False)

    async def stat(self, key: str) -> StoredObject | None:
        try:
            meta = await obstore.head_async(self._store, key)
        except FileNotFoundError:
            return None
        return StoredObject(key, int(meta["size"]), md5_of_etag(meta["e_tag"]))

    async def list(self, prefix: str) -> list[StoredObject]:
        listed = await obstore.list(self._store, prefix=prefix or None).collect_async()
        return [StoredObject(m["path"], int(m["size"]), md5_of_etag(m["e_tag"])) for m in listed]

    async def get(self, key: str) -> bytes:
        result = await obstore.get_async(self._store, key)
        return bytes(await result.bytes_async())

    async def close(self) -> None:
        """obstore's client holds nothing that needs closing."""
