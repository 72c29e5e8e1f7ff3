"""The operator's actions (pause, resume, drain, requeue, delete, cancel a running delivery,
promote a waiting message), each journaled and logged.

An action record goes to ``admin.jsonl`` beside the delivery journal (its own file: the
delivery journal's schema and the report's ``journal-*.jsonl`` glob stay as they are), one
unbuffered line per action, and to the log as ``admin action``. Without a journal it is
logged only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from priority_pubsub.core.message import now_ms
from priority_pubsub.delivery.cancel import OperatorSettle, Running, by_operator
from priority_pubsub.delivery.control import QueueControl
from priority_pubsub.monitor.dead_letters import ActionUnavailable, DeadLetterDesk
from priority_pubsub.monitor.waiting import WaitingDesk
from priority_pubsub.telemetry.logs import get_logger

log = get_logger("priority_pubsub.monitor")
ADMIN_JOURNAL = "admin.jsonl"
OPERATOR_REASON = "paused from the monitor"
DRAIN_REASON = "drained from the monitor"


class AdminActions:
    def __init__(self, control: QueueControl, dead_letters: DeadLetterDesk,
                 journal_dir: Path | None, running: Running | None = None,
                 waiting: WaitingDesk | None = None) -> None:
        """``running``: the deliveries at the app (the worker's), for ``cancel``;
        ``waiting``: the waiting messages, for ``promote``."""
        self._control = control
        self._dead_letters = dead_letters
        self._waiting = waiting
        self.running = Running() if running is None else running
        self.journal_path = None if journal_dir is None else journal_dir / ADMIN_JOURNAL

    def pause(self, queue: str, client: str) -> dict[str, Any]:
        changed = self._control.pause(queue, OPERATOR_REASON)
        return self._record("pause", client, queue=queue, changed=changed)

    def resume(self, queue: str, client: str) -> dict[str, Any]:
        changed = self._control.resume(queue)
        return self._record("resume", client, queue=queue, changed=changed)

    def drain(self, client: str) -> dict[str, Any]:
        return self._record("drain", client, changed=self._control.start_drain(DRAIN_REASON))

    def end_drain(self, client: str) -> dict[str, Any]:
        return self._record("end_drain", client, changed=self._control.end_drain())

    async def requeue(self, ids: Sequence[str], client: str) -> dict[str, Any]:
        moved = await self._dead_letters.requeue(ids)
        return self._record("requeue", client, asked=len(ids), count=moved, ids=list(ids))

    async def delete(self, ids: Sequence[str], client: str) -> dict[str, Any]:
        deleted = await self._dead_letters.delete(ids)
        return self._record("delete", client, asked=len(ids), count=deleted, ids=list(ids))

    def cancel(self, message_id: str, queue: str, settle: OperatorSettle,
               client: str) -> dict[str, Any]:
        """Cut one delivery at the app short (``delivery.cancel``, the timeout's path): the
        request is aborted, the worker freed, the message settled as ``settle`` says with
        reason ``cancelled by operator``. ``cancelled`` is False when it had ended already."""
        cancelled = self.running.cancel(queue, message_id, by_operator(settle))
        return self._record("cancel", client, id=message_id, queue=queue, settle=settle,
                            cancelled=cancelled)

    async def promote(self, queue: str, message_id: str, to_queue: str,
                      client: str) -> dict[str, Any]:
        """Move one waiting message up to ``to_queue`` (``WaitingDesk.promote``: 409 when it
        cannot be, never a copy in both queues)."""
        if self._waiting is None:
            raise ActionUnavailable("no waiting messages here")
        moved = await self._waiting.promote(queue, message_id, to_queue)
        return self._record("promote", client, id=message_id, queue=queue, to=to_queue,
                            copy_id=moved)

    def _record(self, action: str, client: str, **what: Any) -> dict[str, Any]:
        record = {"v": 1, "at_ms": now_ms(), "action": action, "client": client, **what}
        log.info("admin action", **{k: v for k, v in record.items() if k != "v"})
        if self.journal_path is not None:
            try:
                self.journal_path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.journal_path,
                             os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
                try:
                    os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
                finally:
                    os.close(fd)
            except OSError as exc:
                log.error("admin journal write failed", path=str(self.journal_path),
                          error=str(exc))
        return record
