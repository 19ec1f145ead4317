"""The codecs of Spark's event logs, in the framings Spark writes them, tolerant of damage and of a file still being
written.

``zstd`` (Spark 4's default) as concatenated frames; ``lz4`` as lz4-java's ``LZ4BlockOutputStream`` blocks; ``snappy``
as snappy-java's ``SnappyOutputStream`` chunks (plain ``lz4`` or ``snappy`` tools read neither). A damaged block is
skipped and counted; an incomplete one at the end of a file being written is left for the next read.
"""

from __future__ import annotations

import io
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterator

import cramjam
import lz4.block
import zstandard

from dagster_reconf.core.errors import EventLogError
from dagster_reconf.core.store.storage import Location

__all__ = ["CHUNK_BYTES", "codec_of", "decompressed", "first_block"]

_CODEC_SUFFIX = re.compile(r"\.(lz4|lzf|snappy|zstd)(\.inprogress)?$")
CHUNK_BYTES = 1 << 20
_LZ4_MAGIC = b"LZ4Block"
_SNAPPY_MAGIC = b"\x82SNAPPY\x00"


def codec_of(path: Location) -> str | None:
    match = _CODEC_SUFFIX.search(path.name)
    return match.group(1) if match else None


def _lz4_blocks(data: bytes, damage: Counter, complete: bool) -> Iterator[bytes]:
    """lz4-java's LZ4BlockOutputStream: magic, token, lengths, checksum, block; repeated.

    A block that does not start with the magic or does not decompress is skipped to the next
    magic and counted in ``damage``; a block cut short at the end is a block still being
    written (counted only once the file is ``complete``).
    """
    header = struct.Struct("<8sBiii")
    if len(data) >= len(_LZ4_MAGIC) and data.find(_LZ4_MAGIC) < 0:
        raise EventLogError("lz4 event log has no block starting with lz4-java's magic: not Spark's lz4 codec")
    position = 0
    while position + header.size <= len(data):
        magic, token, compressed, length, _checksum = header.unpack_from(data, position)
        body_start = position + header.size
        if magic == _LZ4_MAGIC and compressed == 0 and length == 0:
            position = body_start  # end-of-stream marker; a rolled-over stream may follow
            continue
        if magic == _LZ4_MAGIC and 0 <= compressed and body_start + compressed > len(data) and length >= 0:
            break  # a block still being written (or cut off)
        try:
            if magic != _LZ4_MAGIC or compressed < 0 or length < 0:
                raise ValueError("not an lz4-java block")
            body = data[body_start : body_start + compressed]
            block = body if token & 0xF0 == 0x10 else lz4.block.decompress(body, uncompressed_size=length)
        except (ValueError, lz4.block.LZ4BlockError):
            following = data.find(_LZ4_MAGIC, position + 1)
            _count_damage(damage, (following if following >= 0 else len(data)) - position)
            if following < 0:
                return
            position = following
            continue
        yield block
        position = body_start + compressed
    if complete and position < len(data):
        _count_damage(damage, len(data) - position, "truncated compressed block")


def _snappy_blocks(data: bytes, damage: Counter, complete: bool) -> Iterator[bytes]:
    """snappy-java's SnappyOutputStream: a 16-byte header, then (big-endian length, raw snappy) blocks.

    Its blocks carry no marker to find the next one by, so a block that does not decompress
    ends the read there; what follows is counted in ``damage``.
    """
    if len(data) < 16:
        return
    if not data.startswith(_SNAPPY_MAGIC):
        raise EventLogError(
            "snappy event log does not start with snappy-java's stream header: not Spark's snappy codec"
        )
    position = 16
    while position + 4 <= len(data):
        (compressed,) = struct.unpack_from(">i", data, position)
        if compressed >= 0 and position + 4 + compressed > len(data):
            break  # a block still being written (or cut off)
        try:
            if compressed < 0:
                raise cramjam.DecompressionError("negative block length")
            block = bytes(cramjam.snappy.decompress_raw(data[position + 4 : position + 4 + compressed]))
        except cramjam.DecompressionError:
            _count_damage(damage, len(data) - position)
            return
        yield block
        position += 4 + compressed
    if complete and position < len(data):
        _count_damage(damage, len(data) - position, "truncated compressed block")


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _zstd_blocks(data: bytes, damage: Counter, complete: bool) -> Iterator[bytes]:
    """The content of a zstd stream (one frame or many). Read in one go where it is sound; where a frame is damaged,
    frame by frame, skipping a damaged one to the next frame's magic number and counting it in ``damage``. The last
    frame may be incomplete (a file being written): what it holds so far is returned."""
    if len(data) >= len(_ZSTD_MAGIC) and data.find(_ZSTD_MAGIC) < 0:
        raise EventLogError("zstd event log has no zstd frame: not a zstd file")
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    chunks = []
    try:
        while chunk := reader.read(CHUNK_BYTES):
            chunks.append(chunk)
        yield from chunks
        return
    except zstandard.ZstdError:
        pass  # a damaged frame, or an incomplete one at the end: frame by frame
    position = 0
    while position < len(data):
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        try:
            chunk = decompressor.decompress(memoryview(data)[position:])
        except zstandard.ZstdError:
            following = data.find(_ZSTD_MAGIC, position + 1)
            if following < 0:
                if complete:
                    _count_damage(damage, len(data) - position)
                return
            _count_damage(damage, following - position)
            position = following
            continue
        yield chunk
        if not decompressor.eof:
            if complete:
                _count_damage(damage, len(decompressor.unused_data), "truncated compressed block")
            return
        position = len(data) - len(decompressor.unused_data)


def _count_damage(damage: Counter, size: int, reason: str = "damaged compressed block") -> None:
    damage[reason] += 1
    damage[f"{reason} bytes"] += size


def _blocks(path: Location, codec: str) -> Callable[[bytes, Counter, bool], Iterator[bytes]]:
    """The block reader of ``codec``.

    Raises:
        EventLogError: a codec Spark's event logs do not use here.
    """
    blocks = {"zstd": _zstd_blocks, "lz4": _lz4_blocks, "snappy": _snappy_blocks}.get(codec)
    if blocks is None:
        raise EventLogError(f"event log {path.name}: codec {codec!r} is not supported; use zstd, lz4 or snappy")
    return blocks


def decompressed(path: Location, damage: Counter | None = None, complete: bool = False) -> bytes:
    """The decompressed bytes of one event log file, as far as they can be read.

    Damaged compressed blocks are skipped where the codec allows finding the next one, and
    counted in ``damage``; an incomplete block at the end of a file being written is left for
    the next read (and counted as truncated once the file is ``complete``).
    """
    codec = codec_of(path)
    with path.open("rb") as raw:
        data = raw.read()
    if codec is None:
        return data
    return b"".join(_blocks(path, codec)(data, Counter() if damage is None else damage, complete))


def first_block(path: Location) -> bytes:
    """The first decompressed block of a file (its first lines), without decompressing the rest."""
    codec = codec_of(path)
    with path.open("rb") as raw:
        data = raw.read(CHUNK_BYTES if codec is None else 4 * CHUNK_BYTES)
    if codec is None:
        return data
    return next(iter(_blocks(path, codec)(data, Counter(), False)), b"")
