"""The ``journal.upload:`` section: closed journal files shipped to object storage.

Kept here, not in ``shipping``, so configuration stays at the bottom (CONTRIBUTING). The
URL's scheme picks the store: ``s3://bucket/prefix`` (AWS S3 or any S3 API),
``gs://bucket/prefix`` (Google Cloud Storage), ``az://container/prefix`` (Azure Blob Storage,
with ``account``). Credentials come from each cloud's default chain (IRSA, GKE Workload
Identity, Azure Workload Identity) unless the secrets below are set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

UPLOAD_SCHEMES = {"s3": "s3", "gs": "gcs", "az": "azure"}
"""URL scheme -> the store kind (``shipping.stores``)."""


class UploadConfig(BaseModel):
    """Upload of closed journal files (docs/operations/journal.md, "Upload to object
    storage"). A file is uploaded once closed (rotated, or at stop), gzip-compressed, under
    ``<prefix>/date=YYYY-MM-DD/hour=HH/<file name>.gz`` (its first record's settle hour,
    UTC), verified against the digest the store computed, and only then removed."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    url: str
    """``s3://bucket/prefix``, ``gs://bucket/prefix`` or ``az://container/prefix``."""
    gzip: bool = True
    """Compress each file (``.jsonl.gz``; the report reads both)."""
    keep_local: int = Field(default=0, ge=0, le=10_000)
    """Uploaded files kept on local disk (the newest ones, renamed ``<name>.uploaded``); 0:
    each is removed once its upload is verified. Kept copies count toward ``max_local_mb``
    and are removed first when it is reached."""
    max_local_mb: float = Field(default=1024, gt=0)
    """The bound of the local spool: closed files not yet uploaded (and kept copies). Past
    it, ``when_full`` decides."""
    when_full: Literal["drop_oldest", "pause_delivery"] = "drop_oldest"
    """``drop_oldest``: the oldest closed files are deleted unsent, each named in one log
    line and counted (``priority_pubsub_journal_dropped_files_total``), and delivery goes
    on; ``pause_delivery``: no new message is taken until the spool is under the bound again
    (what is in flight finishes and is journaled)."""
    stop_timeout_s: float = Field(default=10, ge=0, le=3600)
    """At stop, after the last delivery settled and the open file was closed: how long the
    final uploads may take. The chart adds it to the pod's termination grace period."""
    retry_initial_s: float = Field(default=1, gt=0)
    """First wait after a failed upload; doubled per failure (with jitter)."""
    retry_max_s: float = Field(default=60, gt=0)
    """The longest wait between two attempts while the store fails."""
    endpoint: str | None = None
    """Another endpoint than the cloud's own: an S3-compatible server (MinIO), a GCS API
    endpoint, or an Azure Blob service URL (``https://<account>.blob.core.windows.net`` by
    default). ``AWS_ENDPOINT_URL``, ``STORAGE_EMULATOR_HOST`` and the Azure connection string
    are honoured too."""
    region: str | None = None
    """S3: the bucket's region (default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``)."""
    access_key_id: SecretStr | None = None
    """S3: a static access key id instead of the default chain (IRSA...); a secret."""
    secret_access_key: SecretStr | None = None
    """S3: its secret access key; a secret."""
    credentials_file: Path | None = None
    """GCS: a service account key file instead of the default chain (Workload Identity)."""
    account: str | None = None
    """Azure: the storage account name (default: ``AZURE_STORAGE_ACCOUNT``)."""
    account_key: SecretStr | None = None
    """Azure: the account's key instead of the default chain (Workload Identity); a secret."""
    connection_string: SecretStr | None = None
    """Azure: a connection string (account, key and endpoint in one); a secret. Default:
    ``AZURE_STORAGE_CONNECTION_STRING``, else ``account`` with the default chain."""

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in UPLOAD_SCHEMES or not parts.netloc:
            raise ValueError(f"{value!r}: expected s3://bucket/prefix, gs://bucket/prefix or "
                             "az://container/prefix")
        return value

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> UploadConfig:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key go together")
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError("retry_max_s must be at least retry_initial_s")
        return self

    @property
    def kind(self) -> str:
        """``s3``, ``gcs`` or ``azure``."""
        return UPLOAD_SCHEMES[urlsplit(self.url).scheme]

    @property
    def bucket(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def prefix(self) -> str:
        """The key prefix, without leading or trailing slash ('' for the bucket's root)."""
        return urlsplit(self.url).path.strip("/")
