"""The journal as the report reads it: which files (``files``, ``objects`` for object
storage), their Spark schema (``schema``) and the lines sorted into valid and bad (``load``).

May import ``spark`` (the session's helpers) and the sidecar's ``telemetry``, ``settings``,
``shipping`` and ``core``; never the report's maths, state or rendering.
"""
