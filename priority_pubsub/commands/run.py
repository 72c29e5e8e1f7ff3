"""``priority-pubsub run``: the sidecar from its config to SIGTERM, and the plain command line
that starts it without the CLI's parser.

A pod runs ``priority-pubsub run -c FILE`` and nothing else of the CLI, so that command
line is read here (``plain_run``) before typer and its commands are imported: ~2.5 MB of
every pod's resident set. Every other command line, daprd's flags and ``--help`` included,
goes through the CLI (``priority_pubsub.cli``), which runs the same ``run_sidecar``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from priority_pubsub.core.errors import ConfigError, PriorityPubsubError

if TYPE_CHECKING:
    from priority_pubsub.app.channel.streams import StreamHub
    from priority_pubsub.dapr.flags import DaprdFlags
    from priority_pubsub.dapr.plan import DaprPlan
    from priority_pubsub.settings.config import Settings

T = TypeVar("T")


def fail(message: str, code: int) -> NoReturn:
    """A failure the user can act on: one redacted line on stderr, then exit ``code``. The
    CLI's commands and the plain ``run`` report the same way."""
    import sys

    from priority_pubsub.core.redaction import redact

    print(f"priority-pubsub: {redact(message)}", file=sys.stderr)
    raise SystemExit(code)


def reported(call: Callable[[], T]) -> T:
    """What ``call`` returns; an error the user can act on goes to ``fail`` as one line and
    an exit code: 2 for an invalid config, 1 for any other error of the sidecar's."""
    try:
        return call()
    except ConfigError as exc:
        fail(f"invalid config: {exc}", 2)
    except PriorityPubsubError as exc:
        fail(str(exc), 1)


def run_loop(coro: Coroutine[Any, Any, T], event_loop: str = "asyncio") -> T:
    """``coro`` to its end on the ``event_loop`` setting's loop. uvloop is imported only when
    chosen: its import and its four worker threads hold ~2.4 MB of every pod's resident set,
    which tasks of minutes do not repay."""
    if event_loop != "uvloop":
        return asyncio.run(coro)
    try:
        import uvloop
    except ImportError:
        coro.close()
        raise ConfigError("event_loop: uvloop is not installed (pip install uvloop)") from None
    return uvloop.run(coro)


@dataclass(frozen=True, slots=True)
class PlainRun:
    """``run`` with at most a config file and ``--provision``."""

    config: Path | None = None
    provision: bool = False


def plain_run(arguments: Sequence[str]) -> PlainRun | None:
    """``arguments`` (after the program's name) read as ``run [-c FILE] [--provision]``, or
    None for anything else, to be read by the CLI: daprd's flags, ``--help``, a repeated
    option, a value that looks like an option."""
    if not arguments or arguments[0] != "run":
        return None
    config: Path | None = None
    provision = False
    words = iter(arguments[1:])
    for word in words:
        if word == "--provision" and not provision:
            provision = True
            continue
        if config is not None:
            return None
        if word in ("-c", "--config"):
            value = next(words, "")
        elif word.startswith("--config="):
            value = word.removeprefix("--config=")
        else:
            return None
        if not value or value.startswith("-"):
            return None
        config = Path(value)
    return PlainRun(config, provision)


def run_sidecar(config: Path | None, flags: DaprdFlags, *, provision: bool) -> None:
    """Run the sidecar until SIGTERM/SIGINT (native or Dapr mode, as the config and
    ``flags`` say); a failure goes to ``fail``."""
    from priority_pubsub.dapr.setup import load
    from priority_pubsub.sidecar import Sidecar
    from priority_pubsub.telemetry.logs import configure_logging

    loaded = reported(lambda: load(config, flags, reach_app=True))
    settings = loaded.settings
    configure_logging(settings.log.level, settings.log.format)

    async def serve() -> None:  # built inside: a driver may refuse its options (exit 2)
        if provision and loaded.plan is None:
            await _provision_at_start(settings)
        streams, api = _publish_api(settings, loaded.plan)
        try:
            async with api:
                if loaded.plan is not None or loaded.warnings:  # Dapr mode's modules else not
                    from priority_pubsub.dapr.runtime import report

                    report(loaded.plan, loaded.warnings)
                if not settings.app.push and streams is None:
                    from priority_pubsub.publish_api.server import until_stopped

                    await until_stopped(settings.shutdown.block_s)
                    return
                if loaded.plan is None:
                    from priority_pubsub.dapr.setup import native_reload

                    reload = native_reload(config, flags, settings)
                    await Sidecar(settings, streams=streams, reload=reload).run()
                    return
                from priority_pubsub.dapr.runtime import run_dapr

                await run_dapr(loaded, streams, reload=(config, flags))
        except OSError as exc:  # a publish API port already taken
            raise PriorityPubsubError(f"publish API: {exc}") from None

    reported(lambda: run_loop(serve(), settings.event_loop))


def _publish_api(settings: Settings, plan: DaprPlan | None
                 ) -> tuple[StreamHub | None, contextlib.AbstractAsyncContextManager[None]]:
    """The publish API for the run (with the streaming subscriptions of a sidecar with no app
    to push to), or nothing: its server, models and aiohttp routes are imported only when
    ``publish_api`` is configured (a sidecar is paid for once per pod)."""
    if settings.publish_api is None:
        return None, contextlib.nullcontext()
    from priority_pubsub.publish_api.server import serving, stream_hub

    streams = stream_hub(settings, plan)  # no app to push to: apps may stream
    return streams, serving(settings, plan, streams=streams)


async def _provision_at_start(settings: Settings) -> None:
    """``run --provision``: create what is missing; report drift and go on (as daprd's entity
    management, which creates but never rewrites an entity's settings)."""
    from priority_pubsub.provision import Mode
    from priority_pubsub.provision import provision as provision_entities
    from priority_pubsub.telemetry.logs import get_logger

    log = get_logger("priority_pubsub.provision")
    done = await provision_entities(settings, Mode())
    for action in done.actions:
        if action.action.value == "drift":
            log.warning("provision: drift left as it is", **action.as_json())
        elif action.action.value != "ok":
            log.info("provision", **action.as_json())
    for note in done.notes:
        log.info(note)
