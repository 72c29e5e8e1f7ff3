"""The three object-store test servers, each a subprocess on 127.0.0.1 and a free port:
moto server (S3, ``tests.support.moto_server``), ``gcp-storage-emulator`` (GCS, from PyPI,
a dev dependency) and Azurite (Azure Blob, from npm: ``npm install azurite`` into
``azurite-<version>/`` of the user's cache, ``tests.support.user_cache``, once per machine;
``python -m tests.support.object_stores`` does it ahead of the tests, as CI's install step may).

``running_store(kind)`` starts one and yields a ``StoreServer``: the URL a sidecar's
``journal.upload.url`` names (a fresh bucket or container per call of ``new_bucket``), the
environment its client needs (endpoint, fake credentials) and direct reads of what landed
(``objects``: key -> bytes), done with each cloud's own SDK so the test never reads the
store through the code it tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.support.moto_server import CREDENTIALS, MotoUnavailable, running_moto_server
from tests.support.processes import answering_process
from tests.support.servers import free_port, skip_or_fail
from tests.support.user_cache import user_cache

Kind = Literal["s3", "gcs", "azure"]
KINDS: tuple[Kind, ...] = ("s3", "gcs", "azure")
AZURITE_VERSION = "3.37.0"
AZURITE_DIR = user_cache("tools") / f"azurite-{AZURITE_VERSION}"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")
"""Azurite's well-known development account key (published in its README): no secret."""
GCS_PROJECT = "test-project"


class StoreUnavailable(RuntimeError):
    """The server cannot be started here; the message says why."""


@dataclass
class StoreServer:
    """One running server: its endpoint and how a client reaches it."""

    kind: Kind
    endpoint: str
    port: int
    pid: int
    env: dict[str, str] = field(default_factory=dict)
    """What a sidecar (or the report) needs in its environment to reach this server."""

    def env_through(self, port: int) -> dict[str, str]:
        """``env`` with the server reached on ``port`` instead (a proxy in front of it)."""
        here, there = f"127.0.0.1:{self.port}", f"127.0.0.1:{port}"
        return {name: value.replace(here, there) for name, value in self.env.items()}

    def new_bucket(self) -> str:
        """Create an empty bucket (container) and return its name."""
        name = f"journals-{uuid.uuid4().hex[:12]}"
        if self.kind == "s3":
            self._s3().create_bucket(Bucket=name)
        elif self.kind == "gcs":
            self._gcs().create_bucket(name)
        else:
            self._azure().create_container(name)
        return name

    def url(self, bucket: str, prefix: str = "") -> str:
        scheme = {"s3": "s3", "gcs": "gs", "azure": "az"}[self.kind]
        return f"{scheme}://{bucket}/{prefix}".rstrip("/")

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix``: key -> its bytes (as stored)."""
        out: dict[str, bytes] = {}
        if self.kind == "s3":
            client = self._s3()
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                    out[item["Key"]] = body
        elif self.kind == "gcs":
            for blob in self._gcs().list_blobs(bucket, prefix=prefix or None):
                out[blob.name] = blob.download_as_bytes(raw_download=True)
        else:
            container = self._azure().get_container_client(bucket)
            for item in container.list_blobs(name_starts_with=prefix or None):
                out[item.name] = container.download_blob(item.name).readall()
        return out

    def versions(self, bucket: str) -> int:
        """S3 only: how many versions (current and noncurrent) the bucket holds."""
        listed = self._s3().list_object_versions(Bucket=bucket)
        return len(listed.get("Versions", []))

    def enable_versioning(self, bucket: str) -> None:
        self._s3().put_bucket_versioning(Bucket=bucket,
                                         VersioningConfiguration={"Status": "Enabled"})

    def _s3(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=CREDENTIALS["AWS_REGION"],
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def _gcs(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project=GCS_PROJECT, credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.endpoint})

    def _azure(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(azure_connection_string(self.endpoint))


def azure_connection_string(endpoint: str) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};")


@contextlib.contextmanager
def running_store(kind: Kind, port: int | None = None) -> Iterator[StoreServer]:
    """Start the server of ``kind`` (on ``port``, else a free one) and stop it afterwards."""
    if kind == "s3":
        try:
            with running_moto_server(port=port) as moto:
                endpoint = moto.endpoint_url
                env = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}
                yield StoreServer("s3", endpoint, int(endpoint.rsplit(":", 1)[1]), moto.pid, env)
        except MotoUnavailable as exc:
            raise StoreUnavailable(str(exc)) from None
        return
    port = port or free_port()
    if kind == "gcs":
        command = [_gcs_emulator(), "start", "--host", "127.0.0.1", "--port", str(port),
                   "--in-memory", "--default-bucket", "unused"]
        endpoint = f"http://127.0.0.1:{port}"
        env = {"STORAGE_EMULATOR_HOST": endpoint, "GOOGLE_CLOUD_PROJECT": GCS_PROJECT}
        ready = f"{endpoint}/storage/v1/b?project={GCS_PROJECT}"
    else:
        command = ["node", str(azurite_main()), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                   "--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--silent"]
        endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        env = {"AZURE_STORAGE_CONNECTION_STRING": azure_connection_string(endpoint)}
        ready = f"{endpoint}?comp=list"
    with _process(command, ready) as pid:
        yield StoreServer(kind, endpoint, port, pid, env)


@contextlib.contextmanager
def _process(command: list[str], ready_url: str, timeout_s: float = 60) -> Iterator[int]:
    with answering_process(command[0], command, lambda: _answers(ready_url),
                           timeout_s=timeout_s, unavailable=StoreUnavailable,
                           new_session=True) as process:
        yield process.pid


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # it answered (Azurite refuses the unsigned list: it is up)
    except (urllib.error.URLError, OSError):
        return False


def _gcs_emulator() -> str:
    found = shutil.which("gcp-storage-emulator") or str(Path(sys.executable).parent /
                                                         "gcp-storage-emulator")
    if not os.access(found, os.X_OK):
        raise StoreUnavailable("gcp-storage-emulator is not installed (pip install "
                               "gcp-storage-emulator: the dev extra)")
    return found


def azurite_main() -> Path:
    """Azurite's blob server script, installed with npm into ``AZURITE_DIR`` on first use."""
    main = AZURITE_DIR / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
    if main.is_file():
        return main
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        raise StoreUnavailable("node and npm are needed for Azurite (apt-get install npm)")
    AZURITE_DIR.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=AZURITE_DIR.parent, ignore_cleanup_errors=True) as tmp:
        result = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", tmp,
             f"azurite@{AZURITE_VERSION}"],
            capture_output=True, text=True, timeout=600, check=False,
        )
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise StoreUnavailable(f"npm install azurite@{AZURITE_VERSION} failed: {detail[0]}")
        with contextlib.suppress(OSError):  # a concurrent run may have put it in place
            Path(tmp).rename(AZURITE_DIR)
    if not main.is_file():
        raise StoreUnavailable(f"Azurite's {main} is missing after npm install")
    return main


if __name__ == "__main__":
    print(azurite_main())


class StoreServers:
    """The session's servers, each started the first time a test asks for its kind and
    stopped when the session ends; a server that cannot start skips locally and fails in
    CI (``skip_or_fail``)."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._running: dict[str, StoreServer] = {}
        self._failed: dict[str, str] = {}

    def get(self, kind: Kind) -> StoreServer:
        if kind in self._failed:
            skip_or_fail(self._failed[kind])
        if kind not in self._running:
            try:
                self._running[kind] = self._stack.enter_context(running_store(kind))
            except StoreUnavailable as exc:
                self._failed[kind] = f"{kind} test server unavailable: {exc}"
                skip_or_fail(self._failed[kind])
        return self._running[kind]

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="session")
def store_servers() -> Iterator[StoreServers]:
    servers = StoreServers()
    try:
        yield servers
    finally:
        servers.close()
