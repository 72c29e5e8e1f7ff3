"""Pub/Sub names and errors without a broker: a bare id or a full path becomes the path the
driver talks in (refused when it names the other kind or needs a project it lacks), and the
SDK's exceptions (real ``google.api_core`` ones) become "try again", "the lease is gone" or a
terminal error."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.drivers.gcp_pubsub.names import is_path, map_error, resource_path

SUBSCRIPTION = "projects/shop/subscriptions/tasks-high"


def test_a_bare_id_gets_the_project_and_kind() -> None:
    assert resource_path("tasks-high", "subscriptions", "shop") == SUBSCRIPTION
    assert resource_path("orders", "topics", "shop") == "projects/shop/topics/orders"


def test_a_full_path_is_kept_whatever_the_project() -> None:
    assert resource_path(SUBSCRIPTION, "subscriptions", "other") == SUBSCRIPTION
    assert resource_path(SUBSCRIPTION, "subscriptions", None) == SUBSCRIPTION


def test_a_path_of_the_other_kind_is_refused() -> None:
    with pytest.raises(DriverError, match="names subscriptions, expected topics"):
        resource_path(SUBSCRIPTION, "topics", "shop")


@pytest.mark.parametrize("name", ["shop/tasks", "projects/shop/tasks-high",
                                  "projects/shop/subscriptions/a/b"])
def test_a_name_with_slashes_that_is_no_path_is_refused(name: str) -> None:
    with pytest.raises(DriverError, match="neither an id nor"):
        resource_path(name, "subscriptions", "shop")


@pytest.mark.parametrize("project", [None, ""])
def test_a_bare_id_without_a_project_says_how_to_give_one(project: str | None) -> None:
    with pytest.raises(DriverError, match=r"set driver\.project"):
        resource_path("tasks-high", "subscriptions", project)


def test_is_path_checks_the_kind_too() -> None:
    assert is_path(SUBSCRIPTION, "subscriptions")
    assert not is_path(SUBSCRIPTION, "topics")
    assert not is_path("tasks-high", "subscriptions")


@pytest.mark.parametrize("exc", [
    gexc.ServiceUnavailable("restarting"), gexc.DeadlineExceeded("slow"),
    gexc.TooManyRequests("quota"), gexc.InternalServerError("oops"), gexc.Aborted("contention"),
    gexc.Unknown("?"), gexc.RetryError("gave up", cause=None),
])
def test_transient_failures_are_worth_another_try(exc: Exception) -> None:
    error = map_error(exc, "pull")
    assert type(error) is DriverUnavailable
    assert error.retriable


@pytest.mark.parametrize("exc", [gexc.InvalidArgument("Invalid ack id"),
                                 gexc.FailedPrecondition("ack id expired")])
def test_a_refused_ack_id_while_settling_means_the_lease_is_gone(exc: Exception) -> None:
    assert type(map_error(exc, "acknowledge", settling=True)) is LeaseLost


@pytest.mark.parametrize("exc", [gexc.InvalidArgument("bad"), gexc.NotFound("no sub"),
                                 gexc.PermissionDenied("no"), ValueError("odd")])
def test_anything_else_is_terminal_and_named(exc: Exception) -> None:
    error = map_error(exc, "pull")
    assert type(error) is DriverError
    assert not error.retriable
    assert str(error).startswith(f"pub/sub pull: {type(exc).__name__}: ")
