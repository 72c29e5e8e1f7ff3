"""``run`` and ``check`` share one declaration of daprd's flags: both list the same flags and
read the same command line into the same ``DaprdFlags`` (the config loading is replaced by a
recorder, so nothing is started or reached)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from priority_pubsub import cli
from priority_pubsub.dapr import setup
from priority_pubsub.dapr.flags import DaprdFlags

DAPRD_LINE = [
    "--app-id", "shop", "--resources-path", "a", "--resources-path", "b", "--app-port", "5001",
    "--app-protocol", "grpc", "--app-max-concurrency", "3",
    "--dapr-graceful-shutdown-seconds", "7", "--log-level", "debug",
    "--disable-init-endpoints", "subscribe", "--dapr-http-port", "3500",
    "--dapr-grpc-port", "50001", "--max-body-size", "4Mi", "--enable-app-health-check",
    "--app-health-check-path", "/ready", "--app-health-probe-interval", "2",
    "--app-health-probe-timeout", "500", "--app-health-threshold", "4",
]
EXPECTED = DaprdFlags(
    app_id="shop", app_port=5001, app_protocol="grpc", resources_path=["a", "b"],
    app_max_concurrency=3, graceful_shutdown_s=7, log_level="debug",
    disable_init_endpoints=["subscribe"], dapr_http_port=3500, dapr_grpc_port=50001,
    max_body_size="4Mi", health={
        "--enable-app-health-check": True, "--app-health-check-path": "/ready",
        "--app-health-probe-interval": 2, "--app-health-probe-timeout": 500,
        "--app-health-threshold": 4})


def _daprd_options(command: str) -> list[str]:
    group = typer.main.get_command(cli.app)
    assert isinstance(group, TyperGroup)
    found = group.commands[command]
    return [name for param in found.params if isinstance(param, TyperOption)
            and param.rich_help_panel == "daprd flags"
            for name in param.opts]


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[DaprdFlags]:
    """The flags each command hands to the config loading, which then stops the command."""
    seen: list[DaprdFlags] = []

    def record(config: Path | None, flags: DaprdFlags, **_: Any) -> None:
        seen.append(flags)
        raise typer.Exit(0)

    monkeypatch.setattr(setup, "load", record)
    return seen


def test_run_and_check_list_the_same_daprd_flags() -> None:
    assert _daprd_options("run") == _daprd_options("check")
    assert len(_daprd_options("run")) == len(cli.DAPRD_OPTIONS)
    assert "--enable-app-health-check" in _daprd_options("check")


@pytest.mark.parametrize("command", [["run"], ["check", "--offline"]])
def test_each_command_reads_a_daprd_line_into_the_same_flags(
    loads: list[DaprdFlags], command: list[str]
) -> None:
    result = CliRunner().invoke(cli.app, [*command, *DAPRD_LINE])
    assert result.exit_code == 0, result.output
    assert loads == [EXPECTED]


@pytest.mark.parametrize("command", [["run"], ["check", "--offline"]])
def test_each_command_gives_empty_flags_without_daprd_flags(
    loads: list[DaprdFlags], command: list[str]
) -> None:
    assert CliRunner().invoke(cli.app, command).exit_code == 0
    assert loads == [DaprdFlags()]


@pytest.mark.parametrize("command", [["run"], ["check", "--offline"]])
def test_each_command_refuses_a_daprd_only_flag_before_loading(
    loads: list[DaprdFlags], command: list[str]
) -> None:
    result = CliRunner().invoke(cli.app, [*command, "--enable-mtls"])
    assert result.exit_code == 2
    assert "daprd flag --enable-mtls cannot be honoured" in result.output
    assert loads == []
