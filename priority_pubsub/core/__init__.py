"""The bottom layer: the vocabulary every other module shares.

Errors, the message and its lease, outcomes, backoff, JSON text helpers and secret redaction.
Imports nothing of the project (only the standard library and pydantic-free helpers), so any
module may import it.
"""
