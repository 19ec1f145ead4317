"""Where ``make kafka`` and ``make s3`` put the JVM components they resolve from Maven Central.

``jvm/*.pom.xml`` pin them; ``mvn`` copies each into its own folder under ``.jvm/`` (or
``$RECONF_JVM_DIR``). The examples, tests and benchmarks find them here; a cluster of your own
names the same coordinates in ``spark.jars.packages`` instead.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["JarsMissing", "jvm_dir", "resolved_jars"]


class JarsMissing(RuntimeError):
    """A component's jars were never resolved (its ``make`` target has not run)."""


def jvm_dir() -> Path:
    """``$RECONF_JVM_DIR``, else ``.jvm/`` at the repository root."""
    configured = os.environ.get("RECONF_JVM_DIR")
    return Path(configured) if configured else Path(__file__).resolve().parents[2] / ".jvm"


def resolved_jars(folder: str, what: str, make_target: str) -> list[Path]:
    """The jars ``make make_target`` copied into ``folder``; :class:`JarsMissing`, naming the fix, if none."""
    jars = sorted((jvm_dir() / folder).glob("*.jar"))
    if not jars:
        raise JarsMissing(
            f"no {what} jars in {jvm_dir() / folder}: run `make {make_target}` (it resolves them from Maven "
            f"Central with mvn), or set RECONF_JVM_DIR to where they are"
        )
    return jars
