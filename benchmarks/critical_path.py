"""Trace ingestion rate and Critical Participation speed, against a networkx baseline.

``python -m benchmarks.critical_path [--quick]``

* Ingestion: a zstd event log shaped like Spark 4.3's (full ``SparkListenerTaskEnd``
  lines with accumulables, jobs with two stages, task start events), read and normalized
  by the trace reader; ``ingest_events_per_s`` counts task events per second (median
  of 7 reads of the whole log (5 in a full run), after one small warm-up read that compiles numba code).
  The log is a finished application's, which DuckDB reads straight from the file (in a
  thread of its own, while the parts already read are normalized); the
  same bytes named as a running application's log (``.inprogress``) take the path every
  incremental read of a live stream takes (decompressed here, parsed by Arrow), measured
  in the same run as ``ingest_running_log_events_per_s``, and the ratio is
  ``ingest_speedup_vs_arrow``.
* CP: Spark-shaped activity tables (stages of tasks on k executor slots, control,
  result and shuffle messages) of 10k, 100k and 1M activities; ``cp_seconds`` is graph
  building plus CP, median of repeats.
* Baseline: the same CP computed straightforwardly with networkx (topological sort,
  exact integer path counts) on the same graph, in the same run;
  ``speedup_vs_networkx`` compares the CP passes on the same graph at 100k activities;
  ``speedup_vs_networkx_end_to_end`` charges ours with building the graph as well.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import zstandard

from dagster_reconf.core.traces.critical_path import build_graph, critical_participation
from dagster_reconf.core.traces.event_schema import ACTIVITY_COLUMNS
from dagster_reconf.core.traces.store import normalize_log

from ._common import emit, median, parse_args

SLOTS = 8


def task_end(task_id: int, stage_id: int, launch: int, executor: str, index: int) -> dict:
    accumulables = [
        {
            "ID": 400 + k,
            "Name": name,
            "Update": str(100 + k),
            "Value": str(1000 + k),
            "Internal": True,
            "Count Failed Values": True,
            "Metadata": "sql",
        }
        for k, name in enumerate(
            [
                "data size",
                "shuffle bytes written",
                "shuffle records written",
                "shuffle write time",
                "duration",
                "number of output rows",
                "peak memory",
                "time in aggregation build",
            ]
        )
    ]
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage_id,
        "Stage Attempt ID": 0,
        "Task Type": "ShuffleMapTask",
        "Task End Reason": {"Reason": "Success"},
        "Task Info": {
            "Task ID": task_id,
            "Index": index,
            "Attempt": 0,
            "Partition ID": index,
            "Launch Time": launch,
            "Executor ID": executor,
            "Host": "localhost",
            "Locality": "PROCESS_LOCAL",
            "Speculative": False,
            "Getting Result Time": 0,
            "Finish Time": launch + 40,
            "Failed": False,
            "Killed": False,
            "Accumulables": accumulables,
        },
        "Task Executor Metrics": {"JVMHeapMemory": 0, "JVMOffHeapMemory": 0},
        "Task Metrics": {
            "Executor Deserialize Time": 2,
            "Executor Deserialize CPU Time": 1_500_000,
            "Executor Run Time": 30,
            "Executor CPU Time": 25_000_000,
            "Peak Execution Memory": 8_650_736,
            "Result Size": 3799,
            "JVM GC Time": 1,
            "Result Serialization Time": 1,
            "Memory Bytes Spilled": 0,
            "Disk Bytes Spilled": 0,
            "Shuffle Read Metrics": {
                "Remote Blocks Fetched": 0,
                "Local Blocks Fetched": 4,
                "Fetch Wait Time": 3,
                "Remote Bytes Read": 0,
                "Local Bytes Read": 51_618,
                "Total Records Read": 5129,
            },
            "Shuffle Write Metrics": {
                "Shuffle Bytes Written": 51_618,
                "Shuffle Write Time": 902_740,
                "Shuffle Records Written": 5129,
            },
            "Input Metrics": {"Bytes Read": 0, "Records Read": 13_675},
            "Output Metrics": {"Bytes Written": 0, "Records Written": 0},
            "Updated Blocks": [],
        },
    }


def write_log(path: Path, tasks: int) -> int:
    """A zstd event log with ``tasks`` task end events; returns the number of task events."""
    lines = [
        {"Event": "SparkListenerLogStart", "Spark Version": "4.3.0"},
        {"Event": "SparkListenerApplicationStart", "App ID": "app-bench", "Timestamp": 0},
        {"Event": "SparkListenerExecutorAdded", "Executor ID": "0", "Executor Info": {"Total Cores": SLOTS}},
    ]
    task_id, t, job = 0, 1_000_000, 0
    while task_id < tasks:
        stages = [2 * job, 2 * job + 1]
        infos = [
            {
                "Stage ID": s,
                "Parent IDs": [stages[0]] if s == stages[1] else [],
                "RDD Info": [
                    {
                        "Name": "MapPartitionsRDD",
                        "Scope": json.dumps({"id": "1", "name": "Exchange" if s == stages[0] else "StateStoreSave"}),
                        "Parent IDs": [],
                    }
                ],
            }
            for s in stages
        ]
        lines.append(
            {
                "Event": "SparkListenerJobStart",
                "Job ID": job,
                "Stage IDs": stages,
                "Stage Infos": infos,
                "Properties": {"sql.streaming.queryId": "q-bench", "streaming.sql.batchId": str(job)},
            }
        )
        for stage in stages:
            for index in range(SLOTS):
                lines.append({"Event": "SparkListenerTaskStart", "Stage ID": stage, "Task Info": {"Task ID": task_id}})
                lines.append(task_end(task_id, stage, t, "0", index))
                task_id += 1
            t += 50
        job += 1
    data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()  # as Spark writes
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
    return task_id


def spark_shaped_activities(n_activities: int, workers: int = SLOTS, seed: int = 1) -> pd.DataFrame:
    """Stages of ``workers`` tasks each: 6 timeline activities + control, result and shuffle messages per task."""
    rng = np.random.default_rng(seed)
    per_task = 6 + 2 + workers  # timeline steps, control + result, shuffle inputs
    stages = max(1, n_activities // (per_task * workers))
    rows = []
    t = 0.0
    for stage in range(stages):
        durations = rng.uniform(1.0, 5.0, size=(workers, 6))
        starts = t + rng.uniform(0.1, 0.5, size=workers)
        ends = starts + durations.sum(axis=1)
        barrier = ends.max() + 0.2
        for w in range(workers):
            worker = f"0/{w}"
            edges = np.r_[starts[w], starts[w] + np.cumsum(durations[w])]
            for k, activity in enumerate(
                ("scheduling", "deserialization", "buffer", "processing", "serialization", "data")
            ):
                rows.append((worker, None, None, activity, edges[k], edges[k + 1], stage, w))
            rows.append(("driver", "driver", worker, "control", t, starts[w] + durations[w, 0], stage, w))
            rows.append((worker, worker, "driver", "data", ends[w] - durations[w, 5], ends[w], stage, w))
            if stage:
                for v in range(workers):
                    rows.append((f"0/{v}", f"0/{v}", worker, "data", edges[2], edges[3], stage, w))
        t = barrier
    frame = pd.DataFrame(
        rows, columns=["worker", "src_worker", "dst_worker", "activity", "start_ms", "end_ms", "stage_id", "index"]
    )
    frame["task_id"] = frame["stage_id"] * workers + frame["index"]
    for column in ACTIVITY_COLUMNS:
        if column not in frame:
            frame[column] = {"operator": "op", "status": "success", "speculative": False}.get(column, 0)
    frame["operator"] = np.where(frame["stage_id"] % 2 == 0, "scan", "aggregate")
    return frame[ACTIVITY_COLUMNS]


def networkx_cp(graph) -> float:
    """The same CP, straightforwardly: networkx topological order, exact integer path counts."""
    carry = graph.carries_paths
    g = nx.MultiDiGraph()
    g.add_nodes_from(range(len(graph.node_time)))
    g.add_edges_from(zip(graph.src[carry].tolist(), graph.dst[carry].tolist(), range(int(carry.sum()))))
    order = list(nx.topological_sort(g))
    forward = dict.fromkeys(g.nodes, 0)
    for s in graph.start_anchors.tolist():
        forward[s] = 1
    for v in order:
        forward[v] += sum(forward[u] for u, _ in g.in_edges(v))
    backward = dict.fromkeys(g.nodes, 0)
    for s in graph.end_anchors.tolist():
        backward[s] = 1
    for v in reversed(order):
        backward[v] += sum(backward[w] for _, w in g.out_edges(v))
    total = sum(forward[s] for s in graph.end_anchors.tolist())
    span = graph.window_end - graph.window_start
    weights = graph.weight[carry]
    cp = 0.0
    for u, v, k in g.edges(keys=True):
        cp += float(weights[k]) * ((forward[u] * backward[v]) / total)
    return cp / span


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    started = time.monotonic()
    tasks = 20_000 if args.quick else 200_000
    sizes = [10_000, 100_000, 1_000_000]
    repeats = 3
    ingest_repeats = 7 if args.quick else 5  # reads are short and this machine is noisy: more of them for the medians
    result: dict = {"benchmark": "critical_path", "mode": "quick" if args.quick else "full"}

    with tempfile.TemporaryDirectory(prefix="reconf-cp-") as tmp:
        warm = Path(tmp) / "app-warm.zstd"
        write_log(warm, 200)
        normalize_log(warm)  # compiles the slot placement once per process, as a long-running reader does
        path = Path(tmp) / "app-bench.zstd"
        n_tasks = write_log(path, tasks)
        running = path.with_name(path.name + ".inprogress")
        running.hardlink_to(path)
        ingest_times: dict[Path, list[float]] = {path: [], running: []}
        rows: dict[Path, int] = {}
        for _ in range(ingest_repeats):
            for log, times in ingest_times.items():  # interleaved: both see the same machine
                t0 = time.perf_counter()
                table, _, _ = normalize_log(log)
                times.append(time.perf_counter() - t0)
                rows[log] = len(table)
        if rows[path] != rows[running]:
            raise SystemExit(
                f"the two read paths disagree: {rows[path]:,} activities from DuckDB, {rows[running]:,} from Arrow"
            )
        activities = rows[path]
        seconds, running_seconds = median(ingest_times[path]), median(ingest_times[running])
    result["ingest_events_per_s"] = round(n_tasks / seconds, 1)
    result["ingest_running_log_events_per_s"] = round(n_tasks / running_seconds, 1)
    result["ingest_speedup_vs_arrow"] = round(running_seconds / seconds, 2)
    result["ingest_activities"] = activities
    print(
        f"ingest: {n_tasks:,} task events in {seconds:.2f} s ({n_tasks / seconds:,.0f}/s); as a running log "
        f"{running_seconds:.2f} s ({n_tasks / running_seconds:,.0f}/s)",
        flush=True,
    )

    cp_seconds, errors, passes = {}, [], {}
    warm = spark_shaped_activities(2_000)
    critical_participation(
        build_graph(warm, float(warm["start_ms"].min()), float(warm["end_ms"].max()))
    )  # compile once
    for size in sizes:
        activities = spark_shaped_activities(size)
        window = (float(activities["start_ms"].min()), float(activities["end_ms"].max()))
        times, pass_times = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            graph = build_graph(activities, *window)
            t1 = time.perf_counter()
            snap = critical_participation(graph)
            t2 = time.perf_counter()
            times.append(t2 - t0)
            pass_times.append(t2 - t1)
            errors.append(abs(snap.cp_sum - 1.0))
        cp_seconds[str(size)] = round(median(times), 4)
        passes[size] = (graph, median(pass_times), median(times))
        print(
            f"cp: {len(activities):,} activities, {len(graph.src):,} edges: {median(times):.3f} s "
            f"(CP passes {median(pass_times):.3f} s)",
            flush=True,
        )
    result["cp_seconds"] = cp_seconds

    baseline_size = 100_000
    graph, ours, ours_end_to_end = passes[baseline_size]
    t0 = time.perf_counter()
    baseline_sum = networkx_cp(graph)
    baseline = time.perf_counter() - t0
    errors.append(abs(baseline_sum - 1.0))
    result["networkx_seconds"] = {str(baseline_size): round(baseline, 4)}
    result["speedup_vs_networkx"] = round(baseline / ours, 1)  # the CP passes, on the same graph
    result["speedup_vs_networkx_end_to_end"] = round(baseline / ours_end_to_end, 1)  # ours also builds the graph
    result["max_cp_sum_error"] = float(max(errors))
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(f"networkx at {baseline_size:,}: {baseline:.2f} s vs {ours:.3f} s", flush=True)
    emit(result)


if __name__ == "__main__":
    main()
