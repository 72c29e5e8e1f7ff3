"""The ``publish_api:`` section of config.yaml: daprd's publish endpoints, off unless present."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

DAPRD_MAX_BODY_BYTES = 4 * 1024 * 1024
"""daprd's ``--max-body-size`` default (4Mi; dapr ``pkg/runtime`` ``DefaultMaxRequestBodySize``)."""


class PublishApiConfig(BaseModel):
    """Where the SDKs find daprd (``DAPR_HTTP_PORT`` 3500, ``DAPR_GRPC_PORT`` 50001) and how
    strict the API is. ``grpc_port: null`` serves HTTP only. ``app_id`` is the events'
    ``source`` in native mode (Dapr mode uses ``dapr.app_id``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Where the publish API listens (loopback: the app in the same pod)."""
    http_port: int = Field(default=3500, ge=0, le=65535)
    """daprd's HTTP port (``DAPR_HTTP_PORT``), what the SDKs use."""
    grpc_port: int | None = Field(default=50001, ge=0, le=65535)
    """daprd's gRPC port (``DAPR_GRPC_PORT``); null serves HTTP only."""
    app_id: str = ""
    """The events' ``source`` in native mode (Dapr mode: ``dapr.app_id``)."""
    api_token: SecretStr = SecretStr("")
    """daprd's ``DAPR_API_TOKEN``: when set, required as ``dapr-api-token`` (a secret)."""
    max_body_bytes: int = Field(default=DAPRD_MAX_BODY_BYTES, ge=1)
    """daprd's ``--max-body-size`` (4Mi): larger bodies are refused."""
