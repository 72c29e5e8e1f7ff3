"""The driver conformance suite: one base class every driver's tests subclass.

A subclass provides one fixture, ``harness``, yielding a ``DriverHarness`` bound to fresh
queues on a real broker (or emulator) reached over a real socket. Everything below then runs
against that driver unchanged; driver specifics go in the subclass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from priority_pubsub.core.errors import DriverError
from priority_pubsub.delivery.requeue import requeue_one
from priority_pubsub.drivers.base import (
    DEAD_LETTER_SOURCE,
    REQUEUED_FROM,
    DeadLetterBrowser,
    Driver,
    IdReceiver,
    Message,
)
from tests.support.topologies.base import DeadLetter

__all__ = ["DeadLetter", "DeadLetterBrowsing", "DriverConformance", "DriverHarness",
           "receive_all"]


@dataclass
class DriverHarness:
    """How the suite reaches one driver on one broker.

    ``make_driver(lease_s)`` returns a started driver for ``queues`` (highest priority first)
    with ``dead_letter_queue`` configured; the harness closes every driver it made.
    ``publish`` writes through the broker's own API (not necessarily the driver).
    ``dead_letters`` reads (and consumes) what reached the dead-letter destination.
    ``lease_s`` is the shortest lease the broker honours reliably; tests scale by it.
    """

    queues: tuple[str, ...]
    dead_letter_queue: str
    make_driver: Callable[[float], Awaitable[Driver]]
    publish: Callable[[str, bytes, dict[str, str]], Awaitable[None]]
    dead_letters: Callable[[], Awaitable[list[DeadLetter]]]
    lease_s: float = 2.0
    settle_s: float = 0.5
    """How long the broker needs before a returned message is receivable again."""
    detects_lost_lease: bool = True
    extra: dict[str, object] = field(default_factory=dict)


@dataclass
class LateBroker:
    """A broker that is down when the driver starts and comes up later.

    ``make_driver()`` builds (does not start) a driver for ``queue`` on the broker's future
    address; ``bring_up()`` starts the broker there and creates ``queue``; ``publish`` then
    writes through the broker's own API.
    """

    queue: str
    make_driver: Callable[[], Driver]
    bring_up: Callable[[], Awaitable[None]]
    publish: Callable[[bytes], Awaitable[None]]


async def _start_error(driver: Driver) -> DriverError | None:
    try:
        await driver.start()
    except DriverError as exc:
        return exc
    return None


async def receive_all(
    driver: Driver, queue: str, expected: int, timeout_s: float = 10.0
) -> list[Message]:
    """Receive until ``expected`` messages arrived or the timeout passed."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        wait = max(0.0, min(2.0, deadline - time.monotonic()))
        got += await driver.receive(queue, expected - len(got), wait)
    return got


class DriverConformance:
    """Subclass per driver and provide the ``harness`` and ``late_broker`` fixtures."""

    broker_down_s = 10.0

    async def test_broker_down_at_start_is_retried_until_up(self, late_broker: LateBroker) -> None:
        """What the sidecar's start loop relies on: while the broker is unreachable every
        ``start`` fails as retriable (never "gave up"), and once it is up the same driver
        object starts and delivers."""
        driver = late_broker.make_driver()
        failures = 0
        down_until = time.monotonic() + self.broker_down_s
        while time.monotonic() < down_until:
            with pytest.raises(DriverError) as caught:
                await driver.start()
            assert caught.value.retriable, f"start gave up: {caught.value}"
            failures += 1
            await asyncio.sleep(0.5)
        assert failures >= 2
        await late_broker.bring_up()
        up_until = time.monotonic() + 30
        while (error := await _start_error(driver)) is not None:
            if not error.retriable or time.monotonic() > up_until:
                pytest.fail(f"start still failing once the broker is up: {error}")
            await asyncio.sleep(0.5)
        try:
            await late_broker.publish(b"late")
            [message] = await receive_all(driver, late_broker.queue, 1, timeout_s=20)
            assert message.body == b"late"
            await driver.ack(message)
        finally:
            await driver.close()

    async def test_receive_returns_published_message(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        before_ms = time.time_ns() // 1_000_000 - 5_000
        await harness.publish(harness.queues[1], b'{"n": 1}', {"tier": "gold"})
        [message] = await receive_all(driver, harness.queues[1], 1)
        assert message.body == b'{"n": 1}'
        assert message.attributes.get("tier") == "gold"
        assert message.queue == harness.queues[1]
        assert message.priority == 1
        assert message.attempt == 1
        assert message.id
        assert before_ms <= message.enqueued_ms <= time.time_ns() // 1_000_000 + 5_000
        assert message.lease.deadline_ms > time.time_ns() // 1_000_000
        await driver.ack(message)

    async def test_empty_queue_answers_at_once(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        started = time.monotonic()
        assert await driver.receive(harness.queues[0], 5, 0) == []
        assert time.monotonic() - started < 2.0

    async def test_receive_takes_no_more_than_asked(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        for n in range(5):
            await harness.publish(harness.queues[0], f"m{n}".encode(), {})
        first = await receive_all(driver, harness.queues[0], 2, timeout_s=5)
        assert len(first) == 2
        rest = await receive_all(driver, harness.queues[0], 3)
        assert sorted(m.body for m in first + rest) == [f"m{n}".encode() for n in range(5)]
        for message in first + rest:
            await driver.ack(message)

    async def test_ack_deletes_for_good(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s)
        await harness.publish(harness.queues[0], b"once", {})
        [message] = await receive_all(driver, harness.queues[0], 1)
        await driver.ack(message)
        await asyncio.sleep(harness.lease_s + harness.settle_s)
        assert await driver.receive(harness.queues[0], 10, harness.settle_s) == []

    async def test_retry_now_redelivers_with_next_attempt(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        await harness.publish(harness.queues[0], b"again", {"k": "v"})
        [first] = await receive_all(driver, harness.queues[0], 1)
        await driver.retry(first, 0)
        [second] = await receive_all(driver, harness.queues[0], 1)
        assert second.body == b"again"
        assert second.attributes.get("k") == "v"
        assert second.attempt == first.attempt + 1
        await driver.ack(second)

    async def test_release_returns_the_message_at_once_uncounted_if_it_can(
        self, harness: DriverHarness
    ) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        await harness.publish(harness.queues[0], b"unseen", {})
        [first] = await receive_all(driver, harness.queues[0], 1)
        await driver.release(first)
        await asyncio.sleep(harness.settle_s)
        [again] = await receive_all(driver, harness.queues[0], 1)
        assert again.body == b"unseen"
        # What each broker counts (docs/concepts.md "What counts as an attempt"): the local
        # driver undoes the claim; SQS, Pub/Sub and Service Bus cannot, and say so.
        counted = 1 if type(driver).releases_count_as_attempts else 0
        assert again.attempt == first.attempt + counted
        await driver.ack(again)

    async def test_retry_with_delay_hides_message_until_due(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        await harness.publish(harness.queues[0], b"later", {})
        [message] = await receive_all(driver, harness.queues[0], 1)
        delay_s = harness.lease_s * 2
        returned_at = time.monotonic()
        await driver.retry(message, delay_s)
        assert await driver.receive(harness.queues[0], 1, 0) == []
        [again] = await receive_all(driver, harness.queues[0], 1, timeout_s=delay_s * 4 + 5)
        assert time.monotonic() - returned_at >= delay_s - 0.5
        assert again.attempt == 2
        await driver.ack(again)

    async def test_unsettled_message_returns_after_lease(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s)
        await harness.publish(harness.queues[0], b"lapse", {})
        [message] = await receive_all(driver, harness.queues[0], 1)
        [again] = await receive_all(driver, harness.queues[0], 1, timeout_s=harness.lease_s * 5)
        assert again.body == message.body
        assert again.attempt == 2
        await driver.ack(again)

    async def test_extend_keeps_message_leased(self, harness: DriverHarness) -> None:
        holder = await harness.make_driver(harness.lease_s)
        other = await harness.make_driver(harness.lease_s)
        await harness.publish(harness.queues[0], b"long", {})
        [message] = await receive_all(holder, harness.queues[0], 1)
        for _ in range(6):  # three lease lengths, extended every half lease
            await asyncio.sleep(harness.lease_s / 2)
            await holder.extend(message, harness.lease_s)
            assert await other.receive(harness.queues[0], 1, 0) == []
        await holder.ack(message)
        await asyncio.sleep(harness.lease_s + harness.settle_s)
        assert await other.receive(harness.queues[0], 1, 0) == []

    async def test_settling_a_lapsed_lease_is_refused(self, harness: DriverHarness) -> None:
        from priority_pubsub.core.errors import LeaseLost

        if not harness.detects_lost_lease:
            pytest.skip("this broker accepts settles with stale handles; see the driver docs")
        first = await harness.make_driver(harness.lease_s)
        second = await harness.make_driver(harness.lease_s * 5)
        await harness.publish(harness.queues[0], b"stale", {})
        [stale] = await receive_all(first, harness.queues[0], 1)
        [fresh] = await receive_all(second, harness.queues[0], 1, timeout_s=harness.lease_s * 5)
        with pytest.raises(LeaseLost):
            await first.ack(stale)
        await second.ack(fresh)

    async def test_dead_letter_keeps_body_attributes_and_reason(
        self, harness: DriverHarness
    ) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        assert driver.dead_letter_enabled
        await harness.publish(harness.queues[0], b"poison", {"origin": "test"})
        [message] = await receive_all(driver, harness.queues[0], 1)
        await driver.dead_letter(message, "max attempts (3) reached")
        letters = await harness.dead_letters()
        assert [(d.body, d.attributes.get("origin")) for d in letters] == [(b"poison", "test")]
        assert letters[0].reason is not None
        assert "max attempts" in letters[0].reason
        await asyncio.sleep(harness.lease_s * 5 + harness.settle_s)
        assert await driver.receive(harness.queues[0], 1, 0) == []

    async def test_waiting_receive_wakes_on_publish(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        waiting = asyncio.create_task(driver.receive(harness.queues[0], 1, 8.0))
        await asyncio.sleep(0.5)
        published = time.monotonic()
        await harness.publish(harness.queues[0], b"wake", {})
        [message] = await asyncio.wait_for(waiting, 10)
        assert time.monotonic() - published < 3.0
        await driver.ack(message)

    async def test_cancelled_receive_loses_nothing(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        waiting = asyncio.create_task(driver.receive(harness.queues[0], 1, 3.0))
        await asyncio.sleep(0.3)
        waiting.cancel()
        await harness.publish(harness.queues[0], b"kept", {})
        [message] = await receive_all(driver, harness.queues[0], 1, timeout_s=15)
        assert message.body == b"kept"
        await driver.ack(message)

    async def test_waits_cancelled_while_publishing_strand_nothing(
        self, harness: DriverHarness
    ) -> None:
        """As the dispatcher waits: a waiting receive on each of two queues, the
        first to answer cancels the other, again and again while messages are being
        published to both. Whatever a broker handed to a cancelled wait must come back
        (returned at once, or kept for the next receive): everything published is received
        soon, long before the lease of a stranded message could lapse, and once (each is
        acked at once)."""
        driver = await harness.make_driver(harness.lease_s * 10)
        queues, total = harness.queues[:2], 40
        expected = sorted(f"{n}".encode() for n in range(total))

        async def publish_all() -> None:
            for n in range(total):
                await harness.publish(queues[n % 2], f"{n}".encode(), {})
                await asyncio.sleep(0.01)

        async def keep(batch: list[Message]) -> None:
            got.extend(m.body for m in batch)
            for message in batch:
                await driver.ack(message)

        got: list[bytes] = []
        publishing = asyncio.create_task(publish_all())
        cancels = 0
        while not publishing.done():
            waits = [asyncio.create_task(driver.receive(q, 5, 3.0)) for q in queues]
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in pending:
                wait.cancel()
            cancels += len(pending)
            await asyncio.gather(*pending, return_exceptions=True)
            for wait in waits:
                if not wait.cancelled():
                    await keep(wait.result())
        await publishing
        deadline = time.monotonic() + harness.lease_s * 2 + 1  # well inside the lease
        while len(got) < total and time.monotonic() < deadline:
            for queue in queues:
                await keep(await driver.receive(queue, total, 0.5))
        assert cancels > 0
        assert sorted(got) == expected, (
            f"missing {sorted(set(expected) - set(got))}, duplicated "
            f"{sorted(b for b in set(got) if got.count(b) > 1)} after {cancels} cancelled waits")

    async def test_two_consumers_never_share_a_leased_message(
        self, harness: DriverHarness
    ) -> None:
        drivers = [await harness.make_driver(harness.lease_s * 10) for _ in range(2)]
        total = 20
        for n in range(total):
            await harness.publish(harness.queues[0], f"{n}".encode(), {})

        async def drain(driver: Driver) -> list[bytes]:
            bodies: list[bytes] = []
            idle_rounds = 0
            while idle_rounds < 3:
                batch = await driver.receive(harness.queues[0], 3, 0.5)
                idle_rounds = 0 if batch else idle_rounds + 1
                bodies += [m.body for m in batch]
                for message in batch:
                    await driver.ack(message)
            return bodies

        results = await asyncio.gather(*(drain(d) for d in drivers))
        seen = results[0] + results[1]
        assert sorted(seen, key=int) == [f"{n}".encode() for n in range(total)]


class DeadLetterBrowsing:
    """For drivers that are ``DeadLetterBrowser``s and ``IdReceiver``s: the monitor lists
    their dead-letter queue itself, and requeues or deletes chosen dead letters from it. A
    driver's test class adds this beside ``DriverConformance``."""

    async def test_browse_lists_dead_letters_and_takes_none(self, harness: DriverHarness) -> None:
        driver = await harness.make_driver(harness.lease_s * 5)
        assert isinstance(driver, DeadLetterBrowser)
        dead = harness.dead_letter_queue
        await harness.publish(harness.queues[1], b"poison", {"origin": "test"})
        [message] = await receive_all(driver, harness.queues[1], 1)
        await driver.dead_letter(message, "max attempts (3) reached")
        listed = await driver.browse(dead, 10)
        assert await driver.browse(dead, 10) == listed  # browsing leased nothing
        [letter] = listed
        assert (letter.source, letter.reason) == (harness.queues[1], "max attempts (3) reached")
        [taken] = await receive_all(driver, dead, 1)  # still there for `requeue`
        assert taken.id == letter.id
        await driver.ack(taken)
        assert await driver.browse(dead, 10) == []

    async def test_chosen_dead_letters_are_requeued_released_or_deleted_alone(
        self, harness: DriverHarness
    ) -> None:
        """What the monitor's requeue and delete do: ``receive_ids`` then ``requeue_one``
        (the CLI's step), ``release`` or ``ack``; the other dead letters stay untouched."""
        driver = await harness.make_driver(harness.lease_s * 5)
        assert isinstance(driver, DeadLetterBrowser)
        assert isinstance(driver, IdReceiver)
        dead, source = harness.dead_letter_queue, harness.queues[1]
        for n in range(3):
            await harness.publish(source, f"poison-{n}".encode(), {"n": str(n)})
        for message in await receive_all(driver, source, 3):
            await driver.dead_letter(message, "bad input")
        letters = await driver.browse(dead, 10)
        assert len(letters) == 3
        by_n = {}
        for letter in letters:
            [probe] = await driver.receive_ids(dead, [letter.id])
            by_n[probe.attributes["n"]] = letter.id
            await driver.release(probe)  # handed back unseen
        assert {letter.id for letter in await driver.browse(dead, 10)} == set(by_n.values())

        taken = await driver.receive_ids(dead, [by_n["1"], "no-such-id", by_n["1"]])
        assert [(m.body, m.attributes[DEAD_LETTER_SOURCE]) for m in taken] == [
            (b"poison-1", source)]
        await requeue_one(driver, taken[0], dead, harness.queues[0])
        [back] = await receive_all(driver, harness.queues[0], 1)
        assert (back.body, back.attributes[REQUEUED_FROM]) == (b"poison-1", dead)
        assert DEAD_LETTER_SOURCE not in back.attributes
        await driver.ack(back)
        assert {letter.id for letter in await driver.browse(dead, 10)} == {by_n["0"],
                                                                           by_n["2"]}

        [doomed] = await driver.receive_ids(dead, [by_n["0"]])
        await driver.ack(doomed)  # delete
        assert [letter.id for letter in await driver.browse(dead, 10)] == [by_n["2"]]
        assert await driver.receive_ids(dead, [by_n["0"], by_n["1"]]) == []
