"""Azure Blob Storage through ``azure-storage-blob``'s async client: its blob properties
carry the Content-MD5 the service computed over a single-shot Put Blob, what the upload is
verified against (obstore's ``head`` returns none of them: docs/operations/journal.md).
Credentials, first found: ``connection_string``, ``account_key`` (with ``account``),
``AZURE_STORAGE_CONNECTION_STRING``, else Azure's default chain (Workload Identity, managed
identity, the environment) for ``account``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob.aio import ContainerClient

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.upload import UploadConfig
from priority_pubsub.shipping.stores import CALL_TIMEOUT_S, StoredObject

SINGLE_PUT_MAX = 256 * 1024 * 1024
"""Uploads up to this size are one Put Blob, which the service computes a Content-MD5 for
(a blob put in blocks has none); a rotated journal file is far smaller once compressed."""

logging.getLogger("azure").setLevel(logging.WARNING)  # its request log, one line per call


def open_store(config: UploadConfig) -> Azure:
    container = config.bucket
    common: dict[str, Any] = {"max_single_put_size": SINGLE_PUT_MAX,
                              "connection_timeout": 5, "read_timeout": CALL_TIMEOUT_S,
                              "retry_total": 0}
    connection = (config.connection_string.get_secret_value() if config.connection_string
                  else os.environ.get("AZURE_STORAGE_CONNECTION_STRING"))
    if connection and config.account_key is None:
        return Azure(ContainerClient.from_connection_string(connection, container, **common))
    account = config.account or os.environ.get("AZURE_STORAGE_ACCOUNT")
    if not account:
        raise ConfigError("journal.upload: an az:// URL needs journal.upload.account (or "
                          "AZURE_STORAGE_ACCOUNT, or a connection string)")
    url = config.endpoint or f"https://{account}.blob.core.windows.net"
    credential: Any
    if config.account_key is not None:
        credential = {"account_name": account,
                      "account_key": config.account_key.get_secret_value()}
    else:
        from azure.identity.aio import DefaultAzureCredential

        credential = DefaultAzureCredential()
    return Azure(ContainerClient(url, container, credential=credential, **common), credential)


class Azure:
    def __init__(self, container: ContainerClient, credential: Any = None) -> None:
        self._container = container
        self._credential = credential

    async def put(self, key: str, data: bytes) -> None:
        await self._container.upload_blob(key, data, overwrite=True, length=len(data))

    async def stat(self, key: str) -> StoredObject | None:
        try:
            props = await self._container.get_blob_client(key).get_blob_properties()
        except ResourceNotFoundError:
            return None
        return StoredObject(key, int(props.size), _md5(props))

    async def list(self, prefix: str) -> list[StoredObject]:
        return [StoredObject(b.name, int(b.size), _md5(b))
                async for b in self._container.list_blobs(name_starts_with=prefix or None)]

    async def get(self, key: str) -> bytes:
        stream = await self._container.download_blob(key)
        data: bytes = await stream.readall()
        return data

    async def close(self) -> None:
        await self._container.close()
        if self._credential is not None and hasattr(self._credential, "close"):
            await self._credential.close()


def _md5(props: Any) -> bytes | None:
    md5 = props.content_settings.content_md5
    return bytes(md5) if md5 else None
