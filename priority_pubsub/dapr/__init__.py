"""Dapr mode: read a team's Dapr setup (resources directory, ``/dapr/subscribe``) and deliver
to the app exactly as daprd's subscriber does.

Modules, each owning one thing: ``options`` (the ``dapr:`` config section), ``flags`` (daprd's
command-line flags), ``manifests`` (YAML resources), ``secrets`` (``secretKeyRef``),
``subscriptions`` (Subscription manifests, ``/dapr/subscribe``, daprd's merge), ``routing``
(CEL rules), ``naming`` (queue names as the components name them), ``components`` (the
component type -> driver registry), ``snssqs`` (the AWS component's envelope, entities and
dead-letter topics), ``plan`` (everything combined into queues and settings), ``delivery``
(the request daprd would send), ``dead_letters`` (per-subscription dead-letter topics),
``setup`` (loading), ``check`` (routes against the app).
"""
