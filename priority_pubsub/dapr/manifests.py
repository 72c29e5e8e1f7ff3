"""Read a Dapr resources directory: Component, Subscription and other manifests.

Self-hosted daprd reads every ``*.yaml``/``*.yml`` file of each ``--resources-path``
directory, each possibly holding several YAML documents. A problem is one ``ConfigError``
line naming the file and the field, as for config.yaml (exit 2).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.dapr import DAPR_API_GROUP

MAX_FILE_BYTES = 1024 * 1024
"""A resources file larger than this is refused unread: Kubernetes itself caps an object
near 1.5 MB, and a manifest is a few kB (an 8 MB file took PyYAML 7 s)."""
MAX_EXPANDED_NODES = 100_000
"""Values a document may hold once its YAML aliases are followed. Aliases are shared when
loaded, so a 'billion laughs' file loads small, then explodes in whatever walks it (a
metadata value turned to text): counted before anything walks it."""


@dataclass(frozen=True, slots=True)
class MetadataItem:
    """One ``spec.metadata`` entry: a plain value or a ``secretKeyRef`` (store key + key)."""

    name: str
    value: str | None
    secret_name: str | None = None
    secret_key: str | None = None


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    type: str
    metadata: tuple[MetadataItem, ...]
    secret_store: str | None
    scopes: tuple[str, ...]
    source: str

    def in_scope(self, app_id: str) -> bool:
        """daprd loads a component with ``scopes`` only for the app ids listed."""
        return not self.scopes or app_id in self.scopes


@dataclass(frozen=True, slots=True)
class RegisteredComponent:
    """A component loaded for this app, as daprd's metadata API lists it."""

    name: str
    type: str
    version: str = ""


@dataclass(frozen=True, slots=True)
class Manifest:
    """Any Dapr manifest: its kind, ``apiVersion``, name, the whole document, where from."""

    kind: str
    api_version: str
    name: str
    document: Mapping[str, Any]
    source: str


def load_manifests(paths: tuple[Path, ...]) -> list[Manifest]:
    """Every Dapr document of every resources directory, in file then document order."""
    manifests: list[Manifest] = []
    for directory in paths:
        if not directory.is_dir():
            raise ConfigError(f"dapr.resources_path: not a directory: {directory}")
        for path in sorted(directory.iterdir()):
            if path.suffix in (".yaml", ".yml") and path.is_file():
                manifests.extend(_read_file(path))
    return manifests


def _read_file(path: Path) -> Iterator[Manifest]:
    yaml = _yaml()
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {size} bytes, over the {MAX_FILE_BYTES} a resources "
                          "file may have (not a Dapr manifest?)")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster
    try:
        documents = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader))
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as exc:
        # ValueError: an integer of more digits than Python converts
        detail = " ".join(str(exc).split())[:200]
        raise ConfigError(f"{path}: cannot parse YAML: {detail}") from None
    except RecursionError:
        raise ConfigError(f"{path}: cannot parse YAML: nested too deeply") from None
    for document in documents:
        if _expanded_nodes(document, {}, MAX_EXPANDED_NODES) > MAX_EXPANDED_NODES:
            raise ConfigError(f"{path}: a document expands to more than "
                              f"{MAX_EXPANDED_NODES} values through YAML aliases")
        if not isinstance(document, dict):
            continue  # an empty document between '---' lines
        api_version = str(document.get("apiVersion") or "")
        if not api_version.startswith(DAPR_API_GROUP):
            continue  # not a Dapr resource (daprd ignores these too)
        kind = document.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"{path}: kind: required in a {api_version} manifest")
        yield Manifest(kind, api_version, _name(document, path), document, str(path))


def _expanded_nodes(value: object, seen: dict[int, int], limit: int) -> int:
    """How many values ``value`` holds with every alias followed, counting a shared node
    once per reference but walking it once (``seen``). Past ``limit``, or on a node that
    contains itself (``&a [*a]``), returns more than ``limit``. Iterative: a deeply nested
    document must not exhaust the stack here either."""
    stack: list[tuple[object, bool]] = [(value, False)]
    sizes: list[int] = []
    open_nodes: set[int] = set()
    while stack:
        node, finished = stack.pop()
        if not isinstance(node, dict | list):
            sizes.append(1)
        elif finished:
            children = len(node)
            size = 1 + sum(sizes[len(sizes) - children:])
            del sizes[len(sizes) - children:]
            seen[id(node)] = size
            open_nodes.discard(id(node))
            sizes.append(size)
        elif id(node) in seen:
            sizes.append(seen[id(node)])
        elif id(node) in open_nodes:
            return limit + 1  # recursive: infinite once expanded
        else:
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in
                         (node.values() if isinstance(node, dict) else node))
        if sizes and sizes[-1] > limit:
            return sizes[-1]
    return sizes[-1]


def _name(document: Mapping[str, Any], path: Path) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{path}: metadata.name: required")
    return name


def parse_component(manifest: Manifest) -> Component:
    where = f"{manifest.source}: Component {manifest.name}"
    spec = _mapping(manifest.document.get("spec"), f"{where}: spec")
    component_type = spec.get("type")
    if not isinstance(component_type, str) or not component_type:
        raise ConfigError(f"{where}: spec.type: required")
    items = spec.get("metadata") or []
    if not isinstance(items, list):
        raise ConfigError(f"{where}: spec.metadata: must be a list")
    metadata = tuple(_metadata_item(item, f"{where}: spec.metadata[{index}]")
                     for index, item in enumerate(items))
    auth = manifest.document.get("auth")
    secret_store = auth.get("secretStore") if isinstance(auth, dict) else None
    return Component(
        name=manifest.name, type=component_type, metadata=metadata,
        secret_store=str(secret_store) if secret_store else None,
        scopes=string_list(manifest.document.get("scopes"), f"{where}: scopes"),
        source=manifest.source,
    )


def _metadata_item(item: object, where: str) -> MetadataItem:
    entry = _mapping(item, where)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: required")
    reference = entry.get("secretKeyRef")
    if reference is not None:
        ref = _mapping(reference, f"{where}.secretKeyRef")
        secret_name = ref.get("name")
        if not isinstance(secret_name, str) or not secret_name:
            raise ConfigError(f"{where}.secretKeyRef.name: required")
        key = ref.get("key")
        return MetadataItem(name, None, secret_name, str(key) if key else secret_name)
    value = entry.get("value")
    # YAML turns `value: 10` and `value: true` into numbers and booleans; Dapr reads text.
    text = "" if value is None else _as_text(value)
    return MetadataItem(name, text)


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a mapping")
    return value


def string_list(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: must be a list of strings")
    return tuple(value)


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - the dapr extra installs it
        raise ConfigError(
            "Dapr mode needs PyYAML and cel-python: pip install 'priority-pubsub[dapr]'"
        ) from None
    return yaml
