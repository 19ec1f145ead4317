"""Typed run config: plans round-trip through the Config classes, Dagster checks enums and types, the core checks
ranges."""

import dagster
import pytest

from dagster_reconf import AuditLedgerResource, ExecutionPlan, SpecError, StreamRuntimeResource, build_scaling_assets
from dagster_reconf.core.scaling.scaling_plan import Knobs, OperatorScaling, ScalingPlan
from dagster_reconf.dagster.run_config import ExecutionPlanConfig, ReconfigureConfig, ScalingPlanConfig, Strategy


def _scaling_plan() -> ScalingPlan:
    knobs = Knobs(cores=2, source_partitions=2, state_partitions=4, trigger_interval_s=1.0, max_per_trigger=None)
    return ScalingPlan(
        stream="orders",
        policy="ds2",
        current=knobs,
        target=knobs.model_copy(update={"cores": 4}),
        reason="behind",
        report=[
            OperatorScaling(
                operator="j0.d0:scan",
                kind="source",
                parallelism_now=2,
                parallelism_planned=4,
                ds2_parallelism=3,
                target_records_per_s=1000.0,
                capacity_now_events_per_s=810.5,
                capacity_planned_events_per_s=float("inf"),  # no measured cost: unbounded, carried as null
                selectivity=float("nan"),
            )
        ],
        predicted={"target_rate": 1000.0},
    )


def _execution_plan(state_partitions) -> ExecutionPlan:
    return ExecutionPlan.parse(
        {
            "stream": "orders",
            "resources": {"master": "local[2]"},
            "partitioning": {"state_partitions": state_partitions, "trigger_interval_s": 2.0},
        }
    )


def _job():
    scaling = build_scaling_assets(streams=["orders"])
    defs = dagster.Definitions(
        assets=[scaling.plans, scaling.configuration],
        jobs=[scaling.job],
        resources={"streams": StreamRuntimeResource(), "audit_ledger": AuditLedgerResource()},
    )
    return defs.resolve_job_def(scaling.job.name)


def test_plans_round_trip_through_the_typed_config():
    plan = _scaling_plan()
    assert ScalingPlanConfig.of(plan).to_plan() == plan
    for state in (6, {"0": 6}):
        execution = _execution_plan(state)
        assert ExecutionPlanConfig.of(execution).to_plan("orders") == execution


def test_the_core_refuses_what_the_types_allow():
    same = ScalingPlanConfig.of(_scaling_plan()).model_copy(
        update={"target": ScalingPlanConfig.of(_scaling_plan()).current}
    )
    with pytest.raises(SpecError, match="target equals current"):
        same.to_plan()
    both = ExecutionPlanConfig.of(_execution_plan(6)).model_copy(update={"state_partitions_by_operator": {"0": 6}})
    with pytest.raises(SpecError, match="exactly one of state_partitions"):
        both.to_plan("orders")
    with pytest.raises(SpecError, match="state partitions must be between 1 and 10000, got 0"):
        ExecutionPlanConfig.of(_execution_plan(6)).model_copy(update={"state_partitions": 0}).to_plan("orders")


def test_dagster_checks_the_run_config_before_a_run():
    with dagster.instance_for_test():  # resolving a job reads Dagster's global state storage: give it a live instance
        _check_run_configs(_job())


def _check_run_configs(job):
    plan = ExecutionPlanConfig.of(_execution_plan(6))
    good = ReconfigureConfig(plan=plan, strategy=Strategy.replay).run_config()
    assert good["ops"]["stream_configuration"]["ops"]["preflight"]["config"]["strategy"] == "replay"
    dagster.validate_run_config(job, good)
    sensor_config = {
        "ops": {"ds2_plans": {"config": {"plan": ScalingPlanConfig.of(_scaling_plan()).model_dump(mode="json")}}}
    }
    dagster.validate_run_config(job, sensor_config)  # an unbounded capacity is a null, not a null map member
    assert sensor_config["ops"]["ds2_plans"]["config"]["plan"]["report"][0]["capacity_planned_events_per_s"] is None

    bad_strategy = ReconfigureConfig(plan=plan).run_config()
    bad_strategy["ops"]["stream_configuration"]["ops"]["preflight"]["config"]["strategy"] = "teleport"
    with pytest.raises(dagster.DagsterInvalidConfigError, match="strategy not in enum type Strategy got teleport"):
        dagster.validate_run_config(job, bad_strategy)
    sensor_config["ops"]["ds2_plans"]["config"]["plan"]["target"]["cores"] = "four"
    with pytest.raises(dagster.DagsterInvalidConfigError, match="cores"):
        dagster.validate_run_config(job, sensor_config)
