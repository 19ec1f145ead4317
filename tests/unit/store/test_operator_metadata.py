"""Stateful operators from the checkpoint's metadata files, without Spark: v2 (with a transformWithState operator's
state variables) where Spark wrote it, else v1, else the id alone."""

import json

from dagster_reconf.core.store.checkpoint import operator_metadata, stateful_operators

VARIABLES = [
    {"stateName": "count", "stateVariableType": "ValueState", "ttlEnabled": False},
    {"stateName": "$procTimers_keyToTimestamp", "stateVariableType": "TimerState", "ttlEnabled": False},
]


def write(path, version: str, body: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{version}\n{json.dumps(body)}")


def test_v2_metadata_names_the_operator_and_its_state_variables_and_the_newest_file_wins(tmp_path):
    state = tmp_path / "state"
    info = {"operatorInfo": {"operatorId": 0, "operatorName": "old"}}
    write(state / "0" / "_metadata" / "v2" / "0", "v2", info)
    newest = {
        "operatorInfo": {"operatorId": 0, "operatorName": "transformWithStateInPandasExec"},
        "operatorPropertiesJson": json.dumps({"timeMode": "EventTime", "stateVariables": VARIABLES}),
    }
    write(state / "0" / "_metadata" / "v2" / "12", "v2", newest)
    write(state / "1" / "_metadata" / "metadata", "v1", {"operatorInfo": {"operatorId": 1, "operatorName": "dedupe"}})
    (state / "2").mkdir()  # no metadata at all
    (first, second, third) = operator_metadata(tmp_path)
    assert (first.operator_id, first.name, first.state_variables) == ("0", "transformWithStateInPandasExec", VARIABLES)
    assert (second.name, second.state_variables) == ("dedupe", [])
    assert third.name == "operator"
    assert stateful_operators(tmp_path) == {"0": "transformWithStateInPandasExec", "1": "dedupe", "2": "operator"}


def test_damaged_metadata_falls_back_to_the_older_form(tmp_path):
    operator = tmp_path / "state" / "0" / "_metadata"
    (operator / "v2").mkdir(parents=True)
    (operator / "v2" / "3").write_text("v2\n{not json")
    write(operator / "metadata", "v1", {"operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"}})
    assert stateful_operators(tmp_path) == {"0": "stateStoreSave"}
    assert operator_metadata(tmp_path / "missing") == []
