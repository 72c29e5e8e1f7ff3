"""What a stream entry carries and how the core reads it: its fields (Dapr's ``data`` and
``metadata``), entry ids, and Redis's errors as the project's.

Shared by the consumer (``driver``) and the monitor's abilities (``monitoring``), so neither
imports the other.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping

from priority_pubsub.core.errors import DriverError, DriverUnavailable
from priority_pubsub.core.imports import without

with without("opentelemetry"):  # as in ``driver``: redis-py would import it for nothing
    from redis import exceptions as redis_exceptions
from priority_pubsub.drivers.base import map_errors

__all__ = [
    "DATA_FIELD",
    "ENTRY_ID",
    "MALFORMED_METADATA_FIELD",
    "METADATA_FIELD",
    "attributes_of",
    "entry_order",
    "fields_with",
    "map_error",
    "sdk_errors",
    "text",
]

DATA_FIELD = b"data"
METADATA_FIELD = b"metadata"
MALFORMED_METADATA_FIELD = b"malformed_metadata"
ENTRY_ID = re.compile(r"\A\d{1,20}-\d{1,20}\Z")


def fields_with(fields: Iterable[tuple[bytes, bytes]], attributes: Mapping[str, str]
                 ) -> list[bytes]:
    """An entry's fields, ``metadata`` replaced by ``attributes`` (a malformed original
    ``metadata`` kept as ``malformed_metadata``): a dead letter's, a promoted copy's."""
    flat: list[bytes] = []
    for name, value in fields:
        if name == METADATA_FIELD:
            if attributes_of(value)[1] is not None:
                flat += [MALFORMED_METADATA_FIELD, value]
            continue
        flat += [name, value]
    return [*flat, METADATA_FIELD, json.dumps(dict(attributes)).encode()]


def attributes_of(raw: bytes | None) -> tuple[dict[str, str], str | None]:
    """Dapr's ``metadata`` field (a JSON object of strings) as attributes, or why it is not."""
    if raw is None:
        return {}, None
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return {}, "stream entry's 'metadata' field is not UTF-8"
    except json.JSONDecodeError as exc:
        return {}, f"stream entry's 'metadata' field is not JSON: {exc}"
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return {}, "stream entry's 'metadata' field is not a JSON object of strings"
    return value, None


def entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """The one place Redis errors become project errors: retriable or terminal.

    ``settling`` changes nothing: a lost lease shows as a script's answer, not as an error.
    """
    if isinstance(exc, redis_exceptions.AuthenticationError | redis_exceptions.AuthorizationError):
        return DriverError(f"redis: {action}: not allowed: {exc}", retriable=False)
    if isinstance(exc, redis_exceptions.ConnectionError | redis_exceptions.TimeoutError | OSError):
        return DriverUnavailable(f"redis: {action}: {type(exc).__name__}: {exc}")
    if isinstance(exc, redis_exceptions.ResponseError) and str(exc).startswith(
            ("LOADING", "MASTERDOWN", "TRYAGAIN", "READONLY")):
        return DriverUnavailable(f"redis: {action}: {exc}")
    return DriverError(f"redis: {action}: {exc}", retriable=False)


sdk_errors = functools.partial(
    map_errors, map_error, catch=(redis_exceptions.RedisError, OSError, TimeoutError))
