"""Turn a transformed message into the HTTP request Dapr's sidecar would send (DESIGN §4).

Pure functions: no I/O, so every rule of the app contract is unit-testable.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from priority_pubsub.message import Message
from priority_pubsub.transforms.base import Payload

CLOUDEVENT_CONTENT_TYPE = "application/cloudevents+json"
EVENT_TYPE = "com.priority-pubsub.message"
_REQUIRED = ("specversion", "id", "source", "type")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True, slots=True)
class AppRequest:
    body: bytes
    headers: dict[str, str]
    event: dict[str, Any] | None
    """The CloudEvent sent (None for raw delivery); used for expiration and tracing."""


def parse_cloudevent(body: bytes) -> dict[str, Any] | None:
    """The body as a CloudEvent dict if it already is one (Dapr publishes these), else None."""
    return _as_cloudevent(_parse_object(body))


_NOT_PARSED = object()
"""``_parse_object`` did not try (the body does not start with ``{``) or the JSON was bad."""


def _parse_object(body: bytes) -> Any:
    if body.lstrip()[:1] != b"{":
        return _NOT_PARSED
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return _NOT_PARSED


def _as_cloudevent(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict) and all(isinstance(value.get(k), str) for k in _REQUIRED):
        return value
    return None


def wrap_cloudevent(
    message: Message, payload: Payload, parsed: Any = _NOT_PARSED
) -> dict[str, Any]:
    """Wrap a body that is not a CloudEvent, the way Dapr wraps raw payloads.

    ``parsed`` is the body already decoded as JSON by the caller, if it was: decoding it once
    per delivery instead of twice shows in the sidecar's profile.
    """
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": message.id,
        "source": f"priority-pubsub/{message.queue}",
        "type": EVENT_TYPE,
        "time": _rfc3339(message.enqueued_ms),
    }
    try:
        event["data"] = json.loads(payload.body) if parsed is _NOT_PARSED else parsed
        event["datacontenttype"] = payload.content_type or "application/json"
    except (UnicodeDecodeError, json.JSONDecodeError):
        content_type = payload.content_type or "application/octet-stream"
        event["datacontenttype"] = content_type
        text = _as_text(payload.body) if content_type.startswith("text/") else None
        if text is not None:
            event["data"] = text
        else:
            event["data_base64"] = base64.b64encode(payload.body).decode("ascii")
    return event


def build_request(
    message: Message, payload: Payload, *, delivery: str, api_token: str
) -> AppRequest:
    """Body and headers for one attempt; ``delivery`` is ``cloudevent`` or ``raw``."""
    parsed = _parse_object(payload.body)
    event = _as_cloudevent(parsed)
    headers = metadata_headers(payload.attributes)
    if api_token:
        headers["dapr-api-token"] = api_token
    if delivery == "raw":
        headers["Content-Type"] = payload.content_type or "application/octet-stream"
        if event is not None:
            _copy_trace_headers(event, headers)
        return AppRequest(payload.body, headers, event)
    if event is None:
        event = wrap_cloudevent(message, payload, parsed)
    event["priority"] = message.priority
    event["queue"] = message.queue
    event["attempt"] = message.attempt
    _copy_trace_headers(event, headers)
    headers["Content-Type"] = CLOUDEVENT_CONTENT_TYPE
    body = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return AppRequest(body, headers, event)


def metadata_headers(attributes: Mapping[str, str], prefix: str = "metadata.") -> dict[str, str]:
    """Message attributes as ``<prefix><name>`` headers; names that are not valid header
    tokens are skipped and values are kept on one line (a header cannot carry CR/LF)."""
    headers: dict[str, str] = {}
    for name, value in attributes.items():
        if _HEADER_NAME.match(name):
            headers[f"{prefix}{name}"] = " ".join(str(value).splitlines())
    return headers


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


def _copy_trace_headers(event: dict[str, Any], headers: dict[str, str]) -> None:
    for name in ("traceparent", "tracestate"):
        value = event.get(name)
        if isinstance(value, str) and value:
            headers[name] = value


def _as_text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _rfc3339(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )
