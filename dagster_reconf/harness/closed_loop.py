"""The closed control loop, run through the real Dagster daemon, for any stream and code location.

A stream runs in its own driver; ``dagster-daemon`` runs a code location (a workspace
file) against a fresh Dagster home (SQLite storage): the stream's scaling sensor sees the
backlog, requests the trace snapshot and CP summary of the window and a
``reconfigure_stream_job`` run with the DS2 plan, and the run reconfigures the stream
(verified, journaled in the audit ledger). The loop repeats until the sensor holds on a
full window with no backlog growth, or the time bound passes. Then every process started
here is stopped, the output is checked with the stream definition's oracle (where it has
one), and a report and a timeline PNG (rates, backlog, cores, reconfigurations shaded)
are written.

Nothing here decides anything: the sensor and the runs do, exactly as in production.
This module only starts them, watches the Dagster instance, the metrics store and the
ledger, and reports. ``make demo`` runs it on the bundled Nexmark stream
(:mod:`dagster_reconf.workloads.demo`), ``benchmarks.own_stream`` on a user's file stream.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
from rich.console import Console
from rich.table import Table

from dagster_reconf.core.definition import load_definition
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.process.process_tree import terminate_process_tree
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig import ExecutionPlan
from dagster_reconf.core.reconfig.reconfiguration import ReconfigurationRecord
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.scaling.scaling_plan import known_cores
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.metrics import MetricsStore, progress_frame
from dagster_reconf.dagster.constants import IN_FLIGHT
from dagster_reconf.dagster.stream_page import record_stopped
from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator
from dagster_reconf.harness.oracle import check_with_oracle
from dagster_reconf.harness.timeline import timeline_frame, timeline_plot_png

__all__ = ["LoopReport", "run_closed_loop"]

POLL_S = 3.0
SETTLED_TICKS = 2  # consecutive sensor holds, on full windows without backlog growth, that count as converged
DAGSTER_YAML = """\
# Written by dagster_reconf.harness.closed_loop for one closed-loop run (SQLite storage under this folder).
telemetry:
  enabled: false
run_queue:
  max_concurrent_runs: 2
  tag_concurrency_limits:
    - key: dagster-reconf/stream  # one reconfiguration per stream at a time
      value:
        applyLimitPerUniqueValue: true
      limit: 1
"""


@dataclass
class LoopReport:
    """What the closed loop did; ``as_json`` is the benchmark's line."""

    stream: str
    converged: bool
    seconds: float
    seconds_to_converge: float | None
    reconfigurations: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    lost: int | None = None
    duplicated: int | None = None
    timeline_png: str = ""
    dagster_home: str = ""
    final_reason: str = ""

    @property
    def steps(self) -> int:
        return sum(1 for r in self.reconfigurations if r["outcome"] == "succeeded")

    def as_json(self) -> dict[str, Any]:
        return {"steps": self.steps, **asdict(self)}


Command = Callable[[Sequence[str]], list[str]]  # how a command runs on the Dagster host (here: as it is)


def _here(argv: Sequence[str]) -> list[str]:
    return list(argv)


class DagsterDaemon:
    """``dagster-daemon run`` for a workspace, in a session of its own so that stopping it
    also stops its code server and the runs it launched."""

    def __init__(self, workspace: Path, env: dict[str, str], log: Path, on_host: Command = _here) -> None:
        self.workspace, self.env, self.log, self.on_host = workspace, env, log, on_host
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "DagsterDaemon":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.on_host([_bin("dagster-daemon"), "run", "-w", str(self.workspace)]),
                env=self.env,
                cwd=self.workspace.parent,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __exit__(self, *_: Any) -> None:
        if self.process is not None:
            terminate_process_tree(self.process.pid, grace_s=20)
            self.process.wait(timeout=30)


def _bin(name: str) -> str:
    """A console script of this venv (the daemon must run the same Dagster as this process)."""
    path = Path(sys.executable).with_name(name)
    return str(path) if path.exists() else name


def start_sensor(workspace: Path, sensor: str, env: dict[str, str], on_host: Command = _here) -> None:
    """``dagster sensor start``: sensors are stopped by default; this run turns one on in its instance."""
    done = subprocess.run(
        on_host([_bin("dagster"), "sensor", "start", "-w", str(workspace), sensor]),
        env=env,
        cwd=workspace.parent,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"`dagster sensor start {sensor}` failed (exit {done.returncode}): "
            f"{done.stderr[-2000:] or done.stdout[-2000:]}"
        )


def latest_sensor_observation(
    instance: dg.DagsterInstance, stream: str, after: float, translator: ReconfTranslator | None = None
) -> dict[str, Any] | None:
    """The scaling sensor's newest observation of ``stream`` (its decision, reason and figures), if after ``after``."""
    plans = (translator or ReconfTranslator()).asset_key(AssetKind.DS2_PLANS)
    for record in instance.fetch_observations(plans, limit=10).records:
        observation = record.asset_observation
        if observation is None or observation.partition != stream or record.timestamp < after:
            continue
        values = {k: getattr(v, "value", v) for k, v in observation.metadata.items()}
        return {"at": record.timestamp, **values}
    return None


def sustains(observation: dict[str, Any]) -> bool:
    """The sensor holds after judging a full window (not before: stabilizing, window not full, no evidence), with the
    backlog not growing (5 % of the rate)."""
    return (
        observation.get("decision") == "hold"
        and observation.get("judged") is True
        and float(observation.get("backlog_growth", 0.0)) <= 0.05 * max(float(observation.get("source_rate", 0.0)), 1.0)
    )


def reconfigurations(ledger: AuditLedger, spec: StreamSpec, since: float) -> list[dict[str, Any]]:
    """Finished (and refused) reconfigurations of ``spec``'s stream since ``since``, as the report's rows."""
    rows = []
    for r in ReconfigurationRecord.read(ledger, spec.name, since):
        if r.outcome == "refused":
            rows.append({"id": None, "outcome": "refused", "detail": "; ".join(r.problems)[:200]})
            continue
        (cores_before, state_before), (cores_after, state_after) = _knobs(r.current, spec), _knobs(r.target, spec)
        rows.append(
            {
                "id": r.id,
                "outcome": r.outcome,
                "plan_hash": r.plan_hash,
                "cores": f"{cores_before} -> {cores_after}",
                "state_partitions": f"{state_before} -> {state_after}",
                "actions": r.actions,
                "downtime_s": r.downtime_s,
                "catch_up_s": r.catch_up_s,
                "max_event_latency_s": r.max_event_latency_s,
                "verified": r.verified,
                "paused_at": r.paused_at,
                "resumed_at": r.resumed_at,
                "run_id": r.run_id,
                "step_seconds": r.step_seconds,
                "handed_over": r.handed_over,
            }
        )
    return rows


def _knobs(plan: ExecutionPlan | None, spec: StreamSpec) -> tuple[Any, Any]:
    """Cores and state partitions of a recorded execution plan ("?" where the record has none)."""
    if plan is None:
        return "?", "?"
    applied = plan.apply_to(spec)
    return known_cores(applied) or applied.master, applied.state_partitions


def run_closed_loop(
    home: Path,
    workspace: Path,
    out: Path,
    *,
    spec: StreamSpec,
    sensor: str,
    timeout_s: float = 480.0,
    env: dict[str, str] | None = None,
    console: Console | None = None,
    translator: ReconfTranslator | None = None,
    drain_at_rate: float | None = None,
    drain_timeout_s: float = 120.0,
    supervisor: StreamSupervisor | None = None,
    on_dagster_host: Command = _here,
) -> LoopReport:
    """Run the loop (see the module docstring); every process it starts is stopped before it returns.

    Args:
        spec: the stream to start and watch (its name is the sensor's stream).
        sensor: the scaling sensor in ``workspace`` to turn on.
        env: extra environment of the daemon and its runs (what the code location reads).
        translator: the code location's translator, where it names its assets (default: the plain names).
        drain_at_rate: the rate the source offers (events/s): once converged, wait (at most ``drain_timeout_s``) until
            the backlog is under one trigger interval's worth of it, so the report's last batches are the steady state.
        supervisor: what starts, watches and stops the stream (default: drivers on this host, under ``home``; a
            :class:`~dagster_reconf.core.process.remote_supervisor.RemoteSupervisor` for drivers on other hosts).
        on_dagster_host: how a command runs on the Dagster host (the daemon, ``dagster sensor start``).
    """
    console = console or Console()
    home, workspace, out = home.resolve(), workspace.resolve(), out.resolve()
    if not workspace.exists():
        raise FileNotFoundError(f"workspace {workspace} not found; run from the repository root or pass --workspace")
    supervisor = supervisor or StreamSupervisor(home)
    paths = supervisor.paths(spec.name)
    if supervisor.driver_info(spec.name):
        supervisor.stop(spec.name)
    shutil.rmtree(paths.root, ignore_errors=True)
    dagster_home = home / "dagster"
    shutil.rmtree(dagster_home, ignore_errors=True)
    dagster_home.mkdir(parents=True)
    (dagster_home / "dagster.yaml").write_text(DAGSTER_YAML)
    env = {
        **os.environ,
        **(env or {}),
        "DAGSTER_HOME": str(dagster_home),
        "RECONF_HOME": str(home),
        "DAGSTER_RECONF_ENV": "local",
    }
    env.pop("RECONF_LEDGER_URL", None)  # the demo's ledger is the embedded SQLite one
    ledger = AuditLedger(default_ledger_url(home))
    started = time.time()
    report = LoopReport(
        stream=spec.name, converged=False, seconds=0.0, seconds_to_converge=None, dagster_home=str(dagster_home)
    )

    console.rule(f"closed loop: {spec.name} ({spec.entrypoint}) on {spec.master}, at most {timeout_s:g} s")
    with console.status("starting the stream's driver..."):
        supervisor.start(spec)
    try:
        with console.status(f"turning on {sensor} (loads the code location)..."):
            start_sensor(workspace, sensor, env, on_dagster_host)
        with (
            DagsterDaemon(workspace, env, dagster_home / "daemon.log", on_dagster_host) as daemon,
            dg.DagsterInstance.from_config(str(dagster_home)) as instance,
        ):
            console.print(f"dagster-daemon pid {daemon.process.pid}, DAGSTER_HOME {dagster_home}, log {daemon.log}")
            _watch(report, instance, supervisor, ledger, spec, started, timeout_s, daemon, console, translator)
            if report.converged and drain_at_rate:
                _wait_for_backlog(supervisor, spec.name, drain_at_rate, drain_timeout_s, console)
            _drain(instance, timeout_s=180, console=console)  # never stop the daemon under a reconfiguration
            report.runs = [
                _run_record(instance, r)
                for r in reversed(instance.get_runs(dg.RunsFilter(created_after=_utc(started))))
            ]
    finally:
        with console.status("stopping the stream at a batch boundary..."):
            if supervisor.driver_info(spec.name):
                supervisor.stop(spec.name)
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:  # its page says so: no tick will
            record_stopped(
                instance, (translator or ReconfTranslator()).asset_key(AssetKind.STREAM), spec.name, PolicyConfig()
            )
    report.seconds = round(time.time() - started, 1)
    report.reconfigurations = reconfigurations(ledger, spec, started)
    records, _ = MetricsStore(paths.metrics).read(0)  # a remote driver's copy: pulled last by its stop
    frame = progress_frame(records)
    oracle = load_definition(spec.entrypoint).oracle
    if len(frame) and oracle is not None:
        with console.status("checking the output with the stream's oracle..."):
            final_spec = StreamSpec.parse(json.loads(paths.spec.read_text()))
            comparison = check_with_oracle(oracle, home, final_spec)
        report.lost, report.duplicated = comparison.lost, comparison.duplicated
    out.mkdir(parents=True, exist_ok=True)
    changes = [
        (r["paused_at"], r["paused_at"] + (r["downtime_s"] or 0.0), f"{r['cores']} cores")
        for r in report.reconfigurations
        if r.get("paused_at")
    ]
    png = out / "timeline.png"
    png.write_bytes(timeline_plot_png(timeline_frame(records), changes, f"{spec.name}: closed loop"))
    report.timeline_png = str(png)
    (out / "report.json").write_text(json.dumps(report.as_json(), indent=2, default=str))
    _print_report(report, console)
    return report


def _utc(seconds: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _watch(
    report: LoopReport,
    instance: dg.DagsterInstance,
    supervisor: StreamSupervisor,
    ledger: AuditLedger,
    spec: StreamSpec,
    started: float,
    timeout_s: float,
    daemon: DagsterDaemon,
    console: Console,
    translator: ReconfTranslator | None,
) -> None:
    """Print what happens until the sensor holds ``SETTLED_TICKS`` times in a row after the last change, or time is
    up."""
    store = supervisor.metrics(spec.name)
    last_line, settled, seen_tick = "", 0, 0.0
    while time.time() - started < timeout_s:
        time.sleep(POLL_S)
        if not daemon.alive():
            raise RuntimeError(f"dagster-daemon exited (code {daemon.process.returncode}); see {daemon.log}")
        status = supervisor.status(spec.name)
        if status.get("state") == "failed":
            raise RuntimeError(f"stream {spec.name} failed: {status.get('failure')}")
        in_flight = instance.get_runs(dg.RunsFilter(statuses=IN_FLIGHT))
        finished = [r for r in reconfigurations(ledger, spec, started) if r["outcome"] == "succeeded"]
        last_change = max([started] + [r["resumed_at"] or 0.0 for r in finished])
        tick = latest_sensor_observation(instance, spec.name, after=last_change, translator=translator)
        record = store.last_progress()
        figures = progress_frame([record]).iloc[0] if record else None
        master = StreamSpec.parse(status["spec"]).master if status.get("spec") else spec.master
        runs = ", ".join(r.job_name for r in in_flight) or "-"
        backlog = figures["backlog_events"] if figures is not None else None
        line = (
            f"batch {status.get('batch_id', '-')}  "
            f"{(figures['processed_rows_per_second'] if figures is not None else 0):4.0f}/s  "
            f"backlog {'unknown' if backlog is None or pd.isna(backlog) else f'{int(backlog):,}'}  {master}  "
            f"changes {len(finished)}  runs: {runs}"
        )
        if tick is not None and tick["at"] > seen_tick:
            seen_tick = tick["at"]
            line += f"\n      sensor: {tick.get('decision')}: {str(tick.get('reason', ''))[:160]}"
            settled = settled + 1 if sustains(tick) and not in_flight else 0
            report.final_reason = str(tick.get("reason", ""))
        if line != last_line:  # a new batch, run or decision
            console.print(f"{time.time() - started:4.0f} s  {line}", soft_wrap=True, highlight=False)
            last_line = line
        if settled >= SETTLED_TICKS:
            report.converged = True
            report.seconds_to_converge = round(time.time() - started, 1)
            console.print(f"[green]converged: the sensor holds with no backlog growth ({report.final_reason[:120]})[/]")
            return
    console.print(f"[yellow]not converged within {timeout_s:g} s[/]")


def _wait_for_backlog(
    supervisor: StreamSupervisor, stream: str, rate: float, timeout_s: float, console: Console
) -> None:
    """Wait until the stream's backlog is under one trigger interval's worth of ``rate`` (or ``timeout_s`` passes)."""
    store = supervisor.metrics(stream)
    deadline = time.time() + timeout_s
    with console.status(f"{stream}: waiting for the backlog to fall under one trigger's worth..."):
        while time.time() < deadline:
            record = store.last_progress()
            interval = float(StreamSpec.parse(supervisor.status(stream)["spec"]).trigger_interval_s)
            backlog = progress_frame([record]).iloc[0]["backlog_events"] if record else None
            if backlog is not None and float(backlog) < rate * max(interval, 1.0):
                console.print(
                    f"backlog {float(backlog):,.0f} events: under one trigger's worth ({rate * interval:,.0f})"
                )
                return
            time.sleep(POLL_S)
    console.print(f"[yellow]the backlog stayed over one trigger's worth for {timeout_s:g} s after converging[/]")


def _drain(instance: dg.DagsterInstance, timeout_s: float, console: Console) -> None:
    deadline = time.time() + timeout_s
    while (runs := instance.get_runs(dg.RunsFilter(statuses=IN_FLIGHT))) and time.time() < deadline:
        with console.status(f"waiting for {len(runs)} run(s) in flight to finish..."):
            time.sleep(POLL_S)


def _run_record(instance: dg.DagsterInstance, run: Any) -> dict[str, Any]:
    """One launched run for the report; a failed run carries its first error, so a report explains itself."""
    record = {
        "run_id": run.run_id,
        "job": run.job_name,
        "status": run.status.value,
        "partition": run.tags.get("dagster/partition"),
    }
    if run.status == dg.DagsterRunStatus.FAILURE:
        failures = instance.all_logs(
            run.run_id, of_type={dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE}
        )
        errors = [getattr(e.dagster_event.event_specific_data, "error", None) for e in failures if e.dagster_event]
        record["error"] = next(
            (err.to_string() for err in errors if err is not None), failures[0].message if failures else "unknown"
        )
    return record


def _print_report(report: LoopReport, console: Console) -> None:
    table = Table(title=f"reconfigurations of {report.stream}")
    for column in ("outcome", "cores", "state partitions", "downtime s", "catch-up s", "verified", "run"):
        table.add_column(column)
    for r in report.reconfigurations:
        fmt = lambda v: "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))  # noqa: E731
        table.add_row(
            r["outcome"],
            r.get("cores", "-"),
            r.get("state_partitions", "-"),
            fmt(r.get("downtime_s")),
            fmt(r.get("catch_up_s")),
            fmt(r.get("verified")),
            (r.get("run_id") or "-")[:8],
        )
    console.print(table)
    summary = Table(show_header=False, title="closed loop")
    for label, value in [
        ("converged", f"{report.converged} ({report.seconds_to_converge} s)" if report.converged else "False"),
        ("steps", str(report.steps)),
        ("Dagster runs", ", ".join(f"{r['job']}:{r['status']}" for r in report.runs) or "-"),
        ("output vs oracle", f"lost {report.lost}, duplicated {report.duplicated}"),
        ("timeline", report.timeline_png),
        ("browse it", f"DAGSTER_HOME={report.dagster_home} make ui"),
    ]:
        summary.add_row(label, value)
    console.print(summary)
    for run in report.runs:
        if "error" in run:
            console.print(f"[red]{run['job']} {run['run_id'][:8]} failed:[/red] {run['error']}")
