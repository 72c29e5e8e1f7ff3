"""structlog set-up: one JSON object per line by default, a console renderer for humans.

Every line passes ``redact`` last: SDK errors carry endpoints and connection strings, and
this is the one boundary all of them cross (structlog events and stdlib records alike).

The level can change at run time (``set_log_level``: a live reload). structlog's own level
filtering is fixed in each logger at its first use (they are cached), so lines below the
level are dropped by the first processor instead; a line dropped there costs a few
microseconds, and none is on the path of a delivered message.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from priority_pubsub.core.imports import without
from priority_pubsub.core.redaction import redact

# structlog imports optional packages when installed, for features the sidecar never uses:
# rich and pygments (coloured tracebacks in its console renderer; the sidecar renders them with
# ``format_exc_info``), better_exceptions (the same), colorama (colours on Windows; elsewhere
# structlog writes the same ANSI codes itself) and greenlet (its deprecated greenlet-local
# context). They held ~3.8 MB (rich, pygments) and ~1 MB (colorama, greenlet) of every pod's
# resident set. The CLI's own rich output (tables, ``--help``) imports rich as usual.
with without("rich", "better_exceptions", "colorama", "greenlet"):
    import structlog


def _redact_event(_: Any, __: str, event: Any) -> Any:
    """The rendered line with credentials masked (runs after the renderer)."""
    return redact(event) if isinstance(event, str) else event


class RedactingFormatter(logging.Formatter):
    """Stdlib records (SDK loggers, tracebacks included) with credentials masked."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class ExporterErrorsOnOneLine(logging.Filter):
    """OpenTelemetry's exporters log a full traceback for every failed export (a collector
    or Zipkin that is not there, as ``dapr run``'s default Configuration names one): one line
    with the error instead, every time, so the logs stay readable and the failure visible."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("opentelemetry") and record.exc_info:
            error = record.exc_info[1]
            first = str(error).splitlines()[0] if error is not None and str(error) else ""
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {first}"[:500]
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


class _Level:
    """The level in force (a number), what ``_at_level`` compares to."""

    number = logging.INFO


def _at_level(_: Any, method_name: str, event: Any) -> Any:
    if structlog.processors.NAME_TO_LEVEL.get(method_name, logging.CRITICAL) < _Level.number:
        raise structlog.DropEvent
    return event


def set_log_level(level: str) -> None:
    """Log at ``level`` from now on (structlog lines and the SDKs' stdlib records)."""
    numeric = logging.getLevelName(level.upper())
    _Level.number = numeric
    logging.getLogger().setLevel(max(numeric, logging.WARNING))


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[
            _at_level,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
            _redact_event,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter(logging.BASIC_FORMAT))
    handler.addFilter(ExporterErrorsOnOneLine())
    logging.basicConfig(level=max(numeric, logging.WARNING), handlers=[handler], force=True)
    set_log_level(level)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
