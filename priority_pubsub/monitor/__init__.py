"""The live monitor page and its JSON API on the ops server (docs/operations/monitor.md).

Between ``sidecar`` (which builds it from its parts) and the layers it reads: may import
``delivery``, ``app``, ``drivers``, ``telemetry``, ``settings`` and ``core``; never
``sidecar``, ``commands`` or anything above. The ops server (``telemetry.server``) only gets
its ``add_routes``.
"""

from pathlib import Path

STATIC = Path(__file__).parent / "static"
"""The page's template and script (package data)."""
