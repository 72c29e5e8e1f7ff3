"""The one way a running delivery is cut short: ``RunningDelivery.cancel(outcome)``.

The worker sends each request to the app through ``Running.send``. ``cancel`` stops that
request where it is — the HTTP request's connection is closed, the gRPC call cancelled, a
bulk entry leaves its batch (a sent batch is cancelled once every entry has left), a stream's
event is forgotten — and ``send`` returns ``outcome`` as if the app had answered it: the
worker's slot is free at once and the message is settled as ``outcome`` says, through the
same settle rules as any answer (and the same app gate, but for an operator's cancel).

A delivery's timeout is this cancel fired by a timer: ``queues[].timeout_s``, else
``app.timeout_s``; the outcome is a counted retry whose reason starts with ``timeout``
(``timed_out``). Anything else that must stop a running delivery finds it in ``Running`` (by
queue and message id, as the monitor lists them) and calls ``cancel`` with its own outcome:
an operator's cancel from the monitor (``by_operator``) settles as the operator chose, a
counted retry later, a dead letter or a drop, with reason ``cancelled by operator``; it says
nothing about the app's health, so the app gate does not learn from it (``is_by_operator``).
A shutdown's cancellation of the worker task is not such a cancel: the
worker returns the message at once (``worker.stopped``: a counted retry if the request had
left for the app, never past the last attempt; else a release, uncounted).

The request runs in the worker's own task (a task per delivery was a visible cost in the
sidecar's profile): ``cancel`` cancels that task, and ``send`` tells its own cancellation
from any other by the task's cancel count, as ``asyncio.timeout`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Literal, get_args

from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Outcome

TIMEOUT = "timeout"
"""How a timed-out delivery's reason begins (the journal's, the monitor's filter)."""
BY_OPERATOR = "cancelled by operator"
"""The reason of a delivery an operator cut short (the journal's, the dead letter's)."""
OperatorSettle = Literal["retry", "dead_letter", "drop"]
"""What an operator's cancel settles the message as."""
OPERATOR_SETTLES: tuple[str, ...] = get_args(OperatorSettle)


def by_operator(settle: OperatorSettle) -> Outcome:
    """What a delivery an operator cancelled settles as, as chosen: a retry later (counted,
    with backoff, as a timeout's), a dead letter (deleted where none is configured), or a
    drop (deleted even where dead letters have a destination: the message is gone)."""
    if settle == "retry":
        return Outcome.retry(BY_OPERATOR)
    if settle == "dead_letter":
        return Outcome.dead(BY_OPERATOR)
    return Outcome.drop(BY_OPERATOR, discard=True)


def is_by_operator(outcome: Outcome) -> bool:
    """Whether ``outcome`` is an operator's cancel (the app did not fail: nothing to learn)."""
    return outcome.reason == BY_OPERATOR


def timed_out(timeout_s: float) -> Outcome:
    """What a delivery past its timeout settles as: a counted retry, as any failure after the
    request reached the app."""
    return Outcome.retry(f"{TIMEOUT}: app did not answer within {timeout_s:g}s")


class RunningDelivery:
    """One request at the app, cancellable from outside until it ends."""

    __slots__ = ("_ended", "_task", "message", "outcome")

    def __init__(self, message: Message, task: asyncio.Task[object]) -> None:
        self.message = message
        self._task = task
        self.outcome: Outcome | None = None
        """Set by ``cancel``: what the cut-short delivery settles as."""
        self._ended = False

    def cancel(self, outcome: Outcome) -> bool:
        """Cut the request short; the worker settles ``outcome``. False when it had ended or
        was cut short already (the first cancel wins)."""
        if self._ended or self.outcome is not None:
            return False
        self.outcome = outcome
        self._task.cancel()
        return True

    def expire(self, timeout_s: float) -> None:
        """The timer's cancel: the delivery ran ``timeout_s`` without an answer."""
        self.cancel(timed_out(timeout_s))

    def end(self) -> None:
        """The request is over (answered or cut short): a later cancel does nothing."""
        self._ended = True


class Running:
    """The deliveries at the app now, where a cancel finds them."""

    def __init__(self) -> None:
        self._by_message: dict[tuple[str, str], RunningDelivery] = {}

    def __len__(self) -> int:
        return len(self._by_message)

    def cancel(self, queue: str, message_id: str, outcome: Outcome) -> bool:
        """Cut one running delivery short (``RunningDelivery.cancel``); False when it is not
        at the app (it ended, or never got there)."""
        running = self._by_message.get((queue, message_id))
        return running is not None and running.cancel(outcome)

    def queues_of(self, message_id: str) -> list[str]:
        """The queues a delivery of ``message_id`` is at the app from now (an id is the
        broker's: two queues may each hold one)."""
        return [queue for queue, found in self._by_message if found == message_id]

    def at_app(self, queue: str, message_id: str) -> bool:
        return (queue, message_id) in self._by_message

    def cancel_all(self, outcome: Outcome) -> int:
        """Cut every running delivery short; how many were."""
        return sum(running.cancel(outcome) for running in list(self._by_message.values()))

    async def send(self, message: Message, request: Awaitable[Outcome],
                   timeout_s: float) -> Outcome:
        """Await ``request`` in this task: its outcome, or the outcome of a ``cancel``
        (``timed_out`` after ``timeout_s``). Any other cancellation propagates."""
        task = asyncio.current_task()
        assert task is not None
        running = RunningDelivery(message, task)
        key = (message.queue, message.id)
        self._by_message[key] = running
        cancels_before = task.cancelling()
        timer = asyncio.get_running_loop().call_later(timeout_s, running.expire, timeout_s)
        try:
            return await request
        except asyncio.CancelledError:
            # ours alone: this task's cancel count back to where it was (a shutdown's
            # cancellation as well propagates, and the worker returns the message)
            if running.outcome is not None and task.uncancel() <= cancels_before:
                return running.outcome
            raise
        finally:
            running.end()
            timer.cancel()
            if self._by_message.get(key) is running:
                del self._by_message[key]
