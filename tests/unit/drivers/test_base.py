"""The driver kit every driver shares: the lease check, error mapping, options, backoff."""

from __future__ import annotations

import math

import pytest

from priority_pubsub.core.backoff import Backoff, compute_backoff
from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.drivers.base import (
    DriverOptions,
    Lease,
    Message,
    live_token,
    map_errors,
    own_options,
)


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def message(lease: Lease) -> Message:
    return Message("m1", "q", 0, b"", {}, 1, 0, lease)


def test_a_lease_refuses_a_settle_once_its_clock_passes_the_deadline() -> None:
    clock = Clock(1_000)
    lease = Lease("token", deadline_ms=2_000, clock=clock)
    lease.require_live("ack", "m1")
    assert lease.remaining_s() == 1.0
    clock.now_ms = 2_000
    with pytest.raises(LeaseLost, match="ack m1: lease lapsed 0 ms ago"):
        lease.require_live("ack", "m1")
    lease.require_live("extend", "m1", grace_ms=500)  # a late extension may still rescue it
    clock.now_ms = 2_500
    with pytest.raises(LeaseLost):
        lease.require_live("extend", "m1", grace_ms=500)


def test_a_lease_the_broker_declared_lost_is_refused_even_with_infinite_grace() -> None:
    lease = Lease("token", deadline_ms=0, clock=Clock(10**12))
    lease.require_live("ack", "m1", grace_ms=math.inf)
    lease.lost = True
    with pytest.raises(LeaseLost, match="reported its lease lost"):
        lease.require_live("ack", "m1", grace_ms=math.inf)


def test_live_token_checks_the_owner_and_the_lease() -> None:
    live = message(Lease("ack-id", deadline_ms=2_000, clock=Clock(1_000)))
    assert live_token(live, str, "ack") == "ack-id"
    with pytest.raises(DriverError, match="not received by this driver"):
        live_token(live, int, "ack")
    with pytest.raises(LeaseLost):
        live_token(message(Lease("ack-id", deadline_ms=0, clock=Clock(1))), str, "ack")


def fake_mapper(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    if settling:
        return LeaseLost(f"{action}: {exc}")
    return DriverUnavailable(f"{action}: {exc}")


def test_map_errors_maps_only_what_it_catches_and_keeps_the_cause() -> None:
    with pytest.raises(DriverUnavailable, match="receive: boom") as caught, \
            map_errors(fake_mapper, "receive", catch=(OSError,)):
        raise OSError("boom")
    assert isinstance(caught.value.__cause__, OSError)
    with pytest.raises(LeaseLost), map_errors(fake_mapper, "ack", settling=True):
        raise OSError("stale")
    with pytest.raises(KeyError), map_errors(fake_mapper, "x", catch=(OSError,)):
        raise KeyError("a bug stays a bug")
    with pytest.raises(DriverError, match="already ours"), map_errors(fake_mapper, "x"):
        raise DriverError("already ours")


async def test_map_errors_works_around_awaits() -> None:
    async def fails() -> None:
        raise OSError("down")

    with pytest.raises(DriverUnavailable), map_errors(fake_mapper, "call"):
        await fails()


class Options(DriverOptions):
    size: int = 1


def test_own_options_revalidates_a_foreign_model() -> None:
    mine = Options(size=3)
    assert own_options(mine, Options) is mine
    assert own_options(DriverOptions(), Options) == Options()


def test_compute_backoff_doubles_and_caps() -> None:
    delays = [compute_backoff(n, initial_s=0.5, max_s=3) for n in range(1, 6)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert compute_backoff(10_000, initial_s=1, max_s=600) == 600


async def test_backoff_counts_failures_and_resets() -> None:
    backoff = Backoff(initial_s=0.001, max_s=0.004)
    assert backoff.next_s() == 0.001
    await backoff.sleep()
    await backoff.sleep()
    assert backoff.next_s() == 0.004
    backoff.reset()
    assert backoff.next_s() == 0.001
