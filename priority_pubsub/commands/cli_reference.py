"""The command-line reference (``docs/reference/cli.md``), read from the CLI itself.

Typer builds a command tree (``typer.main.get_command``); walking it gives every command,
argument and option with its help, type and default, so the page cannot drift from what
``--help`` prints. The caller passes the tree in (this module sits below ``cli``). Typer keeps
its own copy of click's classes, so the tree is read by its attributes (``commands``,
``params``, ``opts``...), not by click's types.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union, get_args, get_origin

Command = Any
"""A typer (click) command or group: ``name``, ``help``, ``params``, ``commands`` if a group."""


def walk(command: Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Command]]:
    """Every command under ``command`` (groups included), depth first, in help order."""
    if path:
        yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            yield from walk(sub, (*path, name))


def command_names(root: Command) -> list[str]:
    """``["run", "check", ..., "config schema"]``: what the reference covers."""
    return [" ".join(path) for path, _ in walk(root)]


def cli_reference(root: Command, program: str = "priority-pubsub") -> str:
    """The whole page, Markdown: one section per command."""
    lines = [
        "# Command-line reference",
        "",
        f"Generated from the `{program}` command itself (`priority_pubsub.commands."
        "cli_reference`): do not edit by hand. Every command also answers `--help`. Exit "
        "codes: 0 clean, 1 fatal error, 2 invalid config or usage (one line naming the key "
        "path); `provision` exits 3 when something would change or drift remains.",
        "",
    ]
    for path, command in walk(root):
        lines += _section(program, path, command)
    return "\n".join(lines)


def _section(program: str, path: tuple[str, ...], command: Command) -> list[str]:
    name = " ".join(path)
    params = [p for p in command.params if not p.hidden]
    arguments = [_metavar(p) for p in params if p.param_type_name == "argument"]
    subs = list(getattr(command, "commands", {}))
    usage = " ".join([program, name, "[OPTIONS]", *arguments, *(["COMMAND"] if subs else [])])
    lines = [f"## `{name}`", "", "```", usage, "```", ""]
    if command.help:
        lines += [inspect.cleandoc(command.help), ""]
    if subs:
        lines += [f"Commands: {', '.join(f'`{name} {sub}`' for sub in subs)}.", ""]
    if params:
        lines += ["| Argument / option | Type | Default | Description |", "|---|---|---|---|"]
        lines += [_row(param) for param in params]
        lines.append("")
    return lines


def _metavar(param: Any) -> str:
    return str(param.name or "").upper()


def _row(param: Any) -> str:
    if param.param_type_name == "argument":
        names = f"`{_metavar(param)}`"
    else:
        names = ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
    help_text = " ".join((param.help or "").split())
    if param.rich_help_panel:
        help_text = f"({param.rich_help_panel}) {help_text}".strip()
    kind = "flag" if getattr(param, "is_flag", False) else _type_name(param)
    if param.multiple:
        kind += ", repeatable"
    return f"| {names} | {kind} | {_default(param)} | {help_text.replace('|', '/')} |"


_NAMES = {str: "text", int: "integer", float: "number", bool: "boolean", Path: "path"}


def _type_name(param: Any) -> str:
    annotation = param.type_descriptor.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    return _NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(param: Any) -> str:
    if param.required:
        return "required"
    default = param.default
    if default is None or default == () or default == []:
        return "—"
    return f"`{default}`"
