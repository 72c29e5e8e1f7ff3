"""``secretKeyRef`` resolved as self-hosted daprd resolves it: through the secret store the
component names in ``auth.secretStore``, itself a component of the resources directory.

Supported stores: ``secretstores.local.env`` (environment variables, optional ``prefix``) and
``secretstores.local.file`` (a JSON file, nested keys joined by ``nestedSeparator``, ":" by
default). Kubernetes secrets are a later step. Errors name the component and field, never a
secret's value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.manifests import Component

SECRET_STORE_PREFIX = "secretstores."
LOCAL_ENV = "secretstores.local.env"
LOCAL_FILE = "secretstores.local.file"


def resolve_metadata(component: Component, stores: Mapping[str, Component]) -> dict[str, str]:
    """The component's metadata as name -> value, secrets looked up in its secret store."""
    resolved: dict[str, str] = {}
    for index, item in enumerate(component.metadata):
        if item.value is not None:
            resolved[item.name] = item.value
            continue
        where = f"{component.source}: Component {component.name}: spec.metadata[{index}]"
        store = _store_for(component, stores, where)
        resolved[item.name] = _lookup(store, item.secret_name or "", item.secret_key or "",
                                      where)
    return resolved


def _store_for(component: Component, stores: Mapping[str, Component], where: str) -> Component:
    if component.secret_store is None:
        raise ConfigError(f"{where}.secretKeyRef: the component has no auth.secretStore "
                          "(self-hosted daprd needs one to resolve it)")
    store = stores.get(component.secret_store)
    if store is None:
        raise ConfigError(f"{where}.secretKeyRef: secret store {component.secret_store!r} "
                          "is not a component in the resources path")
    return store


def _lookup(store: Component, name: str, key: str, where: str) -> str:
    options = {item.name: item.value or "" for item in store.metadata}
    if store.type == LOCAL_ENV:
        variable = options.get("prefix", "") + name
        value = os.environ.get(variable)
        if value is None:
            raise ConfigError(f"{where}.secretKeyRef: environment variable {variable} is not set "
                              f"(secret store {store.name})")
        return value
    if store.type == LOCAL_FILE:
        secrets = _file_secrets(store, options)
        # local.file stores map one key per secret: name and key are the same there.
        value = secrets.get(name if name in secrets else key)
        if value is None:
            raise ConfigError(f"{where}.secretKeyRef: key {name!r} not found in "
                              f"{options.get('secretsFile')} (secret store {store.name})")
        return value
    raise ConfigError(f"{where}.secretKeyRef: secret store type {store.type} is not supported "
                      f"here (supported: {LOCAL_ENV}, {LOCAL_FILE})")


def _file_secrets(store: Component, options: Mapping[str, str]) -> dict[str, str]:
    filename = options.get("secretsFile")
    if not filename:
        raise ConfigError(f"{store.source}: Component {store.name}: spec.metadata: "
                          "secretsFile is required")
    path = Path(filename)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{store.source}: Component {store.name}: secretsFile {path}: "
                          f"cannot read JSON ({type(exc).__name__})") from None
    separator = options.get("nestedSeparator") or ":"
    flat: dict[str, str] = {}
    _flatten(document, "", separator, flat)
    return flat


def _flatten(value: Any, prefix: str, separator: str, into: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}{separator}{key}" if prefix else str(key), separator, into)
    else:
        into[prefix] = value if isinstance(value, str) else json.dumps(value)
