"""A re-run takes up a killed run's step only once the driver has finished that run's request in flight."""

import pytest

from dagster_reconf.core.errors import ControlRequestError, StreamStateError
from dagster_reconf.core.reconfig import handles
from dagster_reconf.core.reconfig.handles import StreamHandle


class _Answers:
    """A stream whose driver answers status from a script: all :meth:`StreamHandle.await_idle` asks of it."""

    name = "s"

    def __init__(self, answers):
        self.answers, self.asked = list(answers), 0

    def status(self):
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def await_idle(self, timeout_s: float) -> float:
        return StreamHandle.await_idle(self, timeout_s)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _quick_polls(monkeypatch):
    monkeypatch.setattr(handles, "IDLE_POLL_S", 0.01)


def test_the_wait_lasts_while_an_operation_runs_in_the_driver():
    busy = {"state": "stopped", "operation_in_flight": "migrate", "operation_in_flight_s": 3.0}
    stream = _Answers([busy, busy, busy, {"state": "stopped"}])
    assert stream.await_idle(timeout_s=5) > 0 and stream.asked == 4


def test_a_driver_that_does_not_answer_runs_nothing():
    stream = _Answers([ControlRequestError("unreachable", 503)])
    assert stream.await_idle(timeout_s=5) < 1 and stream.asked == 1


def test_an_operation_that_outlasts_the_bound_is_named():
    busy = {"state": "stopped", "operation_in_flight": "migrate", "operation_in_flight_s": 412.0}
    with pytest.raises(StreamStateError, match=r"still runs migrate \(for 412.0 s\).*re-run once it has ended"):
        _Answers([busy]).await_idle(timeout_s=0.05)
