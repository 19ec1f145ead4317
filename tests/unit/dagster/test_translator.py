"""Two sets of streams in one Definitions: every key, job, op, schedule and sensor name comes from the translator."""

import dataclasses

import dagster
import pytest
from dagster_pyspark import PySparkResource

from dagster_reconf import (
    AssetKind,
    AuditLedgerResource,
    ExecutionPlan,
    ExecutionPlanConfig,
    PolicyConfig,
    ReconfigureConfig,
    ReconfTranslator,
    SpecError,
    StreamRuntimeResource,
    build_reconfiguration_failure_sensor,
    build_scaling_assets,
    build_scaling_sensor,
    build_stream_state_asset,
    build_streams_sensor,
    build_trace_assets,
)


def _location(translator, streams):
    traces = build_trace_assets(streams=streams, window_minutes=5, translator=translator)
    scaling = build_scaling_assets(streams=streams, translator=translator)
    return (
        traces,
        scaling,
        [
            build_streams_sensor(scaling=scaling, traces=traces),
            build_scaling_sensor(stream="orders", scaling=scaling, traces=traces),
            build_reconfiguration_failure_sensor(job=scaling.job),
        ],
    )


def test_two_translators_share_a_code_location():
    plain_traces, plain_scaling, plain_sensors = _location(None, ["orders", "clicks"])
    team_traces, team_scaling, team_sensors = _location(ReconfTranslator(prefix="team_a"), None)
    defs = dagster.Definitions(
        assets=[*plain_traces.assets, *plain_scaling.assets, *team_traces.assets, *team_scaling.assets],
        jobs=[plain_traces.job, plain_scaling.job, team_traces.job, team_scaling.job],
        schedules=[plain_traces.schedule, team_traces.schedule],
        sensors=[*plain_sensors, *team_sensors],
        resources={"streams": StreamRuntimeResource(), "audit_ledger": AuditLedgerResource()},
    )
    with dagster.instance_for_test():  # loading reads Dagster's global state storage: give it a live instance
        dagster.Definitions.validate_loadable(defs)
        _check_names(defs, team_scaling, team_traces)


def _check_names(defs, team_scaling, team_traces):
    graph = defs.resolve_asset_graph()
    team = {key.to_user_string() for key in graph.get_all_asset_keys() if key.path[0] == "team_a"}
    assert team == {
        "team_a/stream",
        "team_a/trace_snapshots",
        "team_a/cp_summaries",
        "team_a/ds2_plans",
        "team_a/stream_configuration",
    }
    assert {key.to_user_string() for key in graph.get(dagster.AssetKey(["team_a", "ds2_plans"])).parent_keys} == {
        "team_a/trace_snapshots",
        "team_a/cp_summaries",
    }
    assert graph.get(dagster.AssetKey(["team_a", "trace_snapshots"])).parent_keys == {
        dagster.AssetKey(["team_a", "stream"])
    }
    assert graph.get(dagster.AssetKey("trace_snapshots")).parent_keys == {dagster.AssetKey("stream")}
    assert {s.name for s in defs.sensors} == {
        "streams_sensor",
        "orders_scaling_sensor",
        "reconfiguration_failure_sensor",
        "team_a_streams_sensor",
        "team_a_orders_scaling_sensor",
        "team_a_reconfiguration_failure_sensor",
    }
    assert (
        team_scaling.job.name == "team_a_reconfigure_stream_job"
        and team_traces.schedule.name == "team_a_latest_trace_windows_schedule"
    )
    assert isinstance(team_scaling.partitions_def, dagster.DynamicPartitionsDefinition)
    assert team_scaling.partitions_def.name == "team_a_streams"

    # The launchpad's paths follow the names: a plan given to the prefixed job validates there.
    plan = ExecutionPlanConfig.of(
        ExecutionPlan.parse(
            {
                "stream": "orders",
                "resources": {"master": "local[2]"},
                "partitioning": {"state_partitions": 4, "trigger_interval_s": 1},
            }
        )
    )
    config = ReconfigureConfig(plan=plan).run_config(team_scaling.translator)
    assert list(config["ops"]) == ["team_a__stream_configuration"]
    dagster.validate_run_config(defs.resolve_job_def(team_scaling.job.name), config)


@pytest.mark.parametrize(
    ("prefix", "streams", "match"),
    [
        ("Team A", None, "translator prefix 'Team A' must be lowercase"),
        ("", [], "streams must name at least one stream, or be None"),
        ("", ["a", "a"], "streams must be distinct non-empty names"),
    ],
)
def test_bad_names_are_refused(prefix, streams, match):
    with pytest.raises(ValueError, match=match):
        build_scaling_assets(streams=streams, translator=ReconfTranslator(prefix=prefix))


def test_a_sensor_over_static_and_dynamic_streams_is_refused():
    traces = build_trace_assets(streams=["orders"])
    with pytest.raises(ValueError, match="both name their streams or both use dynamic partitions"):
        build_streams_sensor(scaling=build_scaling_assets(), traces=traces)


@dataclasses.dataclass(frozen=True)
class _PlansElsewhere(ReconfTranslator):
    """Moves one asset: the plans, under the platform's own key and group."""

    def get_asset_spec(self, kind: AssetKind) -> dagster.AssetSpec:
        spec = super().get_asset_spec(kind)
        if kind is AssetKind.DS2_PLANS:
            return dagster.AssetSpec(key=dagster.AssetKey(["platform", "plans"]), group_name="platform")
        return spec


def test_get_asset_spec_overrides_one_asset_and_every_reference_follows():
    translator = _PlansElsewhere()
    traces, scaling, sensors = _location(translator, ["orders"])
    defs = dagster.Definitions(
        assets=[*traces.assets, *scaling.assets],
        jobs=[traces.job, scaling.job],
        sensors=sensors,
        resources={"streams": StreamRuntimeResource(), "audit_ledger": AuditLedgerResource()},
    )
    with dagster.instance_for_test():
        dagster.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    plans = dagster.AssetKey(["platform", "plans"])
    assert plans in graph.get_all_asset_keys() and dagster.AssetKey("ds2_plans") not in graph.get_all_asset_keys()
    assert plans in graph.get(dagster.AssetKey("stream_configuration")).parent_keys
    assert translator.asset_key("ds2_plans") == plans and translator.node_name(AssetKind.DS2_PLANS) == "platform__plans"


def test_asset_key_names_the_kinds_when_the_name_is_unknown():
    with pytest.raises(ValueError, match=r"no dagster-reconf asset is called 'ds2_plan'; use one of \[.*'ds2_plans'"):
        ReconfTranslator().asset_key("ds2_plan")


def test_scaling_assets_take_a_policy_config_or_its_fields():
    typed = build_scaling_assets(streams=["orders"], policy_config=PolicyConfig(max_cores=6, utilization_target=0.6))
    as_dict = build_scaling_assets(streams=["orders"], policy_config={"max_cores": 6, "utilization_target": 0.6})
    assert typed.policy_config == as_dict.policy_config == PolicyConfig(max_cores=6, utilization_target=0.6)
    with pytest.raises(SpecError, match=r"invalid policy config: max_cores: .*got 0"):
        build_scaling_assets(streams=["orders"], policy_config={"max_cores": 0})


@dataclasses.dataclass(frozen=True)
class _Overriding(ReconfTranslator):
    """Sets every attribute a spec carries, for every asset kind."""

    def get_asset_spec(self, kind: AssetKind) -> dagster.AssetSpec:
        spec = super().get_asset_spec(kind)
        return spec.replace_attributes(
            key=["platform", kind.value],
            group_name=f"g_{kind.value}",
            description=f"ours: {kind.value}",
            owners=["team:streaming"],
            tags={**spec.tags, "tier": "gold"},
            metadata={"runbook": f"https://runbooks.example/{kind.value}"},
            code_version="v7",
            automation_condition=dagster.AutomationCondition.on_cron("0 * * * *"),
        ).merge_attributes(kinds={"kafka"})


def test_whatever_the_translator_returns_reaches_every_asset_whole():
    translator = _Overriding()
    traces = build_trace_assets(streams=["orders"], window_minutes=5, translator=translator)
    scaling = build_scaling_assets(streams=["orders"], translator=translator)
    defs = dagster.Definitions(
        assets=[*traces.assets, *scaling.assets, build_stream_state_asset(streams=["orders"], translator=translator)],
        jobs=[traces.job, scaling.job],
        resources={
            "streams": StreamRuntimeResource(),
            "audit_ledger": AuditLedgerResource(),
            "pyspark": PySparkResource(spark_config={}),
        },
    )
    with dagster.instance_for_test():
        dagster.Definitions.validate_loadable(defs)
    specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
    built = [AssetKind.STREAM, AssetKind.TRACE_SNAPSHOTS, AssetKind.CP_SUMMARIES, AssetKind.DS2_PLANS]
    built.append(AssetKind.STREAM_STATE)
    for kind in [*built, AssetKind.STREAM_CONFIGURATION]:
        spec = specs[dagster.AssetKey(["platform", kind.value])]
        assert spec.group_name == f"g_{kind.value}" and spec.description == f"ours: {kind.value}", kind
        assert spec.owners == ["team:streaming"] and spec.tags["tier"] == "gold", kind
        assert spec.tags["dagster-reconf/kind"] == kind.value and "kafka" in spec.kinds, kind
        assert spec.metadata["runbook"] == f"https://runbooks.example/{kind.value}", kind
        assert spec.code_version == "v7" or kind is AssetKind.STREAM_CONFIGURATION, kind
        assert spec.automation_condition is not None, kind
    # every reference follows the spec: the dependencies of the renamed assets
    plans = specs[dagster.AssetKey(["platform", "ds2_plans"])]
    assert {dep.asset_key for dep in plans.deps} == {
        dagster.AssetKey(["platform", "trace_snapshots"]),
        dagster.AssetKey(["platform", "cp_summaries"]),
    }
    state = specs[dagster.AssetKey(["platform", "stream_state"])]
    assert {dep.asset_key for dep in state.deps} == {dagster.AssetKey(["platform", "stream"])}


def test_the_default_specs_say_what_each_asset_is():
    for kind in AssetKind:
        spec = ReconfTranslator().get_asset_spec(kind)
        assert spec.description and spec.kinds and spec.tags["dagster-reconf/kind"] == kind.value, kind
