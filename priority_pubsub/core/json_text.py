"""JSON in and out for bodies we did not write: every failure is deterministic and named.

Valid JSON can still be beyond Python's ``json``: nesting past the recursion limit
(``RecursionError``), integers over ``sys.get_int_max_str_digits()`` digits (``ValueError``),
and ``\\ud800``-style lone surrogate escapes, which parse but cannot be encoded as UTF-8.
Each of these fails the same way on every attempt, so callers must decide at once (deliver
the bytes as they are, or dead-letter with the reason) instead of retrying.
"""

from __future__ import annotations

import json
from typing import Any

UNREADABLE = (ValueError, RecursionError)
"""What ``json.loads`` raises for bytes it cannot turn into a value (``JSONDecodeError`` and
``UnicodeDecodeError`` are ``ValueError``s)."""


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_COMPACT_ASCII = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
"""Built once: ``json.dumps`` with any non-default option builds a new encoder per call,
and ``encode`` runs once per delivery."""


class JsonUnreadable(ValueError):
    """The text is not JSON this process can represent; ``str()`` says why, in one line."""


def parse(data: bytes | str) -> Any:
    """``json.loads`` whose every failure is a ``JsonUnreadable`` with a short reason."""
    try:
        return json.loads(data)
    except RecursionError:
        raise JsonUnreadable("JSON nested too deeply for this parser") from None
    except ValueError as exc:
        raise JsonUnreadable(f"not JSON this parser can read: {str(exc)[:120]}") from None


def encode(value: Any) -> bytes:
    """Compact UTF-8 JSON; a string holding a lone surrogate (it came from a ``\\udXXX``
    escape in the input) is written back as that same escape, so nothing is lost."""
    try:
        text = _COMPACT(value)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return _COMPACT_ASCII(value).encode("ascii")
    except RecursionError:
        raise JsonUnreadable("JSON nested too deeply for this encoder") from None


_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
               "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_json(value: Any) -> bytes:
    """Go's ``json.Marshal`` of a map: keys sorted, compact, HTML characters escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _GO_ESCAPES.items():  # only inside strings: JSON has them nowhere else
        text = text.replace(raw, escaped)
    return text.encode("utf-8")
