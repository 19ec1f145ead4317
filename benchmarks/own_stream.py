"""The closed loop on a user's own stream: Spark's file source, the user's code and sink, started under-provisioned.

``python -m benchmarks.own_stream [--quick]``

The orders stream of ``examples/orders`` (JSON files in, windowed totals with
deduplication out, Spark's file sink) runs on one core while order files arrive faster
than one core processes them (each order pays ``SLEEP_MS`` of simulated enrichment, so a
file of 50 is a second of work per task). The example's own code location
(``examples/orders/workspace.yaml``) runs under the real Dagster daemon: its scaling
sensor reads the file source's backlog (the files not yet read, from the driver's listing)
and requests DS2 plans, the runs reconfigure the stream, until the sensor holds with no
backlog growth. Then the stream stops and the definition's oracle compares its output
with a batch job over the same files.

Baseline, in the same run: the stream's backlog growth (events/s) in its first
configuration, against the growth once the loop converged. One JSON line last.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.harness.closed_loop import run_closed_loop
from dagster_reconf.harness.timeline import timeline_frame
from examples.orders.streams import OrderWriter

from ._common import emit, parse_args

WORKSPACE = Path(__file__).resolve().parents[1] / "examples" / "orders" / "workspace.yaml"
SENSOR = "orders_scaling_sensor"
SLEEP_MS = 20.0  # per order: 50 orders per file is a second of work
FILES_PER_S = 1.5  # about 1.5 cores of work a second: one core falls behind
TRIGGER_S = 2.0
MAX_FILES = 6  # maxFilesPerTrigger


def orders_spec(data: Path) -> StreamSpec:
    """The example's stream as its code location declares it (the same settings through its environment)."""
    return StreamSpec(
        name="orders",
        entrypoint="examples.orders.streams:orders",
        master="local[1]",
        state_partitions=4,
        trigger_interval_s=TRIGGER_S,
        max_per_trigger=MAX_FILES,
        options={"input_dir": str(data / "in"), "output_dir": str(data / "out"), "sleep_ms_per_order": SLEEP_MS},
    )


def growth(frame) -> float | None:
    if len(frame) < 3:
        return None
    return round(float(np.polyfit(frame["at"], frame["backlog_events"].astype(float), 1)[0]), 1)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    timeout_s = 270.0 if args.quick else 900.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reconf-own-") as tmp:
        data, home = Path(tmp) / "data", Path(tmp) / "home"
        spec = orders_spec(data)
        writer = OrderWriter(data / "in")
        writer.write(2)
        env = {
            "ORDERS_DATA": str(data),
            "ORDERS_SLEEP_MS": str(SLEEP_MS),
            "ORDERS_MASTER": "local[1]",
            "ORDERS_TRIGGER_S": str(TRIGGER_S),
            "ORDERS_MAX_FILES": str(MAX_FILES),
        }
        with writer.keep_writing(every_s=1.0 / FILES_PER_S):
            report = run_closed_loop(
                home, WORKSPACE, Path(tmp) / "out", spec=spec, sensor=SENSOR, timeout_s=timeout_s, env=env
            )
        records, _ = MetricsStore(StreamPaths(home, spec.name).metrics).read(0)
        frame = timeline_frame(records)
        changes = [r["paused_at"] for r in report.reconfigurations if r.get("paused_at")]
        before = growth(frame[frame["at"] < min(changes)].iloc[1:]) if changes else growth(frame)
        after = growth(frame.iloc[-6:]) if changes else None
    emit(
        {
            "benchmark": "own_stream",
            "mode": "quick" if args.quick else "full",
            "converged": report.converged,
            "steps": report.steps,
            "seconds_to_converge": report.seconds_to_converge,
            "downtime_s": [r.get("downtime_s") for r in report.reconfigurations if r["outcome"] == "succeeded"],
            "cores": [r.get("cores") for r in report.reconfigurations if r["outcome"] == "succeeded"],
            "lost": report.lost,
            "duplicated": report.duplicated,
            "files_written": writer.files,
            "backlog_growth_first_configuration_per_s": before,
            "backlog_growth_converged_per_s": after,
            "runs": [f"{r['job']}:{r['status']}" for r in report.runs],
            "wall_s": round(time.monotonic() - started, 1),
        }
    )


if __name__ == "__main__":
    main()
