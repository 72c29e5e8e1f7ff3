"""The delivery report: a PySpark job over the sidecar's journal (docs/operations/report.md).

This package is never imported by the sidecar runtime, and pyspark is imported lazily inside
its functions only, so the sidecar image needs neither Spark nor Java. The job is
``priority_pubsub.analytics.report.run_report``; its command line is the CLI's ``report``
(``priority_pubsub.commands.report``).

By role, each layer importing only those below it (the ``analytics-roles`` contract):
``report`` (the run: a lock, a session, the steps), ``publish`` (the output from the state's
summaries), ``increment`` (new files into the state), ``render`` (the page, the terminal)
and ``state`` (the manifest, the stored tables), ``model`` (the report's maths),
``journal`` (which files, their schema, their lines) and ``spark`` (the session's
settings, the JVM, timed steps).

May import ``shipping`` (object stores: ``report s3://...``), ``telemetry`` (the journal's
fields), ``settings`` and ``core``; only ``cli`` and ``commands`` import it.
"""
