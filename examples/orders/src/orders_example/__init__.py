"""A user's stream, end to end: your own PySpark code over Spark's file source, managed by dagster-reconf.

The project is laid out as ``create-dagster project`` lays one out, and installs as a user's package does:

* ``streams.py``: the stream definition (source, logic, sink: yours), the batch job it must agree with, and a
  writer that drops order files for trying it out.
* ``defs/orders/defs.yaml``: dagster-reconf's Component, which starts the stream, watches it and scales it;
  ``definitions.py`` loads the ``defs/`` folder.

Copy ``examples/orders`` as your project's start and rename the package.
"""
