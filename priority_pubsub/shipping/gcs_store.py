"""Google Cloud Storage through its JSON API (``google-cloud-storage``): its object resource
carries ``md5Hash``, what the upload is verified against, and it is what the GCS emulator
serves (obstore's client speaks the XML API: docs/operations/journal.md). The client is
synchronous: each call runs in a worker thread, never on the event loop. Credentials:
``credentials_file`` when set, else Google's default chain (GKE Workload Identity, the
metadata server, ``GOOGLE_APPLICATION_CREDENTIALS``); against an emulator
(``STORAGE_EMULATOR_HOST`` or ``endpoint``) without a key file, anonymous.
"""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from priority_pubsub.settings.upload import UploadConfig
from priority_pubsub.shipping.stores import CALL_TIMEOUT_S, StoredObject

CONTENT_TYPE = "application/octet-stream"


def open_store(config: UploadConfig) -> Gcs:
    endpoint = config.endpoint or os.environ.get("STORAGE_EMULATOR_HOST")
    options = {"api_endpoint": endpoint} if endpoint else None
    if config.credentials_file is not None:
        client = storage.Client.from_service_account_json(str(config.credentials_file),
                                                          client_options=options)
    elif endpoint:
        project = os.environ.get("GOOGLE_CLOUD_PROJECT", "local")
        client = storage.Client(project=project, credentials=AnonymousCredentials(),
                                client_options=options)
    else:
        client = storage.Client()
    return Gcs(client.bucket(config.bucket))


def _md5(blob: Any) -> bytes | None:
    return base64.b64decode(blob.md5_hash) if blob.md5_hash else None


class Gcs:
    def __init__(self, bucket: Any) -> None:
        self._bucket = bucket

    async def put(self, key: str, data: bytes) -> None:
        blob = self._bucket.blob(key)
        await asyncio.to_thread(blob.upload_from_string, data, content_type=CONTENT_TYPE,
                                timeout=CALL_TIMEOUT_S, retry=None)

    async def stat(self, key: str) -> StoredObject | None:
        blob = await asyncio.to_thread(self._bucket.get_blob, key, timeout=CALL_TIMEOUT_S,
                                       retry=None)
        return None if blob is None else StoredObject(key, int(blob.size), _md5(blob))

    async def list(self, prefix: str) -> list[StoredObject]:
        def listed() -> list[StoredObject]:
            blobs = self._bucket.list_blobs(prefix=prefix or None, timeout=CALL_TIMEOUT_S)
            return [StoredObject(b.name, int(b.size), _md5(b)) for b in blobs]

        return await asyncio.to_thread(listed)

    async def get(self, key: str) -> bytes:
        blob = self._bucket.blob(key)
        data: bytes = await asyncio.to_thread(blob.download_as_bytes, raw_download=True,
                                              timeout=CALL_TIMEOUT_S)
        return data

    async def close(self) -> None:
        """The client's HTTP session closes with the process."""
