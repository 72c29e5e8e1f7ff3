"""Build the monitor from the sidecar's parts (the composition root passes them)."""

from __future__ import annotations

from collections.abc import Callable

from priority_pubsub.app.gate import AppGate
from priority_pubsub.delivery.cancel import Running
from priority_pubsub.delivery.control import QueueControl
from priority_pubsub.delivery.receiver import Receiver
from priority_pubsub.drivers.base import Driver
from priority_pubsub.monitor.admin import AdminActions
from priority_pubsub.monitor.dead_letters import DeadLetterDesk
from priority_pubsub.monitor.history import History
from priority_pubsub.monitor.routes import Monitor
from priority_pubsub.monitor.state import DepthReading, MonitorSources
from priority_pubsub.monitor.waiting import WaitingDesk
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver


def build_monitor(
    live: LiveSettings, *, driver: Driver, metrics: Metrics, gate: AppGate, receiver: Receiver,
    control: QueueControl, observer: DeliveryObserver, depths: dict[str, DepthReading],
    connected: Callable[[], bool], running: Running | None = None,
) -> Monitor:
    """``running``: the worker's deliveries at the app (the page's cancel acts on them)."""
    running = Running() if running is None else running  # an empty one is falsy
    settings = live.settings  # what a reload cannot change: the dead letters, the monitor
    desk = DeadLetterDesk(
        driver, settings.dead_letter.queue if settings.dead_letter else None,
        live.names_view, lambda: observer.dead_letters,
    )
    sources = MonitorSources(
        live=live, gate=gate, receiver=receiver, control=control, observer=observer,
        history=History(metrics, live.names_view, settings.monitor.sample_s),
        dead_letters=desk, depths=depths, connected=connected, running=running,
        waiting=WaitingDesk(driver, live.names_view),
    )
    journal_dir = settings.journal.path if settings.journal else None
    return Monitor(settings.monitor, sources,
                   AdminActions(control, desk, journal_dir, running=running,
                                waiting=sources.waiting))
