"""Files replaced whole, for readers in other processes."""

import pytest

from dagster_reconf.core.store.atomic import replace_text


def test_a_file_is_written_then_replaced_whole_and_no_temporary_is_left(tmp_path):
    path = tmp_path / "driver.json"
    replace_text(path, '{"pid": 1}')
    replace_text(path, '{"pid": 2}')
    assert path.read_text() == '{"pid": 2}'
    assert [p.name for p in tmp_path.iterdir()] == ["driver.json"]


def test_a_failed_replace_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    blocked = tmp_path / "spec.json"
    blocked.mkdir()  # a directory where the file should go: os.replace fails
    with pytest.raises(OSError):
        replace_text(blocked, "{}")
    assert blocked.is_dir() and [p.name for p in tmp_path.iterdir()] == ["spec.json"]
