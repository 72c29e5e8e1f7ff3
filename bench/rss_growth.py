"""RSS growth against messages settled, told apart from one allocator step.

A healthy sidecar's RSS is flat once warm, but it moves in steps: the allocator takes or
hands back an arena (~0.3-1.5 MB) once in a while, and a scrape now and then meets a dip.
A least-squares line through such a series reads one step as growth: a 1 MB step in the
middle of a 50 k-message window is a slope of 3 MB per 100 k, and the soak's 2 MB/100 k bound
cried wolf on healthy runs (slopes of 0.04 to 1.97, and 2.35 for the +1.5 MB step of
``tests/fixtures/soak_rss/100k-step-up.json``). Steady growth, a leak, instead raises the
level all along.

So the series is judged with one level shift allowed: each split into two segments is fitted
with its own level and one slope shared by both, the split that fits best is kept, and its
slope is the verdict. A single step is absorbed by the split (the slope stays near 0); growth
shows in both segments, so no split can take it away, in small steps or in 1 MB ones. A
healthy run also takes memory for a while and hands it back (two steps up, then one down, in
``100k-steps-up-and-down.json``), which one shift cannot absorb: so two shifts are allowed
too, where they are not both up (a bump that comes back down, or a drop and a rise), when
they explain the series much better than one (``_cost``). Growth only rises, so a bump
cannot take it away either.
Single-sample dips are cut first (a running median of three), so they cannot pull the line
or pose as the step. What it cannot tell: growth that arrives as one step in the judged part
looks like an allocator step; a leak keeps stepping, which the 1 M bench run shows.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

PER = 100_000
"""Slopes are given in MB per this many messages."""
LIMIT_MB = 2.0
"""The most a healthy run's slope may be, in MB per ``PER`` messages (``bench.soak --check``)."""
WARM_UP = 0.5
"""The share of the run (by messages settled) left out: the allocator and caches warming up
(the 1 M run's RSS rose over its first ~35 k messages)."""
MIN_SAMPLES = 6
"""Samples past the warm-up needed to judge: with fewer, one step is most of the series."""
MIN_SEGMENT = 2
"""Samples on each side of a split: a step as late as the last two samples is still a step."""


@dataclass(frozen=True)
class RssGrowth:
    slope_mb_per_100k: float
    """The slope with the best single level shift taken out: what ``--check`` judges."""
    step_mb: float
    """The level shift the best split found (information: an allocator step is ~0.3-1 MB)."""
    step_at: int
    """Messages settled at the first sample after that shift."""
    plain_slope_mb_per_100k: float
    """The least-squares slope with no shift allowed (information: the check before this)."""


def rss_growth(points: Sequence[tuple[int, float]]) -> RssGrowth:
    """Judge a run's ``(messages settled, RSS MB)`` samples, in order, past its warm-up."""
    judged = [(x, y) for x, y in points if x >= points[-1][0] * WARM_UP] if points else []
    if len(judged) < MIN_SAMPLES:
        raise ValueError(f"too few samples past the warm-up to judge RSS growth "
                         f"({len(judged)}, need {MIN_SAMPLES}): sample more often")
    xs = [float(x) for x, _ in judged]
    raw = [y for _, y in judged]
    ys = _without_dips(raw)
    cuts = range(MIN_SEGMENT, len(xs) - MIN_SEGMENT + 1)
    one_step = (_split_fit(xs, ys, (at,)) for at in cuts)
    two_steps = (_split_fit(xs, ys, (first, second))
                 for first in cuts for second in cuts if second - first >= MIN_SEGMENT)
    bumps = (fit for fit in two_steps if not all(step > 0 for step in fit.steps))
    fits = [min(model, key=lambda fit: fit.residual, default=None) for model in (one_step, bumps)]
    best = min((fit for fit in fits if fit is not None), key=lambda fit: _cost(fit, len(xs)))
    biggest = max(range(len(best.steps)), key=lambda i: abs(best.steps[i]))
    return RssGrowth(
        slope_mb_per_100k=round(best.slope * PER, 3),
        step_mb=round(best.steps[biggest], 3),
        step_at=int(xs[best.cuts[biggest]]),
        plain_slope_mb_per_100k=round(statistics.linear_regression(xs, raw).slope * PER, 3),
    )


def _cost(fit: _Fit, samples: int) -> float:
    """How badly ``fit`` explains the samples, each parameter paid for at twice the Bayesian
    information criterion's price: a second shift is kept only where it explains much more
    than the noise of page-sized RSS levels (at BIC's own price it fitted that noise on the
    recorded single step and read 1.79 MB/100 k instead of 1.46), so a single step stays one
    step."""
    parameters = 2 * len(fit.cuts) + 2  # each cut's place and level, the first level, slope
    return (samples * math.log(max(fit.residual, 1e-9) / samples)
            + 2 * parameters * math.log(samples))


def _without_dips(ys: list[float]) -> list[float]:
    """Each sample replaced by the median of the three nearest (itself and its neighbours; at
    the ends, the first or last three): a lone dip or spike goes, a step (two samples or more
    on each side) stays where it is."""
    last = len(ys) - 1
    return [statistics.median(ys[min(max(i - 1, 0), last - 2):][:3]) for i in range(len(ys))]


@dataclass(frozen=True)
class _Fit:
    cuts: tuple[int, ...]
    slope: float
    steps: tuple[float, ...]
    """The level shift at each cut."""
    residual: float


def _split_fit(xs: list[float], ys: list[float], cuts: tuple[int, ...]) -> _Fit:
    """Least squares of ``y = level + slope * x``, the level changing before each sample of
    ``cuts``: the slope is the segments' pooled slope (each centred on its own means)."""
    bounds = [0, *cuts, len(xs)]
    segments = [(xs[a:b], ys[a:b]) for a, b in itertools.pairwise(bounds)]
    means = [(statistics.fmean(x), statistics.fmean(y)) for x, y in segments]
    sxx = sxy = 0.0
    for (x, y), (mx, my) in zip(segments, means, strict=True):
        sxx += sum((xi - mx) ** 2 for xi in x)
        sxy += sum((xi - mx) * (yi - my) for xi, yi in zip(x, y, strict=True))
    slope = sxy / sxx if sxx else 0.0
    residual = sum((yi - my - slope * (xi - mx)) ** 2
                   for (x, y), (mx, my) in zip(segments, means, strict=True)
                   for xi, yi in zip(x, y, strict=True))
    levels = [my - slope * mx for mx, my in means]
    return _Fit(cuts=cuts, slope=slope, steps=tuple(b - a for a, b in itertools.pairwise(levels)),
                residual=residual)
