"""The control endpoint against hostile and broken clients, over real loopback sockets."""

import json
import re
import socket
import threading
import time

import pytest

from dagster_reconf.core.errors import ControlRequestError
from dagster_reconf.core.process import control, control_server
from dagster_reconf.core.process.control import ControlClient, RestartRequest
from dagster_reconf.core.process.control_server import MAX_BODY_BYTES, ControlServer, parse_body

from ...hostile_clients import stalled_connections

TOKEN = "s3cret-token"


@pytest.fixture(name="served")
def served_fixture(monkeypatch):
    monkeypatch.setattr(control_server, "IO_TIMEOUT_S", 0.5)
    monkeypatch.setattr(control_server, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(control_server, "MAX_UNAUTHENTICATED", 12)
    monkeypatch.setattr(control_server, "MAX_UNAUTHENTICATED_PER_PEER", 8)
    monkeypatch.setattr(control_server, "HEADER_DEADLINE_S", 1.0)
    calls = []

    def slow_status(_):
        time.sleep(1.5)
        return {"state": "running"}

    server = ControlServer(
        TOKEN,
        {
            ("GET", "/v1/status"): (None, slow_status),
            ("POST", "/v1/restart"): (RestartRequest, lambda req: calls.append(req) or {"scope": "query"}),
        },
    )
    server.start()
    before = threading.active_count()
    yield server, calls, before
    server.close()


def _raw(port: int, head: str, body: bytes = b"", wait_s: float = 5.0) -> tuple[int, dict, float]:
    """Send ``head`` (and ``body``) on a fresh connection; the reply's status, JSON and how long it took."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.split(b"\r\n\r\n", 1)[1]), time.monotonic() - started


def _post(length: str, token: str | None = TOKEN) -> str:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"POST /v1/restart HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {length}\r\n"


def test_no_token_is_refused_before_any_body_is_read(served):
    server, calls, _ = served
    # A body announced as endless is never sent: the 401 comes from the headers alone.
    status, reply, _ = _raw(server.port, _post("-1", token=None))
    assert status == 401 and "missing or wrong token" in reply["error"]
    status, reply, _ = _raw(server.port, _post(str(MAX_BODY_BYTES * 400), token="wrong"))
    assert status == 401 and calls == []


@pytest.mark.parametrize(
    "length,code,match",
    [
        ("-1", 400, "Content-Length '-1' is not a byte count"),
        ("abc", 400, "Content-Length 'abc' is not a byte count"),
        ("1e3", 400, "is not a byte count"),
        (str(MAX_BODY_BYTES + 1), 413, f"exceeds {MAX_BODY_BYTES} bytes"),
        ("9" * 5000, 413, f"exceeds {MAX_BODY_BYTES} bytes"),
    ],
)
def test_a_bad_content_length_is_refused_without_reading(served, length, code, match):
    server, calls, _ = served
    status, reply, _ = _raw(server.port, _post(length))
    assert status == code and match in reply["error"], reply
    assert calls == []


def test_chunked_bodies_are_refused(served):
    server, calls, _ = served
    head = f"POST /v1/restart HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n"
    status, reply, _ = _raw(server.port, head, b"5\r\nhello\r\n0\r\n\r\n")
    assert status == 411 and "send Content-Length" in reply["error"] and calls == []


@pytest.mark.parametrize(
    "body,match",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests 100000 deep"),
        (b'{"settings": {"rate": ' + b"7" * 5000 + b"}}", "a number of 5000 characters"),
        (b'{"settings": {"rate": 1e999}}', "number 1e999 is out of range"),
        (b'{"settings": {"rate": NaN}}', "NaN is not a number a request may carry"),
    ],
)
def test_hostile_json_is_refused_with_a_reason(served, body, match):
    server, calls, _ = served
    status, reply, _ = _raw(server.port, _post(str(len(body))), body)
    assert status == 400 and match in reply["error"], reply
    assert calls == []


def test_brackets_inside_strings_do_not_count_as_nesting(served):
    server, calls, _ = served
    body = b'{"settings": {"x": "' + b"[" * 5000 + b'"}}'
    assert _raw(server.port, _post(str(len(body))), body)[0] == 200 and len(calls) == 1


def test_a_body_shorter_than_announced_is_dropped_after_the_timeout(served):
    server, calls, _ = served
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall((_post("100") + "\r\n").encode() + b'{"settings": {"rate": 1}}')
        assert sock.recv(1024) == b""  # the read timed out (IO_TIMEOUT_S): closed, nothing run
    assert calls == [] and time.monotonic() - started < 3


def _threads_end(before: int) -> None:
    deadline = time.monotonic() + 3
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before, "every connection's thread ended"


def test_connections_without_headers_are_bounded_per_peer_and_cut_at_the_deadline(served):
    server, _, before = served
    stalled = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(8)]
    try:
        stalled[0].sendall(b"GET /v1/status HTTP/1.1\r\n")  # a trickle: each byte in time, the headers never done
        time.sleep(0.1)
        status, reply, took = _raw(server.port, "GET /v1/status HTTP/1.1\r\n")
        assert status == 503 and "8 control connections from 127.0.0.1 have not sent" in reply["error"]
        assert took < 1.0
        started = time.monotonic()
        for sock in stalled:  # closed by the server at HEADER_DEADLINE_S, the trickling one too
            sock.settimeout(3.0)
            assert sock.recv(1024) == b""
        assert time.monotonic() - started < 1.5
    finally:
        for sock in stalled:
            sock.close()
    _threads_end(before)
    body = b'{"settings": {"rate": 2}}'
    assert _raw(server.port, _post(str(len(body))), body)[0] == 200, "served again once they closed"


def test_authenticated_requests_served_at_once_are_bounded(served):
    server, _, before = served
    answers: list[int] = []

    def status() -> None:
        answers.append(_raw(server.port, f"GET /v1/status HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n")[0])

    slow = [threading.Thread(target=status) for _ in range(4)]  # each status takes 1.5 s
    for thread in slow:
        thread.start()
    time.sleep(0.3)
    status_code, reply, took = _raw(server.port, f"GET /v1/status HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n")
    assert status_code == 503 and "4 control connections are open" in reply["error"] and took < 1.0
    for thread in slow:
        thread.join()
    assert answers == [200] * 4
    _threads_end(before)


def test_32_stalled_connections_without_the_token_do_not_block_the_control_calls_that_have_it():
    """The attack of a client without the token: 32 connections, half a request line each, 20 ms apart, reopened
    as the server cuts them; meanwhile status and a mutating call (with the token) are answered at once."""
    calls: list[object] = []
    server = ControlServer(
        TOKEN,
        {
            ("GET", "/v1/status"): (None, lambda _: {"state": "running"}),
            ("POST", "/v1/restart"): (RestartRequest, lambda req: calls.append(req) or {"scope": "query"}),
        },
    )
    server.start()
    try:
        with stalled_connections(server.port):
            client = ControlClient(server.port, TOKEN)
            for _ in range(10):
                started = time.monotonic()
                assert client.status() == {"state": "running"}
                assert client.restart({"trigger_interval_s": 2.0}) == {"scope": "query"}
                # not held up until the stalled ones are cut (HEADER_DEADLINE_S, 5 s), as with one pool of slots
                assert time.monotonic() - started < 4.0
        assert len(calls) == 10
    finally:
        server.close()


def test_a_status_that_does_not_come_is_reported_in_seconds(served, monkeypatch):
    server, _, _ = served
    monkeypatch.setattr(control, "STATUS_TIMEOUT_S", 0.3)
    started = time.monotonic()
    with pytest.raises(ControlRequestError, match=r"the driver does not answer: .* no reply within 0.3 s") as err:
        ControlClient(server.port, TOKEN).status()
    assert err.value.status == 503 and time.monotonic() - started < 1.2


def test_parse_body_accepts_ordinary_requests():
    assert parse_body(b'{"settings": {"rate": 12.5, "name": "[x]"}, "timeout_s": 3}') == (
        {"settings": {"rate": 12.5, "name": "[x]"}, "timeout_s": 3},
        None,
    )
    assert parse_body(b"") == ({}, None)


def test_a_client_asks_again_while_the_slots_are_taken_and_is_served_when_one_frees(served):
    server, calls, _ = served
    slow = [
        threading.Thread(
            target=_raw, args=(server.port, f"GET /v1/status HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n")
        )
        for _ in range(4)
    ]
    for thread in slow:
        thread.start()
    time.sleep(0.3)  # all 4 slots held for 1.5 s: the client's first tries are answered 503
    started = time.monotonic()
    assert ControlClient(server.port, TOKEN).restart({"trigger_interval_s": 2.0}) == {"scope": "query"}
    assert 0.8 < time.monotonic() - started < 3.0 and len(calls) == 1
    for thread in slow:
        thread.join()


def test_a_mutating_call_waits_for_the_operation_in_flight_then_runs(monkeypatch, caplog):
    """A re-run right after its caller was killed: the killed run's request still runs in the driver."""
    ran: list[str] = []

    def restart(req):
        ran.append("restart")
        time.sleep(1.0)
        return {"scope": "query"}

    server = ControlServer(TOKEN, {("POST", "/v1/restart"): (RestartRequest, restart)})
    server.start()
    try:
        killed_run = threading.Thread(target=ControlClient(server.port, TOKEN).restart, args=({"rate": 1},))
        killed_run.start()
        time.sleep(0.2)
        started = time.monotonic()
        with caplog.at_level("WARNING"):
            assert ControlClient(server.port, TOKEN).restart({"rate": 2}) == {"scope": "query"}
        assert time.monotonic() - started > 0.7 and ran == ["restart", "restart"]
        assert "another control operation (restart, for 0 s) is in progress" in caplog.text
        assert re.search(r"POST restart waits up to \d+ s for the driver's operation in flight", caplog.text)
        killed_run.join()

        monkeypatch.setattr(control, "IN_FLIGHT_WAIT_S", 0.3)  # bounded: then it says what it waited for
        killed_run = threading.Thread(target=ControlClient(server.port, TOKEN).restart, args=({"rate": 3},))
        killed_run.start()
        time.sleep(0.2)
        with pytest.raises(ControlRequestError, match=r"\(restart, for \d s\) is in progress.*\(waited \d s for it\)"):
            ControlClient(server.port, TOKEN).restart({"rate": 4})
        killed_run.join()
    finally:
        server.close()
