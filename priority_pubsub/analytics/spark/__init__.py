"""The Spark session the report runs on: settings sized from the input and named, timed
steps (``tuning``), the JVM's options (``jvm``) and small driver-side frames (``frames``).

The bottom of the report: it imports nothing else of ``analytics``.
"""
