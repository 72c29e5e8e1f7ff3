"""Spark settings of the report: shuffle partitions from the journal's size, and settings
scoped to one step (no Spark needed)."""

from __future__ import annotations

import pytest

from priority_pubsub.analytics.spark.tuning import (
    MAX_SHUFFLE_PARTITIONS,
    ONE_RECORD_PER_GROUP,
    OWN_SESSION,
    SHUFFLE_BYTES_PER_PARTITION,
    session_conf,
    shuffle_partitions,
)


def test_partitions_follow_the_input_size_within_bounds() -> None:
    assert shuffle_partitions(0, cores=2) == 2  # never fewer than the cores
    assert shuffle_partitions(248_000_000, cores=2) == 2  # 1 M records: ~250 MB
    assert shuffle_partitions(2_480_000_000, cores=2) == 19  # 10 M records
    assert shuffle_partitions(100 * SHUFFLE_BYTES_PER_PARTITION + 1, cores=8) == 101
    assert shuffle_partitions(10**15, cores=2) == MAX_SHUFFLE_PARTITIONS


class _Conf:
    """The two calls of ``spark.conf`` that ``session_conf`` makes, over a dict."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        del self.values[key]


class _Session:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _Conf(values)


def test_a_step_setting_is_put_back_as_it_was_even_when_the_step_fails() -> None:
    values = {"spark.sql.execution.bypassPartialAggregation": "false"}
    session = _Session(values)
    with session_conf(session, {**ONE_RECORD_PER_GROUP, "spark.x.unset.before": "1"}):  # type: ignore[arg-type]
        assert values["spark.sql.execution.bypassPartialAggregation"] == "true"
        assert values["spark.x.unset.before"] == "1"
    assert values == {"spark.sql.execution.bypassPartialAggregation": "false"}
    with pytest.raises(RuntimeError), session_conf(session, ONE_RECORD_PER_GROUP):  # type: ignore[arg-type]
        raise RuntimeError("a failed job")
    assert values == {"spark.sql.execution.bypassPartialAggregation": "false"}


class _Builder:
    """Records what ``report._start_session`` asks of ``SparkSession.builder``."""

    def __init__(self) -> None:
        self.settings: dict[str, str] = {}

    def master(self, _: str) -> _Builder:
        return self

    def appName(self, _: str) -> _Builder:
        return self

    def config(
        self, key: str | None = None, value: str | None = None, *, map: dict[str, str] | None = None
    ) -> _Builder:
        if key is not None and value is not None:
            self.settings[key] = value
        self.settings.update(map or {})
        return self

    def getOrCreate(self) -> str:
        return "session"


def test_the_session_the_report_starts_itself_runs_its_jvm_with_the_batch_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pyspark_sql = pytest.importorskip("pyspark.sql")
    from priority_pubsub.analytics import report

    builder = _Builder()
    monkeypatch.setattr(pyspark_sql.SparkSession, "builder", builder)
    assert report._start_session("local[2]") == "session"
    assert builder.settings["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC"
    assert OWN_SESSION.items() <= builder.settings.items()
