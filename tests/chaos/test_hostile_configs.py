"""Hostile config files: every one is refused by ``run`` with exit 2 and one line naming the
problem, never a traceback, a start, or a secret echoed back."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.chaos.ledger import Accounting
from tests.support.sidecar import cli

pytestmark = pytest.mark.chaos

SECRET = "s3cr3t-token-value"
QUEUES = "queues: [{name: a}]\n"
VALID = QUEUES + "app: {url: 'http://127.0.0.1:1'}\n"

CONFIGS: dict[str, bytes] = {
    "empty file": b"",
    "binary garbage": bytes(range(256)) * 4,
    "invalid utf-8": b"queues: [{name: caf\xe9}]\n",
    "yaml syntax": b"queues: [{name: a}\n",
    "list at top": b"- a\n- b\n",
    "no queues": b"concurrency: 2\n",
    "empty queues": b"queues: []\n",
    "queue not a map": b"queues: [a]\n",
    "duplicate queues": b"queues: [{name: a}, {name: a}]\n",
    "unknown top key": VALID.encode() + b"concurency: 3\n",
    "unknown nested key": VALID.encode() + b"retry: {max_attempt: 3}\n",
    "concurrency zero": VALID.encode() + b"concurrency: 0\n",
    "concurrency huge": VALID.encode() + b"concurrency: 1e400\n",
    "scheduling unknown": VALID.encode() + b"scheduling: fastest\n",
    "driver unknown": VALID.encode() + b"driver: {type: nosuch}\n",
    "driver key unknown": VALID.encode() + b"driver: {type: local, nosuch: 1}\n",
    "poll interval negative": VALID.encode() + b"driver: {type: local, poll_interval_s: -1}\n",
    "transform unknown": VALID.encode() + b"transforms: [rot13]\n",
    "delays reversed": VALID.encode()
    + b"retry: {max_attempts: 3, initial_delay_s: 10, max_delay_s: 1}\n",
    "journal fsync unknown": VALID.encode() + b"journal: {path: /tmp/j, fsync: always}\n",
    "app timeout negative": QUEUES.encode() + b"app: {timeout_s: -3}\n",
    "fatal code text": QUEUES.encode() + b"app: {url: 'http://x', fatal_codes: [abc]}\n",
    "secret in a bad spot": QUEUES.encode()
    + f"app: {{url: 'http://x', api_token: {SECRET}, timeout_s: -1}}\n".encode(),
    "deep yaml": b"queues: " + b"[" * 2000 + b"]" * 2000 + b"\n",
    "yaml alias bomb": b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a]\n"
    b"c: &c [*b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c]\nqueues: []\n",
}


def _run(item: tuple[str, bytes], directory: Path) -> tuple[str, int, str]:
    label, text = item
    path = directory / f"{abs(hash(label))}.yaml"
    path.write_bytes(text)
    result = cli("run", config=path, timeout_s=30)
    return label, result.returncode, result.stderr


def test_hostile_config_files_exit_2_with_one_line(
    tmp_path: Path, report: list[Accounting]
) -> None:
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda item: _run(item, tmp_path), CONFIGS.items()))
    bad = {}
    for label, code, stderr in results:
        lines = stderr.strip().splitlines()
        if code != 2 or len(lines) != 1 or "Traceback" in stderr or SECRET in stderr:
            bad[label] = (code, stderr[-400:])
    report.append(Accounting("hostile config files", len(CONFIGS), 0, 0, 0, 0, 0,
                             note=f"{len(CONFIGS) - len(bad)}/{len(CONFIGS)} exit 2, one line"))
    assert not bad, bad
