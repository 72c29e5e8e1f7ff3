"""The monitor page in a real Chromium, against a real sidecar (local driver) and a real app.

One Chromium for the session (``tests.support.browser``), a fresh page and sidecar per test.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from priority_pubsub.core.message import now_ms
from tests.e2e.helpers import journal_records, publish, queue_rows, samples, total, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, local_config, start_sidecar, write_config
from tests.support.topologies.azure_servicebus import ServiceBusTopology
from tests.support.topologies.base import Topology, topology_config
from tests.support.topologies.rabbitmq import RabbitTopology
from tests.support.topologies.redis import RedisTopology

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.local
ADMIN = "admin-token-for-tests"
FAST = {"refresh_s": 0.3, "sample_s": 0.5}


class Running:
    """A sidecar with its config, and what a test asks of it."""

    def __init__(self, directory: Path, sidecar: SidecarProcess, config_path: Path) -> None:
        self.directory = directory
        self.sidecar = sidecar
        self.config_path = config_path

    @property
    def url(self) -> str:
        return self.sidecar.ops_url

    def state(self, **query: str) -> dict[str, Any]:
        answer = httpx.get(f"{self.url}/api/v1/state", params=query, timeout=5)
        assert answer.status_code == 200, answer.text
        value: dict[str, Any] = answer.json()
        return value

    def queue(self, name: str) -> dict[str, Any]:
        return next(q for q in self.state()["queues"] if q["name"] == name)

    def publish(self, queue: str, data: str, count: int = 1) -> list[str]:
        return publish_beside_playwright(self.config_path, queue, data, count)


def publish_beside_playwright(path: Path, queue: str, data: str, count: int = 1) -> list[str]:
    """``publish`` runs its own event loop: in a thread, as Playwright's runs in this one."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(publish, path, queue, json.dumps(data), count).result()


@pytest.fixture
def start(tmp_path: Path, app: RecordingApp) -> Iterator[Any]:
    started: list[SidecarProcess] = []

    def run(monitor: dict[str, Any], **overrides: Any) -> Running:
        config = local_config(tmp_path, app.url, monitor={**FAST, **monitor},
                              server={"host": "127.0.0.1", "port": 0, "depth_interval_s": 0.3},
                              **overrides)
        path = write_config(tmp_path, config)
        publish_beside_playwright(path, "high", "warm-up")  # creates the queue file
        sidecar = SidecarProcess(tmp_path, config)
        started.append(sidecar)
        sidecar.wait_ready()
        app.wait_for(1)
        return Running(tmp_path, sidecar, path)

    yield run
    for sidecar in started:
        sidecar.stop()


@pytest.fixture
def page(chromium: Browser) -> Iterator[Page]:
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    opened.on("dialog", lambda dialog: dialog.accept())  # the page confirms bulk actions
    yield opened
    context.close()


def use_token(page: Page, token: str) -> None:
    page.fill("#admin-token", token)
    page.click("#token-form button")
    page.wait_for_selector("#token-state:has-text('token set')")


def data_of(received: Received) -> Any:
    return received.event["data"]


def test_numbers_change_under_load_without_a_reload(
    start: Any, app: RecordingApp, page: Page
) -> None:
    app.behaviour = lambda _: Reply(delay_s=0.15)
    running = start({}, concurrency=2)
    page.goto(f"{running.url}/monitor")
    page.evaluate("window.__sameDocument = true")
    first = page.inner_text("tr[data-queue='high'] td.totals")
    running.publish("high", "load", count=60)
    seen_in_flight = set()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(seen_in_flight) < 3:
        seen_in_flight.add(page.inner_text("#in-flight h2"))
        time.sleep(0.1)
    wait_until(lambda: page.inner_text("tr[data-queue='high'] td.totals") != first, timeout_s=10)
    assert len(seen_in_flight) >= 2, seen_in_flight  # e.g. "In flight (2)" then "(0)"
    assert page.evaluate("window.__sameDocument") is True  # swapped in place, never reloaded
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1


def test_requeue_removes_the_row_and_the_message_reaches_the_app_once(
    start: Any, app: RecordingApp, page: Page
) -> None:
    calls: Counter[str] = Counter()

    def fail_first_time(received: Received) -> Reply:
        data = data_of(received)
        calls[data] += 1
        return Reply(400 if data == "fatal-once" and calls[data] == 1 else 200)

    app.behaviour = fail_first_time
    running = start({"admin_token": ADMIN})
    [message_id] = running.publish("low", "fatal-once")
    page.goto(f"{running.url}/monitor")
    row = page.locator(f"tr.dead[data-id='{message_id}']")
    row.wait_for()
    use_token(page, ADMIN)
    row.locator("button[data-action='requeue']").click()
    row.wait_for(state="detached")
    wait_until(lambda: calls["fatal-once"] == 2)
    time.sleep(1.5)  # a second redelivery would have come by now
    assert calls["fatal-once"] == 2  # the dead-lettered attempt, then the requeued one: once
    assert queue_rows(running.directory / "queues.db", "dead") == []
    # requeue publishes a copy (a new id, ``requeued_from``), as the CLI's requeue does
    outcomes = [(r["message_id"] == message_id, r["outcome"])
                for r in journal_records(running.directory / "journal") if r["queue"] == "low"]
    assert outcomes == [(True, "dead"), (False, "ack")]
    admin = [json.loads(line) for line in
             (running.directory / "journal" / "admin.jsonl").read_text().splitlines()]
    assert [(a["action"], a["count"], a["ids"]) for a in admin] == [
        ("requeue", 1, [message_id])]


def test_pause_stops_deliveries_from_that_queue_only(
    start: Any, app: RecordingApp, page: Page
) -> None:
    running = start({"admin_token": ADMIN})
    page.goto(f"{running.url}/monitor")
    use_token(page, ADMIN)
    page.click("tr[data-queue='normal'] button[data-action='pause']")
    page.wait_for_selector("tr[data-queue='normal'] button[data-action='resume']")
    before = len(app.received)
    running.publish("normal", "held", count=3)
    running.publish("high", "served", count=3)
    running.publish("low", "served", count=3)
    wait_until(lambda: len(app.received) == before + 6)
    time.sleep(1)
    assert Counter(data_of(r) for r in app.received[before:]) == {"served": 6}
    assert running.queue("normal")["broker"]["visible"] == 3
    assert total(running.sidecar.metrics(), "priority_pubsub_queue_paused",
                 queue="normal") == 1
    page.click("tr[data-queue='normal'] button[data-action='resume']")
    wait_until(lambda: len(app.received) == before + 9)
    assert Counter(data_of(r) for r in app.received[before:]) == {"served": 6, "held": 3}


def test_drain_ends_with_nothing_in_flight(start: Any, app: RecordingApp, page: Page) -> None:
    # long enough that the page and /readyz see "draining" on a loaded machine too
    app.behaviour = lambda r: Reply(delay_s=4 if data_of(r) == "slow" else 0)
    running = start({"admin_token": ADMIN}, concurrency=2)
    before = len(app.received)
    running.publish("high", "slow", count=5)
    page.goto(f"{running.url}/monitor")
    use_token(page, ADMIN)
    page.wait_for_selector("#in-flight h2:has-text('In flight (2)')")
    page.click("button[data-action='drain']")
    page.wait_for_selector("#drain-state:has-text('draining for')")
    assert "draining by an operator" in httpx.get(f"{running.url}/readyz").json()["reason"]
    page.wait_for_selector("#drain-state:has-text('drained for')", timeout=10_000)
    page.wait_for_selector("#in-flight:has-text('nothing in flight')")
    readiness = httpx.get(f"{running.url}/readyz")
    assert readiness.status_code == 503
    assert readiness.json()["reason"] == "drained by an operator (0 in flight)"
    time.sleep(1)
    assert len(app.received) - before == 2  # the two that ran; nothing new taken
    assert running.queue("high")["broker"]["visible"] == 3
    assert total(running.sidecar.metrics(), "priority_pubsub_draining") == 1


def test_read_only_shows_no_buttons_and_a_post_gets_405(start: Any, page: Page) -> None:
    running = start({}, queues=[{"name": "high", "reserve": 1}, {"name": "normal"},
                                {"name": "low", "max_concurrency": 1}])
    page.goto(f"{running.url}/monitor")
    page.wait_for_selector("#queues")
    plan = page.inner_text("#overview tr:has(th:text('reserve plan')) td")
    assert plan.splitlines() == ["high: 0 in flight (1 reserved)", "normal: 0 in flight",
                                 "low: 0 in flight (at most 1)"]
    assert [(p["queue"], p["reserve"], p["max_concurrency"])
            for p in running.state()["overview"]["reserve"]] == [
        ("high", 1, None), ("normal", 0, None), ("low", 0, 1)]
    assert page.locator("button.act").count() == 0
    assert page.locator("#token-form").count() == 0
    status = page.evaluate("fetch('/api/v1/drain', {method: 'POST'}).then(r => r.status)")
    assert status == 405
    assert running.state()["overview"]["drain"] is None


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("not-the-token", 401),
                                             (ADMIN, 403)])
def test_a_cross_site_post_meets_401_then_403(
    start: Any, page: Page, token: str | None, status: int
) -> None:
    """The issue's order: 405 (read-only), then 401 (missing or wrong token), then 403
    (cross-site). A forged form of another site carries no bearer token: 401; one that holds
    the right token (added here by Playwright, as no page of another site can) still 403."""
    running = start({"admin_token": ADMIN})
    target = f"{running.url}/api/v1/drain"
    # a page of another site with a form aimed at the monitor: what a forged request is
    page.route("http://attacker.example/", lambda route: route.fulfill(
        content_type="text/html",
        body=f'<form method="post" action="{target}"><button id="go">go</button></form>'))
    if token is not None:
        page.route(target, lambda route: route.continue_(headers={
            **route.request.all_headers(), "authorization": f"Bearer {token}"}))
    page.goto("http://attacker.example/")
    with page.expect_response(target) as answer:
        page.click("#go")
    assert answer.value.status == status
    sent = answer.value.request.all_headers()
    assert sent["origin"] == "http://attacker.example"
    assert ("authorization" in sent) is (token is not None)
    assert running.state()["overview"]["drain"] is None
    assert "not-the-token" not in running.sidecar.logs()


def test_a_wrong_token_gets_401_and_changes_nothing(start: Any, page: Page) -> None:
    running = start({"admin_token": ADMIN})
    page.goto(f"{running.url}/monitor")
    use_token(page, "not-the-token")
    with page.expect_response(f"{running.url}/api/v1/queues/high/pause") as answer:
        page.click("tr[data-queue='high'] button[data-action='pause']")
    assert answer.value.status == 401
    page.wait_for_selector("#message:has-text('missing or wrong admin token')")
    assert running.queue("high")["paused"] is None
    assert "not-the-token" not in running.sidecar.logs()


def test_page_api_metrics_and_journal_agree(start: Any, app: RecordingApp, page: Page) -> None:
    app.behaviour = lambda r: Reply(400 if data_of(r) == "fatal" else 200)
    running = start({"admin_token": ADMIN})
    running.publish("high", "ok", count=4)
    running.publish("low", "fatal", count=3)
    wait_until(lambda: len(journal_records(running.directory / "journal")) == 8)
    page.goto(f"{running.url}/monitor")
    use_token(page, ADMIN)
    page.click("tr[data-queue='low'] button[data-action='pause']")
    page.wait_for_selector("tr[data-queue='low'] button[data-action='resume']")
    page.reload()

    state = running.state()
    metrics = running.sidecar.metrics()
    journal = journal_records(running.directory / "journal")
    by_outcome = Counter((r["queue"], r["outcome"]) for r in journal)
    for queue in state["queues"]:
        name, since_start = queue["name"], queue["since_start"]
        expected = {"delivered": total(metrics, "priority_pubsub_messages_received_total",
                                       queue=name)}
        for outcome in ("ack", "retry", "dead"):
            expected[outcome] = total(metrics, "priority_pubsub_messages_settled_total",
                                      queue=name, outcome=outcome)
            assert by_outcome[(name, outcome)] == expected[outcome]
        assert since_start == expected
        cell = page.inner_text(f"tr[data-queue='{name}'] td.totals")
        assert cell == " / ".join(f"{expected[k]:g}" for k in ("delivered", "ack", "retry",
                                                                  "dead"))
    dead_in_journal = {r["message_id"] for r in journal if r["outcome"] == "dead"}
    assert {d["id"] for d in state["dead_letters"]["items"]} == dead_in_journal
    page_ids = page.eval_on_selector_all("tr.dead", "rows => rows.map(r => r.dataset.id)")
    assert set(page_ids) == dead_in_journal
    paused = samples(metrics, "priority_pubsub_queue_paused")
    assert {dict(k)["queue"]: v for k, v in paused.items()} == {
        q["name"]: float(q["paused"] is not None) for q in state["queues"]}
    assert page.locator("tr[data-queue='low'] .state.paused").count() == 1
    admin = (running.directory / "journal" / "admin.jsonl").read_text().splitlines()
    assert [json.loads(line)["action"] for line in admin] == ["pause"]


def test_hostile_ids_reasons_and_filters_are_escaped(start: Any, page: Page) -> None:
    running = start({})
    hostile_id = "<img src=x onerror=\"window.__pwned=1\">"
    hostile_reason = ("<script>window.__pwned=2</script> failed at "
                      "https://user:hunter2@db.example/x")
    insert_dead_letter(running.directory / "queues.db", hostile_id, hostile_reason)
    page.goto(f"{running.url}/monitor?reason=%3Cscript%3E")
    row = page.locator("tr.dead")
    row.wait_for()
    time.sleep(1)  # a few live refreshes swapped in
    assert page.evaluate("window.__pwned") is None
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == hostile_id
    assert cells[2].startswith("<script>window.__pwned=2</script> failed at")
    assert "hunter2" not in page.content()
    assert page.locator("#dead-letters script, #dead-letters img").count() == 0
    page.goto(f"{running.url}/monitor?id=%22%3E%3Cb%3Ex")  # a filter breaking out of value=""
    page.wait_for_selector("#dead-letters:has-text('no dead letters')")
    assert page.input_value("form.filter input[name='id']") == "\"><b>x"
    assert page.locator("form.filter b").count() == 0


def insert_dead_letter(db: Path, message_id: str, reason: str) -> None:
    attributes = json.dumps({"dead_letter_reason": reason, "dead_letter_source": "low"})
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(
                "INSERT INTO messages (id, queue, body, attributes, enqueued_ms, visible_at_ms) "
                "VALUES (?, 'dead', x'7b7d', ?, ?, ?)", (message_id, attributes, now_ms(),
                                                         now_ms()))
    finally:
        conn.close()


def test_a_read_token_guards_the_page_and_the_api(start: Any, chromium: Browser) -> None:
    running = start({"read_token": "reader-secret"})
    refused = httpx.get(f"{running.url}/api/v1/state")
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Basic")
    assert httpx.get(f"{running.url}/monitor",
                     headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{running.url}/api/v1/state",
                     headers={"Authorization": "Bearer reader-secret"}).status_code == 200
    assert httpx.get(f"{running.url}/metrics").status_code == 200  # the ops routes stay open
    context = chromium.new_context(http_credentials={"username": "", "password": "reader-secret"})
    try:
        page = context.new_page()
        page.goto(f"{running.url}/monitor")
        page.evaluate("window.__sameDocument = true")
        with page.expect_response(f"{running.url}/monitor/live") as live:
            pass  # the script's next refresh, with the browser's stored credentials
        assert live.value.status == 200
        assert page.evaluate("window.__sameDocument") is True
    finally:
        context.close()


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis),
                        pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)])
def broker(request: pytest.FixtureRequest) -> Topology:
    """Redis Streams and RabbitMQ: brokers whose dead-letter queue the page lists itself and
    acts on (``browse`` and ``receive_ids``)."""
    topology: Topology = request.getfixturevalue(f"{request.param}_topology")
    return topology


def dead_letters_held(broker: Topology) -> int:
    """What the broker's dead-letter queue holds, read beside the sidecar."""
    if isinstance(broker, RedisTopology):
        return int(broker.raw.xlen(broker.dead))
    assert isinstance(broker, RabbitTopology)
    return broker.count(broker.dead)  # ready messages: a browse holds them a moment


def test_dead_letters_of_the_broker_are_requeued_and_deleted_from_the_page(
    tmp_path: Path, app: RecordingApp, page: Page, broker: Topology
) -> None:
    calls: Counter[str] = Counter()

    def behave(received: Received) -> Reply:
        data = data_of(received)
        calls[data] += 1
        failing = (data == "fatal-once" and calls[data] == 1) or (
            data == "doomed" and calls[data] <= 3)
        return Reply(400 if failing else 200)

    app.behaviour = behave
    high, low = broker.queue("high"), broker.queue("low")
    config = topology_config(broker, tmp_path, app.url, [high, low], concurrency=2,
                             monitor={**FAST, "admin_token": ADMIN})
    config_path = write_config(tmp_path, config, "publisher.yaml")
    sidecar = start_sidecar(tmp_path, config)
    try:
        publish_beside_playwright(config_path, high, "fatal-once")
        publish_beside_playwright(config_path, low, "doomed", count=3)
        page.goto(f"{sidecar.ops_url}/monitor")
        page.wait_for_selector("#dead-letters:has-text('Listed from the dead-letter queue')")
        wait_until(lambda: page.locator("tr.dead").count() == 4, timeout_s=15)
        assert dead_letters_held(broker) == 4
        use_token(page, ADMIN)

        # requeue one: its row goes, the app gets it once more (and takes it this time)
        fatal = page.locator(f"tr.dead:has(td:text-is('{high}'))")
        fatal.locator("button[data-action='requeue']").click()
        fatal.wait_for(state="detached")
        wait_until(lambda: calls["fatal-once"] == 2)
        # delete one: gone from the page and from the broker's dead-letter queue
        deleted_id = page.locator("tr.dead").first.get_attribute("data-id")
        deleted = page.locator(f"tr.dead[data-id='{deleted_id}']")  # rows are swapped live
        deleted.locator("button[data-action='delete']").click()
        deleted.wait_for(state="detached")
        wait_until(lambda: dead_letters_held(broker) == 2)
        assert calls["doomed"] == 3
        # the filtered set: every dead letter of `low`, back to `low`, each taken once
        page.goto(f"{sidecar.ops_url}/monitor?queue={low}")
        wait_until(lambda: page.locator("tr.dead").count() == 2)
        page.click("button[data-action='requeue-filtered']")
        page.wait_for_selector("#dead-letters:has-text('no dead letters')")
        wait_until(lambda: calls["doomed"] == 5)
        time.sleep(1.5)  # a second delivery of any of them would have come by now
        assert calls == {"fatal-once": 2, "doomed": 5}
        assert dead_letters_held(broker) == 0
        assert broker.dead_letters() == []
    finally:
        assert sidecar.stop() == 0
    admin = [json.loads(line) for line in (tmp_path / "journal" / "admin.jsonl")
             .read_text().splitlines()]
    assert [(a["action"], a["asked"], a["count"]) for a in admin] == [
        ("requeue", 1, 1), ("delete", 1, 1), ("requeue", 2, 2)]
    assert admin[1]["ids"] == [deleted_id]
    outcomes = Counter(r["outcome"] for r in journal_records(tmp_path / "journal"))
    assert outcomes == {"dead": 4, "ack": 3}


@pytest.mark.azure_servicebus
def test_service_bus_dead_letters_are_peeked_requeued_and_deleted_from_the_page(
    tmp_path: Path, app: RecordingApp, page: Page, azure_servicebus_topology: ServiceBusTopology
) -> None:
    """Service Bus: the list is every consumed queue's own ``$DeadLetterQueue``, peeked
    (nothing locked), so it holds what another replica dead-lettered too; requeue sends a
    letter back to the queue whose dead-letter queue held it, delete completes it."""
    bus = azure_servicebus_topology
    high, low = bus.queue("high"), bus.queue("low")
    bus.publish(high, b'"elsewhere"')
    with bus.client.get_queue_receiver(high, prefetch_count=0) as receiver:
        [foreign] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        receiver.dead_letter_message(foreign, reason="<b>dead-lettered by another replica</b>",
                                     error_description="not this one")
    calls: Counter[str] = Counter()

    def behave(received: Received) -> Reply:
        calls[data_of(received)] += 1
        return Reply(400 if calls["fatal-once"] == 1 else 200)

    app.behaviour = behave
    config = topology_config(bus, tmp_path, app.url, [high, low],
                             monitor={**FAST, "admin_token": ADMIN})
    sidecar = start_sidecar(tmp_path, config, ready_timeout_s=30)
    try:
        bus.publish(low, b'"fatal-once"')
        page.goto(f"{sidecar.ops_url}/monitor")
        wait_until(lambda: page.locator("tr.dead").count() == 2, timeout_s=20)
        origin = page.inner_text("#dead-letters p.muted")
        assert origin == (f"Listed from the dead-letter queues {high}/$DeadLetterQueue, "
                          f"{low}/$DeadLetterQueue as the broker holds them (every replica's "
                          "dead letters).")
        rows = sorted(tuple(r.locator("td").all_inner_texts()[1:3])
                      for r in page.locator("tr.dead").all())
        assert rows == sorted([(high, "<b>dead-lettered by another replica</b>"),
                               (low, "app returned fatal status 400")])
        assert page.locator("#dead-letters b").count() == 0  # escaped
        state = httpx.get(f"{sidecar.ops_url}/api/v1/state", timeout=5).json()["dead_letters"]
        assert (state["source"], state["actions"]) == ("broker", True)
        for queue in (high, low):  # peeked, not taken: nothing locked, all still there
            counts = bus.broker.counts(f"{queue}/$deadletterqueue")
            assert (counts.active, counts.locked) == (1, 0)
        use_token(page, ADMIN)
        fatal = page.locator(f"tr.dead:has(td:text-is('{low}'))")
        fatal.locator("button[data-action='requeue']").click()
        fatal.wait_for(state="detached")
        wait_until(lambda: calls["fatal-once"] == 2)
        elsewhere = page.locator(f"tr.dead:has(td:text-is('{high}'))")
        elsewhere.locator("button[data-action='delete']").click()
        elsewhere.wait_for(state="detached")
        page.wait_for_selector("#dead-letters:has-text('no dead letters')")
        time.sleep(1.5)  # a second delivery would have come by now
        assert calls == {"fatal-once": 2}
        for queue in (high, low):
            counts = bus.broker.counts(f"{queue}/$deadletterqueue")
            assert (counts.active, counts.locked) == (0, 0)
    finally:
        assert sidecar.stop() == 0
    admin = [json.loads(line) for line in (tmp_path / "journal" / "admin.jsonl")
             .read_text().splitlines()]
    assert [(a["action"], a["count"]) for a in admin] == [("requeue", 1), ("delete", 1)]


@pytest.mark.parametrize(("settle", "outcome"), [("retry", "retry"),
                                                 ("dead_letter", "dead"), ("drop", "drop")])
def test_cancel_a_running_task_settles_it_as_chosen(
    start: Any, app: RecordingApp, page: Page, settle: str, outcome: str
) -> None:
    """A task the app would work on for a minute, cancelled from the page:
    the app sees its connection closed at once, the worker is free for the next message, the
    message is retried, dead-lettered or dropped as chosen, and the journal and the admin
    journal say so (the reason; the client and the time)."""
    attempts: Counter[str] = Counter()

    def long_then_quick(received: Received) -> Reply:
        data = data_of(received)
        attempts[data] += 1
        # a minute's task, as long as the sidecar keeps the connection open
        return Reply(until_closed=True) if data == "long" and attempts[data] == 1 else Reply()

    app.behaviour = long_then_quick
    running = start({"admin_token": ADMIN}, concurrency=1)
    [message_id] = running.publish("high", "long")
    page.goto(f"{running.url}/monitor")
    use_token(page, ADMIN)
    row = page.locator(f"#in-flight tr.held[data-id='{message_id}']")
    row.wait_for()
    running.publish("low", "next")  # waits for the one worker
    clicked_ms = now_ms()
    row.locator(f"button[data-action='cancel'][data-settle='{settle}']").click()
    wait_until(lambda: len(app.closed) == 1, timeout_s=10)
    assert app.closed[0].request.event["data"] == "long"
    assert app.closed[0].at * 1000 - clicked_ms < 5000  # at once, not after a minute
    wait_until(lambda: attempts["next"] == 1, timeout_s=10)  # the worker was freed
    records = journal_records(running.directory / "journal")
    cancelled = [r for r in records if r["message_id"] == message_id]
    assert [(r["outcome"], r["reason"]) for r in cancelled][:1] == [
        (outcome, "cancelled by operator")]
    if settle == "retry":  # delivered again later, and answered then
        wait_until(lambda: attempts["long"] == 2, timeout_s=10)
    else:
        time.sleep(1.5)  # a retry (0.2 s backoff) would have come by now
        assert attempts["long"] == 1
    dead = queue_rows(running.directory / "queues.db", "dead")
    assert len(dead) == (1 if settle == "dead_letter" else 0)
    admin = [json.loads(line) for line in
             (running.directory / "journal" / "admin.jsonl").read_text().splitlines()]
    assert [(a["action"], a["id"], a["settle"], a["cancelled"], a["client"]) for a in admin] == [
        ("cancel", message_id, settle, True, "127.0.0.1")]
    assert clicked_ms <= admin[0]["at_ms"] <= now_ms()


def test_cancel_through_the_api_answers_404_for_what_is_not_at_the_app(
    start: Any, app: RecordingApp
) -> None:
    running = start({"admin_token": ADMIN})
    headers = {"Authorization": f"Bearer {ADMIN}"}
    url = f"{running.url}/api/v1/in-flight/nothing-here/cancel"
    assert httpx.post(url, headers=headers, json={"settle": "drop"}).status_code == 404
    assert httpx.post(url, headers=headers, json={"settle": "later"}).status_code == 400
    assert httpx.post(url, json={"settle": "drop"}).status_code == 401  # the admin token


def promote_from_the_page(page: Page, url: str, low: str, high: str, row: int) -> str:
    """List what waits in ``low`` (five messages), promote the ``row``-th to ``high`` from
    the page; its id, once its row is gone."""
    page.goto(f"{url}/monitor?waiting={low}")
    use_token(page, ADMIN)
    rows = page.locator("#waiting tr.waiting")
    wait_until(lambda: rows.count() == 5, timeout_s=15)
    chosen = rows.nth(row).get_attribute("data-id")
    assert chosen is not None
    promoted = page.locator(f"#waiting tr.waiting[data-id='{chosen}']")
    promoted.locator(f"button[data-action='promote'][data-to='{high}']").click()
    promoted.wait_for(state="detached")
    return chosen


def promote_api(url: str, message_id: str, queue: str, to: str) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/waiting/{message_id}/promote", json={"queue": queue,
                      "to": to}, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)


def blocked_then_quick(app: RecordingApp) -> Counter[str]:
    """The app holds "blocker" 6 s (the one worker busy while the page acts), answers the
    rest at once; how often it saw each."""
    seen: Counter[str] = Counter()

    def behave(received: Received) -> Reply:
        data = data_of(received)
        seen[data] += 1
        return Reply(delay_s=6 if data == "blocker" else 0)

    app.behaviour = behave
    return seen


def after_the_blocker(app: RecordingApp) -> list[str]:
    order = [str(data_of(r)) for r in app.received]
    return order[order.index("blocker") + 1:]


def test_promote_a_waiting_message_on_local(start: Any, app: RecordingApp,
                                            page: Page) -> None:
    """A waiting low message promoted to high from the page is delivered
    before the rest of the low backlog, once; one a worker took meanwhile answers 409."""
    seen = blocked_then_quick(app)
    running = start({"admin_token": ADMIN}, concurrency=1)
    [blocker] = running.publish("normal", "blocker")
    wait_until(lambda: seen["blocker"] == 1)
    ids = [running.publish("low", f"low-{n}")[0] for n in range(5)]
    chosen = promote_from_the_page(page, running.url, "low", "high", 3)
    assert chosen == ids[3]
    taken = promote_api(running.url, blocker, "normal", "high")  # at the app: not waiting
    assert taken.status_code == 409, taken.text
    assert "not waiting" in taken.json()["error"]
    wait_until(lambda: sum(seen[f"low-{n}"] for n in range(5)) == 5, timeout_s=20)
    time.sleep(1)  # a second copy would have come by now
    assert after_the_blocker(app) == ["low-3", "low-0", "low-1", "low-2", "low-4"]
    assert seen["low-3"] == 1
    assert seen["blocker"] == 1
    admin = [json.loads(line) for line in
             (running.directory / "journal" / "admin.jsonl").read_text().splitlines()]
    assert [(a["action"], a["id"], a["queue"], a["to"], a["client"]) for a in admin] == [
        ("promote", ids[3], "low", "high", "127.0.0.1")]


@pytest.mark.redis
def test_promote_on_redis_and_409_with_a_second_consumer_group(
    tmp_path: Path, app: RecordingApp, page: Page, redis_topology: RedisTopology
) -> None:
    seen = blocked_then_quick(app)
    broker = redis_topology
    high, normal, low = broker.queue("high"), broker.queue("normal"), broker.queue("low")
    config = topology_config(broker, tmp_path, app.url, [high, normal, low], concurrency=1,
                             monitor={**FAST, "admin_token": ADMIN})
    sidecar = start_sidecar(tmp_path, config)
    try:
        broker.publish(normal, json.dumps("blocker").encode())
        wait_until(lambda: seen["blocker"] == 1)
        for n in range(5):
            broker.publish(low, json.dumps(f"low-{n}").encode())
        promote_from_the_page(page, sidecar.ops_url, low, high, 3)
        [blocker_id] = [i.decode() for i, _ in broker.raw.xrange(normal)]
        taken = promote_api(sidecar.ops_url, blocker_id, normal, high)  # the group has it
        assert taken.status_code == 409, taken.text
        wait_until(lambda: sum(seen[f"low-{n}"] for n in range(5)) == 5, timeout_s=20)
        time.sleep(1)
        assert after_the_blocker(app) == ["low-3", "low-0", "low-1", "low-2", "low-4"]
        assert max(seen.values()) == 1  # nothing twice
        # a second group reading the stream: an entry taken out would be gone for it too
        broker.raw.xgroup_create(low, "another-reader", id="$")
        broker.publish(normal, json.dumps("blocker").encode())
        wait_until(lambda: seen["blocker"] == 2)
        broker.publish(low, json.dumps("late").encode())
        late = [i.decode() for i, _ in broker.raw.xrange(low)][-1]
        refused = promote_api(sidecar.ops_url, late, low, high)
        assert refused.status_code == 409, refused.text
        assert "another consumer group" in refused.json()["error"]
        wait_until(lambda: seen["late"] == 1, timeout_s=20)
    finally:
        assert sidecar.stop() == 0


@pytest.mark.sqs
def test_sqs_cannot_promote_no_button_and_409(
    tmp_path: Path, app: RecordingApp, page: Page, sqs_topology: Topology
) -> None:
    high, low = sqs_topology.queue("high", lease_s=30), sqs_topology.queue("low", lease_s=30)
    config = topology_config(sqs_topology, tmp_path, app.url, [high, low],
                             monitor={**FAST, "admin_token": ADMIN})
    sidecar = start_sidecar(tmp_path, config)
    try:
        page.goto(f"{sidecar.ops_url}/monitor?waiting={low}")
        page.wait_for_selector("#waiting:has-text('Cannot list or promote here')")
        assert page.locator("a.waiting-link").count() == 0
        assert page.locator("button[data-action='promote']").count() == 0
        refused = promote_api(sidecar.ops_url, "any-id", low, high)
        assert refused.status_code == 409, refused.text
        assert "cannot address one waiting message" in refused.json()["error"]
    finally:
        assert sidecar.stop() == 0
