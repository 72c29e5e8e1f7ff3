"""Which library uploads closed journal files: obstore beside each cloud's own SDK.

For each candidate, on its test server (moto for S3, ``gcp-storage-emulator`` for GCS, Azurite
for Azure Blob; ``tests.support.object_stores``), a fresh child process first imports the
sidecar (``priority_pubsub.sidecar``: what a running sidecar has loaded anyway), then the
library, builds its client and uploads one object with its read-back (put, then head for
the store's digest): the RSS added by then is the cost of turning uploads on. It then
uploads ``--uploads`` more objects of ``--mb`` MB each: CPU seconds per MB (the whole
process, every thread) and the median latency of one upload with its read-back. A candidate
that cannot do put, head, list and multipart on its server says which failed, and why.

    python -m bench.upload_library --uploads 20 --mb 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.harness.output import emit, log

CANDIDATES = {
    "s3": ("obstore", "boto3"),
    "gcs": ("obstore", "google-cloud-storage"),
    "azure": ("obstore", "azure-storage-blob"),
}


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


class _Candidate:
    """put(key, data) and head(key) -> the store's digest text, both async."""

    async def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    async def head(self, key: str) -> str:
        raise NotImplementedError

    async def multipart(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    async def names(self) -> list[str]:
        raise NotImplementedError


def _obstore(kind: str, bucket: str) -> _Candidate:
    import obstore
    from obstore.store import AzureStore, GCSStore, S3Store

    http = {"allow_http": True}
    if kind == "s3":
        store: Any = S3Store(bucket, endpoint=os.environ["AWS_ENDPOINT_URL"], region="us-east-1",
                             client_options=http)
    elif kind == "gcs":
        store = GCSStore(bucket, base_url=os.environ["STORAGE_EMULATOR_HOST"], skip_signature=True,
                         client_options=http)
    else:
        from tests.support.object_stores import AZURITE_ACCOUNT, AZURITE_KEY
        endpoint = os.environ["AZURE_STORAGE_CONNECTION_STRING"].split("BlobEndpoint=")[1][:-1]
        store = AzureStore(bucket, account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY,
                           endpoint=endpoint, client_options=http)

    class Obstore(_Candidate):
        async def put(self, key: str, data: bytes) -> None:
            await obstore.put_async(store, key, data, use_multipart=False)

        async def head(self, key: str) -> str:
            return str((await obstore.head_async(store, key))["e_tag"])

        async def multipart(self, key: str, data: bytes) -> None:
            await obstore.put_async(store, key, data, use_multipart=True)

        async def names(self) -> list[str]:
            return [m["path"] for m in await obstore.list(store).collect_async()]

    return Obstore()


def _boto3(bucket: str) -> _Candidate:
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])

    class Boto3(_Candidate):
        async def put(self, key: str, data: bytes) -> None:
            await asyncio.to_thread(client.put_object, Bucket=bucket, Key=key, Body=data)

        async def head(self, key: str) -> str:
            head = await asyncio.to_thread(client.head_object, Bucket=bucket, Key=key)
            return str(head["ETag"])

        async def multipart(self, key: str, data: bytes) -> None:
            import io

            from boto3.s3.transfer import TransferConfig
            config = TransferConfig(multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20)
            await asyncio.to_thread(client.upload_fileobj, io.BytesIO(data), bucket, key,
                                    Config=config)

        async def names(self) -> list[str]:
            listed = await asyncio.to_thread(client.list_objects_v2, Bucket=bucket)
            return [o["Key"] for o in listed.get("Contents", [])]

    return Boto3()


def _gcs_json(bucket: str) -> _Candidate:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="test-project", credentials=AnonymousCredentials())
    target = client.bucket(bucket)

    class GcsJson(_Candidate):
        async def put(self, key: str, data: bytes) -> None:
            await asyncio.to_thread(target.blob(key).upload_from_string, data)

        async def head(self, key: str) -> str:
            blob = await asyncio.to_thread(target.get_blob, key)
            return f"{blob.md5_hash} {blob.crc32c}"

        async def multipart(self, key: str, data: bytes) -> None:  # resumable, in chunks
            blob = target.blob(key, chunk_size=5 * 2**20)
            import io
            await asyncio.to_thread(blob.upload_from_file, io.BytesIO(data), size=len(data))

        async def names(self) -> list[str]:
            return [b.name for b in await asyncio.to_thread(lambda: list(target.list_blobs()))]

    return GcsJson()


def _azure_sdk(bucket: str) -> _Candidate:
    from azure.storage.blob.aio import ContainerClient

    container = ContainerClient.from_connection_string(
        os.environ["AZURE_STORAGE_CONNECTION_STRING"], bucket)

    class AzureSdk(_Candidate):
        async def put(self, key: str, data: bytes) -> None:
            await container.upload_blob(key, data, overwrite=True)

        async def head(self, key: str) -> str:
            props = await container.get_blob_client(key).get_blob_properties()
            return bytes(props.content_settings.content_md5 or b"").hex()

        async def multipart(self, key: str, data: bytes) -> None:
            await container.upload_blob(key, data, overwrite=True, max_concurrency=2)

        async def names(self) -> list[str]:
            return [b.name async for b in container.list_blobs()]

    return AzureSdk()


async def _child(kind: str, library: str, bucket: str, uploads: int, mb: float) -> dict[str, Any]:
    import priority_pubsub.sidecar  # noqa: F401  (the baseline: what a sidecar has loaded)

    data = os.urandom(int(mb * 2**20))  # before the baseline: every candidate sends the same
    big = os.urandom(12 * 2**20)
    base = _rss_mb()
    if library == "obstore":
        candidate = _obstore(kind, bucket)
    elif library == "boto3":
        candidate = _boto3(bucket)
    elif library == "google-cloud-storage":
        candidate = _gcs_json(bucket)
    else:
        candidate = _azure_sdk(bucket)
    checks: dict[str, str] = {}
    added_first: float | None = None
    for name, call in (("put", lambda: candidate.put("probe/one", data)),
                       ("head", lambda: candidate.head("probe/one")),
                       ("list", candidate.names),
                       ("multipart", lambda: candidate.multipart("probe/big", big))):
        try:
            await asyncio.wait_for(call(), 60)
            checks[name] = "ok"
        except Exception as exc:  # a failed operation is a finding, not a crash
            checks[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        if name == "head":  # one upload and its read-back: what turning uploads on costs
            added_first = _rss_mb() - base
    if checks["put"] != "ok" or checks["head"] != "ok" or added_first is None:
        return {"kind": kind, "library": library, "checks": checks}
    latencies = []
    cpu = time.process_time()
    for index in range(uploads):
        started = time.perf_counter()
        await candidate.put(f"probe/{index}", data)
        await candidate.head(f"probe/{index}")
        latencies.append(time.perf_counter() - started)
    cpu = time.process_time() - cpu
    return {"kind": kind, "library": library, "checks": checks,
            "rss_added_mb_after_first": round(added_first, 1),
            "rss_added_mb_after_all": round(_rss_mb() - base, 1),
            "cpu_s_per_mb": round(cpu / (uploads * mb), 4),
            "upload_latency_ms_p50": round(statistics.median(latencies) * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--child", nargs=3, metavar=("KIND", "LIBRARY", "BUCKET"))
    args = parser.parse_args()
    if args.child:
        kind, library, bucket = args.child
        print(json.dumps(asyncio.run(_child(kind, library, bucket, args.uploads, args.mb))))
        return
    from tests.support.object_stores import running_store

    results = []
    for kind, libraries in CANDIDATES.items():
        with running_store(kind) as server:  # type: ignore[arg-type]
            for library in libraries:
                bucket = server.new_bucket()
                out = subprocess.run(
                    [sys.executable, "-m", "bench.upload_library", "--uploads", str(args.uploads),
                     "--mb", str(args.mb), "--child", kind, library, bucket],
                    capture_output=True, text=True, env={**os.environ, **server.env}, timeout=600,
                    check=False)
                if out.returncode != 0:
                    results.append({"kind": kind, "library": library,
                                    "error": f"exit {out.returncode}: {out.stderr.strip()[-300:]}"})
                    continue
                result = json.loads(out.stdout.strip().splitlines()[-1])
                log(json.dumps(result))
                results.append(result)
    headers = ["store", "library", "put/head/list/multipart", "RSS +MB (1st, all)", "CPU s/MB",
               "p50 ms"]
    rows = [[r["kind"], r["library"],
             " ".join(v if v == "ok" else "FAIL" for v in r.get("checks", {}).values()),
             f"{r.get('rss_added_mb_after_first', '-')}, {r.get('rss_added_mb_after_all', '-')}",
             r.get("cpu_s_per_mb", "-"), r.get("upload_latency_ms_p50", "-")] for r in results]
    emit("upload_library", {"uploads": args.uploads, "mb": args.mb, "results": results},
         headers, rows)


if __name__ == "__main__":
    main()
