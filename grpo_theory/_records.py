"""Line-by-line JSON records: one reader for the files users hand the package (prompts, reward
logs), streamed, every error naming the file and the 1-based line."""

from __future__ import annotations

import json
from pathlib import Path


def jsonl_records(path):
    """``(line number, value)`` for every non-blank line of a UTF-8 JSON-lines file, one line at a
    time (nothing beyond one line is held).

    Args:
        path: the file.

    Yields:
        ``(line number, decoded JSON value)``; a ``ValueError`` naming ``path:line`` for a line
        that is not UTF-8 or not valid JSON.
    """
    p = Path(path)
    with open(p, "rb") as fh:
        for no, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{p}:{no}: not UTF-8 (byte {raw[e.start]:#04x} at column "
                                 f"{e.start + 1})") from None
            if not line.strip():
                continue
            try:
                yield no, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{no}: not valid JSON ({e.msg})") from None
