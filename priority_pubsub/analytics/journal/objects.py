"""Journal files in object storage (``s3://``, ``gs://``, ``az://``), read without Hadoop's
cloud connectors: listed with the store's own client, and each new object fetched to a local
directory for Spark to read (``report s3://bucket/prefix/``).

Why not Hadoop: ``s3a://`` needs hadoop-aws and its AWS SDK on Spark's classpath, matched to
Spark's Hadoop version (and ``gs://`` the GCS connector), which a ``pip install`` of the
report does not bring. The listing costs one request per 1,000 objects; the manifest's
``files`` (name, size, path) tells which objects an earlier run read, so a run fetches only
the new ones, and knows an object by the digest the store keeps (its MD5: what the uploader
verified), never by reading it. Spark's own connectors still read ``s3a://``, ``gs://`` and
``abfs://`` where a cluster has them (``files``): that is how a cluster run reads a fleet,
since the objects fetched here are on the driver's disk only (``report.driver_only``
refuses an object URL with any master but a local one).

A URL names a prefix (``s3://bucket/fleet/``) or a glob over keys (``s3://bucket/fleet/
date=2026-11-*/*``: the keys under the part before the first ``*``, ``?`` or ``[``,
matched with ``fnmatch``). Credentials come from each cloud's default chain, as the
uploader's (``shipping.stores``).
"""

from __future__ import annotations

import asyncio
import fnmatch
import re
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from priority_pubsub.analytics.journal.files import JournalFile, Listing
from priority_pubsub.settings.upload import UPLOAD_SCHEMES, UploadConfig
from priority_pubsub.shipping.stores import ObjectStore, open_store

JOURNAL_OBJECT = re.compile(r"journal-[A-Za-z0-9._]+-\d+\.jsonl(\.gz)?")
FETCHES_AT_ONCE = 4


def is_object_url(journal_glob: str) -> bool:
    return urlsplit(journal_glob).scheme in UPLOAD_SCHEMES


def _parts(url: str) -> tuple[str, str, str]:
    """(scheme, bucket, key) of an object URL, split by hand: a glob's ``?`` is no query."""
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    return scheme, bucket, key


def _split(url: str) -> tuple[UploadConfig, str, str | None]:
    """The store's config, the key prefix to list and the key pattern (None: all)."""
    scheme, bucket, path = _parts(url)
    first_glob = min((i for i in (path.find(c) for c in "*?[") if i >= 0), default=-1)
    prefix = path if first_glob < 0 else path[:first_glob]
    config = UploadConfig(url=f"{scheme}://{bucket}")
    return config, prefix, (path if first_glob >= 0 else None)


def list_objects(url: str) -> Listing:
    """(name, url, size, digest) of every journal object under ``url``, sorted. The digest
    is the store's MD5 (``md5:<hex>``); an object without one is known by key and size."""
    config, prefix, pattern = _split(url)
    base = f"{_parts(url)[0]}://{config.bucket}/"

    async def listed() -> Listing:
        store = open_store(config)
        try:
            objects = await store.list(prefix)
        finally:
            await store.close()
        out: Listing = []
        for item in objects:
            name = item.key.rsplit("/", 1)[-1]
            if not JOURNAL_OBJECT.fullmatch(name):
                continue
            if pattern is not None and not fnmatch.fnmatchcase(item.key, pattern):
                continue
            digest = f"md5:{item.md5.hex()}" if item.md5 else f"object:{item.key}:{item.size}"
            out.append((name, base + item.key, item.size, digest))
        return sorted(out)

    return asyncio.run(listed())


def fetch(files: list[JournalFile], into: Path) -> list[JournalFile]:
    """The objects copied into ``into`` (each under its own name: ``.gz`` stays, Spark
    decompresses it), as ``files`` with ``local`` set."""
    if not files:
        return []
    into.mkdir(parents=True, exist_ok=True)
    config, _, _ = _split(files[0].path)

    async def fetched() -> list[JournalFile]:
        store = open_store(config)
        gate = asyncio.Semaphore(FETCHES_AT_ONCE)
        try:
            return list(await asyncio.gather(*(_one(store, gate, f, into) for f in files)))
        finally:
            await store.close()

    return asyncio.run(fetched())


async def _one(store: ObjectStore, gate: asyncio.Semaphore, file: JournalFile,
               into: Path) -> JournalFile:
    key = _parts(file.path)[2]
    async with gate:
        data = await store.get(key)
    local = into / file.name
    await asyncio.to_thread(local.write_bytes, data)
    return replace(file, local=str(local))
