"""The closed loop, headless: does an under-provisioned stream converge through the real daemon?

``python -m benchmarks.demo [--quick]``

Runs :func:`dagster_reconf.closed_loop.run_closed_loop` (the ``make demo`` loop) on a
fresh home: the scaling sensor, ``dagster-daemon`` and the reconfiguration runs decide
and act; this only reads the outcome. The baseline in the same run is the stream left
alone for as long (no loop): its backlog at the end against the loop's.
``--quick`` bounds the loop at 240 s, a full run at 600 s.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from dagster_reconf.closed_loop import demo_spec, run_closed_loop
from dagster_reconf.core.metrics import MetricsStore, progress_row
from dagster_reconf.core.supervisor import StreamSupervisor

from ._common import emit, parse_args

WORKSPACE = Path(__file__).resolve().parents[1] / "workspace.yaml"
BASELINE_S = 60.0


def unmanaged_backlog(home: Path, seconds: float) -> int:
    """Backlog after ``seconds`` of the demo stream with nothing watching it."""
    supervisor = StreamSupervisor(home)
    spec = demo_spec("unmanaged-q5")
    supervisor.start(spec)
    try:
        time.sleep(seconds)
        last = MetricsStore(supervisor.paths(spec.name).metrics).last_progress() or {}
    finally:
        supervisor.stop(spec.name)
    return int(progress_row(last)["backlog_events"] or 0) if last else 0


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    timeout_s = 240.0 if args.quick else 600.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reconf-demo-") as tmp:
        home = Path(tmp)
        report = run_closed_loop(home / "loop", WORKSPACE, home / "out", timeout_s=timeout_s)
        baseline = unmanaged_backlog(home / "baseline", BASELINE_S)
    emit({
        "benchmark": "demo", "mode": "quick" if args.quick else "full", "converged": report.converged, "steps": report.steps,
        "seconds_to_converge": report.seconds_to_converge, "lost": report.lost, "duplicated": report.duplicated,
        "reconfigurations": [{k: r.get(k) for k in ("outcome", "cores", "state_partitions", "downtime_s", "catch_up_s", "verified")}
                             for r in report.reconfigurations],
        "final_sensor_reason": report.final_reason[:160],
        f"unmanaged_backlog_after_{BASELINE_S:g}s": baseline,
        "wall_s": round(time.monotonic() - started, 1),
    })


if __name__ == "__main__":
    main()
