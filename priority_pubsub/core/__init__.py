"""The bottom layer: the vocabulary every other module shares.

Errors, the message and its lease (and a dead letter as an operator sees it), outcomes, the
request sent to the app, backoff, JSON text helpers, secret redaction and durations and
instants as a person reads them (``human``), importing a library without the optional
packages it would pull in (``imports``), and the pod this process runs in (``pod``). May
import nothing of the project outside ``core``, so any module may import it.
"""
