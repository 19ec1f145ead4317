"""The supervisor of drivers on other hosts, over what crosses the network only: a published endpoint that answers is a
running driver, one that does not is a driver that died, and a listing asks each endpoint once.

Starting and stopping real drivers through it is in tests/integration/test_hosts.py."""

import socket
import uuid

import pytest

from dagster_reconf.core.process import remote_supervisor
from dagster_reconf.core.process.endpoint_record import ControlEndpoint, publish_endpoint, withdraw_endpoint
from dagster_reconf.core.process.remote_supervisor import RemoteSupervisor
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import storage_root

TOKEN_ENV = "REMOTE_SUPERVISOR_TEST_TOKEN"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(name="plane")
def plane_fixture(tmp_path, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "s" * 40)
    storage = f"memory:///reconf-{uuid.uuid4().hex}"
    spec = StreamSpec.parse(
        {
            "name": "far",
            "entrypoint": "dagster_reconf.workloads.streams:q5",
            "storage": storage,
            "control_token_env": TOKEN_ENV,
        }
    )
    supervisor = RemoteSupervisor(tmp_path / "home")
    paths = supervisor.paths(spec.name)
    paths.create()
    paths.write_spec(spec.model_dump_json())
    return supervisor, storage_root(storage, spec.name)


def test_a_silent_published_endpoint_is_a_driver_that_died_and_a_listing_asks_it_once(plane, monkeypatch):
    supervisor, root = plane
    asked = []
    real_client = remote_supervisor.remote_client
    monkeypatch.setattr(remote_supervisor, "remote_client", lambda spec: asked.append(spec.name) or real_client(spec))
    assert [row["driver"] for row in supervisor.list()] == ["not running"]  # nothing published: nothing to ask
    assert asked == []

    publish_endpoint(
        root, ControlEndpoint(host="127.0.0.1", port=closed_port(), pid=4242, driver_host="d", started_at=1)
    )
    assert [row["driver"] for row in supervisor.list()] == ["died"]
    assert asked == ["far"]
    assert supervisor.driver_info("far") is None
    death = supervisor.driver_death("far")
    assert death is not None and (death["pid"], death["host"], death["last_seen_at"]) == (4242, "d", 1)

    withdraw_endpoint(root, pid=4242)  # a clean exit withdraws the record: stopped, not died
    assert [row["driver"] for row in supervisor.list()] == ["not running"]
    assert supervisor.driver_death("far") is None
