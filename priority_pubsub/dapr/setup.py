"""Loading the settings in either mode: native (config.yaml alone) or Dapr (config.yaml, the
daprd flags, the Dapr resources and the app's ``/dapr/subscribe``, config.yaml winning over
what the resources imply)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.flags import DaprdFlags
from priority_pubsub.delivery.reload import Candidate, ReloadSource
from priority_pubsub.settings import source
from priority_pubsub.settings.config import (
    CONFIG_ENV,
    Settings,
    describe_validation_error,
    read_config_file,
    resolve_config_path,
    validate_config,
)
from priority_pubsub.settings.dapr import DaprConfig

if TYPE_CHECKING:
    from priority_pubsub.dapr.plan import DaprPlan  # Dapr mode only: imported by _load_dapr
    from priority_pubsub.dapr.subscriptions import Subscription


@dataclass(frozen=True)
class Loaded:
    settings: Settings
    plan: DaprPlan | None = None
    warnings: tuple[str, ...] = ()
    from_app: tuple[Subscription, ...] = ()
    """Dapr mode: the subscriptions the app gave (``GET /dapr/subscribe``)."""


def load(config: Path | None, flags: DaprdFlags | None = None, *, reach_app: bool = True,
         from_app: Sequence[Subscription] | None = None) -> Loaded:
    """Read and validate; in Dapr mode also read the resources and (``reach_app``) ask the
    app for its subscriptions, unless ``from_app`` gives them (a live reload: daprd asks the
    app at start only). Raises ``ConfigError`` (exit 2) or ``AppNotAnswering``.

    The one way from the files and the command line to validated settings: what reloads
    them must come through here too, so a section written with the wrong type is refused
    (``settings.config.refuse_misshapen_sections``) before the flags or Dapr mode read it."""
    flags = flags or DaprdFlags()
    configuration, warnings = _daprd_configuration(config)
    if configuration is not None:
        config = None  # daprd's --config FILE: no priority-pubsub config was named with it
    # With daprd's flags a config file is read only when named (-c or the environment): a
    # daprd command line needs none, and a ./config.yaml of native mode must not sneak in.
    named = config is not None or bool(os.environ.get(CONFIG_ENV))
    raw = read_config_file(resolve_config_path(config)) if named or not flags.given else {}
    for key, value in (configuration or {}).items():
        raw.setdefault(key, value)  # the priority-pubsub config wins
    warnings += flags.apply(raw)
    if raw.get("dapr") is None:  # dapr: null is the model's "off", as journal: null
        settings = validate_config(raw)
        return Loaded(settings, None, tuple(warnings))
    return _load_dapr(raw, reach_app, warnings, from_app)


def native_reload(config: Path | None, flags: DaprdFlags | None, settings: Settings
                  ) -> ReloadSource:
    """How a native-mode sidecar reads its config again for a live reload: ``load``, as at
    start (a file that now reads as Dapr mode changes ``dapr``: restart-only, refused)."""

    def again() -> Candidate:
        return Candidate(load(config, flags, reach_app=False).settings)

    return ReloadSource(again, watched_paths(config, flags, settings))


def watched_paths(config: Path | None, flags: DaprdFlags | None, settings: Settings
                  ) -> tuple[Path, ...]:
    """The files ``load`` reads (the config file, or daprd's ``--config`` Configuration) and,
    in Dapr mode, the resources directories: what a live reload watches."""
    flags = flags or DaprdFlags()
    paths: list[Path] = []
    if config is not None:
        paths.append(config)
    elif os.environ.get(CONFIG_ENV) or not flags.given:
        paths.append(resolve_config_path(None))
    if settings.dapr is not None:
        paths += [path for path in settings.dapr.resources_path if path not in paths]
    return tuple(paths)


def _daprd_configuration(config: Path | None) -> tuple[dict[str, Any] | None, list[str]]:
    """``--config FILE`` naming a Dapr ``Configuration`` (as ``dapr run`` passes it): the
    keys it implies and its warnings; None when the file is anything else (read as today)."""
    if config is None or not config.is_file():
        return None, []
    from priority_pubsub.dapr.configuration import read_configuration
    from priority_pubsub.settings.dapr import dapr_manifest_kind

    if dapr_manifest_kind(config) != "Configuration":
        return None, []
    return read_configuration(config)


def _load_dapr(raw: dict[str, Any], reach_app: bool, warnings: list[str],
               asked: Sequence[Subscription] | None) -> Loaded:
    from priority_pubsub.dapr.discovery import app_subscriptions
    from priority_pubsub.dapr.manifests import load_manifests
    from priority_pubsub.dapr.plan import build_plan

    try:
        dapr = DaprConfig.model_validate(raw["dapr"])
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, prefix="dapr")) from None
    if "queues" in raw:
        raise ConfigError("queues: not used in Dapr mode: the queues come from the Dapr "
                          "resources (order them with dapr.priorities)")
    manifests = load_manifests(dapr.resources_path)
    app = source.section(raw, "app")
    app_url = str(app.get("url") or Settings.model_fields["app"].default.url.get_secret_value())
    push = app.get("push", True) is not False
    from_app = (list(asked) if asked is not None else
                app_subscriptions(app_url, dapr.app_id, dapr.subscribe_timeout_s)
                if reach_app and push and dapr.programmatic_subscriptions else [])
    plan = build_plan(dapr, manifests, from_app, publisher_only=not push)
    merged = source.merged(plan.settings(), raw)
    if merged["driver"].get("type") != plan.mapped.driver["type"]:
        raise ConfigError(f"driver.type: {merged['driver'].get('type')} does not serve "
                          f"{plan.component.type} (leave driver.type out in Dapr mode)")
    settings = validate_config(merged)
    os.environ.update(plan.mapped.environment)  # the component's credentials, for the SDK
    return Loaded(settings, plan, (*warnings, *plan.warnings), tuple(from_app))
