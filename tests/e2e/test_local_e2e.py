"""The shared end-to-end scenarios on the local SQLite driver, live reload's among them."""

from __future__ import annotations

from typing import ClassVar

import pytest

from tests.e2e.reload_scenarios import ReloadScenarios
from tests.e2e.scenarios import SidecarScenarios
from tests.support.topologies.local import LocalTopology

pytestmark = pytest.mark.local


class TestLocalScenarios(SidecarScenarios, ReloadScenarios):
    app_down_messages: ClassVar[int] = 500  # the app-down scenario's full size
    app_down_s: ClassVar[float] = 30.0
    counts_exactly: ClassVar[bool] = True  # the local driver undoes a return's count

    @pytest.fixture
    def topology(self, local_topology: LocalTopology) -> LocalTopology:
        return local_topology
