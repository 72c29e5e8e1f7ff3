"""Packaging: the wheel installs the priority_pubsub package only, never a top-level
``drivers`` or ``transforms``."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_wheel_installs_only_the_priority_pubsub_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, cwd=tmp_path,
    )
    [wheel] = tmp_path.glob("priority_pubsub-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"priority_pubsub"}
    assert "priority_pubsub/drivers/local/driver.py" in names
    assert "priority_pubsub/transforms/sns_envelope.py" in names
    assert "priority_pubsub/analytics/render/templates/report.html.j2" in names
    assert not any(name.startswith(("drivers/", "transforms/")) for name in names)


def test_installed_environment_has_no_bare_drivers_or_transforms(tmp_path: Path) -> None:
    probe = (
        "import importlib.util as u, priority_pubsub.drivers.local.driver as l, "
        "priority_pubsub.transforms.base as t;"
        "print(u.find_spec('drivers'), u.find_spec('transforms'), l.__file__, t.__file__)"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, cwd=tmp_path).stdout.split()
    assert out[:2] == ["None", "None"]
    assert out[2].endswith("priority_pubsub/drivers/local/driver.py")
    assert out[3].endswith("priority_pubsub/transforms/base.py")


def test_console_script_and_module_entry_point() -> None:
    for command in ([sys.executable, "-m", "priority_pubsub", "--help"],
                    [str(Path(sys.executable).with_name("priority-pubsub")), "--help"]):
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        assert "run" in result.stdout
        assert "publish" in result.stdout
