import os

import pytest

from .postgres_server import postgres_bin, postgres_server
from .timeout_margin import pytest_configure  # noqa: F401  (each test's time against its timeout)


@pytest.fixture(name="postgres_url", scope="session")
def postgres_url_fixture():
    """A real PostgreSQL server on 127.0.0.1 for the test session (skipped only where none is installed)."""
    if postgres_bin() is None:
        if os.environ.get("RECONF_REQUIRE_POSTGRES") == "1":
            pytest.fail(
                "PostgreSQL is required (RECONF_REQUIRE_POSTGRES=1) but not installed: apt-get install postgresql"
            )
        pytest.skip("PostgreSQL server not installed (apt-get install postgresql); `make test` installs it")
    with postgres_server() as url:
        yield url
