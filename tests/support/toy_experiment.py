"""Test-only experiments for the runner, the store and the executors (cheap, pure cells).

``toy``: cell ``c<i>`` returns ``n_rows`` rows ``value_j ~ N(i, 1)`` drawn from the cell's key,
so a table pins down which key each cell received. PASS when every ``|value - i| < 6`` and the
last cell's mean is within 3 of its index (both hold with overwhelming probability; a NaN makes
them INCOMPLETE). The report reads the last cell's mean, so it raises on a table that lacks that
cell.

``toy-slow``: the same cells, each sleeping ``sleep`` seconds first (so a Dask worker can be
killed while it runs one).

Workers find these through ``compute_cell("support.toy_experiment", ...)``: the module must be
importable in the worker processes (``tests/`` is on ``sys.path`` in pytest, by the ``pythonpath``
entry of pyproject.toml, and in the spawned workers, which inherit it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import numpy as np
import pandas as pd

from grpo_theory.experiments.runner import Cell, Experiment
from grpo_theory.experiments.checks import Section, check
from grpo_theory._precision import float64

__all__ = ["Settings", "SETTINGS", "SLOW_SETTINGS", "SCHEMA", "cells", "cell", "slow_cell",
           "report", "plot", "EXPERIMENT", "SLOW_EXPERIMENT"]

NAME = "toy"
SLOW_NAME = "toy-slow"
CLAIM = "toy cells: value ~ N(i, 1) per cell (runner tests)"


@dataclass(frozen=True)
class Settings:
    n_cells: int
    n_rows: int = 4
    sleep: float = 0.0


SETTINGS = {"quick": Settings(n_cells=5), "full": Settings(n_cells=8, n_rows=6)}
SLOW_SETTINGS = {"quick": Settings(n_cells=4, sleep=1.5), "full": Settings(n_cells=6, sleep=1.5)}

SCHEMA = {"table": dict(i="int", j="int", value="float", label="str", even="bool",
                        note="float?")}


def cells(s: Settings) -> list[Cell]:
    """One cell per index ``i``; the config holds everything the cell needs."""
    return [Cell(f"c{i}", dict(i=i, n_rows=s.n_rows, sleep=s.sleep)) for i in range(s.n_cells)]


@float64
def cell(config: dict, key) -> pd.DataFrame:
    """``n_rows`` rows ``value = i + N(0, 1)`` from ``key`` (``note`` is NaN on odd rows)."""
    i, n = int(config["i"]), int(config["n_rows"])
    z = np.asarray(jax.random.normal(key, (n,)))
    return pd.DataFrame(dict(i=i, j=np.arange(n), value=i + z, label=f"cell{i}",
                             even=(np.arange(n) % 2 == 0),
                             note=np.where(np.arange(n) % 2 == 0, z, np.nan)))


def slow_cell(config: dict, key) -> pd.DataFrame:
    """:func:`cell` after sleeping ``config["sleep"]`` seconds."""
    time.sleep(float(config["sleep"]))
    return cell(config, key)


def report(tables, s: Settings) -> Section:
    """Per-cell means; raises ``KeyError`` when the last cell is missing."""
    df = tables["table"]
    means = df.groupby("i")["value"].mean()
    last = float(means.loc[s.n_cells - 1])  # KeyError on a table without the last cell
    spread = float(np.max(np.abs(df["value"] - df["i"]))) if len(df) else float("nan")
    md = "\n".join(["| i | mean |", "|---|---|"] + [f"| {i} | {m:.3f} |" for i, m in
                                                    means.items()])
    return Section(CLAIM, md, [
        check("every value within 6 of its cell index", spread < 6.0, spread,
              kind="sanity", detail=f"max |value - i| = {spread:.3f}"),
        check("last cell's mean near n_cells - 1", abs(last - (s.n_cells - 1)) < 3.0, last,
              kind="sanity", detail=f"{last:.3f}"),
    ])


def plot(tables, s: Settings, out_dir) -> None:
    """No figure (the runner's figure hook is exercised by the drivers' tests)."""
    return None


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=1)
SLOW_EXPERIMENT = Experiment(name=SLOW_NAME, claim="toy cells that sleep first (runner tests)",
                             settings=SLOW_SETTINGS, cells=cells, cell=slow_cell, schema=SCHEMA,
                             report=report, plot=plot, order=2)
