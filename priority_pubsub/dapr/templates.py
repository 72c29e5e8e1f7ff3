"""Component metadata templates, applied as daprd applies them to every component's metadata
before the component sees it (dapr ``pkg/runtime/meta/meta.go`` ``convertItemsToProps``, the
same in 1.16, 1.17 and 1.18), and daprd's namespace-scoped pub/sub components.

In each value, in this order (the order matters: a pod name holding ``{appID}`` is expanded):

- every ``{uuid}`` becomes a new random UUID, one per occurrence;
- ``{podName}`` becomes ``POD_NAME``; a value naming it with ``POD_NAME`` empty or unset fails
  the component (daprd: "property X refers to {podName} but podName is not set"): exit 2;
- ``{namespace}`` becomes ``<NAMESPACE>.<app id>`` (``NAMESPACE`` unset: ``default``);
- ``{appID}`` becomes the app id.

Secrets are resolved first, so a secret's value is templated too. A pub/sub component with
``{namespace}`` in any value before templating is namespace-scoped (``meta.ContainsNamespace``,
``NamespaceScoped`` in ``processor/pubsub``): see ``ComponentContext.broker_topic``.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.pod import Pod
from priority_pubsub.dapr.manifests import Component

UUID = "{uuid}"
POD_NAME = "{podName}"
NAMESPACE = "{namespace}"
APP_ID = "{appID}"


@dataclass(frozen=True)
class MetadataTemplates:
    app_id: str
    pod: Pod

    def apply(self, value: str, where: str) -> str:
        """``value`` templated; ``where`` names the component and field in the error."""
        while UUID in value:
            value = value.replace(UUID, str(uuid.uuid4()), 1)
        if POD_NAME in value:
            if not self.pod.name:
                raise ConfigError(f"{where}: refers to {POD_NAME} but POD_NAME is not set "
                                  "(daprd fails the component too; set it from the pod's "
                                  "metadata.name)")
            value = value.replace(POD_NAME, self.pod.name)
        value = value.replace(NAMESPACE, f"{self.pod.namespace}.{self.app_id}")
        return value.replace(APP_ID, self.app_id)

    def metadata(self, component: Component, values: Mapping[str, str]) -> dict[str, str]:
        """``component``'s metadata ``values`` (secrets resolved), each templated."""
        return {name: self.apply(value, _where(component, name))
                for name, value in values.items()}

    def component(self, component: Component) -> Component:
        """``component`` with its plain values templated (a ``secretKeyRef`` is templated
        once looked up, through ``metadata``)."""
        items = tuple(item if item.value is None else dataclasses.replace(
            item, value=self.apply(item.value, _where(component, item.name)))
            for item in component.metadata)
        return dataclasses.replace(component, metadata=items)

    def topic_prefix(self, values: Iterable[str]) -> str:
        """The namespace prefix of a pub/sub component whose metadata ``values`` (before
        templating) name ``{namespace}``: daprd scopes the whole component to the namespace;
        empty otherwise."""
        return self.pod.namespace if any(NAMESPACE in value for value in values) else ""


def _where(component: Component, name: str) -> str:
    return f"{component.source}: Component {component.name}: metadata {name}"


@dataclass(frozen=True)
class TemplatedComponent:
    """A component's metadata as the component gets it, for ``check`` to print: templated, a
    ``secretKeyRef``'s value None (never printed)."""

    name: str
    type: str
    source: str
    values: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, component: Component, values: Mapping[str, str] | None = None
           ) -> TemplatedComponent:
        """``component`` (its plain values templated), or its ``values`` where given."""
        given = values or {}
        return cls(component.name, component.type, component.source, tuple(
            (item.name, None if item.value is None else given.get(item.name, item.value))
            for item in component.metadata))
