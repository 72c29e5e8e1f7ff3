"""The transform contract and the chain that applies transforms in order.

A transform turns one payload into another (e.g. unwraps an SNS envelope) or raises
``TransformError`` with a reason; the worker then dead-letters the message, never retries it
(``TransformUnavailable``, a service the transform needs failing for now, is retried).

Optional abilities, as for drivers, are separate runtime-checkable protocols:
``AsyncTransform`` (needs I/O: awaited, off the event loop's critical path),
``SettleHook`` (told how the message was settled, e.g. to delete a claim-checked object
after an ack) and ``PublishHook`` (prepares a body for ``publish``, e.g. offloads it).
A transform with options declares an ``options_model`` and takes the validated options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from priority_pubsub.core.errors import TransformError, TransformUnavailable
from priority_pubsub.settings.plugins import instantiate_transform

if TYPE_CHECKING:
    from priority_pubsub.core.outcome import Outcome
    from priority_pubsub.settings.config import TransformEntry

__all__ = [
    "AsyncTransform",
    "Payload",
    "PublishHook",
    "SettleHook",
    "Transform",
    "TransformChain",
    "TransformError",
    "build_transform",
]


@dataclass(frozen=True, slots=True)
class Payload:
    body: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None
    claims: tuple[Any, ...] = ()
    """What this body was fetched from outside the message (claim checks), for the settle
    hooks: each transform recognises its own."""


@runtime_checkable
class Transform(Protocol):
    name: str

    def __call__(self, payload: Payload) -> Payload: ...


@runtime_checkable
class AsyncTransform(Protocol):
    name: str

    async def apply(self, payload: Payload) -> Payload: ...


@runtime_checkable
class SettleHook(Protocol):
    async def after_settle(self, outcome: Outcome, payload: Payload) -> None:
        """Called once the message was settled with ``outcome`` (the broker call succeeded)."""


@runtime_checkable
class PublishHook(Protocol):
    async def before_publish(self, payload: Payload) -> Payload:
        """The payload to publish instead (e.g. a pointer to an offloaded body)."""
        ...


def build_transform(entry: str | TransformEntry) -> Transform | AsyncTransform:
    """An instance for a config entry: a plain name, or a name with options."""
    name = entry if isinstance(entry, str) else entry.name
    options = {} if isinstance(entry, str) else entry.options()
    built: Transform | AsyncTransform = instantiate_transform(name, options)
    return built


class TransformChain:
    """Applies transforms in configured order; errors name the failing transform."""

    def __init__(self, transforms: Sequence[Transform | AsyncTransform]) -> None:
        self._transforms = tuple(transforms)

    @classmethod
    def from_config(cls, entries: Sequence[str | TransformEntry]) -> TransformChain:
        return cls([build_transform(entry) for entry in entries])

    @property
    def empty(self) -> bool:
        """No transforms: the worker skips the chain's awaits (a cost per delivery)."""
        return not self._transforms

    def __call__(self, payload: Payload) -> Payload:
        """The synchronous transforms only (an async one raises: use ``apply``)."""
        for transform in self._transforms:
            if not isinstance(transform, Transform):
                raise TransformError(f"{transform.name}: needs I/O, apply it with await")
            payload = self._step(transform.name, transform, payload)
        return payload

    async def apply(self, payload: Payload) -> Payload:
        for transform in self._transforms:
            if isinstance(transform, AsyncTransform):
                try:
                    payload = await transform.apply(payload)
                except Exception as exc:
                    raise _named(transform.name, exc) from exc
            else:
                payload = self._step(transform.name, transform, payload)
        return payload

    async def after_settle(self, outcome: Outcome, payload: Payload) -> None:
        for transform in self._transforms:
            if isinstance(transform, SettleHook):
                await transform.after_settle(outcome, payload)

    async def before_publish(self, payload: Payload) -> Payload:
        """Publish hooks in reverse order: the last transform undoes what is done first."""
        for transform in reversed(self._transforms):
            if isinstance(transform, PublishHook):
                payload = await transform.before_publish(payload)
        return payload

    @staticmethod
    def _step(name: str, transform: Transform, payload: Payload) -> Payload:
        try:
            return transform(payload)
        except Exception as exc:
            raise _named(name, exc) from exc


def _named(name: str, exc: Exception) -> TransformError:
    if isinstance(exc, TransformUnavailable):
        return TransformUnavailable(f"{name}: {exc}")
    if isinstance(exc, TransformError):
        return TransformError(f"{name}: {exc}")
    # A transform's bug is as deterministic as a bad body: retrying cannot help.
    return TransformError(f"{name}: unexpected {type(exc).__name__}: {exc}")
