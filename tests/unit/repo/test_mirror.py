"""``tests/unit/`` mirrors the package, so "where is X tested" has one answer.

The unit tests of ``priority_pubsub/<package>/<module>.py`` live in
``tests/unit/<package>/test_<module>.py``, or in ``test_<module>_<aspect>.py`` beside it where
one file would be too long, or as ``test_<package>_<module>.py`` where the bare name would
repeat another test file's. A module tested elsewhere (against a real broker, on Spark, through
a sidecar) is listed in ``mirror.toml`` with the file that covers it; a module nothing tests
yet is listed as such, so the debt is visible and shrinks: an entry whose module gained its own
test file, or no longer exists, fails here until it is removed."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "priority_pubsub"
UNIT = ROOT / "tests" / "unit"

LISTS = tomllib.loads((Path(__file__).parent / "mirror.toml").read_text())
"""``mirror.toml``: the modules covered elsewhere (the covering file, why) and those that nothing
tests by name yet (why)."""
REASONS: dict[str, str] = LISTS["reasons"]
COVERED_ELSEWHERE: dict[str, tuple[str, str]] = {
    module: (entry["by"], REASONS.get(entry["why"], entry["why"]))
    for module, entry in LISTS["covered_elsewhere"].items()}
"""Module (under priority_pubsub/) -> the test file that covers it, and why not its own."""
NO_TEST_YET: dict[str, str] = LISTS["no_test_yet"]
"""Modules nothing tests by name: the debt, to shrink."""


def _modules() -> list[str]:
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                  if path.name not in ("__init__.py", "__main__.py"))


def _own_test(module: str) -> Path | None:
    """The module's own test file in the mirror, if it has one."""
    relative = Path(module)
    folder = UNIT / relative.parent
    name, package = relative.stem, relative.parent.name
    stems = [name] + ([f"{package}_{name}"] if package else [])
    for stem in stems:
        for pattern in (f"test_{stem}.py", f"test_{stem}_*.py"):
            found = sorted(folder.glob(pattern))
            if found:
                return found[0]
    return None


def test_every_module_has_its_own_test_file_or_names_the_file_that_covers_it() -> None:
    listed = COVERED_ELSEWHERE.keys() | NO_TEST_YET.keys()
    missing = [f"priority_pubsub/{module} -> tests/unit/{Path(module).parent}/"
               f"test_{Path(module).stem}.py".replace("/./", "/")
               for module in _modules() if _own_test(module) is None and module not in listed]
    assert not missing, "modules without a unit test file:\n" + "\n".join(missing)


def test_the_lists_name_only_modules_that_exist_and_have_no_own_test() -> None:
    modules = set(_modules())
    for module in COVERED_ELSEWHERE.keys() | NO_TEST_YET.keys():
        assert module in modules, f"{module} is gone: remove it from the list"
        own = _own_test(module)
        assert own is None, f"{module} has {own.relative_to(ROOT)}: remove it from the list"


def test_a_module_is_listed_once() -> None:
    assert not COVERED_ELSEWHERE.keys() & NO_TEST_YET.keys()


def test_every_covering_file_exists() -> None:
    gone = [f"{module}: {file}" for module, (file, _) in COVERED_ELSEWHERE.items()
            if not (ROOT / file).is_file()]
    assert not gone, "covering files that do not exist:\n" + "\n".join(gone)


def test_test_file_names_in_the_mirror_are_unique() -> None:
    names = [path.name for path in UNIT.rglob("test_*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_every_entry_says_why() -> None:
    assert all(why.strip() for _, why in COVERED_ELSEWHERE.values())
    assert all(why.strip() for why in NO_TEST_YET.values())
