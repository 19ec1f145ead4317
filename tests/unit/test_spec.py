import pytest

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.spec import RestartScope, StreamSpec, restart_scope, validate_master

ENTRYPOINT = "my_pkg.streams:orders"


def spec(**kw):
    return StreamSpec.parse({"name": "s1", "entrypoint": ENTRYPOINT, **kw})


@pytest.mark.parametrize(
    "fields,match",
    [
        (
            {"entrypoint": "my_pkg.streams"},
            r"entrypoint: entrypoint 'my_pkg.streams' is not an import path; use 'package.module:function'",
        ),
        ({"entrypoint": "my-pkg:x"}, r"is not an import path"),
        ({"master": "spark:/oops"}, r"master 'spark:/oops' is not a Spark master URL; use local\[N\]"),
        ({"name": "Bad Name"}, r"name: String should match pattern"),
        ({"state_partitions": 0}, r"state_partitions: Input should be greater than or equal to 1 \(got 0\)"),
        ({"spark_conf": {"spark.sql.shuffle.partitions": "8"}}, r"use the spec fields master, state_partitions"),
        ({"spark_conf": {"spark.driver.host": "10.0.0.1"}}, r"driver_host and driver_bind_address"),
        ({"knob_options": {"cores": "x"}}, r"unknown knob\(s\) \['cores'\]; knobs that map onto source options"),
        ({"driver_host": "a b"}, r"driver_host: String should match pattern"),
        ({"colour": "red"}, r"colour: Extra inputs are not permitted"),
    ],
)
def test_bad_spec_names_field_value_and_fix(fields, match):
    with pytest.raises(SpecError, match=match):
        spec(**fields)


def test_missing_entrypoint_is_reported():
    with pytest.raises(SpecError, match=r"entrypoint: Field required \(missing\)"):
        StreamSpec.parse({"name": "s1"})


@pytest.mark.parametrize(
    "master", ["local", "local[2]", "local[*]", "local[4,2]", "spark://127.0.0.1:7077", "k8s://https://k:6443", "yarn"]
)
def test_valid_masters(master):
    assert validate_master(master) == master


def test_addresses_default_to_loopback():
    s = spec()
    assert (s.driver_host, s.driver_bind_address, s.control_bind_address) == ("127.0.0.1",) * 3


@pytest.mark.parametrize(
    "changes,scope",
    [
        ({}, RestartScope.NONE),
        ({"options": {"rate": 5000}}, RestartScope.QUERY),
        ({"options.rate": 5000}, RestartScope.QUERY),
        ({"source_partitions": 4, "trigger_interval_s": 2}, RestartScope.QUERY),
        ({"code_version": "2"}, RestartScope.QUERY),
        ({"master": "local[1]"}, RestartScope.SESSION),
        ({"driver_host": "10.0.0.7"}, RestartScope.SESSION),
        ({"spark_conf": {"spark.executor.memory": "2g"}}, RestartScope.SESSION),
        ({"state_partitions": 8}, RestartScope.STATE),
    ],
)
def test_restart_scope(changes, scope):
    old = spec(options={"rate": 1000, "seed": 1})
    assert restart_scope(old, old.with_changes(changes)) is scope


def test_options_merge_key_by_key():
    old = spec(options={"rate": 1000, "seed": 1})
    assert old.with_changes({"options": {"rate": 5}}).options == {"rate": 5, "seed": 1}
    assert old.with_changes({"options.seed": 2}).options == {"rate": 1000, "seed": 2}


def test_state_partitions_of_a_stateless_stream_only_restart():
    old = spec()
    assert restart_scope(old, old.with_changes({"state_partitions": 8}), stateful=False) is RestartScope.QUERY


@pytest.mark.parametrize("field,value", [("entrypoint", "other.mod:fn"), ("storage", "file:///elsewhere")])
def test_identity_fields_cannot_change_in_place(field, value):
    old = spec()
    with pytest.raises(SpecError, match=rf"\['{field}'\] cannot change in place: they define the stream's identity"):
        restart_scope(old, old.with_changes({field: value}))


def test_the_control_address_changes_with_a_new_driver():
    old = spec()
    with pytest.raises(SpecError, match="stop the stream and start it again with the new control endpoint settings"):
        restart_scope(old, old.with_changes({"control_bind_address": "0.0.0.0"}))


def test_driver_jvm_settings_change_with_a_new_driver_only():
    # A new SparkContext in the running driver would keep the JVM's heap and options: refused, not silently ignored.
    old = spec(spark_conf={"spark.driver.memory": "1g", "spark.sql.session.timeZone": "UTC"})
    with pytest.raises(
        SpecError,
        match=r"spark_conf \['spark.driver.memory'\] take effect only when the driver's JVM "
        r"launches.*stop the stream \(`reconf stream stop s1`\) and start it again",
    ):
        restart_scope(old, old.with_changes({"spark_conf": {**old.spark_conf, "spark.driver.memory": "4g"}}))
    with pytest.raises(SpecError, match=r"\['spark.driver.extraJavaOptions'\]"):
        restart_scope(
            old, old.with_changes({"spark_conf": {**old.spark_conf, "spark.driver.extraJavaOptions": "-Xss8m"}})
        )
    other = old.with_changes({"spark_conf": {**old.spark_conf, "spark.sql.session.timeZone": "Europe/Paris"}})
    assert restart_scope(old, other) is RestartScope.SESSION  # a setting a new SparkContext reads


def test_frozen_options_define_the_data():
    old = spec(options={"seed": 1, "rate": 10})
    with pytest.raises(SpecError, match=r"options \['seed'\] define the stream's data"):
        restart_scope(old, old.with_changes({"options.seed": 2}), frozen_options={"seed"})
    assert restart_scope(old, old.with_changes({"options.rate": 20}), frozen_options={"seed"}) is RestartScope.QUERY


CLUSTER = {"master": "spark://10.0.0.5:7077", "executor_cores": 2, "max_cores": 4, "cores_ceiling": 8}


@pytest.mark.parametrize(
    "fields,match",
    [
        (
            {**CLUSTER, "master": "local[4]"},
            r"cores_ceiling is for standalone masters \(spark://HOST:PORT\), not 'local\[4\]'",
        ),
        ({**CLUSTER, "executor_cores": None}, r"cores_ceiling needs executor_cores and max_cores"),
        ({**CLUSTER, "max_cores": 10}, r"max_cores 10 is above cores_ceiling 8: raise cores_ceiling"),
        (
            {**CLUSTER, "max_cores": 3},
            r"max_cores 3 is not a whole number of executors of executor_cores 2: use a multiple of 2",
        ),
    ],
)
def test_a_cores_ceiling_must_fit_the_cluster_settings(fields, match):
    with pytest.raises(SpecError, match=match):
        spec(**fields)


@pytest.mark.parametrize(
    "changes,scope",
    [
        ({"max_cores": 8}, RestartScope.EXECUTORS),
        ({"max_cores": 2, "trigger_interval_s": 2}, RestartScope.EXECUTORS),
        ({"max_cores": 8, "executor_memory": "2g"}, RestartScope.SESSION),
        ({"max_cores": 10, "cores_ceiling": 10}, RestartScope.SESSION),
        ({"max_cores": 8, "state_partitions": 8}, RestartScope.STATE),
    ],
)
def test_cores_within_the_ceiling_resize_executors_in_the_same_context(changes, scope):
    old = spec(**CLUSTER)
    assert old.executors == 2 and spec().executors is None
    assert restart_scope(old, old.with_changes(changes)) is scope
    assert (
        restart_scope(
            spec(**{**CLUSTER, "cores_ceiling": None}), spec(**{**CLUSTER, "cores_ceiling": None, "max_cores": 8})
        )
        is RestartScope.SESSION
    )
