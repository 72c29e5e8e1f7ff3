"""``report s3://bucket/prefix/`` (moto server): journal files uploaded as the sidecar does
(its key layout, gzip) are read without Hadoop's S3 connector; the report over the bucket
equals the report over the same files on local disk, in every table; a second run after new
uploads fetches and reads only the new objects."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from priority_pubsub.analytics.report import run_report
from priority_pubsub.settings.upload import UploadConfig
from priority_pubsub.shipping.keys import object_key
from priority_pubsub.shipping.payload import prepare
from priority_pubsub.shipping.stores import open_store
from tests.spark import journals
from tests.spark.test_incremental import (
    arrivals,
    assert_same_summary,
    assert_same_tables,
    random_journal,
    tables,
)
from tests.support.object_stores import StoreServers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.upload, pytest.mark.timeout(900)]


def _upload(url: str, paths: list[Path]) -> None:
    config = UploadConfig(url=url)

    async def put_all() -> None:
        store = open_store(config)
        try:
            for path in paths:
                await store.put(object_key(config.prefix, path, gzip=True),
                                prepare(path, gzip=True).data)
        finally:
            await store.close()

    asyncio.run(put_all())


def test_a_report_over_the_bucket_equals_the_report_over_the_local_files(
    spark: SparkSession, store_servers: StoreServers, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = store_servers.get("s3")
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    bucket = server.new_bucket()
    url = f"s3://{bucket}/fleet/journals"
    records = random_journal(seed=43)
    increments = arrivals(records, seed=43)
    local = tmp_path / "journals"
    first = [journals.write(local / name, chunk) for increment in increments[:2]
             for name, chunk in increment]
    _upload(url, first)
    (local / ".journal-a.last").write_text("2\n")  # the uploader's note: never a journal

    over_bucket = run_report(url + "/", str(tmp_path / "out-bucket"), spark=spark)
    over_disk = run_report(str(local), str(tmp_path / "out-disk"), spark=spark)
    assert over_bucket.files["new"] == len(first)
    assert over_bucket.lines.valid == over_disk.lines.valid > 0
    assert over_bucket.lines.bad == 0
    assert_same_summary(over_bucket, over_disk)
    assert_same_tables(tables(spark, over_bucket), tables(spark, over_disk))
    assert not (tmp_path / "out-bucket" / ".fetched").exists()  # the copies are gone

    later = [journals.write(local / name, chunk) for name, chunk in increments[2]]
    _upload(url, later)
    again = run_report(url + "/", str(tmp_path / "out-bucket"), spark=spark)
    assert again.files["new"] == len(later)
    assert again.files["already_read"] == len(first)
    assert again.records_read == sum(len(chunk) for _, chunk in increments[2])
    full_disk = run_report(str(local), str(tmp_path / "out-disk-full"), spark=spark)
    assert_same_summary(again, full_disk)
    assert_same_tables(tables(spark, again), tables(spark, full_disk))
    assert again.lines.valid == len(records)

    nothing_new = run_report(url + "/", str(tmp_path / "out-bucket"), spark=spark)
    assert nothing_new.files["new"] == 0
    assert nothing_new.records_read == 0
    shutil.rmtree(tmp_path / "out-disk-full")
