"""Keep the chart's ``values.schema.json`` ``config`` section equal to the sidecar's own model.

The ``config`` value is rendered verbatim into the sidecar's config file, so its schema is
generated from ``priority_pubsub.settings.config.Settings`` (pydantic) rather than written twice by
hand: Helm then rejects an unknown or mistyped config key at install time, before a pod
crash-loops on it. The rest of the schema (the chart's own keys) is hand-written in the file.

``python -m tests.helm.schema --write`` regenerates the section; a test fails when it is stale.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from priority_pubsub.settings.config import Settings

SCHEMA_PATH = (
    Path(__file__).resolve().parents[2] / "charts" / "priority-pubsub" / "values.schema.json"
)
# Annotations only: they help no validator and differ between pydantic releases.
_DROPPED_KEYS = frozenset({"title", "format", "writeOnly"})
# Keys the chart passes as daprd's flags (dapr.resources.mountPath, dapr.appId: the flags
# fill them in at start), so config.dapr may hold only the rest (priorities...).
_FILLED_BY_THE_CHART = {"DaprConfig": frozenset({"resources_path", "app_id"})}


def config_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema of ``config``, its ``definitions``), refs rewritten to draft-07 style.

    ``#/definitions/...`` resolves from the document root in Helm 3 (draft-07) and Helm 4
    (2020-12) validators alike.
    """
    raw = json.loads(json.dumps(Settings.model_json_schema()).replace("#/$defs/", "#/definitions/"))
    definitions = raw.pop("$defs", {})
    for name, filled in _FILLED_BY_THE_CHART.items():
        body = definitions[name]
        body["required"] = [key for key in body.get("required", []) if key not in filled]
        if not body["required"]:
            del body["required"]
    return _clean(raw), {name: _clean(body) for name, body in sorted(definitions.items())}


def _clean(node: Any) -> Any:
    if isinstance(node, dict):
        cleaned = {key: _clean(value) for key, value in node.items() if key not in _DROPPED_KEYS}
        if isinstance(node.get("properties"), dict):  # property names are data, keep them all
            properties = node["properties"].items()
            cleaned["properties"] = {key: _clean(value) for key, value in properties}
        return cleaned
    if isinstance(node, list):
        return [_clean(item) for item in node]
    return node


def updated_schema(current: dict[str, Any]) -> dict[str, Any]:
    config, definitions = config_schema()
    updated = dict(current)
    updated["properties"] = {**current["properties"], "config": config}
    updated["definitions"] = definitions
    return updated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite values.schema.json")
    args = parser.parse_args()
    current = json.loads(SCHEMA_PATH.read_text())
    text = json.dumps(updated_schema(current), indent=2) + "\n"
    if args.write:
        SCHEMA_PATH.write_text(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
