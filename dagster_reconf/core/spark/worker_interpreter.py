"""The executable Spark starts local Python workers with: this interpreter, importing PySpark from site-packages.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and Py4J's zip first on every Python
worker's ``PYTHONPATH``. With PySpark installed by pip, ``$SPARK_HOME`` is the installed
package, and its zip holds the same modules without compiled bytecode, so a worker that
imports PySpark from it compiles them again. Workers forked by PySpark's daemon pay that
once per session; a Python data source pays it at every query start, where Spark starts a
new worker for its streaming reader, inside a reconfiguration's pause.

:func:`worker_python` writes a shell shim that drops exactly those two zips (this
interpreter's own PySpark: the same modules, compiled) and execs this interpreter. It is
for local masters only: a cluster's executors could not find a shim written here.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import sys
import tempfile
from pathlib import Path

import pyspark

__all__ = ["worker_python"]

log = logging.getLogger(__name__)

_SHIM = """#!/bin/sh
# Written by dagster-reconf (dagster_reconf/core/spark/worker_interpreter.py): runs Spark's Python workers with
# {python}, importing PySpark from site-packages rather than from the uncompiled zips Spark puts first.
set -f
IFS=:
kept=
for entry in $PYTHONPATH; do
  case "$entry" in
    {zips}) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
unset IFS
PYTHONPATH="$kept" exec {python} "$@"
"""


def _bundled_zips() -> list[Path]:
    """The zips Spark adds for this interpreter's PySpark (``$SPARK_HOME/python/lib`` of the installed package)."""
    lib = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    return sorted(lib.glob("pyspark.zip")) + sorted(lib.glob("py4j-*-src.zip"))


def worker_python(directory: Path | None = None) -> str:
    """The path of the shim for this interpreter (written once per interpreter and PySpark), or this interpreter
    itself where the installed PySpark has no zips or the shim cannot be written."""
    zips = _bundled_zips()
    if not zips:
        return sys.executable
    script = _SHIM.format(python=shlex.quote(sys.executable), zips="|".join(shlex.quote(str(z)) for z in zips))
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    directory = directory or Path(tempfile.gettempdir()) / f"dagster-reconf-{os.getuid()}"
    shim = directory / f"python-{digest}"
    try:
        if shim.exists() and shim.read_text() == script and os.access(shim, os.X_OK):
            return str(shim)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        staged = directory / f".{shim.name}.{os.getpid()}"
        staged.write_text(script)
        staged.chmod(0o755)
        os.replace(staged, shim)  # atomic: drivers starting at once never run a half-written shim
    except OSError as exc:
        log.warning(
            "Python workers will import PySpark from Spark's zips (slower to start): cannot write %s: %s", shim, exc
        )
        return sys.executable
    return str(shim)
