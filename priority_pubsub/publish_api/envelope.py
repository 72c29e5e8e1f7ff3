"""The CloudEvent daprd's publish API builds around a published body — pure functions, so
each rule is unit-testable.

Sources: dapr ``pkg/runtime/pubsub/cloudevents.go`` (``NewCloudEvent``: a body sent as
``application/cloudevents+json`` is kept (``FromCloudEvent``); otherwise ``cloudevent.*``
metadata may override id, source, type, subject, traceid, traceparent, tracestate, and the
body is wrapped (``NewCloudEventsEnvelope``)); components-contrib ``pubsub/envelope.go``
(defaults, ``data`` vs ``data_base64`` by content type, invalid JSON kept as text,
``ApplyMetadata``: ``ttlInSeconds`` -> ``expiration``), ``metadata/utils.go``
(``IsRawPayload``, ``TryGetTTL``). The event is serialised as Go's ``json.Marshal`` does.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from priority_pubsub.app.channel.envelope import is_text_type, media_type
from priority_pubsub.core.json_text import go_json

EVENT_TYPE = "com.dapr.event.sent"
DEFAULT_SOURCE = "Dapr"
DEFAULT_DATA_CONTENT_TYPE = "text/plain"
CLOUDEVENT_JSON = "application/cloudevents+json"
OVERRIDES = ("id", "source", "type", "subject", "traceid", "traceparent", "tracestate")
"""``cloudevent.<name>`` metadata keys that override the wrapped event's fields."""
_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                     "h": 3600.0}


class EnvelopeError(ValueError):
    """The body cannot become an event (daprd: 500 ``ERR_PUBSUB_CLOUD_EVENTS_SER``)."""


class MetadataError(ValueError):
    """A metadata value daprd refuses (400 ``ERR_PUBSUB_REQUEST_METADATA``)."""


@dataclass(frozen=True, slots=True)
class Trace:
    """The publisher's W3C trace context (its ``traceparent``/``tracestate``), "" if none."""

    parent: str = ""
    state: str = ""
    baggage: str = ""
    """Its W3C ``baggage``, checked (``core.baggage``): the event's ``baggage`` field, which
    delivery restores as a header or metadata. daprd up to 1.18 drops it at the queue (dapr
    #10302); this is the field dapr #10385 adds."""


def is_raw_payload(metadata: Mapping[str, str]) -> bool:
    """``IsRawPayload``: Go's ``strconv.ParseBool`` of ``rawPayload``."""
    value = metadata.get("rawPayload", "")
    if value == "":
        return False
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise MetadataError(f"rawPayload value must be a valid boolean: actual is '{value}'")


def ttl_s(metadata: Mapping[str, str]) -> float | None:
    """``TryGetTTL``: ``ttlInSeconds`` (or ``ttl``, any case) as a Go duration or seconds.
    daprd ignores a bad value when building the envelope; so does this (None)."""
    lowered = {key.lower(): value for key, value in metadata.items()}
    value = lowered.get("ttl") or lowered.get("ttlinseconds") or ""
    if not value:
        return None
    duration = _go_duration_s(value)
    if duration is not None:
        return max(duration, 0.0)
    try:
        seconds = int(value)
    except ValueError:
        return None
    return float(seconds) if seconds > 0 else None


def _go_duration_s(text: str) -> float | None:
    sign, body = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text.lstrip("+"))
    if body == "0":
        return 0.0
    parts = _GO_DURATION.findall(body)
    if not parts or "".join(number + unit for number, unit in parts) != body:
        return None
    return sign * sum(float(number) * _DURATION_UNITS_S[unit] for number, unit in parts)


def build_event(body: bytes, content_type: str, *, topic: str, pubsub_name: str, source: str,
                metadata: Mapping[str, str], trace: Trace,
                now: datetime | None = None) -> dict[str, Any]:
    """The event daprd publishes for ``body`` (before ``ApplyMetadata``'s expiration), with
    the publisher's baggage unless the event brings its own; none, no field."""
    now = now or datetime.now(UTC)
    if media_type(content_type) == CLOUDEVENT_JSON:
        event = _from_cloud_event(body, topic, pubsub_name, trace, now)
    else:
        event = _wrapped(body, content_type, topic, pubsub_name, source, metadata, trace, now)
    if trace.baggage:
        event.setdefault("baggage", trace.baggage)
    return event


def _wrapped(body: bytes, content_type: str, topic: str, pubsub_name: str, source: str,
             metadata: Mapping[str, str], trace: Trace, now: datetime) -> dict[str, Any]:
    fields = {"id": "", "source": source, "type": "", "subject": "",
              "traceid": trace.parent, "traceparent": "", "tracestate": trace.state}
    lowered = {key.lower(): value for key, value in metadata.items()}
    for name in OVERRIDES:  # mapstructure's WeakDecode matches keys case-insensitively
        if f"cloudevent.{name}" in lowered:
            fields[name] = lowered[f"cloudevent.{name}"]
    if fields["traceparent"]:
        fields["traceid"] = fields["traceparent"]
    return _new_envelope(fields, topic, pubsub_name, content_type, body, now)


def apply_ttl(event: dict[str, Any], metadata: Mapping[str, str],
              now: datetime | None = None) -> None:
    """``ApplyMetadata``: a TTL becomes ``expiration`` (RFC 3339), which delivery honours."""
    seconds = ttl_s(metadata)
    if seconds is not None:
        try:
            expiration = (now or datetime.now(UTC)) + timedelta(seconds=seconds)
        except OverflowError:  # past year 9999: Go wraps the duration silently; refuse it
            raise MetadataError(f"ttl of {seconds:g} s is out of range") from None
        event["expiration"] = _rfc3339(expiration)


def serialise(event: dict[str, Any]) -> bytes:
    return go_json(event)


def _new_envelope(fields: dict[str, str], topic: str, pubsub_name: str, content_type: str,
                  body: bytes, now: datetime) -> dict[str, Any]:
    content_type = content_type or DEFAULT_DATA_CONTENT_TYPE
    event: dict[str, Any] = {
        "id": fields["id"] or str(uuid.uuid4()),
        "specversion": "1.0",
        "datacontenttype": content_type,
        "source": fields["source"] or DEFAULT_SOURCE,
        "type": fields["type"] or EVENT_TYPE,
        "topic": topic,
        "pubsubname": pubsub_name,
        "traceid": fields["traceid"],
        "traceparent": fields["traceid"],
        "tracestate": fields["tracestate"],
        "time": _rfc3339(now),
    }
    if media_type(content_type) == "application/json":
        try:
            event["data"] = _first_json_value(body)
        except ValueError:
            event["data"] = _go_string(body)  # daprd publishes invalid JSON as text
    elif media_type(content_type) in ("application/octet-stream",
                                      "application/cloudevents+protobuf"):
        event["data_base64"] = base64.b64encode(body).decode("ascii")
    else:
        event["data"] = _go_string(body)
    if fields["subject"]:
        event["subject"] = fields["subject"]
    return event


def _from_cloud_event(body: bytes, topic: str, pubsub_name: str, trace: Trace,
                      now: datetime) -> dict[str, Any]:
    try:
        event = _first_json_value(body)
    except ValueError as exc:
        raise EnvelopeError(f"the body is not a JSON CloudEvent: {exc}") from None
    if not isinstance(event, dict):
        raise EnvelopeError("the body is not a JSON CloudEvent: not an object")
    event.setdefault("time", _rfc3339(now))
    if "traceid" not in event:
        event["traceid"] = event["traceparent"] = trace.parent
    event.setdefault("tracestate", trace.state)
    event["topic"] = topic
    event["pubsubname"] = pubsub_name
    for key, default in (("source", DEFAULT_SOURCE), ("type", EVENT_TYPE),
                         ("specversion", "1.0")):
        if event.get(key) is None:
            event[key] = default
    return event


def _first_json_value(body: bytes) -> Any:
    """Go's ``json.Decoder.Decode``: the first JSON value; what follows it is not read."""
    text = body.decode("utf-8", errors="replace")
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        raise ValueError("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(stripped)
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:  # Go's decoder stops at depth 10000 with an error too
        raise ValueError("exceeded max depth") from None
    return value


def _go_string(body: bytes) -> str:
    """``string(data)`` as Go's JSON encoder writes it: invalid UTF-8 becomes U+FFFD."""
    return body.decode("utf-8", errors="replace")


def _rfc3339(moment: datetime) -> str:
    """Go's ``time.RFC3339``: seconds, ``Z`` for UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bulk_entry_bytes(event: Any, content_type: str) -> bytes:
    """dapr ``pkg/api/http/util.go`` ``ConvertEventToBytes``: one bulk entry's ``event``."""
    kind = media_type(content_type)
    if kind == "application/octet-stream":
        if not isinstance(event, str):
            raise EnvelopeError("error: mismatch between contentType and event")
        try:
            return base64.b64decode(event, validate=True)
        except ValueError as exc:
            raise EnvelopeError("error: unable to decode base64 application/octect-stream "
                                f"data: {exc}") from None
    if is_text_type(content_type):
        if not isinstance(event, str):
            raise EnvelopeError("error: mismatch between contentType and event")
        return event.encode("utf-8")
    if kind in ("application/json", CLOUDEVENT_JSON):
        return go_json(event)
    raise EnvelopeError("error: mismatch between contentType and event")
