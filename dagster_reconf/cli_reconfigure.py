"""``reconf reconfigure`` and ``reconf plan``: carry out an execution plan, and ask the scaling policy for one.

``reconf plan NAME`` prints the policy's decision for a managed or attached stream (the same function the Dagster
``ds2_plans`` asset records); ``--apply`` carries a managed stream's plan out as ``reconf reconfigure apply`` would.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from dagster_reconf.cli_views import console, fmt
from dagster_reconf.core.errors import SpecError

if TYPE_CHECKING:
    from dagster_reconf.core.scaling.stream_decision import StreamDecision

__all__ = ["LEDGER_ENV", "add_plan_parser", "cmd_plan", "cmd_reconfigure", "open_ledger", "parse_setting"]

LEDGER_ENV = "RECONF_LEDGER_URL"
_PLAN_KNOBS = ("cores", "state_partitions", "source_partitions", "trigger_interval_s", "max_per_trigger")


def open_ledger(args: argparse.Namespace, home: Path) -> Any:
    """The audit ledger: ``--ledger``, else ``$RECONF_LEDGER_URL``, else the SQLite file in the home."""
    from dagster_reconf.core.ledger import AuditLedger, default_ledger_url

    return AuditLedger(args.ledger or os.environ.get(LEDGER_ENV) or default_ledger_url(home))


def parse_setting(text: str, flag: str = "--set") -> tuple[str, Any]:
    """``key=value`` with a JSON value when it parses (numbers, objects), else the string."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise SpecError(f"{flag} expects key=value, got {text!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def _holder() -> str:
    return f"cli:{getpass.getuser()}@{socket.gethostname()}"


def _carry_out(args: argparse.Namespace, home: Path, stream: Any, target: Any, trigger: dict[str, Any]) -> int:
    """Run ``target`` on ``stream`` step by step, print each step and the outcome; 0 where it succeeded (or changed
    nothing)."""
    from dagster_reconf.core.reconfig import STEPS, Reconfigurer

    reconfigurer = Reconfigurer(
        stream,
        open_ledger(args, home),
        holder=_holder(),
        strategy=getattr(args, "strategy", "native"),
        observe_timeout_s=getattr(args, "observe_s", 60.0),
    )
    reconfiguration = reconfigurer.begin(target, trigger=trigger)
    with reconfigurer.holding(reconfiguration):
        for step in STEPS:
            with console.status(f"{stream.name}: {step}..."):
                reconfigurer.step(reconfiguration, step)
            if reconfiguration.finished and step != "record":
                break
            console.print(f"  {step}: done in {reconfiguration.timings.get(step, 0):.2f} s", highlight=False)
    console.print(f"reconfiguration {reconfiguration.id} of {stream.name}: [bold]{reconfiguration.outcome}[/]")
    for line in reconfiguration.explanation():
        console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    if "observe" in reconfiguration.results:
        console.print_json(data=dataclasses.asdict(reconfiguration.observation))
    return 0 if reconfiguration.outcome in ("succeeded", "noop") else 1


def cmd_reconfigure(args: argparse.Namespace, home: Path) -> int:
    """``reconf reconfigure plan | apply | abort NAME``."""
    from dagster_reconf.core.process.supervisor import StreamSupervisor
    from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan, Reconfigurer

    stream = DriverStream(StreamSupervisor(home), args.name)
    if args.action == "plan":
        print(ExecutionPlan.of(stream.spec()).model_dump_json(indent=2))
        return 0
    if args.action == "abort":
        aborted = Reconfigurer(stream, open_ledger(args, home), holder=_holder()).abort()
        console.print(
            f"rolled back reconfiguration {aborted.id}"
            if aborted
            else f"stream {args.name} has no unfinished reconfiguration"
        )
        return 0
    if args.plan:
        if not Path(args.plan).is_file():
            raise SpecError(
                f"plan file {args.plan} not found; start from the plan in force: "
                f"reconf reconfigure plan {args.name} > plan.json"
            )
        target = ExecutionPlan.parse(Path(args.plan).read_text())
    else:
        settings = dict(parse_setting(s) for s in args.set or [])
        if not settings:
            raise SpecError("reconfigure apply needs --plan FILE or at least one --set key=value")
        target = ExecutionPlan.of_changes(stream.spec(), settings)
    return _carry_out(args, home, stream, target, {"kind": "cli", "user": _holder()})


def add_plan_parser(groups: Any) -> None:
    """``reconf plan NAME [--json] [--apply] [--policy P] [--set KEY=VALUE]``."""
    from dagster_reconf.core.scaling.policies import POLICIES

    plan = groups.add_parser(
        "plan", help="the scaling policy's decision for a stream (advice for an attached application's next run)"
    )
    plan.add_argument("name")
    plan.add_argument("--json", action="store_true", help="the decision as JSON")
    plan.add_argument("--apply", action="store_true", help="carry the plan out (managed streams only)")
    plan.add_argument("--policy", choices=sorted(POLICIES), default="ds2")
    plan.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="a policy setting, e.g. --set utilization_target=0.6"
    )
    plan.add_argument("--strategy", choices=["native", "replay", "precopy"], default="native", help="with --apply")
    plan.add_argument("--observe-s", type=float, default=60.0, help="with --apply: how long to watch it catch up")


def cmd_plan(args: argparse.Namespace, home: Path) -> int:
    """Print the decision for ``args.name``; with ``--apply``, carry a managed stream's plan out."""
    from dagster_reconf.core.process.supervisor import StreamSupervisor
    from dagster_reconf.core.reconfig import DriverStream, ExecutionPlan
    from dagster_reconf.core.scaling.policies import POLICIES
    from dagster_reconf.core.scaling.policy_config import PolicyConfig
    from dagster_reconf.core.scaling.stream_decision import decide_stream

    settings = PolicyConfig.parse(dict(parse_setting(s) for s in args.set or []))
    StreamSupervisor(home).require(args.name)  # an unknown stream: one line naming the streams there are
    decided = decide_stream(home, args.name, POLICIES[args.policy](settings))
    if args.json:
        print(json.dumps(decided.as_dict(), indent=2, default=str))
    else:
        _print_decision(decided)
    if not args.apply:
        return 0
    if decided.attached:
        raise SpecError(
            f"stream {args.name} is attached (observed from its event logs): nothing here runs it, so --apply has "
            "nothing to change; set the planned values in your job's own configuration for its next run"
        )
    plan = decided.decision.plan
    if plan is None or decided.decision.action not in ("scale_up", "scale_down"):
        console.print(f"nothing to apply: {escape(decided.decision.reason)}", highlight=False)
        return 0
    stream = DriverStream(StreamSupervisor(home), args.name)
    spec = stream.spec()
    target = ExecutionPlan.of(spec.with_changes(plan.target.changes_for(spec)))
    trigger = {"kind": "cli-plan", "user": _holder(), "policy": plan.policy, "plan_hash": plan.plan_hash}
    return _carry_out(args, home, stream, target, trigger)


def _print_decision(decided: StreamDecision) -> None:
    """The plan table (now -> planned), predictions, the one reason and the evidence window."""
    from dagster_reconf.core.scaling.evidence import describe_epoch

    decision, evidence = decided.decision, decided.evidence
    label = "advice for the next run" if decided.for_next_run else decision.action
    console.print(f"[bold]{escape(decided.stream)}[/]: {escape(label)}", highlight=False)
    plan, current = decision.plan, decision.current
    if current is not None:
        table = Table("knob", "now", "planned")
        target = plan.target if plan else current
        for knob in _PLAN_KNOBS:
            before, after = getattr(current, knob), getattr(target, knob)
            table.add_row(knob, fmt(before), fmt(after) if after != before else "[dim]same[/]")
        console.print(table)
    if plan is not None:
        predicted = plan.predicted
        console.print(
            f"predicted: batch {predicted.get('batch_ms_planned', 0):,.0f} ms "
            f"(band {predicted.get('batch_ms_planned_low', 0):,.0f}-{predicted.get('batch_ms_planned_high', 0):,.0f}), "
            f"utilization {predicted.get('utilization_planned', 0):.0%}, "
            f"capacity {predicted.get('capacity_now', 0):,.0f} -> {predicted.get('capacity_planned', 0):,.0f} "
            f"events/s for {predicted.get('target_rate', 0):,.0f}",
            highlight=False,
        )
    console.print(f"reason: {escape(decision.reason)}", highlight=False, soft_wrap=True)
    span = (
        f"batches {evidence.first_batch}-{evidence.last_batch} ({evidence.batches} settled), "
        f"{evidence.first_at} to {evidence.last_at}"
        if evidence.batches
        else "no settled batches yet"
    )
    console.print(f"evidence: configuration {escape(describe_epoch(evidence.epoch))}, {escape(span)}", highlight=False)
    if decided.query_ended_at is not None or decided.for_next_run:
        console.print("its query has ended: the plan is for the next run, never applied here", highlight=False)
