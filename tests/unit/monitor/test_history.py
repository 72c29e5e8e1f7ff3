"""The monitor's rates come from the Prometheus counters themselves: per queue, per minute over
the last minute (or since the first sample), summed over priorities, other queues' and other
outcomes' counts left out; sparklines as differences between samples; a queue added since a
sample counts from zero."""

from __future__ import annotations

from priority_pubsub.monitor.history import WINDOW_S, History, read_counts
from priority_pubsub.telemetry.metrics import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def receive(metrics: Metrics, queue: str, count: int, priority: str = "1") -> None:
    metrics.received.labels(queue, priority).inc(count)


def settle(metrics: Metrics, queue: str, outcome: str, count: int) -> None:
    metrics.settled.labels(queue, "1", outcome).inc(count)


def test_counts_per_queue_and_series_summed_over_priorities() -> None:
    metrics = Metrics()
    receive(metrics, "high", 3, priority="1")
    receive(metrics, "high", 2, priority="2")
    receive(metrics, "elsewhere", 9)
    settle(metrics, "high", "ack", 4)
    settle(metrics, "high", "drop", 1)  # not a series the page draws
    counts = read_counts(metrics, ["high", "low"])
    assert counts == {"high": {"delivered": 5.0, "ack": 4.0, "retry": 0.0, "dead": 0.0},
                      "low": {"delivered": 0.0, "ack": 0.0, "retry": 0.0, "dead": 0.0}}


def test_per_minute_over_the_last_minute_scaled_to_a_minute() -> None:
    metrics, clock = Metrics(), Clock()
    history = History(metrics, ["high"], interval_s=10, clock=clock)
    history.sample()  # at 500: nothing yet
    clock.now += 30
    receive(metrics, "high", 10)
    history.sample()
    clock.now += 30
    receive(metrics, "high", 20)
    settle(metrics, "high", "retry", 6)
    # the oldest sample within 60 s is the one at 500: 30 events in 60 s
    assert history.per_minute(history.now())["high"] == {
        "delivered": 30.0, "ack": 0.0, "retry": 6.0, "dead": 0.0}
    clock.now += 15
    # now the oldest within 60 s is at 530: (30 - 10) events in 45 s
    assert history.per_minute(history.now())["high"]["delivered"] == round(20 * 60 / 45, 1)


def test_no_rate_from_less_than_a_second_of_history() -> None:
    metrics, clock = Metrics(), Clock()
    history = History(metrics, ["high"], clock=clock)
    history.sample()
    receive(metrics, "high", 5)
    clock.now += 0.5
    assert history.per_minute(history.now())["high"]["delivered"] == 0.0


def test_a_queue_added_since_a_sample_counts_from_zero() -> None:
    metrics, clock = Metrics(), Clock()
    queues = ["high"]
    history = History(metrics, queues, clock=clock)
    history.sample()
    queues.append("new")  # a reload added it
    receive(metrics, "new", 4)
    clock.now += 60
    assert history.per_minute(history.now())["new"]["delivered"] == 4.0


def test_the_sparkline_is_events_per_interval_over_the_window_only() -> None:
    metrics, clock = Metrics(), Clock()
    history = History(metrics, ["high"], interval_s=60, clock=clock)
    samples = WINDOW_S // 60 + 1
    for n in range(samples + 3):  # three more than the window holds
        receive(metrics, "high", n)
        history.sample()
        clock.now += 60
    line = history.sparkline("high")
    assert len(line) == samples - 1
    assert line[-3:] == [samples, samples + 1, samples + 2]
