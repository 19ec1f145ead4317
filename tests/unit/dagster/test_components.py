"""dagster-reconf as a Component: a defs.yaml gives the same Definitions as the Python builders; static and dynamic
streams, a translation override, the scaffolded defs.yaml loading as written, and bad attributes named with the fix."""

import dagster
import pytest
import yaml
from dagster_pyspark import PySparkResource

from dagster_reconf import (
    AuditLedgerResource,
    ReconfStreamsComponent,
    StreamRuntimeResource,
    build_reconfiguration_failure_sensor,
    build_scaling_assets,
    build_stream_state_asset,
    build_streams_sensor,
    build_trace_assets,
)
from dagster_reconf.dagster.components import ReconfStreamsScaffolder
from dagster_reconf.dagster.state_assets import STATE_READER_CONF


def from_yaml(text: str) -> dagster.Definitions:
    return dagster.component_defs(component=ReconfStreamsComponent.resolve_from_yaml(text))


def summary(defs: dagster.Definitions) -> dict:
    with dagster.instance_for_test():
        dagster.Definitions.validate_loadable(defs)
    return {
        "assets": sorted((s.key.to_user_string(), s.group_name) for s in defs.resolve_all_asset_specs()),
        "jobs": sorted(job.name for job in defs.jobs or []),
        "sensors": sorted(sensor.name for sensor in defs.sensors or []),
        "schedules": sorted(schedule.name for schedule in defs.schedules or []),
        "resources": sorted(defs.resources or {}),
    }


def test_the_yaml_gives_the_definitions_the_python_builders_give():
    yaml_defs = from_yaml("home: /data/reconf\ntraces: {window_minutes: 5}\n")
    traces = build_trace_assets(window_minutes=5)
    scaling = build_scaling_assets()
    python_defs = dagster.Definitions.merge(
        traces.defs,
        scaling.defs,
        dagster.Definitions(
            assets=[build_stream_state_asset()],
            sensors=[
                build_streams_sensor(scaling=scaling, traces=traces),
                build_reconfiguration_failure_sensor(job=scaling.job, name="reconfiguration_failures"),
            ],
            resources={
                "streams": StreamRuntimeResource(home="/data/reconf"),
                "audit_ledger": AuditLedgerResource(home="/data/reconf"),
                "pyspark": PySparkResource(spark_config=STATE_READER_CONF),
            },
        ),
    )
    assert summary(yaml_defs) == summary(python_defs)
    assert yaml_defs.resources["streams"].home == "/data/reconf"


def test_static_streams_with_a_scaling_sensor_each_and_a_control_job_for_the_specs_given():
    defs = from_yaml(
        """
streams: [orders, clicks]
stream_specs:
  - {name: orders, entrypoint: "orders_example.streams:orders", options: {input_dir: /in, output_dir: /out}}
sensor: {kind: scaling, minimum_interval_seconds: 15, default_status: running}
prefix: team_a
"""
    )
    shown = summary(defs)
    assert "team_a_stream_control_job" in shown["jobs"] and "team_a_reconfigure_stream_job" in shown["jobs"]
    scaling_sensors = [s for s in defs.sensors if s.name.endswith("scaling_sensor")]
    assert len(scaling_sensors) == 2 and all(s.minimum_interval_seconds == 15 for s in scaling_sensors)
    assert all(s.default_status is dagster.DefaultSensorStatus.RUNNING for s in scaling_sensors)
    plans = next(s for s in defs.resolve_all_asset_specs() if s.key.path[-1] == "ds2_plans")
    assert plans.partitions_def.get_partition_keys() == ["orders", "clicks"]


def test_a_translation_per_asset_kind_reaches_its_asset(monkeypatch):
    monkeypatch.setenv("RECONF_HOME", "/srv/streams")
    defs = from_yaml(
        """
home: "{{ env.RECONF_HOME }}"
translation:
  ds2_plans: {key: [platform, plans], group_name: platform, owners: ["team:data"], tags: {tier: gold}, kinds: [kafka]}
  stream: {description: "Our orders", metadata: {runbook: "https://runbooks.example/orders"}}
"""
    )
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    plans = specs["platform/plans"]
    assert plans.group_name == "platform" and plans.owners == ["team:data"]
    assert plans.tags["tier"] == "gold" and plans.tags["dagster-reconf/kind"] == "ds2_plans"
    assert {"kafka", "spark"} <= set(plans.kinds)
    assert specs["stream"].description == "Our orders"
    assert specs["stream"].metadata["runbook"] == "https://runbooks.example/orders"
    assert defs.resources["streams"].home == "/srv/streams"


@pytest.mark.parametrize(
    ("attributes", "match"),
    [
        ("traces: {start: '2026-12-01'}\n", r"start"),
        ("policy: {name: ds3}\n", r"'ds2', 'dhalion' or 'dynamic_allocation'"),
        ("traces: {window_minutes: 7}\n", r"window_minutes must divide 60"),
        ("translation: {plans: {group_name: x}}\n", r"no asset kind \['plans'\]"),
        ("sensor: {kind: scaling}\n", r"name them in streams"),
        ("policy: {config: {max_corse: 4}}\n", r"max_corse"),
        ("stream_specs: [{name: o}]\n", r"entrypoint"),
        ("home: '{{ env.RECONF_UNSET_HOME }}'\n", r"home is None: give the runtime home's path"),
        ("stream_spec_files: [/nowhere/orders.json]\n", r"stream_spec_files\[0\]: spec file /nowhere/orders.json not"),
    ],
)
def test_a_bad_attribute_is_named_with_the_fix(attributes, match):
    with pytest.raises(Exception, match=match):
        from_yaml(attributes)


def test_the_scaffolded_defs_yaml_loads_as_written(tmp_path, monkeypatch):
    request = dagster.ScaffoldRequest(
        type_name="dagster_reconf.ReconfStreamsComponent",
        target_path=tmp_path / "streams",
        scaffold_format="yaml",
        project_root=None,
        params=None,
    )
    ReconfStreamsScaffolder().scaffold(request)
    written = (tmp_path / "streams" / "defs.yaml").read_text()
    document = yaml.safe_load(written)
    assert document["type"] == "dagster_reconf.ReconfStreamsComponent" and "# Where the streams live" in written
    monkeypatch.setenv("RECONF_HOME", str(tmp_path / "home"))
    shown = summary(from_yaml(yaml.safe_dump(document["attributes"])))
    assert "streams_sensor" in shown["sensors"] and ("ds2_plans", "scaling") in shown["assets"]
