"""Execution plans: validation errors that name the bad value, and a diff that lists exactly what changes."""

import pytest

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.reconfig import ExecutionPlan, diff_plans
from dagster_reconf.core.spec import StreamSpec

SPEC = StreamSpec(name="orders", entrypoint="my_pkg.streams:orders", state_partitions=4, source_partitions=2)
STATEFUL = ("0 (stateStoreSave)",)


def target(**changes) -> ExecutionPlan:
    plan = ExecutionPlan.of(SPEC).model_dump()
    for dotted, value in changes.items():
        section, knob = dotted.split("__")
        plan[section][knob] = value
    return ExecutionPlan.parse(plan)


def test_a_plan_round_trips_through_json_and_back_to_the_spec():
    plan = ExecutionPlan.of(SPEC)
    assert ExecutionPlan.parse(plan.model_dump_json()) == plan
    assert plan.apply_to(SPEC) == SPEC
    assert plan.plan_hash == ExecutionPlan.parse(plan.model_dump()).plan_hash
    assert target(partitioning__state_partitions=8).plan_hash != plan.plan_hash


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"partitioning__state_partitions": 0}, "state partitions must be between 1 and 10000, got 0"),
        ({"partitioning__state_partitions": {}}, "name at least one operator, or give one count for all"),
        ({"partitioning__source_partitions": 0}, "partitioning.source_partitions"),
        ({"resources__master": "local[zero]"}, "local[zero]"),
        ({"resources__executor_memory": "lots"}, "resources.executor_memory"),
        ({"partitioning__shuffle_partitions": 8}, "pins spark.sql.shuffle.partitions"),
    ],
)
def test_bad_plans_name_the_field_and_value(change, message):
    with pytest.raises(SpecError, match="invalid execution plan") as error:
        target(**change)
    assert message in str(error.value)


def test_a_validator_that_names_the_value_is_not_repeated():
    with pytest.raises(SpecError) as error:
        target(partitioning__state_partitions=-3)
    assert str(error.value).endswith("state partitions must be between 1 and 10000, got -3")


def test_not_json_and_not_an_object_are_refused_clearly():
    with pytest.raises(SpecError, match="execution plan is not JSON"):
        ExecutionPlan.parse("{nope")
    with pytest.raises(SpecError, match="must be a JSON object, got list"):
        ExecutionPlan.parse("[]")


def test_operators_must_share_one_state_partition_count():
    assert target(partitioning__state_partitions={"0": 6}).partitioning.state_partition_count == 6
    with pytest.raises(SpecError, match="repartitions every stateful operator of a query together"):
        target(partitioning__state_partitions={"0": 6, "1": 8}).partitioning.state_partition_count


def test_an_unchanged_plan_has_no_actions():
    diff = diff_plans(ExecutionPlan.of(SPEC), ExecutionPlan.of(SPEC), SPEC)
    assert diff.empty and not diff.needs_pause and diff.effect == "none" and diff.settings_changes() == {}


def test_each_knob_costs_what_it_should_and_nothing_else_is_listed():
    current = ExecutionPlan.of(SPEC)
    cases = {
        "partitioning__source_partitions": (4, "query_restart"),
        "partitioning__trigger_interval_s": (2.0, "query_restart"),
        "resources__master": ("local[1]", "session_restart"),
        "partitioning__state_partitions": (8, "state_migration"),
        "logic__code_version": ("2", "query_restart"),
    }
    for dotted, (value, effect) in cases.items():
        diff = diff_plans(current, target(**{dotted: value}), SPEC, stateful_operators=("0 (stateStoreSave)",))
        knob = dotted.split("__")[1]
        assert [(a.knob, a.after, a.effect) for a in diff.actions] == [(knob, value, effect)], dotted
        assert diff.actions[0].operators == (("0 (stateStoreSave)",) if effect == "state_migration" else ())


def test_the_costliest_effect_wins_and_changes_are_collected():
    diff = diff_plans(
        ExecutionPlan.of(SPEC),
        target(partitioning__state_partitions=8, resources__master="local[1]", partitioning__source_partitions=3),
        SPEC,
        STATEFUL,
    )
    assert diff.effect == "state_migration" and diff.needs_migration and diff.needs_new_session
    assert diff.settings_changes() == {"master": "local[1]", "state_partitions": 8, "source_partitions": 3}


def test_state_partitions_of_a_stateless_stream_need_no_migration():
    """Whether a stream keeps state is what its checkpoint says: no stateful operators, no migration."""
    diff = diff_plans(ExecutionPlan.of(SPEC), target(partitioning__state_partitions=8), SPEC, stateful_operators=())
    assert not diff.needs_migration and diff.effect == "query_restart"


def test_a_plan_for_another_stream_is_refused():
    other = ExecutionPlan.of(SPEC.with_changes({"name": "other"}))
    with pytest.raises(SpecError, match="plans are for different streams: 'orders' and 'other'"):
        diff_plans(ExecutionPlan.of(SPEC), other, SPEC)


def test_a_stream_without_a_source_partitions_knob_plans_none():
    files = SPEC.with_changes({"source_partitions": None, "max_per_trigger": 3})
    plan = ExecutionPlan.of(files)
    assert plan.partitioning.source_partitions is None and plan.apply_to(files) == files


def test_cores_within_a_ceiling_resize_executors_and_a_plan_beyond_it_names_the_fix():
    spec = SPEC.with_changes(
        {"master": "spark://10.0.0.5:7077", "executor_cores": 1, "max_cores": 2, "cores_ceiling": 4}
    )
    current = ExecutionPlan.of(spec)
    plan = current.model_dump()
    plan["resources"]["max_cores"] = 4
    diff = diff_plans(current, ExecutionPlan.parse(plan), spec, STATEFUL)
    assert [(a.knob, a.effect) for a in diff.actions] == [
        ("max_cores", "executor_resize")
    ] and not diff.needs_new_session
    plan["resources"]["max_cores"] = 6
    with pytest.raises(SpecError, match="max_cores 6 is above cores_ceiling 4: raise cores_ceiling"):
        diff_plans(current, ExecutionPlan.parse(plan), spec, STATEFUL)
    plan["resources"]["cores_ceiling"] = 6
    diff = diff_plans(current, ExecutionPlan.parse(plan), spec, STATEFUL)
    assert diff.effect == "session_restart" and diff.settings_changes() == {"max_cores": 6, "cores_ceiling": 6}
