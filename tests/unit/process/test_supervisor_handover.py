"""The supervisor's handover plumbing without Spark: waiting on a driver that exited but was not reaped, refusing a
handover to a standby that is gone, and cleaning up stray driver records. The handover itself, on real drivers, is
``tests/integration/test_handover.py``."""

import json
import subprocess
import sys
import threading
import time

import pytest

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.process.driver import await_commit_after
from dagster_reconf.core.process.driver import main as driver_main
from dagster_reconf.core.process.process_tree import wait_for_exit
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.reconfig.plan import ExecutionPlan, diff_plans
from dagster_reconf.core.reconfig.reconfiguration import Reconfiguration
from dagster_reconf.core.spec import StreamSpec

SPEC = {"name": "s", "entrypoint": "dagster_reconf.workloads.streams:q5", "master": "local[1]", "state_partitions": 2}


@pytest.fixture(name="supervisor")
def supervisor_fixture(tmp_path):
    supervisor = StreamSupervisor(tmp_path / "home")
    paths = supervisor.paths("s")
    paths.create()
    paths.write_spec(json.dumps(SPEC))
    return supervisor


def test_an_exited_child_not_yet_reaped_counts_as_exited():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    time.sleep(1.0)  # it has exited; nobody has reaped it: a zombie
    started = time.monotonic()
    assert wait_for_exit(child.pid, timeout_s=30)
    assert time.monotonic() - started < 5, "a zombie must not be waited on until the timeout"


def test_a_running_process_is_waited_on_until_the_timeout():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not wait_for_exit(child.pid, timeout_s=0.5)
    finally:
        child.kill()
        child.wait()
    assert wait_for_exit(child.pid, timeout_s=1)


def test_a_handover_to_a_standby_that_is_gone_is_refused_with_the_way_on(supervisor):
    supervisor.paths("s").standby.write_text(json.dumps({"pid": 999_999_999, "status": "warm", "control_port": 1}))
    with pytest.raises(StreamStateError, match="standby driver 999999999 of stream 's' is gone; resume in the current"):
        supervisor.hand_over("s", 999_999_999)


def test_clean_up_removes_the_records_of_a_dead_standby(supervisor):
    paths = supervisor.paths("s")
    paths.standby.write_text(json.dumps({"pid": 999_999_999, "status": "warm", "control_port": 1}))
    paths.standby_spec.write_text(json.dumps(SPEC))
    assert supervisor.standby_info("s") is None
    assert supervisor.clean_up_drivers("s") == []
    assert not paths.standby.exists() and not paths.standby_spec.exists()


def test_the_standby_starts_with_every_change_but_the_state_partitions_and_code():
    spec = StreamSpec.parse(SPEC)
    target = spec.with_changes({"master": "local[4]", "state_partitions": 4, "trigger_interval_s": 3.0})
    diff = diff_plans(ExecutionPlan.of(spec), ExecutionPlan.of(target), spec, ("0",))
    reconfiguration = Reconfiguration(
        "r", "s", "native", ExecutionPlan.of(spec), ExecutionPlan.of(target), diff.as_rows()
    )
    assert reconfiguration.needs_new_context
    assert reconfiguration.standby_changes == {"master": "local[4]", "trigger_interval_s": 3.0}
    assert not reconfiguration.handed_over
    assert not reconfiguration.keeps_interrupted_batch  # the migration needs a committed boundary


@pytest.mark.parametrize(
    "changes,kept",
    [({"master": "local[4]", "max_per_trigger": 900}, True), ({"master": "local[4]", "code_version": "v2"}, False)],
)
def test_an_interrupted_batch_stays_planned_for_the_standby_only_without_migration_or_new_code(changes, kept):
    spec = StreamSpec.parse(SPEC)
    target = spec.with_changes(changes)
    diff = diff_plans(ExecutionPlan.of(spec), ExecutionPlan.of(target), spec, ("0",))
    reconfiguration = Reconfiguration(
        "r", "s", "native", ExecutionPlan.of(spec), ExecutionPlan.of(target), diff.as_rows()
    )
    assert reconfiguration.needs_new_context and reconfiguration.keeps_interrupted_batch is kept


@pytest.mark.parametrize("argv", [[], ["a", "b"], ["a", "--warm"]])
def test_the_driver_refuses_bad_arguments(argv, capsys):
    assert driver_main(argv) == 2
    assert "--paused | --standby" in capsys.readouterr().err


FAKE_DRIVER = """
import json, os, sys, threading
from dagster_reconf.core.process.control import StartRequest, read_token
from dagster_reconf.core.process.control_server import ControlServer
from dagster_reconf.core.errors import StreamStateError
from pathlib import Path
role, root, record = sys.argv[1], Path(sys.argv[3]), Path(sys.argv[4])
done = threading.Event()
def retire(_):
    threading.Timer(0.5, done.set).start()
    return {"retired": True, "pid": os.getpid()}
def promote(_):
    raise StreamStateError("the standby driver is failed, not warm")
server = ControlServer(read_token(root / "token"), {("POST", "/v1/retire"): (StartRequest, retire),
                                                      ("POST", "/v1/promote"): (StartRequest, promote)})
server.start()
record.with_suffix(".tmp").write_text(json.dumps({"pid": os.getpid(), "control_port": server.port,
                                                 "status": "warm" if role == "standby" else "running"}))
os.replace(record.with_suffix(".tmp"), record)
done.wait(60)
"""


def test_a_standby_that_refuses_to_take_over_leaves_no_old_driver_behind(supervisor):
    """The old driver was told to retire, then the standby refused: the caller must find no driver (and start one of
    the old settings), never the retiring one, whose exit would cut its next request."""
    from dagster_reconf.core.process.control import new_token
    from dagster_reconf.core.process.supervisor import DRIVER_MODULE

    paths = supervisor.paths("s")
    new_token(paths.token)
    fakes = {
        role: subprocess.Popen([sys.executable, "-c", FAKE_DRIVER, role, DRIVER_MODULE, str(paths.root), str(record)])
        for role, record in (("old", paths.driver), ("standby", paths.standby))
    }
    try:
        for record in (paths.driver, paths.standby):
            deadline = time.monotonic() + 60
            while not record.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        with pytest.raises(StreamStateError, match=r"refused to take over .*not warm.*has exited: start a driver of"):
            supervisor.hand_over("s", fakes["standby"].pid, timeout_s=30)
        assert fakes["old"].poll() is not None and supervisor.driver_info("s") is None
    finally:
        for fake in fakes.values():
            fake.kill()
            fake.wait()


def test_a_retired_driver_waits_for_its_successors_first_commit_or_leaves_when_told(supervisor):
    paths = supervisor.paths("s")
    commits = paths.checkpoint / "commits"
    commits.mkdir(parents=True)
    (commits / "4").write_text('v1\n{"nextBatchWatermarkMs":0}')
    leaving = threading.Event()
    started = time.monotonic()
    assert not await_commit_after(paths, 4, timeout_s=0.6, leaving=leaving), "no batch after 4 yet"
    assert time.monotonic() - started >= 0.6
    later = threading.Timer(0.3, lambda: (commits / "5").write_text('v1\n{"nextBatchWatermarkMs":0}'))
    later.start()
    assert await_commit_after(paths, 4, timeout_s=30, leaving=leaving)  # the successor's first commit
    leaving.set()
    started = time.monotonic()
    assert not await_commit_after(paths, 5, timeout_s=30, leaving=leaving)  # SIGTERM: it goes at once
    assert time.monotonic() - started < 1
