"""``report s3://...`` without Spark: which URLs are object stores, what is listed for a
prefix or a glob, and the refusal of a cluster master (the fetched copies are on the
driver's disk only)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from priority_pubsub.analytics.journal.objects import _split, is_object_url
from priority_pubsub.analytics.report import driver_only


def test_object_urls_are_the_three_stores_schemes() -> None:
    for url in ("s3://b/p/", "gs://b/p", "az://container/p"):
        assert is_object_url(url)
    for other in ("s3a://b/p", "./data/journal", "file:///x", "hdfs://n/p", "abfs://c@a/p"):
        assert not is_object_url(other)


def test_a_prefix_is_listed_whole_and_a_glob_from_its_literal_part() -> None:
    config, prefix, pattern = _split("s3://bucket/fleet/journals/")
    assert (config.bucket, prefix, pattern) == ("bucket", "fleet/journals/", None)
    config, prefix, pattern = _split("gs://bucket/fleet/date=2026-11-*/hour=1?/*.gz")
    assert (config.kind, prefix) == ("gcs", "fleet/date=2026-11-")
    assert pattern == "fleet/date=2026-11-*/hour=1?/*.gz"


def _spark(master: str) -> Any:
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master))


def test_only_a_local_master_reads_fetched_objects() -> None:
    driver_only(_spark("local[*]"), "s3://b/p/")
    driver_only(_spark("local[2]"), "s3://b/p/")
    with pytest.raises(ValueError, match=r"s3a://BUCKET/PREFIX/date=\*/hour=\*"):
        driver_only(_spark("k8s://https://10.0.0.1:443"), "s3://b/p/")
