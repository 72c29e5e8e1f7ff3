"""``publish``'s check of a body sent as a structured CloudEvent: the SDK judges it, and the
answer is one line; a body that claims nothing is not judged."""

from __future__ import annotations

import json

import pytest

from priority_pubsub.app.cloudevent_check import cloudevent_problem

STRUCTURED = "application/cloudevents+json"
EVENT = {"specversion": "1.0", "id": "1", "source": "shop", "type": "order.created",
         "data": {"n": 1}}


def body(document: object) -> bytes:
    return json.dumps(document).encode()


@pytest.mark.parametrize("content_type", [None, "application/json", "text/plain"])
def test_a_body_that_claims_no_cloudevent_is_not_judged(content_type: str | None) -> None:
    assert cloudevent_problem(b"not json at all", content_type) is None


@pytest.mark.parametrize("content_type",
                         [STRUCTURED, "Application/CloudEvents+JSON; charset=utf-8"])
def test_a_valid_event_passes_whatever_the_case_and_parameters(content_type: str) -> None:
    assert cloudevent_problem(body(EVENT), content_type) is None


def test_a_body_that_is_not_json_is_said_so() -> None:
    assert cloudevent_problem(b"{not json", STRUCTURED) == "the body is not JSON"


def test_json_that_is_not_an_object_is_said_so() -> None:
    assert cloudevent_problem(b"[1, 2]", STRUCTURED) == "the body is JSON but not an object"


@pytest.mark.parametrize("missing", ["source", "type"])
def test_an_event_without_a_required_attribute_is_refused_in_one_line(missing: str) -> None:
    event = {k: v for k, v in EVENT.items() if k != missing}
    problem = cloudevent_problem(body(event), STRUCTURED)
    assert problem
    assert "\n" not in problem


def test_an_unknown_spec_version_is_refused_naming_the_attribute() -> None:
    problem = cloudevent_problem(body({**EVENT, "specversion": "9"}), STRUCTURED)
    assert problem is not None
    assert "specversion" in problem


def test_a_bad_time_is_refused() -> None:
    assert cloudevent_problem(body({**EVENT, "time": "not a time"}), STRUCTURED)


@pytest.mark.parametrize("missing", ["specversion", "id"])
def test_what_the_sdk_fills_in_itself_passes(missing: str) -> None:
    """The SDK takes a missing ``specversion`` as 1.0 and makes up an ``id``: so does publish."""
    event = {k: v for k, v in EVENT.items() if k != missing}
    assert cloudevent_problem(body(event), STRUCTURED) is None
