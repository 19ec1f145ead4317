"""Checkpoints and event logs on a URL: validation, where paths point, and the control plane's
own reads and writes (checkpoint facts, snapshot and restore, trace ingestion) through fsspec.

fsspec's in-memory filesystem stands in for a remote store here: nothing on it is a local
file, so any code path that still used ``open``/``shutil`` on a checkpoint or event log
would fail these tests. Spark on a ``file://`` storage URL is in the integration tests.
"""

import json
import uuid

import pytest
from upath import UPath

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.spec import StreamSpec, restart_scope
from dagster_reconf.core.store.checkpoint import (
    CheckpointSnapshot,
    checkpoint_facts,
    free_bytes,
    stateful_operators,
    tree_bytes,
)
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.store.storage import file_sizes, location, location_of, spark_uri, validate_storage_url
from dagster_reconf.core.traces.store import TraceStore

from ..traces.test_store import events


@pytest.fixture(name="remote")
def remote_fixture():
    root = UPath(f"memory:///reconf-{uuid.uuid4().hex}")
    yield root
    root.fs.rm(root.path, recursive=True) if root.exists() else None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("relative/dir", "is not a URL"),
        ("/abs/dir", "is not a URL"),
        ("nosuchfs://x/y", "not a filesystem fsspec knows"),
        ("file://relative", "needs an absolute path"),
    ],
)
def test_bad_storage_urls_are_refused_with_the_fix(url, message):
    with pytest.raises(ValueError, match=message):
        validate_storage_url(url)
    with pytest.raises(SpecError, match="storage"):
        StreamSpec.parse({"name": "s", "entrypoint": "my_pkg.streams:orders", "storage": url})


def test_hadoop_urls_are_accepted_and_keep_their_scheme_for_spark(tmp_path):
    for url in ("hdfs://namenode:8020/reconf", "s3a://bucket/reconf", "gs://bucket/reconf", f"file://{tmp_path}"):
        assert validate_storage_url(url + "/") == url
    assert spark_uri(location(f"file://{tmp_path}") / "checkpoint") == (tmp_path / "checkpoint").as_uri()
    assert spark_uri(tmp_path / "checkpoint") == str(tmp_path / "checkpoint")
    assert location_of(str(location(f"file://{tmp_path}"))) == location(f"file://{tmp_path}")
    assert location_of(str(tmp_path)) == tmp_path


def test_paths_follow_the_specs_storage_and_storage_cannot_change_in_place(tmp_path):
    local = StreamPaths(tmp_path, "s")
    assert local.checkpoint == tmp_path / "streams" / "s" / "checkpoint"
    spec = StreamSpec(name="s", entrypoint="my_pkg.streams:orders", storage=f"file://{tmp_path}/remote")
    local.create()
    local.spec.write_text(spec.model_dump_json())
    assert spark_uri(local.checkpoint) == (tmp_path / "remote" / "streams" / "s" / "checkpoint").as_uri()
    assert spark_uri(local.event_log) == (tmp_path / "remote" / "streams" / "s" / "eventlog").as_uri()
    assert local.work == tmp_path / "streams" / "s" / "work"  # the stream's own files stay in the home
    with pytest.raises(SpecError, match="storage"):
        restart_scope(spec, spec.model_copy(update={"storage": None}))


def _write_checkpoint(root: UPath, batches: range, partitions: int) -> None:
    for batch in batches:
        conf = {
            "spark.sql.shuffle.partitions": str(partitions),
            "spark.sql.streaming.stateStore.providerClass": "org.apache.spark...RocksDBStateStoreProvider",
        }
        (root / "offsets" / str(batch)).write_text(
            f'v1\n{json.dumps({"conf": conf})}\n{{"index": {100 * (batch + 1)}}}'
        )
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "state" / "0" / "_metadata" / "metadata").write_text(
        'v1\n{"operatorInfo": {"operatorName": "stateStoreSave"}}'
    )
    (root / "state" / "0" / "0" / "1.zip").write_bytes(b"immutable state")


def test_checkpoint_facts_and_a_snapshot_restore_work_on_a_remote_checkpoint(remote, tmp_path):
    checkpoint = remote / "streams" / "s" / "checkpoint"
    _write_checkpoint(checkpoint, range(2), partitions=4)
    facts = checkpoint_facts(checkpoint, with_offsets=True)
    assert (facts.last_offset_batch, facts.last_committed_batch, facts.state_partitions) == (1, 1, 4)
    assert facts.end_offsets[1] == [{"index": 200}] and facts.uses_rocksdb and facts.stateful
    assert stateful_operators(checkpoint) == {"0": "stateStoreSave"}
    assert tree_bytes(checkpoint / "state") > 0 and free_bytes(checkpoint) is None

    snapshot = CheckpointSnapshot(tmp_path / "snapshot")
    manifest = snapshot.take(checkpoint, batch_id=1)
    assert manifest["copied"] > 0 and "state/0/0/1.zip" in manifest["files"]
    # What a migration does: plan and commit a batch with new partitions, add state files.
    _write_checkpoint(checkpoint, range(2, 3), partitions=8)
    (checkpoint / "state" / "0" / "5" / "3.zip").write_bytes(b"new partition")
    assert checkpoint_facts(checkpoint).state_partitions == 8
    assert snapshot.changes()["added"] == ["commits/2", "offsets/2", "state/0/5/3.zip"]

    (checkpoint / "state" / "0" / "_metadata" / "metadata").write_text("v1\n{}")  # rewritten, as a migration may
    assert snapshot.restore() == {"deleted": 3, "restored": manifest["copied"]}  # remote: every copy goes back
    assert checkpoint_facts(checkpoint).state_partitions == 4
    assert not (checkpoint / "state" / "0" / "5").exists()
    assert stateful_operators(checkpoint) == {"0": "stateStoreSave"}
    assert snapshot.changes() == {"added": [], "changed": [], "removed": []}


def test_trace_store_ingests_event_logs_from_a_remote_directory(remote, tmp_path):
    logs = remote / "streams" / "s" / "eventlog"
    (logs / "app-1.inprogress").write_text("".join(json.dumps(e) + "\n" for e in events()[:6]))
    store = TraceStore(tmp_path / "traces")
    first = store.ingest(logs)
    assert first.events == 5 and first.activities > 0
    (logs / "app-1").write_text("".join(json.dumps(e) + "\n" for e in events()))  # Spark completes the log
    (logs / "app-1.inprogress").unlink()
    assert store.ingest(logs).events == 2
    assert store.ingest(str(logs)).events == 0  # a URL string names the same logs


def test_stream_paths_take_a_str_home_and_refuse_a_name_that_is_not_one_folder(tmp_path):
    assert StreamPaths(str(tmp_path), "s").metrics == StreamPaths(tmp_path, "s").metrics
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError, match="cannot name a folder"):
            StreamPaths(tmp_path, bad)


@pytest.mark.parametrize("where", ["local", "remote"])
def test_file_sizes_lists_a_tree_once_with_every_size(where, remote, tmp_path, monkeypatch):
    root = (tmp_path / "in") if where == "local" else remote / "in"
    for name, size in {"a.json": 3, "sub/b.json": 5, "_spark_metadata/0": 1}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x" * size)
    if where == "remote":  # one listing carries the sizes: no request per file (2N a batch over N input files)
        monkeypatch.setattr(type(root.fs), "info", lambda *a, **k: pytest.fail("a request per file"))
    assert file_sizes(root) == {"a.json": 3, "sub/b.json": 5, "_spark_metadata/0": 1}
    assert file_sizes(root / "missing") == {}
