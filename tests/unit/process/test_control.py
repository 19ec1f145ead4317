import json
import os
import stat

import pytest

from dagster_reconf.core.errors import ControlRequestError, StreamStateError
from dagster_reconf.core.process.control import (
    OPERATIONS,
    ControlClient,
    RestartRequest,
    StopRequest,
    new_token,
    routes,
)
from dagster_reconf.core.process.control_server import ControlServer

TOKEN = "s3cret-token"


@pytest.fixture(name="calls")
def calls_fixture():
    return []


@pytest.fixture(name="server")
def server_fixture(calls):
    def restart(req):
        calls.append(("restart", req.settings))
        return {"scope": "query"}

    def stop(req):
        if req.timeout_s == 7:
            raise RuntimeError("py4j: Answer from Java side is empty\nmore detail")
        if req.timeout_s < 1:
            raise StreamStateError("the running micro-batch did not commit within 0.5 s")
        calls.append(("stop", req.timeout_s))
        return {"last_committed_batch": 3}

    server = ControlServer(
        TOKEN,
        {
            ("GET", "/v1/status"): (None, lambda _: {"state": "running"}),
            ("POST", "/v1/stop"): (StopRequest, stop),
            ("POST", "/v1/restart"): (RestartRequest, restart),
        },
    )
    server.start()
    yield server
    server.close()


def test_token_file_is_private(tmp_path):
    token = new_token(tmp_path / "token")
    assert len(token) >= 32
    assert stat.S_IMODE(os.stat(tmp_path / "token").st_mode) == 0o600
    assert new_token(tmp_path / "token") != token


def test_server_binds_loopback_only(server):
    assert server.host == "127.0.0.1"


def test_status_over_http(server):
    assert ControlClient(server.port, TOKEN).status() == {"state": "running"}


@pytest.mark.parametrize("token", ["wrong", "", TOKEN + "x"])
def test_wrong_token_refused_and_nothing_changes(server, calls, token):
    with pytest.raises(ControlRequestError, match="missing or wrong token") as err:
        ControlClient(server.port, token).restart({"rate": 10})
    assert err.value.status == 401
    assert calls == []


@pytest.mark.parametrize(
    "body,match",
    [
        (b"{not json", r"request body is not JSON"),
        (b"[1, 2]", r"request body must be a JSON object, got list"),
        (json.dumps({"settings": {}}).encode(), r"settings: Dictionary should have at least 1 item"),
        (json.dumps({"settings": {"rate": 1}, "force": True}).encode(), r"force: Extra inputs are not permitted"),
        (
            json.dumps({"settings": {"rate": 1}, "timeout_s": -3}).encode(),
            r"timeout_s: Input should be greater than 0 \(got -3\)",
        ),
    ],
)
def test_malformed_requests_refused(server, calls, body, match):
    status, reply = server.handle("POST", "/v1/restart", f"Bearer {TOKEN}", body)
    assert status == 400
    assert __import__("re").search(match, reply["error"]), reply
    assert calls == []


def test_a_stop_that_keeps_an_interrupted_batch_must_leave_it_unfinished(server, calls):
    body = json.dumps({"timeout_s": 5, "keep_interrupted": True}).encode()
    status, reply = server.handle("POST", "/v1/stop", f"Bearer {TOKEN}", body)
    assert status == 400 and "keep_interrupted=true needs finish=false" in reply["error"], reply
    assert calls == []
    kept = json.dumps({"timeout_s": 5, "finish": False, "keep_interrupted": True}).encode()
    assert server.handle("POST", "/v1/stop", f"Bearer {TOKEN}", kept)[0] == 200


def test_unknown_endpoint_lists_endpoints(server):
    status, reply = server.handle("POST", "/v1/explode", f"Bearer {TOKEN}", b"{}")
    assert status == 404 and "GET /v1/status" in reply["error"]


def test_state_errors_are_409(server):
    with pytest.raises(ControlRequestError, match="did not commit within 0.5 s") as err:
        ControlClient(server.port, TOKEN).stop(timeout_s=0.5)
    assert err.value.status == 409


def test_an_unexpected_failure_is_answered_with_its_type_and_the_server_keeps_serving(server, capfd):
    with pytest.raises(
        ControlRequestError, match=r"unexpected RuntimeError: py4j: Answer from Java side is empty \("
    ) as err:
        ControlClient(server.port, TOKEN).stop(timeout_s=7)
    assert err.value.status == 500 and "more detail" in capfd.readouterr().err  # the traceback, in the driver's log
    assert ControlClient(server.port, TOKEN).stop(timeout_s=2) == {"last_committed_batch": 3}  # not left busy


def test_valid_request_reaches_handler(server, calls):
    assert ControlClient(server.port, TOKEN).restart({"source_partitions": 4}) == {"scope": "query"}
    assert calls == [("restart", {"source_partitions": 4})]


def test_unreachable_endpoint_is_clear():
    with pytest.raises(ControlRequestError, match=r"control endpoint http://127.0.0.1:1/v1 unreachable"):
        ControlClient(1, TOKEN).status()


def test_an_unreachable_driver_error_carries_its_log_without_the_stack_frames(tmp_path):
    log = tmp_path / "driver.log"
    log.write_text(
        "started\njava.lang.OutOfMemoryError: Java heap space\n\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"
        "\t... 12 more\nTraceback (most recent call last):\n"
    )
    with pytest.raises(ControlRequestError) as err:
        ControlClient(1, TOKEN, log=log).status()
    assert err.value.status == 503
    assert str(err.value).endswith(
        f"the driver's log ({log}) ends:\nstarted\njava.lang.OutOfMemoryError: Java heap space\n"
        "Traceback (most recent call last):"
    )


def test_routes_need_a_handler_for_every_operation_and_no_other():
    handlers = {name: (lambda _: {}) for name in OPERATIONS}
    assert set(routes(handlers)) == {(op.method, f"/v1/{name}") for name, op in OPERATIONS.items()}
    with pytest.raises(ValueError, match=r"missing \['stop'\], unknown \['stopp'\]"):
        routes({**{n: h for n, h in handlers.items() if n != "stop"}, "stopp": lambda _: {}})


def test_client_refuses_a_bad_request_before_sending_it(server):
    client = ControlClient(server.port, TOKEN)
    with pytest.raises(ControlRequestError, match=r"invalid stop request: timeout_s: .*got 0") as refused:
        client.stop(timeout_s=0)
    assert refused.value.status == 400
    with pytest.raises(ControlRequestError, match="keep_interrupted=true needs finish=false"):
        client.stop(keep_interrupted=True)
