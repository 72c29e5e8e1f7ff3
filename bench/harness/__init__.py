"""What every benchmark stands on, none of it a benchmark itself: the no-op app and the CLI
sidecar as processes, the brokers started for a run, the reference loops a benchmark compares
the sidecar with, counting broker calls, statistics and output.

The benchmarks (``bench.<name>``) import from here; nothing here imports a benchmark.
"""
