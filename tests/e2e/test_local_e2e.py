"""The shared end-to-end scenarios on the local SQLite driver."""

from __future__ import annotations

import pytest

from tests.e2e.scenarios import SidecarScenarios
from tests.support.topologies.local import LocalTopology

pytestmark = pytest.mark.local


class TestLocalScenarios(SidecarScenarios):
    @pytest.fixture
    def topology(self, local_topology: LocalTopology) -> LocalTopology:
        return local_topology
