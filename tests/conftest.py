"""Session-wide test settings."""

from __future__ import annotations

import os

os.environ.setdefault("PRIORITY_PUBSUB_TEST", "1")
