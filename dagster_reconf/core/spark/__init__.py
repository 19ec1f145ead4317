"""What runs inside a stream's driver process, beside its SparkSession: the runtime, the session, the progress
listener, executors and their growth, the stop at a batch boundary, batch jobs, the state migrator and reader, and
the Python workers' CPU.

Nothing here imports :mod:`dagster_reconf.core.process` (the code that starts and talks to drivers).
"""
