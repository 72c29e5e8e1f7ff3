"""The Dapr manifest loader under hostile resources: YAML alias bombs, deep nesting, invalid
UTF-8, huge files, and a wrong type in every field of a valid Component, Subscription and
Resiliency (the table), plus hypothesis-generated documents (bounded). Each load ends in one
of two ways only: the plan, or one ``ConfigError`` line naming the file — never another
exception, and never longer than a few seconds (an alias bomb must not expand)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.setup import load
from tests.chaos.publish_api_harness import FuzzCounts

pytestmark = [pytest.mark.chaos]

TIME_LIMIT_S = 5.0
COMPONENT: dict[str, Any] = {
    "apiVersion": "dapr.io/v1alpha1", "kind": "Component", "metadata": {"name": "pubsub"},
    "spec": {"type": "pubsub.redis", "version": "v1",
             "metadata": [{"name": "redisHost", "value": "127.0.0.1:6379"},
                          {"name": "consumerID", "value": "orders"}]},
    "scopes": ["orders"],
}
SUBSCRIPTION: dict[str, Any] = {
    "apiVersion": "dapr.io/v2alpha1", "kind": "Subscription", "metadata": {"name": "orders"},
    "spec": {"pubsubname": "pubsub", "topic": "orders",
             "routes": {"rules": [{"match": 'event.type == "big"', "path": "/big"}],
                        "default": "/orders"},
             "deadLetterTopic": "poison"},
    "scopes": ["orders"],
}
RESILIENCY: dict[str, Any] = {
    "apiVersion": "dapr.io/v1alpha1", "kind": "Resiliency", "metadata": {"name": "r"},
    "spec": {"policies": {"retries": {"three": {"policy": "constant", "duration": "1s",
                                                "maxRetries": 3}}},
             "targets": {"components": {"pubsub": {"inbound": {"retry": "three"}}}}},
}
BASELINE = (COMPONENT, SUBSCRIPTION, RESILIENCY)
WRONG_VALUES: tuple[Any, ...] = (None, 7, [], {"a": {"b": None}}, "x" * 10_000)
BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
              f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
              f"*{chr(97 + i)}]\n" for i in range(8))
)
"""Nine levels of nine-fold aliases: 9**9 (387 M) strings once expanded."""


def bomb_in(field: str) -> str:
    """A Component whose ``field`` (a path into it, YAML-side) is the expanded bomb."""
    return (BOMB + "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata: {name: pubsub}\n"
            + field)


HAND_MADE: dict[str, bytes] = {
    "alias bomb in a metadata value": bomb_in(
        "spec:\n  type: pubsub.redis\n  metadata:\n  - {name: redisHost, value: *i}\n").encode(),
    "alias bomb as scopes": bomb_in(
        "spec: {type: pubsub.redis, metadata: []}\nscopes: *i\n").encode(),
    "alias bomb as spec.metadata": bomb_in("spec: {type: pubsub.redis, metadata: *i}\n").encode(),
    "alias bomb as the name": bomb_in("spec: {type: pubsub.redis}\n").replace(
        "metadata: {name: pubsub}", "metadata: {name: *i}").encode(),
    "deep nesting 50k": b"apiVersion: dapr.io/v1alpha1\nkind: Component\nspec: "
                        + b"[" * 50_000 + b"]" * 50_000 + b"\n",
    "deep mapping nesting": b"apiVersion: dapr.io/v1alpha1\nkind: Component\nspec: "
                            + b"{a: " * 5_000 + b"1" + b"}" * 5_000 + b"\n",
    "invalid utf-8": b"apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata: {name: \xff}\n",
    "nul byte": b"apiVersion: dapr.io/v1alpha1\nkind: Component\x00\n",
    "tab indentation": b"apiVersion: dapr.io/v1alpha1\nkind: Component\nspec:\n\ttype: x\n",
    "python tag": b"apiVersion: dapr.io/v1alpha1\nkind: !!python/object/apply:os.system [id]\n",
    "huge file": b"apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata: {name: pubsub}\n"
                 b"spec: {type: pubsub.redis, metadata: [{name: x, value: '"
                 + b"x" * 8_000_000 + b"'}]}\n",
    "two thousand documents": b"---\n".join([b"apiVersion: dapr.io/v1alpha1\nkind: Component\n"
                                             b"metadata: {name: c}\nspec: {type: t}\n"] * 2_000),
    "duplicate keys": b"apiVersion: dapr.io/v1alpha1\nkind: Component\nkind: Subscription\n",
    "huge integer": b"apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata: {name: pubsub}\n"
                    b"spec: {type: pubsub.redis, metadata: [{name: x, value: "
                    + b"9" * 5_000 + b"}]}\n",
}


@pytest.fixture(scope="module")
def counts(fuzz_summary: list[str]) -> Iterator[FuzzCounts]:
    door = FuzzCounts("dapr manifests")
    yield door
    fuzz_summary.append(door.line())


def try_load(directory: Path, files: dict[str, bytes], door: FuzzCounts, label: str) -> None:
    """One load of a resources directory holding ``files``; judged and counted."""
    resources = directory / "resources"
    resources.mkdir(parents=True, exist_ok=True)
    for old in resources.iterdir():
        old.unlink()
    for name, content in files.items():
        (resources / name).write_bytes(content)
    config = directory / "config.yaml"
    config.write_text(yaml.safe_dump({"dapr": {"resources_path": str(resources),
                                               "app_id": "orders"},
                                      "app": {"url": "http://127.0.0.1:9"}}))
    door.tried += 1
    started = time.monotonic()
    try:
        load(config, reach_app=False)
    except ConfigError as exc:
        door.errors += 1
        message = str(exc)
        if "\n" in message or not message or len(message) > 2000:
            door.crashes.append(f"{label}: unclear error ({len(message)} chars): "
                                f"{message[:200]!r}")
    except Exception as exc:
        door.crashes.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
    elapsed = time.monotonic() - started
    if elapsed > TIME_LIMIT_S:
        door.crashes.append(f"{label}: took {elapsed:.1f} s")


def _documents(*documents: dict[str, Any]) -> dict[str, bytes]:
    return {f"{i:02d}.yaml": yaml.safe_dump(doc).encode() for i, doc in enumerate(documents)}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a document: each mapping key and list index, nested."""
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    for key, inner in items:
        yield (*prefix, key)
        yield from _paths(inner, (*prefix, key))


def _replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = dict(document) if isinstance(document, dict) else list(document)
    copy[path[0]] = _replaced(document[path[0]], path[1:], value)
    return copy


def test_the_baseline_loads(tmp_path: Path) -> None:
    door = FuzzCounts("baseline")
    try_load(tmp_path, _documents(*BASELINE), door, "baseline")
    assert door.errors == 0
    assert door.crashes == []


def test_wrong_type_in_every_field(tmp_path: Path, counts: FuzzCounts) -> None:
    for index, document in enumerate(BASELINE):
        for path in _paths(document):
            for value in WRONG_VALUES:
                hostile = list(BASELINE)
                hostile[index] = _replaced(document, path, value)
                try_load(tmp_path, _documents(*hostile), counts, f"{path}={value!r:.30}")
    assert counts.crashes == [], "\n".join(counts.crashes)
    assert counts.errors > 0


def test_hand_made_hostile_files(tmp_path: Path, counts: FuzzCounts) -> None:
    before = counts.errors
    for label, content in HAND_MADE.items():
        files = {**_documents(SUBSCRIPTION), "zz-hostile.yaml": content}
        try_load(tmp_path, files, counts, label)
    assert counts.crashes == [], counts.crashes[:10]
    assert counts.errors - before == len(HAND_MADE)  # every one refused, none taken


YAML_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
YAML_VALUES = st.recursive(
    YAML_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["name", "value", "type", "spec", "metadata", "routes", "rules",
                         "match", "path", "topic", "pubsubname", "scopes", "secretKeyRef",
                         "key", "policies", "targets", "x"]), inner, max_size=4),
    max_leaves=15)


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kind=st.sampled_from(["Component", "Subscription", "Resiliency", "Configuration"]),
       api=st.sampled_from(["dapr.io/v1alpha1", "dapr.io/v2alpha1", "dapr.io/v9"]),
       name=YAML_SCALARS, spec=YAML_VALUES, extra=YAML_VALUES,
       raw=st.binary(max_size=200))
def test_fuzz_generated_documents(tmp_path: Path, counts: FuzzCounts, kind: str, api: str,
                                  name: Any, spec: Any, extra: Any, raw: bytes) -> None:
    document = {"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec,
                "scopes": extra}
    files = {**_documents(COMPONENT, document), "zz-raw.yaml": raw}
    try_load(tmp_path, files, counts, f"{kind} {document!r:.200} raw={raw[:40]!r}")
    assert counts.crashes == [], counts.crashes[:5]
