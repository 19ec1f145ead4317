"""``reconf``: start, watch, change and stop managed streams and a local Spark cluster.

    reconf stream start NAME --entrypoint my_pkg.streams:orders [--option key=value ...] [--watch 30]
    reconf stream attach NAME --event-logs s3://bucket/spark-events [--query orders] [--application A]
    reconf stream status NAME [--json]
    reconf stream watch NAME [--seconds 30]
    reconf stream restart NAME --set trigger_interval_s=2 --set options.rate=3000
    reconf stream stop NAME
    reconf stream list
    reconf agent --storage s3a://bucket/reconf --stream NAME [--stream NAME ...]
    reconf cluster start [--workers 1 --cores 2 --memory 2g (default 1g per core)] | stop | status
    reconf reconfigure plan NAME
    reconf reconfigure apply NAME (--plan plan.json | --set state_partitions=8 ...) [--strategy native|replay|precopy]
    reconf reconfigure abort NAME
    reconf plan NAME [--json] [--apply] [--policy ds2|dhalion|dynalloc] [--set POLICY_SETTING=VALUE]
    reconf audit list [--stream NAME] | show ID | verify [--expect-head HASH]

The audit ledger is ``$RECONF_LEDGER_URL`` (or ``--ledger``), by default the SQLite file
``ledger.db`` in the runtime home.

Errors the user can fix print one line (``error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from dagster_reconf.cli_reconfigure import add_plan_parser, cmd_plan, cmd_reconfigure, open_ledger, parse_setting
from dagster_reconf.cli_views import console, fmt, lag_table, status_table, watch
from dagster_reconf.core.errors import ReconfError, SpecError
from dagster_reconf.core.spec import StreamSpec, read_spec_file
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import default_home

if TYPE_CHECKING:
    from dagster_reconf.core.ledger import AuditLedger

__all__ = ["main"]

# A reconfiguration's records that `reconf audit list` shows (its start, end, refusal or no-op).
RECONFIGURATION_KINDS = [
    "reconfiguration.started",
    "reconfiguration.finished",
    "reconfiguration.refused",
    "reconfiguration.noop",
]


def _spec_from_args(args: argparse.Namespace) -> StreamSpec:
    data = read_spec_file(args.spec_file) if args.spec_file else {}
    data["name"] = args.name
    for field in (
        "entrypoint",
        "master",
        "source_partitions",
        "state_partitions",
        "trigger_interval_s",
        "max_per_trigger",
        "storage",
    ):
        value = getattr(args, field)
        if value is not None:
            data[field] = value
    data["options"] = {**data.get("options", {}), **dict(parse_setting(s, "--option") for s in args.option or [])}
    for key, value in (parse_setting(s) for s in args.set or []):
        field, _, sub = key.partition(".")
        if sub and field in ("options", "knob_options", "spark_conf"):
            data[field] = {**data.get(field, {}), sub: value}
        else:
            data[key] = value
    if "entrypoint" not in data:
        raise SpecError(
            "stream start needs --entrypoint package.module:function (the stream definition), or a "
            "--spec-file that names one"
        )
    return StreamSpec.parse(data)


def _cmd_stream(args: argparse.Namespace, home: Path) -> int:
    from dagster_reconf.core.process.endpoint_record import held_paused
    from dagster_reconf.core.process.supervisor import StreamSupervisor

    supervisor = StreamSupervisor(home)
    if args.action == "start":
        spec = _spec_from_args(args)
        with console.status(f"starting stream {spec.name} ({spec.entrypoint} on {spec.master})..."):
            info = supervisor.start(spec)
        held = held_paused(info)
        console.print(
            f"stream [bold]{spec.name}[/] {'up, not running' if held else 'running'}: pid {info['pid']}, control port "
            f"{info['control_port']}, Spark app {info.get('app_id')}, UI {info.get('spark_ui')}"
        )
        if held:
            console.print(f"[yellow]{held}[/]", highlight=False)
        if args.watch:
            watch(MetricsStore(supervisor.paths(spec.name).metrics), spec.name, args.watch)
    elif args.action == "attach":
        from dagster_reconf.core.traces.attach import AttachSpec, attach

        spec = AttachSpec.parse(
            {
                "name": args.name,
                "event_logs": args.event_logs,
                "application": args.application,
                "query": args.query,
                "checkpoint": args.checkpoint,
                "trigger_interval_s": args.trigger_interval_s,
            }
        )
        with console.status(f"reading the event logs at {spec.event_logs}..."):
            found = attach(home, spec)
        console.print(
            f"stream [bold]{spec.name}[/] attached (observed only): query {found['query_name']!r}, "
            f"{found['progress']} batches in {len(found['applications'])} application(s)",
            highlight=False,
        )
        if found["ignored_queries"]:
            console.print(
                f"other queries in these logs, not this stream: {', '.join(found['ignored_queries'])} "
                "(attach each under its own name with --query)",
                highlight=False,
            )
    elif args.action == "status":
        status = supervisor.status(args.name)
        lag = _kafka_lag(supervisor, args.name) if args.lag else None
        if args.json:
            print(json.dumps({**status, **({"kafka_lag": lag} if args.lag else {})}, indent=2, default=str))
        else:
            console.print(status_table(status))
            if args.lag:
                console.print(lag_table(lag) if isinstance(lag, dict) else f"kafka lag: {lag}", highlight=False)
            if status.get("died"):
                died = status["died"]
                console.print(
                    f"[red]its driver (pid {died['pid']}) died without stopping; last seen "
                    f"{_when(died['last_seen_at']) if died['last_seen_at'] else 'never'}:[/] see "
                    f"{escape(str(supervisor.paths(args.name).driver_log))}, then `reconf stream start {args.name}`",
                    highlight=False,
                )
            for record in _record_incidents(args, home, supervisor):
                console.print(
                    f"[yellow]{record.kind}[/] {escape(record.payload['error'])}: now on the audit record as "
                    f"#{record.seq} (`reconf audit list --stream {args.name}`)",
                    highlight=False,
                )
    elif args.action == "watch":
        supervisor.status(args.name)  # fails clearly on an unknown stream
        watch(MetricsStore(supervisor.paths(args.name).metrics), args.name, args.seconds)
    elif args.action == "restart":
        settings = dict(parse_setting(s) for s in args.set or [])
        if not settings:
            raise SpecError("restart needs at least one --set key=value")
        console.print_json(data=supervisor.restart(args.name, settings, args.timeout_s))
    elif args.action == "stop":
        with console.status(f"stopping stream {args.name} at a batch boundary..."):
            console.print_json(data=supervisor.stop(args.name, args.timeout_s))
    elif args.action == "list":
        table = Table(title=f"streams under {home}")
        columns = ("name", "entrypoint", "master", "driver", "pid", "control_port", "app_id")
        for column in columns:
            table.add_column(column.replace("_", " "))
        for row in supervisor.list():
            table.add_row(*(fmt(row[column]) for column in columns))
        console.print(table)
    return 0


def _cmd_cluster(args: argparse.Namespace, home: Path) -> int:
    from dagster_reconf.core.process.local_cluster import start_cluster, stop_cluster
    from dagster_reconf.core.store.cluster_record import cluster_info

    if args.action == "start":
        with console.status("starting Spark standalone cluster on 127.0.0.1..."):
            info = start_cluster(home, workers=args.workers, cores_per_worker=args.cores, memory_per_worker=args.memory)
        console.print(f"master {info.master_url} (UI {info.master_ui}), {len(info.worker_pids)} worker(s)")
    elif args.action == "stop":
        console.print_json(data=stop_cluster(home))
    else:
        info = cluster_info(home)
        console.print(f"master {info.master_url} (UI {info.master_ui})" if info else "no cluster running")
    return 0


def _kafka_lag(supervisor: Any, name: str) -> dict[str, Any] | str:
    """The stream's consumer lag per partition (``--lag``), or why there is none."""
    from dagster_reconf.core.reconfig import DriverStream

    stream = DriverStream(supervisor, name)
    if stream.spec().kafka is None:
        return (
            "the spec names no Kafka brokers (its kafka.bootstrap_servers): the backlog row is the lag at the last "
            "batch, from Spark's progress"
        )
    lag = stream.kafka_lag()
    return lag.as_dict() if lag is not None else "no Kafka source, or no batch committed yet"


def _record_incidents(args: argparse.Namespace, home: Path, supervisor: Any) -> list[Any]:
    """Put the stream's unplanned failures the ledger has not heard of on the record (``status`` looks anyway). The
    ledger is opened only when there is one; one it cannot reach is a warning: status still answers."""
    from dagster_reconf.core.reconfig import DriverStream
    from dagster_reconf.core.reconfig.incidents import record_incidents, stream_incidents

    found = stream_incidents(DriverStream(supervisor, args.name))
    if not found:
        return []
    try:
        return record_incidents(open_ledger(args, home), found)
    except ReconfError as exc:
        console.print(f"[yellow]{len(found)} incident(s) not recorded in the audit ledger:[/] {escape(str(exc))}")
        return []


def _reconfiguration_id(ledger: AuditLedger, given: str) -> str:
    """The reconfiguration ``given`` names: its whole id, or a prefix of one id alone (the list cuts ids short)."""
    if ledger.records(reconfiguration_id=given, limit=1):
        return given
    listed = ledger.records(kinds=RECONFIGURATION_KINDS)  # what `audit list` shows, not every step's record
    ids = sorted({r.reconfiguration_id for r in listed if (r.reconfiguration_id or "").startswith(given)})
    if len(ids) == 1 and given:
        return ids[0]
    if ids and given:
        raise SpecError(f"{given!r} begins {len(ids)} reconfiguration ids ({', '.join(ids[:5])}): give more of it")
    raise SpecError(f"no reconfiguration {given!r} in the ledger {ledger}; see `reconf audit list`")


def _cmd_audit(args: argparse.Namespace, home: Path) -> int:
    ledger = open_ledger(args, home)
    if args.action == "verify":
        report = ledger.verify(args.expect_head)
        if report.ok:
            console.print(f"ledger {ledger}: {report.records} records, chain intact, head {report.head}")
            return 0
        console.print(f"[red]ledger {ledger}: chain broken:[/] {report.problem}", highlight=False)
        return 1
    if args.action == "show":
        records = ledger.records(reconfiguration_id=_reconfiguration_id(ledger, args.id))
        for record in records:
            line = escape(f"{_when(record.recorded_at)} {record.kind} {record.step or ''}")
            console.print(f"[bold]#{record.seq}[/] {line}", highlight=False)
            if record.damage:
                console.print(f"[red]  damaged record, do not trust it: {escape(record.damage)}[/]", highlight=False)
            console.print_json(data=record.payload)
        damaged = [r.seq for r in records if r.damage]
        if damaged:
            console.print(f"[red]{len(damaged)} damaged record(s): run `reconf audit verify`[/]", highlight=False)
        return 1 if damaged else 0
    table = Table(title=f"reconfigurations in {ledger}")
    for column in ("#", "when", "stream", "reconfiguration", "event", "outcome / problems"):
        table.add_column(column)
    kinds = RECONFIGURATION_KINDS
    for record in reversed(ledger.records(stream=args.stream, kinds=kinds, limit=args.limit, newest_first=True)):
        detail = (
            f"DAMAGED: {record.damage}"
            if record.damage
            else record.payload.get("outcome")
            or "; ".join(map(str, record.payload.get("problems", [])))[:80]
            or record.payload.get("plan_hash", "")
        )
        cells = (record.stream, record.reconfiguration_id, record.kind.removeprefix("reconfiguration."), detail)
        table.add_row(str(record.seq), _when(record.recorded_at), *map(fmt, cells))
    console.print(table)
    return 0


def _cmd_agent(args: argparse.Namespace, home: Path) -> int:
    import logging

    from dagster_reconf.core.process.host_agent import HostAgent

    agent = HostAgent(home, args.storage, args.stream)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    console.print(f"agent for {', '.join(agent.streams)} under {args.storage}, drivers under {home}; Ctrl-C stops it")
    try:
        agent.serve(poll_s=args.poll_s)
    except KeyboardInterrupt:
        pass
    return 0


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reconf", description="Control plane for Spark Structured Streaming jobs.")
    parser.add_argument("--home", type=Path, default=None, help="runtime home (default: $RECONF_HOME or ./.reconf)")
    parser.add_argument(
        "--ledger", default=None, help="audit ledger URL (default: $RECONF_LEDGER_URL or HOME/ledger.db)"
    )
    groups = parser.add_subparsers(dest="group", required=True)

    stream = groups.add_parser("stream", help="managed streams").add_subparsers(dest="action", required=True)
    start = stream.add_parser("start", help="start a stream's driver")
    start.add_argument("name")
    start.add_argument(
        "--entrypoint",
        help="the stream definition, package.module:function "
        "(the bundled ones: dagster_reconf.workloads.streams:q5, ...)",
    )
    start.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="an option of the workload (its definition validates them), e.g. --option rate=3000",
    )
    start.add_argument("--spec-file", help="JSON stream spec; flags override its fields")
    start.add_argument("--master", help="Spark master URL (default local[2])")
    start.add_argument(
        "--storage",
        help="URL for checkpoints and event logs: file:///..., hdfs://..., s3a://... (default: under the home)",
    )
    start.add_argument(
        "--source-partitions", type=int, help="the source-partitions knob (where the definition maps it)"
    )
    start.add_argument("--state-partitions", type=int)
    start.add_argument("--trigger-interval-s", type=float)
    start.add_argument("--max-per-trigger", type=int, help="the batch-size knob, in the source's unit")
    start.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any other spec field (options.KEY, knob_options.KNOB, spark_conf.KEY too)",
    )
    start.add_argument("--watch", type=float, default=0, metavar="SECONDS", help="show live progress after starting")
    attach_cmd = stream.add_parser("attach", help="observe a stream from its event logs (recommend-only)")
    attach_cmd.add_argument("name")
    attach_cmd.add_argument(
        "--event-logs",
        required=True,
        help="the application's spark.eventLog.dir: a local path or a URL (s3://, gs://, abfs://, hdfs://, file://)",
    )
    attach_cmd.add_argument("--query", help="the query's name or id (where the applications run several)")
    attach_cmd.add_argument("--application", help="only applications with this name or id")
    attach_cmd.add_argument("--checkpoint", help="the query's checkpoint location (for its state partitions)")
    attach_cmd.add_argument("--trigger-interval-s", type=float, help="the query's trigger (default: inferred)")
    for action in ("status", "watch", "restart", "stop"):
        sub = stream.add_parser(action, help=f"{action} a stream")
        sub.add_argument("name")
        if action == "status":
            sub.add_argument("--json", action="store_true")
            sub.add_argument(
                "--lag", action="store_true", help="Kafka consumer lag per partition, read from the brokers"
            )
        if action == "watch":
            sub.add_argument("--seconds", type=float, default=30.0)
        if action == "restart":
            sub.add_argument(
                "--set",
                action="append",
                metavar="KEY=VALUE",
                help="spec field to change (options.KEY for an option of the workload)",
            )
        if action in ("restart", "stop"):
            sub.add_argument("--timeout-s", type=float, default=120.0)
    stream.add_parser("list", help="list streams")

    cluster = groups.add_parser("cluster", help="a standalone Spark cluster on 127.0.0.1").add_subparsers(
        dest="action", required=True
    )
    cstart = cluster.add_parser("start")
    cstart.add_argument("--workers", type=int, default=1)
    cstart.add_argument("--cores", type=int, default=2)
    cstart.add_argument(
        "--memory",
        default=None,
        help="memory per worker (default: 1g per core, so every core takes an executor of Spark's default 1g)",
    )
    cluster.add_parser("stop")
    cluster.add_parser("status")

    reconfigure = groups.add_parser("reconfigure", help="carry out an execution plan on a running stream")
    reconfigure_actions = reconfigure.add_subparsers(dest="action", required=True)
    reconfigure_actions.add_parser("plan", help="print the execution plan in force as JSON").add_argument("name")
    apply = reconfigure_actions.add_parser(
        "apply", help="apply a plan (re-run the same plan to finish an interrupted one)"
    )
    apply.add_argument("name")
    apply.add_argument("--plan", help="execution plan JSON file")
    apply.add_argument("--set", action="append", metavar="KEY=VALUE", help="change a setting of the plan in force")
    apply.add_argument("--strategy", choices=["native", "replay", "precopy"], default="native", help="how state moves")
    apply.add_argument("--observe-s", type=float, default=60.0, help="how long to watch the stream catch up")
    abort = reconfigure_actions.add_parser("abort", help="roll back the stream's unfinished reconfiguration")
    abort.add_argument("name")

    add_plan_parser(groups)

    agent = groups.add_parser(
        "agent", help="on a driver host: start, stop and keep running the drivers a control plane elsewhere asks for"
    )
    agent.add_argument("--storage", required=True, help="the storage URL of the streams it serves (their specs')")
    agent.add_argument(
        "--stream", action="append", required=True, metavar="NAME", help="a stream it serves (repeat for more)"
    )
    agent.add_argument("--poll-s", type=float, default=1.0, help="how often it looks for requests")

    audit = groups.add_parser("audit", help="the audit ledger").add_subparsers(dest="action", required=True)
    audit_list = audit.add_parser("list", help="reconfigurations, newest last")
    audit_list.add_argument("--stream")
    audit_list.add_argument("--limit", type=int, default=50)
    audit.add_parser("show", help="every record of one reconfiguration").add_argument("id")
    audit.add_parser("verify", help="check the hash chain").add_argument(
        "--expect-head", help="a head hash kept elsewhere"
    )

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if os.getcwd() not in sys.path:  # as `python -m` does: a stream definition in the current directory is found
        sys.path.insert(0, os.getcwd())
    home = (args.home or default_home()).resolve()
    handlers = {
        "stream": _cmd_stream,
        "cluster": _cmd_cluster,
        "reconfigure": cmd_reconfigure,
        "plan": cmd_plan,
        "audit": _cmd_audit,
        "agent": _cmd_agent,
    }
    try:
        return handlers[args.group](args, home)
    except ReconfError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
