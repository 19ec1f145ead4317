"""Sustained throughput of each bundled query on local[2], and instrumentation overhead.

``python -m benchmarks.throughput [--quick]``

Throughput: each query runs saturated (the source always has a backlog, batches capped
at ``BATCH_EVENTS``); after warm-up batches, throughput is the events processed over
the wall-clock span of the measured batches, coordination included. That is the rate
the job sustains with no backlog growth: offered any faster, backlog grows.

Overhead: the same query alternately with instrumentation on (event log + progress
listener writing the metrics store) and off (neither); ``overhead_ratio`` is the median
throughput off divided by the median on (1.03 means 3 % overhead). The same
measurement path (``query.recentProgress``) serves both, so the listener is not needed
to measure.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import progress_frame
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.workloads.queries import QUERIES
from dagster_reconf.workloads.streams import bundled_spec

from ._common import emit, median, parse_args

BATCH_EVENTS = {"wordcount": 20_000}
DEFAULT_BATCH_EVENTS = 40_000
WARMUP_BATCHES = 2
SATURATED_RATE = 10_000_000.0
OVERHEAD_QUERY = "q5"


def measure(spec: StreamSpec, home: Path, seconds: float) -> dict[str, Any]:
    """Run ``spec`` saturated for ``seconds`` after warm-up; return events/s and batch figures."""
    runtime = StreamRuntime(spec, StreamPaths(home, spec.name))
    try:
        query = runtime.start()
        deadline = time.monotonic() + 180
        while len(query.recentProgress) < WARMUP_BATCHES + 1:
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"{spec.name}: no progress ({query.exception()})")
            time.sleep(0.2)
        first_measured = query.recentProgress[-1]["batchId"] + 1
        time.sleep(seconds)
        progress = [
            {"kind": "progress", "progress": dict(p)} for p in query.recentProgress if p["batchId"] >= first_measured
        ]
    finally:
        runtime.shutdown(timeout_s=120)
    frame = progress_frame(progress)
    frame = frame[frame["events"] > 0]
    if len(frame) < 2:
        raise RuntimeError(f"{spec.name}: fewer than 2 measured batches in {seconds:g} s; run longer")
    start = frame["timestamp"].iloc[0]
    end = frame["timestamp"].iloc[-1] + pd.Timedelta(milliseconds=int(frame["batch_duration_ms"].iloc[-1]))
    span_s = (end - start).total_seconds()
    return {
        "events_per_s": round(float(frame["events"].sum()) / span_s, 1),
        "batches": int(len(frame)),
        "median_batch_ms": median(frame["batch_duration_ms"]),
        "events_per_batch": int(frame["events"].median()),
    }


def spec_for(query: str, name: str, instrumentation: bool = True) -> StreamSpec:
    extra = {"vocabulary": 100_000} if query == "wordcount" else {}
    return bundled_spec(
        name,
        query,
        rate=SATURATED_RATE,
        trigger_interval_s=0,
        source_partitions=2,
        state_partitions=4,
        max_per_trigger=BATCH_EVENTS.get(query, DEFAULT_BATCH_EVENTS),
        instrumentation=instrumentation,
        **extra,
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.monotonic()
    seconds = 8.0 if args.quick else 40.0
    overhead_pairs = 2 if args.quick else 4
    result: dict[str, Any] = {
        "benchmark": "throughput",
        "mode": "quick" if args.quick else "full",
        "master": "local[2]",
        "queries": {},
    }
    with tempfile.TemporaryDirectory(prefix="reconf-bench-") as tmp:
        home = Path(tmp)
        for query in QUERIES:
            figures = measure(spec_for(query, f"tp-{query}"), home, seconds)
            result["queries"][query] = figures
            print(f"{query}: {figures['events_per_s']:,.0f} events/s over {figures['batches']} batches", flush=True)
        on, off = [], []
        for k in range(overhead_pairs):
            for instrumented, sink in ((True, on), (False, off)) if k % 2 == 0 else ((False, off), (True, on)):
                name = f"oh-{'on' if instrumented else 'off'}-{k}"
                sink.append(measure(spec_for(OVERHEAD_QUERY, name, instrumented), home, seconds)["events_per_s"])
            print(f"overhead pair {k}: on {on[-1]:,.0f}, off {off[-1]:,.0f} events/s", flush=True)
    result["overhead_ratio"] = round(median(off) / median(on), 4)
    result["overhead"] = {"query": OVERHEAD_QUERY, "on_events_per_s": on, "off_events_per_s": off}
    result["wall_s"] = round(time.monotonic() - started, 1)
    emit(result)


if __name__ == "__main__":
    main()
