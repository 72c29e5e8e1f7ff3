"""What operators read: structured logs, Prometheus metrics, the journal, traces, the watchdog,
the observer that feeds them from the delivery path, and the ops HTTP server.

May import ``settings`` and ``core``; never the delivery path, the app side or a driver.
"""
