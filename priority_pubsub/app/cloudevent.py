"""Turn a transformed message into the HTTP request Dapr's sidecar would send
(docs/app/contract.md).

Pure functions: no I/O, so every rule of the app contract is unit-testable.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from priority_pubsub.core import baggage, json_text
from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.message import Message
from priority_pubsub.transforms.base import Payload

CLOUDEVENT_CONTENT_TYPE = "application/cloudevents+json"
EVENT_TYPE = "com.priority-pubsub.message"
DEFAULT_PUBSUB_NAME = "pubsub"
"""``app.pubsub_name``'s default: the name native mode gives its one pub/sub."""
PUBSUB_NAME_HEADER = "pubsubname"
TRACE_HEADERS = ("traceparent", "tracestate", baggage.HEADER)
"""What an event carries of its publisher's W3C context, restored as headers on delivery:
``baggage`` too, which daprd up to 1.18 drops at the queue (dapr #10302; #10385's design)."""
_REQUIRED = ("specversion", "id", "source", "type")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_UNSAFE_IN_HEADER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\ud800-\udfff]")
"""What HTTP/1.1 (RFC 9110 §5.5) and aiohttp refuse in a header value: controls other than
tab, DEL, and lone surrogates (not encodable as UTF-8)."""


def parse_cloudevent(body: bytes) -> dict[str, Any] | None:
    """The body as a CloudEvent dict if it already is one (Dapr publishes these), else None."""
    return _as_cloudevent(_parse_object(body))


_NOT_PARSED = object()
"""``_parse_object`` did not try (the body does not start with ``{``) or the JSON was bad."""


def _parse_object(body: bytes) -> Any:
    if body.lstrip()[:1] != b"{":
        return _NOT_PARSED
    try:
        return json_text.parse(body)
    except json_text.JsonUnreadable:
        return _NOT_PARSED


def _as_cloudevent(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict) and all(isinstance(value.get(k), str) for k in _REQUIRED):
        return value
    return None


def wrap_cloudevent(
    message: Message, payload: Payload, parsed: Any = _NOT_PARSED, *,
    pubsub_name: str = DEFAULT_PUBSUB_NAME,
) -> dict[str, Any]:
    """Wrap a body that is not a CloudEvent, the way Dapr wraps raw payloads.

    ``parsed`` is the body already decoded as JSON by the caller, if it was: decoding it once
    per delivery instead of twice shows in the sidecar's profile.
    """
    try:
        data = json_text.parse(payload.body) if parsed is _NOT_PARSED else parsed
    except json_text.JsonUnreadable:
        # Not JSON, or JSON beyond this parser (nesting, huge integers): the bytes go as
        # they are, so the app still gets the message and nothing is lost.
        return _bytes_event(message, payload, pubsub_name)
    event = _envelope(message, pubsub_name)
    event["data"] = data
    event["datacontenttype"] = payload.content_type or "application/json"
    return event


def _envelope(message: Message, pubsub_name: str) -> dict[str, Any]:
    """The wrapper's fields; ``topic`` (the queue) and ``pubsubname`` as daprd's envelope
    carries them (components-contrib ``pubsub/envelope.go`` ``NewCloudEventsEnvelope``), the
    same values the gRPC channel sends as ``TopicEventRequest.topic``/``pubsub_name``."""
    return {
        "specversion": "1.0",
        "id": message.id,
        "source": f"priority-pubsub/{message.queue}",
        "type": EVENT_TYPE,
        "time": _rfc3339(message.enqueued_ms),
        "topic": message.queue,
        "pubsubname": pubsub_name,
    }


def _bytes_event(message: Message, payload: Payload, pubsub_name: str) -> dict[str, Any]:
    """The body as ``data`` (``text/*`` that is UTF-8) or, losslessly, ``data_base64``."""
    event = _envelope(message, pubsub_name)
    content_type = payload.content_type or "application/octet-stream"
    event["datacontenttype"] = content_type
    text = _as_text(payload.body) if content_type.startswith("text/") else None
    if text is not None:
        event["data"] = text
    else:
        event["data_base64"] = base64.b64encode(payload.body).decode("ascii")
    return event


def build_request(
    message: Message, payload: Payload, *, delivery: str, api_token: str,
    pubsub_name: str = DEFAULT_PUBSUB_NAME,
) -> AppRequest:
    """Body and headers for one attempt; ``delivery`` is ``cloudevent`` or ``raw``.
    Every request carries the ``pubsubname`` header, as daprd's does (dapr
    ``pkg/runtime/pubsub/subscriptions.go`` ``MetadataKeyPubSub``, sent lower-cased)."""
    parsed = _parse_object(payload.body)
    event = _as_cloudevent(parsed)
    headers, adjusted = metadata_headers(payload.attributes)
    headers[PUBSUB_NAME_HEADER] = pubsub_name
    if api_token:
        headers["dapr-api-token"] = api_token
    if delivery == "raw":
        headers["Content-Type"] = payload.content_type or "application/octet-stream"
        if event is not None:
            adjusted += copy_trace_headers(event, headers)
        return AppRequest(payload.body, headers, event, adjusted)
    if event is None:
        event = wrap_cloudevent(message, payload, parsed, pubsub_name=pubsub_name)
    adjusted += copy_trace_headers(event, headers)
    headers["Content-Type"] = CLOUDEVENT_CONTENT_TYPE
    try:
        body = json_text.encode(_with_extensions(event, message))
    except json_text.JsonUnreadable:  # parsed, but too deep to write back: send the bytes
        event = _with_extensions(_bytes_event(message, payload, pubsub_name), message)
        body = json_text.encode(event)
    return AppRequest(body, headers, event, adjusted)


def _with_extensions(event: dict[str, Any], message: Message) -> dict[str, Any]:
    event["priority"] = message.priority
    event["queue"] = message.queue
    event["attempt"] = message.attempt
    return event


def metadata_headers(
    attributes: Mapping[str, str], prefix: str = "metadata."
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Message attributes as ``<prefix><name>`` headers, and the names of those adjusted.

    A name that is not a valid header token is left out. A value is made safe, never
    dropped: each character a header cannot carry (controls but tab, DEL, lone surrogates;
    CR/LF included) is percent-encoded as its UTF-8 bytes (``a\x7fb`` -> ``a%7Fb``).
    Brokers allow these (SQS allows DEL, Pub/Sub and Service Bus anything); refusing the
    header would make a good message undeliverable.
    """
    headers: dict[str, str] = {}
    adjusted: list[str] = []
    for name, value in attributes.items():
        if not _HEADER_NAME.match(name):
            adjusted.append(f"{prefix}{name}")
            continue
        text = str(value)
        if not header_safe(text):
            text = _UNSAFE_IN_HEADER.sub(_percent_encoded, text)
            adjusted.append(f"{prefix}{name}")
        headers[f"{prefix}{name}"] = text
    return headers, tuple(adjusted)


def header_safe(value: str) -> bool:
    """Whether HTTP/1.1 (and aiohttp) can carry ``value`` in a header as it is."""
    return _UNSAFE_IN_HEADER.search(value) is None


def _percent_encoded(match: re.Match[str]) -> str:
    return urllib.parse.quote(match.group(0), safe="", errors="surrogatepass")


def is_expired(event: dict[str, Any] | None, now: datetime) -> bool:
    """Dapr's message TTL: an event whose ``expiration`` (RFC 3339) has passed."""
    if not event or not isinstance(event.get("expiration"), str):
        return False
    try:
        expiration = datetime.fromisoformat(event["expiration"].replace("Z", "+00:00"))
    except ValueError:
        return False
    if expiration.tzinfo is None:
        expiration = expiration.replace(tzinfo=UTC)
    return expiration <= now


def copy_trace_headers(event: Mapping[str, Any], headers: dict[str, str]) -> tuple[str, ...]:
    """The event's W3C context as headers (``TRACE_HEADERS``; the gRPC channel sends them as
    metadata, a stream carries them in the event). One holding a character a header cannot
    carry is left out (and named in the result): it is not a valid W3C value, so a tracer
    would ignore it, and an altered one would name a different trace or other baggage. The
    event keeps it as it was."""
    left_out: list[str] = []
    for name in TRACE_HEADERS:
        value = event.get(name)
        if isinstance(value, str) and value:
            if not header_safe(value):
                left_out.append(name)
            else:
                headers[name] = value
    return tuple(left_out)


def _as_text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _rfc3339(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )
