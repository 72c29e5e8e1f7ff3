"""Is a body that claims to be a structured CloudEvent really one? Asked by ``publish``.

The CloudEvents SDK is the judge (off the hot path: once per CLI call), so a body published
as ``application/cloudevents+json`` reaches subscribers only if any CloudEvents consumer
would accept it; daprd would otherwise refuse it at delivery.
"""

from __future__ import annotations

from cloudevents.core.bindings.http import HTTPMessage, from_http_event
from cloudevents.core.exceptions import BaseCloudEventException

from priority_pubsub.app.channel.envelope import media_type
from priority_pubsub.app.cloudevent import CLOUDEVENT_CONTENT_TYPE
from priority_pubsub.core.json_text import JsonUnreadable, parse


def cloudevent_problem(body: bytes, content_type: str | None) -> str | None:
    """One line saying why ``body`` is not the CloudEvent its content type claims, else None
    (also None when the content type does not claim a structured CloudEvent)."""
    if content_type is None or media_type(content_type) != CLOUDEVENT_CONTENT_TYPE:
        return None
    try:
        document = parse(body)
    except JsonUnreadable:
        return "the body is not JSON"
    if not isinstance(document, dict):
        return "the body is JSON but not an object"
    message = HTTPMessage(headers={"content-type": content_type}, body=body)
    try:
        from_http_event(message)
    except (BaseCloudEventException, ValueError, TypeError) as exc:
        return " ".join(str(exc).split())
    return None
