"""The precopy's checkpoint copy as of a committed batch, without Spark: what a running query wrote after that batch
(offsets, commits, state versions) stays out; what Spark needs to load that batch's state comes along."""

from dagster_reconf.core.store.checkpoint import copy_checkpoint_as_of, copy_offset_entry


def make_checkpoint(root, last_offset=6, last_commit=5):
    (root / "metadata").parent.mkdir(parents=True, exist_ok=True)
    (root / "metadata").write_text('{"id":"q"}')
    for log, last in (("offsets", last_offset), ("commits", last_commit)):
        (root / log).mkdir()
        for batch in range(last + 1):
            (root / log / str(batch)).write_text(
                f'v1\n{{"conf":{{"spark.sql.shuffle.partitions":"4"}}}}\n{{"end":{batch}}}'
            )
            (root / log / f".{batch}.crc").write_text("crc")
    (root / log / f".{last + 1}.5f0e.tmp").write_text("being written")
    partition = root / "state" / "0" / "3"
    (partition / "SSTs").mkdir(parents=True)
    for version in range(1, last_offset + 2):
        (partition / f"{version}.zip").write_text(f"version {version}")
    (partition / "SSTs" / "000099-a1.sst").write_text("sst")  # an SST's number is no state version
    (root / "state" / "0" / "_metadata").mkdir()
    (root / "state" / "0" / "_metadata" / "metadata").write_text("v1\n{}")
    (root / "sources" / "0").mkdir(parents=True)
    (root / "sources" / "0" / "9").write_text("v1\nfile")
    (root / "stray.txt").write_text("not Spark's")


def files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_the_copy_holds_the_checkpoint_as_of_the_batch_and_nothing_later(tmp_path):
    make_checkpoint(tmp_path / "live")
    counts = copy_checkpoint_as_of(tmp_path / "live", tmp_path / "copy", 3)
    copied = files(tmp_path / "copy")
    assert [f for f in copied if f.startswith("offsets/") and not f.endswith("crc")] == [
        f"offsets/{b}" for b in range(4)
    ]
    assert [f for f in copied if f.startswith("commits/") and not f.endswith("crc")] == [
        f"commits/{b}" for b in range(4)
    ]
    assert [f for f in copied if f.endswith(".zip")] == [
        f"state/0/3/{v}.zip" for v in (1, 2, 3, 4)
    ]  # batch 3 = version 4
    assert {"state/0/3/SSTs/000099-a1.sst", "state/0/_metadata/metadata", "sources/0/9", "metadata"} <= set(copied)
    assert not any(f.endswith(".tmp") or f == "stray.txt" for f in copied)
    assert counts["copied"] == len(copied) and counts["skipped"] > 0


def test_an_offset_entry_is_planned_under_another_batch_id_with_other_partitions(tmp_path):
    make_checkpoint(tmp_path / "live")
    copy_offset_entry(tmp_path / "live", tmp_path / "copy", 5, 6, as_batch=6)
    lines = (tmp_path / "copy" / "offsets" / "6").read_text().splitlines()
    assert '"spark.sql.shuffle.partitions":"6"' in lines[1] and lines[2] == '{"end":5}'
    assert not (tmp_path / "copy" / "offsets" / "5").exists() and (tmp_path / "copy" / "metadata").exists()
