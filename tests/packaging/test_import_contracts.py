"""The package's architecture holds: imports go one way, top to bottom (the layers contract
in ``pyproject.toml``, checked by import-linter), and no module imports back into a circle,
imports inside functions and under ``TYPE_CHECKING`` counted."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.import_graph import PACKAGE, cycles, import_graph, module_files

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the tree at ``root`` (it puts its working directory first on the
    path, so a copy elsewhere is analysed, not the installed package)."""
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, capture_output=True,
                          text=True, timeout=120)


def copy_tree(destination: Path) -> Path:
    for package in (PACKAGE, "bench"):  # the contracts' root packages
        shutil.copytree(ROOT / package, destination / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", destination)
    return destination


def test_the_layers_contract_is_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert re.search(r"Contracts: \d+ kept, 0 broken", result.stdout), result.stdout[-3000:]


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    errors = tree / PACKAGE / "core" / "errors.py"
    errors.write_text(errors.read_text() + (
        "\n\ndef _upward() -> None:\n"
        "    from priority_pubsub.delivery import worker  # noqa: F401\n"))
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "priority_pubsub.core is not allowed to import priority_pubsub.delivery" in (
        result.stdout)
    assert "priority_pubsub.core.errors -> priority_pubsub.delivery.worker" in result.stdout


def test_a_new_top_level_module_must_be_given_a_layer(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    (tree / PACKAGE / "stray.py").write_text('"""Not placed in any layer."""\n')
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "priority_pubsub.stray" in result.stdout


@pytest.mark.parametrize(("module", "imported", "broken"), [
    ("rss_growth", "soak", "No cycles are allowed in bench."),  # bench.soak imports it
    ("harness/output", "latency", "bench.harness is not allowed to import bench.latency"),
])
def test_bench_contracts_fail_on_a_cycle_and_on_the_harness_importing_a_benchmark(
    tmp_path: Path, module: str, imported: str, broken: str,
) -> None:
    tree = copy_tree(tmp_path)
    path = tree / "bench" / f"{module}.py"
    path.write_text(path.read_text() + (
        f"\n\ndef _back() -> None:\n    from bench import {imported}  # noqa: F401\n"))
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout[-3000:]
    assert broken in result.stdout


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100  # the whole package was read
    assert cycles(graph) == []


def test_the_graph_counts_imports_inside_functions_and_under_type_checking(
    tmp_path: Path,
) -> None:
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from priority_pubsub.b import B\n")
    (package / "b.py").write_text("B = 1\n\ndef later() -> None:\n    from . import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import priority_pubsub.a\n")
    (package / "d.py").write_text("import priority_pubsub.b\n")
    graph = import_graph(tmp_path)
    assert graph[f"{PACKAGE}.b"] == {f"{PACKAGE}.c"}
    assert cycles(graph) == [[f"{PACKAGE}.a", f"{PACKAGE}.b", f"{PACKAGE}.c"]]


def test_every_subpackage_says_what_it_owns_and_may_import() -> None:
    for module, path in module_files(ROOT).items():
        if path.name != "__init__.py" or module == PACKAGE:
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert docstring, f"{module}: its __init__.py needs a docstring"
        if module.count(".") == 1:  # a layer: what it may import, as the contract says
            assert "may import" in docstring.lower(), f"{module}: say what it may import"
