"""The soak's leak detector on recorded RSS series (``tests/fixtures/soak_rss``: healthy runs
of ``bench.soak``, their steps, creep and dips as they came) and on those series with growth
or a step added: recorded noise, known shapes. It flags steady growth and a 5 MB/100 k leak,
smooth or in 1 MB steps, and passes a single step, where a least-squares line did not, and
memory taken for a while and handed back, where one step did not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.rss_growth import LIMIT_MB, PER, WARM_UP, rss_growth

SERIES = Path(__file__).resolve().parents[2] / "fixtures" / "soak_rss"
HEALTHY = sorted(path.stem for path in SERIES.glob("*.json"))
FLAT = ["1m-flat", "100k-flat"]
"""The recorded runs with no step of their own in the judged part: one added step is the only
one."""
Points = list[tuple[int, float]]


def recorded(name: str) -> Points:
    return [(int(x), float(y)) for x, y in json.loads((SERIES / f"{name}.json").read_text())
            ["points"]]


def plus(points: Points, shape: Callable[[int], float]) -> Points:
    return [(x, y + shape(x)) for x, y in points]


def growth(mb_per_100k: float) -> Callable[[int], float]:
    return lambda x: mb_per_100k * x / PER


def step(at: float, mb: float = 1.0) -> Callable[[int], float]:
    return lambda x: mb if x >= at else 0.0


def staircase(mb_per_100k: float, chunk_mb: float, phase: float) -> Callable[[int], float]:
    """Growth the way an allocator shows it: whole chunks, one every ``chunk_mb`` of growth."""
    return lambda x: chunk_mb * int(mb_per_100k * x / PER / chunk_mb + phase)


def judged_at(points: Points, share: float) -> float:
    """Messages settled ``share`` of the way through the judged part (past the warm-up)."""
    last = points[-1][0]
    return last * WARM_UP + share * last * (1 - WARM_UP)


def test_the_recorded_series_are_runs() -> None:
    assert len(HEALTHY) >= 5
    for name in HEALTHY:
        points = recorded(name)
        assert len(points) >= 40, name
        assert [x for x, _ in points] == sorted(x for x, _ in points), name


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_run_passes(name: str) -> None:
    assert rss_growth(recorded(name)).slope_mb_per_100k < LIMIT_MB


def test_the_recorded_step_is_taken_out_where_a_line_cried_wolf() -> None:
    """The healthy run the old check failed: +1.5 MB once, early in the second half."""
    judged = rss_growth(recorded("100k-step-up"))
    assert judged.plain_slope_mb_per_100k > LIMIT_MB
    assert judged.slope_mb_per_100k < LIMIT_MB
    assert judged.step_mb > 1.0
    assert 50_000 < judged.step_at < 60_000


@pytest.mark.parametrize("name", FLAT)
@pytest.mark.parametrize("share", [0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95])
def test_one_allocator_step_passes(name: str, share: float) -> None:
    points = recorded(name)
    at = judged_at(points, share)
    assert abs(rss_growth(plus(points, step(at))).slope_mb_per_100k) < 0.5


def test_a_line_reads_a_mid_run_step_as_growth() -> None:
    """1 MB in the middle of a 100 k run's second half: 3 MB/100 k to a line, none here."""
    points = recorded("100k-flat")
    at = judged_at(points, 0.5)
    judged = rss_growth(plus(points, step(at)))
    assert judged.plain_slope_mb_per_100k > LIMIT_MB
    assert abs(judged.slope_mb_per_100k) < 0.5
    assert judged.step_mb == pytest.approx(1.0, abs=0.1)
    assert at <= judged.step_at < at + 3_000


def bump(start: float, end: float, mb: float = 1.0) -> Callable[[int], float]:
    """Memory taken at ``start`` and handed back at ``end``."""
    return lambda x: mb if start <= x < end else 0.0


def test_memory_taken_and_handed_back_is_taken_out_where_one_step_cried_wolf() -> None:
    """The healthy run one shift failed (2.61 MB/100 k): two steps up, then one down."""
    judged = rss_growth(recorded("100k-steps-up-and-down"))
    assert judged.slope_mb_per_100k < LIMIT_MB
    assert judged.step_mb < -0.5
    assert 87_000 < judged.step_at < 88_000


@pytest.mark.parametrize("name", FLAT)
@pytest.mark.parametrize(("start", "end"), [(0.1, 0.5), (0.3, 0.7), (0.5, 0.9), (0.2, 0.95)])
def test_a_bump_passes_and_does_not_hide_growth(name: str, start: float, end: float) -> None:
    points = recorded(name)
    shape = bump(judged_at(points, start), judged_at(points, end))
    assert abs(rss_growth(plus(points, shape)).slope_mb_per_100k) < 0.5
    grown = plus(points, lambda x: growth(2.5)(x) + shape(x))
    assert rss_growth(grown).slope_mb_per_100k > LIMIT_MB


@pytest.mark.parametrize("name", HEALTHY)
def test_steady_growth_is_flagged(name: str) -> None:
    judged = rss_growth(plus(recorded(name), growth(2.5)))
    assert judged.slope_mb_per_100k > LIMIT_MB


@pytest.mark.parametrize("name", HEALTHY)
def test_a_leak_is_flagged(name: str) -> None:
    judged = rss_growth(plus(recorded(name), growth(5.0)))
    assert judged.slope_mb_per_100k > LIMIT_MB


@pytest.mark.parametrize("name", HEALTHY)
@pytest.mark.parametrize("phase", [0.0, 0.25, 0.5, 0.75])
def test_a_leak_in_1_mb_steps_is_flagged(name: str, phase: float) -> None:
    """No single split can take out growth that keeps stepping."""
    judged = rss_growth(plus(recorded(name), staircase(5.0, 1.0, phase)))
    assert judged.slope_mb_per_100k > LIMIT_MB


@pytest.mark.parametrize("name", FLAT)
@pytest.mark.parametrize("share", [0.2, 0.5, 0.8])
def test_a_step_does_not_hide_growth(name: str, share: float) -> None:
    points = recorded(name)
    at = judged_at(points, share)
    judged = rss_growth(plus(points, lambda x: growth(2.5)(x) + step(at)(x)))
    assert judged.slope_mb_per_100k > LIMIT_MB


def test_lone_dips_neither_pull_the_line_nor_pose_as_the_step() -> None:
    points = [(x, 60.0) for x in range(0, 100_001, 2_000)]
    dipped = [(x, y - 1.0 if i in (30, 41, 50) else y) for i, (x, y) in enumerate(points)]
    judged = rss_growth(dipped)
    assert judged.slope_mb_per_100k == 0.0
    assert judged.step_mb == 0.0


def test_the_warm_up_is_left_out() -> None:
    """RSS climbing in the first half (the allocator and caches warming) is not growth."""
    points = [(x, 60.0 + min(x, 50_000) / 10_000) for x in range(0, 100_001, 2_000)]
    assert rss_growth(points).slope_mb_per_100k == 0.0


def test_too_few_samples_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError, match="too few samples"):
        rss_growth([(x, 60.0) for x in range(0, 100_001, 20_000)])
