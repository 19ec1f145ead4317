"""Event logs written on the driver's disk and copied to an object store as they grow."""

import uuid

from upath import UPath

from dagster_reconf.core.spark.event_log_shipping import EventLogShipper


def test_changed_files_are_copied_whole_and_vanished_ones_removed(tmp_path):
    remote = UPath(f"memory:///logs-{uuid.uuid4().hex}")
    shipper = EventLogShipper(tmp_path / "local", remote)
    app = tmp_path / "local" / "eventlog_v2_app-1"
    app.mkdir()
    (app / "events_1_app-1.zstd").write_bytes(b"first")
    (app / "appstatus_app-1.inprogress").write_text("")
    (app / ".events_1_app-1.zstd.crc").write_bytes(b"crc")  # Hadoop's checksum: not an event log
    assert shipper.ship_once() == 2
    assert (remote / "eventlog_v2_app-1" / "events_1_app-1.zstd").read_bytes() == b"first"
    assert not (remote / "eventlog_v2_app-1" / ".events_1_app-1.zstd.crc").exists()
    assert shipper.ship_once() == 0  # nothing changed: nothing copied

    (app / "events_1_app-1.zstd").write_bytes(b"first and more")  # it grew: copied again, whole
    (app / "appstatus_app-1.inprogress").rename(app / "appstatus_app-1")  # the application ended
    assert shipper.ship_once() == 2
    assert (remote / "eventlog_v2_app-1" / "events_1_app-1.zstd").read_bytes() == b"first and more"
    names = sorted(p.name for p in (remote / "eventlog_v2_app-1").iterdir())
    assert names == ["appstatus_app-1", "events_1_app-1.zstd"]


def test_a_started_shipper_copies_in_the_background_and_once_more_at_its_stop(tmp_path):
    remote = UPath(f"memory:///logs-{uuid.uuid4().hex}")
    shipper = EventLogShipper(tmp_path / "local", remote, interval_s=3600).start()
    (tmp_path / "local" / "events").write_bytes(b"x")
    shipper.stop()
    assert (remote / "events").read_bytes() == b"x"


def test_finished_logs_leave_the_driver_s_disk_once_all_are_in_the_store(tmp_path, monkeypatch):
    remote = UPath(f"memory:///logs-{uuid.uuid4().hex}")
    local = tmp_path / "local"
    shipper = EventLogShipper(local, remote)
    (local / "eventlog_v2_app-1").mkdir()
    (local / "eventlog_v2_app-1" / "events_1_app-1.zstd").write_bytes(b"whole")
    (local / "eventlog_v2_app-1" / ".events_1_app-1.zstd.crc").write_bytes(b"crc")
    with monkeypatch.context() as m:  # the store fails: the logs stay here, for the next copy
        m.setattr("dagster_reconf.core.spark.event_log_shipping.copy_file", _unreachable)
        assert shipper.ship_finished() == 0
    assert (local / "eventlog_v2_app-1" / "events_1_app-1.zstd").exists()
    assert shipper.ship_finished() == 1
    assert list(local.iterdir()) == []  # nothing left on the driver's disk
    assert shipper.ship_once() == 0  # gone here is not removed there: the store keeps the finished logs
    assert (remote / "eventlog_v2_app-1" / "events_1_app-1.zstd").read_bytes() == b"whole"


def _unreachable(*_):
    raise OSError("the store is unreachable")
