"""The CLI as users run it: exit codes, one-line config errors, publish, stats, check, requeue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.helpers import publish, queue_rows
from tests.support.app import RecordingApp
from tests.support.servers import free_port
from tests.support.sidecar import cli, local_config, write_config

pytestmark = pytest.mark.local


@pytest.mark.parametrize(
    ("yaml_text", "env", "expected"),
    [
        ("queues: [{name: a}]\nconcurency: 3\n", {}, "concurency: unknown key"),
        ("queues: []\n", {}, "queues: "),
        ("queues: [{name: a}]\ndriver: {type: nosuch}\n", {}, "driver.type: unknown driver"),
        ("queues: [{name: a}]\ntransforms: [nosuch]\n", {}, "transforms.0: unknown transform"),
        ("queues: [{name: a}]\n", {"PRIORITY_PUBSUB_RETRY__MAX_ATTEMPTS": "0"},
         "retry.max_attempts: "),
        ("queues: [{name: a}\n", {}, "cannot parse"),
        ("queues: [{name: a, reserve: 2}, {name: b, reserve: 2}, {name: c}]\nconcurrency: 4\n",
         {}, "queues: reserves (a 2, b 2) must sum below concurrency 4"),
        ("queues: [{name: a}, {name: b, reserve: 1}]\n", {},
         "queues: a reserve on the lowest queue 'b' means nothing"),
    ],
)
def test_run_with_invalid_config_exits_2_with_one_line(
    tmp_path: Path, yaml_text: str, env: dict[str, str], expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    result = cli("run", config=path, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_run_with_missing_config_file_exits_2(tmp_path: Path) -> None:
    result = cli("run", config=tmp_path / "missing.yaml")
    assert result.returncode == 2
    assert "config file not found" in result.stderr


def test_publish_from_data_stdin_and_file_with_attributes(tmp_path: Path) -> None:
    config = write_config(tmp_path, local_config(tmp_path, "http://127.0.0.1:1"))
    result = cli("publish", "high", "--data", '{"a": 1}', "--attr", "tier=gold",
                 "--attr", "region=eu", "--count", "3", config=config)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 3
    assert cli("publish", "low", config=config, input_bytes=b"from stdin").returncode == 0
    body_file = tmp_path / "body.bin"
    body_file.write_bytes(b"\x00binary")
    assert cli("publish", "low", "--file", str(body_file), config=config).returncode == 0
    high = queue_rows(tmp_path / "queues.db", "high")
    assert [r["attributes"] for r in high] == [{"tier": "gold", "region": "eu"}] * 3
    assert [r["body"] for r in queue_rows(tmp_path / "queues.db", "low")] == [
        b"from stdin", b"\x00binary"]
    bad = cli("publish", "high", "--data", "x", "--attr", "novalue", config=config)
    assert bad.returncode == 2
    assert "--attr expects K=V" in bad.stderr


def test_publish_refuses_an_invalid_cloudevent_in_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, local_config(tmp_path, "http://127.0.0.1:1"))
    kind = "application/cloudevents+json; charset=utf-8"
    bad = {
        b'{"specversion": "1.0", "id": "1", "source": "s"}': "type",
        b'{"specversion": "0.9", "id": "1", "source": "s", "type": "t"}': "specversion",
        b"[1, 2]": "not an object",
        b"{not json": "not JSON",
    }
    for body, why in bad.items():
        result = cli("publish", "high", "--content-type", kind, config=config, input_bytes=body)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "not a valid CloudEvent" in result.stderr
        assert why in result.stderr
    good = b'{"specversion": "1.0", "id": "1", "source": "s", "type": "t", "data": {"a": 1}}'
    result = cli("publish", "high", "--content-type", kind, config=config, input_bytes=good)
    assert result.returncode == 0, result.stderr
    assert [r["body"] for r in queue_rows(tmp_path / "queues.db", "high")] == [good]  # only it
    plain = cli("publish", "high", "--content-type", "application/json", "--data", "[1]",
                config=config)  # fmt: skip
    assert plain.returncode == 0, plain.stderr


def test_publish_refuses_oversized_message_clearly(tmp_path: Path) -> None:
    config = local_config(tmp_path, "http://127.0.0.1:1")
    config["driver"]["max_message_bytes"] = 16
    result = cli("publish", "high", "--data", "x" * 17, config=write_config(tmp_path, config))
    assert result.returncode == 1
    assert "exceeds driver.max_message_bytes (16)" in result.stderr
    assert "Traceback" not in result.stderr


def test_stats_json_is_stable_and_counts(tmp_path: Path) -> None:
    config = write_config(tmp_path, local_config(tmp_path, "http://127.0.0.1:1"))
    publish(config, "high", "x", count=2)
    publish(config, "low", "y")
    result = cli("stats", "--json", config=config)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert list(report) == ["v", "driver", "queues", "dead_letter", "capacity_plan"]
    assert report["v"] == 1
    assert [(q["name"], q["priority"], q["visible"], q["in_flight"]) for q in report["queues"]] \
        == [("high", 0, 2, 0), ("normal", 1, 0, 0), ("low", 2, 1, 0)]
    assert list(report["queues"][0]) == ["name", "priority", "visible", "in_flight", "delayed",
                                         "oldest_age_s"]
    assert report["dead_letter"]["name"] == "dead"
    assert [(p["queue"], p["most_workers"]) for p in report["capacity_plan"]] == [
        ("high", 2), ("normal", 2), ("low", 2)]
    text = cli("stats", config=config)
    assert text.returncode == 0
    assert "high" in text.stdout
    assert "low: up to 2 workers" in text.stdout


def test_check_prints_the_capacity_plan(tmp_path: Path) -> None:
    config = local_config(tmp_path, "http://127.0.0.1:1", concurrency=4)
    config["queues"] = [{"name": "high", "reserve": 1, "max_concurrency": 2},
                        {"name": "normal", "reserve": 1}, {"name": "low", "max_wait_s": 600}]
    result = cli("check", "--offline", config=write_config(tmp_path, config))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["queues"][0]["reserve"] == 1
    plan = result.stderr.split("capacity plan: concurrency 4 (strict)\n")[1].splitlines()[:3]
    assert plan == [
        "  high: up to 2 workers (1 reserved for it; max_concurrency 2)",
        "  normal: up to 3 workers (1 reserved for it; 1 kept for higher queues)",
        "  low: up to 2 workers (2 kept for higher queues; served at least once per 600 s)",
    ]


def test_check_masks_secrets_and_reports_reachability(tmp_path: Path, app: RecordingApp) -> None:
    config = local_config(tmp_path, app.url)
    config["app"]["api_token"] = "tok-SECRET-123"
    good = cli("check", config=write_config(tmp_path, config))
    assert good.returncode == 0, good.stderr
    assert "tok-SECRET-123" not in good.stdout + good.stderr
    assert json.loads(good.stdout)["app"]["api_token"] == "**********"
    config["app"]["url"] = f"http://127.0.0.1:{free_port()}"
    bad = cli("check", config=write_config(tmp_path, config, "down.yaml"))
    assert bad.returncode == 1
    assert "unreachable" in bad.stderr


def test_requeue_moves_exactly_n_and_records_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, local_config(tmp_path, "http://127.0.0.1:1"))
    publish(config, "dead", "poison", count=5, attributes={"dead_letter_reason": "x", "k": "v"})
    result = cli("requeue", "--from", "dead", "--to", "low", "--limit", "3", config=config)
    assert result.returncode == 0, result.stderr
    assert "requeued 3 message(s)" in result.stdout
    moved = queue_rows(tmp_path / "queues.db", "low")
    assert len(moved) == 3
    assert len(queue_rows(tmp_path / "queues.db", "dead")) == 2
    assert all(r["attributes"] == {"k": "v", "requeued_from": "dead"} for r in moved)
    assert all(r["attempts"] == 0 for r in moved)


def test_demo_serves_the_burst_in_strict_priority_order() -> None:
    result = cli("demo", "--messages", "12", "--task-ms", "20", timeout_s=120)
    assert result.returncode == 0, result.stderr
    order = result.stdout.split("Service order by priority (0 = high):")[1].split()[0]
    assert sorted(order) == list(order)  # 0s, then 1s, then 2s (4 workers: no ties to break)
    assert order.count("0") == order.count("1") == order.count("2") == 4


@pytest.mark.parametrize(
    ("driver", "lease_s", "expected"),
    [
        ({"type": "gcp_pubsub", "project": "p"}, 601,
         "driver: lease.duration_s: gcp_pubsub ack deadlines are at most 600 s"),
        ({"type": "gcp_pubsub"}, 60, "driver: project: 'a' is a bare id"),
        ({"type": "sqs", "queue_urls": {"nosuch": "http://127.0.0.1:1/0/nosuch"}}, 60,
         "driver: queue_urls: not configured queues: ['nosuch']"),
    ],
)
def test_driver_cross_field_checks_fail_check_offline_with_one_line(
    tmp_path: Path, driver: dict[str, object], lease_s: int, expected: str
) -> None:
    config = write_config(tmp_path, {"queues": [{"name": "a"}], "driver": driver,
                                     "lease": {"duration_s": lease_s}})
    result = cli("check", "--offline", config=config, env={"GOOGLE_CLOUD_PROJECT": ""})
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert expected in line, line


def test_readme_hand_run_on_the_repo_config_with_the_sample_app(tmp_path: Path) -> None:
    """The getting-started steps (docs/getting-started.md): the sample app on config.yaml's
    port, the sidecar on the repo's own config.yaml (paths and ports moved into tmp_path), a
    publish, delivered and acked."""
    import subprocess
    import sys

    import yaml

    from tests.e2e.helpers import journal_records, wait_until
    from tests.support.sidecar import SidecarProcess

    app_port = free_port()
    config = yaml.safe_load((Path(__file__).parents[2] / "config.yaml").read_text())
    config["driver"]["path"] = str(tmp_path / "queues.db")
    config["journal"]["path"] = str(tmp_path / "journal")
    config["app"]["url"] = f"http://127.0.0.1:{app_port}/tasks"
    app = subprocess.Popen([sys.executable, "-m", "priority_pubsub.commands.sample_app",
                            "--port", str(app_port), "--task-ms", "10"])
    sidecar = SidecarProcess(tmp_path, config)
    try:
        sidecar.wait_ready()
        config_path = write_config(tmp_path, config, "published.yaml")
        assert cli("publish", "tasks-high", "--data", '{"job": 1}',
                   config=config_path).returncode == 0
        wait_until(lambda: [r["outcome"] for r in journal_records(tmp_path / "journal")]
                   == ["ack"])
    finally:
        assert sidecar.stop() == 0
        app.terminate()
        app.wait(10)
