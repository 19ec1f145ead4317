import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from dagster_reconf.core.spark.worker_interpreter import _bundled_zips, worker_python

pytestmark = pytest.mark.skipif(not _bundled_zips(), reason="this PySpark ships no zips")


def run_shim(shim: str, pythonpath: str) -> dict:
    probe = "import json, sys, pyspark; print(json.dumps({'path': sys.path, 'pyspark': pyspark.__file__}))"
    out = subprocess.run(
        [shim, "-c", probe],
        env={**os.environ, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def test_the_shim_drops_sparks_own_zips_and_keeps_the_rest_of_the_path(tmp_path):
    zips = [str(z) for z in _bundled_zips()]
    users = tmp_path / "user code"  # a space, to check the quoting
    users.mkdir()
    shim = worker_python(tmp_path / "shims")
    seen = run_shim(shim, os.pathsep.join([*zips, str(users), "/elsewhere/*.zip"]))
    assert not set(zips) & set(seen["path"]), seen["path"]
    assert str(users) in seen["path"] and "/elsewhere/*.zip" in seen["path"]
    assert seen["pyspark"] == pyspark.__file__, "PySpark compiled, from this interpreter's site-packages"


def test_the_shim_is_written_once_per_interpreter(tmp_path):
    first = worker_python(tmp_path)
    written = Path(first).stat().st_mtime_ns
    assert worker_python(tmp_path) == first and Path(first).stat().st_mtime_ns == written
    assert Path(first).read_text().endswith(f'exec {shlex.quote(sys.executable)} "$@"\n')


def test_without_a_writable_place_workers_use_this_interpreter(tmp_path):
    blocked = tmp_path / "a file"
    blocked.write_text("not a directory")
    assert worker_python(blocked / "shims") == sys.executable
