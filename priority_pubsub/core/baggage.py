"""W3C Baggage (https://www.w3.org/TR/baggage/): the ``baggage`` a publisher sends, checked
once where it enters (the publish API) and read again where tracing shows it.

daprd (1.16 to 1.18: dapr ``pkg/diagnostics/http_tracing.go`` ``handleHTTPBaggage``,
``grpc_tracing.go`` ``handleBaggage``) joins every ``baggage`` header or metadata value with
``,`` and refuses the call when OpenTelemetry Go's ``baggage.Parse`` fails; the value it
accepts travels as it came, never re-encoded. The same rules here, so a publisher moving from
daprd sees the same answers:

- at most 8192 bytes (W3C's limit; every daprd of those versions);
- every list-member ``key=value`` with optional ``;property`` parts: the key a token
  (RFC 9110), the value W3C ``baggage-octet`` characters whose ``%`` escapes decode (an empty
  member, e.g. after a trailing comma, is not one);
- at most 180 distinct keys: daprd 1.16 and 1.17 (OpenTelemetry Go 1.35 and 1.40) allow 180,
  daprd 1.18 (Go 1.43+) 64, so the wider limit refuses nothing any of them accepts; Go 1.40's
  4096-byte limit on one member, gone in 1.43, is not kept either.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable

HEADER = "baggage"
"""The HTTP header, the gRPC metadata key and the CloudEvent field alike."""
MAX_BYTES = 8192
MAX_MEMBERS = 180
HEADER_ROOM = 8 * MAX_BYTES
"""What the publish API lets one header (aiohttp: 8190 bytes unless told) and a call's gRPC
metadata (8 KiB before gRPC starts refusing) carry: the largest valid baggage passes beside
the other headers, and one too large reaches the check that says so. daprd (Go) takes 1 MiB
of headers."""
_OWS = " \t"
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_OCTETS = r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*"
"""W3C ``baggage-octet``: printable ASCII but space, ``"``, ``,``, ``;`` and ``\\``."""
_KEY = re.compile(_TOKEN)
_VALUE = re.compile(_OCTETS)
_PROPERTY = re.compile(rf"[ \t]*{_TOKEN}[ \t]*(?:=[ \t]*{_OCTETS}[ \t]*)?")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_QUOTED_MAX = 100


class BaggageError(ValueError):
    """Why a baggage value is refused, in OpenTelemetry Go's words (daprd prefixes them with
    ``invalid baggage header: ``)."""


def joined(values: Iterable[str]) -> str:
    """Repeated ``baggage`` headers (or metadata values) as one, as daprd joins them."""
    return ",".join(values)


def members(value: str) -> dict[str, str]:
    """Each key with its value percent-decoded (the last one of a repeated key, as
    OpenTelemetry keeps it); ``""`` is no baggage. Raises ``BaggageError``."""
    size = len(value.encode())
    if size > MAX_BYTES:
        raise BaggageError(f"baggage-string too large: {size}")
    if not value:
        return {}
    found = dict(_member(text) for text in value.split(","))
    if len(found) > MAX_MEMBERS:
        raise BaggageError(f"too many list-members in baggage-string: {len(found)} > "
                           f"{MAX_MEMBERS}")
    return found


def _member(text: str) -> tuple[str, str]:
    pair, _, properties = text.partition(";")
    key, equals, raw_value = pair.partition("=")
    if not equals:
        raise BaggageError(f"invalid baggage list-member: {_quoted(text)}")
    key, value = key.strip(_OWS), raw_value.strip(_OWS)
    if not _KEY.fullmatch(key):
        raise BaggageError(f"invalid key: {_quoted(key)}")
    if not _VALUE.fullmatch(value) or _BAD_ESCAPE.search(value):
        raise BaggageError(f"invalid value: {_quoted(raw_value)}")
    for prop in properties.split(";") if properties else ():
        if prop and (not _PROPERTY.fullmatch(prop) or _BAD_ESCAPE.search(prop)):
            raise BaggageError(f"invalid baggage list-member property: {_quoted(prop)}")
    return key, urllib.parse.unquote(value)


def _quoted(text: str) -> str:
    """Go's ``%q``, cut short: the answer names the part, not a page of it."""
    cut = text if len(text) <= _QUOTED_MAX else text[:_QUOTED_MAX] + "..."
    return json.dumps(cut, ensure_ascii=False)
