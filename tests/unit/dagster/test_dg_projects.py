"""The two dg projects: the reference location (the repository root) and ``examples/orders`` (a user's project laid
out as ``create-dagster project`` lays one out, made from a ``defs.yaml``). ``dg check defs`` validates each as a user
runs it; a bad attribute in a copy of the example's ``defs.yaml`` fails it, naming the value. And a new user's
project: ``create-dagster project``, ``dg scaffold defs dagster_reconf.ReconfStreamsComponent streams``, the home
set, ``dg check defs`` and ``dg list defs``.

dg and create-dagster run with their PyPI update check off and Dagster's telemetry off: no traffic leaves the machine.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ORDERS = REPO / "examples" / "orders"


BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def quiet_env(tmp_path_factory) -> dict[str, str]:
    """The environment of an activated venv, with no PyPI update check and no telemetry."""
    home = tmp_path_factory.mktemp("dagster-home")
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return {
        **os.environ,
        "VIRTUAL_ENV": str(BIN.parent),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DAGSTER_HOME": str(home),
        "DAGSTER_DG_UPDATE_CHECK_ENABLED": "0",
    }


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def dg_check_defs(project: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    return run([str(BIN / "dg"), "check", "defs", "--use-active-venv", *flags], project, env)


@pytest.mark.parametrize(
    ("project", "flags"),
    # The reference location is built by definitions.py from the Python builders (no defs folder to schema-check).
    [(REPO, ("--no-check-yaml",)), (ORDERS, ())],
    ids=["reference", "examples-orders"],
)
def test_dg_check_defs_passes_on_each_project(project, flags, quiet_env):
    checked = dg_check_defs(project, quiet_env, *flags)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout
    if not flags:
        assert "All component YAML validated successfully" in checked.stdout


def test_dg_check_defs_names_a_bad_attribute_in_the_examples_defs_yaml(tmp_path, quiet_env):
    project = tmp_path / "orders"
    shutil.copytree(ORDERS, project, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "orders-data"))
    defs_yaml = project / "src" / "orders_example" / "defs" / "orders" / "defs.yaml"
    defs_yaml.write_text(defs_yaml.read_text().replace("name: ds2", "name: ds3"))
    checked = dg_check_defs(project, quiet_env)
    assert checked.returncode != 0
    said = checked.stdout + checked.stderr
    assert "ds3" in said and "policy" in said, said


def test_the_example_project_reads_its_deployment_from_the_environment(tmp_path, monkeypatch):
    """The defaults serve a laptop; a spec file replaces the inline spec (a deployment's cluster and storage)."""
    from orders_example.definitions import defs

    local = defs()
    assert {s.name for s in local.sensors} == {"orders_scaling_sensor", "reconfiguration_failures"}
    assert local.resources["streams"].remote is False
    declared = local.get_job_def("stream_control_job").metadata["streams"].records
    assert [(r.data["stream"], r.data["entrypoint"], r.data["master"]) for r in declared] == [
        ("orders", "orders_example.streams:orders", "local[1]")
    ]

    spec_file = tmp_path / "orders.json"
    spec_file.write_text(
        '{"name": "orders", "entrypoint": "orders_example.streams:orders", "master": "spark://10.0.0.5:7077",'
        ' "storage": "s3a://bucket/reconf", "options": {"input_dir": "s3a://bucket/in", "output_dir": "s3a://b/out"}}'
    )
    monkeypatch.setenv("ORDERS_SPEC_FILE", str(spec_file))
    monkeypatch.setenv("RECONF_REMOTE", "1")
    deployed = defs()
    assert deployed.resources["streams"].remote is True
    (record,) = deployed.get_job_def("stream_control_job").metadata["streams"].records
    assert (record.data["master"], record.data["storage"]) == ("spark://10.0.0.5:7077", "s3a://bucket/reconf")

    monkeypatch.setenv("ORDERS_SPEC_FILE", str(tmp_path / "missing.json"))
    with pytest.raises(Exception) as refused:
        defs()
    causes = [refused.value]
    while causes[-1].__cause__ or causes[-1].__context__:
        causes.append(causes[-1].__cause__ or causes[-1].__context__)
    assert any(re.search(r"stream_spec_files\[0\]: spec file .*missing\.json not found", str(c)) for c in causes)


def test_a_new_users_project_takes_the_component_as_scaffolded(tmp_path, quiet_env):
    created = run([str(BIN / "create-dagster"), "project", "--no-uv-sync", "my-streams"], tmp_path, quiet_env)
    assert created.returncode == 0, created.stdout + created.stderr
    project = tmp_path / "my-streams"
    scaffolded = run(
        [str(BIN / "dg"), "scaffold", "defs", "dagster_reconf.ReconfStreamsComponent", "streams"], project, quiet_env
    )
    assert scaffolded.returncode == 0, scaffolded.stdout + scaffolded.stderr
    assert (project / "src" / "my_streams" / "defs" / "streams" / "defs.yaml").exists()
    # The home set, as the scaffolded file asks; the project on the path, as `pip install -e .` puts it.
    env = {**quiet_env, "RECONF_HOME": str(tmp_path / "home"), "PYTHONPATH": str(project / "src")}
    checked = dg_check_defs(project, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = run([str(BIN / "dg"), "list", "defs", "--json"], project, env)
    assert listed.returncode == 0, listed.stderr
    defs = json.loads(listed.stdout)
    assert {a["asset_key"] for a in defs["assets"]} >= {"stream", "trace_snapshots", "cp_summaries", "ds2_plans"}
    assert {c["name"] for c in defs["asset_checks"]} >= {"driver_alive", "lag_within_band", "query_healthy"}
    assert "streams_sensor" in {s["name"] for s in defs["sensors"]}

    del env["RECONF_HOME"]  # unset: the scaffolded file falls back to ./.reconf, the CLI's default
    unset = dg_check_defs(project, env)
    assert unset.returncode == 0, unset.stdout + unset.stderr
