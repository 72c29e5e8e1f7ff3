"""Routing rules as daprd evaluates them: in order, the first true wins, the default always
matches, nothing matching is None; a non-boolean or failing expression is a RoutingError and
a malformed one a ValueError at compile time."""

from __future__ import annotations

import pytest

from priority_pubsub.dapr.routing import CompiledRule, RoutingError, Rule, app_path, choose_path

EVENT = {"type": "order", "data": {"amount": 250, "country": "FR"}}


def rules(*pairs: tuple[str, str]) -> list[CompiledRule]:
    return [Rule(match, path).compiled() for match, path in pairs]


def test_the_first_true_rule_wins_even_when_a_later_one_is_true_too() -> None:
    chosen = rules(('event.data.amount > 1000', "big"), ('event.data.amount > 100', "mid"),
                   ('event.type == "order"', "orders"))
    assert choose_path(chosen, EVENT) == "mid"


def test_the_default_rule_matches_what_nothing_before_it_did() -> None:
    chosen = rules(('event.data.country == "DE"', "de"), ("", "default"))
    assert choose_path(chosen, EVENT) == "default"


def test_no_rule_matching_is_none() -> None:
    assert choose_path(rules(('event.type == "refund"', "refunds")), EVENT) is None


def test_a_rule_after_the_default_is_never_reached() -> None:
    chosen = rules(("  ", "default"), ("event.data.amount == 1/0", "never"))
    assert choose_path(chosen, EVENT) == "default"


def test_a_non_boolean_result_is_a_routing_error() -> None:
    with pytest.raises(RoutingError, match="was not a boolean"):
        choose_path(rules(("event.data.amount", "x")), EVENT)


def test_an_evaluation_error_is_a_routing_error_naming_the_expression() -> None:
    with pytest.raises(RoutingError, match=r"event\.data\.missing"):
        choose_path(rules(('event.data.missing == "x"', "x")), EVENT)


def test_a_malformed_expression_is_refused_when_compiled() -> None:
    with pytest.raises(ValueError, match="invalid CEL expression"):
        Rule("event.type ==", "x").compiled()


@pytest.mark.parametrize(("path", "posted"), [("orders", "/orders"), ("/orders", "/orders"),
                                              ("a/b", "/a/b")])
def test_the_app_path_gets_a_leading_slash_once(path: str, posted: str) -> None:
    assert app_path(path) == posted
