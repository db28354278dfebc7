"""The study entry points' shared command line (``python -m grpo_theory.studies...``).

What every entry point shares with ``grpo-theory``: each failure is one line ``PROG: error:
...`` on stderr with exit code 2 (``GRPO_THEORY_DEBUG=1`` re-raises it with its traceback), and
every flag value that cannot work is refused by argparse before any sampling. Also here: the
content hash that keys a resumable checkpoint by the model's bytes (not its file name), and
readers of the saved tables (CSV, JSON, NumPy) whose every failure names the file and the field.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from .cli import DEBUG_ENV, error_line  # one copy, in the light command-line module


def run_main(prog: str, body, argv=None) -> int:
    """Run ``body(argv)`` as a command: its return code, or one line ``prog: error: ...`` and
    2 for any exception (:func:`error_line`; ``GRPO_THEORY_DEBUG=1`` re-raises it), 130 on
    Ctrl-C. argparse's own refusals (exit 2, one usage line) pass through.

    Args:
        prog: the command's name in the error line; body: ``body(argv) -> int``; argv: the
            arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    try:
        return body(argv)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; the finished cells are on disk and the same command "
              "resumes from them", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every failure is one line for a user
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        print(f"{prog}: error: {error_line(e)}", file=sys.stderr)
        return 2


# --- argparse types: each refuses with the flag's name (argparse adds it) -------------------------

def _int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (``"2.5"``, ``"1e3"``, ``"0"`` refused)."""
    v = _int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return v


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return v


def positive_float(text: str) -> float:
    """A finite number > 0 (``nan``, ``inf``, ``0`` refused)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return v


def int_list(minimum: int = 1):
    """An argparse type: comma-separated integers >= ``minimum``, strictly increasing (a
    repeated or unsorted value is refused: it would double-count or reorder a grid)."""
    def parse(text: str) -> tuple:
        parts = [p.strip() for p in str(text).split(",")]
        if not parts or any(p == "" for p in parts):
            raise argparse.ArgumentTypeError(f"must be comma-separated integers, got {text!r}")
        vals = tuple(_int(p) for p in parts)
        if min(vals) < minimum:
            raise argparse.ArgumentTypeError(f"must be integers >= {minimum}, got {text!r}")
        if any(b <= a for a, b in zip(vals, vals[1:])):
            raise argparse.ArgumentTypeError(f"must be strictly increasing (no repeats), "
                                             f"got {text!r}")
        return vals
    return parse


def name_list(choices):
    """An argparse type: comma-separated distinct names, each one of ``choices``."""
    def parse(text: str) -> tuple:
        names = tuple(p.strip() for p in str(text).split(","))
        bad = [n for n in names if n not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]!r} is not one of {list(choices)}")
        if len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"names must be distinct, got {text!r}")
        return names
    return parse


# --- content hashes: a resume key names the model by its bytes ----------------------------------

def content_hash(path, name: str = "model") -> str:
    """SHA-256 (hex, 16 digits) of a file's bytes, or of a folder's files (relative paths and
    bytes, sorted): two models with the same file name and other weights differ.

    Args:
        path: a file or folder; name: the argument named in the error.
    """
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{name} {str(path)!r}: no such file or folder")
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
    for q in files:
        if p.is_dir():
            h.update(str(q.relative_to(p)).encode() + b"\0")
        with open(q, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


# --- readers whose failures name the file and the field -----------------------------------------

def read_csv(path, columns=(), **kw) -> pd.DataFrame:
    """``pd.read_csv(path)`` with ``columns`` required; a missing, damaged or incomplete file is
    a ``ValueError`` naming it (and the missing column)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        df = pd.read_csv(path, **kw)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError,
            ValueError) as e:
        raise ValueError(f"{path} is not a readable CSV table ({' '.join(str(e).split())})"
                         ) from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{path} lacks the column {missing[0]!r} (damaged, or written by "
                         "another version)")
    return df


def read_json(path, fields=()) -> dict:
    """A JSON object with ``fields`` required; failures name the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        d = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(d).__name__}")
    missing = [f for f in fields if f not in d]
    if missing:
        raise ValueError(f"{path} lacks the field {missing[0]!r}")
    return d


def load_npz(path, keys) -> dict:
    """The arrays ``keys`` of a ``.npz`` file (read into memory); a damaged file or a missing
    array is a ``ValueError`` naming the file and the array."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in keys if k not in f.files]
            if missing:
                raise ValueError(f"{path} lacks the array {missing[0]!r}")
            return {k: f[k] for k in keys}
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"{path} is not a readable .npz file ({e})") from None
    except ValueError as e:
        if str(path) in str(e):
            raise
        raise ValueError(f"{path} is not a readable .npz file ({e})") from None


def reuse_or_recompute(path, read, what: str = "cell"):
    """The saved result at ``path`` when ``read(path)`` accepts it, else None (recompute).

    ``read(path)`` returns the result or raises ``ValueError`` saying why the file cannot be
    reused (damaged, truncated, another configuration); that reason is a warning naming the
    file, never silence.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return read(path)
    except ValueError as e:
        warnings.warn(f"{what} {path} is recomputed: {' '.join(str(e).split())}", stacklevel=2)
        return None
