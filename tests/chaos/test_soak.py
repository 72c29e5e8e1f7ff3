"""The CI leak check: ``bench.soak`` run short (100 k messages through the CLI sidecar on the
local driver at c=16, ~35-90 s). It fails when RSS grows more than 2 MB per 100 k messages
over the second half of the run with one level shift, or memory taken and handed back, taken
out (``bench.rss_growth``: allocator steps of ~1 MB read as a slope came near or over the
bound on healthy runs; its unit tests are ``tests/unit/bench/test_rss_growth.py``), or the
open fds or asyncio tasks the sidecar sits at idle grow over the run. The 1 M run and its
figure: ``bench/RESULTS.md``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rss_growth import LIMIT_MB

pytestmark = [pytest.mark.chaos, pytest.mark.local]

REPO = Path(__file__).resolve().parents[2]
MESSAGES = 100_000


@pytest.mark.timeout(400)
def test_no_leak_over_100k_messages(report_lines: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--messages", str(MESSAGES), "--concurrency",
         "16", "--sample-every", "2000", "--max-rss-slope-mb", str(LIMIT_MB), "--check",
         "--timeout-s", "360"],
        cwd=REPO, capture_output=True, text=True, timeout=390,
    )
    assert result.stdout, result.stderr[-3000:]
    soak = json.loads(result.stdout)
    report_lines.append(
        f"soak {soak['messages']} messages in {soak['elapsed_s']} s: RSS "
        f"{soak['rss_first_mb']} -> {soak['rss_last_mb']} MB, slope over the second half "
        f"{soak['rss_slope_mb_per_100k']} MB/100k beside a step of {soak['rss_step_mb']} MB "
        f"at {soak['rss_step_at']} (a line: {soak['rss_plain_slope_mb_per_100k']}), "
        f"idle fds before/after "
        f"{soak['idle_fds_before_after']}, idle tasks before/after "
        f"{soak['idle_tasks_before_after']}, journal {soak['journal_mb']} MB")
    assert soak["messages"] >= MESSAGES
    assert soak["problems"] == [], soak["problems"]
    assert result.returncode == 0, result.stderr[-3000:]
