"""Take the docs' screenshot of the monitor page under load (docs/img/monitor.png).

A sidecar (local driver, three queues, concurrency 4) with a real app that answers in 0.5-3 s
and refuses some messages (dead letters), a steady stream published to all three queues for
``--load-s`` seconds, one queue paused from the page; then a full-page PNG from Debian's
Chromium (Playwright, as the browser tests drive it).

    .venv/bin/python scripts/monitor_screenshot.py --out docs/img/monitor.png
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.helpers import publish  # noqa: E402
from tests.support.app import Received, RecordingApp, Reply  # noqa: E402
from tests.support.browser import launched_chromium  # noqa: E402
from tests.support.sidecar import SidecarProcess, local_config, write_config  # noqa: E402

TOKEN = "screenshot-admin-token"


def behaviour(received: Received) -> Reply:
    data = received.event["data"]
    if data.get("bad"):
        return Reply(422)
    return Reply(delay_s=random.uniform(0.2, 1.5))


def keep_publishing(path: Path, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        for queue, weight in (("high", 2), ("normal", 3), ("low", 4)):
            for _ in range(weight):
                n += 1
                body = {"task": n, "bad": n % 23 == 0}
                publish(path, queue, json.dumps(body))
        stop.wait(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "monitor.png")
    parser.add_argument("--load-s", type=float, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="monitor-shot-") as name, RecordingApp() as app:
        directory = Path(name)
        app.behaviour = behaviour
        config = local_config(directory, app.url, concurrency=4,
                              monitor={"admin_token": TOKEN, "refresh_s": 1, "sample_s": 5},
                              server={"host": "127.0.0.1", "port": 0, "depth_interval_s": 1})
        path = write_config(directory, config)
        publish(path, "high", json.dumps({"task": 0}))
        sidecar = SidecarProcess(directory, config)
        stop = threading.Event()
        publisher = threading.Thread(target=keep_publishing, args=(path, stop), daemon=True)
        try:
            sidecar.wait_ready()
            publisher.start()
            with launched_chromium() as browser:
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.goto(f"{sidecar.ops_url}/monitor")
                page.fill("#admin-token", TOKEN)
                page.click("#token-form button")
                time.sleep(args.load_s / 2)
                page.click("tr[data-queue='normal'] button[data-action='pause']")
                time.sleep(args.load_s / 2)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out), full_page=True)
        finally:
            stop.set()
            publisher.join(10)
            sidecar.stop()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
