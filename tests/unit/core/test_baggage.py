"""W3C baggage as daprd checks it where it enters (OpenTelemetry Go's ``baggage.Parse``, dapr
``pkg/diagnostics/http_tracing.go``): what passes, what is refused and why, and the limits
(8192 bytes; 180 distinct keys, daprd 1.16 and 1.17's, the widest of 1.16 to 1.18)."""

from __future__ import annotations

import pytest

from priority_pubsub.core.baggage import MAX_BYTES, MAX_MEMBERS, BaggageError, joined, members


def test_members_are_keys_with_percent_decoded_values() -> None:
    assert members("tenant=acme,req=42") == {"tenant": "acme", "req": "42"}
    assert members(" user = J%C3%B6rg ;pii; ttl = 60 , tier=") == {"user": "Jörg", "tier": ""}
    assert members("k=1,k=2") == {"k": "2"}  # OpenTelemetry keeps the last
    assert members("") == {}


def test_repeated_headers_join_as_daprd_joins_them() -> None:
    assert joined(["tenant=acme", "req=42"]) == "tenant=acme,req=42"
    with pytest.raises(BaggageError, match="list-member"):
        members(joined(["tenant=acme", ""]))  # daprd refuses the empty member it makes


@pytest.mark.parametrize(("value", "reason"), [
    ("invalid-baggage", 'invalid baggage list-member: "invalid-baggage"'),
    ("a=1,", 'invalid baggage list-member: ""'),
    ("a=1,,b=2", 'invalid baggage list-member: ""'),
    ("=1", 'invalid key: ""'),
    ("a b=1", 'invalid key: "a b"'),
    ("a=b c", 'invalid value: "b c"'),
    ('a="quoted"', 'invalid value: "\\"quoted\\""'),
    ("a=50%", 'invalid value: "50%"'),
    ("a=%zz", 'invalid value: "%zz"'),
    ("a=é", 'invalid value: "é"'),
    ("a=1;=x", 'invalid baggage list-member property: "=x"'),
    ("a=1;p q", 'invalid baggage list-member property: "p q"'),
    ("a=1;p=%g1", 'invalid baggage list-member property: "p=%g1"'),
])
def test_a_malformed_member_is_refused_naming_it(value: str, reason: str) -> None:
    with pytest.raises(BaggageError) as refused:
        members(value)
    assert str(refused.value) == reason


def test_at_most_8192_bytes() -> None:
    fits = "k=" + "x" * (MAX_BYTES - 2)
    assert members(fits) == {"k": "x" * (MAX_BYTES - 2)}
    with pytest.raises(BaggageError) as refused:
        members(fits + "x")
    assert str(refused.value) == "baggage-string too large: 8193"


def test_at_most_180_distinct_keys() -> None:
    most = ",".join(f"k{n}=v" for n in range(MAX_MEMBERS))
    assert len(members(most)) == 180
    assert len(members(most + ",k0=again")) == 180  # a repeated key counts once
    with pytest.raises(BaggageError) as refused:
        members(most + ",k180=v")
    assert str(refused.value) == "too many list-members in baggage-string: 181 > 180"


def test_one_long_member_is_no_error() -> None:
    """OpenTelemetry Go 1.40 (daprd 1.17) refused a member over 4096 bytes; 1.43 (daprd
    1.18) dropped that limit, so it is not kept."""
    assert members("k=" + "x" * 5000) == {"k": "x" * 5000}


def test_a_long_quoted_part_is_cut_short() -> None:
    with pytest.raises(BaggageError) as refused:
        members("x" * 500)
    assert len(str(refused.value)) < 140
