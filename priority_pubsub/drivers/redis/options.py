"""The ``driver:`` keys of ``type: redis`` (docs/brokers/redis.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator

from priority_pubsub.core.redaction import CredentialUrl, SecretUrl
from priority_pubsub.drivers.base import DriverOptions

__all__ = ["RedisOptions"]

_SCHEMES = ("redis://", "rediss://", "unix://")


class RedisOptions(DriverOptions):
    """The ``driver:`` keys for ``type: redis``."""

    url: CredentialUrl = SecretUrl("redis://127.0.0.1:6379/0")
    """``redis://[user:password@]host:port/db``, ``rediss://`` for TLS; a secret."""
    username: str | None = None
    password: SecretStr | None = None
    """Overrides the URL's password (from a Kubernetes Secret through the environment)."""
    tls_ca_file: Path | None = None
    """CA bundle for ``rediss://`` servers with a private CA."""
    group: str = Field(default="priority-pubsub", min_length=1)
    """The consumer group; with Dapr, the component's ``consumerID`` (default: the app id)."""
    consumer: str | None = Field(default=None, min_length=1)
    """This replica's consumer name in the group; default ``<hostname>-<pid>``."""
    max_len_approx: int | None = Field(default=None, ge=1)
    """``XADD MAXLEN ~`` at publish (Dapr's ``maxLenApprox``); none: the stream is not trimmed."""
    delete_on_ack: bool = False
    """``XDEL`` acked entries too; only when this group is the stream's only reader."""
    reclaim_interval_s: float = Field(default=5.0, gt=0, le=300)
    """While idle, how often lapsed leases (of a replica that died) are looked for."""
    call_timeout_s: float = Field(default=10.0, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    max_message_bytes: int = Field(default=1_048_576, ge=1, le=536_870_912)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: SecretUrl) -> SecretUrl:
        if not value.get_secret_value().startswith(_SCHEMES):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value
