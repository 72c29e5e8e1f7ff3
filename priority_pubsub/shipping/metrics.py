"""The uploader's Prometheus series, on the sidecar's registry (docs/operations/journal.md).

Registered only when ``journal.upload`` is set. The spool's size and the age of its oldest
file are read from the directory at scrape time (a listing of a few files), never stale."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

FAILURE_REASONS = ("error", "verify")


class UploadMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = r = registry
        self.files = Counter("priority_pubsub_journal_uploaded_files",
                             "Journal files uploaded and verified.", registry=r)
        self.bytes = Counter("priority_pubsub_journal_uploaded_bytes",
                             "Bytes of journal files uploaded and verified (as sent: "
                             "compressed).", registry=r)
        self.failures = Counter("priority_pubsub_journal_upload_failures",
                                "Failed upload attempts, by reason: error (the store failed "
                                "or could not be reached), verify (the store's digest differs "
                                "from the bytes sent).", ["reason"], registry=r)
        for reason in FAILURE_REASONS:
            self.failures.labels(reason)
        self.dropped_files = Counter("priority_pubsub_journal_dropped_files",
                                     "Closed journal files deleted unsent: the local spool was "
                                     "over journal.upload.max_local_mb.", registry=r)
        self.dropped_bytes = Counter("priority_pubsub_journal_dropped_bytes",
                                     "Bytes of the journal files dropped unsent.", registry=r)
        self.spool_bytes = Gauge("priority_pubsub_journal_spool_bytes",
                                 "Bytes of closed journal files not yet uploaded (and kept "
                                 "copies).", registry=r)
        self.oldest_age = Gauge("priority_pubsub_journal_oldest_unuploaded_seconds",
                                "Age of the oldest closed journal file not yet uploaded (0: "
                                "none).", registry=r)
        self.left_at_stop = Gauge("priority_pubsub_journal_files_left_at_stop",
                                  "Journal files still local when the last stop ended "
                                  "(uploaded by the next start).", registry=r)
