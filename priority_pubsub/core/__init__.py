"""The bottom layer: the vocabulary every other module shares.

Errors, the message and its lease, outcomes, the request sent to the app, backoff, JSON
text helpers and secret redaction. May import nothing of the project outside ``core``, so
any module may import it.
"""
