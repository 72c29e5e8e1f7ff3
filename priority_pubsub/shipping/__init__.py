"""Shipping closed journal files to object storage (``journal.upload``), and reading them
back for the report.

``keys`` (the object key: a pure function of the file), ``payload`` (the bytes sent and
their digest), ``stores`` (one small async interface over S3, GCS and Azure Blob; each
cloud's module imports its library only when opened), ``spool`` (the local files waiting,
and the bound), ``shipper`` (the loop: upload, verify, remove, retry) and ``metrics``.

May import ``telemetry``, ``settings`` and ``core``; the sidecar and the report import it.
"""
