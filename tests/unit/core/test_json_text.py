"""JSON of bodies we did not write: whatever Python's ``json`` cannot represent fails as one
``JsonUnreadable`` naming why; a lone surrogate escape survives a round trip; ``go_json``
writes what Go's ``json.Marshal`` writes."""

from __future__ import annotations

import json
import sys

import pytest

from priority_pubsub.core.json_text import JsonUnreadable, encode, go_json, parse


def test_json_parses_from_bytes_or_text() -> None:
    assert parse(b'{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    assert parse('"x"') == "x"


@pytest.mark.parametrize(("data", "why"), [
    (b"{not json", "not JSON this parser can read"),
    (b"\xff\xfe\x00", "not JSON this parser can read"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"1" * (sys.get_int_max_str_digits() + 1), "not JSON this parser can read"),
])
def test_what_python_cannot_read_is_one_short_named_failure(data: bytes, why: str) -> None:
    with pytest.raises(JsonUnreadable, match=why) as raised:
        parse(data)
    assert "\n" not in str(raised.value)
    assert len(str(raised.value)) < 200


def test_encode_is_compact_utf8() -> None:
    assert encode({"a": "é", "b": [1, 2]}) == '{"a":"é","b":[1,2]}'.encode()


def test_a_lone_surrogate_is_written_back_as_its_escape() -> None:
    value = parse(b'{"s": "\\ud800"}')
    assert encode(value) == b'{"s":"\\ud800"}'
    assert parse(encode(value)) == value


def test_too_deep_to_encode_is_named() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(JsonUnreadable, match="nested too deeply for this encoder"):
        encode(deep)


def test_go_json_sorts_keys_and_escapes_what_go_escapes() -> None:
    value = {"z": "<a href='x'>&</a>", "a": "line\u2028sep\u2029", "m": {"b": 1, "a": 2}}
    assert go_json(value) == (
        b'{"a":"line\\u2028sep\\u2029","m":{"a":2,"b":1},'
        b'"z":"\\u003ca href=\'x\'\\u003e\\u0026\\u003c/a\\u003e"}')
    assert json.loads(go_json(value)) == value
