"""Each test's time against its timeout, so that a test creeping towards its timeout is seen before it fails.

A pytest plugin (tests/conftest.py loads it): every test's wall time, setup and teardown included (what
pytest-timeout bounds), is compared with its timeout (its ``timeout`` mark, else the ini's). At the end of a session
it prints the five slowest by share of their timeout, and where ``RECONF_TEST_TIMES`` names a directory it adds one
JSON line per test to a file of its own there. ``make test`` runs several pytest sessions at once, then

    python -m tests.timeout_margin DIR

prints the five of them all, and every test past half its timeout (CI's rule: a test finishes in under half of it).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

TIMES_ENV = "RECONF_TEST_TIMES"
SHOWN = 5
MARGIN = 0.5  # a test should finish within this share of its timeout


@dataclass(frozen=True)
class TimedTest:
    """One test's wall time (setup, call and teardown) and the timeout that bounds it."""

    nodeid: str
    seconds: float
    timeout_s: float | None
    outcome: str

    @property
    def share(self) -> float | None:
        return self.seconds / self.timeout_s if self.timeout_s else None


def timeout_of(item: pytest.Item) -> float | None:
    """The timeout pytest-timeout applies to ``item``: its closest ``timeout`` mark, else ``--timeout`` or the ini."""
    mark = item.get_closest_marker("timeout")
    if mark is not None:
        value = mark.kwargs.get("timeout", mark.args[0] if mark.args else None)
    else:
        value = item.config.getoption("timeout", None) or item.config.getini("timeout")
    try:
        return float(value) if value not in (None, "") and float(value) > 0 else None
    except (TypeError, ValueError):
        return None


class TimeoutMargin:
    """Collects each test's phases as pytest reports them."""

    def __init__(self, out_dir: str | None) -> None:
        self.out_dir = Path(out_dir) if out_dir else None
        self.seconds: dict[str, float] = {}
        self.outcomes: dict[str, str] = {}
        self.timeouts: dict[str, float | None] = {}

    @pytest.hookimpl
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.timeouts[item.nodeid] = timeout_of(item)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid] = report.outcome

    def times(self) -> list[TimedTest]:
        return [
            TimedTest(nodeid, round(seconds, 2), self.timeouts.get(nodeid), self.outcomes.get(nodeid, "passed"))
            for nodeid, seconds in self.seconds.items()
            if self.outcomes.get(nodeid) != "skipped"
        ]

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        times = self.times()
        if not times:
            return
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            with open(self.out_dir / f"times-{os.getpid()}.jsonl", "a") as out:
                out.writelines(json.dumps(asdict(t)) + "\n" for t in times)
        terminalreporter.write_sep("=", f"{SHOWN} slowest tests by share of their timeout")
        for line in table(times):
            terminalreporter.write_line(line)


def slowest(times: list[TimedTest], count: int = SHOWN) -> list[TimedTest]:
    """The ``count`` tests nearest their timeouts (by share; those without a timeout by seconds, after them)."""
    return sorted(times, key=lambda t: (t.share is not None, t.share or 0.0, t.seconds), reverse=True)[:count]


def table(times: list[TimedTest], count: int = SHOWN) -> list[str]:
    """The slowest tests as lines: seconds, timeout, share, the test; then every test past ``MARGIN``."""
    lines = [f"{'seconds':>8} {'timeout':>8} {'share':>6}  test"]
    for t in slowest(times, count):
        timeout = f"{t.timeout_s:.0f}" if t.timeout_s else "none"
        share = f"{t.share:.0%}" if t.share is not None else "-"
        lines.append(
            f"{t.seconds:>8.1f} {timeout:>8} {share:>6}  {t.nodeid}"
            + ("" if t.outcome == "passed" else f" ({t.outcome})")
        )
    over = [t for t in times if t.share is not None and t.share > MARGIN]
    lines.append(
        f"past {MARGIN:.0%} of their timeout: " + (", ".join(f"{t.nodeid} ({t.share:.0%})" for t in over) or "none")
    )
    return lines


def read_times(directory: Path) -> list[TimedTest]:
    """Every test time the sessions wrote under ``directory``."""
    return [
        TimedTest(**json.loads(line))
        for path in sorted(directory.glob("times-*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TimeoutMargin(os.environ.get(TIMES_ENV)), "reconf-timeout-margin")


def main() -> None:
    parser = argparse.ArgumentParser(description="The slowest tests of several pytest sessions, by share of timeout.")
    parser.add_argument("directory", type=Path, help=f"where the sessions wrote their times (${TIMES_ENV})")
    args = parser.parse_args()
    times = read_times(args.directory)
    print(f"== {SHOWN} slowest tests by share of their timeout, of {len(times)} in every session ==")
    print("\n".join(table(times)))


if __name__ == "__main__":
    main()
