"""Every command reads the files its config file names, wherever it is started from; the
inspecting commands say so when there is nothing to inspect instead of creating it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.sidecar import cli

pytestmark = pytest.mark.local

CONFIG = """\
driver: {type: local, path: ./state/queues.db}
queues: [{name: high}, {name: low}]
dead_letter: {queue: dead}
journal: {path: ./journal}
"""


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """(config file in some/dir, a different working directory)."""
    config_dir = tmp_path / "some" / "dir"
    config_dir.mkdir(parents=True)
    (config_dir / "config.yaml").write_text(CONFIG)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    return config_dir / "config.yaml", cwd


def test_publish_and_stats_use_the_file_next_to_the_config(layout: tuple[Path, Path]) -> None:
    config, cwd = layout
    relative = Path("..") / "some" / "dir" / "config.yaml"
    assert cli("publish", "high", "--data", "x", "--count", "3", config=relative,
               cwd=cwd).returncode == 0
    assert (config.parent / "state" / "queues.db").is_file()
    assert not (cwd / "state").exists()
    result = cli("stats", "--json", config=relative, cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["queues"][0]["visible"] == 3
    checked = cli("check", "--offline", config=relative, cwd=cwd)
    shown = json.loads(checked.stdout)
    assert Path(shown["driver"]["path"]) == (config.parent / "state" / "queues.db").resolve()
    assert Path(shown["journal"]["path"]) == (config.parent / "journal").resolve()


@pytest.mark.parametrize("command", [("stats",), ("stats", "--json"),
                                     ("requeue", "--from", "dead", "--to", "high")])
def test_inspecting_a_missing_queue_file_says_so(
    layout: tuple[Path, Path], command: tuple[str, ...]
) -> None:
    config, cwd = layout
    result = cli(*command, config=config, cwd=cwd)
    assert result.returncode == 1
    database = config.parent / "state" / "queues.db"
    assert f"local queue file {database} does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not database.exists()
    assert not database.parent.exists()


def test_report_on_a_glob_matching_nothing_says_so(tmp_path: Path) -> None:
    result = cli("report", str(tmp_path / "journal" / "journal-*.jsonl"), "--out",
                 str(tmp_path / "out"))
    assert result.returncode == 1
    assert "no journal files match" in result.stderr
    assert "journal-*.jsonl" in result.stderr
    assert not (tmp_path / "out").exists()
