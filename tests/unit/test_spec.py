import pytest

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.spec import RestartScope, StreamSpec, restart_scope, validate_master


def spec(**kw):
    return StreamSpec.parse({"name": "s1", "query": "q5", **kw})


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"query": "q99"}, r"query: unknown query 'q99'; bundled queries: q1, q2, q3, q5, q8, q11, wordcount"),
        ({"rate": -1}, r"rate: Input should be greater than 0 \(got -1\)"),
        ({"master": "spark:/oops"}, r"master 'spark:/oops' is not a Spark master URL; use local\[N\]"),
        ({"name": "Bad Name"}, r"name: String should match pattern"),
        ({"state_partitions": 0}, r"state_partitions: Input should be greater than or equal to 1 \(got 0\)"),
        ({"spark_conf": {"spark.sql.shuffle.partitions": "8"}}, r"use the spec fields master/state_partitions"),
        ({"colour": "red"}, r"colour: Extra inputs are not permitted"),
    ],
)
def test_bad_spec_names_field_value_and_fix(fields, match):
    with pytest.raises(SpecError, match=match):
        spec(**fields)


def test_missing_query_is_reported():
    with pytest.raises(SpecError, match=r"query: Field required \(missing\)"):
        StreamSpec.parse({"name": "s1"})


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,2]", "spark://127.0.0.1:7077", "k8s://https://k:6443", "yarn"])
def test_valid_masters(master):
    assert validate_master(master) == master


@pytest.mark.parametrize(
    "changes,scope",
    [
        ({}, RestartScope.NONE),
        ({"rate": 5000}, RestartScope.QUERY),
        ({"source_partitions": 4, "trigger_interval_s": 2}, RestartScope.QUERY),
        ({"cost": {"mode": "sleep", "micros_per_record": 10}}, RestartScope.QUERY),
        ({"master": "local[1]"}, RestartScope.SESSION),
        ({"spark_conf": {"spark.executor.memory": "2g"}}, RestartScope.SESSION),
        ({"state_partitions": 8}, RestartScope.STATE),
    ],
)
def test_restart_scope(changes, scope):
    old = spec()
    assert restart_scope(old, old.with_changes(changes)) is scope


def test_state_partitions_of_stateless_query_only_restart():
    old = StreamSpec(name="s", query="q1")
    assert restart_scope(old, old.with_changes({"state_partitions": 8})) is RestartScope.QUERY


@pytest.mark.parametrize("field,value", [("seed", 1), ("query", "q8"), ("max_events", 10), ("vocabulary", 5)])
def test_data_fields_cannot_change_in_place(field, value):
    old = spec()
    with pytest.raises(SpecError, match=rf"\['{field}'\] define the stream's data"):
        restart_scope(old, old.with_changes({field: value}))


def test_data_options_carry_only_what_defines_the_events():
    s = spec(seed=7, rate=5000, event_time_rate=50, max_events=100, max_events_per_trigger=10)
    options = s.data_options()
    assert (options.seed, options.event_time_rate, options.max_events) == (7, 50, 100)
    assert options.max_events_per_trigger is None and options.gate_file is None
    assert s.data_options(max_events=40).max_events == 40
