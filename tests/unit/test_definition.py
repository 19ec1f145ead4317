"""Stream definitions: loading by import path, validating options, code versions and knob mappings, with errors
that name the bad value and the fix (no Spark: user modules are imported but nothing runs)."""

from pathlib import Path

import pytest

from dagster_reconf import StreamDefinition, StreamOutput, stream_definition
from dagster_reconf.core.definition import check_entrypoint, entrypoint_root, load_definition
from dagster_reconf.core.errors import SpecError, StreamStartError
from dagster_reconf.core.spec import StreamSpec, validate_spec

BROKEN = "tests.user_streams.broken"


@pytest.mark.parametrize(
    ("entrypoint", "error", "match"),
    [
        ("tests.user_streams.broken", SpecError, r"is not an import path; use 'package.module:function'"),
        ("no_such_package.streams:orders", SpecError, r"no module 'no_such_package.streams' on the import path"),
        (f"{BROKEN}:missing", SpecError, r"has no attribute 'missing'; stream definitions there: with_options"),
        (f"{BROKEN}:NOT_A_FUNCTION", SpecError, r"is a int, not a stream definition"),
        (f"{BROKEN}:one_argument", SpecError, r"takes \(spark, context\); 'one_argument' has signature \(spark\)"),
        (
            "tests.user_streams.bad_import:anything",
            SpecError,
            r"importing 'tests.user_streams.bad_import' failed: No module named",
        ),
    ],
)
def test_bad_entrypoints_name_the_problem(entrypoint, error, match):
    with pytest.raises(error, match=match):
        load_definition(entrypoint)


def test_a_module_that_raises_on_import_is_a_start_error(tmp_path, monkeypatch):
    (tmp_path / "exploding.py").write_text("raise ValueError('no credentials in the environment')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        StreamStartError, match=r"importing 'exploding' raised ValueError: no credentials in the environment"
    ):
        load_definition("exploding:orders")


def test_check_entrypoint_does_not_import(tmp_path, monkeypatch):
    (tmp_path / "side_effect.py").write_text("raise SystemExit('imported!')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    check_entrypoint("side_effect:orders")  # found, not run
    assert entrypoint_root("side_effect:orders") == tmp_path
    assert entrypoint_root(f"{BROKEN}:with_options") == Path(__file__).resolve().parents[2]  # where package tests/ is


def test_a_plain_function_is_a_definition_with_defaults():
    definition = load_definition(f"{BROKEN}:raises")
    assert isinstance(definition, StreamDefinition) and definition.options_model is None
    assert definition.name == f"{BROKEN}:raises" and definition.code_versions is None
    assert definition.parse_options({"anything": 1}) == {"anything": 1}


def spec(**fields):
    return StreamSpec.parse({"name": "s", "entrypoint": f"{BROKEN}:with_options", "options": {"path": "/in"}, **fields})


def test_options_are_validated_by_the_definition():
    assert validate_spec(spec()).name == f"{BROKEN}:with_options"
    with pytest.raises(SpecError, match=r"options.path: Field required \(missing\)"):
        validate_spec(spec(options={}))
    with pytest.raises(
        SpecError, match=r"options.rows_per_second: Input should be greater than or equal to 1 \(got 0\)"
    ):
        validate_spec(spec(options={"path": "/in", "rows_per_second": 0}))
    with pytest.raises(
        SpecError, match=r"unknown option\(s\) \['rows_per_secnd'\] .*its options: path, rows_per_second"
    ):
        validate_spec(spec(options={"path": "/in", "rows_per_secnd": 5}))


def test_code_versions_are_the_definitions():
    validate_spec(spec(code_version="2"))
    with pytest.raises(SpecError, match=r"has no code version '3'; versions: 1, 2"):
        validate_spec(spec(code_version="3"))


def test_a_knob_needs_a_source_option_to_set():
    with pytest.raises(
        SpecError,
        match=r"source_partitions=4 is set, but stream definition .* maps no source option to "
        r"it; set knob_options=\{'source_partitions': '<the source option>'\}.*minPartitions",
    ):
        validate_spec(spec(source_partitions=4))
    validate_spec(spec(source_partitions=4, knob_options={"source_partitions": "numPartitions"}))


def test_knob_options_name_known_knobs_only():
    with pytest.raises(SpecError, match=r"knob_options names unknown knob\(s\) \['cores'\]"):
        stream_definition(lambda spark, ctx: None, knob_options={"cores": "x"})


def test_stream_output_needs_one_sink():
    with pytest.raises(SpecError, match="exactly one of format"):
        StreamOutput(frame=None).writer()  # type: ignore[arg-type]
