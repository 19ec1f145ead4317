"""A user's stream over Spark's rate source: a windowed count with a watermark, to Spark's file sink.

* ``streams.py``: the stream definition and its oracle. The rate source offers a steady load of its own
  (``rowsPerSecond``), numbered without gaps, so the oracle needs no batch job: each closed window's values must
  follow the previous window's without a gap or an overlap, each once.
"""
