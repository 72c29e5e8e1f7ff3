"""The sidecar never loads the report, and the report loads pyspark only when it runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

PROBE = """
import sys
import priority_pubsub.cli, priority_pubsub.sidecar, priority_pubsub.delivery.worker
assert "priority_pubsub.analytics" not in sys.modules, "the sidecar imported the report"
import priority_pubsub.analytics.report
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j"))
assert not loaded, loaded
"""


def test_importing_the_sidecar_or_the_report_loads_no_spark() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
