"""The publish API (HTTP and gRPC) under hostile input: hypothesis-generated requests (bounded
example counts) and a table of hand-made ones — huge and deeply nested bodies, invalid UTF-8,
wrong types in every field, absurd metadata. Each answer must be a clear daprd-shaped error or
a success, the API must keep answering, and what the queue file gained must match the answer
exactly: a refused single publish enqueues nothing; a bulk publish enqueues exactly the
entries its answer does not list as failed (over gRPC daprd answers a partial failure with an
error status; the ids that failed are in its ErrorInfo metadata, ``failedEntries``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import grpc
import httpx
import pytest
from dapr.proto.runtime.v1.pubsub_pb2 import (
    BulkPublishRequest,
    BulkPublishRequestEntry,
    PublishEventRequest,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chaos.publish_api_harness import (
    MAX_BODY_BYTES,
    MAX_MESSAGE_BYTES,
    QUEUES,
    FuzzCounts,
    PublishApiUnderTest,
    failed_ids,
    grpc_error,
    http_error_is_clear,
)

pytestmark = [pytest.mark.chaos, pytest.mark.local]

EXAMPLES = 60
"""Per door: four doors x 60 plus the table run in ~20 s here."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])
DEEP = 100_000
CONTENT_TYPES = ["", "application/json", "text/plain", "application/cloudevents+json",
                 "application/octet-stream", "application/cloudevents+json; charset=utf-8",
                 "text/plain; charset=latin-1", "x/\x7f", "application/json;;;==", "a" * 300]
METADATA_KEYS = ["rawPayload", "ttlInSeconds", "ttl", "cloudevent.id", "cloudevent.type",
                 "cloudevent.traceparent", "cloudevent.source", "other"]
METADATA_VALUES = ["true", "false", "maybe", "", "-1", "0", "1e400", "99999999999999999999",
                   "9999999999999h", "1.5h", "-9999999999999999s", "\x00", "é" * 50]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
TOPICS = st.sampled_from(QUEUES) | st.sampled_from(["", "nope", "high/extra", "ö", "%2F"])
PUBSUBS = st.sampled_from(["pubsub"] * 4 + ["", "other", "pubsub\x00"])
METADATA = st.dictionaries(st.sampled_from(METADATA_KEYS), st.sampled_from(METADATA_VALUES)
                           | st.text(max_size=30), max_size=3)
BODIES = st.one_of(
    st.binary(max_size=MAX_MESSAGE_BYTES + 512),  # invalid UTF-8 and over the driver's limit
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.integers(1, DEEP).map(lambda d: b"[" * d + b"]" * d),
    st.integers(1, DEEP).map(lambda d: b'{"a":' * d + b"1" + b"}" * d),
)


def entry_dicts() -> st.SearchStrategy[Any]:
    valid = st.fixed_dictionaries({
        "entryId": st.text(min_size=1, max_size=6),
        "event": st.text(max_size=MAX_MESSAGE_BYTES + 100) | JSON_VALUES,
        "contentType": st.sampled_from(CONTENT_TYPES),
    }, optional={"metadata": st.dictionaries(st.sampled_from(METADATA_KEYS),
                                             st.sampled_from(METADATA_VALUES))})
    fields = ("entryId", "event", "contentType", "metadata")
    hostile = st.fixed_dictionaries({}, optional=dict.fromkeys(fields, JSON_VALUES))
    return valid | hostile


BULK_BODIES = st.one_of(
    st.lists(entry_dicts(), max_size=6).map(lambda entries: json.dumps(entries).encode()),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=300),
    st.integers(1, DEEP).map(lambda d: b"[" * d + b"]" * d),
)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PublishApiUnderTest]:
    with PublishApiUnderTest(tmp_path_factory.mktemp("fuzz-api")).running() as running:
        yield running


@pytest.fixture(scope="module")
def counts(fuzz_summary: list[str]) -> Iterator[dict[str, FuzzCounts]]:
    found: dict[str, FuzzCounts] = {}
    yield found
    fuzz_summary.extend(door.line() for door in found.values())


def _door(counts: dict[str, FuzzCounts], name: str) -> FuzzCounts:
    return counts.setdefault(name, FuzzCounts(name))


# -- judging one request -------------------------------------------------------------------

def http_single(api: PublishApiUnderTest, door: FuzzCounts, label: str, pubsub: str,
                topic: str, body: bytes, content_type: str, metadata: dict[str, str]) -> None:
    before = api.enqueued()
    params = {f"metadata.{k}": v for k, v in metadata.items()}
    response = api.http.post(f"/v1.0/publish/{quote(pubsub, safe='')}/{quote(topic)}",
                             content=body, params=params,
                             headers={"Content-Type": content_type} if content_type else {})
    gained = api.enqueued() - before
    door.tried += 1
    if response.status_code == 204:
        expected = 1
    else:
        door.errors += 1
        expected = 0
        if (why := http_error_is_clear(response)) is not None:
            door.crashes.append(f"{label}: {why}")
    if gained != expected:
        door.wrong_enqueues.append(f"{label}: {response.status_code}, gained {gained}")
    if not api.up():
        door.crashes.append(f"{label}: API down afterwards")


def http_bulk(api: PublishApiUnderTest, door: FuzzCounts, label: str, topic: str,
              body: bytes, metadata: dict[str, str]) -> None:
    before = api.enqueued()
    params = {f"metadata.{k}": v for k, v in metadata.items()}
    response = api.http.post(f"/v1.0-alpha1/publish/bulk/pubsub/{quote(topic)}", content=body,
                             params=params, headers={"Content-Type": "application/json"})
    gained = api.enqueued() - before
    door.tried += 1
    try:
        sent = json.loads(body)
    except (ValueError, RecursionError):
        sent = None
    entries = len(sent) if isinstance(sent, list) else 0
    if response.status_code == 204:
        expected = entries
    else:
        door.errors += 1
        if (why := http_error_is_clear(response)) is not None:
            door.crashes.append(f"{label}: {why}")
        answer = _json_or_empty(response)
        failed = answer.get("failedEntries") if isinstance(answer, dict) else None
        expected = entries - len(failed_ids(failed)) if isinstance(failed, list) else 0
    if gained != expected:
        door.wrong_enqueues.append(f"{label}: {response.status_code} {response.text[:200]}, "
                                   f"gained {gained}, expected {expected}")
    if not api.up():
        door.crashes.append(f"{label}: API down afterwards")


def _json_or_empty(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}


def grpc_single(api: PublishApiUnderTest, door: FuzzCounts, label: str,
                request: PublishEventRequest) -> None:
    before = api.enqueued()
    door.tried += 1
    try:
        api.grpc.PublishEvent(request, timeout=30)
        expected = 1
    except grpc.RpcError as exc:
        door.errors += 1
        expected = 0
        if (why := grpc_error(exc)[0]) is not None:
            door.crashes.append(f"{label}: {why}")
    gained = api.enqueued() - before
    if gained != expected:
        door.wrong_enqueues.append(f"{label}: gained {gained}, expected {expected}")
    if not api.up():
        door.crashes.append(f"{label}: API down afterwards")


def grpc_bulk(api: PublishApiUnderTest, door: FuzzCounts, label: str,
              request: BulkPublishRequest) -> None:
    before = api.enqueued()
    door.tried += 1
    entries = len(request.entries)
    try:
        answer = api.grpc.BulkPublishEvent(request, timeout=30)
        expected = entries - len({e.entry_id for e in answer.failedEntries})
    except grpc.RpcError as exc:
        door.errors += 1
        why, metadata = grpc_error(exc)
        if why is not None:
            door.crashes.append(f"{label}: {why}")
        failed = json.loads(metadata.get("failedEntries", "[]"))
        expected = entries - len(set(failed)) if failed else 0
    gained = api.enqueued() - before
    if gained != expected:
        door.wrong_enqueues.append(f"{label}: gained {gained}, expected {expected}")
    if not api.up():
        door.crashes.append(f"{label}: API down afterwards")


def _assert_clean(door: FuzzCounts) -> None:
    assert door.crashes == [], door.crashes[:5]
    assert door.wrong_enqueues == [], door.wrong_enqueues[:5]
    assert door.errors > 0  # the inputs did reach the refusing paths


# -- hypothesis ----------------------------------------------------------------------------

def test_fuzz_http_single_publish(api: PublishApiUnderTest,
                                  counts: dict[str, FuzzCounts]) -> None:
    door = _door(counts, "http publish")

    @FUZZ
    @given(pubsub=PUBSUBS, topic=TOPICS, body=BODIES, content_type=st.sampled_from(CONTENT_TYPES),
           metadata=METADATA)
    def attempt(pubsub: str, topic: str, body: bytes, content_type: str,
                metadata: dict[str, str]) -> None:
        http_single(api, door, f"{pubsub}/{topic} {content_type} {body[:40]!r} {metadata}",
                    pubsub, topic, body, content_type, metadata)

    attempt()
    _assert_clean(door)


def test_fuzz_http_bulk_publish(api: PublishApiUnderTest, counts: dict[str, FuzzCounts]) -> None:
    door = _door(counts, "http bulk publish")

    @FUZZ
    @given(topic=TOPICS, body=BULK_BODIES, metadata=METADATA)
    def attempt(topic: str, body: bytes, metadata: dict[str, str]) -> None:
        http_bulk(api, door, f"{topic} {body[:80]!r} {metadata}", topic, body, metadata)

    attempt()
    _assert_clean(door)


def test_fuzz_grpc_single_publish(api: PublishApiUnderTest,
                                  counts: dict[str, FuzzCounts]) -> None:
    door = _door(counts, "grpc publish")

    @FUZZ
    @given(pubsub=PUBSUBS, topic=TOPICS, body=BODIES, content_type=st.sampled_from(CONTENT_TYPES),
           metadata=METADATA)
    def attempt(pubsub: str, topic: str, body: bytes, content_type: str,
                metadata: dict[str, str]) -> None:
        request = PublishEventRequest(pubsub_name=pubsub, topic=topic, data=body,
                                      data_content_type=content_type, metadata=metadata)
        grpc_single(api, door, f"{pubsub}/{topic} {content_type} {body[:40]!r} {metadata}",
                    request)

    attempt()
    _assert_clean(door)


def test_fuzz_grpc_bulk_publish(api: PublishApiUnderTest, counts: dict[str, FuzzCounts]) -> None:
    door = _door(counts, "grpc bulk publish")
    entry = st.builds(BulkPublishRequestEntry, entry_id=st.text(max_size=4), event=BODIES,
                      content_type=st.sampled_from(CONTENT_TYPES), metadata=METADATA)

    @FUZZ
    @given(topic=TOPICS, entries=st.lists(entry, max_size=5), metadata=METADATA)
    def attempt(topic: str, entries: list[BulkPublishRequestEntry],
                metadata: dict[str, str]) -> None:
        request = BulkPublishRequest(pubsub_name="pubsub", topic=topic, entries=entries,
                                     metadata=metadata)
        grpc_bulk(api, door, f"{topic} {len(entries)} entries {metadata}", request)

    attempt()
    _assert_clean(door)


# -- the hand-made table -------------------------------------------------------------------

NESTED = b"[" * DEEP + b"]" * DEEP
HTTP_SINGLE_CASES: dict[str, tuple[bytes, str, dict[str, str]]] = {
    "over max_body_bytes": (b"x" * (MAX_BODY_BYTES + 1), "text/plain", {}),
    "over the driver's limit": (b"x" * (MAX_MESSAGE_BYTES + 1), "text/plain", {}),
    "nested 100k as json": (NESTED, "application/json", {}),
    "nested 100k as cloudevent": (NESTED, "application/cloudevents+json", {}),
    "nested object cloudevent": (b'{"a":' * DEEP + b"1" + b"}" * DEEP,
                                 "application/cloudevents+json", {}),
    "invalid utf-8 cloudevent": (b'{"id": "\xff\xfe", "data": "\xc3"}',
                                 "application/cloudevents+json", {}),
    "cloudevent not an object": (b"[1,2]", "application/cloudevents+json", {}),
    "invalid utf-8 json": (b"\xff\xfe\xfd", "application/json", {}),
    "ttl overflow seconds": (b"{}", "application/json", {"ttlInSeconds": "9" * 30}),
    "ttl overflow duration": (b"{}", "application/json", {"ttlInSeconds": "9999999999999h"}),
    "ttl negative overflow": (b"{}", "application/json", {"ttl": "-9999999999999999h"}),
    "rawPayload not a bool": (b"{}", "application/json", {"rawPayload": "maybe"}),
    "nul in cloudevent id": (b"{}", "application/json", {"cloudevent.id": "\x00"}),
}
HTTP_BULK_CASES: dict[str, bytes] = {
    "nested 100k": NESTED,
    "not a list": b'{"entryId": "1"}',
    "list of numbers": b"[1, 2, 3]",
    "invalid utf-8": b"[\xff]",
    "entry event nested 100k": b'[{"entryId": "1", "contentType": "application/json", '
                               b'"event": ' + NESTED + b"}]",
    "entry ids repeated": json.dumps([{"entryId": "a", "event": "x",
                                       "contentType": "text/plain"}] * 2).encode(),
    "entry id missing": json.dumps([{"event": "x", "contentType": "text/plain"}]).encode(),
    "entry event wrong type": json.dumps([{"entryId": "a", "event": {"x": 1},
                                           "contentType": "text/plain"}]).encode(),
    "entry base64 broken": json.dumps([{"entryId": "a", "event": "!!!",
                                        "contentType": "application/octet-stream"}]).encode(),
    "one entry too large": json.dumps([
        {"entryId": "small", "event": "x", "contentType": "text/plain"},
        {"entryId": "large", "event": "x" * (MAX_MESSAGE_BYTES + 1),
         "contentType": "text/plain"}]).encode(),
    "entry ttl overflow": json.dumps([{"entryId": "a", "event": "x", "contentType": "text/plain",
                                       "metadata": {"ttlInSeconds": "9" * 30}}]).encode(),
    "entry metadata wrong type": json.dumps([{"entryId": "a", "event": "x",
                                              "contentType": "text/plain",
                                              "metadata": [1, 2]}]).encode(),
}


def test_hand_made_hostile_requests(api: PublishApiUnderTest,
                                    counts: dict[str, FuzzCounts]) -> None:
    door = _door(counts, "hand-made table")
    for label, (body, content_type, metadata) in HTTP_SINGLE_CASES.items():
        http_single(api, door, f"http {label}", "pubsub", "normal", body, content_type,
                    metadata)
        grpc_single(api, door, f"grpc {label}", PublishEventRequest(
            pubsub_name="pubsub", topic="normal", data=body, data_content_type=content_type,
            metadata=metadata))
    for label, body in HTTP_BULK_CASES.items():
        http_bulk(api, door, f"http bulk {label}", "normal", body, {})
    grpc_bulk(api, door, "grpc bulk one entry too large", BulkPublishRequest(
        pubsub_name="pubsub", topic="normal", entries=[
            BulkPublishRequestEntry(entry_id="small", event=b"x", content_type="text/plain"),
            BulkPublishRequestEntry(entry_id="large", event=b"x" * (MAX_MESSAGE_BYTES + 1),
                                    content_type="text/plain")]))
    grpc_bulk(api, door, "grpc bulk nested entry", BulkPublishRequest(
        pubsub_name="pubsub", topic="normal", entries=[
            BulkPublishRequestEntry(entry_id="a", event=NESTED,
                                    content_type="application/cloudevents+json")]))
    _assert_clean(door)
