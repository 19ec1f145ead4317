"""A user's stream over Kafka: Spark's own Kafka source, a stateful query, Spark's file sink.

* ``streams.py``: the stream definition (first click per user, deduplicated over all time),
  the batch job over the whole topic it must agree with, and a paced producer for trying it.

The connector is not part of pyspark: ``make kafka`` resolves it into ``.jvm/``; on your own
cluster, name its coordinates in the spec's ``spark_conf`` (``spark.jars.packages``).
"""
