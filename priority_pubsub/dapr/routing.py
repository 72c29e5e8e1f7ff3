"""Routing rules: a subscription's CEL ``match`` expressions over ``event.*``, as daprd
evaluates them (dapr ``pkg/runtime/subscription/subscription.go`` ``findMatchingRoute``):
rules in order, the first whose expression is true wins; a rule without an expression (the
``default``) always matches; a non-boolean result or an evaluation error is an error; no
match means the event is not for this app (dropped, to the dead-letter topic if one is set).

CEL comes from cel-python (``celpy``), a complete implementation of the language.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from priority_pubsub.core.errors import PriorityPubsubError


class RoutingError(PriorityPubsubError):
    """A rule could not be evaluated for this event (daprd: retry, or the dead-letter topic)."""


class Matcher:
    """One compiled ``match`` expression; call it with the event."""

    def __init__(self, expression: str) -> None:
        from celpy import Environment
        from celpy.adapter import json_to_cel
        from celpy.celparser import CELParseError

        self.expression = expression
        environment = Environment()
        try:
            self._program = environment.program(environment.compile(expression))
        except CELParseError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"invalid CEL expression {expression!r}: {first}") from None
        self._to_cel = json_to_cel

    def __call__(self, event: Mapping[str, Any]) -> bool:
        from celpy.celtypes import BoolType
        from celpy.evaluation import CELEvalError

        try:
            result = self._program.evaluate({"event": self._to_cel(dict(event))})
        except CELEvalError as exc:
            raise RoutingError(f"match {self.expression!r}: {exc.args[0] if exc.args else exc}"
                               ) from None
        if isinstance(result, CELEvalError):  # celpy may return the error as a value
            raise RoutingError(f"match {self.expression!r}: {result.args[0]}")
        if not isinstance(result, BoolType | bool):
            raise RoutingError(f"the result of match expression {self.expression} "
                               "was not a boolean")
        return bool(result)


@dataclass(frozen=True, slots=True)
class Rule:
    """``match`` "" is the default rule. ``path`` as written (daprd adds the leading '/')."""

    match: str
    path: str

    def compiled(self) -> CompiledRule:
        return CompiledRule(Matcher(self.match) if self.match.strip() else None, self.path)


@dataclass(frozen=True, slots=True)
class CompiledRule:
    matcher: Matcher | None
    path: str


def choose_path(rules: Sequence[CompiledRule], event: Mapping[str, Any]) -> str | None:
    """The path of the first matching rule, or None when no rule matches."""
    for rule in rules:
        if rule.matcher is None or rule.matcher(event):
            return rule.path
    return None


def app_path(path: str) -> str:
    """The URL path daprd posts to: the route with a leading '/' (``orders`` -> ``/orders``)."""
    return path if path.startswith("/") else f"/{path}"
