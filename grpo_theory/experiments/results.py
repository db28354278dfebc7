"""Results as data: tidy tables written atomically cell by cell, resumable sweeps, progress.

A sweep is a list of cells (one configuration each). :class:`CellStore` writes each finished
cell to ``<exp_dir>/cells-<setting>/<cell_id>.csv`` through a temporary file and ``os.replace``,
so an interrupted run never leaves a half-written cell and a rerun skips the cells already done.
Every row carries the experiment name, the seed, the package version and the cell's config.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

__all__ = ["CellStore", "atomic_write_text", "atomic_write_csv", "Progress", "package_version"]


def package_version() -> str:
    from .. import __version__

    return __version__


def atomic_write_text(path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_csv(path, df: pd.DataFrame) -> None:
    atomic_write_text(path, df.to_csv(index=False))


def _safe_id(cell_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", cell_id)


class CellStore:
    """Atomic, resumable storage of one experiment's cells."""

    def __init__(self, exp_dir, experiment: str, seed: int | None = None, setting: str = ""):
        """Cells of ``experiment`` go to ``exp_dir/cells-<setting>/`` (``cells/`` if no setting)."""
        self.experiment = experiment
        self.dir = Path(exp_dir)
        self.cells = self.dir / (f"cells-{setting}" if setting else "cells")
        self.cells.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self.setting = setting

    def path(self, cell_id: str) -> Path:
        return self.cells / f"{_safe_id(cell_id)}.csv"

    def done(self, cell_id: str) -> bool:
        return self.path(cell_id).exists()

    def write(self, cell_id: str, rows, config: dict | None = None) -> pd.DataFrame:
        df = pd.DataFrame(rows if not isinstance(rows, dict) else [rows])
        meta = {"experiment": self.experiment, "setting": self.setting, "seed": self.seed,
                "version": package_version(), "cell": cell_id}
        if config:
            meta["config"] = json.dumps(config, sort_keys=True, default=str)
        for k, v in meta.items():
            if k not in df.columns:
                df[k] = v
        atomic_write_csv(self.path(cell_id), df)
        return df

    def read(self, cell_id: str) -> pd.DataFrame:
        return pd.read_csv(self.path(cell_id))

    def table(self) -> pd.DataFrame:
        files = sorted(self.cells.glob("*.csv"))
        if not files:
            return pd.DataFrame()
        return pd.concat([pd.read_csv(f) for f in files], ignore_index=True)

    def save_table(self, name: str = "table.csv") -> pd.DataFrame:
        df = self.table()
        atomic_write_csv(self.dir / name, df)
        return df


class Progress:
    """Minimal progress line on stderr: ``[name] i/n cell (eta)``."""

    def __init__(self, name: str, total: int, stream=None):
        self.name, self.total, self.i = name, total, 0
        self.t0 = time.time()
        self.stream = stream if stream is not None else sys.stderr

    def step(self, label: str = "", skipped: bool = False) -> None:
        self.i += 1
        el = time.time() - self.t0
        eta = el / self.i * (self.total - self.i)
        state = "skip (done)" if skipped else f"{el:6.1f}s eta {eta:5.0f}s"
        print(f"[{self.name}] {self.i}/{self.total} {label} {state}", file=self.stream, flush=True)
