"""Session fixtures for the chart tests: a real helm (and kubectl for kustomize), and a renderer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.helm.manifests import CHART, Doc, parse_docs, run, unavailable
from tests.helm.tools import Tools, ToolUnavailable, ensure_tools


@pytest.fixture(scope="session")
def tools() -> Tools:
    try:
        return ensure_tools()
    except ToolUnavailable as exc:
        unavailable(f"helm unavailable: {exc}")
        raise  # unreachable: unavailable() skips or fails


class Helm:
    """``helm template`` with results cached per argument list (helm runs ~0.1 s each)."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self._cache: dict[tuple[str, ...], list[Doc]] = {}

    def template_args(
        self, values: Sequence[Path] = (), sets: Sequence[str] = (), chart: Path = CHART
    ) -> list[str]:
        args = [str(self.binary), "template", "demo", str(chart), "--namespace", "work"]
        for path in values:
            args += ["--values", str(path)]
        for item in sets:
            args += ["--set", item]
        return args

    def render(
        self, values: Sequence[Path] = (), sets: Sequence[str] = (), chart: Path = CHART
    ) -> list[Doc]:
        key = tuple(self.template_args(values, sets, chart))
        if key not in self._cache:
            result = run(key)
            assert result.returncode == 0, result.stderr
            self._cache[key] = parse_docs(result.stdout)
        return self._cache[key]

    def render_error(self, values: Sequence[Path] = (), sets: Sequence[str] = ()) -> str:
        result = run(self.template_args(values, sets))
        assert result.returncode != 0, "expected helm to refuse these values"
        return result.stderr


@pytest.fixture(scope="session")
def helm(tools: Tools) -> Helm:
    return Helm(tools.helm)
