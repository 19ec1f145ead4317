"""The closed loop, headless: does an under-provisioned stream converge through the real daemon?

``python -m benchmarks.demo [--quick]``

Runs :func:`dagster_reconf.workloads.demo.run_demo` (the ``make demo`` loop) on a
fresh home: the scaling sensor, ``dagster-daemon`` and the reconfiguration runs decide
and act; this only reads the outcome. The baseline, in the same run, is the stream's
own first configuration before the loop acted: its backlog growth (events/s, fitted)
against the growth over the last batches once converged (negative: catching up).
``--quick`` bounds the loop at 280 s, a full run at 600 s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dagster_reconf.dagster.closed_loop import LoopReport
from dagster_reconf.workloads.demo import demo_spec, run_demo
from dagster_reconf.core.metrics import MetricsStore
from dagster_reconf.core.paths import StreamPaths
from dagster_reconf.core.timeline import timeline_frame

from ._common import emit, parse_args

WORKSPACE = Path(__file__).resolve().parents[1] / "workspace.yaml"
LAST_BATCHES = 6


def backlog_growth(frame: pd.DataFrame) -> float | None:
    """Events/s the backlog grows by, least squares over ``frame``'s batches (None under 3)."""
    if len(frame) < 3:
        return None
    return round(float(np.polyfit(frame["at"], frame["backlog_events"].astype(float), 1)[0]), 1)


def growth_before_and_after(home: Path, report: LoopReport) -> tuple[float | None, float | None]:
    records, _ = MetricsStore(StreamPaths(home, report.stream).metrics).read(0)
    frame = timeline_frame(records)
    changes = [r["paused_at"] for r in report.reconfigurations if r.get("paused_at")]
    before = frame[frame["at"] < min(changes)] if changes else frame
    return backlog_growth(before.iloc[1:]), backlog_growth(frame.iloc[-LAST_BATCHES:]) if changes else None


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    timeout_s = 280.0 if args.quick else 600.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reconf-demo-") as tmp:
        home = Path(tmp) / "home"
        report = run_demo(home, WORKSPACE, Path(tmp) / "out", timeout_s=timeout_s)
        before, after = growth_before_and_after(home, report)
    spec = demo_spec()
    emit({
        "benchmark": "demo", "mode": "quick" if args.quick else "full", "converged": report.converged, "steps": report.steps,
        "seconds_to_converge": report.seconds_to_converge, "lost": report.lost, "duplicated": report.duplicated,
        "rate": spec.options["rate"], "backlog_growth_unmanaged_per_s": before, "backlog_growth_converged_per_s": after,
        "reconfigurations": [{k: r.get(k) for k in ("outcome", "cores", "state_partitions", "downtime_s", "catch_up_s", "verified")}
                             for r in report.reconfigurations],
        "runs": [f"{r['job']}:{r['status']}" for r in report.runs],
        "wall_s": round(time.monotonic() - started, 1),
    })


if __name__ == "__main__":
    main()
