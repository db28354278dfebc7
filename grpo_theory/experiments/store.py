"""The cell store: every finished cell is one CSV file, written atomically and validated on read.

Layout under an experiment's folder ``<out>/<experiment>/``::

    cells/<setting>/seed<seed>/<cell id>-<hash>.csv   one file per finished cell
    <kind>.csv                                        tidy tables assembled from the cells
    run.json                                          manifest of the last run (setting, seed, ...)

A cell file is identified by everything that determines it: the experiment, the setting, the
cell configuration and the seed (their SHA-256 is the ``<hash>`` part of the name and the
``cell_hash`` column). Every row also records the package version and the cell's row count, so
a file that was truncated, garbled, edited or written by another seed or setting is detected
when it is read: :meth:`CellStore.read` returns ``None`` (with a warning naming the file) and
the runner recomputes the cell. Files are created through a temporary file and ``os.replace``
(never half-written) with the permissions the umask allows (``0o666 & ~umask``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd


#: columns the store adds to every row (they identify the cell and are checked on read)
META_COLUMNS = ("experiment", "setting", "seed", "cell", "cell_hash", "kind", "n_rows",
                "version")
#: dtypes a schema may name; a trailing ``?`` allows missing / non-finite values
DTYPES = ("float", "int", "str", "bool")


class CellSchemaError(ValueError):
    """Rows that do not match the experiment's declared schema."""


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``):
    setting it to 0 and back would briefly give other threads' new files mode 0o666."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0)
    os.umask(old)
    return old


def file_mode() -> int:
    """``0o666`` minus the process umask: what ``open(..., "w")`` would give a new file."""
    return 0o666 & ~_umask()


def atomic_write_text(path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace`` (umask honoured)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_csv(path, df: pd.DataFrame) -> Path:
    """Write ``df`` as CSV (no index) to ``path`` atomically (:func:`atomic_write_text`)."""
    return atomic_write_text(path, df.to_csv(index=False))


CHECKSUM_PREFIX = "#sha256:"


def cell_text(df: pd.DataFrame) -> str:
    """A cell file's text: the CSV, then one line ``#sha256:<digest of the CSV text>``."""
    body = df.to_csv(index=False)
    return body + CHECKSUM_PREFIX + hashlib.sha256(body.encode()).hexdigest() + "\n"


def verified_body(path) -> str:
    """The CSV text of a cell file whose checksum line matches; ``CellSchemaError`` otherwise
    (a truncated file, or one whose numbers were edited, even to other finite values)."""
    raw = Path(path).read_bytes().decode("utf-8")
    i = raw.rfind(CHECKSUM_PREFIX)
    if i < 0:
        raise CellSchemaError("no checksum line (truncated or not written by the runner)")
    body, digest = raw[:i], raw[i + len(CHECKSUM_PREFIX):].strip()
    if hashlib.sha256(body.encode()).hexdigest() != digest:
        raise CellSchemaError("checksum mismatch (the file was edited or damaged)")
    return body


def check_out_dir(out) -> Path:
    """The output folder, created if needed; a clear ``ValueError`` if it cannot be written.

    Checked before any work starts, so a bad ``--out`` never costs a computed cell.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file, not a folder; give a folder name")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out, prefix=".write-test-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise ValueError(f"--out {str(out)!r} is not a writable folder ({e.strerror or e}); "
                         "choose a folder you can write to") from None
    return out


def _canonical(obj):
    """JSON-ready form of a configuration (tuples as lists, numpy scalars as Python numbers)."""
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return [_canonical(v) for v in obj.tolist()]
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__class__": type(obj).__name__, **_canonical(dataclasses.asdict(obj))}
    if hasattr(obj, "tag") and callable(obj.tag):  # configuration objects with a stable tag
        return obj.tag()
    raise TypeError(f"cell configurations must be JSON-like (dict, list, number, str); got "
                    f"{type(obj).__name__}")


def config_json(config: dict) -> str:
    return json.dumps(_canonical(config), sort_keys=True, separators=(",", ":"))


def cell_hash(experiment: str, setting: str, cell_id: str, config: dict, seed: int) -> str:
    """SHA-256 (hex, 16 digits) of everything that determines a cell."""
    blob = json.dumps([experiment, setting, cell_id, config_json(config), int(seed)])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", s)[:120]


def _parse_spec(spec: str) -> tuple[str, bool]:
    base, optional = (spec[:-1], True) if spec.endswith("?") else (spec, False)
    if base not in DTYPES:
        raise ValueError(f"schema dtype {spec!r} is not one of {DTYPES} (optionally with '?')")
    return base, optional


def validate_rows(df: pd.DataFrame, schema: dict, where: str) -> pd.DataFrame:
    """Check ``df`` against ``schema`` ({column: dtype}); return it with the dtypes applied.

    Raises :class:`CellSchemaError` naming ``where`` and the first problem: a missing column,
    a value that does not parse as the declared dtype, a missing or non-finite number in a
    column whose dtype has no ``?``.
    """
    df = df.copy()
    for col, spec in schema.items():
        base, optional = _parse_spec(spec)
        if col not in df.columns:
            raise CellSchemaError(f"{where}: column {col!r} is missing")
        s = df[col]
        if base in ("float", "int"):
            num = pd.to_numeric(s, errors="coerce")
            bad = num.isna() & s.notna()
            if bad.any():
                raise CellSchemaError(f"{where}: column {col!r} has non-numeric value "
                                      f"{s[bad].iloc[0]!r}")
            if not optional and not np.isfinite(num.to_numpy(dtype=float)).all():
                raise CellSchemaError(f"{where}: column {col!r} has a missing or non-finite "
                                      "value")
            if base == "int":
                vals = num.dropna().to_numpy(dtype=float)
                if not np.all(np.isfinite(vals) & (vals == np.round(vals))):
                    raise CellSchemaError(f"{where}: column {col!r} must hold integers")
                num = num.astype("Int64" if optional else "int64")
            df[col] = num
        elif base == "bool":
            mapped = s.map(lambda v: {True: True, False: False, "True": True, "False": False,
                                      "true": True, "false": False, 1: True, 0: False}.get(v))
            if (mapped.isna() & (s.notna() | (not optional))).any():
                raise CellSchemaError(f"{where}: column {col!r} must hold booleans")
            df[col] = mapped.astype(bool) if not optional else mapped
        else:
            if not optional and s.isna().any():
                raise CellSchemaError(f"{where}: column {col!r} has a missing value")
            df[col] = s.astype(object).where(s.notna(), None)
            df[col] = df[col].map(lambda v: v if v is None else str(v))
    return df


class CellStore:
    """Atomic, validated, resumable storage of one experiment's cells for one (setting, seed)."""

    def __init__(self, exp_dir, experiment: str, setting: str, seed: int, schema: dict,
                 version: str):
        """Cells go to ``exp_dir/cells/<setting>/seed<seed>/``.

        Args:
            exp_dir: the experiment's folder (``<out>/<experiment>``).
            experiment, setting, seed: what identifies the cells (with each cell's config).
            schema: ``{kind: {column: dtype}}`` (dtype in :data:`DTYPES`, ``?`` = may be missing).
            version: the package version recorded in every row.
        """
        self.dir = Path(exp_dir)
        self.experiment, self.setting, self.seed = experiment, setting, int(seed)
        self.schema, self.version = schema, version
        self.cells = self.dir / "cells" / _safe(setting) / f"seed{self.seed}"

    def path(self, cell) -> Path:
        h = cell_hash(self.experiment, self.setting, cell.id, cell.config, self.seed)
        return self.cells / f"{_safe(cell.id)}-{h}.csv"

    def _frame(self, cell, rows) -> pd.DataFrame:
        if isinstance(rows, pd.DataFrame):
            df = rows.reset_index(drop=True).copy()
        else:
            df = pd.DataFrame([rows] if isinstance(rows, dict) else list(rows))
        if df.empty:
            raise CellSchemaError(f"cell {cell.id!r} of {self.experiment} returned no rows")
        clash = [c for c in META_COLUMNS + ("config",) if c in df.columns]
        if clash:
            raise CellSchemaError(f"cell {cell.id!r} of {self.experiment} returned reserved "
                                  f"column(s) {clash}")
        schema = self.schema.get(cell.kind)
        if schema is None:
            raise CellSchemaError(f"{self.experiment} declares no schema for kind {cell.kind!r}")
        validate_rows(df, schema, f"cell {cell.id!r} of {self.experiment}")
        meta = dict(experiment=self.experiment, setting=self.setting, seed=self.seed,
                    cell=cell.id, cell_hash=self.path(cell).stem.rsplit("-", 1)[1],
                    kind=cell.kind, n_rows=len(df), version=self.version,
                    config=config_json(cell.config))
        for k, v in meta.items():
            df[k] = v
        return df

    def write(self, cell, rows) -> pd.DataFrame:
        """Validate ``rows`` against the schema and write the cell atomically; return the frame."""
        df = self._frame(cell, rows)
        atomic_write_text(self.path(cell), cell_text(df))
        return df

    def read(self, cell, warn: bool = True):
        """The cell's rows if its file exists and is valid, else ``None`` (warning if invalid)."""
        path = self.path(cell)
        if not path.exists():
            return None
        try:
            # text columns are read as text: a hash such as "0123e45..." or a label "007" must
            # not come back as a number
            text = [c for c in META_COLUMNS + ("config",) if c not in ("seed", "n_rows")]
            text += [c for c, spec in self.schema.get(cell.kind, {}).items()
                     if _parse_spec(spec)[0] == "str"]
            body = verified_body(path)
            df = pd.read_csv(io.StringIO(body), keep_default_na=True,
                             dtype=dict.fromkeys(text, str))
            expect = dict(experiment=self.experiment, setting=self.setting, seed=self.seed,
                          cell=cell.id, cell_hash=path.stem.rsplit("-", 1)[1], kind=cell.kind)
            for col in META_COLUMNS + ("config",):
                if col not in df.columns:
                    raise CellSchemaError(f"column {col!r} is missing")
            for col, val in expect.items():
                if not (df[col].astype(str) == str(val)).all():
                    raise CellSchemaError(f"column {col!r} is not {val!r}")
            if not (df["config"] == config_json(cell.config)).all():
                raise CellSchemaError("column 'config' does not match the cell's configuration")
            n = pd.to_numeric(df["n_rows"], errors="coerce")
            if len(df) == 0 or not (n == len(df)).all():
                wrote = n.iloc[0] if len(n) else "?"
                raise CellSchemaError(f"{len(df)} rows where the cell wrote {wrote}")
            df = validate_rows(df, self.schema[cell.kind], "cell")
        except (CellSchemaError, pd.errors.ParserError, pd.errors.EmptyDataError,
                UnicodeDecodeError, ValueError) as e:
            if warn:
                warnings.warn(f"ignoring invalid cell file {path} ({e}); it will be recomputed",
                              stacklevel=2)
            return None
        return df
