"""Benchmarks (not tests): each script prints one JSON document on stdout and a table on stderr.

Run them from the repository root as modules, e.g. ``python -m bench.throughput``; ``python -m
bench.run_all`` runs them all and regenerates ``bench/RESULTS.md``.

By role: ``run_all`` plans, runs and collects; each ``bench.<name>`` module is one benchmark,
its command line and its part of RESULTS.md (``RENDERING``: targets and section); what they
share is ``bench.harness``, which imports no benchmark (the ``bench`` import contracts in
``pyproject.toml``); ``bench/versus/`` keeps the ``bench.versus`` comparisons that
``run_all`` renders but cannot run.
"""
