"""Live reload's parts on their own: which changes a reload applies
(``reload_diff``), the watch's fingerprint of a ConfigMap swap, the live settings' owner, the
dispatcher following it between takes, and the reloader refusing what it must."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs
from typer.testing import CliRunner

from priority_pubsub import cli
from priority_pubsub.app.backpressure import AimdLimiter
from priority_pubsub.app.gate import NO_APP, AppGate
from priority_pubsub.core.message import Message
from priority_pubsub.delivery.dispatcher import Dispatcher
from priority_pubsub.delivery.receiver import Receiver
from priority_pubsub.delivery.reload import Candidate, Reloader, ReloadSource
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.settings.config import Settings, load_config, validate_config
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.settings.reload import NOT_ADDABLE, reload_diff
from priority_pubsub.settings.watch import content_hash, fingerprint
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver
from tests.e2e.helpers import total
from tests.support.configmap import ConfigMapVolume
from tests.unit.delivery.test_dispatcher_capacity_rule import CountingDriver
from tests.unit.delivery.test_receiver import FakeDispatcher
from tests.unit.delivery.test_receiver import message as queued


def raw(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "driver": {"type": "local", "path": "/tmp/never-opened.db"},
        "queues": [{"name": "hi"}, {"name": "lo"}],
        "concurrency": 4,
    }
    return {**config, **changes}


def settings(**changes: Any) -> Settings:
    return validate_config(raw(**changes))


@pytest.mark.parametrize(("changes", "applied"), [
    ({"queues": [{"name": "hi", "reserve": 1, "weight": 3, "max_concurrency": 2,
                  "max_wait_s": 60, "wait_slo_s": 5, "timeout_s": 9, "paused": True,
                  "route": "/hi"}, {"name": "lo"}]},
     ["queues.hi.max_concurrency", "queues.hi.max_wait_s", "queues.hi.paused",
      "queues.hi.reserve", "queues.hi.route", "queues.hi.timeout_s", "queues.hi.wait_slo_s",
      "queues.hi.weight"]),
    ({"scheduling": "weighted", "concurrency": 9}, ["concurrency", "scheduling"]),
    ({"retry": {"max_attempts": 2}, "app": {"timeout_s": 5}, "log": {"level": "debug"}},
     ["app.timeout_s", "log.level", "retry.max_attempts"]),
    ({"queues": [{"name": "lo"}, {"name": "hi"}]}, ["queues (order)"]),
    ({"queues": [{"name": "hi"}]}, ["queues.lo (removed)"]),
])
def test_what_a_reload_applies(changes: dict[str, Any], applied: list[str]) -> None:
    diff = reload_diff(settings(), settings(**changes), can_add_queues=False)
    assert sorted(diff.applied) == sorted(applied)
    assert diff.refused == ()
    assert diff.safe


@pytest.mark.parametrize(("changes", "refused"), [
    ({"driver": {"type": "local", "path": "/tmp/elsewhere.db"}}, ["driver.path"]),
    ({"server": {"port": 1234, "host": "0.0.0.0"}}, ["server.host", "server.port"]),
    ({"journal": {"path": "/tmp/journal"}}, ["journal"]),
    ({"app": {"url": "http://127.0.0.1:9/x"}}, ["app.url"]),
    ({"app": {"api_token": "s3cret"}}, ["app.api_token"]),  # a secret: by value
    ({"lease": {"duration_s": 30}, "log": {"format": "console"}},
     ["lease.duration_s", "log.format"]),
    ({"reload": {"watch": False}}, ["reload.watch"]),
    ({"transforms": ["base64"]}, ["transforms"]),
])
def test_what_only_a_restart_applies(changes: dict[str, Any], refused: list[str]) -> None:
    diff = reload_diff(settings(), settings(concurrency=8, **changes), can_add_queues=True)
    assert sorted(diff.refused) == refused
    assert diff.applied == ("concurrency",)  # reloadable, yet refused with the rest
    assert not diff.safe


def test_an_added_queue_needs_a_driver_that_adds_queues() -> None:
    grown = settings(queues=[{"name": "top"}, {"name": "hi"}, {"name": "lo"}])
    refused = reload_diff(settings(), grown, can_add_queues=False)
    assert refused.refused == (f"queues.top ({NOT_ADDABLE})",)
    applied = reload_diff(settings(), grown, can_add_queues=True)
    assert (applied.applied, applied.refused, applied.added) == (
        ("queues.top (added)",), (), ("top",))  # the others kept their order: no "order"


def test_the_same_settings_change_nothing() -> None:
    assert reload_diff(settings(), settings(), can_add_queues=False) == reload_diff(
        settings(), settings(), can_add_queues=True)
    assert reload_diff(settings(), settings(), can_add_queues=False).applied == ()


def test_the_fingerprint_sees_a_configmap_swap_and_the_hash_its_contents(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "mounted")
    path = volume.write({"concurrency": 4})
    before, hashed = fingerprint([path]), content_hash([path])
    assert fingerprint([path]) == before  # nothing changed: nothing seen
    volume.write({"concurrency": 4})  # the same bytes in new files, ..data swapped
    assert fingerprint([path]) != before
    assert content_hash([path]) == hashed  # what runs is the same config
    volume.write({"concurrency": 8})
    assert content_hash([path]) != hashed
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(path.read_text())
    assert content_hash([elsewhere]) == content_hash([path])  # where it is: no matter
    missing = fingerprint([tmp_path / "nothing.yaml"])
    assert missing == ((str(tmp_path / "nothing.yaml"), None),)


def test_the_owner_keeps_queues_added_at_run_time_and_tells_its_parts() -> None:
    live = LiveSettings(settings())
    told: list[tuple[str, ...]] = []
    live.on_change(lambda: told.append(live.names))
    assert live.add_queue("streamed")
    assert not live.add_queue("streamed")
    live.replace(settings(queues=[{"name": "lo", "paused": True, "timeout_s": 7},
                                  {"name": "hi"}], app={"timeout_s": 30}))
    assert told == [("hi", "lo", "streamed"), ("lo", "hi", "streamed")]
    assert (live.index["lo"], live.paused, live.timeout_s("lo"), live.timeout_s("hi")) == (
        0, frozenset({"lo"}), 7, 30)
    live.replace(settings(queues=[{"name": "streamed"}, {"name": "hi"}, {"name": "lo"}]))
    assert live.names == ("streamed", "hi", "lo")  # the config lists it now: its place
    assert live.queue("gone") is None
    assert live.timeout_s("gone") == 3600  # a removed queue's last messages: app.timeout_s


def test_the_limiter_follows_a_new_concurrency() -> None:
    now = [0.0]
    limiter = AimdLimiter(4, lambda: now[0])
    limiter.resize(8)
    assert limiter.limit == 8  # at its ceiling: grown at once
    limiter.on_busy(1.0)  # halved to 4
    limiter.resize(6)
    assert (limiter.limit, limiter.ceiling) == (4, 6)  # backed off: stays, grows back
    limiter.resize(2)
    assert limiter.limit == 2  # shrunk at once


def dispatcher_on(live: LiveSettings, driver: CountingDriver, wait_s: float) -> Dispatcher:
    observer = DeliveryObserver(Metrics(), None, driver_type="fake")
    return Dispatcher(live, driver, observer,  # type: ignore[arg-type]
                      Settler(live, driver, observer), idle_wait_s=wait_s)  # type: ignore[arg-type]


async def test_a_reload_ends_a_wait_and_the_next_take_obeys_it() -> None:
    """Three lows at the app of four workers: a reserve added during the wait shuts low out
    from the next take on; the take under way ends at once and hands nothing back (the
    driver fails on any release)."""
    live = LiveSettings(settings())
    driver = CountingDriver(live.settings)
    dispatcher = dispatcher_on(live, driver, wait_s=2)
    take = asyncio.create_task(dispatcher.take(1, busy={"lo": 3}, slot_freed=asyncio.Event()))
    await asyncio.sleep(0.05)
    assert driver.calls[-2:] == [("hi", 1, 2), ("lo", 1, 2)]  # both waited on
    live.replace(settings(queues=[{"name": "hi", "reserve": 1}, {"name": "lo"}]))
    assert await asyncio.wait_for(take, 1) == []  # ended at once, not after the 2 s wait
    driver.queues["lo"].append("l4")
    take = asyncio.create_task(dispatcher.take(1, busy={"lo": 3}, slot_freed=asyncio.Event()))
    await asyncio.sleep(0.05)
    assert driver.calls[-1] == ("hi", 1, 2)  # the reserved worker waits for hi alone
    driver.queues["hi"].append("h1")  # the fake's wait looks again when it ends
    assert [m.id for m in await asyncio.wait_for(take, 10)] == ["h1"]
    assert list(driver.queues["lo"]) == ["l4"]


async def test_a_queue_held_by_the_config_or_an_operator_is_left_alone() -> None:
    live = LiveSettings(settings())
    driver = CountingDriver(live.settings)
    dispatcher = dispatcher_on(live, driver, wait_s=0.05)
    driver.queues["hi"].extend(["h1", "h2"])
    driver.queues["lo"].extend(["l1", "l2"])
    live.replace(settings(queues=[{"name": "hi", "paused": True}, {"name": "lo"}]))
    assert [m.id for m in await dispatcher.take(1)] == ["l1"]
    assert dispatcher.control.paused_by_config("hi")
    dispatcher.control.pause("lo", "test")  # both held: the take waits for a change
    waiting = asyncio.create_task(dispatcher.take(1))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    live.replace(settings())  # the config resumes hi; the operator still holds lo
    assert await asyncio.wait_for(waiting, 1) == []
    assert [m.id for m in await dispatcher.take(2)] == ["h1", "h2"]
    assert list(driver.queues["lo"]) == ["l2"]


def write(path: Path, config: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(config))


def reloader_for(path: Path, metrics: Metrics, *, adds: bool = False, interval_s: float = 1
                 ) -> tuple[LiveSettings, Reloader, list[str]]:
    added: list[str] = []

    async def add_queue(name: str) -> None:
        added.append(name)

    live = LiveSettings(load_config(path))
    source = ReloadSource(lambda: Candidate(load_config(path)), (path,))
    return live, Reloader(live, source, metrics, add_queue=add_queue if adds else None,
                          interval_s=interval_s), added


async def test_the_reloader_applies_refuses_and_counts(tmp_path: Path) -> None:
    path, metrics = tmp_path / "config.yaml", Metrics()
    write(path, raw())
    live, reloader, _ = reloader_for(path, metrics)
    write(path, raw(concurrency=6))
    applied = await reloader.reload("test")
    assert (applied.applied, applied.changed) == (True, ("concurrency",))
    assert live.settings.concurrency == 6
    in_force = live.settings
    for broken, named in [("queues: [{name: hi, reserve: x}]\n", "queues.0.reserve"),
                          ("queues: [\n", "cannot parse")]:
        path.write_text(broken)
        with capture_logs() as logs:
            refused = await reloader.reload("test")
        assert not refused.applied
        assert named in (refused.refused or "")
        assert [entry["log_level"] for entry in logs] == ["warning"]  # one line
        assert named in str(logs[0]["reason"])
    write(path, raw(concurrency=2, lease={"duration_s": 20}))
    refused = await reloader.reload("test")
    assert refused.refused == "restart-only: lease.duration_s"
    assert live.settings is in_force  # nothing of it applied, concurrency included
    assert live.last_refused is not None
    assert live.last_refused.reason == refused.refused
    write(path, raw(queues=[{"name": "top"}, {"name": "hi"}, {"name": "lo"}]))
    refused = await reloader.reload("test")
    assert refused.refused == f"restart-only: queues.top ({NOT_ADDABLE})"
    text = metrics.render().decode()
    assert total(text, "priority_pubsub_config_reloads_total", result="applied") == 1
    assert total(text, "priority_pubsub_config_reloads_total", result="refused") == 4


async def test_a_queue_is_added_at_the_driver_before_it_is_taken_from(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    write(path, raw())
    live, reloader, added = reloader_for(path, Metrics(), adds=True)
    write(path, raw(queues=[{"name": "hi"}, {"name": "top"}, {"name": "lo"}]))
    assert (await reloader.reload("test")).applied
    assert (added, live.names) == (["top"], ("hi", "top", "lo"))


async def test_the_watch_reloads_a_change_once_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    write(path, raw())
    live, reloader, _ = reloader_for(path, Metrics(), interval_s=0.05)
    watching = asyncio.create_task(reloader.watch())
    try:
        write(path, raw(scheduling="weighted"))
        for _ in range(100):
            if live.settings.scheduling == "weighted":
                break
            await asyncio.sleep(0.02)
        assert live.settings.scheduling == "weighted"
    finally:
        watching.cancel()


def test_check_reload_safe_sorts_a_change_as_the_sidecar_does(tmp_path: Path) -> None:
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    write(old, raw())
    write(new, raw(concurrency=6, server={"port": 1234},
                   queues=[{"name": "top"}, {"name": "hi"}, {"name": "lo"}]))
    refused = CliRunner().invoke(cli.app, ["check", "--reload-safe", str(old), str(new)])
    assert refused.exit_code == 1, refused.output
    assert refused.stdout.splitlines() == [
        "applied   concurrency", "applied   queues.top (added)",  # local adds queues
        "REFUSED   server.port (restart-only)"]
    assert "would refuse" in refused.stderr
    write(new, raw(concurrency=6))
    safe = CliRunner().invoke(cli.app, ["check", "--reload-safe", str(old), str(new)])
    assert (safe.exit_code, safe.stdout) == (0, "applied   concurrency\n")
    new.write_text("queues: [\n")
    invalid = CliRunner().invoke(cli.app, ["check", "--reload-safe", str(old), str(new)])
    assert invalid.exit_code == 2
    assert "cannot parse" in invalid.stderr


class HoldingWorker:
    """Each message stays at the app until the test lets it go."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.done: dict[str, asyncio.Event] = {}

    async def handle(self, message: Message, answered: Callable[[], None] = lambda: None
                     ) -> None:
        self.done[message.id] = asyncio.Event()
        self.started.append(message.id)
        await self.done[message.id].wait()
        answered()


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met within 2 s")


async def test_concurrency_grown_takes_at_once_and_shrunk_waits_below_it() -> None:
    """Through the app gate, as the sidecar composes it: 2 -> 3 takes a third message with
    nothing finished; 3 -> 1 takes nothing until none of the three is left at the app."""
    live = LiveSettings(validate_config({"queues": [{"name": "q"}], "concurrency": 2}))
    gate = AppGate(live, Metrics(), probe=NO_APP)
    await gate.probe_once()
    dispatcher, worker = FakeDispatcher(), HoldingWorker()
    receiver = Receiver(live, dispatcher, worker,  # type: ignore[arg-type]
                        DeliveryObserver(Metrics(), None, driver_type="fake"),
                        capacity=gate.capacity)
    gate.attach(receiver)
    for n in range(1, 6):
        dispatcher.waiting.put_nowait(queued(n))
    await receiver.start()
    try:
        await until(lambda: worker.started == ["m1", "m2"])
        await asyncio.sleep(0.05)
        assert worker.started == ["m1", "m2"]
        live.replace(validate_config({"queues": [{"name": "q"}], "concurrency": 3}))
        await until(lambda: len(worker.started) == 3)
        live.replace(validate_config({"queues": [{"name": "q"}], "concurrency": 1}))
        for name in ("m1", "m2"):
            worker.done[name].set()
            await asyncio.sleep(0.05)
            assert len(worker.started) == 3, name  # 2, then 1 at the app: not below 1
        worker.done["m3"].set()
        await until(lambda: len(worker.started) == 4)
    finally:
        for event in worker.done.values():
            event.set()
        await receiver.stop()
