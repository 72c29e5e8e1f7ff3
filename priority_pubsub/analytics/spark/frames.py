"""Small driver-side rows as a Spark frame, built in the JVM from literals.

Why. ``SparkSession.createDataFrame`` on a Python list goes through a Python RDD, so the
first job that reads it starts Python workers: on a busy 2-core machine that cost 3-6 s of
a report step while the rows were two target priorities or the capacity table. A frame of
literals (one row of ``range(1)``, exploded) runs in the JVM only. Meant for a handful of
rows (each value is a literal in the plan), never for data that grows with the journal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def small_frame(spark: SparkSession, rows: Sequence[Mapping[str, Any]], schema: str) -> DataFrame:
    """``rows`` (dicts keyed by the schema's field names) as a frame of the DDL ``schema``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    parsed = StructType.fromDDL(schema)
    assert isinstance(parsed, StructType), schema
    fields = parsed.fields
    if not rows:
        return spark.range(0).select(*(F.lit(None).cast(f.dataType).alias(f.name) for f in fields))
    structs = [
        F.struct(*(F.lit(row[f.name]).cast(f.dataType).alias(f.name) for f in fields))
        for row in rows
    ]
    return spark.range(1).select(F.inline(F.array(*structs)))
