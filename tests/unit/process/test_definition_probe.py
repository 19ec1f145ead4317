"""The definition is imported in a bounded child process: a module that loops, exits or raises at import is an error
naming it, and the caller goes on."""

import os
import time

import pytest

from dagster_reconf.core.errors import SpecError, StreamStartError
from dagster_reconf.core.process.definition_probe import probe_definition
from dagster_reconf.core.process.driver_start import driver_environment
from dagster_reconf.core.spec import StreamSpec


def spec(entrypoint: str) -> StreamSpec:
    return StreamSpec(name="s", entrypoint=entrypoint, options={"output_dir": "/tmp/out"})


def env(entrypoint: str) -> dict[str, str]:
    return {**driver_environment(spec(entrypoint)), "PYTHONPATH": os.getcwd()}


def test_a_module_that_loops_at_import_is_stopped_within_the_timeout():
    started = time.monotonic()
    with pytest.raises(StreamStartError, match=r"did not finish within 3 s .* loop"):
        probe_definition(spec("tests.user_streams.loops_at_import:f"), env("x:y"), timeout_s=3)
    assert time.monotonic() - started < 10


def test_a_module_that_exits_at_import_is_an_error_naming_it():
    with pytest.raises(
        StreamStartError, match=r"importing 'tests.user_streams.exits_at_import' raised SystemExit\(0\)"
    ):
        probe_definition(spec("tests.user_streams.exits_at_import:f"), env("x:y"), timeout_s=30)


def test_a_good_definition_answers_with_its_frozen_options_and_a_bad_spec_is_named():
    assert probe_definition(spec("tests.user_streams.rates:values"), env("x:y"), timeout_s=60) == frozenset()
    with pytest.raises(SpecError, match="has no attribute 'nope'"):
        probe_definition(spec("tests.user_streams.rates:nope"), env("x:y"), timeout_s=60)
    bad_options = StreamSpec(name="s", entrypoint="tests.user_streams.rates:values")
    with pytest.raises(SpecError, match="options.output_dir: Field required"):
        probe_definition(bad_options, env("x:y"), timeout_s=60)
