"""Attach mode on a multi-query application's event log, against the managed path on the same log.

``python -m benchmarks.attach [--quick]``

An application of the benchmark's own, started the way a team starts theirs (a
SparkSession with its event log on, never supervised by dagster-reconf), runs three
queries at once until its log holds ``TASKS`` task-end events (100k in a full
run, 12k quick): one stateful query (a count per key) and two stateless ones that shuffle
into many small tasks. Then it stops and its log is final.

* Attach: each query is attached as its own stream (``core.attach``: its lifecycle and
  progress read from the log), and its trace store ingests the application's log (the
  reader keeps each query's activities apart by query id at read time).
  ``attach_ingest_events_per_s`` is task events per second of that ingestion, median of
  repeats on fresh stores; ``attach_end_to_end_events_per_s`` counts the progress pass too.
* Baseline, in the same run: the same log file in a managed stream's event-log
  directory, ingested by the path a supervised stream's traces take
  (``managed_ingest_events_per_s``). ``attach_vs_managed`` is the ratio (target >= 0.9).
* Per query: snapshots of every ``WINDOW_S`` window of its traces, CP over each (the sum
  must be 1 on every one: ``cp_sums_to_one``), and the DS2 recommendation made from its
  logs alone.

One JSON line last.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from dagster_reconf.core.scaling.ds2_policy import DS2Policy
from dagster_reconf.core.scaling.evidence import ConfigurationWindow, decide, ingest_and_read
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.spark.session import build_spark_session
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.store.storage import Location
from dagster_reconf.core.traces.attach import AttachSpec, attach
from dagster_reconf.core.traces.codecs import decompressed
from dagster_reconf.core.traces.critical_path import CPInvariantError, snapshot
from dagster_reconf.core.traces.eventlog import log_files
from dagster_reconf.core.traces.store import TraceStore, application_logs

from ._common import emit, median, parse_args

QUERIES = ("orders", "clicks", "payments")
STATE_PARTITIONS = 8
SHUFFLE_PARTITIONS = 96
WINDOW_S = 10.0
TASK_END = b'"Event":"SparkListenerTaskEnd"'


def _count_task_ends(log: Location, counted: dict[str, int]) -> int:
    """Task-end events in the application's log so far (Spark 4 rolls and compresses it): rolled files once each."""
    files = log_files(log)
    total = 0
    for index, path in enumerate(files):
        last = index == len(files) - 1
        if path.name not in counted or last:
            count = decompressed(path).count(TASK_END)
            if not last:
                counted[path.name] = count
            total += count
        else:
            total += counted[path.name]
    return total


def run_application(logs: Path, checkpoints: Path, tasks: int, timeout_s: float) -> dict[str, Any]:
    """The team's application: three stateful queries on the rate source until the log holds ``tasks`` task ends."""
    spark = build_spark_session(
        StreamSpec(name="shop", entrypoint=None, master="local[2]", state_partitions=STATE_PARTITIONS), logs
    )
    started = time.monotonic()
    try:
        queries = []
        for index, name in enumerate(QUERIES):
            rows = spark.readStream.format("rate").option("rowsPerSecond", 500 * (index + 1)).load()
            if index == 0:  # stateful: a count per key, its state in STATE_PARTITIONS partitions
                shaped, mode = rows.selectExpr("value % 97 AS key").groupBy("key").count(), "update"
            else:  # stateless, wide: a shuffle into many small tasks (the task events a busy application writes)
                shaped, mode = rows.repartition(SHUFFLE_PARTITIONS).selectExpr("value * 2 AS doubled"), "append"
            queries.append(
                shaped.writeStream.queryName(name)
                .outputMode(mode)
                .format("noop")
                .option("checkpointLocation", str(checkpoints / name))
                .trigger(processingTime="100 milliseconds")
                .start()
            )
        while not application_logs(logs):  # Spark creates it as the context starts
            time.sleep(0.2)
        log = application_logs(logs)[0]
        counted: dict[str, int] = {}
        while (written := _count_task_ends(log, counted)) < tasks:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"the application wrote {written} task ends in {timeout_s:g} s, not {tasks}")
            failed = [q.name for q in queries if q.exception() is not None]
            if failed:
                raise RuntimeError(f"queries {failed} failed: {queries[0].exception()}")
            time.sleep(3.0)
        for query in queries:
            query.stop()
        batches = {q.name: int(q.lastProgress["batchId"]) + 1 for q in queries}
    finally:
        spark.stop()
    (log,) = application_logs(logs)
    files = log_files(log)
    return {
        "log": log,
        "seconds": time.monotonic() - started,
        "batches": batches,
        "files": len(files),
        "task_ends": sum(decompressed(f).count(TASK_END) for f in files),
        "log_mb": round(sum(f.stat().st_size for f in files) / 1e6, 1),
    }


def _timed_ingest(store_root: Path, event_logs: Location) -> tuple[float, int]:
    shutil.rmtree(store_root, ignore_errors=True)
    began = time.perf_counter()
    report = TraceStore(store_root).ingest(event_logs)
    return time.perf_counter() - began, report.activities


def measure_ingestion(home: Path, app_logs: Path, log: Location, task_ends: int, repeats: int) -> dict[str, Any]:
    """Attach (progress pass + trace ingest) and managed (trace ingest) on the same log, alternating, medians."""
    managed = StreamPaths(home, "managed")
    managed.create()
    managed.spec.write_text(
        StreamSpec(
            name="managed", entrypoint=None, master="local[2]", state_partitions=STATE_PARTITIONS
        ).model_dump_json()
    )
    managed.event_log.mkdir(parents=True, exist_ok=True)
    shutil.copytree(str(log), managed.event_log / log.name)  # a rolling log is a directory
    _timed_ingest(
        managed.traces, managed.event_log
    )  # warm-up: compiles the normalizer's numba code, fills the page cache
    attach_s, progress_s, managed_s = [], [], []
    for repeat in range(repeats):
        name = f"probe-{repeat}"
        if repeat % 2:  # alternate which path goes first
            managed_s.append(_timed_ingest(managed.traces, managed.event_log)[0])
        began = time.perf_counter()
        attach(home, AttachSpec(name=name, event_logs=str(app_logs), query=QUERIES[0]))
        progress_s.append(time.perf_counter() - began)
        attach_s.append(_timed_ingest(StreamPaths(home, name).traces, StreamPaths(home, name).event_log)[0])
        if not repeat % 2:
            managed_s.append(_timed_ingest(managed.traces, managed.event_log)[0])
        shutil.rmtree(StreamPaths(home, name).root)
    attach_rate = task_ends / median(attach_s)
    managed_rate = task_ends / median(managed_s)
    return {
        "attach_ingest_events_per_s": round(attach_rate),
        "attach_end_to_end_events_per_s": round(
            task_ends / median(a + p for a, p in zip(attach_s, progress_s, strict=True))
        ),
        "managed_ingest_events_per_s": round(managed_rate),
        "attach_vs_managed": round(attach_rate / managed_rate, 3),
        "attach_progress_pass_s": round(median(progress_s), 3),
    }


def per_query(home: Path, app_logs: Path) -> dict[str, Any]:
    """Each query attached as its own stream: its snapshots, CP over each, and a DS2 recommendation from its logs."""
    policy = DS2Policy(PolicyConfig(window_batches=6, warmup_batches=2, stabilization_s=0, scale_down_delay_s=0))
    found: dict[str, Any] = {}
    for name in QUERIES:
        report = attach(home, AttachSpec(name=name, event_logs=str(app_logs), query=name))
        paths = StreamPaths(home, name)
        store = TraceStore(paths.traces)
        store.ingest(paths.event_log)
        activities = ingest_and_read(store, paths.event_log, query_ids=paths.query_ids)
        lo, hi = store.time_range()
        sums, failures = [], []
        began = time.perf_counter()
        start = lo
        while start < hi:
            window = store.activities(start, start + WINDOW_S * 1000, query_ids=paths.query_ids)
            if len(window):
                try:
                    _, result = snapshot(
                        window,
                        max(start, float(window["start_ms"].min())),
                        min(start + WINDOW_S * 1000, float(window["end_ms"].max())),
                    )
                    sums.append(float(result.cp_sum))
                except CPInvariantError as exc:  # reported, never hidden: the target counts it
                    failures.append(str(exc)[:200])
            start += WINDOW_S * 1000
        cp_s = time.perf_counter() - began
        records, _ = MetricsStore(paths.metrics).read(0)
        window = ConfigurationWindow().update(records)
        last = window.frame()["timestamp"].max().timestamp() if window.rows else time.time()
        decision = decide(policy, window, last + 1.0, activities)
        found[name] = {
            "progress_rows": report["progress"],
            "snapshots": len(sums) + len(failures),
            "cp_failures": len(failures),
            "first_cp_failure": failures[0] if failures else None,
            "cp_sum_min": round(min(sums), 12) if sums else None,
            "cp_sum_max": round(max(sums), 12) if sums else None,
            "cp_seconds": round(cp_s, 3),
            "ds2": decision.action,
            "ds2_reason": decision.reason[:240],
            "ds2_target": decision.plan.target.model_dump() if decision.plan else None,
        }
    return found


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    tasks = 12_000 if args.quick else 100_000
    repeats = 5 if args.quick else 7
    with tempfile.TemporaryDirectory(prefix="reconf-attach-bench-") as tmp:
        base = Path(tmp)
        app_logs = base / "spark-events"
        app_logs.mkdir()
        app = run_application(app_logs, base / "checkpoints", tasks, timeout_s=200.0 if args.quick else 1500.0)
        print(
            f"application: {app['task_ends']} task ends, {app['log_mb']} MB, batches {app['batches']} in "
            f"{app['seconds']:.0f} s",
            flush=True,
        )
        home = base / "home"
        ingestion = measure_ingestion(home, app_logs, app["log"], app["task_ends"], repeats)
        print(f"ingestion: {ingestion}", flush=True)
        queries = per_query(home, app_logs)
        for name, figures in queries.items():
            print(f"{name}: {figures}", flush=True)
    sums_ok = all(
        q["snapshots"] > 0
        and not q["cp_failures"]
        and abs(q["cp_sum_min"] - 1) <= 1e-9
        and abs(q["cp_sum_max"] - 1) <= 1e-9
        for q in queries.values()
    )
    emit(
        {
            "benchmark": "attach",
            "quick": args.quick,
            "task_events": app["task_ends"],
            "log_mb": app["log_mb"],
            "queries": len(QUERIES),
            "repeats": repeats,
            **ingestion,
            "meets_target": ingestion["attach_vs_managed"] >= 0.9,
            "cp_sums_to_one": sums_ok,
            "per_query": queries,
        }
    )


if __name__ == "__main__":
    main()
