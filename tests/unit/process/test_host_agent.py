"""A driver host's agent: what it refuses before starting anything, and that it answers each request once.

Starting a real driver through it is in tests/integration/test_hosts.py."""

import json
import re

import pytest

from dagster_reconf.core.errors import SpecError, StreamStartError
from dagster_reconf.core.process import host_agent
from dagster_reconf.core.process.host_agent import (
    HostAgent,
    HostAnswer,
    answer_file,
    ask_agent,
    await_answer,
    request_file,
    send_request,
)
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import storage_root

TOKEN_ENV = "AGENT_TEST_TOKEN"


@pytest.fixture(name="storage")
def storage_fixture(tmp_path, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "a" * 40)
    return (tmp_path / "bucket").as_uri()


def spec(storage: str, **fields) -> StreamSpec:
    values = {"name": "far", "entrypoint": "dagster_reconf.workloads.streams:q5", "storage": storage}
    return StreamSpec.parse({**values, "control_token_env": TOKEN_ENV, **fields})


def answered(agent: HostAgent) -> list[HostAnswer]:
    answers = agent.poll_once()
    assert len(answers) == 1, answers
    return answers


def test_an_agent_serves_named_streams_of_a_storage_url_only(tmp_path):
    with pytest.raises(SpecError, match="give at least one --stream NAME"):
        HostAgent(tmp_path / "home", (tmp_path / "b").as_uri(), [])
    with pytest.raises(SpecError, match="is not a URL"):
        HostAgent(tmp_path / "home", "bucket/reconf", ["far"])
    with pytest.raises(SpecError, match="cannot name a folder"):
        HostAgent(tmp_path / "home", (tmp_path / "b").as_uri(), ["../etc"])


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"storage": "file:///elsewhere"}, r"the spec's storage 'file:///elsewhere' is not this agent's"),
        ({"control_token_env": None}, "names no control_token_env: a driver started for another host needs a token"),
        ({"name": "near"}, "the request under stream 'far'.s prefix asks for stream 'near'"),
    ],
)
def test_a_start_it_cannot_make_safe_is_refused_with_why_and_nothing_starts(tmp_path, storage, fields, reason):
    agent = HostAgent(tmp_path / "home", storage, ["far"])
    bad = spec(storage).model_dump(mode="json") | fields
    request = send_request(storage, "far", "start")
    request_file(storage_root(storage, "far")).write_text(request.model_copy(update={"spec": bad}).model_dump_json())
    (answer,) = answered(agent)
    assert (answer.request_id, answer.ok) == (request.id, False)
    assert re.search(reason, answer.message), answer.message
    assert not (tmp_path / "home" / "streams" / "far" / "driver.json").exists()
    with pytest.raises(StreamStartError, match=r"could not start 'far': .*not this agent's|needs a token|asks for"):
        await_answer(storage, "far", request, timeout_s=1)
    assert agent.poll_once() == []  # answered once: the same request is not carried out again


def test_a_damaged_request_is_answered_once_with_why(tmp_path, storage):
    agent = HostAgent(tmp_path / "home", storage, ["far"])
    path = request_file(storage_root(storage, "far"))
    path.parent.mkdir(parents=True)
    path.write_text('{"id": "x"')
    (answer,) = answered(agent)
    assert not answer.ok and answer.action is None and "is not a request" in answer.message
    assert agent.poll_once() == []
    path.write_text(json.dumps({"id": "../../etc", "action": "start", "requested_by": "me", "requested_at": 0}))
    (again,) = answered(agent)  # another damaged text: answered too
    assert not again.ok and "id" in again.message and again.request_id != answer.request_id


def test_a_stop_of_a_stream_never_started_here_says_so_and_stops_restarts(tmp_path, storage, monkeypatch):
    agent = HostAgent(tmp_path / "home", storage, ["far"])
    assert agent.poll_once() == []  # no request, no driver: nothing to do
    request = send_request(storage, "far", "stop")
    (answer,) = answered(agent)
    assert (answer.ok, answer.message, answer.action) == (True, "not running", "stop")
    assert await_answer(storage, "far", request, timeout_s=1).request_id == request.id
    # After a stop was asked for, a driver found dead is not started again.
    monkeypatch.setattr(agent.supervisor, "driver_death", lambda name: {"pid": 1, "last_seen_at": 0.0})
    assert agent.poll_once() == []


def test_a_driver_that_died_is_started_again_at_most_once_per_backoff(tmp_path, storage, monkeypatch):
    agent = HostAgent(tmp_path / "home", storage, ["far"])
    monkeypatch.setattr(agent.supervisor, "driver_death", lambda name: {"pid": 1, "last_seen_at": 0.0})
    (answer,) = answered(agent)  # its spec was never registered here: the restart fails, with why
    assert (
        not answer.ok and answer.request_id is None and "its driver had died: no stream named 'far'" in answer.message
    )
    assert not answer_file(storage_root(storage, "far")).exists()  # restarts are reported beside, not as answers
    assert agent.poll_once() == []  # within the backoff: not tried again
    monkeypatch.setattr(host_agent, "RESTART_BACKOFF_S", 0.0)
    assert len(agent.poll_once()) == 1


def test_no_agent_is_named_as_the_fix(tmp_path, storage):
    with pytest.raises(StreamStartError, match=r"within 0.5 s; run `reconf agent --storage file://.* --stream far`"):
        ask_agent(storage, "far", "start", 0.5, spec(storage))
    left = json.loads(request_file(storage_root(storage, "far")).read_text())
    assert (left["action"], left["spec"]["name"]) == ("start", "far")  # the request stays for an agent started later


def test_a_store_that_fails_a_look_is_tried_again_next_time(tmp_path, storage, monkeypatch):
    agent = HostAgent(tmp_path / "home", storage, ["far"])
    request = send_request(storage, "far", "stop")

    def unreachable(path):
        raise ConnectionError("endpoint down")

    with monkeypatch.context() as patched:
        patched.setattr(host_agent, "_read_answer", unreachable)
        assert agent.poll_once() == []  # logged, not raised: the agent keeps serving
    (answer,) = answered(agent)
    assert answer.request_id == request.id and answer.ok


class _Rewritten:
    """An answer file an object store refuses to read once, as S3 does when the agent replaces it mid-read."""

    def __init__(self, text: str, error: OSError) -> None:
        self.text, self.error, self.reads = text, error, 0

    def read_text(self) -> str:
        self.reads += 1
        if self.reads == 1:
            raise self.error
        return self.text


def test_an_answer_replaced_while_it_is_read_is_read_again_and_other_errors_are_raised():
    answer = HostAnswer(request_id="r1", action="start", ok=True, message="started", host="h", pid=1, answered_at=1.0)
    raced = _Rewritten(
        answer.model_dump_json(), OSError(22, "At least one of the preconditions you specified did not hold.")
    )
    assert host_agent._read_answer(raced) == answer and raced.reads == 2
    with pytest.raises(PermissionError):
        host_agent._read_answer(_Rewritten(answer.model_dump_json(), PermissionError(13, "Access Denied")))
