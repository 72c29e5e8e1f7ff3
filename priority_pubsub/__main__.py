"""``priority-pubsub`` and ``python -m priority_pubsub``: ``run -c FILE`` (what a pod runs)
starts the sidecar without importing the CLI's parser; every other command line goes to the
CLI (``priority_pubsub.cli``)."""

from __future__ import annotations

import sys


def main() -> None:
    from priority_pubsub.commands.run import plain_run, run_sidecar

    plain = plain_run(sys.argv[1:])
    if plain is None:
        from priority_pubsub.cli import main as cli

        cli()
        return
    from priority_pubsub.dapr.flags import DaprdFlags

    run_sidecar(plain.config, DaprdFlags(), provision=plain.provision)


if __name__ == "__main__":
    main()
