"""``reconf demo``: a bundled stream under the supervisor, changed live, checked at the end.

What it shows in a bounded time: a Nexmark Q5 stream starts in its own driver
process; its live progress streams to the terminal; half-way, its source parallelism
and rate change in place (stop at a batch boundary, restart in the same driver); at the
end it stops at a batch boundary and its output is checked against the batch oracle
over exactly the events it processed.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .metrics import MetricsStore, progress_frame
from .spec import StreamSpec
from .supervisor import StreamSupervisor

__all__ = ["check_output", "run_demo"]

DEMO_STREAM = "demo-q5"
DEMO_RATE = 3000.0


def run_demo(home: Path, seconds: float = 60.0, console: Console | None = None) -> int:
    """Run the demo; return 0 when the output matched the oracle."""
    from .cli import watch

    console = console or Console()
    supervisor = StreamSupervisor(home)
    paths = supervisor.paths(DEMO_STREAM)
    if supervisor.driver_info(DEMO_STREAM):
        supervisor.stop(DEMO_STREAM)
    shutil.rmtree(paths.root, ignore_errors=True)
    spec = StreamSpec(name=DEMO_STREAM, query="q5", rate=DEMO_RATE, source_partitions=1, trigger_interval_s=1.0)
    console.rule(f"demo: {spec.query} at {spec.rate:,.0f} events/s on {spec.master}, {seconds:g} s")
    with console.status("starting the driver (SparkSession, RocksDB state, event log, listener)..."):
        info = supervisor.start(spec)
    console.print(f"driver pid {info['pid']}, control port {info['control_port']}, Spark UI {info.get('spark_ui')}")
    store = MetricsStore(paths.metrics)
    restart = None
    try:
        watch(store, spec.name, seconds / 2)
        console.print("changing source_partitions 1 -> 2 and rate -> 4000 events/s in place...")
        restart = supervisor.restart(spec.name, {"source_partitions": 2, "rate": 4000})
        watch(store, spec.name, seconds / 2)
    finally:
        stop = supervisor.stop(spec.name)
    frame = progress_frame(store.progress())
    ok = _check_output(paths.output, frame, spec, console)
    summary = Table(title="demo summary", show_header=False)
    processed = int(frame["end_offset"].max()) if len(frame) else 0
    for label, value in [
        ("micro-batches", f"{len(frame)}"),
        ("events processed", f"{processed:,}"),
        ("mean input rate", f"{frame['input_rows_per_second'].mean():,.0f} events/s" if len(frame) else "-"),
        ("mean processed rate", f"{frame['processed_rows_per_second'].mean():,.0f} events/s" if len(frame) else "-"),
        ("max backlog", f"{int(frame['backlog_events'].max()):,} events" if len(frame) else "-"),
        ("restart (scope, pause)", f"{restart['scope']}, {restart['seconds']:.2f} s" if restart else "-"),
        ("final stop", f"batch {stop.get('stop', {}).get('last_committed_batch')} committed"),
        ("output vs oracle", "identical" if ok else "DIFFERENT"),
    ]:
        summary.add_row(label, value)
    console.print(summary)
    return 0 if ok else 1


def _check_output(output: Path, frame, spec: StreamSpec, console: Console) -> bool:
    """Compare committed output with the batch oracle over the events the stream processed."""
    if frame.empty:
        console.print("[red]no batch completed: nothing to check[/]")
        return False
    with console.status("checking the output against the batch oracle..."):
        started = time.monotonic()
        comparison = check_output(output, frame, spec)
    console.print(
        f"oracle: {comparison.expected_rows:,} expected rows, {comparison.actual_rows:,} in the sink, "
        f"lost {comparison.lost}, duplicated {comparison.duplicated} ({time.monotonic() - started:.1f} s)"
    )
    return comparison.ok


def check_output(output: Path, frame, spec: StreamSpec):
    """The stream's committed output against the batch oracle over exactly the events it consumed.

    Args:
        frame: the stream's progress frame (its last batch gives the events read and the watermark).
    Returns:
        oracle.Comparison (``ok``, ``lost``, ``duplicated``, row counts).
    """
    from .oracle import compare, expected_result, stream_result
    from .session import helper_session
    from .sink import read_sink
    from .workloads.queries import get_query

    last = frame.iloc[-1]
    query = get_query(spec.query)
    spark = helper_session("reconf-oracle", shuffle_partitions=spec.state_partitions)
    try:
        expected = expected_result(spark, query, spec.data_options(max_events=int(last["end_offset"])), watermark=last["watermark"])
    finally:
        spark.stop()
    return compare(stream_result(read_sink(output), query, watermark=last["watermark"]), expected)
