"""Libraries imported without the optional packages they would pull in by themselves
(issue 28: memory per pod): each case in a fresh interpreter, as a sidecar starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from priority_pubsub.core.imports import without

_CHECK = """\
import json, sys
import {module}
hidden = {package!r} not in sys.modules
import {package}
print(json.dumps([hidden, {package!r} in sys.modules]))
"""


@pytest.mark.parametrize(("module", "package"), [
    ("priority_pubsub.telemetry.logs", "rich"),
    ("priority_pubsub.telemetry.logs", "colorama"),
    ("priority_pubsub.telemetry.logs", "greenlet"),
    ("priority_pubsub.drivers.redis.driver", "opentelemetry"),
])
def test_the_sidecar_module_leaves_the_optional_package_out_yet_importable(
    module: str, package: str
) -> None:
    done = subprocess.run([sys.executable, "-c", _CHECK.format(module=module, package=package)],
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [True, True]


def test_a_package_already_imported_stays_as_it_is() -> None:
    assert "json" in sys.modules
    with without("json", "a_package_that_is_not_there"):
        import json as again

        assert again is json
        assert sys.modules["a_package_that_is_not_there"] is None
        with pytest.raises(ImportError):
            import a_package_that_is_not_there  # type: ignore[import-not-found]  # noqa: F401
    assert "a_package_that_is_not_there" not in sys.modules
