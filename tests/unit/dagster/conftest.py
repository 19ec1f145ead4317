"""Every test here runs under its own Dagster test instance.

Resolving a ``Definitions`` reads Dagster's current defs-state storage, a context variable that each instance sets
for as long as it lives and that an earlier test's instance (an integration test's ``materialize``, in the same
pytest process) can leave pointing at itself after it is gone: resolving then fails with "Attempted to resolve
undefined DagsterInstance weakref", depending on the order the tests ran in. A live instance per test sets it afresh.
"""

import dagster
import pytest


@pytest.fixture(autouse=True)
def _live_dagster_instance():
    with dagster.instance_for_test() as instance:
        yield instance
