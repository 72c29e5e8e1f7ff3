"""``check`` in Dapr mode: every component's metadata as templated, with the broker's names
of a namespace-scoped component's topics, so an operator sees the names that will be used;
and every route of every subscription must exist on the app, or each message would get 404
and be dropped. A route is probed with ``OPTIONS``: frameworks answer 404 for a path they do
not serve and 200/204/405 for one they do, without running the handler."""

from __future__ import annotations

import aiohttp

from priority_pubsub.core.redaction import MASK, mask_field
from priority_pubsub.dapr.plan import DaprPlan
from priority_pubsub.dapr.routing import app_path


def component_lines(plan: DaprPlan) -> list[str]:
    """Every component in scope and its metadata after templating, secrets masked (a
    ``secretKeyRef`` always, a plain value by its name or content: ``mask_field``)."""
    lines = []
    for component in plan.templated:
        lines.append(f"component {component.name} ({component.type}, {component.source})")
        lines += [f"  {name}: {MASK if value is None else mask_field(name, value)}"
                  for name, value in component.values]
    chosen = plan.component
    if chosen.topic_prefix:
        topics = (topic for queue in plan.queues for topic in queue.topics)
        lines.append(f"component {chosen.name} is namespace-scoped ({{namespace}} in its "
                     f"metadata): topics on the broker are {chosen.topic_prefix!r} + topic: "
                     + ", ".join(f"{t} -> {chosen.broker_topic(t)}" for t in topics))
    return lines


async def missing_routes(plan: DaprPlan, app_url: str, timeout_s: float = 5) -> list[str]:
    problems: list[str] = []
    if app_url.startswith("grpc://"):
        return problems  # gRPC routes are a field of the request, not paths to probe
    base = app_url.rstrip("/")
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for topic, subscription in plan.subscriptions.items():
            for path in dict.fromkeys(app_path(rule.path) for rule in subscription.rules):
                where = f"route {path} (topic {topic}, {subscription.source})"
                try:
                    async with session.options(base + path) as response:
                        status = response.status
                except (aiohttp.ClientError, TimeoutError) as exc:
                    problems.append(f"{where}: app unreachable ({type(exc).__name__})")
                    continue
                if status == 404:
                    problems.append(f"{where}: the app answers 404 (no such path): every "
                                    "event would be dropped")
    return problems
