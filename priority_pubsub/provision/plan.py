"""The pure core of provisioning: compare what exists with what the config wants, decide.

A broker module reads the current settings of each resource it needs (or ``None`` when the
resource does not exist), states the wanted ones, and asks ``decide`` what to do. ``decide``
does no I/O, so every rule here (create what is missing, leave differing settings alone
unless ``--update``, report drift with the exact setting) is unit-testable.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class Verb(enum.StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DRIFT = "drift"
    OK = "ok"


@dataclass(frozen=True, slots=True)
class Action:
    """One row of the plan (or of the report after applying it)."""

    resource: str
    action: Verb
    setting: str | None = None
    current: Any = None
    wanted: Any = None

    def as_json(self) -> dict[str, Any]:
        return {"resource": self.resource, "action": self.action.value,
                "setting": self.setting, "current": self.current, "wanted": self.wanted}


@dataclass(frozen=True, slots=True)
class Mode:
    """``dry_run``: only report. ``update``: change existing resources' differing settings."""

    dry_run: bool = False
    update: bool = False


def differences(current: Mapping[str, Any], wanted: Mapping[str, Any]
                ) -> list[tuple[str, Any, Any]]:
    """``(setting, current, wanted)`` for every wanted setting whose value differs."""
    return [(name, current.get(name), value) for name, value in wanted.items()
            if current.get(name) != value]


def decide(resource: str, current: Mapping[str, Any] | None, wanted: Mapping[str, Any],
           mode: Mode) -> list[Action]:
    """The rows for one resource: create it, or one row per differing setting (update when
    ``mode.update``, else drift), or one ``ok`` row."""
    if current is None:
        return [Action(resource, Verb.CREATE, None, None, dict(wanted) or None)]
    found = differences(current, wanted)
    if not found:
        return [Action(resource, Verb.OK)]
    verb = Verb.UPDATE if mode.update else Verb.DRIFT
    return [Action(resource, verb, name, now, want) for name, now, want in found]


def to_change(actions: Iterable[Action]) -> dict[str, Any]:
    """The settings an ``update`` row set asks to change, as ``{setting: wanted}``."""
    return {a.setting: a.wanted for a in actions if a.action is Verb.UPDATE and a.setting}


def exit_code(actions: Sequence[Action], mode: Mode) -> int:
    """0 when everything is (now) in place; 3 when a dry run would change something or found
    drift, or when drift remains after a real run."""
    if mode.dry_run:
        return 0 if all(a.action is Verb.OK for a in actions) else 3
    return 3 if any(a.action is Verb.DRIFT for a in actions) else 0


def summary(actions: Sequence[Action], mode: Mode) -> str:
    """One line for humans: what was (or would be) done."""
    counts = {verb: sum(1 for a in actions if a.action is verb) for verb in Verb}
    if counts[Verb.CREATE] == counts[Verb.UPDATE] == counts[Verb.DRIFT] == 0:
        return "nothing to do: every resource is in place"
    done = "would create" if mode.dry_run else "created"
    changed = "would update" if mode.dry_run else "updated"
    parts = [f"{done} {counts[Verb.CREATE]}", f"{changed} {counts[Verb.UPDATE]}",
             f"drift {counts[Verb.DRIFT]}", f"ok {counts[Verb.OK]}"]
    hint = " (use --update to change drifted settings)" if counts[Verb.DRIFT] else ""
    return ", ".join(parts) + hint
