"""``grpc://host:port`` as a gRPC target (no path, no TLS: daprd's app channel is plain
HTTP/2 on the pod's loopback unless ``--app-ssl``, which this sidecar does not offer)."""

from __future__ import annotations

from urllib.parse import urlsplit


def grpc_target(url: str) -> str:
    """``host:port`` for ``grpc.aio.insecure_channel``; ValueError on anything else."""
    parts = urlsplit(url)
    if parts.scheme != "grpc":
        raise ValueError("must start with grpc://")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a grpc:// URL is host:port only (routes are gRPC paths, not URLs)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the port must be a number from 1 to 65535") from None
    if not parts.hostname or port is None:
        raise ValueError("must name host and port: grpc://127.0.0.1:50051")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}"


def require_grpc_extra(what: str) -> None:
    """A clear error instead of an ImportError when Dapr's stubs are not installed."""
    from priority_pubsub.core.errors import ConfigError

    try:
        import dapr.proto.runtime.v1.appcallback_pb2  # noqa: F401
        import grpc  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"{what} needs the grpc extra (pip install 'priority-pubsub[grpc]'): "
                          f"{exc}") from None
