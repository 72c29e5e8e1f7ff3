"""The ``driver:`` keys of ``type: azure_servicebus`` (docs/brokers/azure_servicebus.md)."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from priority_pubsub.drivers.base import DriverOptions

__all__ = ["ServiceBusOptions"]


class ServiceBusOptions(DriverOptions):
    """The ``driver:`` keys for ``type: azure_servicebus``."""

    connection_string: SecretStr | None = None
    namespace: str | None = None
    """Fully qualified namespace, e.g. ``myns.servicebus.windows.net`` (DefaultAzureCredential)."""
    zero_wait_s: float = Field(default=0.1, gt=0, le=5)
    """The receive time used for ``wait_s == 0`` (the SDK cannot poll without waiting)."""
    max_wait_s: float = Field(default=20.0, gt=0, le=300)
    """The longest single SDK receive."""
    retry_total: int = Field(default=3, ge=0, le=10)
    """The SDK's own retries per operation before the driver reports the error."""
    renew_margin_s: float = Field(default=1.0, gt=0)
    """Background renewals (lease longer than the lock) happen this long before the lock ends."""

    @model_validator(mode="after")
    def _one_credential(self) -> ServiceBusOptions:
        if (self.connection_string is None) == (self.namespace is None):
            raise ValueError("set exactly one of driver.connection_string or driver.namespace")
        return self
