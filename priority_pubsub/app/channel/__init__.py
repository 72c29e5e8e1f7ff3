"""App channels: how a prepared request reaches the app — HTTP (``http.HttpAppChannel``) or
gRPC (``grpc.GrpcAppChannel``, Dapr's ``AppCallback``), chosen by ``app.url``'s scheme. Both
sit behind the same seam (``app.request.AppChannel``), so leases, timeouts, health gating and
every settle rule apply to both alike."""

from __future__ import annotations

from priority_pubsub.app.request import AppChannel
from priority_pubsub.settings.config import Settings


def build_channel(settings: Settings) -> AppChannel:
    if settings.app.is_grpc:
        from priority_pubsub.settings.grpc_address import require_grpc_extra

        require_grpc_extra("app.url grpc://")
        from priority_pubsub.app.channel.grpc import GrpcAppChannel

        return GrpcAppChannel(settings.app)
    from priority_pubsub.app.channel.http import HttpAppChannel

    return HttpAppChannel(settings.app, exact_status=settings.dapr is not None)
