"""Provisioning: create what the config needs on the broker and verify what exists.

Kept apart from the drivers (which only consume and settle): ``priority-pubsub provision``
calls it, ``run --provision`` calls it before the sidecar starts, and Dapr mode's entity
management calls the same SQS/SNS code (``aws``). ``plan`` is the pure core; ``aws`` and
``gcp`` are one module per broker. Drivers that declare their own entities at start (local)
need nothing here.

May import ``drivers`` (their API helpers), ``settings`` and ``core``; never ``dapr``, which
imports it (``dapr.provisioning`` is Dapr mode's ``priority-pubsub provision``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.provision.plan import Action, Mode, exit_code, summary

if TYPE_CHECKING:
    from priority_pubsub.settings.config import Settings

__all__ = ["Action", "Mode", "Provisioned", "aws_target", "provision", "provision_blocking"]

SELF_DECLARING = {
    "local": "the local driver creates its queues in its SQLite file at start",
    "redis": "the redis driver declares its streams and consumer group at start "
             "(XGROUP CREATE ... MKSTREAM), as Dapr's pubsub.redis does",
}
SERVICE_BUS_GAP = (
    "azure_servicebus: not provisioned. The SDK's ServiceBusAdministrationClient speaks the "
    "HTTP management (ATOM) API, which the test broker (tests/support/azure_servicebus/, "
    "AMQP only) does not implement, so queue/subscription creation with max delivery count "
    "and lock duration could not be tested here and is not shipped untested"
)


@dataclass
class Provisioned:
    actions: list[Action]
    mode: Mode
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return exit_code(self.actions, self.mode)

    def as_json(self) -> str:
        return json.dumps({"actions": [a.as_json() for a in self.actions],
                           "notes": self.notes}, indent=2)

    def render(self) -> None:
        """A table for humans (rich), then the notes and a summary line."""
        from rich.console import Console
        from rich.table import Table

        table = Table("resource", "action", "setting", "current", "wanted")
        for a in self.actions:
            table.add_row(a.resource, a.action.value, a.setting or "", _text(a.current),
                          _text(a.wanted))
        console = Console(width=160)
        console.print(table)
        for note in self.notes:
            console.print(f"note: {note}")
        console.print(summary(self.actions, self.mode))


def _text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def provision_blocking(settings: Settings, mode: Mode) -> Provisioned:
    """Plan (``mode.dry_run``) or apply what ``settings`` needs (Dapr mode: the Dapr
    package's ``snssqs.provision_plan``). Blocking SDK calls: from async code use
    ``provision``. Raises ``DriverError`` / ``ConfigError``."""
    kind = settings.driver.type
    if kind == "sqs":
        from priority_pubsub.provision.aws import provision_sqs, spec_from_settings

        return Provisioned(provision_sqs(spec_from_settings(settings), mode,
                                         **aws_target(settings)), mode)
    if kind == "gcp_pubsub":
        from priority_pubsub.provision.gcp import provision_pubsub

        actions, notes = provision_pubsub(settings, mode)
        return Provisioned(actions, mode, notes)
    if kind in SELF_DECLARING:
        return Provisioned([], mode, [SELF_DECLARING[kind]])
    if kind == "azure_servicebus":
        raise ConfigError(SERVICE_BUS_GAP)
    raise ConfigError(f"provision: driver {kind} has no provisioning part (it declares its "
                      "own entities at start, or nothing is implemented for it)")


async def provision(settings: Settings, mode: Mode) -> Provisioned:
    return await asyncio.to_thread(provision_blocking, settings, mode)


def aws_target(settings: Settings) -> dict[str, str | None]:
    """The SQS driver's region and endpoint (a secret URL: it may carry credentials)."""
    options = settings.driver.options()
    endpoint = options.get("endpoint_url")
    if endpoint is not None and hasattr(endpoint, "get_secret_value"):
        endpoint = endpoint.get_secret_value()
    return {"region": options.get("region"), "endpoint_url": endpoint}
