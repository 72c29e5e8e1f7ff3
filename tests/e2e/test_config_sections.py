"""A config section written with the wrong type: every mapping the config models
have, top-level or nested, given a string, a number, a list and null, through ``check
--offline``, ``check`` and ``run``, with and without daprd's flags, and under environment
overrides. Refused: exit 2, one line on stderr naming the section and the model it expects,
no traceback. Null is what the model says: "off" where the section is optional (accepted),
refused where it is not. A live reload reads the file the same way: the same table
is refused there, the config in force kept, in one log line, and the process goes on.

The table is generated from the models, so a new section is covered without editing it. The
CLI runs in-process (``CliRunner``) for the table and as a real process for a few ``run``s;
the reload runs in-process on a running settings owner, and once as a real SIGHUP."""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from structlog.testing import capture_logs
from typer.testing import CliRunner

from priority_pubsub import cli as cli_module
from priority_pubsub.dapr.flags import DaprdFlags
from priority_pubsub.dapr.setup import load, native_reload
from priority_pubsub.delivery.reload import Reloader
from priority_pubsub.settings.config import Settings
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.metrics import Metrics
from tests.e2e.helpers import total
from tests.support.app import RecordingApp
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, cli, write_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.local

PREFIX = "PRIORITY_PUBSUB"


@dataclass(frozen=True)
class Section:
    path: str
    """Dotted, as the error line names it (``app.health``)."""
    model: type[BaseModel]
    optional: bool
    """The model accepts null for it ("off")."""

    def __str__(self) -> str:
        return self.path


def _sections(model: type[BaseModel], prefix: str = "") -> Iterator[Section]:
    """Every field typed as a model (or a model or null), recursively: the config's mappings."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
        members = typing.get_args(annotation) if union else (annotation,)
        models = [member for member in members if typing.get_origin(member) is None
                  and isinstance(member, type) and issubclass(member, BaseModel)]
        if len(models) != 1 or not set(members) <= {models[0], type(None)}:
            continue
        section = Section(f"{prefix}{name}", models[0], type(None) in members)
        yield section
        yield from _sections(section.model, f"{section.path}.")


SECTIONS = list(_sections(Settings))
VALUES: dict[str, Any] = {"str": "http://127.0.0.1:8000", "int": 3, "list": [1], "null": None}
ENV_TEXT = {"str": "http://127.0.0.1:8000", "int": "3", "list": "[1]"}
"""The same values as an environment variable gives them (read as TOML, else as text)."""
CASES = [(section, kind) for section in SECTIONS for kind in VALUES]
REFUSED = [pytest.param(section, kind, id=f"{section}={kind}") for section, kind in CASES
           if not (kind == "null" and section.optional)]
NULL_OFF = [pytest.param(section, kind, id=f"{section}={kind}") for section, kind in CASES
            if kind == "null" and section.optional]
LEGS = {
    "check --offline": ["check", "--offline"],
    "check": ["check"],
    "run": ["run"],
}
DAPRD = ["--app-id", "shop", "--dapr-http-port", "3599"]


def test_the_table_covers_the_top_level_and_the_nested_sections() -> None:
    """A walker that found nothing would pass every case below."""
    paths = {section.path for section in SECTIONS}
    assert {"app", "server", "log", "dapr", "publish_api", "driver"} <= paths
    assert {"app.health", "app.circuit_breaker"} <= paths
    optional = {section.path for section in SECTIONS if section.optional}
    assert {"journal", "dapr", "publish_api", "app.health"} <= optional
    assert not {"app", "server", "log", "driver"} & optional


@pytest.fixture
def base(tmp_path: Path) -> dict[str, Any]:
    """A valid config: the local driver in tmp_path, an app on a closed port."""
    return {"queues": [{"name": "a"}],
            "driver": {"type": "local", "path": str(tmp_path / "queues.db")},
            "app": {"url": f"http://127.0.0.1:{free_port()}"}}


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process runs must stop at the config: reaching the driver, the app or the
    sidecar (all go through ``_run_reporting``) means a config got through."""

    def started(*_: Any) -> None:
        raise AssertionError("the config was accepted: the command went on to run")

    monkeypatch.setattr(cli_module, "_run_reporting", started)


def _with(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``config`` with ``path`` (dotted) set to ``value``, parents kept or created."""
    result = copy.deepcopy(config)
    *parents, last = path.split(".")
    node = result
    for name in parents:
        node = node.setdefault(name, {})
    node[last] = value
    return result


def _write(directory: Path, config: dict[str, Any]) -> Path:
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str
    problem: str
    """An exception other than the exit (in-process, what a real process prints as a
    traceback), or stderr that is not one line; empty when neither."""


def _invoke(arguments: list[str], env: dict[str, str] | None = None) -> Outcome:
    result = CliRunner().invoke(cli_module.app, arguments, env=env)
    lines = result.stderr.strip().splitlines()
    problem = ""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        problem = f"raised {result.exception!r}"
    elif len(lines) != 1:
        problem = f"{len(lines)} lines"
    return Outcome(result.exit_code, result.stdout, result.stderr, problem)


def _refusal_problem(outcome: Outcome, section: Section) -> str:
    """Empty when the command was refused as promised: exit 2, one line naming the section
    and the model it expects, no traceback."""
    stderr = outcome.stderr
    if outcome.problem or outcome.code != 2 or "Traceback" in stderr:
        return f"exit {outcome.code}, {outcome.problem or 'one line'}: {stderr.strip()[-300:]}"
    if f"invalid config: {section.path}: " not in stderr or section.model.__name__ not in stderr:
        return f"does not name {section.path} ({section.model.__name__}): {stderr.strip()}"
    return ""


@pytest.mark.usefixtures("nothing_starts")
@pytest.mark.parametrize(("section", "kind"), REFUSED)
def test_a_misshapen_section_is_one_line_exit_2_from_every_command(
    tmp_path: Path, base: dict[str, Any], section: Section, kind: str
) -> None:
    path = _write(tmp_path, _with(base, section.path, VALUES[kind]))
    failed = {}
    for leg, command in LEGS.items():
        for flags in ([], DAPRD):
            outcome = _invoke([*command, "-c", str(path), *flags])
            if problem := _refusal_problem(outcome, section):
                failed[f"{leg} {' '.join(flags)}"] = problem
    assert not failed, failed


@pytest.mark.parametrize(("section", "kind"), NULL_OFF)
def test_null_is_off_where_the_model_has_an_off(
    tmp_path: Path, base: dict[str, Any], section: Section, kind: str
) -> None:
    """``journal: null`` is no journal, as before; ``dapr: null`` native mode (it was
    refused in Dapr mode's wording, though its model has the same "off")."""
    path = _write(tmp_path, _with(base, section.path, VALUES[kind]))
    outcome = _invoke(["check", "--offline", "-c", str(path)])
    assert outcome.code == 0, outcome.stderr
    loaded = load(path, DaprdFlags(), reach_app=False)
    assert loaded.plan is None  # dapr: null is native mode
    value: Any = loaded.settings
    for name in section.path.split("."):
        value = getattr(value, name)
    assert value is None


@pytest.mark.usefixtures("nothing_starts")
@pytest.mark.parametrize(("section", "kind"), REFUSED)
def test_an_environment_key_under_a_misshapen_section_does_not_hide_it(
    tmp_path: Path, base: dict[str, Any], section: Section, kind: str
) -> None:
    """``app: "http://..."`` in the file and ``PRIORITY_PUBSUB_APP__URL`` set: the file is
    still refused, not filled in by the environment into a valid config."""
    path = _write(tmp_path, _with(base, section.path, VALUES[kind]))
    key = next(iter(section.model.model_fields))
    variable = f"{PREFIX}_{section.path.replace('.', '__')}__{key}".upper()
    outcome = _invoke(["check", "--offline", "-c", str(path)], env={variable: "1"})
    assert not _refusal_problem(outcome, section), outcome


@pytest.mark.usefixtures("nothing_starts")
@pytest.mark.parametrize("section", SECTIONS, ids=str)
@pytest.mark.parametrize("kind", list(ENV_TEXT))
def test_a_section_the_environment_gives_a_scalar_is_one_line_exit_2(
    tmp_path: Path, base: dict[str, Any], section: Section, kind: str
) -> None:
    path = _write(tmp_path, base)
    variable = f"{PREFIX}_{section.path.replace('.', '__')}".upper()
    for flags in ([], DAPRD):
        outcome = _invoke(["check", "--offline", "-c", str(path), *flags],
                          env={variable: ENV_TEXT[kind]})
        assert not _refusal_problem(outcome, section), (flags, outcome)


@pytest.mark.parametrize(("section", "value", "flags", "env"), [
    ("app", "http://127.0.0.1:8000", [], {}),
    ("app", "http://127.0.0.1:8000", DAPRD, {f"{PREFIX}_APP__URL": "http://127.0.0.1:1"}),
    ("publish_api", "x", ["--dapr-http-port", "3599"], {}),
    ("log", 3, DAPRD, {}),
    ("server", [1], ["--app-port", "1"], {}),
    ("app.health", "/healthz", ["--enable-app-health-check"], {}),
], ids=["app", "app+env+daprd", "publish_api", "log+daprd", "server+app-port", "app.health"])
def test_run_as_a_process_refuses_in_one_line(
    tmp_path: Path, base: dict[str, Any], section: str, value: Any, flags: list[str],
    env: dict[str, str]
) -> None:
    """The real process: what a user sees on stderr, a traceback or one line."""
    path = _write(tmp_path, _with(base, section, value))
    result = cli("run", *flags, config=path, env=env, timeout_s=60)
    named = next(found for found in SECTIONS if found.path == section)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert f"invalid config: {section}: " in result.stderr, result.stderr
    assert named.model.__name__ in result.stderr



@pytest.mark.parametrize(("section", "kind"), REFUSED)
async def test_a_misshapen_section_in_a_live_reload_is_refused_in_one_line(
    tmp_path: Path, base: dict[str, Any], section: Section, kind: str
) -> None:
    """What ``run`` refuses at start, a reload of the running sidecar refuses: through the
    reload's own path (``native_reload``: ``load`` as at start), on its settings owner."""
    path = _write(tmp_path, base)
    live = LiveSettings(load(path, DaprdFlags(), reach_app=False).settings)
    metrics = Metrics()
    reloader = Reloader(live, native_reload(path, DaprdFlags(), live.settings), metrics,
                        add_queue=None)
    in_force = live.settings
    _write(tmp_path, _with(base, section.path, VALUES[kind]))
    with capture_logs() as logs:
        result = await reloader.reload("SIGHUP")
    assert not result.applied
    assert live.settings is in_force
    assert [entry["log_level"] for entry in logs] == ["warning"], logs  # one line
    reason = str(logs[0]["reason"])
    assert f"invalid config: {section.path}: " in reason, reason
    assert section.model.__name__ in reason, reason
    assert total(metrics.render().decode(), "priority_pubsub_config_reloads_total",
                 result="refused") == 1


def test_a_misshapen_section_sent_by_sighup_is_refused_and_the_process_goes_on(
    tmp_path: Path, app: RecordingApp
) -> None:
    config = {"queues": [{"name": "a"}], "app": {"url": app.url},
              "driver": {"type": "local", "path": str(tmp_path / "queues.db")},
              "log": {"level": "info", "format": "json"}}
    sidecar = SidecarProcess(tmp_path, config)
    try:
        sidecar.wait_ready()
        write_config(tmp_path, _with(sidecar.config, "app", "http://127.0.0.1:8000"),
                     sidecar.config_path.name)
        sidecar.hang_up()
        wait_until(lambda: total(sidecar.metrics(), "priority_pubsub_config_reloads_total",
                                 result="refused") == 1, timeout_s=10)
        assert sidecar.ready_status() == 200  # still up, still serving
    finally:
        assert sidecar.stop() == 0
    refusals = [json.loads(line) for line in sidecar.logs().splitlines()
                if "config reload refused" in line]
    assert len(refusals) == 1, sidecar.logs()
    assert "invalid config: app: " in refusals[0]["reason"]
    assert "AppConfig" in refusals[0]["reason"]
    assert "Traceback" not in sidecar.logs()
