"""The test run's order: files by their recorded time, longest first, each file's tests
together and in their own order (``tests/support/schedule.py``)."""

from __future__ import annotations

from tests.support.schedule import ESTIMATES, _estimates, longest_first


def test_files_run_longest_first_and_unknown_files_keep_their_order_after() -> None:
    nodeids = ["a.py::one", "a.py::two", "b.py::one", "c.py::one", "d.py::one", "c.py::two"]
    order = longest_first(nodeids, {"b.py": 5.0, "c.py": 90.0})
    assert [nodeids[index] for index in order] == [
        "c.py::one", "c.py::two", "b.py::one", "a.py::one", "a.py::two", "d.py::one"]


def test_without_estimates_the_collection_order_stands() -> None:
    nodeids = ["b.py::x", "a.py::y", "b.py::z"]
    assert longest_first(nodeids, {}) == [0, 2, 1]


def test_the_recorded_estimates_name_test_files_with_seconds() -> None:
    estimates = _estimates()
    assert ESTIMATES.exists()
    assert estimates, "tests/durations.json records no file"
    for file, seconds in estimates.items():
        assert (ESTIMATES.parents[1] / file).is_file(), f"{file}: no such test file"
        assert seconds >= 0, file
