"""Priorities end to end: the real CLI against a real HTTP app on the local driver."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.helpers import publish, queue_rows
from tests.support.app import RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = pytest.mark.local


def test_strict_serves_every_high_message_before_lower_ones(
    tmp_path: Path, app: RecordingApp
) -> None:
    app.behaviour = lambda _: Reply(delay_s=0.02)
    config = local_config(tmp_path, app.url, concurrency=2)
    config_path = write_config(tmp_path, config)
    for queue in ("low", "normal", "high"):  # lowest published first: order must not matter
        publish(config_path, queue, f'{{"q": "{queue}"}}', count=10)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        received = app.wait_for(30)
    finally:
        assert sidecar.stop() == 0
    order = [r.event["queue"] for r in received]
    concurrency = config["concurrency"]
    # Strict: all 10 high first, then normal, then low (boundary effects at most `concurrency`).
    assert Counter(order[:10 - concurrency]) == {"high": 10 - concurrency}
    assert order.index("normal") >= 10 - concurrency
    assert order.index("low") >= 20 - concurrency
    assert [r.event["priority"] for r in received][:8] == [0] * 8


def test_weighted_shares_follow_weights_under_saturation(
    tmp_path: Path, app: RecordingApp
) -> None:
    config = local_config(
        tmp_path, app.url, concurrency=4, scheduling="weighted", journal=None,
        queues=[{"name": "high", "weight": 6}, {"name": "normal", "weight": 3},
                {"name": "low", "weight": 1}],
        log={"level": "warning", "format": "json"},
    )
    config_path = write_config(tmp_path, config)
    for queue in ("high", "normal", "low"):
        publish(config_path, queue, "{}", count=1200)
    sidecar = SidecarProcess(tmp_path, config)
    try:
        received = app.wait_for(1000, timeout_s=90)
    finally:
        assert sidecar.stop() == 0
    served = Counter(r.event["queue"] for r in received[:1000])
    shares = {queue: served[queue] / 1000 for queue in ("high", "normal", "low")}
    assert shares["high"] == pytest.approx(0.6, abs=0.05), shares
    assert shares["normal"] == pytest.approx(0.3, abs=0.05), shares
    assert shares["low"] == pytest.approx(0.1, abs=0.05), shares
    # The backlog of every queue was never exhausted: shares came from weights, not empties.
    db = tmp_path / "queues.db"
    assert all(len(queue_rows(db, q)) > 0 for q in ("high", "normal", "low"))
