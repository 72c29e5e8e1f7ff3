"""daprd's publish API for apps that publish (``publish_api:``): ``options`` (the config
section), ``envelope`` (daprd's CloudEvent), ``errors`` (daprd's codes and bodies),
``service`` (checks, envelope, sinks: a queue in native mode, the component's topic in Dapr
mode), ``http`` and ``grpc`` (the two protocols), ``server`` (starting and stopping both).
"""
