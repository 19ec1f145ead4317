"""The trigger a definition sets: read from a Spark Connect writer's plan (the JVM writer's path runs in the trigger
zoo, tests/integration/test_trigger_zoo.py), then honoured or refused at start, never replaced."""

import inspect

import pytest

from dagster_reconf.core.errors import StreamStartError
from dagster_reconf.core.spark.user_trigger import UserTrigger, read_trigger, resolve_trigger
from dagster_reconf.core.spec import StreamSpec

SPEC = {"name": "mine", "entrypoint": "my_pkg.streams:counts"}


def _connect_writer():
    from pyspark.sql.connect.streaming.readwriter import DataStreamWriter

    return DataStreamWriter(None, None)  # a plan and a session are only needed to start it


@pytest.mark.parametrize(
    ("trigger", "expected"),
    [
        ({}, UserTrigger("none")),
        ({"processingTime": "0 seconds"}, UserTrigger("none")),
        ({"processingTime": "7 seconds"}, UserTrigger("processing_time", 7.0)),
        ({"processingTime": "1500 milliseconds"}, UserTrigger("processing_time", 1.5)),
        ({"availableNow": True}, UserTrigger("available_now")),
        ({"once": True}, UserTrigger("once")),
        ({"continuous": "2 seconds"}, UserTrigger("continuous", 2.0)),
        ({"realTime": "5 seconds"}, UserTrigger("real_time", 5.0)),
    ],
)
def test_a_spark_connect_writer_carries_its_trigger_in_its_plan(trigger, expected):
    writer = _connect_writer()
    if "realTime" in trigger and "realTime" not in inspect.signature(writer.trigger).parameters:
        pytest.skip("this PySpark has no real-time mode (Spark 4.1+ runs it; the compat venv's may not)")
    if trigger:
        writer = writer.trigger(**trigger)
    assert read_trigger(writer) == expected


def test_no_trigger_leaves_the_spec_as_it_is():
    spec = StreamSpec.parse({**SPEC, "trigger_interval_s": 2})
    assert resolve_trigger(spec, UserTrigger("none"), "my_pkg.streams:counts") is spec


def test_a_processing_time_trigger_is_the_streams_and_the_spec_takes_it():
    spec = StreamSpec.parse(SPEC)
    assert spec.trigger_from == "default"
    honoured = resolve_trigger(spec, UserTrigger("processing_time", 7.0), "my_pkg.streams:counts")
    assert (honoured.trigger_interval_s, honoured.trigger_from) == (7.0, "definition")
    again = resolve_trigger(StreamSpec.parse(honoured.model_dump()), UserTrigger("processing_time", 7.0), "d")
    assert again.trigger_interval_s == 7.0 and again.trigger_from == "definition"  # a restart keeps it
    changed = resolve_trigger(honoured, UserTrigger("processing_time", 10.0), "d")  # the user changed the code
    assert (changed.trigger_interval_s, changed.trigger_from) == (10.0, "definition")
    same = StreamSpec.parse({**SPEC, "trigger_interval_s": 7})  # the spec agrees: nothing to refuse
    assert resolve_trigger(same, UserTrigger("processing_time", 7.0), "d").trigger_interval_s == 7.0


def test_a_spec_that_sets_another_interval_is_refused_naming_both():
    spec = StreamSpec.parse({**SPEC, "trigger_interval_s": 2})
    with pytest.raises(
        StreamStartError,
        match=r"sets trigger\(processingTime='7 seconds'\) and its spec "
        r"trigger_interval_s=2: .*remove trigger_interval_s from the spec",
    ):
        resolve_trigger(spec, UserTrigger("processing_time", 7.0), "my_pkg.streams:counts")
    honoured = resolve_trigger(StreamSpec.parse(SPEC), UserTrigger("processing_time", 7.0), "d")
    replanned = honoured.with_changes({"trigger_interval_s": 14})  # a reconfiguration or `stream restart --set`
    assert replanned.trigger_from == "spec"
    with pytest.raises(StreamStartError, match="trigger_interval_s=14"):
        resolve_trigger(replanned, UserTrigger("processing_time", 7.0), "d")
    assert honoured.with_changes({"state_partitions": 8}).trigger_from == "definition"


@pytest.mark.parametrize(
    ("trigger", "reason"),
    [
        (UserTrigger("available_now"), r"availableNow=True\), a run that stops .* a Dagster job"),
        (UserTrigger("once"), r"once=True\), a run that stops .* a Dagster job"),
        (UserTrigger("real_time", 5.0), r"realTime='5 seconds'\): real-time mode .* each hold a slot"),
        (UserTrigger("continuous", 2.0), r"continuous='2 seconds'\): continuous processing .* without loss"),
    ],
)
def test_triggers_the_control_plane_cannot_manage_are_refused_with_the_reason(trigger, reason):
    with pytest.raises(StreamStartError, match=reason):
        resolve_trigger(StreamSpec.parse(SPEC), trigger, "my_pkg.streams:counts")
