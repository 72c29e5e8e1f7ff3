"""The CLI's help reads as prose: every command's and option's help text holds no reST markup
and no line broken inside a paragraph, and ``--help`` prints each paragraph unbroken when the
terminal is wide enough (the same texts make the generated reference page)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from priority_pubsub import cli
from priority_pubsub.commands.cli_reference import walk

ROOT = typer.main.get_command(cli.app)
COMMANDS: list[tuple[tuple[str, ...], Any]] = [((), ROOT), *walk(ROOT)]
NAMES = [" ".join(path) or "priority-pubsub" for path, _ in COMMANDS]
MARKUP = re.compile(r"``[^`]*``|:[a-z][\w-]*:`[^`]*`|`[^`]*`_\b|::\s*$", re.M)
"""reST in a help text: a double-backtick literal, a role (:attr:`x`), a link (`x`_), a
literal block's ``::``."""


def _texts(command: Any) -> list[tuple[str, str]]:
    """(whose, text) for the command's help and each visible parameter's."""
    texts = [("the command", command.help or "")]
    texts += [(param.name, param.help) for param in command.params
              if not param.hidden and getattr(param, "help", None)]
    return texts


def _problems(text: str) -> list[str]:
    found = [f"reST markup {match.group()!r}" for match in MARKUP.finditer(text)]
    for paragraph in text.split("\n\n"):
        if "\n" in paragraph or paragraph != paragraph.strip():
            found.append(f"a paragraph broken over lines: {paragraph!r}")
    return found


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=NAMES)
def test_help_texts_are_prose(path: tuple[str, ...], command: Any) -> None:
    problems = {whose: _problems(text) for whose, text in _texts(command)}
    assert {whose: found for whose, found in problems.items() if found} == {}


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=NAMES)
def test_help_prints_each_paragraph_on_one_line(path: tuple[str, ...], command: Any) -> None:
    """Wide enough, nothing needs wrapping: a paragraph split over lines was broken by its
    source, and markup would be printed as typed."""
    result = CliRunner().invoke(cli.app, [*path, "--help"], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert MARKUP.search(result.output) is None
    paragraphs = [p for _, text in _texts(command) for p in text.split("\n\n") if p]
    assert paragraphs
    assert [p for p in paragraphs if not any(p in line for line in lines)] == []


def test_the_check_finds_what_it_looks_for() -> None:
    """The docstring that started it: reST literals and lines broken mid-sentence."""
    old = ("Redrive dead letters: body and attributes kept, attempts reset, the redrive "
           "recorded in\nthe ``requeued_from`` attribute.\n\nSafe to interrupt: each message "
           "is published to --to before it is\ndeleted from --from.")
    assert len(_problems(old)) == 3
    assert _problems(":attr:`Settings.queues` and `the docs`_ show it::") == [
        "reST markup ':attr:`Settings.queues`'", "reST markup '`the docs`_'",
        "reST markup '::'"]
    assert _problems("Quoted `requeued_from`.\n\nA second paragraph.") == []


def test_docstrings_become_prose() -> None:
    """How every command gets its help: the docstring's paragraphs unwrapped, kept apart."""
    assert cli._prose("""First line
        goes on.

        Second   paragraph
        ends.
        """) == "First line goes on.\n\nSecond paragraph ends."
