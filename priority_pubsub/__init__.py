"""priority-pubsub: a priority subscriber sidecar that delivers queue messages as CloudEvents."""

from importlib.metadata import PackageNotFoundError, version

from priority_pubsub.core.tls import defer_ca_loading

defer_ca_loading()  # before any module of the package imports aiohttp

try:
    __version__ = version("priority-pubsub")
    """One source of truth: ``[project] version`` in pyproject.toml, as installed."""
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
