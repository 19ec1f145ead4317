"""A stream whose driver runs on another host: what a reconfiguration here is told before anything runs."""

import uuid

import pytest

from dagster_reconf.core.errors import SpecError, StreamStateError
from dagster_reconf.core.process.endpoint_record import ControlEndpoint, publish_endpoint
from dagster_reconf.core.reconfig import RemoteStream
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import StreamPaths, storage_root


def registered(tmp_path, **fields) -> StreamPaths:
    spec = StreamSpec.parse({"name": "far", "entrypoint": "dagster_reconf.workloads.streams:q5", **fields})
    paths = StreamPaths(tmp_path / "home", "far")
    paths.create()
    paths.write_spec(spec.model_dump_json())
    return paths


def test_a_stream_without_storage_or_token_variable_is_refused_with_both_named(tmp_path):
    with pytest.raises(SpecError, match="has no storage or control_token_env"):
        RemoteStream(registered(tmp_path))


def test_a_driver_that_does_not_answer_is_to_be_started_on_its_host(tmp_path, monkeypatch):
    storage = f"memory:///reconf-{uuid.uuid4().hex}"
    monkeypatch.setenv("FAR_TOKEN", "t" * 40)
    stream = RemoteStream(registered(tmp_path, storage=storage, control_token_env="FAR_TOKEN"), agent_timeout_s=1.0)
    no_agent = r"no agent answered the request to start stream 'far' within 1 s; run `reconf agent --storage"
    with pytest.raises(StreamStateError, match=r"no driver answering on its host \(no control endpoint published"):
        stream.ensure_driver()
    # A record left by a driver that died: its port no longer answers.
    publish_endpoint(
        storage_root(storage, "far"),
        ControlEndpoint(host="127.0.0.1", port=1, pid=99999, driver_host="gone", started_at=0.0),
    )
    assert stream.status()["state"] == "not running"
    with pytest.raises(StreamStateError, match=no_agent):
        stream.ensure_driver()
    assert stream.metrics().read() == ([], 0)  # a pull that fails leaves the copy as it is
