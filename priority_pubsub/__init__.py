"""priority-pubsub: a priority subscriber sidecar that delivers queue messages as CloudEvents."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("priority-pubsub")
    """One source of truth: ``[project] version`` in pyproject.toml, as installed."""
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
