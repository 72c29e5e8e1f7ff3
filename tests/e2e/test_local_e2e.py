"""The shared end-to-end scenarios on the local SQLite driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.scenarios import SidecarScenarios
from tests.support.topologies.local import LocalTopology

pytestmark = pytest.mark.local


class TestLocalScenarios(SidecarScenarios):
    @pytest.fixture
    def topology(self, tmp_path: Path) -> LocalTopology:
        return LocalTopology(tmp_path)
