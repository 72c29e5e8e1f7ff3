"""Benchmarks (not tests): each script prints one JSON document on stdout and a table on stderr.

Run them from the repository root as modules, e.g. ``python -m bench.throughput``; ``python -m
bench.run_all`` runs them all and regenerates ``bench/RESULTS.md``.
"""
