"""A module that fails on import, as a user's module with a missing dependency does."""

import definitely_not_installed_package  # noqa: F401
