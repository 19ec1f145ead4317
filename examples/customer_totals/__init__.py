"""A user's stream with a Python state function: running totals per customer over order files.

* ``streams.py``: the stream definition (``applyInPandasWithState`` over Spark's file source, Spark's file sink) and
  its oracle (the running totals against a batch count over the files, once the stream has read them all). It reads
  the files :class:`orders_example.streams.OrderWriter` drops.
"""
