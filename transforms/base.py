"""The transform contract and the chain that applies transforms in order.

A transform turns one payload into another (e.g. unwraps an SNS envelope) or raises
``TransformError`` with a reason; the worker then dead-letters the message, never retries it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from priority_pubsub.errors import TransformError

__all__ = ["Payload", "Transform", "TransformChain", "TransformError"]


@dataclass(frozen=True, slots=True)
class Payload:
    body: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None


@runtime_checkable
class Transform(Protocol):
    name: str

    def __call__(self, payload: Payload) -> Payload: ...


class TransformChain:
    """Applies transforms in configured order; errors name the failing transform."""

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self._transforms = tuple(transforms)

    @classmethod
    def from_names(cls, names: Sequence[str]) -> TransformChain:
        from priority_pubsub.plugins import transform_class

        return cls([transform_class(name)() for name in names])

    def __call__(self, payload: Payload) -> Payload:
        for transform in self._transforms:
            try:
                payload = transform(payload)
            except TransformError as exc:
                raise TransformError(f"{transform.name}: {exc}") from None
            except Exception as exc:
                # A transform's bug is as deterministic as a bad body: retrying cannot help.
                raise TransformError(
                    f"{transform.name}: unexpected {type(exc).__name__}: {exc}"
                ) from exc
        return payload
