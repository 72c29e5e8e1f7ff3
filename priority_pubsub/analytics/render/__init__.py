"""What a person sees: report.html (``page``, its ``svg`` charts and ``templates/``) and the
steps and summary on a terminal (``progress``).

Takes plain Python rows (the maths' row types, the line counts), never a Spark frame.
"""
