import subprocess
import sys

import pytest
from pyspark import cloudpickle

from dagster_reconf.core.errors import SpecError
from dagster_reconf.workloads.generator import NEXMARK_SCHEMA
from dagster_reconf.workloads.options import PACING_OPTIONS, SourceOptions
from dagster_reconf.workloads.pacing import pacing_anchor
from dagster_reconf.workloads.sources import ReadPlan, WordsDataSource, _index_ranges, spark_schema_ddl


def test_options_parse_spark_strings():
    opts = SourceOptions.parse({"rate": "2500", "PARTITIONS": "3", "max_events": "100"})
    assert (opts.rate, opts.partitions, opts.max_events) == (2500.0, 3, 100)


@pytest.mark.parametrize(
    "options,match",
    [
        ({"rate": "-5"}, r"option rate='-5': Input should be greater than 0"),
        ({"partitions": "0"}, r"option partitions='0'"),
        ({"rate": "fast"}, r"option rate='fast'"),
        ({"speed": "1"}, r"unknown option\(s\) \['speed'\] for source 'nexmark'; known options: .*rate"),
        ({"max_events": "5", "start_index": "9"}, r"start_index \(9\) must be <= max_events \(5\)"),
    ],
)
def test_bad_options_name_the_option(options, match):
    with pytest.raises(SpecError, match=match):
        SourceOptions.parse(options)


def test_offered_is_paced_by_wall_clock_and_capped():
    opts = SourceOptions(rate=100, start_time=1000.0, max_events=250)
    assert opts.offered(1000.0, 0) == 0
    assert opts.offered(1001.5, 0) == 150
    assert opts.offered(1010.0, 0) == 250
    assert opts.offered(999.0, 0) == 0


def test_offered_continues_from_anchor_after_rate_change():
    opts = SourceOptions(rate=10, start_time=50.0, start_index=500)
    assert opts.offered(52.0, 0) == 520


@pytest.mark.parametrize(
    "start,end,parts,expected",
    [
        (0, 10, 3, [(0, 3), (3, 6), (6, 10)]),
        (5, 7, 4, [(5, 6), (6, 7)]),
        (5, 5, 2, []),
        (9, 5, 2, []),
    ],
)
def test_index_ranges_cover_exactly(start, end, parts, expected):
    assert _index_ranges(start, end, parts) == expected


def test_schema_ddl_has_nested_structs():
    ddl = spark_schema_ddl(NEXMARK_SCHEMA)
    assert ddl.startswith("event_index bigint, event_type int, date_time timestamp, person struct<id: bigint")


def test_spark_options_are_strings_without_unset_or_excluded_ones():
    opts = SourceOptions(rate=10, max_events=5)
    assert opts.to_spark()["rate"] == "10.0" and "start_time" not in opts.to_spark()
    assert set(opts.to_spark(exclude=PACING_OPTIONS)) == {
        "seed",
        "partitions",
        "max_events",
        "event_time_rate",
        "vocabulary",
        "words_per_sentence",
    }


def test_rate_steps_change_the_pace_without_a_jump():
    # 100 events/s, 200 from 10 s, back to 100 from 20 s: 1000 by 10 s, 3000 by 20 s
    opts = SourceOptions(rate=100, rate_steps="10:200, 20:100", start_time=1000.0)
    assert [opts.offered(1000.0 + t, 0) for t in (5, 10, 15, 20, 30)] == [500, 1000, 2000, 3000, 4000]
    with pytest.raises(SpecError, match=r"option rate_steps='20:5,10:1'.*'10:1' is not SECONDS:RATE .*increasing"):
        SourceOptions.parse({"rate_steps": "20:5,10:1"})
    with pytest.raises(SpecError, match=r"'fast' is not SECONDS:RATE"):
        SourceOptions.parse({"rate_steps": "fast"})


def test_a_new_step_schedule_moves_the_anchor_keeping_what_was_offered(tmp_path):
    first = pacing_anchor(tmp_path, 100.0, now=1000.0)
    assert pacing_anchor(tmp_path, 100.0, now=1010.0) == first  # unchanged: the same anchor
    stepped = pacing_anchor(tmp_path, 100.0, rate_steps="5:300", now=1010.0)
    assert (stepped.start_time, stepped.start_index) == (1010.0, 1000)
    assert stepped.offered(1020.0) == 1000 + 5 * 100 + 5 * 300


def test_a_generated_source_reaches_spark_s_planner_without_pydantic(tmp_path):
    """Spark unpickles a Python source in a new planner process at every query start: the source carries a plain
    ReadPlan that paces as its validated options do, and unpickling it imports no pydantic."""
    options = SourceOptions.parse({"rate": "100", "rate_steps": "10:200", "start_time": "1000", "max_events": "2500"})
    plan = ReadPlan.of(options)
    assert [plan.offered(1000.0 + t, 0) for t in (5, 15, 30)] == [options.offered(1000.0 + t, 0) for t in (5, 15, 30)]
    assert plan.offered(1030.0, 0) == 2500  # capped

    source = WordsDataSource({"rate": "10", "vocabulary": "100", "max_events_per_trigger": "7"})
    (tmp_path / "source.pkl").write_bytes(cloudpickle.dumps(source))
    planner = (
        "import pickle, sys; source = pickle.load(open(sys.argv[1], 'rb')); reader = source.streamReader(None); "
        "print(reader.getDefaultReadLimit().max_rows, 'pydantic' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", planner, str(tmp_path / "source.pkl")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "False"]
