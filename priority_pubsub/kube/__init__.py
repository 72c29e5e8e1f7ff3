"""The Kubernetes API as the sidecar's own pod reaches it: the in-cluster credentials
(``api``) and what the sidecar keeps on its pod object (``deletion_cost``).

Reached with aiohttp, the HTTP client the sidecar already loads, not the ``kubernetes``
package (tens of megabytes and a thread pool for two kinds of request). May import
``telemetry``, ``settings`` and ``core``; nothing of the delivery path: what it needs to know
of it (whether anything is in flight) it is given as a callable.
"""
