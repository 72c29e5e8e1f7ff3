"""Relative paths written in a config file resolve against the file's directory; defaults
and environment overrides against the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from priority_pubsub.settings.config import load_config

CONFIG = """\
driver: {type: local, path: ./state/queues.db}
queues: [{name: a}]
journal: {path: journal}
"""


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory that is not the config file's."""
    for name in ("PRIORITY_PUBSUB_DRIVER__PATH", "PRIORITY_PUBSUB_JOURNAL__PATH",
                 "PRIORITY_PUBSUB_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def _write(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.yaml"
    path.write_text(text)
    return path


def test_paths_written_in_the_file_follow_the_file(tmp_path: Path, elsewhere: Path) -> None:
    config = _write(tmp_path / "some" / "dir", CONFIG)
    settings = load_config(Path("..") / "some" / "dir" / "config.yaml")  # relative -c too
    directory = config.parent.resolve()
    assert Path(settings.driver.options()["path"]).resolve() == directory / "state/queues.db"
    assert settings.journal is not None
    assert settings.journal.path.resolve() == directory / "journal"


def test_absolute_paths_are_kept(tmp_path: Path, elsewhere: Path) -> None:
    target = tmp_path / "abs" / "q.db"
    text = f"driver: {{type: local, path: {target}}}\nqueues: [{{name: a}}]\n"
    config = _write(tmp_path / "d", text)
    assert Path(load_config(config).driver.options()["path"]) == target


def test_defaults_follow_the_working_directory(tmp_path: Path, elsewhere: Path) -> None:
    config = _write(tmp_path / "d", "queues: [{name: a}]\njournal: {rotate_mb: 1}\n")
    settings = load_config(config)
    assert settings.driver.options()["path"] == Path("data/queues.db")  # the driver's default
    assert settings.journal is not None
    assert settings.journal.path == Path("data/journal")  # relative: the working directory


def test_environment_overrides_follow_the_working_directory(
    tmp_path: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _write(tmp_path / "d", CONFIG)
    monkeypatch.setenv("PRIORITY_PUBSUB_DRIVER__PATH", "from-env/q.db")
    monkeypatch.setenv("PRIORITY_PUBSUB_JOURNAL__PATH", "env-journal")
    settings = load_config(config)
    assert settings.driver.options()["path"] == Path("from-env/q.db")
    assert settings.journal is not None
    assert settings.journal.path == Path("env-journal")


def test_non_path_driver_keys_are_untouched(tmp_path: Path, elsewhere: Path) -> None:
    text = "driver: {type: local, synchronous: full}\nqueues: [{name: a}]\n"
    config = _write(tmp_path / "d", text)
    options = load_config(config).driver.options()  # validated: defaults filled in
    assert options["synchronous"] == "full"
    assert options["path"] == Path("data/queues.db")  # not written: the working directory


def test_dapr_resources_paths_follow_the_file(tmp_path: Path, elsewhere: Path) -> None:
    from priority_pubsub.settings.config import read_config_file

    config = _write(tmp_path / "d", "dapr: {app_id: a, resources_path: [components, /abs]}\n")
    raw = read_config_file(config)
    assert raw["dapr"]["resources_path"] == [str(config.parent.resolve() / "components"), "/abs"]
