"""Config loading and validation: one line naming the key path, nothing silently fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.config import RetryConfig, load_config
from priority_pubsub.settings.source import add_to_section

ROOT = Path(__file__).resolve().parents[3]
MINIMAL = "queues:\n  - {name: a}\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_repo_default_config_loads() -> None:
    settings = load_config(ROOT / "config.yaml")
    assert settings.driver.type == "local"
    assert settings.queue_names == ("tasks-high", "tasks-normal", "tasks-low")
    assert [q.weight for q in settings.queues] == [6, 3, 1]
    assert settings.app.fatal_codes == (400, 422)


def test_environment_overrides_nested_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIORITY_PUBSUB_CONCURRENCY", "8")
    monkeypatch.setenv("PRIORITY_PUBSUB_APP__URL", "http://10.0.0.1:9000/work")
    monkeypatch.setenv("PRIORITY_PUBSUB_APP__API_TOKEN", "s3cret-token")
    monkeypatch.setenv("PRIORITY_PUBSUB_CONFIG", "ignored-as-a-key")
    monkeypatch.setenv("PRIORITY_PUBSUB_REPORT_CLASS_ARCHIVE", "/cache")  # the report's, no key
    settings = load_config(write(tmp_path, MINIMAL))
    assert settings.concurrency == 8
    assert settings.app.url.get_secret_value() == "http://10.0.0.1:9000/work"
    assert settings.app.api_token.get_secret_value() == "s3cret-token"
    assert "s3cret-token" not in repr(settings)
    assert "s3cret-token" not in str(settings.model_dump(mode="json"))


@pytest.mark.parametrize("token", ["1234567890", "1e5", "true", "[x]"])
def test_secret_from_environment_is_taken_verbatim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    monkeypatch.setenv("PRIORITY_PUBSUB_APP__API_TOKEN", token)
    assert load_config(write(tmp_path, MINIMAL)).app.api_token.get_secret_value() == token


def test_config_path_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIORITY_PUBSUB_CONFIG", str(write(tmp_path, MINIMAL)))
    assert load_config().queue_names == ("a",)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (MINIMAL + "concurency: 4\n", "concurency: unknown key"),
        (MINIMAL + "concurrency: 0\n", "concurrency: Input should be greater than or equal to 1"),
        (MINIMAL + "concurrency: many\n", "concurrency: Input should be a valid integer"),
        ("queues: []\n", "queues: at least one queue to deliver from"),
        ("concurrency: 2\n", "queues: at least one queue to deliver from"),
        ("queues:\n  - {name: a, weight: -1}\n", "queues.0.weight: Input should be greater"),
        ("queues:\n  - {name: a}\n  - {name: a}\n", "duplicate names ['a']"),
        (MINIMAL + "scheduling: fair\n", "scheduling: Input should be 'strict' or 'weighted'"),
        (MINIMAL + "driver: {type: kafka}\n", "driver.type: unknown driver 'kafka'"),
        (MINIMAL + "driver: {type: local, pth: x}\n", "driver.pth: unknown key"),
        (MINIMAL + "transforms: [gzip]\n", "transforms.0: unknown transform 'gzip'"),
        (MINIMAL + "app: {url: ftp://x}\n",
         "app.url: must be an http://, https:// or grpc://host:port URL"),
        (MINIMAL + "app: {fatal_codes: [200]}\n", "app.fatal_codes: a 2xx code cannot be fatal"),
        (MINIMAL + "retry: {initial_delay_s: 5, max_delay_s: 1}\n", "max_delay_s must be >="),
        (MINIMAL + "dead_letter: {queue: a}\n", "must not be one of the consumed queues"),
        ("queues: [\n", "cannot parse"),
    ],
)
def test_invalid_config_is_one_line_naming_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    from priority_pubsub.core.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    from priority_pubsub.core.errors import ConfigError

    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_bad_environment_override_names_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from priority_pubsub.core.errors import ConfigError

    monkeypatch.setenv("PRIORITY_PUBSUB_LEASE__DURATION_S", "0")
    with pytest.raises(ConfigError, match=r"^lease\.duration_s: "):
        load_config(write(tmp_path, MINIMAL))


@pytest.mark.parametrize(("attempt", "delay"), [(1, 1.0), (2, 2.0), (3, 4.0), (10, 30.0),
                                                (10_000, 30.0)])
def test_backoff_doubles_up_to_the_cap(attempt: int, delay: float) -> None:
    assert RetryConfig(initial_delay_s=1, max_delay_s=30).delay_for(attempt) == delay


def test_environment_values_are_toml_where_they_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRIORITY_PUBSUB_APP__FATAL_CODES", "[400, 409]")
    monkeypatch.setenv("PRIORITY_PUBSUB_SCHEDULING", "weighted")  # not TOML: kept as text
    settings = load_config(write(tmp_path, MINIMAL))
    assert settings.app.fatal_codes == (400, 409)
    assert settings.scheduling == "weighted"


def test_an_environment_key_does_not_fill_in_a_misshapen_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Merged, the environment's ``{"url": ...}`` would have replaced the file's string: a
    valid config out of a wrong file (``publish``, ``stats`` and ``requeue`` read this way)."""
    monkeypatch.setenv("PRIORITY_PUBSUB_APP__URL", "http://127.0.0.1:9")
    path = write(tmp_path, MINIMAL + "app: http://127.0.0.1:8000\n")
    with pytest.raises(ConfigError, match=r"^app: Input should be a valid dictionary or "
                       r"instance of AppConfig$"):
        load_config(path)


def test_a_section_is_created_filled_or_left() -> None:
    """What daprd's flags write into: a null section is the model's "off", which a flag may
    turn on; a section written as a scalar stays, for validation to name."""
    raw: dict[str, Any] = {"app": {"timeout_s": 5}, "journal": None, "log": 3}
    add_to_section(raw, "app", {"url": "http://a"})
    add_to_section(raw, "journal", {"path": "/j"})
    add_to_section(raw, "server", {"port": 1})
    add_to_section(raw, "log", {"level": "debug"})
    assert raw == {"app": {"timeout_s": 5, "url": "http://a"}, "journal": {"path": "/j"},
                   "server": {"port": 1}, "log": 3}
