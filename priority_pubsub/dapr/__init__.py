"""Dapr mode: read a team's Dapr setup (resources directory, ``/dapr/subscribe``) and deliver
to the app exactly as daprd's subscriber does.

Modules, each owning one thing: ``flags`` (daprd's command-line flags), ``manifests`` (YAML
resources), ``secrets`` (``secretKeyRef``), ``templates`` (daprd's metadata templates and
namespace scoping), ``subscriptions`` (Subscription manifests, ``/dapr/subscribe``, daprd's
merge), ``discovery`` (asking the app for its subscriptions, HTTP or gRPC), ``routing`` (CEL
rules), ``naming`` (queue names as the components name them), ``components`` (the component
kinds; a topic's broker name), ``kinds`` (the component type -> kind registry), ``snssqs``
(the AWS component's envelope, entities and dead-letter topics), ``provisioning``
(``priority-pubsub provision`` in Dapr mode), ``plan`` (everything combined into queues and
settings), ``request_builder`` (the request daprd would send), ``dead_letters``
(per-subscription dead-letter topics), ``setup`` (loading), ``check`` (templated metadata,
routes against the app), ``runtime`` (the sidecar run with a Dapr plan). The ``dapr:`` config
section's model is ``settings.dapr``.

May import ``provision``, ``sidecar`` and everything below it (``delivery``, ``app``,
``drivers``, ``transforms``, ``telemetry``, ``settings``, ``core``); ``publish_api``,
``commands`` and ``cli`` import it.
"""
