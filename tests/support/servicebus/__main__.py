"""``python -m tests.support.servicebus QUEUE...``: serve queues until Ctrl-C."""

from __future__ import annotations

import contextlib
import logging
import time

from tests.support.servicebus.broker import running_broker


def main() -> None:  # pragma: no cover - manual use
    import sys

    logging.basicConfig(level=logging.INFO)
    with running_broker() as broker:
        for name in sys.argv[1:] or ["tasks"]:
            broker.create_queue(name)
        print(broker.connection_string, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(1)


if __name__ == "__main__":  # pragma: no cover
    main()
