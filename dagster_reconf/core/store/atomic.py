"""Files that readers in other processes may open at any time, replaced whole.

Drivers, sensors, runs and the CLI read specs, driver records, cursors and caches while another
process rewrites them: a reader must see the old file or the new one, never a part.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["replace_text"]


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: into a hidden temporary beside it (one per process and thread, so two
    writers at once never share one; ``.tmp``, which checkpoint copies and file sources pass by), then
    ``os.replace``. A failed write leaves the old file and no temporary."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
