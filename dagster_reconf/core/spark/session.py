"""Build the SparkSession a managed stream runs in.

The settings that matter for control and that people forget: RocksDB as the state
store (the only provider Spark's state repartition supports), event logging into the
stream's own directory (the trace source for critical-path analysis), UTC session time
(so event-time windows mean the same everywhere), the driver bound to 127.0.0.1 unless the
spec names a cluster-reachable host and bind address,
Python workers started with this interpreter (so they import this venv's packages, PySpark compiled), and
driver threads with stacks deep enough for a stop during ``foreachBatch`` (:data:`DRIVER_THREAD_STACK`).
"""

from __future__ import annotations

import os
import shlex
import sys
import warnings
from pathlib import Path

from pyspark.sql import SparkSession
from upath import UPath

from dagster_reconf.core.spark.worker_interpreter import worker_python
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.storage import Location, make_dirs, spark_uri

__all__ = [
    "DRIVER_THREAD_STACK",
    "ROCKSDB_PROVIDER",
    "build_spark_session",
    "helper_session",
    "native_repartition_available",
    "spark_conf_for",
]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LOOPBACK = "127.0.0.1"
# A stop that interrupts a foreachBatch function returns to the JVM as a Py4J error whose message holds the Python
# traceback and the Java stack (about 10 KB). Spark tells a stop from a failure by matching that message against
# ``An error occurred while calling((.|\r\n|\r|\n)*)``, a pattern Java's regex engine recurses into once per
# character: on the default 1 MB thread stack (4 MB too, measured) the stream thread died of a StackOverflowError
# at every such stop, a thousand-line trace in the driver log. 16 MB keeps twice the measured need (8 MB sufficed).
DRIVER_THREAD_STACK = "-Xss16m"


def spark_conf_for(spec: StreamSpec, event_log_dir: Location | None, temp_dir: Path | None = None) -> dict[str, str]:
    """The full Spark configuration of a stream (spec fields first, ``spark_conf`` last).

    ``temp_dir``: where the driver keeps its temporary files (Spark's local dirs, and the JVM's
    ``java.io.tmpdir`` where this process starts the JVM) instead of ``/tmp``; a user's own
    ``spark.local.dir`` or ``-Djava.io.tmpdir`` wins."""
    conf = {
        "spark.app.name": f"reconf-{spec.name}",
        "spark.master": spec.master,
        "spark.sql.shuffle.partitions": str(spec.state_partitions),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.host": spec.driver_host,
        "spark.driver.bindAddress": spec.driver_bind_address,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopTimeout": "60s",
        # A Python task a query stop interrupts spins a core until Spark kills its worker: 2 s of polling plus this
        # (default 2 s); see python_workers.stop_python_workers.
        "spark.python.task.killTimeout": "100ms",
    }
    if spec.instrumentation and event_log_dir is not None:
        make_dirs(event_log_dir)
        conf["spark.eventLog.enabled"] = "true"
        conf["spark.eventLog.dir"] = (
            spark_uri(event_log_dir) if isinstance(event_log_dir, UPath) else event_log_dir.resolve().as_uri()
        )
    else:
        conf["spark.eventLog.enabled"] = "false"
    if spec.executor_cores:
        conf["spark.executor.cores"] = str(spec.executor_cores)
    if spec.max_cores:  # with a ceiling, max_cores is held in executors (core/spark/executors.py)
        conf["spark.cores.max"] = str(spec.cores_ceiling or spec.max_cores)
    if spec.executor_memory:
        conf["spark.executor.memory"] = spec.executor_memory
    ours = [DRIVER_THREAD_STACK]
    if temp_dir is not None:
        conf["spark.local.dir"] = str(temp_dir)
        ours.append(f"-Djava.io.tmpdir={shlex.quote(str(temp_dir))}")
    conf.update(spec.spark_conf)
    # The user's own JVM options come last, so a -Xss of theirs wins. They apply where this process starts the JVM.
    own = spec.spark_conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = " ".join([*ours, own]).strip()
    return conf


def _use_this_interpreter(master: str) -> None:
    """Make Spark start Python workers with this interpreter.

    Must run before the SparkContext starts: PySpark takes the workers' executable from the
    ``PYSPARK_PYTHON`` environment variable (not ``spark.pyspark.python``), and without it
    Python data-source workers start the system Python, which cannot import this package.
    On a local master, through :func:`~dagster_reconf.core.spark.worker_interpreter.worker_python` (PySpark imported
    compiled).
    """
    os.environ["PYSPARK_PYTHON"] = worker_python() if master.startswith("local") else sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    # PySpark 4.3 warns on every pandas conversion that pandas 3 is not fully supported;
    # the conversions we use are covered by the oracle tests, so the warning is noise.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)


def _new_session(conf: dict[str, str]) -> SparkSession:
    _use_this_interpreter(conf["spark.master"])
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def helper_session(
    app_name: str, master: str = "local[2]", shuffle_partitions: int = 4, spark_conf: dict[str, str] | None = None
) -> SparkSession:
    """A plain local session for helper jobs (the oracle, tests): same settings, no event log, no UI; ``spark_conf``
    as a stream's (a stream's storage connector and its settings, for an oracle reading what it wrote there)."""
    spec = StreamSpec(
        name="helper",
        entrypoint="helper:none",
        master=master,
        state_partitions=shuffle_partitions,
        instrumentation=False,
        spark_conf=spark_conf or {},
    )
    conf = spark_conf_for(spec, None)
    conf.update({"spark.app.name": app_name, "spark.ui.enabled": "false"})
    return _new_session(conf)


def build_spark_session(spec: StreamSpec, event_log_dir: Location | None, temp_dir: Path | None = None) -> SparkSession:
    """A new SparkSession for ``spec``; any active session in this process is stopped first.

    A stopped session's JVM stays up, so building the next one is much cheaper than a
    new driver process: that is how session-scope settings (master, cores) change
    without paying a JVM start.
    """
    if temp_dir is not None:  # the JVM extracts its native libraries there: it must exist
        temp_dir.mkdir(parents=True, exist_ok=True)
    return _new_session(spark_conf_for(spec, event_log_dir, temp_dir))


def native_repartition_available() -> tuple[bool, str]:
    """Whether this PySpark has the offline state repartition, and its version."""
    import pyspark
    from pyspark.sql import SparkSession

    return hasattr(SparkSession, "_streamingCheckpointManager"), pyspark.__version__
