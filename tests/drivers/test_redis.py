"""The Redis Streams driver through the conformance suite, plus its own guarantees, against a
real ``redis-server`` (the machine's for ordinary tests, the test's own to restart one).

Layout reference: components-contrib ``pubsub/redis/redis.go`` (Publish: ``XADD topic *
data <bytes> [metadata <json>]``; Subscribe: ``XGROUP CREATE topic consumerID 0 MKSTREAM``).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost, MessageTooLarge
from priority_pubsub.drivers.base import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DriverContext,
    Message,
)
from priority_pubsub.drivers.redis import driver as redis_streams
from priority_pubsub.drivers.redis.driver import RedisDriver
from priority_pubsub.drivers.redis.options import RedisOptions
from priority_pubsub.monitor.dead_letters import DeadLetterDesk, DeadLetterFilter
from priority_pubsub.settings.config import validate_config
from tests.drivers.conformance import (
    DeadLetter,
    DeadLetterBrowsing,
    DriverConformance,
    DriverHarness,
    LateBroker,
    receive_all,
)
from tests.support.redis_server import OwnRedis, unique
from tests.support.servers import free_port
from tests.support.topologies.redis import RedisTopology

pytestmark = pytest.mark.redis
GROUP = "priority-pubsub"


class Streams:
    """Fresh stream names on one Redis, a raw client for what daprd would do, and drivers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.topology = RedisTopology(url)
        """Publishing and dead letters as the e2e scenarios see them (sync admin calls)."""
        self.prefix = self.topology.prefix
        self.raw = aioredis.Redis.from_url(url)
        self.made: list[RedisDriver] = []

    def name(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    async def driver(self, queues: tuple[str, ...], dead: str | None, lease_s: float = 30,
                     **options: Any) -> RedisDriver:
        context = DriverContext(queues=queues, dead_letter_queue=dead, lease_duration_s=lease_s)
        options = {"url": self.url, "reclaim_interval_s": 0.2, **options}
        made = RedisDriver(RedisOptions.model_validate(options), context)
        self.made.append(made)
        await made.start()
        return made

    async def dapr_publish(self, stream: str, data: bytes,
                           metadata: dict[str, str] | None = None) -> str:
        """What daprd's pubsub.redis Publish writes."""
        fields: dict[str, Any] = {"data": data}
        if metadata is not None:
            fields["metadata"] = json.dumps(metadata)
        entry_id = await self.raw.xadd(stream, fields)
        return str(entry_id.decode())

    async def dead_letters(self, stream: str) -> list[dict[bytes, bytes]]:
        return [fields for _, fields in await self.raw.xrange(stream)]

    async def close(self) -> None:
        for made in self.made:
            await made.close()
        self.topology.close()
        await self.raw.aclose()


@pytest.fixture
async def streams(redis_url: str) -> AsyncIterator[Streams]:
    made = Streams(redis_url)
    yield made
    await made.close()


@pytest.fixture
async def harness(streams: Streams) -> DriverHarness:
    topology = streams.topology
    queues = (topology.queue("high"), topology.queue("normal"), topology.queue("low"))
    dead = topology.dead

    async def make_driver(lease_s: float) -> RedisDriver:
        return await streams.driver(queues, dead, lease_s)

    async def publish(queue: str, body: bytes, attributes: dict[str, str]) -> None:
        topology.publish(queue, body, attributes)

    async def dead_letters() -> list[DeadLetter]:
        return topology.dead_letters()

    return DriverHarness(
        queues=queues, dead_letter_queue=dead, make_driver=make_driver, publish=publish,
        dead_letters=dead_letters, lease_s=1.0, settle_s=0.3,
    )


@pytest.fixture
def late_broker(tmp_path: Path) -> Iterator[LateBroker]:
    """A ``redis-server`` of the test's own on a port chosen now, started only by
    ``bring_up`` (streams and group need no creating: the driver declares them)."""
    server = OwnRedis(tmp_path / "late-redis")
    queue = unique("late")

    def make_driver() -> RedisDriver:
        context = DriverContext(queues=(queue,), lease_duration_s=30)
        return RedisDriver(RedisOptions.model_validate(
            {"url": server.url, "connect_timeout_s": 1, "call_timeout_s": 2}), context)

    async def bring_up() -> None:
        await asyncio.to_thread(server.start)

    async def publish(body: bytes) -> None:
        topology = RedisTopology(server.url)
        try:
            await asyncio.to_thread(topology.publish, queue, body)
        finally:
            topology.close()

    yield LateBroker(queue, make_driver, bring_up, publish)
    server.stop()


class TestRedisConformance(DriverConformance, DeadLetterBrowsing):
    pass


# -- Dapr's layout ------------------------------------------------------------------------------

SAMPLE_EVENT = json.dumps({
    "specversion": "1.0", "id": "5929aaac-a5e2-4ca1-859c-edfe73f11565", "source": "checkout",
    "type": "com.dapr.event.sent", "datacontenttype": "application/json",
    "data": {"orderId": 1}, "topic": "orders", "pubsubname": "pubsub",
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
}).encode()


async def test_reads_what_daprd_publishes_unchanged(streams: Streams) -> None:
    topic = streams.name("orders")
    await streams.dapr_publish(topic, SAMPLE_EVENT, {"customer-tier": "gold"})
    driver = await streams.driver((topic,), None)
    [message] = await receive_all(driver, topic, 1)
    assert message.body == SAMPLE_EVENT
    assert message.attributes == {"customer-tier": "gold"}
    assert message.defect is None
    await driver.ack(message)
    [group] = await streams.raw.xinfo_groups(topic)
    assert (group["name"], group["pending"]) == (GROUP.encode(), 0)


async def test_publish_writes_what_daprd_writes(streams: Streams) -> None:
    topic = streams.name("orders")
    driver = await streams.driver((topic,), None)
    await driver.publish(topic, SAMPLE_EVENT)
    await driver.publish(topic, b"x", {"k": "v"}, "text/plain")
    [(_, plain), (_, with_metadata)] = await streams.raw.xrange(topic)
    assert plain == {b"data": SAMPLE_EVENT}  # exactly Dapr's entry when there is no metadata
    assert with_metadata[b"data"] == b"x"
    assert json.loads(with_metadata[b"metadata"]) == {"k": "v", "content-type": "text/plain"}
    [first, second] = await receive_all(driver, topic, 2)
    assert (second.content_type, second.attributes) == ("text/plain", {"k": "v"})
    for message in (first, second):
        await driver.ack(message)


async def test_group_starts_at_the_stream_start_and_declaring_is_idempotent(
    streams: Streams,
) -> None:
    topic = streams.name("early")
    await streams.dapr_publish(topic, b"published before any consumer existed")
    first = await streams.driver((topic,), None)
    second = await streams.driver((topic,), None)  # BUSYGROUP: the group is left as it is
    [message] = await receive_all(second, topic, 1)
    assert message.body == b"published before any consumer existed"
    await second.ack(message)
    assert await first.receive(topic, 1, 0) == []


async def test_other_groups_on_the_topic_see_each_message_once(streams: Streams) -> None:
    """Dapr fan-out: another app's group must not see retry copies (none are made)."""
    topic = streams.name("fanout")
    ours = await streams.driver((topic,), None)
    await streams.raw.xgroup_create(topic, "other-app", id="0")
    await streams.dapr_publish(topic, b"once")
    [message] = await receive_all(ours, topic, 1)
    await ours.retry(message, 0)
    [again] = await receive_all(ours, topic, 1)
    assert (again.id, again.attempt) == (message.id, 2)
    await ours.ack(again)
    [[_, entries]] = await streams.raw.xreadgroup("other-app", "c", {topic: ">"})
    assert [fields[b"data"] for _, fields in entries] == [b"once"]


# -- bad input: dead-lettered with a reason, never lost, never a crash ---------------------


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"body": b"legacy producer"}, "no 'data' field (fields: body)"),
        ({"data": b"{}", "metadata": b"\xff\xfe"}, "'metadata' field is not UTF-8"),
        ({"data": b"{}", "metadata": b"[1, 2]"}, "not a JSON object of strings"),
    ],
)
async def test_unreadable_entry_is_flagged_and_dead_lettered_whole(
    streams: Streams, fields: dict[str, bytes], reason: str
) -> None:
    topic, dead = streams.name("in"), streams.name("dead")
    driver = await streams.driver((topic,), dead)
    await streams.raw.xadd(topic, fields)  # type: ignore[arg-type]
    [message] = await receive_all(driver, topic, 1)
    assert message.defect is not None
    assert reason in message.defect
    await driver.dead_letter(message, message.defect)
    [letter] = await streams.dead_letters(dead)
    metadata = json.loads(letter[b"metadata"])
    assert reason in metadata[DEAD_LETTER_REASON]
    assert metadata[DEAD_LETTER_SOURCE] == topic
    for name, value in fields.items():  # every original field kept
        key = "malformed_metadata" if name == "metadata" else name
        assert letter[key.encode()] == value
    assert await driver.receive(topic, 1, 0) == []


async def test_binary_body_is_data_not_a_defect(streams: Streams) -> None:
    topic = streams.name("bin")
    driver = await streams.driver((topic,), None)
    await streams.dapr_publish(topic, b"\xff\x00\xfe binary")
    [message] = await receive_all(driver, topic, 1)
    assert (message.body, message.defect) == (b"\xff\x00\xfe binary", None)
    await driver.ack(message)


# -- cancellation (the dispatcher cancels the waits it no longer needs) -------------------------


async def test_a_cancelled_wait_ends_at_once_and_loses_nothing(streams: Streams) -> None:
    """Cancelled right as a publish wakes it, a wait must still end (Python 3.11's wait_for
    could swallow that cancellation and hang the sidecar's shutdown), and whatever a claim
    took for a cancelled receive comes back at once, uncounted."""
    topic = streams.name("cancel")
    driver = await streams.driver((topic,), None)
    taken: list[bytes] = []
    for n in range(30):
        waiting = asyncio.create_task(driver.receive(topic, 1, 5))
        await asyncio.sleep(0.05)
        await streams.dapr_publish(topic, str(n).encode())
        for _ in range(n % 10):  # cancel a few loop turns after the publish's answer
            await asyncio.sleep(0)
        finished_first = waiting.done()
        waiting.cancel()
        done, _ = await asyncio.wait({waiting}, timeout=1)
        assert done, f"round {n}: a cancelled receive kept running"
        assert finished_first or waiting.cancelled(), f"round {n}: cancellation swallowed"
        if not waiting.cancelled():
            for message in waiting.result():
                await driver.ack(message)
                taken.append(message.body)
    await asyncio.sleep(0.3)  # releases of orphaned claims run in the background
    rest = await receive_all(driver, topic, 30 - len(taken), timeout_s=5)
    assert sorted(int(b) for b in taken + [m.body for m in rest]) == list(range(30))
    for message in rest:
        assert message.attempt == 1
        await driver.ack(message)
    assert await streams.raw.xpending(topic, GROUP) == {
        "pending": 0, "min": None, "max": None, "consumers": []}


# -- leases, attempts, release ------------------------------------------------------------------


async def test_release_does_not_count_an_attempt(streams: Streams) -> None:
    topic = streams.name("rel")
    driver = await streams.driver((topic,), None)
    await streams.dapr_publish(topic, b"surplus")
    [message] = await receive_all(driver, topic, 1)
    await driver.release(message)
    [again] = await receive_all(driver, topic, 1)
    assert (again.id, again.attempt) == (message.id, 1)
    await driver.ack(again)


async def test_delayed_retry_survives_a_new_driver_and_is_moved_by_any_replica(
    streams: Streams,
) -> None:
    topic = streams.name("delay")
    first = await streams.driver((topic,), None, consumer="replica-a")
    await streams.dapr_publish(topic, b"later")
    [message] = await receive_all(first, topic, 1)
    await first.retry(message, 1.5)
    await first.close()  # the replica that parked it is gone
    depth = await (second := await streams.driver((topic,), None, consumer="replica-b")) \
        .depth(topic)
    assert (depth.visible, depth.in_flight, depth.delayed) == (0, 0, 1)
    assert await second.receive(topic, 1, 0) == []
    [again] = await receive_all(second, topic, 1, timeout_s=5)
    assert (again.id, again.attempt) == (message.id, 2)
    await second.ack(again)


async def test_lapsed_lease_of_a_dead_replica_is_reclaimed_with_the_next_attempt(
    streams: Streams,
) -> None:
    topic = streams.name("lapse")
    dead_replica = await streams.driver((topic,), None, lease_s=1, consumer="crashed")
    await streams.dapr_publish(topic, b"orphan")
    [held] = await receive_all(dead_replica, topic, 1)
    survivor = await streams.driver((topic,), None, lease_s=1, consumer="survivor")
    waiting = asyncio.get_running_loop().time()
    [again] = await survivor.receive(topic, 1, 5)  # woken by the reclaim interval
    assert asyncio.get_running_loop().time() - waiting < 2.5
    assert (again.id, again.attempt) == (held.id, 2)
    for settle in (dead_replica.ack(held), dead_replica.extend(held, 1),
                   dead_replica.retry(held, 0)):
        with pytest.raises(LeaseLost):
            await settle
    await survivor.ack(again)


async def test_depth_counts_new_in_flight_and_delayed(streams: Streams) -> None:
    topic = streams.name("depth")
    driver = await streams.driver((topic,), None)
    for n in range(4):
        await driver.publish(topic, str(n).encode())
    [first, second] = await receive_all(driver, topic, 2)
    await driver.retry(second, 60)
    depth = await driver.depth(topic)
    assert (depth.visible, depth.in_flight, depth.delayed) == (2, 1, 1)
    assert depth.oldest_age_s is not None
    assert depth.oldest_age_s >= 0
    await driver.ack(first)


async def test_delete_on_ack_trims_the_entry(streams: Streams) -> None:
    topic = streams.name("del")
    driver = await streams.driver((topic,), None, delete_on_ack=True)
    await driver.publish(topic, b"gone after ack")
    [message] = await receive_all(driver, topic, 1)
    assert await streams.raw.xlen(topic) == 1
    await driver.ack(message)
    assert await streams.raw.xlen(topic) == 0


async def test_publish_trims_with_max_len_and_refuses_oversized(streams: Streams) -> None:
    topic = streams.name("cap")
    driver = await streams.driver((topic,), None, max_len_approx=10, max_message_bytes=100)
    with pytest.raises(MessageTooLarge):
        await driver.publish(topic, b"x" * 101)
    for _ in range(300):
        await driver.publish(topic, b"y")
    assert await streams.raw.xlen(topic) < 300  # ~: whole macro nodes are trimmed


async def test_close_forgets_an_idle_consumer_but_keeps_one_holding_messages(
    streams: Streams,
) -> None:
    topic = streams.name("names")
    idle = await streams.driver((topic,), None, consumer="idle-one")
    busy = await streams.driver((topic,), None, consumer="busy-one")
    await streams.dapr_publish(topic, b"held")
    [held] = await receive_all(busy, topic, 1)
    assert held.attempt == 1
    await idle.close()
    await busy.close()
    consumers = {c["name"] for c in await streams.raw.xinfo_consumers(topic, GROUP)}
    assert consumers == {b"busy-one"}  # deleting it would drop its pending entry


# -- connection, secrets, errors ----------------------------------------------------------------


def test_password_in_url_is_masked_in_printouts() -> None:
    url = "redis://app:s3cret-pw@redis.example:6380/2"
    options = RedisOptions(url=url)  # type: ignore[arg-type]
    assert "s3cret-pw" not in repr(options)
    assert "s3cret-pw" not in json.dumps(options.model_dump(mode="json"))
    assert options.model_dump(mode="json")["url"] == "redis://app:***@redis.example:6380/2"
    settings = validate_config({"driver": {"type": "redis", "url": url},
                                "queues": [{"name": "q"}]})
    assert settings.driver.type == "redis"


def test_url_scheme_is_checked() -> None:
    with pytest.raises(ValueError, match="redis://"):
        RedisOptions(url="http://127.0.0.1:6379")  # type: ignore[arg-type]


async def test_unreachable_server_is_unavailable() -> None:
    options = RedisOptions(url=f"redis://127.0.0.1:{free_port()}/0",  # type: ignore[arg-type]
                           connect_timeout_s=1)
    driver = RedisDriver(options, DriverContext(queues=("q",)))
    try:
        with pytest.raises(DriverUnavailable):
            await driver.start()
    finally:
        await driver.close()


async def test_wrong_password_is_a_terminal_error(tmp_path: Path) -> None:
    server = OwnRedis(tmp_path / "redis", extra=("--requirepass", "right-password"))
    server.start()
    try:
        options = RedisOptions(url=server.url, password="wrong")  # type: ignore[arg-type]
        driver = RedisDriver(options, DriverContext(queues=("q",)))
        with pytest.raises(DriverError) as caught:
            await driver.start()
        assert not caught.value.retriable
        assert "wrong" not in str(caught.value)
        await driver.close()
        good = RedisDriver(RedisOptions(url=server.url, password="right-password"),  # type: ignore[arg-type]
                           DriverContext(queues=("q",)))
        await good.start()
        await good.publish("q", b"authenticated")
        [message] = await receive_all(good, "q", 1)
        await good.ack(message)
        await good.close()
    finally:
        server.stop()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (the test's own CA, for ``tls_ca_file``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def test_tls_with_a_private_ca(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path / "tls")
    port = free_port()
    server = OwnRedis(tmp_path / "redis", port=port, extra=(
        "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert),
        "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
        "--tls-auth-clients", "no"))
    server.start()
    try:
        url = f"rediss://127.0.0.1:{port}/0"
        unverified = RedisDriver(RedisOptions(url=url, connect_timeout_s=2),  # type: ignore[arg-type]
                                 DriverContext(queues=("q",)))
        with pytest.raises(DriverUnavailable):  # the server's CA is not trusted by default
            await unverified.start()
        await unverified.close()
        plain = RedisDriver(RedisOptions(url=f"redis://127.0.0.1:{port}/0",  # type: ignore[arg-type]
                                         connect_timeout_s=2), DriverContext(queues=("q",)))
        with pytest.raises(DriverUnavailable):  # no plain-text port at all
            await plain.start()
        await plain.close()
        driver = RedisDriver(RedisOptions(url=url, tls_ca_file=cert),  # type: ignore[arg-type]
                             DriverContext(queues=("q",)))
        await driver.start()
        await driver.publish("q", b"over TLS")
        [message] = await receive_all(driver, "q", 1)
        assert message.body == b"over TLS"
        await driver.ack(message)
        await driver.close()
    finally:
        server.stop()


async def _one_held_one_parked(url: str, published: int, park_s: float,
                               **options: Any) -> tuple[RedisDriver, Message]:
    """A driver on stream ``q`` of ``url`` with ``published`` entries ``b"0"``, ``b"1"``...:
    it holds the first and has parked the second for ``park_s``; the held one is returned."""
    driver = RedisDriver(RedisOptions.model_validate({"url": url, **options}),
                         DriverContext(queues=("q",), lease_duration_s=30))
    await driver.start()
    for n in range(published):
        await driver.publish("q", str(n).encode())
    [held] = await receive_all(driver, "q", 1)
    [parked] = await receive_all(driver, "q", 1)
    await driver.retry(parked, park_s)
    return driver, held


async def test_server_restart_keeps_everything_and_the_driver_recovers(tmp_path: Path) -> None:
    server = OwnRedis(tmp_path / "redis")
    server.start()
    try:
        driver, held = await _one_held_one_parked(server.url, 3, park_s=1,
                                                  reclaim_interval_s=0.2)
        server.stop(kill=True)  # kill -9: the append-only file was fsynced on every write
        with pytest.raises(DriverUnavailable):
            await driver.ping()
        with pytest.raises(DriverUnavailable):
            await driver.receive("q", 1, 0)
        server.start()
        await driver.ping()
        await driver.ack(held)  # the pending entry (our lease) survived the restart
        rest = await receive_all(driver, "q", 2, timeout_s=5)
        assert sorted((m.body, m.attempt) for m in rest) == [(b"1", 2), (b"2", 1)]
        for message in rest:
            await driver.ack(message)
        await driver.close()
    finally:
        server.stop()


async def test_depth_counts_the_backlog_when_redis_reloaded_its_append_only_file(
    own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an AOF reload XINFO GROUPS reports ``lag`` (and ``entries-read``) as null: depth
    counts the entries after the group's last-delivered id instead, within its cap on each
    side of that id, and says None (unknown) beyond it."""
    driver, held = await _one_held_one_parked(own_redis.url, 6, park_s=0)  # due: visible too
    own_redis.stop()
    own_redis.start()
    raw = aioredis.Redis.from_url(own_redis.url)
    [group] = await raw.xinfo_groups("q")
    await raw.aclose()
    assert group["lag"] is None  # else this test no longer covers the reload
    depth = await driver.depth("q")
    assert (depth.visible, depth.in_flight, depth.delayed) == (5, 1, 0)
    monkeypatch.setattr(redis_streams, "UNREAD_COUNT_CAP", 3)  # 4 after, 2 at or before
    assert (await driver.depth("q")).visible == 5
    monkeypatch.setattr(redis_streams, "UNREAD_COUNT_CAP", 2)  # both sides beyond it
    assert (await driver.depth("q")).visible is None
    await driver.ack(held)
    await driver.close()


async def test_group_lost_with_the_data_is_declared_again(tmp_path: Path) -> None:
    server = OwnRedis(tmp_path / "redis", extra=("--appendonly", "no"))
    server.start()
    try:
        driver = RedisDriver(RedisOptions(url=server.url),  # type: ignore[arg-type]
                             DriverContext(queues=("q",)))
        await driver.start()
        server.stop()
        server.start()  # no persistence: stream and group are gone
        raw = aioredis.Redis.from_url(server.url)
        await raw.xadd("q", {"data": b"after the loss"})  # a publisher recreates the stream
        await raw.aclose()
        [message] = await receive_all(driver, "q", 1)
        assert message.body == b"after the loss"
        await driver.ack(message)
        await driver.close()
    finally:
        server.stop()


async def test_a_chosen_dead_letter_taken_meanwhile_is_left_to_its_taker(
    streams: Streams,
) -> None:
    """``receive_ids`` reads without taking: if the group (``requeue``) or another page took
    the entry meanwhile, the ack refuses (``LeaseLost``) and leaves it where it is."""
    queue, dead = streams.name("src"), streams.name("dead")
    driver = await streams.driver((queue,), dead)
    for body in (b"one", b"two"):
        await streams.dapr_publish(queue, body)
    for message in await receive_all(driver, queue, 2):
        await driver.dead_letter(message, "bad input")
    first, second = (letter.id for letter in await driver.browse(dead, 10))
    # two pages chose the same entry: the first delete wins, the second is refused
    [page_a] = await driver.receive_ids(dead, [first])
    [page_b] = await driver.receive_ids(dead, [first, "not-an-id", "0-1"])
    await driver.ack(page_a)
    with pytest.raises(LeaseLost, match="taken by the group meanwhile"):
        await driver.ack(page_b)
    # `requeue` received it into the group meanwhile: its pending entry is not deleted
    [chosen] = await driver.receive_ids(dead, [second])
    [requeue] = await driver.receive(dead, 10, 0)
    assert requeue.id == second
    with pytest.raises(LeaseLost):
        await driver.ack(chosen)
    assert [e[b"data"] for e in await streams.dead_letters(dead)] == [b"two"]
    await driver.ack(requeue)
    assert await driver.browse(dead, 10) == []


async def test_the_monitor_desk_goes_on_past_a_dead_letter_another_action_took(
    streams: Streams,
) -> None:
    """Two operators act on the same dead letters: the later batch counts what it did and
    goes on past what the other took, instead of failing half-way."""
    queue, dead = streams.name("src"), streams.name("dead")
    driver = await streams.driver((queue,), dead)
    desk = DeadLetterDesk(driver, dead, (queue,), list)
    for body in (b"one", b"two", b"three"):
        await streams.dapr_publish(queue, body)
    for message in await receive_all(driver, queue, 3):
        await driver.dead_letter(message, "bad input")
    ids = [letter.id for letter in (await desk.listing(DeadLetterFilter())).letters]
    [other] = await driver.receive_ids(dead, ids[:1])  # the other operator's requeue, begun
    real_ack = driver.ack
    taken_first = False

    async def ack_after_the_other(message: Message) -> None:
        nonlocal taken_first
        if not taken_first:  # the other operator's ack lands just before ours
            taken_first = True
            await real_ack(other)
        await real_ack(message)

    driver.ack = ack_after_the_other  # type: ignore[method-assign]
    assert await desk.requeue(ids) == 2  # the first was the other's; the batch went on
    driver.ack = real_ack  # type: ignore[method-assign]
    assert sorted(m.body for m in await receive_all(driver, queue, 3, timeout_s=2)) == [
        b"one", b"three", b"two"]  # ours two, plus the copy published before the refusal
    assert await driver.browse(dead, 10) == []
