"""``python -m tests.support.azure_servicebus [--port P] [--lock-s S] [--max-deliveries N]
QUEUE...``: serve queues until Ctrl-C or a signal, after printing the connection string (the line a
parent process waits for: the queues exist once it is printed)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import time

from tests.support.azure_servicebus.broker import running_broker


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.azure_servicebus")
    parser.add_argument("queues", nargs="*", default=["tasks"])
    parser.add_argument("--port", type=int, default=None, help="a free one when not given")
    parser.add_argument("--lock-s", type=float, default=60.0, help="each queue's lock duration")
    parser.add_argument("--max-deliveries", type=int, default=10,
                        help="each queue's max delivery count")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    with running_broker(port=args.port) as broker:
        for name in args.queues:
            broker.create_queue(name, lock_duration_s=args.lock_s,
                                max_delivery_count=args.max_deliveries)
        print(broker.connection_string, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while broker.error is None:
                time.sleep(1)


if __name__ == "__main__":
    main()
