"""daprd's publish API for apps that publish (``publish_api:``, its model in
``settings.publish_api``): ``envelope`` (daprd's CloudEvent), ``errors`` (daprd's codes and bodies),
``service`` (checks, envelope, sinks: a queue in native mode, the component's topic in Dapr
mode), ``http`` and ``grpc`` (the two protocols), ``server`` (starting and stopping both).

May import ``dapr`` (Dapr mode's sinks) and everything below it; only ``cli`` imports it.
"""
