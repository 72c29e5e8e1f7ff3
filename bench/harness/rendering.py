"""What a benchmark contributes to ``bench/RESULTS.md``, and the Markdown it is written in.

Each benchmark knows its own figures: which targets they meet and how its section reads.
``bench.run_all`` only runs the benchmarks and collects these from each one's ``RENDERING``,
so a benchmark's rendering changes with the benchmark, in one module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Result = dict[str, Any]
"""One benchmark's JSON document, as ``results.json`` keeps it."""

Rows = list[list[Any]]

HAND_MEASURED = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
"""Figures measured by hand (profiles, one-off runs): a page of the docs, not code."""


def _as_it_is(body: Result) -> Result | None:
    return body


@dataclass(frozen=True)
class Rendering:
    """A benchmark's part of RESULTS.md; each piece optional (a benchmark without targets
    adds no row to the targets table)."""

    targets: Callable[[Result], Rows] | None = None
    """The targets table's rows: what was aimed at, the figure measured, met or not."""
    section: Callable[[Result], list[str]] | None = None
    """Lines under the benchmark's heading, above its JSON."""
    shown: Callable[[Result], Result | None] = _as_it_is
    """The JSON shown under the section, from the result without its bookkeeping (None:
    none; what is left out stays in results.json)."""
    legend: Sequence[str] = field(default_factory=tuple)
    """Lines of the legend at the end: what the section's column names mean."""


def format_md(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (None shown as -)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join("-" if c is None else str(c) for c in row) + " |"
              for row in rows]
    return "\n".join(lines)


def met(big: float | None, small: float | None) -> str:
    """A target's status: "met" where ``big >= small`` (the limit or the figure, whichever
    the target bounds from above), "n/a" where either was not measured."""
    if big is None or small is None:
        return "n/a"
    return "met" if big >= small else "NOT met"


def hand_measured(heading: str, page: Path = HAND_MEASURED) -> list[str]:
    """The section ``## heading`` of ``page`` as a ``###`` subsection, each paragraph on one
    line (as RESULTS.md writes them); a pointer to the page where it has no such section."""
    text = page.read_text(encoding="utf-8") if page.exists() else ""
    _, found, rest = text.partition(f"\n## {heading}\n")
    if not found:
        return [f"### {heading}", "", f"See docs/{page.name}."]
    body = rest.split("\n## ", 1)[0].strip()
    paragraphs = [" ".join(block.split("\n")) for block in body.split("\n\n")]
    return [f"### {heading}", *(line for p in paragraphs for line in ("", p))]
