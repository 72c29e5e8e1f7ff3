"""The Service Bus topology on the test broker (``tests/support/azure_servicebus``): queues whose
lock is fixed at creation, dead letters read from each queue's native ``$DeadLetterQueue``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusSender,
    ServiceBusSubQueue,
)

from tests.support.azure_servicebus import ServiceBusBroker
from tests.support.topologies.base import DeadLetter


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ServiceBusTopology:
    """Fresh queues on the broker and a sync SDK client to publish and read dead letters."""

    driver_type: ClassVar[str] = "azure_servicebus"

    def __init__(self, broker: ServiceBusBroker) -> None:
        self.broker = broker
        self.prefix = f"e{uuid.uuid4().hex[:8]}"
        self.client = ServiceBusClient.from_connection_string(broker.connection_string)
        self.created: list[str] = []
        self._senders: dict[str, ServiceBusSender] = {}
        """One sender per queue, kept open: a link per message made a publisher thread too
        slow for the chaos ledger's schedule on a loaded machine."""

    def queue(self, suffix: str, lease_s: float = 2.0, max_delivery_count: int = 20) -> str:
        name = f"{self.prefix}-{suffix}"
        self.broker.create_queue(name, lock_duration_s=lease_s,
                                 max_delivery_count=max_delivery_count)
        self.created.append(name)
        return name

    def publish(self, queue: str, body: bytes,
                attributes: Mapping[str, str] | None = None) -> None:
        properties: dict[str | bytes, Any] = {}
        properties.update((attributes or {}).items())
        sender = self._senders.get(queue)
        if sender is None:
            sender = self._senders[queue] = self.client.get_queue_sender(queue)
        try:
            sender.send_messages(ServiceBusMessage(body, content_type="application/json",
                                                   application_properties=properties))
        except Exception:
            self._senders.pop(queue, None)  # a fresh link next time
            sender.close()
            raise

    def dead_letters(self) -> list[DeadLetter]:
        letters: list[DeadLetter] = []
        for queue in self.created:
            with self.client.get_queue_receiver(
                queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER, prefetch_count=0
            ) as receiver:
                while batch := receiver.receive_messages(max_message_count=20, max_wait_time=1):
                    for message in batch:
                        properties = {_text(k): _text(v) for k, v in
                                      (message.application_properties or {}).items()}
                        letters.append(DeadLetter(b"".join(message.body), properties,
                                                  message.dead_letter_reason))
                        receiver.complete_message(message)
        return letters

    def driver_options(self) -> dict[str, Any]:
        return {"type": self.driver_type, "max_wait_s": 2,
                "connection_string": self.broker.connection_string}

    def dead_letter_config(self) -> dict[str, Any] | None:
        return None  # native: every queue has its own $DeadLetterQueue

    def close(self) -> None:
        for sender in self._senders.values():
            sender.close()
        self._senders.clear()
        self.client.close()
