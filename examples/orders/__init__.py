"""A user's stream, end to end: your own PySpark code over Spark's file source, managed by dagster-reconf.

* ``streams.py``: the stream definition (source, logic, sink: yours), the batch job it must agree with, and a
  writer that drops order files for trying it out.
* ``definitions.py``: the Dagster code location that starts it, watches it and scales it.

Copy the folder into your project and change the import paths (``examples.orders...``) to yours.
"""
