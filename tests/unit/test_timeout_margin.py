"""The report of each test's time against its timeout (tests/timeout_margin.py), over records of several sessions."""

import json

from tests.timeout_margin import TimedTest, read_times, slowest, table


def test_the_slowest_are_those_nearest_their_timeout_and_those_past_half_are_named(tmp_path):
    times = [
        TimedTest("a.py::long_but_far", 300.0, 1050.0, "passed"),
        TimedTest("b.py::near", 330.0, 600.0, "passed"),
        TimedTest("c.py::quick", 1.0, 600.0, "passed"),
        TimedTest("d.py::unbounded", 900.0, None, "passed"),
        TimedTest("e.py::failed_near", 590.0, 600.0, "failed"),
    ]
    for i, chunk in enumerate((times[:2], times[2:])):  # two sessions, two files
        (tmp_path / f"times-{i}.jsonl").write_text("".join(json.dumps(t.__dict__) + "\n" for t in chunk))
    read = read_times(tmp_path)
    assert sorted(read, key=lambda t: t.nodeid) == times
    assert [t.nodeid for t in slowest(read, 3)] == ["e.py::failed_near", "b.py::near", "a.py::long_but_far"]
    lines = table(read, 2)
    assert lines[1].split() == ["590.0", "600", "98%", "e.py::failed_near", "(failed)"]
    assert lines[2].split() == ["330.0", "600", "55%", "b.py::near"]
    assert lines[-1] == "past 50% of their timeout: b.py::near (55%), e.py::failed_near (98%)"
