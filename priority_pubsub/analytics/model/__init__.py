"""The report's maths: the per-hour and per-message tables (``tables``), starvation windows
(``starvation``), the workers a target wait needs (``capacity``) and log-scale histograms
that add up across hours (``histogram``).

Reads the journal's columns (``journal.schema``) and builds frames with ``spark``; knows
nothing of where the state is stored or how the page looks.
"""
