"""A module that exits when imported (a user's script left as a module)."""

import sys

sys.exit(0)
