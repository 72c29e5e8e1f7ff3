"""The delivery report: a PySpark job over the sidecar's journal (docs/operations/report.md).

This package is never imported by the sidecar runtime, and pyspark is imported lazily inside
its functions only, so the sidecar image needs neither Spark nor Java. Entry points live in
``priority_pubsub.analytics.report`` (``run_report`` and ``main``).

May import ``telemetry`` (the journal's fields) and ``core`` only; only ``cli`` imports it.
"""
