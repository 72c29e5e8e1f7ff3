"""One benchmark on two checkouts, side by side: the base (e.g. a ``git worktree`` of main at
the commit before a change, with its own ``make install``) and this one, alternating round by
round so the machine's drift touches both alike; the median of each chosen result over the
rounds, and head / base.

Each round runs ``<checkout>/.venv/bin/python -m <module> <args>`` in that checkout and reads
the JSON document it prints. The benchmark module must exist in both (copy a new one into the
base checkout: it then measures the base's code with the same yardstick).

    python -m bench.versus --base /work/wt/base --rounds 3 \\
        --key drivers.gcp_pubsub.receive_calls_per_min_per_queue \\
        --key drivers.gcp_pubsub.pickup_median_s -- bench.idle --driver gcp_pubsub
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

from bench.harness.output import emit, log
from bench.harness.rendering import format_md
from bench.harness.stats import median_of, ratio

HERE = Path(__file__).resolve().parent.parent


def run_once(checkout: Path, command: list[str]) -> dict[str, Any]:
    """One run of ``python -m <command>`` in ``checkout``: its JSON document."""
    done = subprocess.run([str(checkout / ".venv" / "bin" / "python"), "-m", *command],
                          cwd=checkout, capture_output=True, text=True, check=True)
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def pick(document: dict[str, Any], key: str) -> float | None:
    """The value at dotted ``key`` (None where a run has none); a number picks a list item."""
    value: Any = document
    for part in key.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]  # a list's item by its index: results.0.full_s
            continue
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return float(value) if isinstance(value, int | float) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--key", action="append", required=True,
                        help="dotted path of a number in the benchmark's JSON")
    parser.add_argument("--note", default="", help="what is compared (kept in the document)")
    parser.add_argument("--documents", type=Path,
                        help="keep each run's whole JSON document here (<side>-<round>.json)")
    parser.add_argument("command", nargs="+", help="module and arguments, after --")
    args = parser.parse_args()
    checkouts = {"base": args.base.resolve(), "head": HERE}
    values: dict[str, dict[str, list[float | None]]] = {
        key: {"base": [], "head": []} for key in args.key}
    for round_ in range(args.rounds):
        for side, checkout in checkouts.items():
            log(f"round {round_ + 1}/{args.rounds}: {side} ({checkout}) ...")
            document = run_once(checkout, args.command)
            if args.documents:
                args.documents.mkdir(parents=True, exist_ok=True)
                path = args.documents / f"{side}-{round_ + 1}.json"
                path.write_text(json.dumps(document, indent=1) + "\n")
            for key in args.key:
                values[key][side].append(pick(document, key))
    result = {key: {side: {"rounds": got, "median": median_of(got)}
                    for side, got in sides.items()}
              for key, sides in values.items()}
    rows = [[key, sides["base"]["median"], sides["head"]["median"],
             ratio(sides["head"]["median"], sides["base"]["median"])]
            for key, sides in result.items()]
    emit("versus", {"base": str(checkouts["base"]), "benchmark": " ".join(args.command),
                    "note": args.note, "rounds": args.rounds, "results": result},
         ["result", "base median", "head median", "head / base"], rows)


def sections(directory: Path) -> list[str]:
    """RESULTS.md's sections of the comparisons kept in ``directory`` (this script's
    documents: they need a second checkout, so ``run_all`` renders them but does not run
    them)."""
    out: list[str] = []
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        rows = [[key, sides["base"]["median"], sides["head"]["median"],
                 (round(sides["head"]["median"] / sides["base"]["median"], 3)
                  if sides["base"]["median"] and sides["head"]["median"] is not None else None),
                 f"{sides['base']['rounds']} / {sides['head']['rounds']}"]
                for key, sides in document["results"].items()]
        out += [f"## versus: {path.stem}", "", document.get("note", ""), "",
                f"`{document['command']}` ({document['when']}; base: `{document['base']}`)", "",
                format_md(["result", "base median", "head median", "head / base",
                           "rounds (base / head)"], rows), ""]
    return out


if __name__ == "__main__":
    main()
