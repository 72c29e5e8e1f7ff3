"""``base64``: decode a base64 body (publishers that can only send text)."""

from __future__ import annotations

import base64
import binascii

from priority_pubsub.core.errors import TransformError
from priority_pubsub.transforms.base import Payload


class Base64Decode:
    name = "base64"

    def __call__(self, payload: Payload) -> Payload:
        try:
            body = base64.b64decode(payload.body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise TransformError(f"body is not valid base64: {exc}") from None
        return Payload(body, payload.attributes, payload.content_type)
