"""The live ``workers_needed`` gauge: the report's Erlang-C sizing on a sliding window."""

from __future__ import annotations

import random

from priority_pubsub.core.erlang import workers_needed
from priority_pubsub.telemetry.live_capacity import LiveCapacity


def test_a_steady_stream_is_sized_as_the_report_sizes_it() -> None:
    """2 msg/s of 1.5 s tasks on hi, 1 msg/s of 3 s on lo, for 20 min: the window (10 min)
    sees the rates and means, and lo is sized on hi's load and its own together."""
    now = [0.0]
    live = LiveCapacity([5.0, 30.0], window_s=600, clock=lambda: now[0])
    rng = random.Random(7)
    arrivals: list[tuple[float, int, float]] = []
    for queue, rate, service in ((0, 2.0, 1.5), (1, 1.0, 3.0)):
        at = 0.0
        while at < 1200:
            at += rng.expovariate(rate)
            arrivals.append((at, queue, rng.expovariate(1 / service)))
    for at, queue, service in sorted(arrivals):
        now[0] = at
        live.served(queue, service)
    now[0] = 1200.0
    hi_rate, lo_rate = live.arrival_rates()
    assert abs(hi_rate - 2.0) < 0.25
    assert abs(lo_rate - 1.0) < 0.15
    hi_s, lo_s = live.mean_service_s()
    expected_hi = workers_needed(hi_rate, hi_s, 5.0)
    mix = (hi_rate * hi_s + lo_rate * lo_s) / (hi_rate + lo_rate)
    expected_lo = workers_needed(hi_rate + lo_rate, mix, 30.0)
    assert live.workers_needed() == [expected_hi, expected_lo]
    assert expected_hi is not None
    assert expected_lo is not None
    assert 4 <= expected_hi < expected_lo  # offered load 3 on hi, 6 on both


def test_a_growing_backlog_counts_as_arrivals_and_old_deliveries_drop_out() -> None:
    now = [0.0]
    live = LiveCapacity([None, 60.0], window_s=100, clock=lambda: now[0])
    for second in range(100):
        now[0] = float(second)
        live.served(1, 2.0)
        live.depth_seen(1, second)  # one more waiting each second: arrivals are 2/s
    now[0] = 100.0
    assert live.arrival_rates()[1] == (100 + 99) / 100
    assert live.workers_needed()[0] is None
    now[0] = 250.0  # nothing for longer than the window: nothing left to size
    assert live.arrival_rates() == [0.0, 0.0]
    assert live.workers_needed() == [None, 0]
