"""The published control endpoint and the token from the environment: what a control plane on another host uses."""

import uuid

import pytest
from upath import UPath

from dagster_reconf.core.errors import ControlRequestError, SpecError
from dagster_reconf.core.process.endpoint_record import (
    MIN_TOKEN_CHARS,
    ControlEndpoint,
    clear_pause_marker,
    endpoint_file,
    held_paused,
    pause_marker,
    publish_endpoint,
    read_endpoint,
    remote_client,
    set_pause_marker,
    stream_token,
    token_from_env,
    withdraw_endpoint,
)
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import storage_root

TOKEN = "t" * MIN_TOKEN_CHARS


def spec(**fields) -> StreamSpec:
    return StreamSpec.parse({"name": "far", "entrypoint": "dagster_reconf.workloads.streams:q5", **fields})


def endpoint(pid: int = 4242) -> ControlEndpoint:
    return ControlEndpoint(host="10.0.0.7", port=8765, pid=pid, driver_host="driver-1", started_at=1.0)


def test_the_token_comes_from_the_variable_the_spec_names(monkeypatch, tmp_path):
    monkeypatch.setenv("FAR_TOKEN", f"  {TOKEN}\n")
    assert token_from_env("FAR_TOKEN") == TOKEN
    assert stream_token(spec(control_token_env="FAR_TOKEN"), tmp_path / "no-such-file") == TOKEN
    (tmp_path / "token").write_text("from-the-file")
    assert stream_token(spec(), tmp_path / "token") == "from-the-file"


@pytest.mark.parametrize(("value", "says"), [(None, "is not set"), ("short", "holds 5 characters")])
def test_a_missing_or_short_token_names_the_variable_and_the_fix(monkeypatch, value, says):
    monkeypatch.delenv("FAR_TOKEN", raising=False)
    if value is not None:
        monkeypatch.setenv("FAR_TOKEN", value)
    with pytest.raises(SpecError, match=rf"\$FAR_TOKEN, which {says} on this host; set it .* e\.g\. FAR_TOKEN="):
        token_from_env("FAR_TOKEN")


def test_a_bad_variable_name_is_refused_by_the_spec():
    with pytest.raises(SpecError, match="control_token_env"):
        spec(control_token_env="NOT-A-NAME")


def test_the_endpoint_is_published_read_and_withdrawn_only_by_its_own_driver():
    root = UPath(f"memory:///reconf-{uuid.uuid4().hex}") / "streams" / "far"
    with pytest.raises(ControlRequestError, match="no control endpoint published at .*driver is not running"):
        read_endpoint(root)
    publish_endpoint(root, endpoint())
    assert read_endpoint(root) == endpoint()
    withdraw_endpoint(root, pid=1)  # a driver that has been replaced leaves its successor's record alone
    assert read_endpoint(root).pid == 4242
    withdraw_endpoint(root, pid=4242)
    assert not endpoint_file(root).exists()
    endpoint_file(root).write_text('{"host": "x"}')
    with pytest.raises(ControlRequestError, match="damaged"):
        read_endpoint(root)


def test_a_remote_client_needs_storage_and_a_token_variable(monkeypatch):
    with pytest.raises(SpecError, match="has no storage or control_token_env"):
        remote_client(spec())
    storage = f"memory:///reconf-{uuid.uuid4().hex}"
    far = spec(storage=storage, control_token_env="FAR_TOKEN")
    monkeypatch.setenv("FAR_TOKEN", TOKEN)
    publish_endpoint(storage_root(storage, "far"), endpoint())
    client = remote_client(far)
    assert (client.base, client.token) == ("http://10.0.0.7:8765/v1", TOKEN)


def test_the_pause_marker_is_set_and_cleared_under_the_streams_prefix():
    root = UPath(f"memory:///reconf-{uuid.uuid4().hex}") / "streams" / "far"
    assert not pause_marker(root).exists()
    set_pause_marker(root, "paused for a reconfiguration from plane-1")
    assert "plane-1" in pause_marker(root).read_text()
    clear_pause_marker(root)
    clear_pause_marker(root)  # idempotent: a re-run of a resume clears nothing twice
    assert not pause_marker(root).exists()


def test_a_driver_held_paused_by_the_marker_says_so_and_how_it_resumes():
    marker = "s3://bucket/streams/far/control/paused.json"
    note = held_paused({"pid": 7, "status": "running", "paused_by": marker})
    assert note is not None and marker in note and "another host" in note and "re-running" in note
    assert held_paused({"pid": 7, "status": "running"}) is None
