"""Real driver processes: start, status, live restarts, control-endpoint refusals, stop,
and bad input that must fail clearly and leave no process behind."""

import json
from datetime import datetime, timezone

import dagster
import pytest

from dagster_reconf import StreamRuntimeResource, build_trace_assets
from dagster_reconf.cli import main as reconf
from dagster_reconf.core.errors import (
    ControlRequestError,
    SpecError,
    StreamNotFoundError,
    StreamStartError,
    StreamStateError,
)
from dagster_reconf.core.process.control import ControlClient
from dagster_reconf.core.process.process_tree import session_processes
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import drivers_under, wait_until

pytestmark = pytest.mark.spark


def test_driver_lifecycle_with_live_restarts(supervisor, capsys):
    # The control endpoint on another loopback address: where a user names a routable one for remote run workers.
    spec = bundled_spec(
        "life", "q5", rate=3000, source_partitions=1, trigger_interval_s=0.5, control_bind_address="127.0.0.2"
    )
    info = supervisor.start(spec)
    assert info["status"] == "running" and info["control_port"] > 0 and info["control_host"] == "127.0.0.2"
    wait_until(lambda: (supervisor.status("life").get("batch_id") or -1) >= 1, what="two batches")

    status = supervisor.status("life")
    assert status["state"] == "running"
    assert status["backlog_events"] is not None and status["state_rows"]["stateStoreSave"] > 0
    assert status["checkpoint"]["state_partitions"] == 4
    event_logs = [p.name for p in supervisor.paths("life").event_log.iterdir()]
    assert any(name.startswith(("eventlog_v2_", "local-")) for name in event_logs), event_logs
    temp = supervisor.paths("life").driver_temp_of(info["pid"])  # the JVM's temporary files: not in /tmp
    held = [p.name for p in temp.iterdir()]
    assert any(n.startswith("blockmgr-") for n in held) and any(n.startswith("librocksdbjni") for n in held), held

    with pytest.raises(StreamStateError, match="already running"):
        supervisor.start(spec)

    # Wrong token and malformed requests are refused and change nothing.
    with pytest.raises(ControlRequestError, match="wrong token") as err:
        ControlClient(info["control_port"], "not-the-token", host="127.0.0.2").restart({"source_partitions": 2})
    with pytest.raises(ControlRequestError, match="unreachable"):  # it listens where the spec says, nowhere else
        ControlClient(info["control_port"], "not-the-token").status()
    assert err.value.status == 401
    with pytest.raises(
        ControlRequestError, match=r"source_partitions: Input should be greater than or equal to 1 \(got 0\)"
    ):
        supervisor.restart("life", {"source_partitions": 0})
    with pytest.raises(ControlRequestError, match=r"options \['seed'\] define the stream's data"):
        supervisor.restart("life", {"options.seed": 1})
    with pytest.raises(ControlRequestError, match=r"options.rate: Input should be greater than 0 \(got -1\)"):
        supervisor.restart("life", {"options.rate": -1})
    assert supervisor.status("life")["spec"]["source_partitions"] == 1

    # Query-scope restart: same SparkContext.
    report = supervisor.restart("life", {"source_partitions": 2, "options.rate": 4000})
    assert report["scope"] == "query"
    after = supervisor.status("life")
    assert after["spec"]["source_partitions"] == 2 and after["app_id"] == status["app_id"]
    assert after["spec"]["options"]["rate"] == 4000

    # Session-scope restart: a new SparkContext in the same driver process (JVM stays).
    report = supervisor.restart("life", {"master": "local[1]"})
    assert report["scope"] == "session"
    after = supervisor.status("life")
    assert after["master"] == "local[1]" and after["app_id"] != status["app_id"]
    assert supervisor.driver_info("life")["pid"] == info["pid"]
    batch_before = after["checkpoint"]["last_committed_batch"]
    wait_until(
        lambda: (supervisor.status("life")["checkpoint"]["last_committed_batch"] or -1) > batch_before,
        what="progress after restart",
    )

    assert reconf(["--home", str(supervisor.home), "stream", "list"]) == 0
    assert "life" in capsys.readouterr().out

    # The trace schedule asks for the last closed window of running streams only.
    traces = build_trace_assets(streams=["life", "idle"], window_minutes=5)
    resources = {"streams": StreamRuntimeResource(home=str(supervisor.home))}
    defs = dagster.Definitions(
        assets=[traces.snapshots, traces.summaries], jobs=[traces.job], schedules=[traces.schedule], resources=resources
    )
    with dagster.instance_for_test() as instance:
        context = dagster.build_schedule_context(
            instance=instance,
            resources=resources,
            repository_def=defs.get_repository_def(),
            scheduled_execution_time=datetime(2026, 11, 21, 12, 7, tzinfo=timezone.utc),
        )
        unseen = traces.schedule.evaluate_tick(context)  # no sensor registered the window: no run for it
        assert unseen.run_requests == [] and "window 2026-11-21-12:00 is not a partition" in unseen.skip_message
        instance.add_dynamic_partitions(traces.windows.name, ["2026-11-21-12:00"])
        (request,) = traces.schedule.evaluate_tick(context).run_requests
    assert request.partition_key == dagster.MultiPartitionKey({"stream": "life", "window": "2026-11-21-12:00"})

    stopped = supervisor.stop("life")
    assert stopped["stopped"] and "forced" not in stopped
    assert stopped["stop"]["last_committed_batch"] is not None
    assert session_processes(info["pid"]) == [] and not temp.exists()
    offline = supervisor.status("life")
    assert offline["state"] == "not running" and offline["batch_id"] is not None

    # Restarting with other state partitions over the same checkpoint fails inside the
    # driver: the error comes back and nothing is left running.
    with pytest.raises(StreamStartError, match=r"has 4 state partitions but the spec asks for 2"):
        supervisor.start(spec.with_changes({"state_partitions": 2}))
    assert drivers_under(supervisor.home) == []
    assert json.loads(supervisor.paths("life").driver.read_text())["status"] == "failed"


def test_unreachable_master_fails_before_spawning(supervisor):
    spec = bundled_spec("nomaster", "q1", master="spark://127.0.0.1:1")
    with pytest.raises(
        StreamStartError, match=r"no Spark master reachable at spark://127.0.0.1:1 .*reconf cluster start"
    ):
        supervisor.start(spec)
    assert drivers_under(supervisor.home) == []


def test_unwritable_home_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    supervisor = StreamSupervisor(blocker / "home")
    with pytest.raises(SpecError, match=r"runtime home directory .*a-file/home is not writable"):
        supervisor.start(bundled_spec("nowrite", "q1"))
    assert drivers_under(blocker) == []


def test_unwritable_checkpoint_dir_is_refused(supervisor):
    paths = supervisor.paths("blocked")
    paths.root.mkdir(parents=True)
    paths.checkpoint.write_text("a file where the checkpoint directory should be")
    with pytest.raises(SpecError, match=r"checkpoint directory .*blocked/checkpoint is not writable"):
        supervisor.start(bundled_spec("blocked", "q1"))
    assert drivers_under(supervisor.home) == []


def test_cli_errors_are_one_line_with_exit_2(supervisor, capsys):
    home = ["--home", str(supervisor.home)]
    q1 = ["--entrypoint", "dagster_reconf.workloads.streams:q1"]
    assert reconf([*home, "stream", "status", "ghost"]) == 2
    assert "error: no stream named 'ghost'" in capsys.readouterr().out
    assert reconf([*home, "stream", "start", "x"]) == 2
    assert "stream start needs --entrypoint package.module:function" in capsys.readouterr().out
    assert reconf([*home, "stream", "start", "x", "--entrypoint", "nowhere.streams:q42"]) == 2
    assert "no module 'nowhere.streams' on the import path" in " ".join(capsys.readouterr().out.split())
    assert reconf([*home, "stream", "start", "x", *q1, "--option", "rate=-5"]) == 2
    assert "options.rate: Input should be greater than 0 (got -5)" in " ".join(capsys.readouterr().out.split())
    assert reconf([*home, "stream", "start", "x", *q1, "--option", "speed"]) == 2
    assert "--option expects key=value, got 'speed'" in capsys.readouterr().out
    assert reconf([*home, "stream", "start", "x", *q1, "--master", "mesos://x"]) == 2
    assert "is not a Spark master URL" in capsys.readouterr().out
    assert drivers_under(supervisor.home) == []
    with pytest.raises(StreamNotFoundError):
        supervisor.stop("ghost")
