"""Configuration: the typed models of ``config.yaml`` and how the file is read.

``config`` (the models and ``load_config``), ``paths`` (relative paths anchored at the file),
``plugins`` (drivers and transforms found by entry-point name), and the option models of the
sections that features above own (``dapr``, ``publish_api``, ``grpc_address``), kept here so
configuration stays at the bottom. May import ``core`` only.
"""
