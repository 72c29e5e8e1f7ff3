"""The delivery report: a PySpark job over the sidecar's journal (docs/operations/report.md).

This package is never imported by the sidecar runtime, and pyspark is imported lazily inside
its functions only, so the sidecar image needs neither Spark nor Java. Entry points live in
``priority_pubsub.analytics.report`` (``run_report`` and ``main``).

May import ``shipping`` (object stores: ``report s3://...``), ``telemetry`` (the journal's
fields), ``settings`` and ``core``; only ``cli`` imports it.
"""
