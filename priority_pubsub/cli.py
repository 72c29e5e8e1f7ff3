"""The ``priority-pubsub`` command line (its reference page, docs/reference/cli.md, is generated
from these commands when the site is built).

Exit codes: 0 clean, 1 fatal error, 2 invalid config (one line naming the key path).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from priority_pubsub import __version__
from priority_pubsub.commands.run import fail, reported, run_loop, run_sidecar
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.redaction import redact
from priority_pubsub.dapr.flags import DaprdFlags, parse_extra
from priority_pubsub.settings.config import Settings, load_config

if TYPE_CHECKING:
    from priority_pubsub.dapr.setup import Loaded

T = TypeVar("T")
Command = Callable[..., None]
app = typer.Typer(
    name="priority-pubsub",
    help="Priority subscriber sidecar: delivers queue messages to your app as CloudEvents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
ConfigOption = Annotated[
    Path | None,
    typer.Option("-c", "--config", help="YAML config (default ./config.yaml or "
                 "$PRIORITY_PUBSUB_CONFIG); a Dapr Configuration (daprd's --config) is read "
                 "as daprd reads it.", show_default=False),
]


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"priority-pubsub {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """Priority subscriber sidecar: delivers queue messages to your app as CloudEvents."""


def _prose(docstring: str | None) -> str:
    """A docstring as help text: each paragraph on one line, a blank line between paragraphs.

    Docstrings are wrapped at the source's line length, and typer joins the lines of the first
    paragraph only: ``--help`` printed the others broken where the source broke them,
    mid-sentence. Help texts are read in a terminal as they are written, so they hold no reST
    markup; a literal is quoted with single backticks (code on the generated reference page)."""
    paragraphs = re.split(r"\n\s*\n", (docstring or "").strip())
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)


def _command(group: typer.Typer, name: str | None = None, **settings: Any
             ) -> Callable[[Command], Command]:
    """``group.command``, its help the function's docstring as prose (``_prose``): every
    command registers through here, so none can show the docstring's line breaks."""

    def register(function: Command) -> Command:
        return group.command(name, help=_prose(function.__doc__), **settings)(function)

    return register


def _settings(path: Path | None) -> Settings:
    try:
        return load_config(path)
    except ConfigError as exc:
        fail(f"invalid config: {exc}", 2)


_DAPRD = "daprd flags"
AppIdOption = Annotated[str | None, typer.Option(
    "--app-id", help="daprd's app id: Dapr mode (with --resources-path).",
    rich_help_panel=_DAPRD)]
ResourcesOption = Annotated[list[str] | None, typer.Option(
    "--resources-path", help="Dapr resources directory (repeatable), as daprd's.",
    rich_help_panel=_DAPRD)]
AppPortOption = Annotated[int | None, typer.Option(
    "--app-port", help="The app listens on http://127.0.0.1:PORT.", rich_help_panel=_DAPRD)]
StrOption = Annotated[str | None, typer.Option(rich_help_panel=_DAPRD)]
IntOption = Annotated[int | None, typer.Option(rich_help_panel=_DAPRD)]
BoolOption = Annotated[bool | None, typer.Option(rich_help_panel=_DAPRD)]
ListOption = Annotated[list[str] | None, typer.Option(rich_help_panel=_DAPRD)]
DAPRD_OPTIONS: dict[str, Any] = {
    "app_id": AppIdOption, "resources_path": ResourcesOption, "app_port": AppPortOption,
    "app_protocol": StrOption, "app_max_concurrency": IntOption,
    "dapr_graceful_shutdown_seconds": IntOption, "log_level": StrOption,
    "disable_init_endpoints": ListOption, "dapr_http_port": IntOption,
    "dapr_grpc_port": IntOption, "max_body_size": StrOption,
    "enable_app_health_check": BoolOption, "app_health_check_path": StrOption,
    "app_health_probe_interval": IntOption, "app_health_probe_timeout": IntOption,
    "app_health_threshold": IntOption,
}
"""daprd's flags as ``run`` and ``check`` take them (parameter name: its typer option), in
the order their help lists them; declared once so the two commands cannot drift apart."""
_HEALTH = ("enable_app_health_check", "app_health_check_path", "app_health_probe_interval",
           "app_health_probe_timeout", "app_health_threshold")
"""Passed on keyed by their flag name (``DaprdFlags.health``), as daprd names them."""
_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


def _daprd_command(command: Command) -> Command:
    """Register ``command`` taking daprd's command line: the options of ``DAPRD_OPTIONS``
    stand in its signature where its ``flags`` parameter is, and it gets them as one
    ``DaprdFlags``; an unknown extra argument is refused (exit 2) before it runs.

    Typer builds a command from its function's signature, so the shared options are given
    to it as a rewritten ``__signature__`` (one declaration, one parser for both commands)."""
    own = inspect.signature(command, eval_str=True).parameters.values()
    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                            annotation=typer.Context)
    params = [ctx]
    for param in own:
        if param.name != "flags":
            params.append(param)
            continue
        params += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                     default=None, annotation=option)
                   for name, option in DAPRD_OPTIONS.items()]

    @functools.wraps(command)
    def with_flags(ctx: typer.Context, **given: Any) -> None:
        daprd = {name: given.pop(name) for name in DAPRD_OPTIONS}
        command(flags=_flags(ctx, daprd), **given)

    with_flags.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    with_flags.__annotations__ = {param.name: param.annotation for param in params}
    return _command(app, context_settings=_EXTRA)(with_flags)


def _loaded(config: Path | None, flags: DaprdFlags, *, reach_app: bool) -> Loaded:
    from priority_pubsub.dapr.setup import load

    return reported(lambda: load(config, flags, reach_app=reach_app))


def _flags(ctx: typer.Context, given: dict[str, Any]) -> DaprdFlags:
    try:
        extra, ignored = parse_extra(list(ctx.args))
    except ConfigError as exc:
        fail(str(exc), 2)
    health = {"--" + name.replace("_", "-"): given[name] for name in _HEALTH
              if given[name] is not None}
    return DaprdFlags(
        app_id=given["app_id"], app_port=given["app_port"], app_protocol=given["app_protocol"],
        resources_path=list(given["resources_path"] or []),
        app_max_concurrency=given["app_max_concurrency"],
        graceful_shutdown_s=given["dapr_graceful_shutdown_seconds"],
        log_level=given["log_level"],
        disable_init_endpoints=list(given["disable_init_endpoints"] or []), health=health,
        dapr_http_port=given["dapr_http_port"], dapr_grpc_port=given["dapr_grpc_port"],
        max_body_size=given["max_body_size"], extra=extra, ignored=ignored)


def _run_reporting(coro: Coroutine[Any, Any, T]) -> T:
    return reported(lambda: run_loop(coro))


@_daprd_command
def run(
    config: ConfigOption = None,
    *,
    flags: DaprdFlags,
    provision: Annotated[bool, typer.Option(
        "--provision", help="First create what the config needs on the broker (as "
        "`priority-pubsub provision`; drift is logged, not changed).")] = False,
) -> None:
    """Run the sidecar until SIGTERM/SIGINT; unfinished messages go back to their queue.

    With --resources-path and --app-id (or a dapr: section) it reads the Dapr setup instead
    of queues: a daprd command line works with only the binary name changed."""
    run_sidecar(config, flags, provision=provision)


@_daprd_command
def check(
    config: ConfigOption = None,
    offline: Annotated[bool, typer.Option(
        help="Only validate (config, driver options, transforms); reach nothing. For CI and "
        "for rendered manifests.")] = False,
    reload_safe: Annotated[tuple[Path, Path] | None, typer.Option(
        "--reload-safe", metavar="OLD NEW", show_default=False,
        help="Whether a sidecar running config OLD would take NEW by a live reload: print "
        "each change as applied or REFUSED (restart-only); exit 1 if any is refused, 2 if "
        "either file is invalid. Reaches nothing. A path written relative is anchored at "
        "its own file's directory; in Dapr mode NEW's resources are compared as replacing "
        "OLD's in place.")] = None,
    *,
    flags: DaprdFlags,
) -> None:
    """Validate the config, reach the driver and the app, print the config (secrets masked).

    In Dapr mode also print every component's metadata after templating (secrets masked)
    and check every subscription's routes against the app. With --reload-safe OLD NEW, check
    instead what a live reload from OLD to NEW would apply and what it would refuse."""
    if reload_safe is not None:
        _check_reload_safe(*reload_safe, flags=flags)
        return
    from priority_pubsub.commands.ops import check_reachability

    loaded = _loaded(config, flags, reach_app=not offline)
    settings = loaded.settings
    # Secrets are typed (they dump masked); redact() also catches credentials in plain keys.
    typer.echo(redact(json.dumps(settings.model_dump(mode="json"), indent=2)))
    for warning in loaded.warnings:
        typer.echo(f"WARN {warning}", err=True)
    if loaded.plan is not None:
        from priority_pubsub.dapr.check import component_lines

        for line in component_lines(loaded.plan):  # stderr too: the broker's names
            typer.echo(line, err=True)
    from priority_pubsub.commands.capacity_plan import plan_lines

    for line in plan_lines(settings):  # stderr: stdout stays the config's JSON
        typer.echo(line, err=True)
    if offline:
        typer.echo("OK: config valid (offline: driver and app not contacted)", err=True)
        return
    problems = _run_reporting(check_reachability(settings))
    if loaded.plan is not None:
        from priority_pubsub.dapr.check import missing_routes

        problems += _run_reporting(missing_routes(loaded.plan,
                                                  settings.app.url.get_secret_value()))
    for problem in problems:
        typer.echo(f"FAIL {redact(problem)}", err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo("OK: config valid, driver and app reachable", err=True)


def _check_reload_safe(old: Path, new: Path, *, flags: DaprdFlags) -> None:
    """``check --reload-safe``: the running sidecar's own rule (``settings.reload``, and in
    Dapr mode what the resources change beyond the settings: ``dapr.reload.compare``)."""
    from priority_pubsub.dapr.reload import compare
    from priority_pubsub.drivers.registry import adds_queues
    from priority_pubsub.settings.reload import reload_diff

    running = _loaded(old, flags, reach_app=False)
    candidate = _loaded(new, flags, reach_app=False)
    if running.settings.dapr is not None and candidate.settings.dapr is not None:
        # NEW's resources replace OLD's in place: where each is read from is no change
        dapr = candidate.settings.dapr.model_copy(
            update={"resources_path": running.settings.dapr.resources_path})
        candidate = dataclasses.replace(
            candidate, settings=candidate.settings.model_copy(update={"dapr": dapr}))
    compared = compare(running, candidate)
    diff = reload_diff(running.settings, compared.settings,
                       can_add_queues=adds_queues(running.settings.driver.type))
    applied = (*diff.applied, *compared.changed)
    for key in applied:
        typer.echo(f"applied   {key}")
    for key in (*diff.refused, *compared.restart_only):
        typer.echo(f"REFUSED   {key} (restart-only)")
    if not diff.safe or compared.restart_only:
        fail(f"a live reload would refuse {new}: restart to apply it", 1)
    what = "no change" if not applied else f"{len(applied)} change(s)"
    typer.echo(f"OK: {new} can be reloaded into a sidecar running {old} ({what})", err=True)


@_command(app)
def provision(
    config: ConfigOption = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only show the plan; exit 3 if anything would change.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help='Print {"actions": [...]} instead of a table.')] = False,
    update: Annotated[bool, typer.Option(
        help="Also change existing resources whose settings differ (else: drift).")] = False,
) -> None:
    """Create the queues, topics, subscriptions and policies the config needs; verify the
    ones that exist. Exit 0: all in place; 3: (would) change something or drift remains."""
    from priority_pubsub.provision import Mode
    from priority_pubsub.provision import provision as provision_entities

    loaded = _loaded(config, DaprdFlags(), reach_app=True)
    mode = Mode(dry_run=dry_run, update=update)
    if loaded.plan is not None:
        from priority_pubsub.dapr.provisioning import provision_plan

        done = _run_reporting(provision_plan(loaded.plan, loaded.settings, mode))
    else:
        done = _run_reporting(provision_entities(loaded.settings, mode))
    if as_json:
        typer.echo(done.as_json())
    else:
        done.render()
    raise typer.Exit(done.exit_code)


@_command(app)
def publish(
    queue: Annotated[str, typer.Argument(help="Queue to publish to.")],
    config: ConfigOption = None,
    data: Annotated[str | None, typer.Option(help="Message body as text.")] = None,
    file: Annotated[Path | None, typer.Option(help="Read the body from this file.")] = None,
    attr: Annotated[list[str] | None, typer.Option(help="Attribute K=V (repeatable).")] = None,
    count: Annotated[int, typer.Option(min=1, help="Publish the body this many times.")] = 1,
    content_type: Annotated[str | None, typer.Option(help="Body content type.")] = None,
    via_sns: Annotated[str | None, typer.Option(
        help="SQS driver only: publish through this SNS topic ARN, as Dapr's snssqs does."
    )] = None,
) -> None:
    """Publish through the configured driver (body from --data, --file or stdin)."""
    from priority_pubsub.app.cloudevent_check import cloudevent_problem
    from priority_pubsub.commands.ops import publish_messages

    settings = _settings(config)
    if data is not None and file is not None:
        fail("give --data or --file, not both", 2)
    body = _body(data, file)
    problem = cloudevent_problem(body, content_type)
    if problem is not None:
        fail(f"--content-type {content_type}: not a valid CloudEvent: {problem}", 2)
    attributes = _parse_attributes(attr or [])
    ids = _run_reporting(
        publish_messages(settings, queue, body, attributes, count, content_type, via_sns)
    )
    for message_id in ids:
        typer.echo(message_id)


def _body(data: str | None, file: Path | None) -> bytes:
    """The bytes to publish. ``--data`` gives back the exact bytes of the argument, even when
    they are not UTF-8 (Python decoded argv with surrogateescape), as stdin does."""
    if data is not None:
        return os.fsencode(data)
    if file is None:
        return sys.stdin.buffer.read()
    try:
        return file.read_bytes()
    except OSError as exc:
        fail(f"--file {file}: {exc.strerror or exc}", 2)


def _parse_attributes(pairs: list[str]) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            fail(f"--attr expects K=V, got {pair!r}", 2)
        attributes[name] = value
    return attributes


@_command(app)
def stats(
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Per queue: visible, in flight, delayed, dead-lettered, oldest age ("unknown" if the
    broker cannot tell); then the capacity plan (which queue may use how many workers)."""
    from priority_pubsub.commands.capacity_plan import capacity_plan, plan_lines
    from priority_pubsub.commands.ops import collect_stats, render_stats_table

    settings = _settings(config)
    report = _run_reporting(collect_stats(settings))
    if as_json:
        typer.echo(json.dumps({**report, "capacity_plan": capacity_plan(settings)}, indent=2))
    else:
        render_stats_table(report)
        typer.echo("\n".join(plan_lines(settings)))


@_command(app)
def requeue(
    from_queue: Annotated[str, typer.Option("--from", help="Dead-letter queue to drain.")],
    to_queue: Annotated[str, typer.Option("--to", help="Queue to put messages back on.")],
    config: ConfigOption = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Move at most N messages.")] = None,
) -> None:
    """Redrive dead letters: body and attributes kept, attempts reset, the redrive recorded in
    the `requeued_from` attribute.

    Safe to interrupt: each message is published to --to before it is deleted from --from,
    so an interruption can leave a message in both queues, never in neither.
    """
    from priority_pubsub.commands.ops import requeue_messages

    settings = _settings(config)
    moved = _run_reporting(requeue_messages(settings, from_queue, to_queue, limit))
    typer.echo(f"requeued {moved} message(s) from {from_queue} to {to_queue}")


@_command(app)
def demo(
    messages: Annotated[int, typer.Option(min=3, help="Size of the mixed-priority burst.")] = 60,
    task_ms: Annotated[int, typer.Option(min=0, help="How long the sample app works.")] = 150,
) -> None:
    """The tour: sidecar + bundled sample app + a mixed-priority burst, shown live."""
    from priority_pubsub.commands.demo import run_demo

    _run_reporting(run_demo(messages=messages, task_ms=task_ms))


@_command(app)
def report(
    journal_glob: Annotated[str, typer.Argument(
        help="Journal files: path, glob, an object-store prefix (s3://, gs://, az://: read "
        "without Hadoop's connectors) or a Hadoop URI (s3a://...; .gz ok).")],
    out: Annotated[str, typer.Option("--out", help="Output directory (local).")],
    master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[*]",
    since: Annotated[str | None, typer.Option(
        help="First settle time, ISO 8601 (UTC if no zone).")] = None,
    until: Annotated[str | None, typer.Option(
        help="Settle time bound (exclusive), ISO 8601.")] = None,
    target_wait_s: Annotated[float, typer.Option(
        help="p95 wait the capacity figures aim for, seconds.")] = 60.0,
    state: Annotated[str | None, typer.Option(
        help="State directory, any Hadoop path (default: OUT/.state).")] = None,
    full: Annotated[bool, typer.Option(
        "--full", help="Rebuild the state from every journal file.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the JSON summary (also whenever stdout is not a terminal).")
    ] = False,
) -> None:
    """Delivery report on PySpark: Parquet tables and report.html (needs the spark extra).

    Each run reads only the closed journal files no earlier run read (state in --state).
    Exit 0 ok, 1 failed (or another run holds the state), 2 bad usage."""
    from priority_pubsub.commands.report import run_report_command  # no pyspark import yet

    raise typer.Exit(run_report_command(
        journal_glob, out, master=master, since=since, until=until,
        target_wait_s=target_wait_s, state=state, full=full, as_json=as_json))


def report_command_line(argv: Sequence[str]) -> int:
    """``priority-pubsub report`` with ``argv`` (what follows the command's name); its exit
    code. The ``spark-submit`` entry runs the report through this, so it has the command's
    options, help and defaults."""
    try:
        app(["report", *argv], prog_name="priority-pubsub")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 0


config_app = typer.Typer(help="The config file's format.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@_command(config_app, "schema")
def config_schema() -> None:
    """Print the JSON Schema of config.yaml, from the models the sidecar validates with.

    For editors: a config starting with `# yaml-language-server: $schema=<file or URL>` is
    checked and completed as it is typed. `driver` is keyed on `driver.type` (each installed
    driver's options); a driver whose SDK is missing is left out (named on stderr)."""
    from priority_pubsub.settings.schema import config_schema as build

    generated = build()
    typer.echo(json.dumps(generated.schema, indent=2))
    for name in generated.missing:
        typer.echo(f"WARN {name}: not importable (its extra is not installed): left out",
                   err=True)


def main() -> None:
    app()
