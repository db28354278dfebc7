"""The byte layout of a GGUF file, checked against the file's size before anything is read.

:func:`check_layout` walks a GGUF (v2/v3) header with no allocation beyond the header's own
values: every declared count (tensors, metadata keys, array items) and length (strings, keys,
tensor names) is checked against the bytes left in the file before it is read, and every
tensor's data against the data section: its offset a multiple of ``general.alignment`` (default
32, a power of two), its bytes inside the file, no two tensors overlapping. Each failure is a
one-line ``ValueError`` naming the file and the field or tensor. A file without the GGUF magic
or with an unknown version is left to the ``gguf`` reader's own header error.
"""

from __future__ import annotations

import mmap
import os
import struct


#: the data alignment of a file without ``general.alignment``
DEFAULT_ALIGNMENT = 32
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_MIN_ITEM = {**_SCALAR, _STRING: 8, _ARRAY: 12}  # the fewest bytes one item takes
_MAX_DIMS = 8


class _Cursor:
    """Reads little- or big-endian values from a buffer, every read checked against its end."""

    def __init__(self, buf, path: str, order: str):
        self.buf, self.path, self.order, self.pos = buf, path, order, 0

    def left(self) -> int:
        return len(self.buf) - self.pos

    def fail(self, what: str):
        raise ValueError(f"GGUF file {self.path!r}: {what}")

    def need(self, n: int, what: str):
        if n > self.left():
            self.fail(f"{what} needs {n} more bytes but {self.left()} bytes remain (the file "
                      f"is truncated)")

    def unpack(self, fmt: str, what: str):
        size = struct.calcsize("<" + fmt)
        self.need(size, what)
        v = struct.unpack_from(self.order + fmt, self.buf, self.pos)[0]
        self.pos += size
        return v

    def count(self, n: int, each: int, what: str, kind: str):
        """Refuse ``n`` items of at least ``each`` bytes that the rest of the file cannot hold."""
        if n * each > self.left():
            self.fail(f"{what} declares {n} {kind} but {self.left()} bytes remain")

    def string(self, what: str) -> bytes:
        n = self.unpack("Q", what)
        if n > self.left():
            self.fail(f"{what} declares a string of {n} bytes but {self.left()} bytes remain")
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return s


def _value(cur: _Cursor, vtype: int, what: str):
    """Skip (or, for a UINT32, return) one value of type ``vtype``."""
    if vtype in _SCALAR:
        if vtype == _UINT32:
            return cur.unpack("I", what)
        cur.need(_SCALAR[vtype], what)
        cur.pos += _SCALAR[vtype]
        return None
    if vtype == _STRING:
        cur.string(what)
        return None
    if vtype == _ARRAY:
        itype = cur.unpack("I", what)
        n = cur.unpack("Q", what)
        if itype not in _MIN_ITEM:
            cur.fail(f"{what} is an array of unknown value type {itype}")
        kind = {_STRING: "strings", _ARRAY: "arrays"}.get(itype, "values")
        cur.count(n, _MIN_ITEM[itype], what, kind)
        if itype in _SCALAR:
            cur.pos += n * _SCALAR[itype]
        else:
            for _ in range(n):
                _value(cur, itype, what)
        return None
    cur.fail(f"{what} has unknown value type {vtype}")


def check_layout(path: str, quant_sizes) -> None:
    """Check the header and tensor layout of the GGUF file ``path`` against its size.

    Args:
        path: the file.
        quant_sizes: ``gguf.GGML_QUANT_SIZES`` keyed by the integer tensor type
            (type -> (block size, bytes per block)).

    Raises:
        ValueError: a count or length larger than the bytes left, a bad ``general.alignment``,
            an unknown tensor type, or a tensor's data misaligned, outside the file or
            overlapping another tensor's, naming the file and the field or tensor.
    """
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size < 8:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            _check(buf, path, quant_sizes)


def _check(buf, path: str, quant_sizes) -> None:
    if bytes(buf[:4]) != b"GGUF":
        return
    order = "<"
    version = struct.unpack_from("<I", buf, 4)[0]
    if version & 0xFFFF == 0:
        order, version = ">", struct.unpack_from(">I", buf, 4)[0]
    if version not in (2, 3):
        return
    cur = _Cursor(buf, path, order)
    cur.pos = 8
    n_tensors = cur.unpack("Q", "the header's tensor_count")
    n_kv = cur.unpack("Q", "the header's kv_count")
    cur.count(n_kv, 8 + 4 + 1, "the header's kv_count", "metadata keys")
    cur.count(n_tensors, 8 + 4 + 4 + 8, "the header's tensor_count", "tensors")
    alignment = DEFAULT_ALIGNMENT
    for j in range(n_kv):
        key = cur.string(f"metadata key #{j}").decode("utf-8", "replace")
        what = f"metadata key {key!r}"
        vtype = cur.unpack("I", what)
        v = _value(cur, vtype, what)
        if key == "general.alignment":
            if vtype != _UINT32 or v == 0 or v & (v - 1):
                cur.fail(f"metadata 'general.alignment' must be a UINT32 power of two, got "
                         f"{v if vtype == _UINT32 else f'value type {vtype}'}")
            alignment = v
    infos = []
    for j in range(n_tensors):
        name = cur.string(f"tensor #{j}'s name").decode("utf-8", "replace")
        what = f"tensor {name!r}"
        n_dims = cur.unpack("I", what)
        if n_dims > _MAX_DIMS:
            cur.fail(f"{what} declares {n_dims} dimensions (at most {_MAX_DIMS})")
        dims = [cur.unpack("Q", what) for _ in range(n_dims)]
        ttype = cur.unpack("I", what)
        offset = cur.unpack("Q", what)
        infos.append((name, dims, ttype, offset))
    start = cur.pos + (-cur.pos) % alignment
    size = len(buf)
    spans = []
    for name, dims, ttype, offset in infos:
        what = f"tensor {name!r}"
        if ttype not in quant_sizes:
            cur.fail(f"{what} has unknown tensor type {ttype}")
        block, type_size = quant_sizes[ttype]
        n = 1
        for x in dims:
            n *= x
        if dims and dims[0] % block:
            cur.fail(f"{what} has {dims[0]} elements per row, not a multiple of its type's "
                     f"block of {block}")
        n_bytes = n // block * type_size
        if offset % alignment:
            cur.fail(f"{what} has data offset {offset}, not a multiple of general.alignment "
                     f"{alignment}")
        if start + offset + n_bytes > size:
            cur.fail(f"{what} declares {n_bytes} bytes at data offset {offset} but the data "
                     f"section holds {max(size - start, 0)} bytes")
        spans.append((offset, offset + n_bytes, name))
    spans.sort()
    for (a0, a1, a), (b0, _, b) in zip(spans, spans[1:]):
        if b0 < a1:
            cur.fail(f"tensor {b!r} (data offset {b0}) overlaps tensor {a!r} (bytes {a0} to "
                     f"{a1})")
