"""The closed loop through the real Dagster daemon, then its evidence in the real webserver, read by headless Chromium.

One loop run (the ``make demo`` loop: an under-provisioned Q5 stream, its scaling
sensor turned on in a fresh instance, ``dagster-daemon`` launching the runs) feeds both
tests: the loop's outcome, and the pages a person would open afterwards. Screenshots go
to ``test-output/ui/`` (``RECONF_TEST_OUTPUT`` to change).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from dagster_reconf.core.process.process_tree import terminate_process_tree
from dagster_reconf.core.process.supervisor import StreamSupervisor
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.harness.closed_loop import DagsterDaemon
from dagster_reconf.workloads.demo import DEMO_SENSOR, DEMO_STREAM, run_demo

from .conftest import wait_until
from .test_reconfiguration_crash import kill_driver

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = ROOT / "workspace.yaml"
CHROMIUM = Path("/usr/bin/chromium")
LOOP_TIMEOUT_S = 420.0


@pytest.fixture(name="loop", scope="module")
def loop_fixture(tmp_path_factory):
    base = tmp_path_factory.mktemp("closed-loop")
    report = run_demo(base / "home", WORKSPACE, base / "out", timeout_s=LOOP_TIMEOUT_S)
    return base / "home", report


def test_the_loop_converges_through_the_daemon_and_loses_nothing(loop):
    _, report = loop
    assert report.converged, f"not converged in {LOOP_TIMEOUT_S:g} s; last sensor reason: {report.final_reason}"
    assert 1 <= report.steps <= 2, report.reconfigurations
    assert all(r["outcome"] == "succeeded" for r in report.reconfigurations), report.reconfigurations
    assert report.lost == 0 and report.duplicated == 0
    jobs = {r["job"] for r in report.runs}
    assert {"reconfigure_stream_job", "trace_snapshot_job"} <= jobs, report.runs
    failed = [
        f"{r['job']} {r['run_id'][:8]} {r['status']}: {r.get('error')}" for r in report.runs if r["status"] != "SUCCESS"
    ]
    assert not failed, "\n".join(failed)
    assert all(r["run_id"] in {run["run_id"] for run in report.runs} for r in report.reconfigurations)
    assert Path(report.timeline_png).read_bytes().startswith(b"\x89PNG")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(name="webserver", scope="module")
def webserver_fixture(loop):
    if not CHROMIUM.exists():
        if os.environ.get("RECONF_REQUIRE_BROWSER") == "1":
            pytest.fail(
                "Chromium is required (RECONF_REQUIRE_BROWSER=1) but /usr/bin/chromium is missing: "
                "apt-get install chromium"
            )
        pytest.skip("Chromium not installed (apt-get install chromium); `make test` installs it")
    home, report = loop
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": report.dagster_home, "RECONF_HOME": str(home)}
    log = open(Path(report.dagster_home) / "webserver.log", "wb")
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("dagster-webserver")),
            "-w",
            str(WORKSPACE),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, f"dagster-webserver exited; see {log.name}"
            assert time.monotonic() < deadline, f"dagster-webserver not up in 120 s; see {log.name}"
            time.sleep(1)
        yield url
    finally:
        terminate_process_tree(server.pid, grace_s=10)
        log.close()


@pytest.fixture(name="page")
def page_fixture(webserver):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        yield page
        browser.close()


def screenshot(page, name: str) -> None:
    folder = Path(os.environ.get("RECONF_TEST_OUTPUT", ROOT / "test-output")) / "ui"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def dismiss_welcome(page) -> None:
    """The webserver greets a new browser with a newsletter dialog; skip it."""
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.wait_for(timeout=5_000)
        skip.click()
    except PlaywrightTimeout:
        pass


def test_pages_show_lineage_plots_and_the_audit_record(page, webserver, loop):
    _, report = loop
    page.goto(f"{webserver}/assets/stream_configuration?view=lineage&lineageScope=upstream&lineageDepth=4")
    dismiss_welcome(page)
    for asset in ("trace_snapshots", "cp_summaries", "ds2_plans", "stream_configuration"):
        page.get_by_text(asset, exact=True).last.wait_for()
    page.get_by_text("1 / 1 Passed").first.wait_for()  # the GX asset checks
    screenshot(page, "1-lineage")

    page.goto(f"{webserver}/assets/cp_summaries")
    glance = page.locator('img[src^="data:image/svg+xml"]').first  # in place on the page, no click
    glance.wait_for()
    assert glance.evaluate("img => img.complete && img.naturalWidth") > 100, "the inline CP plot did not render"
    screenshot(page, "2-cp-summaries-inline-plot")
    page.locator("tr", has=page.get_by_text("plot", exact=True)).get_by_text("[Show Markdown]").click()
    plot = page.locator('img[src^="data:image/png"]').first
    plot.wait_for()
    assert plot.evaluate("img => img.naturalWidth") > 100, "the CP plot did not render"
    page.wait_for_timeout(1_000)  # the dialog fades in
    screenshot(page, "2-cp-summaries-plot")

    reconfiguration = report.reconfigurations[-1]
    page.goto(f"{webserver}/runs/{reconfiguration['run_id']}")
    page.get_by_text("RUN_SUCCESS").first.wait_for()
    page.get_by_text("Launched by").first.wait_for()  # the scaling sensor
    screenshot(page, "3-reconfiguration-run")

    page.get_by_text("View Asset").first.click()  # the run's stream_configuration materialization
    page.wait_for_url("**/assets/stream_configuration**")
    page.get_by_text(f"reconf audit show {reconfiguration['id']}").first.wait_for()  # the ledger record it links
    screenshot(page, "4-stream-configuration-audit")


def test_the_stream_page_the_plan_and_the_windows_read_as_figures_not_dumps(page, webserver, loop):
    page.goto(f"{webserver}/assets/stream?view=checks")
    dismiss_welcome(page)
    page.get_by_text("Checks (3)").wait_for()
    # The loop stopped the stream at its end: the page says so, with the reason, where it showed the last tick's
    # "running" before.
    page.get_by_text("nexmark-q5: no driver: the stream was stopped").first.wait_for()
    screenshot(page, "5-stream-checks")

    page.goto(f"{webserver}/assets/stream?view=events")
    page.get_by_text("Partition nexmark-q5 observed").first.wait_for()
    page.get_by_text("nexmark-q5", exact=True).nth(1).click()  # the newest tick's observation while the stream ran
    page.get_by_text("running", exact=True).first.wait_for()
    for label in ("lag_events", "lag_s", "throughput_events_per_s", "utilization_pct", "last_batch_at", "spark_ui"):
        page.get_by_text(label, exact=True).first.wait_for()  # typed figures, units in their labels
    screenshot(page, "6-stream-observed-running")

    page.goto(f"{webserver}/assets/ds2_plans")
    page.get_by_text("capacity_planned", exact=True).first.wait_for()  # the observation as a table of figures
    capacity = page.locator('img[src^="data:image/svg+xml"]').first  # the capacity plot, in place
    capacity.wait_for()
    assert capacity.evaluate("img => img.complete && img.naturalWidth") > 100, "the inline capacity plot did not render"
    for header in ("knob", "now", "planned"):
        page.get_by_text(header, exact=True).first.wait_for()  # the plan as a table
    assert '{"' not in page.inner_text("body"), "a JSON dump in ds2_plans' visible metadata"
    screenshot(page, "7-ds2-plans")

    # Windows begin with the stream: the only missing ones are windows in which a stream ran (17,743 were missing
    # after a fresh demo with windows on a fixed clock from a fixed start).
    page.goto(f"{webserver}/assets/trace_snapshots?view=partitions")
    missing = page.get_by_text(re.compile(r"^Missing \(\d+\)$")).first
    missing.wait_for()
    materialized = page.get_by_text(re.compile(r"^Materialized \(\d+\)$")).first.inner_text()
    assert int(materialized.split("(")[1].rstrip(")")) >= 1
    assert int(missing.inner_text().split("(")[1].rstrip(")")) <= 4, "at most the two streams' windows of a short run"
    screenshot(page, "8-trace-windows")


def test_a_killed_driver_turns_driver_alive_red_on_the_next_tick(page, webserver, loop):
    """The converged stream restarted and the daemon back on (the scaling sensor still on in the instance): a
    ``kill -9`` of its driver fails ``driver_alive`` on the first tick that starts after it, as the Catalog shows."""
    home, report = loop
    supervisor = StreamSupervisor(home)
    spec = StreamSpec.parse(json.loads(supervisor.paths(DEMO_STREAM).spec.read_text()))
    supervisor.start(spec)  # from its checkpoint, on the configuration the loop left
    env = {
        **os.environ,
        "DAGSTER_HOME": report.dagster_home,
        "RECONF_HOME": str(home),
        "DAGSTER_RECONF_ENV": "local",
    }
    check = dg.AssetCheckKey(dg.AssetKey("stream"), "driver_alive")
    try:
        with (
            DagsterDaemon(WORKSPACE, env, Path(report.dagster_home) / "daemon-kill.log") as daemon,
            dg.DagsterInstance.from_config(report.dagster_home) as instance,
        ):
            restarted_at = time.time()
            wait_until(
                lambda: observed_running(instance, after=restarted_at),
                timeout_s=180,
                what="a tick that observes the restarted stream running",
                interval_s=1.0,
            )
            kill_driver(supervisor, DEMO_STREAM)
            killed_at = time.time()
            ticks = wait_until(
                lambda: finished_ticks(instance, DEMO_SENSOR, started_after=killed_at),
                timeout_s=120,
                what="a tick started after the kill",
                interval_s=1.0,
            )
            first_tick = ticks[-1]
            assert latest_verdict(instance, check, after=killed_at, before=first_tick.end_timestamp) is False, (
                "the first tick after the kill did not fail driver_alive"
            )
            assert daemon.alive()
    finally:
        if supervisor.driver_info(DEMO_STREAM):
            supervisor.stop(DEMO_STREAM)

    page.goto(f"{webserver}/assets/stream?view=checks")
    dismiss_welcome(page)
    page.get_by_text("driver_alive", exact=True).first.click()
    page.get_by_text(f"{DEMO_STREAM}: its driver died while the stream ran").first.wait_for()  # its latest execution
    page.get_by_text("Failed", exact=True).first.wait_for()
    screenshot(page, "9-stream-driver-killed")


def latest_verdict(
    instance: dg.DagsterInstance, check: dg.AssetCheckKey, *, after: float, before: float | None = None
) -> bool | None:
    """Whether the newest evaluation of ``check`` for the demo stream recorded in (after, before] passed."""
    for record in instance.event_log_storage.get_asset_check_execution_history(check, limit=20):
        evaluation = record.event.asset_check_evaluation if record.event else None
        at = record.event.timestamp if record.event else record.create_timestamp
        if evaluation is None or at <= after or (before is not None and at > before):
            continue
        if evaluation.metadata.get("stream") and evaluation.metadata["stream"].value == DEMO_STREAM:
            return evaluation.passed
    return None


def observed_running(instance: dg.DagsterInstance, *, after: float) -> bool:
    """Whether a tick put the demo stream on its page as running after ``after``."""
    for record in instance.fetch_observations(dg.AssetKey("stream"), limit=20).records:
        observation = record.asset_observation
        if record.timestamp <= after:
            break
        if observation and observation.partition == DEMO_STREAM and observation.metadata["state"].value == "running":
            return True
    return False


def finished_ticks(instance: dg.DagsterInstance, sensor: str, *, started_after: float) -> list:
    """The sensor's ticks that started after ``started_after`` and finished, newest first."""
    state = next(s for s in instance.all_instigator_state() if s.instigator_name == sensor)
    ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, after=started_after, limit=20)
    return [t for t in ticks if t.status.value != "STARTED" and t.end_timestamp]
