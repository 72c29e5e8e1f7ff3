"""The configuration reference (``docs/reference/config.md``), rendered from the JSON Schema.

The schema comes from the models ``load_config`` validates with (``settings.schema``), so the
reference cannot drift from them: every key with its type, default, description and the
environment variable that overrides it (``PRIORITY_PUBSUB_`` + the key path upper-cased,
``__`` between levels, as ``settings.source`` reads it:
``PRIORITY_PUBSUB_APP__HEALTH__INTERVAL_S``).
A key inside a list (``queues``, ``transforms``) is overridden with the whole list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from priority_pubsub.settings.config import ENV_PREFIX
from priority_pubsub.settings.schema import ConfigSchema, config_schema

Schema = dict[str, Any]


@dataclass(frozen=True)
class Key:
    """One row of the reference."""

    path: str
    type: str
    default: str
    env: str
    description: str


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    keys: tuple[Key, ...]


class _Walker:
    def __init__(self, schema: Schema) -> None:
        self.defs: dict[str, Schema] = schema.get("$defs", {})

    def resolve(self, node: Schema) -> Schema:
        while "$ref" in node:
            node = {**self.defs[node["$ref"].removeprefix("#/$defs/")],
                    **{k: v for k, v in node.items() if k != "$ref"}}
        return node

    def object_of(self, node: Schema) -> Schema | None:
        """The object schema a key holds (through ``$ref`` and ``X | null``), if any."""
        node = self.resolve(node)
        if "properties" in node:
            return node
        objects = [self.object_of(b) for b in node.get("anyOf", []) if b.get("type") != "null"]
        found = [o for o in objects if o is not None]
        return found[0] if len(found) == 1 else None

    def keys(self, node: Schema, path: list[str], in_list: bool) -> list[Key]:
        rows: list[Key] = []
        required = set(node.get("required", []))
        for name, prop in node.get("properties", {}).items():
            here = [*path, name]
            rows.append(self.row(prop, here, in_list, name in required))
            nested = self.object_of(prop)
            if nested is not None and name != "driver":
                rows += self.keys(nested, here, in_list)
            items = self.resolve(prop).get("items")
            if isinstance(items, dict):
                element = self.object_of(items)
                if element is not None:
                    rows += self.keys(element, [*here[:-1], f"{name}[]"], True)
        return rows

    def row(self, prop: Schema, path: list[str], in_list: bool, required: bool) -> Key:
        resolved = self.resolve(prop)
        nested = self.object_of(prop) is not None
        return Key(
            path=".".join(path),
            type=self.type_of(prop),
            default="required" if required else _default(prop, resolved, nested),
            env=_env(path, in_list),
            description=_one_line(prop.get("description") or resolved.get("description", "")),
        )

    def type_of(self, node: Schema) -> str:
        if "$ref" in node:
            return "object"
        if "const" in node:
            return json.dumps(node["const"])
        if "enum" in node:
            return " \\| ".join(json.dumps(v) for v in node["enum"])
        for union in ("anyOf", "oneOf"):
            if union in node:
                return " \\| ".join(self.type_of(branch) for branch in node[union])
        kind = node.get("type", "any")
        if node.get("writeOnly"):
            return "secret string"
        if kind == "array":
            items = node.get("items", {})
            return f"list of {self.type_of(items)}" if items else "list"
        if node.get("format") == "path":
            return "path"
        return str(kind)


def _default(prop: Schema, resolved: Schema, nested: bool) -> str:
    """The default as JSON; a section's default is what its keys' defaults say."""
    if "default" not in prop and "default" not in resolved:
        return "—"
    value = prop.get("default", resolved.get("default"))
    if nested and value is not None:
        return "see its keys"
    return f"`{json.dumps(value)}`"


def _env(path: list[str], in_list: bool) -> str:
    if in_list:
        upto = next(i for i, part in enumerate(path) if part.endswith("[]"))
        listed = [*path[:upto], path[upto].removesuffix("[]")]
        return f"`{ENV_PREFIX}_{'__'.join(part.upper() for part in listed)}` (the whole list)"
    return f"`{ENV_PREFIX}_{'__'.join(part.upper() for part in path)}`"


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def sections(generated: ConfigSchema | None = None) -> list[Section]:
    """The reference's sections: the top level, then one per driver and per transform."""
    generated = generated or config_schema()
    schema = generated.schema
    walker = _Walker(schema)
    top = walker.keys(schema, [], False)
    out = [Section("config.yaml", _one_line(schema.get("description", "")), tuple(top))]
    driver = schema["properties"]["driver"]
    for branch in driver["allOf"]:
        name = branch["if"]["properties"]["type"]["const"]
        model = walker.resolve(branch["then"])
        out.append(Section(f"driver: {name}", _one_line(model.get("description", "")),
                           tuple(walker.keys(model, ["driver"], False))))
    entry = schema["properties"]["transforms"]["items"]["anyOf"][1]
    for branch in entry["allOf"]:
        name = branch["if"]["properties"]["name"]["const"]
        model = walker.resolve(branch["then"])
        keys = walker.keys(model, ["transforms[]"], True)
        if len(keys) > 1:
            out.append(Section(f"transform: {name}", _one_line(model.get("description", "")),
                               tuple(keys)))
    return out


def config_reference(generated: ConfigSchema | None = None) -> str:
    """The whole page, Markdown."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from the configuration models by `priority_pubsub.settings.reference` "
        "(the same models `load_config` validates with, and the JSON Schema "
        "`priority-pubsub config schema` prints): do not edit by hand.",
        "",
        "Every key can be set from the environment: `PRIORITY_PUBSUB_` and the key path in "
        "capitals, `__` between levels (`PRIORITY_PUBSUB_APP__URL`). The environment wins "
        "over the file. A key inside a list (`queues[]`, `transforms[]`) is set with the whole "
        "list (`PRIORITY_PUBSUB_QUEUES='[{name=\"high\"}, {name=\"low\"}]'`). Default "
        "`—`: none (the key is optional); `required`: the file must set it.",
        "",
    ]
    for section in sections(generated):
        lines += [f"## {section.title}", ""]
        if section.intro:
            lines += [section.intro, ""]
        lines += ["| Key | Type | Default | Environment variable | Description |",
                  "|---|---|---|---|---|"]
        lines += [f"| `{k.path}` | {k.type} | {k.default} | {k.env} | {k.description} |"
                  for k in section.keys]
        lines.append("")
    return "\n".join(lines)
