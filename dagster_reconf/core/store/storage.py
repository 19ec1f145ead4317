"""Where checkpoints and event logs live: a local folder, or any Hadoop-compatible URL.

Spark reads and writes a stream's checkpoint and event logs through Hadoop's
FileSystem, so they may live on HDFS, S3, GCS, ADLS or a local disk. The control
plane reads them too (checkpoint facts, snapshots for rollback, trace ingestion), and
does so through fsspec (``universal_pathlib``'s pathlib API) with the same URL: a
``file://``, ``hdfs://``, ``s3a://``, ``gs://`` or ``abfs://`` root works wherever both
Spark (its connector jar) and fsspec (its backend: ``s3fs``, ``gcsfs``, ``adlfs``,
pyarrow's HDFS) can reach it. Without a URL everything stays under the runtime home,
as plain :class:`pathlib.Path` objects.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import fsspec
from upath import UPath

from dagster_reconf.core.store.atomic import replace_text

__all__ = [
    "Location",
    "copy_file",
    "file_sizes",
    "is_local",
    "location",
    "location_of",
    "make_dirs",
    "remove_tree",
    "spark_uri",
    "validate_storage_url",
    "write_whole",
]

Location = Path | UPath


def validate_storage_url(url: str) -> str:
    """``url`` if it is an absolute URL whose scheme fsspec knows; otherwise a ValueError naming the fix."""
    parts = urlsplit(url)
    if not parts.scheme or len(parts.scheme) == 1:  # "C:" is a drive letter, not a scheme
        raise ValueError(
            f"storage {url!r} is not a URL; use file:///abs/path, hdfs://namenode:8020/path, s3a://bucket/path, ..."
        )
    if parts.scheme not in fsspec.available_protocols():
        raise ValueError(
            f"storage {url!r}: scheme {parts.scheme!r} is not a filesystem fsspec knows; "
            "use file, hdfs, s3a, gs, abfs, ..."
        )
    if parts.scheme == "file" and not parts.path.startswith("/"):
        raise ValueError(f"storage {url!r}: a file URL needs an absolute path (file:///abs/path)")
    return url.rstrip("/")


def location(url: str) -> UPath:
    """The fsspec path of a storage URL (fsspec knows Hadoop's schemes, ``s3a`` included)."""
    return _url_path(validate_storage_url(url))


def location_of(value: Location | str) -> Location:
    """A location, or one written out with ``str()``: a URL back to a UPath, any other text to a local Path."""
    if not isinstance(value, str):
        return value
    return _url_path(value) if "://" in value else Path(value)


def _url_path(url: str) -> UPath:
    """The fsspec path of ``url``, with no listing cache on a remote store: Spark adds files there while the
    control plane reads (a commit, an event log), and s3fs, gcsfs and adlfs keep a listing until told otherwise,
    so a cached one would hide every batch committed after the first look."""
    path = UPath(url)
    return path if is_local(path) else UPath(url, use_listings_cache=False)


def is_local(path: Location) -> bool:
    """Whether ``path`` is on this machine's file system."""
    return not isinstance(path, UPath) or path.protocol in ("", "file", "local")


def spark_uri(path: Location) -> str:
    """``path`` as Spark's Hadoop FileSystem expects it: an absolute local path, or the URL."""
    if not isinstance(path, UPath):
        return str(path.resolve())
    if is_local(path):
        return Path(path.path).resolve().as_uri()
    return str(path)


def copy_file(source: Location, target: Location) -> None:
    """Copy one file between any two locations (local copies keep their modification time)."""
    if is_local(source) and is_local(target):
        shutil.copy2(_local(source), _local(target))
    else:
        target.write_bytes(source.read_bytes())


def file_sizes(root: Location) -> dict[str, int]:
    """Every file under the directory ``root``, as its path relative to ``root`` (``a/b.json``), with its size in bytes;
    ``{}`` where ``root`` is no directory.

    One recursive listing: on an object store that is a paged LIST, which carries every size, where a walk that asks
    each entry whether it is a file and how big would send two requests per file (a directory of N input files read
    every batch would cost 2N requests a batch).
    """
    if is_local(root):
        base = _local(root)
        found: dict[str, int] = {}
        for folder, _, names in os.walk(base):
            for name in names:
                path = Path(folder) / name
                try:
                    found[path.relative_to(base).as_posix()] = path.stat().st_size
                except FileNotFoundError:  # removed between the listing and the stat
                    continue
        return found
    prefix = root.path.rstrip("/") + "/"
    try:
        listing = root.fs.find(root.path, detail=True, withdirs=False)
    except FileNotFoundError:
        return {}
    return {
        name[len(prefix) :]: int(info.get("size") or 0)
        for name, info in listing.items()
        if name.startswith(prefix) and info.get("type") != "directory" and not name.endswith("/")
    }


def write_whole(path: Location, text: str) -> None:
    """Write ``path`` so that a reader elsewhere sees the old text or the new, never a part: a local file is replaced
    through a temporary; an object store's put is whole already. Its folder is made where missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if is_local(path):
        replace_text(_local(path), text)
    else:
        path.write_text(text)


def make_dirs(path: Location) -> None:
    """Create the directory ``path`` (and its parents) so that Hadoop sees it, whatever the store.

    An object store has no directories: fsspec's ``mkdir`` there does nothing, and Hadoop sees a
    folder only where an object lies under its prefix. So an empty one gets the marker Hadoop's
    S3A writes itself, an empty object named with a trailing slash (Spark refuses an event-log
    folder it cannot see).
    """
    path.mkdir(parents=True, exist_ok=True)
    if not is_local(path) and not path.exists():
        path.fs.pipe_file(path.path.rstrip("/") + "/", b"")
        path.fs.invalidate_cache(path.path)


def remove_tree(path: Location) -> None:
    """Remove a directory and everything under it; nothing if it does not exist."""
    if is_local(path):
        shutil.rmtree(_local(path), ignore_errors=True)
    elif path.exists():
        path.fs.rm(path.path, recursive=True)


def _local(path: Location) -> Path:
    return Path(path.path) if isinstance(path, UPath) else path
